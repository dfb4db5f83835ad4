package compactor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"strata/segment"
	"strata/tier"
	"strata/tier/objstore"
)

// TestTieredLocalPassKeepsTombstones: on a tiered compacted partition the
// local pass keeps tombstones past their horizon, since the key's older
// value may live on in the bucket below the local log start, where only
// the cold pass can remove it. A consumer reading from the start (bucket
// below the local start, local disk above, as broker.readAt does) sees the
// deletion as the key's final state.
func TestTieredLocalPassKeepsTombstones(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	store, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tier.Open(tier.Config{Store: store, CacheDir: t.TempDir(), Now: clk.now, ChunkBytes: 1 << 20, MemoryBytes: 8 << 20, CacheBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	l, err := segment.Open(filepath.Join(t.TempDir(), "p-0"), segment.Config{SegmentBytes: 16 << 10, Now: clk.now,
		RetentionBytes: -1, RetentionMs: -1, Tiered: true, LocalRetentionBytes: 40 << 10, LocalRetentionMs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	value := make([]byte, 512)
	appendRecs := func(recs ...rec) {
		if _, err := l.Append(keyedBatch(clk.now().UnixMilli(), recs...), 0); err != nil {
			t.Fatal(err)
		}
	}
	uploaded := int64(0)
	upload := func() {
		segs, err := l.ClosedSegments(0)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range segs {
			if s.EndOffset <= uploaded {
				continue
			}
			if _, err := tr.Upload(ctx, testTP, s, 0); err != nil {
				t.Fatal(err)
			}
			uploaded = s.EndOffset
		}
		l.SetTieredOffset(uploaded)
	}
	// 1. K = v1 and 400 distinct keys (a large clean history).
	appendRecs(rec{[]byte("K"), []byte("v1")})
	for i := range 2000 {
		appendRecs(rec{fmt.Appendf(nil, "u-%d", i), value})
	}
	for end := l.EndOffset(); l.ActiveBase() < end; {
		appendRecs(rec{[]byte("roll"), value})
	}
	upload()
	policy := Policy{DeleteRetention: time.Hour, MinDirtyRatio: 0.5, SegmentBytes: 16 << 10}
	// One node, the leader: the compactor runs on both tiers, as the
	// broker's compactionHost gives it.
	host := &fakeHost{
		local: []LocalPartition{{Topic: "t", Partition: 0, Log: l, HighWatermark: l.EndOffset, Tiered: true, Policy: policy}},
		cold:  []ColdPartition{{TP: testTP, Policy: policy}},
	}
	c, err := New(Config{Now: clk.now, SpoolDir: t.TempDir(), ChunkBytes: 64 << 10}, host, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RunOnce(ctx); err != nil { // both compacted once: all clean
		t.Fatal(err)
	}

	// 2. K is deleted; a little more traffic; uploaded; local retention
	// lets go of the old local segments (they are in the bucket).
	appendRecs(rec{[]byte("K"), nil})
	for i := range 60 {
		appendRecs(rec{fmt.Appendf(nil, "w-%d", i), value})
	}
	for end := l.EndOffset(); l.ActiveBase() < end; {
		appendRecs(rec{[]byte("roll"), value})
	}
	upload()
	if err := l.Maintain(); err != nil {
		t.Fatal(err)
	}
	t.Logf("local log [%d, %d), tiered to %d", l.StartOffset(), l.EndOffset(), l.TieredOffset())
	if l.StartOffset() == 0 {
		t.Fatal("local retention kept K=v1 locally; test setup wrong")
	}

	for range 3 {
		if err := c.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		clk.add(2 * time.Hour)
	}
	for _, s := range c.Statuses() {
		t.Logf("%s: cleaned to %d, ratio %.2f, last %v", s.Tier, s.CleanedTo, s.DirtyRatio, s.LastPass)
	}

	// A consumer from the start: the bucket below the local log start,
	// the local log from there (broker.readAt).
	root, _ := tr.Manifest(ctx, testTP)
	recs := readBatches(t, root.LogStartOffset, l.EndOffset(), func(off int64) ([]byte, error) {
		if off < l.StartOffset() {
			return tr.Read(ctx, testTP, nil, off, 1<<20)
		}
		return l.Read(nil, off, l.EndOffset(), 1<<20)
	})
	var last []byte
	seen := false
	for _, r := range recs {
		if r.key == "K" {
			last, seen = r.value, true
			t.Logf("K at %d: %q", r.offset, r.value)
		}
	}
	if seen && last != nil {
		t.Fatalf("deleted key K reads back with value %q", last)
	}
}

// TestColdOutputsSpanAtMostInt32Offsets: a history whose few surviving
// batches lie more than 2^31 offsets apart (a long-lived changelog over few
// keys) compacts on the cold tier: outputs are cut, and long gaps covered
// by empty objects, so that no object indexes offsets past 2^31 of its
// base.
func TestColdOutputsSpanAtMostInt32Offsets(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	store, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tier.Open(tier.Config{Store: store, CacheDir: t.TempDir(), Now: clk.now, ChunkBytes: 1 << 20, MemoryBytes: 8 << 20, CacheBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	l := openLog(t, t.TempDir(), 4<<10, clk.now)
	defer l.Close()
	at := func(base int64, recs ...rec) []byte {
		b := keyedBatch(clk.now().UnixMilli(), recs...)
		for i := 0; i < 8; i++ {
			b[i] = byte(base >> (56 - 8*i))
		}
		return b
	}
	value := make([]byte, 1500)
	off := int64(0)
	for i := range 12 {
		if _, err := l.AppendReplica(at(off, rec{fmt.Appendf(nil, "k%d", i%3), value})); err != nil {
			t.Fatal(err)
		}
		off += 1 << 30 // a gap of 2^30 offsets after each batch
	}
	segs, err := l.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if _, err := tr.Upload(ctx, testTP, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d segments uploaded, log end %d", len(segs), l.EndOffset())
	c := coldCompactor(t, tr, clk, Policy{MinDirtyRatio: 0.1, SegmentBytes: 1 << 20})
	if err := c.RunOnce(ctx); err != nil {
		t.Fatalf("cold pass: %v", err)
	}
}

// TestLocalOutputsSpanAtMostInt32Offsets: the same history compacted
// locally, then reopened as after a crash with its indexes rebuilt: every
// record is found, by offset and by timestamp.
func TestLocalOutputsSpanAtMostInt32Offsets(t *testing.T) {
	ctx := context.Background()
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	dir := t.TempDir()
	l := openLog(t, dir, 4<<10, clk.now)
	at := func(base int64, recs ...rec) []byte {
		b := keyedBatch(clk.now().UnixMilli(), recs...)
		for i := 0; i < 8; i++ {
			b[i] = byte(base >> (56 - 8*i))
		}
		return b
	}
	value := make([]byte, 1500)
	off := int64(0)
	for i := range 12 {
		if _, err := l.AppendReplica(at(off, rec{fmt.Appendf(nil, "k%d", i%3), value})); err != nil {
			t.Fatal(err)
		}
		off += 1 << 30
	}
	before := readLog(t, l)
	host := &fakeHost{local: []LocalPartition{localPartition(l, Policy{MinDirtyRatio: 0.1, SegmentBytes: 1 << 20})}}
	c := newTestCompactor(t, host, clk, Config{})
	if err := c.RunOnce(ctx); err != nil {
		t.Fatalf("local pass: %v", err)
	}
	after := readLog(t, l)
	t.Logf("records before %d, after %d", len(before), len(after))
	for _, r := range after {
		t.Logf("  %d %s", r.offset, r.key)
	}
	l.Close()
	ents, _ := os.ReadDir(filepath.Join(dir, "p-0"))
	for _, e := range ents {
		fi, _ := e.Info()
		t.Logf("file %s %d", e.Name(), fi.Size())
	}
	{
		// Reopened as after a crash, with the indexes rebuilt from the
		// files: a relative offset past 2^31 would wrap there.
		os.Remove(filepath.Join(dir, "p-0", "clean-shutdown"))
		os.Remove(filepath.Join(dir, "p-0", "00000000000000000000.timeindex"))
		os.Remove(filepath.Join(dir, "p-0", "00000000000000000000.index"))
	}
	l2 := openLog(t, dir, 4<<10, clk.now)
	defer l2.Close()
	reopened := readLog(t, l2)
	for _, r := range after {
		b, err := l2.Read(nil, r.offset, l2.EndOffset(), 1)
		if err != nil || len(b) == 0 {
			t.Errorf("read at %d: %d bytes, %v", r.offset, len(b), err)
			continue
		}
		if got := decodeBatch(t, b[:len(b)])[0].offset; got != r.offset {
			t.Errorf("read at %d returns record %d", r.offset, got)
		}
	}
	for _, lg := range []*segment.Log{l2} {
		o, ts, ok, err := lg.OffsetForTimestamp(clk.now().UnixMilli())
		t.Logf("OffsetForTimestamp: %d (ts %d, ok %v, err %v), want %d", o, ts, ok, err, after[0].offset)
		if err != nil || o != after[0].offset {
			t.Errorf("OffsetForTimestamp %d, want %d", o, after[0].offset)
		}
	}
	if len(reopened) != len(after) {
		t.Fatalf("after reopening: %d records, want %d", len(reopened), len(after))
	}
	for i := range after {
		if reopened[i].offset != after[i].offset {
			t.Fatalf("after reopening record %d at %d, was at %d", i, reopened[i].offset, after[i].offset)
		}
	}
}

// TestCollisionKeepsTombstoneUntilDecided: keep-on-doubt keeps every record
// of two colliding keys, an older value under a tombstone among them; the
// pass calls the log compacted only below the collision, so the next pass
// (new seeds) maps the tombstone again and removes the older value before
// the tombstone may expire: the deleted key never comes back.
func TestCollisionKeepsTombstoneUntilDecided(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	l := openLog(t, t.TempDir(), 4<<10, clk.now)
	defer l.Close()
	app := func(recs ...rec) {
		if _, err := l.Append(keyedBatch(clk.now().UnixMilli(), recs...), 0); err != nil {
			t.Fatal(err)
		}
	}
	app(rec{[]byte("A"), []byte("v1")})
	app(rec{[]byte("B"), []byte("b1")})
	app(rec{[]byte("A"), nil})
	for end := l.EndOffset(); l.ActiveBase() < end; {
		app(rec{[]byte("roll"), make([]byte, 512)})
	}
	policy := Policy{DeleteRetention: time.Hour, MinDirtyRatio: 0.5, SegmentBytes: 1 << 20}
	p := localPartition(l, policy)
	c := newTestCompactor(t, &fakeHost{}, clk, Config{})
	pass := func(m *keyMap) {
		pl, segs, err := localPlan(&p, clk.now())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.compactLocal(context.Background(), m, &p, pl, segs); err != nil {
			t.Fatal(err)
		}
	}
	colliding := newKeyMap(0)
	colliding.hash = func(key []byte) (uint64, uint64) {
		if string(key) == "A" || string(key) == "B" {
			return 42, uint64(key[0]) // same slot hash, different check hash
		}
		return uint64(len(key))*1000003 + uint64(key[0]), 7
	}
	pass(colliding)
	clk.add(2 * time.Hour)
	pass(newKeyMap(0))
	var last []byte
	for _, r := range readLog(t, l) {
		if r.key == "A" {
			t.Logf("A at %d: %q", r.offset, r.value)
			last = r.value
		}
	}
	if last != nil {
		t.Fatalf("deleted key A reads back as %q", last)
	}
}

// TestLastBatchKeptBeforeTheActiveSegment: a log whose last closed batches
// are expired tombstones and whose active segment is empty (rolled by
// segment.ms) keeps its last batch, empty, so a read below the log end
// finds a batch (the offsets topic's loader and followers rely on it).
func TestLastBatchKeptBeforeTheActiveSegment(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	l, err := segment.Open(filepath.Join(t.TempDir(), "p-0"), segment.Config{SegmentBytes: 1 << 20, SegmentMs: time.Hour, Now: clk.now, RetentionBytes: -1, RetentionMs: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	app := func(recs ...rec) {
		if _, err := l.Append(keyedBatch(clk.now().UnixMilli(), recs...), 0); err != nil {
			t.Fatal(err)
		}
	}
	app(rec{[]byte("group-a"), []byte("commit")})
	app(rec{[]byte("group-a"), nil}) // the group is deleted
	clk.add(2 * time.Hour)
	if err := l.Maintain(); err != nil { // segment.ms rolls the active segment
		t.Fatal(err)
	}
	policy := Policy{DeleteRetention: time.Hour, MinDirtyRatio: 0.5, SegmentBytes: 1 << 20}
	c := newTestCompactor(t, &fakeHost{local: []LocalPartition{localPartition(l, policy)}}, clk, Config{})
	for range 3 {
		if err := c.RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		clk.add(2 * time.Hour)
	}
	start, end := l.StartOffset(), l.EndOffset()
	b, err := l.Read(nil, start, end, 1<<20)
	t.Logf("log [%d, %d), active base %d: read at %d gives %d bytes, %v", start, end, l.ActiveBase(), start, len(b), err)
	if len(b) == 0 && start < end {
		t.Fatalf("read at %d below the log end %d returns nothing: offsetsLog.Read reports %q and the coordinator load fails",
			start, end, "nothing read at ..., below the log end")
	}
}
