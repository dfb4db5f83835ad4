package segment

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func tsBatch(t *testing.T, ts int64, n int) []byte {
	return encodeBatch(t, batchSpec{values: values(n, 100, byte(ts)), firstTs: ts})
}

// segment.ms: a segment whose first append is older than SegmentMs rolls on
// the next append, or on Maintain when idle.
func TestSegmentMsRoll(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now, SegmentMs: time.Hour})
	defer l.Close()
	mustAppend(t, l, tsBatch(t, clock.Millis(), 1), 0)
	clock.Advance(59 * time.Minute)
	mustAppend(t, l, tsBatch(t, clock.Millis(), 1), 0)
	if n := len(segmentBases(l)); n != 1 {
		t.Fatalf("%d segments before segment.ms", n)
	}
	clock.Advance(time.Minute)
	mustAppend(t, l, tsBatch(t, clock.Millis(), 1), 0)
	if bs := segmentBases(l); len(bs) != 2 || bs[1] != 2 {
		t.Fatalf("segments %v, want a roll at 2", bs)
	}
	// Idle: Maintain rolls.
	clock.Advance(2 * time.Hour)
	if err := l.Maintain(); err != nil {
		t.Fatal(err)
	}
	if bs := segmentBases(l); len(bs) != 3 || bs[2] != 3 {
		t.Fatalf("segments %v, want an idle roll at 3", bs)
	}
	// An empty active segment never rolls.
	clock.Advance(2 * time.Hour)
	l.Maintain()
	if n := len(segmentBases(l)); n != 3 {
		t.Fatalf("empty segment rolled: %d segments", n)
	}
}

func TestRetentionBySize(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Now: clock.Now, SegmentBytes: 2000})
	defer l.Close()
	for range 20 {
		mustAppend(t, l, tsBatch(t, clock.Millis(), 5), 0) // ~600 bytes: 3 per segment
	}
	total := l.Size()
	bases := segmentBases(l)
	l.SetConfig(Config{SegmentBytes: 2000, RetentionBytes: total / 2})
	if err := l.Maintain(); err != nil {
		t.Fatal(err)
	}
	// Kafka's rule: delete the oldest segment while the log stays at or
	// above retention.bytes without it.
	l.mu.RLock()
	firstSize := l.mu.segs[0].size
	l.mu.RUnlock()
	if l.Size() < total/2 || l.Size()-firstSize >= total/2 {
		t.Fatalf("size %d (oldest segment %d) after retention to %d", l.Size(), firstSize, total/2)
	}
	after := segmentBases(l)
	if after[0] == bases[0] || l.StartOffset() != after[0] {
		t.Fatalf("start offset %d, segments %v", l.StartOffset(), after)
	}
	// Files of deleted segments, and their snapshots, are gone.
	for _, b := range bases {
		if b >= after[0] {
			break
		}
		for _, suf := range []string{logSuffix, indexSuffix, timeIndexSuffix, snapshotSuffix} {
			if _, err := os.Stat(offsetName(dir, b, suf)); !os.IsNotExist(err) {
				t.Fatalf("%d%s survived retention", b, suf)
			}
		}
	}
	if _, err := l.Read(nil, 0, l.EndOffset(), 100); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("read below start: %v", err)
	}
	if _, err := l.Read(nil, l.StartOffset(), l.EndOffset(), 100); err != nil {
		t.Fatal(err)
	}
	// Retention never takes the active segment.
	l.SetConfig(Config{SegmentBytes: 2000, RetentionBytes: 1})
	l.Maintain()
	if bs := segmentBases(l); len(bs) != 1 || l.StartOffset() != bs[0] {
		t.Fatalf("segments %v start %d", bs, l.StartOffset())
	}
	// Start offset survives a restart.
	start, end := l.StartOffset(), l.EndOffset()
	l.Close()
	l = mustOpen(t, dir, Config{Now: clock.Now})
	if l.StartOffset() != start || l.EndOffset() != end {
		t.Fatalf("after reopen: [%d, %d), want [%d, %d)", l.StartOffset(), l.EndOffset(), start, end)
	}
}

