package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// emptied returns batch as compaction leaves a batch none of whose records
// survive but which is kept (Kafka's RETAIN_EMPTY): the header alone, with
// its base offset, lastOffsetDelta and producer fields, and 0 records,
// uncompressed as Kafka writes it.
func emptied(batch []byte) []byte {
	b := bytes.Clone(batch[:headerSize])
	binary.BigEndian.PutUint32(b[offLength:], uint32(minBatchLength))
	attrs := binary.BigEndian.Uint16(b[offAttributes:])
	binary.BigEndian.PutUint16(b[offAttributes:], attrs&^uint16(attrCodecMask))
	binary.BigEndian.PutUint32(b[offNumRecords:], 0)
	fixCRC(b)
	return b
}

// rewritePlan decides what a rewrite does with each source batch: keep it,
// drop it, or keep it empty.
type rewritePlan func(h BatchHeader) (keep, empty bool)

// thinOut drops two batches in five and empties one in five.
func thinOut(h BatchHeader) (keep, empty bool) {
	switch h.BaseOffset % 5 {
	case 1, 3:
		return false, false
	case 4:
		return true, true
	}
	return true, false
}

// applyPlan returns the log old (concatenated batches) becomes when the
// batches in [from, to) go through plan.
func applyPlan(t testing.TB, old []byte, from, to int64, plan rewritePlan) []byte {
	var out []byte
	for _, b := range batchesOf(t, old) {
		h := decodeHeader(b)
		if h.BaseOffset < from || h.BaseOffset >= to {
			out = append(out, b...)
			continue
		}
		switch keep, empty := plan(h); {
		case keep && empty:
			out = append(out, emptied(b)...)
		case keep:
			out = append(out, b...)
		}
	}
	return out
}

// rewriteWith runs a whole rewrite of [from, to) through plan, cutting an
// output once it holds cutBytes, and commits it with cleanedTo = to.
func rewriteWith(t testing.TB, l *Log, from, to int64, plan rewritePlan, cutBytes int64) error {
	t.Helper()
	rw, err := l.BeginRewrite(from, to)
	if err != nil {
		return err
	}
	defer rw.Abort()
	if err := rw.Scan(from, func(b []byte) error {
		if rw.OutputBytes() >= cutBytes {
			if err := rw.Cut(); err != nil {
				return err
			}
		}
		switch keep, empty := plan(decodeHeader(b)); {
		case keep && empty:
			return rw.Append(emptied(b))
		case keep:
			return rw.Append(bytes.Clone(b))
		}
		return nil
	}); err != nil {
		return err
	}
	return rw.Commit(to)
}

// firstAtOrAfter finds, by walking every record of log, the first record
// at or after start with timestamp >= ts: what OffsetForTimestamp must
// answer.
func firstAtOrAfter(t testing.TB, log []byte, ts, start int64) (int64, int64, bool) {
	for _, b := range batchesOf(t, log) {
		off, rts, ok, err := firstRecordAtOrAfter(b, ts, start)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return off, rts, true
		}
	}
	return -1, -1, false
}

