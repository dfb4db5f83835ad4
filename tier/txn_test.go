package tier

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/localstack"
	"strata/segment"
	"strata/tier/format"
	"strata/tier/objstore"
)

// producerBatch encodes a v2 record batch of one record per value from
// producer pid (epoch, first sequence seq), with attributes attrs
// (0x10: transactional), every record stamped ts.
func producerBatch(pid int64, epoch int16, seq int32, attrs int16, ts int64, values ...[]byte) []byte {
	rb := kmsg.RecordBatch{Magic: 2, Attributes: attrs, LastOffsetDelta: int32(len(values) - 1), NumRecords: int32(len(values)),
		FirstTimestamp: ts, MaxTimestamp: ts, ProducerID: pid, ProducerEpoch: epoch, FirstSequence: seq}
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: v}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		rb.Records = r.AppendTo(rb.Records)
	}
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

const attrTransactional = 0x10

// txnHistory is a local log of interleaved transactions, written by
// writeTxnHistory.
type txnHistory struct {
	log *segment.Log
	dir string
	// open is, at each log end offset the history passed through, the
	// transactions open there: producer -> first offset.
	open map[int64]map[int64]int64
	// aborts counts the transactions aborted.
	aborts int
}

// writeTxnHistory writes steps appends to a local log of segments of
// segBytes: four producers run transactions of one to four batches,
// interleaved so that many span segments, ending each with a COMMIT or
// (one in three) an ABORT marker, with a plain batch now and then. It
// ends with every transaction complete and the active segment rolled, so
// the whole history is in closed segments.
func writeTxnHistory(t *testing.T, steps int, segBytes int64, seed uint64) *txnHistory {
	t.Helper()
	dir := t.TempDir()
	l, err := segment.Open(dir, segment.Config{SegmentBytes: segBytes, MaxBatchBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	h := &txnHistory{log: l, dir: dir, open: map[int64]map[int64]int64{}}
	rng := rand.New(rand.NewPCG(seed, 1))
	seqs := map[int64]int32{}
	open := map[int64]int64{}
	value := make([]byte, 150)
	record := func() { h.open[l.EndOffset()] = maps.Clone(open) }
	end := func(pid int64, commit bool) {
		if _, err := l.AppendMarker(pid, 0, commit, 0, 0); err != nil {
			t.Fatal(err)
		}
		if !commit {
			h.aborts++
		}
		delete(open, pid)
		record()
	}
	for i := range steps {
		pid := int64(1 + rng.IntN(4))
		if _, ok := open[pid]; ok && rng.IntN(3) == 0 {
			end(pid, rng.IntN(3) != 0)
			continue
		}
		binary.BigEndian.PutUint64(value, uint64(i))
		attrs := int16(attrTransactional)
		if _, ok := open[pid]; !ok && rng.IntN(8) == 0 {
			attrs = 0 // a plain idempotent batch between transactions
		}
		n := 1 + rng.IntN(3)
		values := make([][]byte, n)
		for j := range values {
			values[j] = value
		}
		info, err := l.Append(producerBatch(pid, 0, seqs[pid], attrs, ts0+int64(i), values...), 0)
		if err != nil {
			t.Fatal(err)
		}
		seqs[pid] += int32(n)
		if _, ok := open[pid]; !ok && attrs != 0 {
			open[pid] = info.BaseOffset
		}
		record()
	}
	for _, pid := range slices.Sorted(maps.Keys(open)) {
		end(pid, pid%2 == 0)
	}
	if ok, err := l.RollIfOlder(0); err != nil || !ok {
		t.Fatalf("roll: %v %v", ok, err)
	}
	return h
}

// byFirstOffset sorts aborted transactions as the tier returns them.
func byFirstOffset(txns []segment.AbortedTxn) []segment.AbortedTxn {
	out := slices.Clone(txns)
	slices.SortStableFunc(out, func(a, b segment.AbortedTxn) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	return out
}

// TestAbortedTransactionsFromBucket is issue 14's "across the tiers": a
// partition with committed and aborted transactions goes to the bucket,
// the local copy is deleted, and the aborted transactions a read_committed
// fetch of any range needs (Kafka's collectAbortedTransactions: lastOffset
// >= from, firstOffset < upTo) come from the bucket exactly as they came
// from the local log. Each object's producer snapshot is the local one,
// open transactions included, and an object with no abort costs no GET of
// its (empty) transaction index.
func TestAbortedTransactionsFromBucket(t *testing.T) {
	stores := map[string]func(t *testing.T) objstore.Store{
		"dir": newDirStore,
		"s3": func(t *testing.T) objstore.Store {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := objstore.NewS3(ctx, localstack.TestS3(t).Config())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	for _, name := range []string{"dir", "s3"} {
		t.Run(name, func(t *testing.T) { checkAbortedFromBucket(t, stores[name](t)) })
	}
}

func checkAbortedFromBucket(t *testing.T, inner objstore.Store) {
	ctx := context.Background()
	h := writeTxnHistory(t, 400, 4<<10, 7)
	segs, err := h.log.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	end := segs[len(segs)-1].EndOffset
	withIndex := 0
	for _, s := range segs {
		if s.TxnIndexPath != "" {
			withIndex++
		}
	}
	if h.aborts < 10 || withIndex < 3 || withIndex == len(segs) {
		t.Fatalf("history of %d aborts in %d segments, %d with an index: not the mix the test needs", h.aborts, len(segs), withIndex)
	}
	tr := openTier(t, inner, time.Now)
	for _, s := range segs {
		if _, err := tr.Upload(ctx, testTP, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	// What the local log says, before it goes.
	type query struct{ from, upTo int64 }
	var queries []query
	for from := int64(0); from < end; from += 5 {
		for _, d := range []int64{1, 7, 60, 400, end} {
			queries = append(queries, query{from, min(from+d, end)})
		}
	}
	want := make(map[query][]segment.AbortedTxn, len(queries))
	for _, q := range queries {
		want[q] = byFirstOffset(h.log.AbortedTransactions(q.from, q.upTo))
	}
	if len(want[query{0, end}]) != h.aborts {
		t.Fatalf("the local log lists %d aborted transactions, the history made %d", len(want[query{0, end}]), h.aborts)
	}
	h.log.Close()
	if err := os.RemoveAll(h.dir); err != nil {
		t.Fatal(err)
	}

	store := &recordingStore{Store: inner}
	fresh := openTier(t, store, time.Now)
	m, err := fresh.Manifest(ctx, testTP)
	if err != nil {
		t.Fatal(err)
	}
	remote := allSegments(t, store, m)
	for _, q := range queries {
		got, err := fresh.AbortedTransactions(ctx, testTP, q.from, q.upTo)
		if err != nil {
			t.Fatalf("[%d, %d): %v", q.from, q.upTo, err)
		}
		if !slices.Equal(got, want[q]) {
			t.Fatalf("aborted transactions in [%d, %d) from the bucket:\n%+v\nfrom the local log:\n%+v", q.from, q.upTo, got, want[q])
		}
	}
	for _, s := range remote {
		if s.TxnIndex.Len > 0 {
			continue
		}
		for _, g := range store.getsOf(s.Key) {
			if g.off == s.TxnIndex.Offset {
				t.Fatalf("GET of the empty transaction index of %s", s.Key)
			}
		}
	}

	// The walk stops once no transaction begun below upTo can be open: at
	// the latest, after the first object ending at or past upTo whose end
	// has none open. Nothing past it is fetched.
	for _, upTo := range []int64{1, end / 3, end / 2} {
		var stop format.RemoteSegment
		for _, s := range remote {
			if s.LastOffset+1 < upTo {
				continue
			}
			settled := true
			for _, first := range h.open[s.LastOffset+1] {
				settled = settled && first >= upTo
			}
			if settled {
				stop = s
				break
			}
		}
		store.reset()
		if _, err := openTier(t, store, time.Now).AbortedTransactions(ctx, testTP, 0, upTo); err != nil {
			t.Fatal(err)
		}
		for _, s := range remote {
			if s.BaseOffset > stop.BaseOffset && len(store.getsOf(s.Key)) > 0 {
				t.Fatalf("[0, %d): object %d..%d fetched, past %d..%d where every transaction begun below %d had ended",
					upTo, s.BaseOffset, s.LastOffset, stop.BaseOffset, stop.LastOffset, upTo)
			}
		}
	}

	// The producer snapshot part carries the transactions open at the
	// object's end (snapshot version 2).
	for _, s := range remote {
		snap := getObject(t, inner, s.Key)[s.ProducerSnapshot.Offset:s.ProducerSnapshot.End()]
		got, err := segment.SnapshotOpenTransactions(snap)
		if err != nil {
			t.Fatal(err)
		}
		if w := h.open[s.LastOffset+1]; !maps.Equal(got, w) {
			t.Fatalf("object %d..%d: open transactions %v in its snapshot, %v in the log", s.BaseOffset, s.LastOffset, got, w)
		}
	}
}

// A flipped bit in an object's transaction index part is an error, never
// an empty answer: a read_committed consumer would see aborted records.
func TestAbortedTransactionsCorruptPart(t *testing.T) {
	ctx := context.Background()
	h := writeTxnHistory(t, 200, 4<<10, 9)
	segs, err := h.log.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store, err := objstore.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr := openTier(t, store, time.Now)
	for _, s := range segs {
		if _, err := tr.Upload(ctx, testTP, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := tr.Manifest(ctx, testTP)
	var victim format.RemoteSegment
	for _, s := range allSegments(t, store, m) {
		if s.TxnIndex.Len > 0 {
			victim = s
			break
		}
	}
	if victim.Key == "" {
		t.Fatal("no object with aborted transactions")
	}
	obj := getObject(t, store, victim.Key)
	obj[victim.TxnIndex.Offset+3] ^= 0x40
	if err := store.Put(ctx, victim.Key, bytes.NewReader(obj), int64(len(obj))); err != nil {
		t.Fatal(err)
	}
	fresh := openTier(t, store, time.Now)
	got, err := fresh.AbortedTransactions(ctx, testTP, victim.BaseOffset, victim.LastOffset+1)
	if !errors.Is(err, segment.ErrCorruptSegment) {
		t.Fatalf("corrupt transaction index: %+v, %v", got, err)
	}
	if got, err := fresh.TxnIndex(ctx, victim); !errors.Is(err, segment.ErrCorruptSegment) {
		t.Fatalf("corrupt transaction index read for compaction: %+v, %v", got, err)
	}
}

// Objects written before the transaction index part existed (the version
// 1 fixture) read as holding no aborted transaction.
func TestAbortedTransactionsV1Objects(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("format/testdata/v1bucket")); err != nil {
		t.Fatal(err)
	}
	store, err := objstore.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tp := format.TopicPartition{Topic: "fixture", TopicID: [16]byte{15: 1}, Partition: 0}
	tr := openTier(t, store, time.Now)
	for _, r := range [][2]int64{{32, 80}, {0, 100}, {40, 41}, {79, 80}} {
		got, err := tr.AbortedTransactions(ctx, tp, r[0], r[1])
		if err != nil || len(got) != 0 {
			t.Fatalf("[%d, %d): %+v, %v", r[0], r[1], got, err)
		}
	}
}

// Merging small segments keeps their aborted transactions: the merged
// object's part is theirs, concatenated.
func TestMergeKeepsAbortedTransactions(t *testing.T) {
	ctx := context.Background()
	h := writeTxnHistory(t, 300, 2<<10, 11)
	segs, err := h.log.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	end := segs[len(segs)-1].EndOffset
	want := byFirstOffset(h.log.AbortedTransactions(0, end))
	store := newDirStore(t)
	tr := openTier(t, store, time.Now)
	for _, s := range segs {
		if _, err := tr.Upload(ctx, testTP, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	n, err := tr.MergeSmall(ctx, testTP, Merge{SegmentBytes: 64 << 10, Max: 100})
	if err != nil || n == 0 {
		t.Fatalf("merged %d: %v", n, err)
	}
	fresh := openTier(t, store, time.Now)
	m, _ := fresh.Manifest(ctx, testTP)
	merged := allSegments(t, store, m)
	if len(merged) >= len(segs) {
		t.Fatalf("%d objects after merging %d segments", len(merged), len(segs))
	}
	got, err := fresh.AbortedTransactions(ctx, testTP, 0, end)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("after merging: %+v, %v\nwant %+v", got, err, want)
	}
	for _, s := range merged {
		if err := s.VerifyObject(bytes.NewReader(getObject(t, store, s.Key))); err != nil {
			t.Fatal(err)
		}
	}
}

// A compacted object (SegmentWriter) carries the aborted transactions it
// was given, which then come back from AbortedTransactions.
func TestSegmentWriterSetAborted(t *testing.T) {
	ctx := context.Background()
	h := writeTxnHistory(t, 200, 64<<10, 13)
	segs, err := h.log.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	end := segs[len(segs)-1].EndOffset
	aborted := h.log.AbortedTransactions(0, end)
	store := newDirStore(t)
	tr := openTier(t, store, time.Now)
	for _, s := range segs {
		if _, err := tr.Upload(ctx, testTP, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := tr.Manifest(ctx, testTP)
	olds := allSegments(t, store, m)
	// What a compaction pass reads from the objects it replaces.
	var fromParts []segment.AbortedTxn
	for _, s := range olds {
		txns, err := tr.TxnIndex(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		fromParts = append(fromParts, txns...)
	}
	if !slices.Equal(fromParts, aborted) {
		t.Fatalf("the objects' txn index parts hold %+v, the local log %+v", fromParts, aborted)
	}
	w := tr.NewSegmentWriter(testTP, olds[0].BaseOffset, 0)
	for _, s := range olds {
		if err := tr.ReadLog(ctx, s, 0, w.Append); err != nil {
			t.Fatal(err)
		}
	}
	w.SetAborted(fromParts)
	last := olds[len(olds)-1]
	snap, err := tr.ProducerSnapshot(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	seg, release, err := w.Finish(ctx, last.LastOffset, snap)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := tr.ReplaceCompacted(ctx, testTP, []format.RemoteSegment{seg}, 0, end, time.Now()); err != nil {
		t.Fatal(err)
	}
	fresh := openTier(t, store, time.Now)
	got, err := fresh.AbortedTransactions(ctx, testTP, 0, end)
	if err != nil || !slices.Equal(got, byFirstOffset(aborted)) {
		t.Fatalf("from the compacted object: %+v, %v\nwant %+v", got, err, aborted)
	}
	if err := seg.VerifyObject(bytes.NewReader(getObject(t, store, seg.Key))); err != nil {
		t.Fatal(err)
	}

	// Entries whose marker the object does not cover are refused.
	w = tr.NewSegmentWriter(testTP, 1000, 0)
	w.SetAborted([]segment.AbortedTxn{{ProducerID: 1, FirstOffset: 990, LastOffset: 2000, LastStableOffset: 2001}})
	if _, release, err := w.Finish(ctx, 1500, nil); err == nil {
		release()
		t.Fatal("an aborted transaction whose marker is past the object was accepted")
	}
}