func TestRetentionByTime(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Now: clock.Now, SegmentBytes: 1500, RetentionMs: 24 * time.Hour})
	defer l.Close()
	// Old records (by their timestamps), then recent ones.
	for range 6 {
		mustAppend(t, l, tsBatch(t, clock.Millis(), 5), 0)
	}
	oldEnd := l.EndOffset()
	clock.Advance(20 * time.Hour)
	for range 6 {
		mustAppend(t, l, tsBatch(t, clock.Millis(), 5), 0)
	}
	l.Maintain()
	if l.StartOffset() != 0 {
		t.Fatalf("deleted too early: start %d", l.StartOffset())
	}
	clock.Advance(5 * time.Hour) // old ones are 25h old, recent ones 5h
	if err := l.Maintain(); err != nil {
		t.Fatal(err)
	}
	start := l.StartOffset()
	if start == 0 || start > oldEnd {
		t.Fatalf("start %d after time retention; old data ended at %d", start, oldEnd)
	}
	// Timestamp lookups below the start offset land on the start.
	off, _, ok, err := l.OffsetForTimestamp(0)
	if err != nil || !ok || off != start {
		t.Fatalf("OffsetForTimestamp(0) = %d, %v, %v; want %d", off, ok, err, start)
	}
	// Negative RetentionMs keeps everything.
	l.SetConfig(Config{SegmentBytes: 1500, RetentionMs: -1})
	clock.Advance(1000 * time.Hour)
	l.Maintain()
	if l.StartOffset() != start {
		t.Fatal("unlimited retention deleted data")
	}
}

// Segments without timestamps age by file modification time.
func TestRetentionByMtime(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Now: clock.Now, SegmentBytes: 500, RetentionMs: time.Hour})
	defer l.Close()
	for range 4 {
		mustAppend(t, l, encodeBatch(t, batchSpec{values: values(3, 100, 0), firstTs: -1, tsDeltas: []int64{0, 0, 0}}), 0)
	}
	if ts, off := l.MaxTimestamp(); ts != -1 || off != -1 {
		t.Fatalf("MaxTimestamp of a log without timestamps: %d, %d", ts, off)
	}
	bases := segmentBases(l)
	old := clock.Now().Add(-2 * time.Hour)
	os.Chtimes(offsetName(dir, bases[0], logSuffix), old, old)
	l.Maintain()
	if l.StartOffset() != bases[1] {
		t.Fatalf("start %d, want %d", l.StartOffset(), bases[1])
	}
}

func TestOffsetForTimestampAndMaxTimestamp(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now, SegmentBytes: 1200, IndexIntervalBytes: 200})
	defer l.Close()
	if ts, off := l.MaxTimestamp(); ts != -1 || off != -1 {
		t.Fatalf("empty log MaxTimestamp %d %d", ts, off)
	}
	if _, _, ok, err := l.OffsetForTimestamp(0); ok || err != nil {
		t.Fatal("empty log found a timestamp")
	}
	base := clock.Millis()
	// Timestamps go up and down; batch i has records at base+10i + {0, 5, -3}.
	codecs := []int{codecNone, codecZstd, codecGzip, codecSnappy, codecLz4}
	for i := range 30 {
		mustAppend(t, l, encodeBatch(t, batchSpec{
			codec: codecs[i%5], values: values(3, 50, byte(i)),
			firstTs: base + int64(10*i), tsDeltas: []int64{0, 5, -3},
		}), 0)
	}
	if n := len(segmentBases(l)); n < 4 {
		t.Fatalf("only %d segments", n)
	}
	for _, q := range []int64{base - 100, base, base + 1, base + 6, base + 7, base + 150, base + 290, base + 295} {
		// The expected answer, by brute force.
		wantOff, wantTs := int64(-1), int64(-1)
		for i := range 30 {
			for j, d := range []int64{0, 5, -3} {
				ts := base + int64(10*i) + d
				if ts >= q {
					wantOff, wantTs = int64(3*i+j), ts
					break
				}
			}
			if wantOff >= 0 {
				break
			}
		}
		off, ts, ok, err := l.OffsetForTimestamp(q)
		if err != nil || !ok || off != wantOff || ts != wantTs {
			t.Fatalf("OffsetForTimestamp(base%+d) = %d, %d, %v, %v; want %d, %d", q-base, off, ts, ok, err, wantOff, wantTs)
		}
	}
	if _, _, ok, _ := l.OffsetForTimestamp(base + 1000); ok {
		t.Fatal("found a timestamp above the max")
	}
	// The max is base+295, offset 88 (batch 29, record 1).
	if ts, off := l.MaxTimestamp(); ts != base+295 || off != 88 {
		t.Fatalf("MaxTimestamp = base%+d, %d; want base+295, 88", ts-base, off)
	}
	// Also after a restart (found lazily from the time index).
	dir := l.dir
	l.Close()
	l = mustOpen(t, dir, Config{Now: clock.Now})
	defer l.Close()
	if ts, off := l.MaxTimestamp(); ts != base+295 || off != 88 {
		t.Fatalf("after reopen MaxTimestamp = base%+d, %d; want base+295, 88", ts-base, off)
	}
	// A max in an older segment wins over later, smaller timestamps.
	mustAppend(t, l, tsBatch(t, base, 2), 0)
	if ts, off := l.MaxTimestamp(); ts != base+295 || off != 88 {
		t.Fatalf("MaxTimestamp = base%+d, %d", ts-base, off)
	}
}