// checkLogHolds checks that l serves exactly want (concatenated batches)
// between start and end, through whole reads, reads at every offset, and
// timestamp lookups, and that its size adds up.
func checkLogHolds(t testing.TB, l *Log, want []byte, start, end int64) {
	t.Helper()
	if l.StartOffset() != start || l.EndOffset() != end {
		t.Fatalf("log [%d, %d), want [%d, %d)", l.StartOffset(), l.EndOffset(), start, end)
	}
	for _, maxBytes := range []int{1, 1 << 20} {
		if got := readAll(t, l, maxBytes); !bytes.Equal(got, want) {
			t.Fatalf("maxBytes %d: read %d bytes, want %d identical bytes", maxBytes, len(got), len(want))
		}
	}
	if l.Size() != int64(len(want)) {
		t.Fatalf("Size %d, want %d", l.Size(), len(want))
	}
	// A read at any offset starts with the batch holding it or, in a
	// gap, the next one.
	batches := batchesOf(t, want)
	for off := start; off < end; off += 11 {
		got, err := l.Read(nil, off, end, 1)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		var wantB []byte
		for _, b := range batches {
			if decodeHeader(b).LastOffset() >= off {
				wantB = b
				break
			}
		}
		if !bytes.Equal(got, wantB) {
			t.Fatalf("Read(%d) returned %d bytes, want the %d-byte batch at or after it", off, len(got), len(wantB))
		}
	}
	var minTs, maxTs int64 = -1, -1
	for _, b := range batches {
		h := decodeHeader(b)
		if minTs < 0 || h.FirstTimestamp < minTs {
			minTs = h.FirstTimestamp
		}
		maxTs = max(maxTs, h.MaxTimestamp)
	}
	for ts := minTs - 1; ts <= maxTs+1; ts += max(1, (maxTs-minTs)/11) {
		wantOff, wantTs, wantOK := firstAtOrAfter(t, want, ts, start)
		off, rts, ok, err := l.OffsetForTimestamp(ts)
		if err != nil || ok != wantOK || (ok && (off != wantOff || rts != wantTs)) {
			t.Fatalf("OffsetForTimestamp(%d) = %d, %d, %v, %v; want %d, %d, %v", ts, off, rts, ok, err, wantOff, wantTs, wantOK)
		}
	}
}

func noRewriteFiles(t testing.TB, dir string) {
	t.Helper()
	for _, name := range dirNames(t, dir) {
		if strings.HasSuffix(name, cleanedSuffix) || strings.HasSuffix(name, swapSuffix) || isTemp(name) {
			t.Fatalf("%s left in the log directory", name)
		}
	}
}

