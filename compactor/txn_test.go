package compactor

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/segment"
	"strata/tier"
	"strata/tier/objstore"
)

// txnBatch is keyedBatch from a transactional producer (pid, epoch) whose
// batch starts at sequence seq.
func txnBatch(ts int64, pid int64, epoch int16, seq int32, recs ...rec) []byte {
	b := keyedBatch(ts, recs...)
	binary.BigEndian.PutUint16(b[21:], binary.BigEndian.Uint16(b[21:])|0x10)
	binary.BigEndian.PutUint64(b[43:], uint64(pid))
	binary.BigEndian.PutUint16(b[51:], uint16(epoch))
	binary.BigEndian.PutUint32(b[53:], uint32(seq))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func kv(k, v string) rec { return rec{[]byte(k), []byte(v)} }

// rawBatches returns every batch read returns from start to end, whole.
func rawBatches(t testing.TB, start, end int64, read func(offset int64) ([]byte, error)) [][]byte {
	t.Helper()
	var out [][]byte
	for off := start; off < end; {
		b, err := read(off)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		if len(b) == 0 {
			break
		}
		for len(b) > 0 {
			h, err := segment.ParseBatchHeader(b)
			if err != nil {
				t.Fatal(err)
			}
			if h.LastOffset() >= off {
				out = append(out, b[:h.Size()])
			}
			off = h.LastOffset() + 1
			b = b[h.Size():]
		}
	}
	return out
}

// consume is what a consumer reading batches gets: read_committed drops
// the batches of aborted transactions as Kafka's consumer does (from an
// entry's first offset, the producer's transactional batches are skipped
// until its ABORT marker), and neither returns control records.
func consume(t testing.TB, batches [][]byte, aborted []segment.AbortedTxn, readCommitted bool) []readRecord {
	t.Helper()
	aborted = slices.Clone(aborted)
	slices.SortFunc(aborted, func(a, b segment.AbortedTxn) int { return int(a.FirstOffset - b.FirstOffset) })
	skipping := map[int64]bool{}
	var out []readRecord
	for _, b := range batches {
		h, err := segment.ParseBatchHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		for readCommitted && len(aborted) > 0 && aborted[0].FirstOffset <= h.LastOffset() {
			skipping[aborted[0].ProducerID] = true
			aborted = aborted[1:]
		}
		if h.IsControl() {
			m, ok, err := segment.TxnMarkerOf(b)
			if err != nil {
				t.Fatalf("control batch at %d: %v", h.BaseOffset, err)
			}
			if ok && !m.Commit {
				delete(skipping, h.ProducerID)
			}
			continue
		}
		if readCommitted && h.IsTransactional() && skipping[h.ProducerID] {
			continue
		}
		out = append(out, decodeBatch(t, b)...)
	}
	return out
}

// latest is each key's last value in recs ("<nil>" for a tombstone).
func latest(recs []readRecord) map[string]string {
	m := map[string]string{}
	for _, r := range recs {
		if r.value == nil {
			m[r.key] = "<nil>"
		} else {
			m[r.key] = string(r.value)
		}
	}
	return m
}

// markers lists the control batches of batches: offset, producer, and
// whether each still holds its marker and has a delete horizon.
type markerInfo struct {
	offset     int64
	pid        int64
	commit     bool
	hasRecord  bool
	hasHorizon bool
}

func markersOf(t testing.TB, batches [][]byte) map[int64]markerInfo {
	t.Helper()
	out := map[int64]markerInfo{}
	for _, b := range batches {
		h, _ := segment.ParseBatchHeader(b)
		if !h.IsControl() {
			continue
		}
		m, ok, err := segment.TxnMarkerOf(b)
		if err != nil {
			t.Fatal(err)
		}
		_, hz := h.DeleteHorizon()
		out[h.BaseOffset] = markerInfo{offset: h.BaseOffset, pid: h.ProducerID, commit: m.Commit, hasRecord: ok, hasHorizon: hz}
	}
	return out
}

// txnLog is a log holding committed, aborted and open transactions over
// overlapping keys, as a test of the cleaner wants it.
type txnLog struct {
	l *segment.Log
	// commitA1, abortB are the markers of producer A's first (committed)
	// transaction, whose records later writes supersede, and of B's
	// aborted one.
	commitA1, abortB int64
	// openC is where producer C's transaction, still open, begins.
	openC int64
	// wantCommitted is each key's value for a read_committed consumer.
	wantCommitted map[string]string
}

const (
	pidA, pidB, pidC = 100, 200, 300
)

func writeTxnLog(t testing.TB, l *segment.Log, ts int64) *txnLog {
	t.Helper()
	tl := &txnLog{l: l}
	app := func(b []byte) int64 {
		t.Helper()
		info, err := l.Append(b, 0)
		if err != nil {
			t.Fatal(err)
		}
		return info.BaseOffset
	}
	marker := func(pid int64, commit bool) int64 {
		t.Helper()
		info, err := l.AppendMarker(pid, 0, commit, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return info.BaseOffset
	}
	app(keyedBatch(ts, kv("k1", "v1"), kv("k2", "v2"), kv("k3", "v3"), kv("k6", "v6")))
	// A commits k1 and k4 (superseded below, so the batch goes).
	app(txnBatch(ts, pidA, 0, 0, kv("k1", "a1"), kv("k4", "a4")))
	tl.commitA1 = marker(pidA, true)
	// B aborts newer values of k2, k1, k6 and a new key k5: none may win.
	app(txnBatch(ts, pidB, 0, 0, kv("k2", "b2"), kv("k1", "b1"), kv("k5", "b5")))
	app(keyedBatch(ts, kv("k9", "v9")))
	app(txnBatch(ts, pidB, 0, 3, kv("k6", "b6")))
	tl.abortB = marker(pidB, false)
	// Later transactions of A and B, committed: their last batches.
	app(txnBatch(ts, pidB, 0, 4, kv("k7", "b7")))
	marker(pidB, true)
	app(txnBatch(ts, pidA, 0, 2, kv("k8", "a8")))
	marker(pidA, true)
	app(keyedBatch(ts, kv("k1", "n1"), kv("k4", "n4")))
	for range 8 {
		app(keyedBatch(ts, rec{[]byte("roll"), make([]byte, 300)}))
	}
	// C's transaction stays open over k3; a later plain write of k3
	// must not remove it.
	tl.openC = app(txnBatch(ts, pidC, 0, 0, kv("k3", "c3")))
	app(keyedBatch(ts, kv("k3", "n3"), kv("k2", "n2")))
	end := l.EndOffset()
	for l.ActiveBase() < end {
		app(keyedBatch(ts, rec{[]byte("roll"), make([]byte, 300)}))
	}
	tl.wantCommitted = map[string]string{"k1": "n1", "k2": "v2", "k3": "v3", "k4": "n4", "k6": "v6", "k7": "b7", "k8": "a8", "k9": "v9"}
	return tl
}

func localView(t testing.TB, l *segment.Log, readCommitted bool) ([]readRecord, [][]byte) {
	t.Helper()
	end := l.EndOffset()
	if readCommitted {
		if fuo, ok := l.FirstUnstableOffset(); ok {
			end = min(end, fuo)
		}
	}
	batches := rawBatches(t, l.StartOffset(), end, func(off int64) ([]byte, error) { return l.Read(nil, off, end, 1<<20) })
	return consume(t, batches, l.AbortedTransactions(l.StartOffset(), end), readCommitted), batches
}

// checkTxnView checks what consumers of the compacted log see: the
// committed value of every key (no aborted value ever, not even over an
// older committed one), no record of an aborted transaction left, and
// from the open transaction on exactly what was there before.
func checkTxnView(t testing.TB, tl *txnLog, committed, uncommitted, uncommittedBefore []readRecord) {
	t.Helper()
	got := latest(committed)
	delete(got, "roll")
	if fmt.Sprint(got) != fmt.Sprint(tl.wantCommitted) {
		t.Fatalf("read_committed sees %v, want %v", got, tl.wantCommitted)
	}
	for _, r := range uncommitted {
		if r.offset < tl.openC && len(r.value) == 2 && r.value[0] == 'b' && r.key != "k7" {
			t.Fatalf("aborted record %s=%s at %d left by compaction", r.key, r.value, r.offset)
		}
	}
	tail := func(recs []readRecord) string {
		var s []string
		for _, r := range recs {
			if r.offset >= tl.openC {
				s = append(s, fmt.Sprintf("%d:%s=%s", r.offset, r.key, r.value))
			}
		}
		return fmt.Sprint(s)
	}
	if a, b := tail(uncommitted), tail(uncommittedBefore); a != b {
		t.Fatalf("records from the open transaction on changed:\n%s\nwere\n%s", a, b)
	}
}

// TestLocalCompactionTransactions: Kafka's cleaner rules for transactions
// (KIP-98). Nothing at or above the first unstable offset is cleaned;
// aborted batches go whole and never count as a key's latest value;
// markers stay while their transaction's batches remain, then get a
// delete horizon and go once it has passed, with their index entry.
func TestLocalCompactionTransactions(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	l := openLog(t, t.TempDir(), 2<<10, clk.now)
	defer l.Close()
	tl := writeTxnLog(t, l, clk.now().UnixMilli())
	if fuo, ok := l.FirstUnstableOffset(); !ok || fuo != tl.openC {
		t.Fatalf("first unstable offset %d (%v), want %d", fuo, ok, tl.openC)
	}
	committedBefore, _ := localView(t, l, true)
	if got := latest(committedBefore); got["k2"] != "v2" || got["k1"] != "n1" {
		t.Fatalf("before compaction read_committed sees %v", got)
	}
	uncommittedBefore, _ := localView(t, l, false)

	policy := Policy{DeleteRetention: time.Hour, MinDirtyRatio: 0.01, SegmentBytes: 2 << 10}
	host := &fakeHost{local: []LocalPartition{localPartition(l, policy)}}
	reg := prometheus.NewRegistry()
	c, err := New(Config{Now: clk.now, SpoolDir: t.TempDir()}, host, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := gathered(t, reg, "strata_compactor_aborted_records_removed_total"); n == 0 {
		t.Errorf("strata_compactor_aborted_records_removed_total{tier=local} = %v after a pass removed B's aborted records", n)
	}
	if cleaned, _ := l.CleanerCheckpoint(); cleaned > tl.openC || cleaned <= tl.abortB {
		t.Fatalf("cleaned to %d; the open transaction begins at %d, B's abort marker is at %d", cleaned, tl.openC, tl.abortB)
	}
	committed, _ := localView(t, l, true)
	uncommitted, batches := localView(t, l, false)
	checkTxnView(t, tl, committed, uncommitted, uncommittedBefore)
	// Pass 1 saw both transactions' batches: their markers stay as they
	// were, B's index entry too.
	ms := markersOf(t, batches)
	for _, off := range []int64{tl.commitA1, tl.abortB} {
		if m, ok := ms[off]; !ok || !m.hasRecord || m.hasHorizon {
			t.Fatalf("after pass 1, marker at %d: %+v (present %v)", off, m, ok)
		}
	}
	if ab := l.AbortedTransactions(0, tl.openC); len(ab) != 1 || ab[0].ProducerID != pidB {
		t.Fatalf("aborted transactions after pass 1: %+v", ab)
	}

	// C commits: its transaction becomes cleanable, and the next pass
	// finds A's first and B's aborted transactions without a batch left:
	// their markers get a horizon, and stay until it passes.
	if _, err := l.AppendMarker(pidC, 0, true, 0, 0); err != nil {
		t.Fatal(err)
	}
	tl.wantCommitted["k3"] = "n3"
	tl.wantCommitted["k2"] = "n2"
	end := l.EndOffset()
	for l.ActiveBase() < end {
		if _, err := l.Append(keyedBatch(clk.now().UnixMilli(), rec{[]byte("roll"), make([]byte, 300)}), 0); err != nil {
			t.Fatal(err)
		}
	}
	tl.openC = l.EndOffset() // nothing open any more
	uncommittedBefore, _ = localView(t, l, false)
	clk.add(time.Minute)
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	committed, _ = localView(t, l, true)
	uncommitted, batches = localView(t, l, false)
	checkTxnView(t, tl, committed, uncommitted, uncommittedBefore)
	ms = markersOf(t, batches)
	for _, off := range []int64{tl.commitA1, tl.abortB} {
		if m, ok := ms[off]; !ok || !m.hasRecord || !m.hasHorizon {
			t.Fatalf("after pass 2, marker at %d: %+v (present %v)", off, m, ok)
		}
	}

	// The horizon passes: the next round is due by it alone, and the
	// markers go, B's index entry with its marker.
	clk.add(time.Hour)
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	committed, _ = localView(t, l, true)
	uncommitted, batches = localView(t, l, false)
	checkTxnView(t, tl, committed, uncommitted, uncommittedBefore)
	ms = markersOf(t, batches)
	for _, off := range []int64{tl.commitA1, tl.abortB} {
		if m, ok := ms[off]; ok {
			t.Fatalf("after the horizon, marker at %d still there: %+v", off, m)
		}
	}
	if ab := l.AbortedTransactions(0, l.EndOffset()); len(ab) != 0 {
		t.Fatalf("aborted transactions left without their marker: %+v", ab)
	}
	if n := gathered(t, reg, "strata_compactor_markers_removed_total"); n != 2 {
		t.Errorf("strata_compactor_markers_removed_total{tier=local} = %v, want 2 (A's first commit, B's abort)", n)
	}
	// The later transactions' markers, whose batches stay, are there.
	if len(ms) != 3 {
		t.Fatalf("markers left: %+v, want B's, A's and C's commits", ms)
	}
}

// coldTxnSetup writes writeTxnLog's history to a local log and uploads
// its closed segments, as the leader's tiering does.
func coldTxnSetup(t *testing.T, clk *clock) (*tier.Tier, *txnLog) {
	t.Helper()
	store, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tier.Open(tier.Config{Store: store, CacheDir: t.TempDir(), Now: clk.now, ChunkBytes: 1 << 20, MemoryBytes: 8 << 20, CacheBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	l := openLog(t, t.TempDir(), 2<<10, clk.now)
	t.Cleanup(func() { l.Close() })
	tl := writeTxnLog(t, l, clk.now().UnixMilli())
	uploadNew(t, tr, l)
	return tr, tl
}

// uploadNew uploads the closed segments of l the bucket does not have.
func uploadNew(t *testing.T, tr *tier.Tier, l *segment.Log) {
	t.Helper()
	ctx := context.Background()
	root, err := tr.Manifest(ctx, testTP)
	if err != nil {
		t.Fatal(err)
	}
	segs, err := l.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if !root.Empty() && s.BaseOffset < root.EndOffset() {
			continue
		}
		if _, err := tr.Upload(ctx, testTP, s, 0); err != nil {
			t.Fatal(err)
		}
	}
}

func tierView(t testing.TB, tr *tier.Tier, upTo int64, readCommitted bool) ([]readRecord, [][]byte) {
	t.Helper()
	ctx := context.Background()
	root, err := tr.Manifest(ctx, testTP)
	if err != nil {
		t.Fatal(err)
	}
	end := min(root.EndOffset(), upTo)
	batches := rawBatches(t, root.LogStartOffset, end, func(off int64) ([]byte, error) {
		return tr.Read(ctx, testTP, nil, off, 1<<20)
	})
	var kept [][]byte
	for _, b := range batches {
		if h, _ := segment.ParseBatchHeader(b); h.BaseOffset < end {
			kept = append(kept, b)
		}
	}
	aborted, err := tr.AbortedTransactions(ctx, testTP, root.LogStartOffset, end)
	if err != nil {
		t.Fatal(err)
	}
	return consume(t, kept, aborted, readCommitted), kept
}

// TestColdCompactionStopsAtOpenTransaction: a transaction open across
// the bucket's objects (the newest object's producer snapshot shows it)
// bounds a cold pass as the first unstable offset bounds a local one:
// nothing from its first offset on is judged or removed.
func TestColdCompactionStopsAtOpenTransaction(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	tr, tl := coldTxnSetup(t, clk)
	ctx := context.Background()
	_, before := tierView(t, tr, 1<<62, false)
	snapsBefore := producerSnapshots(t, tr)
	c := coldCompactor(t, tr, clk, Policy{DeleteRetention: time.Hour, MinDirtyRatio: 0.01, SegmentBytes: 2 << 10})
	if err := c.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	root, _ := tr.Manifest(ctx, testTP)
	if root.CleanedOffset > tl.openC || root.CleanedOffset <= tl.abortB {
		t.Fatalf("bucket cleaned to %d; the open transaction begins at %d", root.CleanedOffset, tl.openC)
	}
	// Each object still carries the producer state as of its end.
	for end, snap := range producerSnapshots(t, tr) {
		if want, ok := snapsBefore[end]; ok && string(snap) != string(want) {
			t.Fatalf("the object ending at %d carries another producer snapshot than the one there was", end)
		}
	}
	_, after := tierView(t, tr, 1<<62, false)
	if a, b := tailBytes(t, after, tl.openC), tailBytes(t, before, tl.openC); !slices.Equal(a, b) {
		t.Fatalf("batches from the open transaction on changed: %d bytes, were %d", len(a), len(b))
	}
}

// TestColdCompactionStopsAtLeadersFirstUnstable: the leader's first
// unstable offset bounds the pass too.
func TestColdCompactionStopsAtLeadersFirstUnstable(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	tr, tl := coldTxnSetup(t, clk)
	ctx := context.Background()
	bound := tl.commitA1 + 1
	_, before := tierView(t, tr, 1<<62, false)
	host := &fakeHost{cold: []ColdPartition{{TP: testTP, Policy: Policy{DeleteRetention: time.Hour, MinDirtyRatio: 0.01, SegmentBytes: 2 << 10},
		FirstUnstableOffset: func() (int64, bool) { return bound, true }}}}
	c, err := New(Config{Now: clk.now, SpoolDir: t.TempDir(), ChunkBytes: 64 << 10}, host, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	root, _ := tr.Manifest(ctx, testTP)
	if root.CleanedOffset > bound {
		t.Fatalf("bucket cleaned to %d, above the leader's first unstable offset %d", root.CleanedOffset, bound)
	}
	_, after := tierView(t, tr, 1<<62, false)
	if a, b := tailBytes(t, after, bound), tailBytes(t, before, bound); !slices.Equal(a, b) {
		t.Fatalf("batches from the leader's first unstable offset on changed: %d bytes, were %d", len(a), len(b))
	}
}

// producerSnapshots returns the producer snapshot of each of the bucket's
// objects that has one, by the object's last offset.
func producerSnapshots(t testing.TB, tr *tier.Tier) map[int64][]byte {
	t.Helper()
	ctx := context.Background()
	root, err := tr.Manifest(ctx, testTP)
	if err != nil {
		t.Fatal(err)
	}
	segs, err := tr.Segments(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64][]byte{}
	for _, s := range segs {
		snap, err := tr.ProducerSnapshot(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if len(snap) > 0 {
			out[s.LastOffset] = snap
		}
	}
	return out
}

// tailBytes concatenates the batches that start at or after from.
func tailBytes(t testing.TB, batches [][]byte, from int64) []byte {
	t.Helper()
	var out []byte
	for _, b := range batches {
		if h, _ := segment.ParseBatchHeader(b); h.BaseOffset >= from {
			out = append(out, b...)
		}
	}
	return out
}

// TestColdCompactionTransactions: the bucket's copy is compacted by the
// same rules as the local log: aborted batches go and never win the key
// map, markers stay while their transaction's batches remain, and the
// outputs carry the aborted transactions a read_committed reader needs.
func TestColdCompactionTransactions(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	tr, tl := coldTxnSetup(t, clk)
	ctx := context.Background()
	if ab, err := tr.AbortedTransactions(ctx, testTP, 0, tl.openC); err != nil || len(ab) == 0 {
		t.Skipf("the tier reports no aborted transaction in a history with one (%v): its aborted-transaction index part is not there yet", err)
	}
	committedBefore, _ := tierView(t, tr, tl.openC, true)
	if got := latest(committedBefore); got["k2"] != "v2" || got["k1"] != "n1" {
		t.Fatalf("before compaction read_committed sees %v", got)
	}
	uncommittedBefore, _ := tierView(t, tr, 1<<62, false)
	c := coldCompactor(t, tr, clk, Policy{DeleteRetention: time.Hour, MinDirtyRatio: 0.01, SegmentBytes: 2 << 10})
	if err := c.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	committed, _ := tierView(t, tr, tl.openC, true)
	uncommitted, batches := tierView(t, tr, 1<<62, false)
	checkTxnView(t, tl, committed, uncommitted, uncommittedBefore)
	ms := markersOf(t, batches)
	for _, off := range []int64{tl.commitA1, tl.abortB} {
		if m, ok := ms[off]; !ok || !m.hasRecord || m.hasHorizon {
			t.Fatalf("after the pass, marker at %d: %+v (present %v)", off, m, ok)
		}
	}
	if ab, err := tr.AbortedTransactions(ctx, testTP, 0, tl.openC); err != nil || len(ab) != 1 || ab[0].ProducerID != pidB {
		t.Fatalf("aborted transactions after the pass: %+v, %v", ab, err)
	}

	// C commits and its segments go up: the next pass finds A's first and
	// B's aborted transactions without a batch left, and stamps their
	// markers; the one after the horizon removes them, B's entry too.
	l := tl.l
	if _, err := l.AppendMarker(pidC, 0, true, 0, 0); err != nil {
		t.Fatal(err)
	}
	end := l.EndOffset()
	for l.ActiveBase() < end {
		if _, err := l.Append(keyedBatch(clk.now().UnixMilli(), rec{[]byte("roll"), make([]byte, 300)}), 0); err != nil {
			t.Fatal(err)
		}
	}
	uploadNew(t, tr, l)
	tl.wantCommitted["k3"], tl.wantCommitted["k2"] = "n3", "n2"
	tl.openC = 1 << 62
	uncommittedBefore, _ = tierView(t, tr, 1<<62, false)
	clk.add(time.Minute)
	if err := c.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	committed, _ = tierView(t, tr, 1<<62, true)
	uncommitted, batches = tierView(t, tr, 1<<62, false)
	checkTxnView(t, tl, committed, uncommitted, uncommittedBefore)
	ms = markersOf(t, batches)
	for _, off := range []int64{tl.commitA1, tl.abortB} {
		if m, ok := ms[off]; !ok || !m.hasRecord || !m.hasHorizon {
			t.Fatalf("after pass 2, marker at %d: %+v (present %v)", off, m, ok)
		}
	}
	clk.add(time.Hour)
	if err := c.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	committed, _ = tierView(t, tr, 1<<62, true)
	uncommitted, batches = tierView(t, tr, 1<<62, false)
	checkTxnView(t, tl, committed, uncommitted, uncommittedBefore)
	ms = markersOf(t, batches)
	for _, off := range []int64{tl.commitA1, tl.abortB} {
		if m, ok := ms[off]; ok {
			t.Fatalf("after the horizon, marker at %d still there: %+v", off, m)
		}
	}
	if ab, err := tr.AbortedTransactions(ctx, testTP, 0, 1<<62); err != nil || len(ab) != 0 {
		t.Fatalf("aborted transactions left without their marker: %+v, %v", ab, err)
	}
}

// TestCleaningMarkerEdges: an empty control batch (an earlier pass
// emptied it) goes; a tiered log's local pass keeps a marker past its
// horizon, as it keeps tombstones, since its transaction's batches may be
// in the bucket only.
func TestCleaningMarkerEdges(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	l := openLog(t, t.TempDir(), 1<<20, clk.now)
	defer l.Close()
	if _, err := l.Append(txnBatch(clk.now().UnixMilli(), pidA, 0, 0, kv("k", "v")), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.AppendMarker(pidA, 0, false, 0, 0); err != nil {
		t.Fatal(err)
	}
	batches := rawBatches(t, 0, l.EndOffset(), func(off int64) ([]byte, error) { return l.Read(nil, off, l.EndOffset(), 1<<20) })
	marker := batches[1]
	empty, _, err := segment.FilterBatch(nil, marker, nil, segment.FilterOptions{Discard: true, RetainEmpty: true})
	if err != nil {
		t.Fatal(err)
	}
	stamped, _, err := segment.FilterBatch(nil, marker, nil, segment.FilterOptions{StampMarker: true, DeleteHorizonMs: clk.now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	clk.add(time.Hour)
	policy := Policy{DeleteRetention: time.Hour}
	for _, tc := range []struct {
		name   string
		batch  []byte
		expire bool
		kept   bool
	}{
		{"empty control batch", empty, true, false},
		{"marker past its horizon", stamped, true, false},
		{"marker past its horizon, tiered log's local pass", stamped, false, true},
	} {
		// The transaction's batch is gone: the pass meets only the marker.
		cl := newCleaning(newKeyMap(1<<20), 1, 1, clk.now(), policy, nil, l.AbortedTransactions(0, l.EndOffset()))
		cl.mapEnd = l.EndOffset()
		cl.expire = tc.expire
		out, err := cl.filter(tc.batch)
		if err != nil {
			t.Fatal(err)
		}
		if kept := len(out) > 0; kept != tc.kept {
			t.Errorf("%s: kept %v, want %v", tc.name, kept, tc.kept)
		}
	}
}

// gathered sums the counter name over its series in reg.
func gathered(t *testing.T, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