// OffsetForLeaderEpoch semantics, as Kafka's leader answers them
// (LeaderEpochFileCache.endOffsetFor, with the leader's current epoch
// starting at its log end).
func TestEndOffsetForEpoch(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Now: clock.Now, SegmentBytes: 800})
	if e, ep := l.EndOffsetForEpoch(0); e != -1 || ep != -1 || l.LatestEpoch() != -1 {
		t.Fatalf("empty: %d %d latest %d", e, ep, l.LatestEpoch())
	}
	app := func(epoch int32, n int) {
		for range n {
			mustAppend(t, l, tsBatch(t, clock.Millis(), 2), epoch)
		}
	}
	app(1, 3) // offsets 0-5
	app(3, 2) // 6-9
	app(2, 1) // a stale epoch is stamped but not recorded: 10-11
	app(5, 2) // 12-15
	if l.LatestEpoch() != 5 {
		t.Fatalf("LatestEpoch %d", l.LatestEpoch())
	}
	cases := []struct {
		req         int32
		end         int64
		epoch       int32
		description string
	}{
		{5, 16, 5, "latest epoch: log end offset"},
		{3, 12, 3, "known epoch: start of the next"},
		{4, 12, 3, "unknown epoch between: floor epoch, next start"},
		{2, 6, 1, "unknown epoch between"},
		{1, 6, 1, "first epoch"},
		{0, 0, 0, "below every epoch: requested epoch, first start"},
		{6, 16, 5, "above every epoch: the leader's current epoch, not yet written, began at the log end"},
		{-1, -1, -1, "undefined"},
	}
	check := func() {
		t.Helper()
		for _, c := range cases {
			if e, ep := l.EndOffsetForEpoch(c.req); e != c.end || ep != c.epoch {
				t.Fatalf("%s: EndOffsetForEpoch(%d) = %d, %d; want %d, %d", c.description, c.req, e, ep, c.end, c.epoch)
			}
		}
	}
	check()
	l.Close()
	if data, _ := os.ReadFile(filepath.Join(dir, epochCheckpointName)); string(data) != "0\n3\n1 0\n3 6\n5 12\n" {
		t.Fatalf("checkpoint %q", data)
	}
	l = mustOpen(t, dir, Config{Now: clock.Now, SegmentBytes: 800})
	defer l.Close()
	check()
	// Retention moves the first epoch's start up to the log start offset.
	l.SetConfig(Config{SegmentBytes: 800, RetentionBytes: 1})
	l.Maintain()
	start := l.StartOffset()
	if start == 0 {
		t.Fatal("retention did nothing")
	}
	l.mu.RLock()
	first := l.mu.epochs[0]
	l.mu.RUnlock()
	if first.start != start {
		t.Fatalf("first epoch entry %+v, start %d", first, start)
	}
}

// With Explicit, 0 is Kafka's 0: retention.ms=0 and retention.bytes=0
// delete every closed segment, and timestamp bounds of 0 allow no skew.
// Without it, 0 still means the default.
func TestExplicitZeroSettings(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"RetentionMs", Config{Explicit: true, RetentionMs: 0, RetentionBytes: -1, TimestampBeforeMax: -1, TimestampAfterMax: -1}},
		{"RetentionBytes", Config{Explicit: true, RetentionBytes: 0, RetentionMs: -1, TimestampBeforeMax: -1, TimestampAfterMax: -1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := newClock()
			cfg := c.cfg
			cfg.Now, cfg.SegmentBytes = clock.Now, 1500
			l := mustOpen(t, t.TempDir(), cfg)
			defer l.Close()
			for range 10 {
				mustAppend(t, l, tsBatch(t, clock.Millis(), 5), 0)
			}
			clock.Advance(time.Second) // past every record's timestamp
			bases := segmentBases(l)
			if len(bases) < 3 {
				t.Fatalf("only %d segments", len(bases))
			}
			if err := l.Maintain(); err != nil {
				t.Fatal(err)
			}
			if got := segmentBases(l); len(got) != 1 || l.StartOffset() != bases[len(bases)-1] {
				t.Fatalf("segments %v, start %d; want only the active one at %d", got, l.StartOffset(), bases[len(bases)-1])
			}
		})
	}

	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now, Explicit: true, RetentionMs: -1, RetentionBytes: -1})
	defer l.Close()
	for _, skew := range []int64{1, -1} {
		if _, err := l.Append(tsBatch(t, clock.Millis()+skew, 1), 0); !errors.Is(err, ErrInvalidTimestamp) {
			t.Fatalf("skew %d ms with zero bounds: %v", skew, err)
		}
	}
	mustAppend(t, l, tsBatch(t, clock.Millis(), 1), 0)

	d := Config{}.WithDefaults()
	if d.RetentionMs != DefaultRetentionMs || d.RetentionBytes >= 0 || d.TimestampBeforeMax >= 0 || d.TimestampAfterMax != DefaultTimestampAfterMax {
		t.Fatalf("zero Config without Explicit: %+v", d)
	}
}