// Compaction rewrites closed segments in place: the batches kept keep
// their offsets and bytes, the others leave gaps, an emptied batch stays
// as its header, and the log reads, indexes and reopens as before.
func TestRewriteSwapsSegments(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := leaderLog(t, dir, clock, 150)
	old := readAll(t, l, 1<<20)
	bases := segmentBases(l)
	if len(bases) < 8 {
		t.Fatalf("only %d segments", len(bases))
	}
	start, end := l.StartOffset(), l.EndOffset()
	from, to := bases[1], bases[6]
	if c, at := l.CleanerCheckpoint(); c != start || !at.IsZero() {
		t.Fatalf("CleanerCheckpoint of a new log = %d, %v; want %d and no time", c, at, start)
	}

	rw, err := l.BeginRewrite(from, to)
	if err != nil {
		t.Fatal(err)
	}
	srcs := rw.Sources()
	if len(srcs) != 5 || srcs[0].BaseOffset != from || srcs[4].EndOffset != to {
		t.Fatalf("Sources %+v, want the 5 segments of [%d, %d)", srcs, from, to)
	}
	rw.Abort()

	clock.Advance(time.Hour)
	// Outputs of about 1 KiB: more segments than before, at batch bases.
	if err := rewriteWith(t, l, from, to, thinOut, 1<<10); err != nil {
		t.Fatal(err)
	}
	want := applyPlan(t, old, from, to, thinOut)
	if len(want) >= len(old) {
		t.Fatal("the plan dropped nothing")
	}
	checkLogHolds(t, l, want, start, end)
	newBases := segmentBases(l)
	if !slices.Contains(newBases, from) || !slices.Contains(newBases, to) || len(newBases) <= len(bases) {
		t.Fatalf("segments %v after rewriting [%d, %d) of %v into small outputs", newBases, from, to, bases)
	}
	if c, at := l.CleanerCheckpoint(); c != to || !at.Equal(clock.Now().Truncate(time.Millisecond)) {
		t.Fatalf("CleanerCheckpoint = %d, %v; want %d, %v", c, at, to, clock.Now())
	}
	noRewriteFiles(t, dir)

	// Appends go on; a clean and an unclean restart read the same.
	more := appendRandom(t, l, rand.New(rand.NewPCG(3, 3)), 10, clock, 5)
	want = append(want, more...)
	end = l.EndOffset()
	checkLogHolds(t, l, want, start, end)
	newBases = segmentBases(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, clean := range []bool{true, false} {
		l = mustOpen(t, dir, smallCfg(clock))
		checkLogHolds(t, l, want, start, end)
		if c, _ := l.CleanerCheckpoint(); c != to {
			t.Fatalf("CleanerCheckpoint after reopening = %d, want %d", c, to)
		}
		if !slices.Equal(segmentBases(l), newBases) {
			t.Fatalf("segments %v after reopening, want %v", segmentBases(l), newBases)
		}
		if clean {
			l.Close()
		} else {
			crash(l)
		}
	}
}

// A rewrite that keeps nothing leaves one empty segment at from, so the
// segments still cover the log without a hole; one that merges keeps the
// first output at from even when its first batch starts later.
func TestRewriteEmptyAndMerged(t *testing.T) {
	clock := newClock()
	for _, tt := range []struct {
		name string
		plan rewritePlan
	}{
		{"nothing kept", func(BatchHeader) (bool, bool) { return false, false }},
		{"first batches dropped, rest merged", func(h BatchHeader) (bool, bool) { return h.BaseOffset%3 == 0 && h.BaseOffset > 40, false }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l := leaderLog(t, dir, clock, 150)
			defer l.Close()
			old := readAll(t, l, 1<<20)
			bases := segmentBases(l)
			from, to := bases[0], bases[4]
			if err := rewriteWith(t, l, from, to, tt.plan, 1<<30); err != nil {
				t.Fatal(err)
			}
			want := applyPlan(t, old, from, to, tt.plan)
			checkLogHolds(t, l, want, 0, l.EndOffset())
			got := segmentBases(l)
			if !slices.Equal(got, append([]int64{from}, bases[4:]...)) {
				t.Fatalf("segments %v, want one at %d and then %v", got, from, bases[4:])
			}
			l.Close()
			l = mustOpen(t, dir, smallCfg(clock))
			checkLogHolds(t, l, want, 0, l.EndOffset())
		})
	}
}

// The cleaner checkpoint survives restarts; a damaged one counts as never
// cleaned rather than stopping the log.
func TestCleanerCheckpointDamaged(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := leaderLog(t, dir, clock, 60)
	bases := segmentBases(l)
	if err := rewriteWith(t, l, bases[0], bases[2], thinOut, 1<<30); err != nil {
		t.Fatal(err)
	}
	l.Close()
	path := cleanerPath(dir)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[7] ^= 1
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	cfg := smallCfg(clock)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l = mustOpen(t, dir, cfg)
	defer l.Close()
	if c, at := l.CleanerCheckpoint(); c != l.StartOffset() || !at.IsZero() {
		t.Fatalf("CleanerCheckpoint with a damaged file = %d, %v; want never cleaned", c, at)
	}
	if !strings.Contains(logs.String(), "cleaner checkpoint") {
		t.Fatalf("a damaged cleaner checkpoint went unreported: %q", logs.String())
	}
	if _, err := l.BeginRewrite(bases[1], bases[1]); err == nil {
		t.Fatal("BeginRewrite of an empty range succeeded")
	}
	if _, err := l.BeginRewrite(bases[0]+1, bases[2]); !errors.Is(err, ErrRewriteConflict) {
		t.Fatalf("BeginRewrite not at a segment base: %v", err)
	}
}

