package compactor

import (
	"context"
	"testing"
	"time"

	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

var testTP = format.TopicPartition{Topic: "t", TopicID: [16]byte{1, 2, 3}, Partition: 0}

// coldSetup writes a history to a local log and uploads its closed
// segments to a tier in a directory store.
func coldSetup(t *testing.T, clk *clock, n, keys int, deleted func(int) bool) (*tier.Tier, objstore.Store, map[string][]byte) {
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
	l := openLog(t, t.TempDir(), 16<<10, clk.now)
	defer l.Close()
	final := history(t, l, n, keys, deleted, clk.now().UnixMilli())
	segs, err := l.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		if _, err := tr.Upload(context.Background(), testTP, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	return tr, store, final
}

func readTier(t *testing.T, tr *tier.Tier) []readRecord {
	t.Helper()
	root, err := tr.Manifest(context.Background(), testTP)
	if err != nil {
		t.Fatal(err)
	}
	return readBatches(t, root.LogStartOffset, root.EndOffset(), func(off int64) ([]byte, error) {
		return tr.Read(context.Background(), testTP, nil, off, 1<<20)
	})
}

func coldCompactor(t *testing.T, tr *tier.Tier, clk *clock, p Policy) *Compactor {
	t.Helper()
	host := &fakeHost{cold: []ColdPartition{{TP: testTP, LeaderEpoch: 0, Policy: p}}}
	c, err := New(Config{Now: clk.now, SpoolDir: t.TempDir(), ChunkBytes: 64 << 10}, host, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestColdCompaction: the bucket's history compacts to one record per key,
// replaced in the manifest in one step, with the manifest's compaction
// state recorded; tombstones go after delete.retention.ms.
func TestColdCompaction(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	tr, _, final := coldSetup(t, clk, 20_000, 1_000, func(k int) bool { return k%10 == 3 })
	ctx := context.Background()
	before, _ := tr.Manifest(ctx, testTP)
	beforeBytes := before.Totals().Bytes
	c := coldCompactor(t, tr, clk, Policy{DeleteRetention: time.Hour, MinDirtyRatio: 0.5, SegmentBytes: 16 << 10})
	if err := c.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	root, _ := tr.Manifest(ctx, testTP)
	if root.CleanedOffset != root.EndOffset() || root.LastCompactionMs != clk.now().UnixMilli() {
		t.Fatalf("manifest cleaned to %d at %d, want %d at %d", root.CleanedOffset, root.LastCompactionMs, root.EndOffset(), clk.now().UnixMilli())
	}
	if root.EndOffset() != before.EndOffset() || root.LogStartOffset != before.LogStartOffset {
		t.Fatalf("manifest bounds [%d, %d), were [%d, %d)", root.LogStartOffset, root.EndOffset(), before.LogStartOffset, before.EndOffset())
	}
	if got := root.Totals().Bytes; got > beforeBytes/5 {
		t.Fatalf("bucket holds %d bytes of log after compaction, %d before", got, beforeBytes)
	}
	checkCompacted(t, readTier(t, tr), final, root.EndOffset(), false)
	st := c.Statuses()
	if len(st) != 1 || st[0].LastStats.Puts == 0 || st[0].LastStats.Gets == 0 {
		t.Fatalf("statuses %+v", st)
	}

	clk.add(time.Hour)
	if err := c.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	checkCompacted(t, readTier(t, tr), final, root.EndOffset(), true)
}

// TestColdCompactionReadsEachObjectOnce: a pass's GETs are the chunks of
// each object's log part once, plus the two producer snapshots; its PUTs
// one per output segment plus the manifest change.
func TestColdCompactionReadsEachObjectOnce(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	tr, _, _ := coldSetup(t, clk, 5_000, 100, nil)
	ctx := context.Background()
	root, _ := tr.Manifest(ctx, testTP)
	segs, err := tr.Segments(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	c := coldCompactor(t, tr, clk, Policy{MinDirtyRatio: 0.5, SegmentBytes: 1 << 20})
	// The newest object's producer snapshot (it is also the last one
	// rewritten), and the manifest root read again before the swap.
	want := int64(2)
	var logBytes int64
	for _, s := range segs {
		want += (s.Log.Len + c.cfg.ChunkBytes - 1) / c.cfg.ChunkBytes
		logBytes += s.Log.Len
	}
	pl, csegs, err := c.coldPlan(ctx, &c.host.ColdPartitions()[0], clk.now())
	if err != nil {
		t.Fatal(err)
	}
	gets0, _ := tr.RequestCounts()
	st, err := c.compactCold(ctx, newKeyMap(1<<20), &c.host.ColdPartitions()[0], pl, csegs)
	if err != nil {
		t.Fatal(err)
	}
	gets1, _ := tr.RequestCounts()
	if gets1-gets0 != want || st.Gets != want {
		t.Fatalf("%d GETs (stats %d) for %d objects, want %d", gets1-gets0, st.Gets, len(segs), want)
	}
	if st.BytesRead != logBytes {
		t.Fatalf("read %d log bytes of %d", st.BytesRead, logBytes)
	}
	t.Logf("%d objects: %d GETs, %d PUTs", len(segs), st.Gets, st.Puts)
}

// TestColdCompactionSmallMap: more keys than the map holds compact
// exactly in several passes.
func TestColdCompactionSmallMap(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	tr, _, final := coldSetup(t, clk, 20_000, 4_000, nil)
	ctx := context.Background()
	c := coldCompactor(t, tr, clk, Policy{SegmentBytes: 64 << 10})
	p := &c.host.ColdPartitions()[0]
	m := newKeyMap(0)
	passes := 0
	for ; passes < 100; passes++ {
		pl, segs, err := c.coldPlan(ctx, p, clk.now())
		if err != nil {
			t.Fatal(err)
		}
		if pl.firstDirty >= pl.cleanEnd {
			break
		}
		st, err := c.compactCold(ctx, m, p, pl, segs)
		if err != nil {
			t.Fatal(err)
		}
		if st.CleanedTo <= pl.firstDirty {
			t.Fatalf("pass %d made no progress from %d", passes, pl.firstDirty)
		}
	}
	if passes < 4 {
		t.Fatalf("%d passes for 4,000 keys in a map of %d", passes, m.limit)
	}
	root, _ := tr.Manifest(ctx, testTP)
	checkCompacted(t, readTier(t, tr), final, root.EndOffset(), false)
}

// TestColdCompactionFencedByNewLeader: a pass under an older epoch than
// the manifest's changes nothing.
func TestColdCompactionFencedByNewLeader(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	tr, _, final := coldSetup(t, clk, 5_000, 100, nil)
	ctx := context.Background()
	// A new leader at epoch 1 changes the manifest (DeleteRecords of the
	// first record).
	root, _ := tr.Manifest(ctx, testTP)
	if root, _ = tr.AdvanceLogStart(ctx, testTP, root.LogStartOffset+1, 1); root == nil {
		t.Fatal("no manifest")
	}
	c := coldCompactor(t, tr, clk, Policy{MinDirtyRatio: 0.1, SegmentBytes: 1 << 20})
	if err := c.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	after, _ := tr.Manifest(ctx, testTP)
	if after.CleanedOffset != 0 {
		t.Fatalf("a fenced pass recorded cleanedOffset %d", after.CleanedOffset)
	}
	recs := readTier(t, tr)
	if len(recs) != int(root.EndOffset()-root.LogStartOffset) {
		t.Fatalf("%d records after a fenced pass, want all %d", len(recs), root.EndOffset()-root.LogStartOffset)
	}
	_ = final
}
