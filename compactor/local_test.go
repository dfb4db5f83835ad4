package compactor

import (
	"context"
	"testing"
	"time"

	"strata/segment"
)

func newTestCompactor(t testing.TB, host Host, clk *clock, cfg Config) *Compactor {
	t.Helper()
	cfg.Now = clk.now
	cfg.SpoolDir = t.TempDir()
	c, err := New(cfg, host, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func localPartition(l *segment.Log, p Policy) LocalPartition {
	return LocalPartition{Topic: "t", Partition: 0, Log: l, HighWatermark: l.EndOffset, Policy: p}
}

// TestLocalCompaction: 20,000 updates over 1,000 keys, 100 of them
// deleted, compact to one record per key below the active segment, every
// key at its final value, offsets unchanged and increasing; tombstones
// stay until delete.retention.ms after their first cleaning, then go.
func TestLocalCompaction(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	l := openLog(t, t.TempDir(), 16<<10, clk.now)
	defer l.Close()
	final := history(t, l, 20_000, 1_000, func(k int) bool { return k%10 == 3 }, clk.now().UnixMilli())
	before := l.Size()
	policy := Policy{DeleteRetention: time.Hour, MinDirtyRatio: 0.5, SegmentBytes: 16 << 10}
	host := &fakeHost{local: []LocalPartition{localPartition(l, policy)}}
	c := newTestCompactor(t, host, clk, Config{})
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	cleaned, at := l.CleanerCheckpoint()
	if cleaned != l.ActiveBase() || !at.Equal(clk.now()) {
		t.Fatalf("cleaner checkpoint %d at %v, want %d at %v", cleaned, at, l.ActiveBase(), clk.now())
	}
	checkCompacted(t, readLog(t, l), final, l.ActiveBase(), false)
	if after := l.Size(); after > before/5 {
		t.Fatalf("log %d bytes after compaction, %d before", after, before)
	}

	// Nothing dirty: the next round does nothing until the tombstones'
	// horizon has passed, then removes them.
	size := l.Size()
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.Size() != size {
		t.Fatal("a round with nothing due rewrote the log")
	}
	// A compactor that starts afresh (a restart) knows the tombstones'
	// horizon only from the checkpoint's time: it too waits for it.
	c2 := newTestCompactor(t, host, clk, Config{})
	if err := c2.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l.Size() != size {
		t.Fatal("a restarted compactor rewrote the log before any horizon passed")
	}
	clk.add(time.Hour)
	if err := c2.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkCompacted(t, readLog(t, l), final, l.ActiveBase(), true)
}

// TestLocalCompactionSmallMap: a key map far smaller than the keys still
// compacts exactly, in several passes.
func TestLocalCompactionSmallMap(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	l := openLog(t, t.TempDir(), 32<<10, clk.now)
	defer l.Close()
	final := history(t, l, 30_000, 5_000, nil, clk.now().UnixMilli())
	p := localPartition(l, Policy{MinDirtyRatio: 0, SegmentBytes: 32 << 10})
	c := newTestCompactor(t, &fakeHost{}, clk, Config{})
	m := newKeyMap(0) // 819 keys
	passes := 0
	for {
		pl, segs, err := localPlan(&p, clk.now())
		if err != nil {
			t.Fatal(err)
		}
		if pl.firstDirty >= pl.cleanEnd {
			break
		}
		st, err := c.compactLocal(context.Background(), m, &p, pl, segs)
		if err != nil {
			t.Fatal(err)
		}
		if st.CleanedTo <= pl.firstDirty {
			t.Fatalf("pass %d made no progress from %d", passes, pl.firstDirty)
		}
		passes++
	}
	if passes < 5 {
		t.Fatalf("%d passes for 5,000 keys in a map of %d", passes, m.limit)
	}
	checkCompacted(t, readLog(t, l), final, l.ActiveBase(), false)
	t.Logf("%d passes", passes)
}

// TestLocalCompactionBounds: the active segment, records above the high
// watermark and records younger than min.compaction.lag.ms stay as they
// are.
func TestLocalCompactionBounds(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	l := openLog(t, t.TempDir(), 8<<10, clk.now)
	defer l.Close()
	history(t, l, 5_000, 10, nil, clk.now().UnixMilli())
	hw := l.EndOffset() / 2
	p := LocalPartition{Topic: "t", Log: l, HighWatermark: func() int64 { return hw },
		Policy: Policy{MinDirtyRatio: 0.1, SegmentBytes: 8 << 10}}
	c := newTestCompactor(t, &fakeHost{local: []LocalPartition{p}}, clk, Config{})
	if err := c.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	cleaned, _ := l.CleanerCheckpoint()
	if cleaned > hw || cleaned == 0 {
		t.Fatalf("cleaned to %d with the high watermark at %d", cleaned, hw)
	}
	recs := readLog(t, l)
	above := 0
	for _, r := range recs {
		if r.offset >= cleaned {
			above++
		}
	}
	if want := int(l.EndOffset() - cleaned); above != want {
		t.Fatalf("%d records at or above %d, want all %d", above, cleaned, want)
	}

	// min.compaction.lag: everything is younger than an hour.
	l2 := openLog(t, t.TempDir(), 8<<10, clk.now)
	defer l2.Close()
	history(t, l2, 5_000, 10, nil, clk.now().UnixMilli())
	p2 := localPartition(l2, Policy{MinLag: time.Hour, MinDirtyRatio: 0.1, SegmentBytes: 8 << 10})
	c2 := newTestCompactor(t, &fakeHost{local: []LocalPartition{p2}}, clk, Config{})
	size := l2.Size()
	if err := c2.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l2.Size() != size {
		t.Fatal("records younger than min.compaction.lag.ms were compacted")
	}
	clk.add(2 * time.Hour)
	if err := c2.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l2.Size() >= size {
		t.Fatal("nothing compacted once the lag passed")
	}
}

// TestCompactorStops: Run returns when its context ends, mid-pass too.
func TestCompactorStops(t *testing.T) {
	clk := &clock{t: time.UnixMilli(1_700_000_000_000)}
	l := openLog(t, t.TempDir(), 8<<10, clk.now)
	defer l.Close()
	history(t, l, 20_000, 100, nil, clk.now().UnixMilli())
	host := &fakeHost{local: []LocalPartition{localPartition(l, Policy{MinDirtyRatio: 0.1, SegmentBytes: 8 << 10})}}
	// A throttle of 64 KiB/s makes the pass last far longer than the test.
	c := newTestCompactor(t, host, clk, Config{Interval: time.Millisecond, IOBytesPerSec: 64 << 10})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	time.Sleep(200 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