// syncBuffer collects log output from any goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A crash at any step of a rewrite leaves either the old segments or the
// new ones, never a mix or a hole: Open reads back exactly one of the two
// logs, with indexes that need no rebuild and the cleaner checkpoint that
// goes with it.
func TestRewriteCrashSafe(t *testing.T) {
	clock := newClock()
	for _, tt := range []struct {
		name     string
		plan     rewritePlan
		cutBytes int64
	}{
		{"thinned into small outputs", thinOut, 4 << 10},
		{"nothing kept", func(BatchHeader) (bool, bool) { return false, false }, 1 << 30},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l := leaderLog(t, dir, clock, 150)
			old := readAll(t, l, 1<<20)
			bases := segmentBases(l)
			start, end := l.StartOffset(), l.EndOffset()
			from, to := bases[2], bases[7]
			want := applyPlan(t, old, from, to, tt.plan)
			var crashes, points []string
			l.testHook = func(point string) {
				points = append(points, point)
				crashes = append(crashes, copyDir(t, dir))
			}
			if err := rewriteWith(t, l, from, to, tt.plan, tt.cutBytes); err != nil {
				t.Fatal(err)
			}
			l.Close()
			if len(crashes) < 5 {
				t.Fatalf("only %d crash points: %v", len(crashes), points)
			}
			sawOld, sawNew := false, false
			for i, cdir := range crashes {
				var logs syncBuffer
				cfg := smallCfg(clock)
				cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
				c := mustOpen(t, cdir, cfg)
				got := readAll(t, c, 1<<20)
				cleaned, _ := c.CleanerCheckpoint()
				switch {
				case bytes.Equal(got, old) && cleaned == start:
					sawOld = true
					checkLogHolds(t, c, old, start, end)
					if !slices.Equal(segmentBases(c), bases) {
						t.Fatalf("crash at %q: old log with segments %v, want %v", points[i], segmentBases(c), bases)
					}
				case bytes.Equal(got, want) && cleaned == to:
					sawNew = true
					checkLogHolds(t, c, want, start, end)
				default:
					t.Fatalf("crash at %q: %d bytes, cleaned to %d: neither the old log nor the new one", points[i], len(got), cleaned)
				}
				if strings.Contains(logs.String(), "rebuilding segment indexes") {
					t.Fatalf("crash at %q: indexes were rebuilt: %s", points[i], logs.String())
				}
				noRewriteFiles(t, cdir)
				// The log goes on: a new rewrite of the same range works.
				if err := rewriteWith(t, c, from, to, tt.plan, tt.cutBytes); err != nil {
					t.Fatalf("crash at %q: rewriting again: %v", points[i], err)
				}
				if !bytes.Equal(readAll(t, c, 1<<20), want) {
					t.Fatalf("crash at %q: rewriting again gave another log", points[i])
				}
				c.Close()
			}
			if !sawOld || !sawNew {
				t.Fatalf("crash points saw old %v new %v: %v", sawOld, sawNew, points)
			}
		})
	}
}

// within runs op and fails the test if it has not returned after a
// generous bound: a call that waits for a rewrite would never return.
func within(t *testing.T, what string, op func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s blocked behind a rewrite in progress", what)
		return nil
	}
}

// A rewrite never holds up truncation, retention, DeleteRecords, Close or
// Delete; when one of them touched a source, Commit swaps nothing, says
// ErrRewriteConflict and leaves the log as that operation left it. Changes
// that leave the sources alone do not stop the swap.
func TestRewriteConflicts(t *testing.T) {
	clock := newClock()
	type env struct {
		l        *Log
		old      []byte
		bases    []int64
		from, to int64
	}
	for _, tt := range []struct {
		name     string
		op       func(t *testing.T, e env) error
		conflict bool
	}{
		{"truncation into a source", func(t *testing.T, e env) error {
			_, err := e.l.TruncateTo(e.bases[4] + 1)
			return err
		}, true},
		{"truncation below the sources", func(t *testing.T, e env) error {
			_, err := e.l.TruncateTo(e.bases[1] + 1)
			return err
		}, true},
		{"truncation into a source, then the same batches again", func(t *testing.T, e env) error {
			newEnd, err := e.l.TruncateTo(e.bases[4] + 1)
			if err != nil {
				return err
			}
			_, err = e.l.AppendReplica(e.old[len(keptBatches(t, e.old, newEnd)):])
			return err
		}, true},
		{"retention", func(t *testing.T, e env) error {
			e.l.SetConfig(Config{SegmentBytes: 8 << 10, IndexIntervalBytes: 512, RetentionBytes: 1})
			return e.l.Maintain()
		}, true},
		{"DeleteRecords past a source", func(t *testing.T, e env) error {
			_, err := e.l.DeleteRecordsBefore(e.bases[3] + 1)
			return err
		}, true},
		{"restart", func(t *testing.T, e env) error { return e.l.TruncateFullyAndStartAt(e.bases[3], History{}) }, true},
		{"Close", func(t *testing.T, e env) error { return e.l.Close() }, true},
		{"Delete", func(t *testing.T, e env) error { return e.l.Delete() }, true},
		{"truncation to the end of the sources", func(t *testing.T, e env) error {
			if _, err := e.l.TruncateTo(e.to); err != nil {
				return err
			}
			appendRandom(t, e.l, rand.New(rand.NewPCG(9, 9)), 3, clock, 7)
			return nil
		}, false},
		{"DeleteRecords inside the first source", func(t *testing.T, e env) error {
			_, err := e.l.DeleteRecordsBefore(e.from + 1)
			return err
		}, false},
		{"retention of segments before the sources", func(t *testing.T, e env) error {
			_, err := e.l.DeleteRecordsBefore(e.from)
			return err
		}, false},
		{"appends and rolls", func(t *testing.T, e env) error {
			appendRandom(t, e.l, rand.New(rand.NewPCG(9, 9)), 40, clock, 7)
			return nil
		}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l := leaderLog(t, dir, clock, 150)
			defer l.Close()
			e := env{l: l, old: readAll(t, l, 1<<20), bases: segmentBases(l)}
			e.from, e.to = e.bases[2], e.bases[6]

			rw, err := l.BeginRewrite(e.from, e.to)
			if err != nil {
				t.Fatal(err)
			}
			defer rw.Abort()
			// Half the work before the change, half after.
			mid := e.bases[4]
			copyBatch := func(b []byte) error {
				if keep, empty := thinOut(decodeHeader(b)); keep && empty {
					return rw.Append(emptied(b))
				} else if keep {
					return rw.Append(bytes.Clone(b))
				}
				return nil
			}
			if err := rw.Scan(e.from, func(b []byte) error {
				if decodeHeader(b).BaseOffset >= mid {
					return ErrStopScan
				}
				return copyBatch(b)
			}); err != nil {
				t.Fatal(err)
			}
			if err := within(t, tt.name, func() error { return tt.op(t, e) }); err != nil {
				t.Fatal(err)
			}
			closed := tt.name == "Close" || tt.name == "Delete"
			var before []byte
			var start, end int64
			if !closed {
				before, start, end = readAll(t, l, 1<<20), l.StartOffset(), l.EndOffset()
			}
			err = rw.Scan(mid, copyBatch)
			if err != nil && !(tt.conflict && errors.Is(err, ErrRewriteConflict)) {
				t.Fatalf("Scan after the change: %v", err)
			}
			if err == nil {
				err = rw.Commit(e.to)
			} else {
				rw.Abort() // as a caller does when Scan fails
			}
			if !tt.conflict {
				if err != nil {
					t.Fatalf("Commit: %v", err)
				}
				want := applyPlan(t, before, e.from, e.to, thinOut)
				checkLogHolds(t, l, want, start, end)
				noRewriteFiles(t, dir)
				return
			}
			if !errors.Is(err, ErrRewriteConflict) {
				t.Fatalf("Commit after the change = %v, want ErrRewriteConflict", err)
			}
			if tt.name == "Delete" {
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the deleted log's directory is back: %v", err)
				}
				return
			}
			noRewriteFiles(t, dir)
			if closed {
				l = mustOpen(t, dir, smallCfg(clock))
				defer l.Close()
				before, start, end = e.old, 0, l.EndOffset()
			}
			checkLogHolds(t, l, before, start, end)
			if c, at := l.CleanerCheckpoint(); c != l.StartOffset() || !at.IsZero() {
				t.Fatalf("CleanerCheckpoint after a conflict = %d, %v", c, at)
			}
			// The segments are free for the next rewrite.
			bases := segmentBases(l)
			if len(bases) > 2 {
				if err := rewriteWith(t, l, bases[0], bases[len(bases)-2], thinOut, 1<<30); err != nil {
					t.Fatalf("rewriting after the conflict: %v", err)
				}
			}
		})
	}
}

// Readers running through swaps get, from each Read, whole batches the log
// held at some point (the old ones or their compacted versions), in offset
// order, starting at the batch that holds the offset asked for; appends go
// on meanwhile.
func TestRewriteConcurrentReaders(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := leaderLog(t, dir, clock, 200)
	old := readAll(t, l, 1<<20)
	bases := segmentBases(l)
	// Reopened, the closed segments' indexes are loaded lazily, by the
	// readers, while their files are being replaced.
	l.Close()
	l = mustOpen(t, dir, smallCfg(clock))
	defer l.Close()
	first, last := bases[1], bases[len(bases)-2]
	sparse := func(h BatchHeader) (bool, bool) { return h.BaseOffset%7 != 0, false }
	gen1 := applyPlan(t, old, first, last, thinOut)
	gen2 := applyPlan(t, gen1, first, last, sparse)
	valid := map[int64][][]byte{}
	for _, gen := range [][]byte{old, gen1, gen2} {
		for _, b := range batchesOf(t, gen) {
			off := decodeHeader(b).BaseOffset
			if !slices.ContainsFunc(valid[off], func(v []byte) bool { return bytes.Equal(v, b) }) {
				valid[off] = append(valid[off], b)
			}
		}
	}
	oldEnd := l.EndOffset()

	var wg sync.WaitGroup
	stop := make(chan struct{})
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 11))
			for {
				select {
				case <-stop:
					return
				default:
				}
				end := min(l.EndOffset(), oldEnd)
				off := rng.Int64N(end)
				out, err := l.Read(nil, off, end, rng.IntN(16<<10))
				if err != nil {
					t.Error(err)
					return
				}
				prev := off - 1
				for i, b := range batchesOfErr(out) {
					h := decodeHeader(b)
					if !slices.ContainsFunc(valid[h.BaseOffset], func(v []byte) bool { return bytes.Equal(v, b) }) {
						t.Errorf("Read(%d) got a batch at %d (%d bytes) the log never held", off, h.BaseOffset, len(b))
						return
					}
					if h.LastOffset() <= prev || (i > 0 && h.BaseOffset <= prev) {
						t.Errorf("Read(%d) got batch [%d, %d] after offset %d", off, h.BaseOffset, h.LastOffset(), prev)
						return
					}
					prev = h.LastOffset()
				}
				if rng.IntN(4) == 0 {
					l.MaxTimestamp()
					if _, _, _, err := l.OffsetForTimestamp(clock.Millis() + rng.Int64N(200)); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	var appended []byte
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(12, 12))
		for i := 0; i < 60; i++ {
			b := encodeBatch(t, batchSpec{values: values(1+rng.IntN(5), rng.IntN(400), byte(i)), firstTs: clock.Millis()})
			info, err := l.Append(b, 6)
			if err != nil {
				t.Error(err)
				return
			}
			appended = append(appended, stamped(b, info.BaseOffset, 6)...)
		}
	}()

	// The first pass in three parts, the second over all of it at once.
	for i := 1; i+3 <= len(bases)-2; i += 3 {
		to := bases[min(i+3, len(bases)-2)]
		if i+6 > len(bases)-2 {
			to = last
		}
		if err := rewriteWith(t, l, bases[i], to, thinOut, 2<<10); err != nil {
			t.Fatal(err)
		}
		if to == last {
			break
		}
	}
	if err := rewriteWith(t, l, first, last, sparse, 4<<10); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		return
	}
	want := append(bytes.Clone(gen2), appended...)
	checkLogHolds(t, l, want, 0, l.EndOffset())
	l.Close()
	l = mustOpen(t, dir, smallCfg(clock))
	checkLogHolds(t, l, want, 0, l.EndOffset())
}

// A reader that pinned a source before the swap reads it to the end
// through its own descriptor, even when the source's index was never
// loaded and an output now has its file names; letting it go leaves the
// output's files alone.
func TestRewritePinnedSourceOutlivesSwap(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := leaderLog(t, dir, clock, 150)
	old := readAll(t, l, 1<<20)
	bases := segmentBases(l)
	l.Close()
	l = mustOpen(t, dir, smallCfg(clock))
	defer l.Close()
	// One source, one output: the output's index fits the old segment's
	// range and size, so only knowing it is not the old one's keeps the
	// old one from using it.
	from, to := bases[2], bases[3]

	l.mu.RLock()
	src := l.mu.segs[2]
	src.pin()
	size, interval := src.size, l.mu.interval
	l.mu.RUnlock()
	src.imu.Lock()
	loaded := src.ix.loaded
	src.imu.Unlock()
	if loaded || src.base != from {
		t.Fatalf("segment %d: index loaded %v before any read", src.base, loaded)
	}
	if err := rewriteWith(t, l, from, to, thinOut, 1<<30); err != nil {
		t.Fatal(err)
	}
	want := applyPlan(t, old, from, to, thinOut)
	checkLogHolds(t, l, want, 0, l.EndOffset())

	// Every offset of the old segment, read through the pinned one.
	srcEnd := to
	for off := from; off < srcEnd; off++ {
		got, found, err := src.read(nil, off, srcEnd, 1, size, srcEnd, interval, l.logger)
		if err != nil || !found {
			t.Fatalf("pinned source: Read(%d) = %v, %v", off, found, err)
		}
		var wantB []byte
		for _, b := range batchesOf(t, old) {
			if decodeHeader(b).LastOffset() >= off {
				wantB = b
				break
			}
		}
		if !bytes.Equal(got, wantB) {
			t.Fatalf("pinned source: Read(%d) returned %d bytes, not the old batch holding it", off, len(got))
		}
	}
	if _, _, ok, err := src.findTimestamp(0, from, size, interval, l.logger); err != nil || !ok {
		t.Fatalf("pinned source: timestamp lookup %v, %v", ok, err)
	}
	if err := src.remove(); err != nil {
		t.Fatal(err)
	}
	src.unpin()
	for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if !fileExists(offsetName(dir, from, suffix)) {
			t.Fatalf("dropping the old segment removed the new %s", suffix)
		}
	}
	checkLogHolds(t, l, want, 0, l.EndOffset())
	l.Close()
	l = mustOpen(t, dir, smallCfg(clock))
	checkLogHolds(t, l, want, 0, l.EndOffset())
}

// Truncation below the cleaner checkpoint lowers it, as Kafka's log
// manager does: the batches a follower writes there again are not
// compacted, and a checkpoint left above them would say they were.
func TestCleanerCheckpointFollowsTruncation(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := leaderLog(t, dir, clock, 150)
	old := readAll(t, l, 1<<20)
	bases := segmentBases(l)
	if err := rewriteWith(t, l, bases[1], bases[5], thinOut, 1<<30); err != nil {
		t.Fatal(err)
	}
	newEnd, err := l.TruncateTo(bases[3] + 1)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := l.CleanerCheckpoint(); c > newEnd {
		t.Fatalf("CleanerCheckpoint %d after truncating to %d", c, newEnd)
	}
	// The follower copies the leader's uncompacted batches again.
	var again []byte
	for _, b := range batchesOf(t, old) {
		if decodeHeader(b).BaseOffset >= newEnd {
			again = append(again, b...)
		}
	}
	if _, err := l.AppendReplica(again); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = mustOpen(t, dir, smallCfg(clock))
	if c, _ := l.CleanerCheckpoint(); c > newEnd {
		t.Fatalf("CleanerCheckpoint %d after reopening, truncated to %d", c, newEnd)
	}
	// A restart below it starts the log clean of any claim.
	bases = segmentBases(l)
	if err := rewriteWith(t, l, bases[0], bases[len(bases)-1], thinOut, 1<<30); err != nil {
		t.Fatal(err)
	}
	restart := bases[len(bases)-1] - 1
	if err := l.TruncateFullyAndStartAt(restart, History{}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = mustOpen(t, dir, smallCfg(clock))
	defer l.Close()
	if c, _ := l.CleanerCheckpoint(); c != restart {
		t.Fatalf("CleanerCheckpoint %d after restarting the log at %d", c, restart)
	}
}

// A swap record whose new segment has vanished stops Open rather than let
// it delete the old segments: the old data is all there is.
func TestRewriteSwapMissingOutput(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := leaderLog(t, dir, clock, 100)
	bases := segmentBases(l)
	from, to := bases[1], bases[4]
	var crashDir string
	l.testHook = func(point string) {
		if point == "swap recorded" {
			crashDir = copyDir(t, dir)
		}
	}
	if err := rewriteWith(t, l, from, to, thinOut, 2<<10); err != nil {
		t.Fatal(err)
	}
	// An output at a base no old segment had: its .log.cleaned is all
	// there is of it.
	lost := int64(-1)
	for _, base := range segmentBases(l) {
		if base > from && base < to && !slices.Contains(bases, base) {
			lost = base
			break
		}
	}
	l.Close()
	if lost < 0 {
		t.Fatal("no output at a new base")
	}
	if err := os.Remove(cleanedName(crashDir, lost, logSuffix)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(crashDir, smallCfg(clock)); err == nil {
		t.Fatal("Open finished a swap whose new segment is gone")
	}
	for _, base := range bases[2:4] {
		if !fileExists(offsetName(crashDir, base, logSuffix)) {
			t.Fatalf("the old segment %d was deleted", base)
		}
	}
}

// The swap record decodes to what was encoded, and any damage to it is
// refused without a panic: Open then stops rather than guess which
// segments are the log's.
func TestSwapRecordDamage(t *testing.T) {
	in := swapIntent{mark: cleanerMark{cleanedTo: 4096, at: time.UnixMilli(1_700_000_000_123)}, srcs: []int64{100, 200, 300}, outs: []int64{100, 250}}
	b := in.encode()
	got, ok := decodeSwap(b)
	if !ok || got.mark != in.mark || !slices.Equal(got.srcs, in.srcs) || !slices.Equal(got.outs, in.outs) {
		t.Fatalf("decodeSwap(encode(%+v)) = %+v, %v", in, got, ok)
	}
	for n := range len(b) {
		if _, ok := decodeSwap(b[:n]); ok {
			t.Fatalf("a record cut to %d bytes decodes", n)
		}
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x10
		if _, ok := decodeSwap(c); ok {
			t.Fatalf("a record with byte %d flipped decodes", i)
		}
	}

	clock := newClock()
	dir := t.TempDir()
	l := leaderLog(t, dir, clock, 40)
	l.Close()
	b[len(b)-1] ^= 1
	if err := os.WriteFile(swapName(dir, 0), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, smallCfg(clock)); err == nil || !strings.Contains(err.Error(), swapSuffix) {
		t.Fatalf("Open with a damaged swap record: %v", err)
	}
}
