package segment

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
)

// keptBatches returns the batches of old (concatenated) whose last offset
// is below end: what a log truncated to end still holds.
func keptBatches(t testing.TB, old []byte, end int64) []byte {
	t.Helper()
	var out []byte
	for _, b := range batchesOf(t, old) {
		if decodeHeader(b).LastOffset() < end {
			out = append(out, b...)
		}
	}
	return out
}

// batchEnds lists the offsets where batches of old end: the only ends a
// truncated log may have, and the boundary TruncateTo(offset) goes back to.
func batchEnds(t testing.TB, old []byte) []int64 {
	var ends []int64
	for _, b := range batchesOf(t, old) {
		h := decodeHeader(b)
		if len(ends) == 0 {
			ends = append(ends, h.BaseOffset)
		}
		ends = append(ends, h.LastOffset()+1)
	}
	return ends
}

// boundaryAtOrBelow is the end of the last batch wholly below offset.
func boundaryAtOrBelow(ends []int64, offset int64) int64 {
	i := sort.Search(len(ends), func(i int) bool { return ends[i] > offset })
	return ends[i-1]
}

// referenceLog builds, in dir, the log a follower gets by replicating the
// given batches one by one.
func referenceLog(t *testing.T, dir string, clock *fakeClock, batches []byte) *Log {
	t.Helper()
	l := mustOpen(t, dir, smallCfg(clock))
	for _, b := range batchesOf(t, batches) {
		if _, err := l.AppendReplica(b); err != nil {
			t.Fatalf("reference AppendReplica: %v", err)
		}
	}
	return l
}

// epochsOf derives the leader-epoch history from batches, as the log
// must hold it.
func epochsOf(t testing.TB, batches []byte) []epochEntry {
	var es []epochEntry
	for _, b := range batchesOf(t, batches) {
		h := decodeHeader(b)
		if n := len(es); h.LeaderEpoch >= 0 && (n == 0 || h.LeaderEpoch > es[n-1].epoch) {
			es = append(es, epochEntry{h.LeaderEpoch, h.BaseOffset})
		}
	}
	return es
}

func logEpochs(l *Log) []epochEntry {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return slices.Clone(l.mu.epochs)
}

// sameProducers reports whether the producer states agree on everything
// but when each producer last wrote.
func sameProducers(a, b map[int64]*producerEntry) bool {
	if len(a) != len(b) {
		return false
	}
	for id, e := range a {
		f, ok := b[id]
		if !ok || e.epoch != f.epoch || e.n != f.n || e.batches != f.batches {
			return false
		}
	}
	return true
}

func replayProducers(t testing.TB, batches []byte) map[int64]*producerEntry {
	m := map[int64]*producerEntry{}
	for _, b := range batchesOf(t, batches) {
		h := decodeHeader(b)
		mk, isMarker, err := markerOf(&h, b)
		if err != nil {
			t.Fatal(err)
		}
		applyProducerBatch(m, &h, mk, isMarker, 0)
	}
	return m
}

func TestTruncateTo(t *testing.T) {
	clock := newClock()
	src := leaderLog(t, t.TempDir(), clock, 150)
	old := readAll(t, src, 1<<20)
	segBases := segmentBases(src)
	srcEnd := src.EndOffset()
	src.Close()
	if len(segBases) < 6 {
		t.Fatalf("only %d segments", len(segBases))
	}
	ends := batchEnds(t, old)
	lastSeg := segBases[len(segBases)-1]
	// The active segment's batches: one boundary and one inside a batch.
	var activeBoundary, activeInside int64 = -1, -1
	for _, b := range batchesOf(t, old) {
		h := decodeHeader(b)
		if h.BaseOffset > lastSeg && activeBoundary < 0 {
			activeBoundary = h.BaseOffset
		}
		if h.BaseOffset > lastSeg && h.LastOffsetDelta > 0 && activeInside < 0 {
			activeInside = h.BaseOffset + 1
		}
	}
	var earlyInside int64 = -1
	for _, b := range batchesOf(t, old) {
		if h := decodeHeader(b); h.BaseOffset > segBases[2] && h.LastOffsetDelta > 1 {
			earlyInside = h.BaseOffset + 2
			break
		}
	}
	if activeBoundary < 0 || activeInside < 0 || earlyInside < 0 {
		t.Fatal("the log has no batch for some case")
	}
	// sameFiles: the reference log has the same segments. Truncating to a
	// segment's base keeps that segment, empty, as the active one, where
	// a follower that never went past it has not rolled yet.
	tests := []struct {
		name      string
		offset    int64
		sameFiles bool
	}{
		{"active segment at a batch boundary", activeBoundary, true},
		{"active segment inside a batch", activeInside, true},
		{"at the active segment's base", lastSeg, false},
		{"at an older segment boundary", segBases[3], false},
		{"inside a batch several segments back", earlyInside, true},
		{"everything", 0, true},
		{"the last batch", ends[len(ends)-2] + 1, true},
		{"at the end: nothing", srcEnd, true},
		{"past the end: nothing", srcEnd + 100, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l := referenceLog(t, dir, clock, old)
			newEnd, err := l.TruncateTo(tt.offset)
			if err != nil {
				t.Fatalf("TruncateTo(%d): %v", tt.offset, err)
			}
			want := min(boundaryAtOrBelow(ends, tt.offset), srcEnd)
			if newEnd != want || l.EndOffset() != want {
				t.Fatalf("TruncateTo(%d) = %d, EndOffset %d; want %d", tt.offset, newEnd, l.EndOffset(), want)
			}
			kept := keptBatches(t, old, newEnd)
			if got := readAll(t, l, 1<<20); !bytes.Equal(got, kept) {
				t.Fatalf("read %d bytes after truncation, want the %d bytes below %d", len(got), len(kept), newEnd)
			}
			if got := readAll(t, l, 1); !bytes.Equal(got, kept) {
				t.Fatal("batch-by-batch read differs")
			}
			if l.Size() != int64(len(kept)) {
				t.Fatalf("Size %d, want %d", l.Size(), len(kept))
			}
			if _, err := l.Read(nil, newEnd+1, newEnd+10, 100); !errors.Is(err, ErrOffsetOutOfRange) {
				t.Fatalf("Read past the new end: %v", err)
			}
			if got, want := logEpochs(l), epochsOf(t, kept); !slices.Equal(got, want) {
				t.Fatalf("epochs %v, want %v", got, want)
			}
			if !sameProducers(l.w.producers, replayProducers(t, kept)) {
				t.Fatal("producer state does not match the kept batches")
			}
			for _, name := range dirNames(t, dir) {
				if off, _, ok := parseOffsetName(name); ok && off > newEnd {
					t.Fatalf("%s is still there after truncating to %d", name, newEnd)
				}
			}

			// The truncated log is the log a follower would have built from
			// the kept batches: same answers, and after Close the same files.
			refDir := t.TempDir()
			ref := referenceLog(t, refDir, clock, kept)
			for ep := int32(-1); ep <= 6; ep++ {
				re, rep := ref.EndOffsetForEpoch(ep)
				if e, p := l.EndOffsetForEpoch(ep); e != re || p != rep {
					t.Fatalf("EndOffsetForEpoch(%d) = %d,%d; reference %d,%d", ep, e, p, re, rep)
				}
			}
			rts, roff := ref.MaxTimestamp()
			if ts, off := l.MaxTimestamp(); ts != rts || off != roff {
				t.Fatalf("MaxTimestamp %d@%d; reference %d@%d", ts, off, rts, roff)
			}
			// Appends carry on at the new end, in both.
			more := append(replicaBatch(t, newEnd, 9, batchSpec{values: values(3, 50, 1), firstTs: clock.Millis()}),
				replicaBatch(t, newEnd+3, 9, batchSpec{values: values(2, 50, 2), firstTs: clock.Millis()})...)
			for _, lg := range []*Log{l, ref} {
				if info, err := lg.AppendReplica(more); err != nil || info.BaseOffset != newEnd {
					t.Fatalf("AppendReplica after truncation: %+v, %v", info, err)
				}
			}
			info := mustAppend(t, l, encodeBatch(t, batchSpec{values: values(2, 5, 0), firstTs: clock.Millis()}), 9)
			if info.BaseOffset != newEnd+5 {
				t.Fatalf("Append after truncation got offset %d, want %d", info.BaseOffset, newEnd+5)
			}
			mustAppend(t, ref, encodeBatch(t, batchSpec{values: values(2, 5, 0), firstTs: clock.Millis()}), 9)
			if !bytes.Equal(readAll(t, l, 1<<20), readAll(t, ref, 1<<20)) {
				t.Fatal("after more appends the log differs from the reference")
			}
			final := readAll(t, l, 1<<20)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			reopened := mustOpen(t, dir, smallCfg(clock))
			if got := readAll(t, reopened, 1); !bytes.Equal(got, final) || reopened.EndOffset() != newEnd+7 {
				t.Fatalf("after reopening: %d bytes, end %d; want %d bytes, end %d", len(got), reopened.EndOffset(), len(final), newEnd+7)
			}
			if err := reopened.Close(); err != nil {
				t.Fatal(err)
			}
			if !tt.sameFiles {
				ref.Close()
				return
			}
			if err := ref.Close(); err != nil {
				t.Fatal(err)
			}
			lf, rf := dirFiles(t, dir), dirFiles(t, refDir)
			if !slices.Equal(slices.Sorted(mapKeys(lf)), slices.Sorted(mapKeys(rf))) {
				t.Fatalf("files %v, reference %v", slices.Sorted(mapKeys(lf)), slices.Sorted(mapKeys(rf)))
			}
			for name, b := range lf {
				if !bytes.Equal(b, rf[name]) {
					t.Fatalf("%s differs from the reference", name)
				}
			}
		})
	}
}

func dirNames(t testing.TB, dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestTruncateToRefuses(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, smallCfg(clock))
	defer l.Close()
	appendRandom(t, l, rand.New(rand.NewPCG(3, 3)), 60, clock, 0)
	l.SetConfig(Config{SegmentBytes: 8 << 10, IndexIntervalBytes: 512, RetentionBytes: 20 << 10})
	if err := l.Maintain(); err != nil {
		t.Fatal(err)
	}
	start, end := l.StartOffset(), l.EndOffset()
	if start == 0 {
		t.Fatal("retention deleted nothing")
	}
	if _, err := l.TruncateTo(start - 1); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Fatalf("TruncateTo below the start: %v", err)
	}
	if l.EndOffset() != end || l.StartOffset() != start {
		t.Fatal("a refused truncation changed the log")
	}
	// At the start offset the log is empty and carries on from there.
	if newEnd, err := l.TruncateTo(start); err != nil || newEnd != start {
		t.Fatalf("TruncateTo(start) = %d, %v", newEnd, err)
	}
	if info := mustAppend(t, l, encodeBatch(t, batchSpec{values: values(1, 5, 0), firstTs: clock.Millis()}), 1); info.BaseOffset != start {
		t.Fatalf("append after truncating everything got offset %d", info.BaseOffset)
	}
	l.Close()
	if _, err := l.TruncateTo(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("TruncateTo after Close: %v", err)
	}
}

// Readers running while the log is truncated and refilled with other
// batches never see a torn batch or bytes from past the end they were
// given: every batch they get is one the log held at some point at that
// offset.
func TestTruncateConcurrentReads(t *testing.T) {
	clock := newClock()
	cfg := smallCfg(clock)
	// Two histories that share a prefix and then diverge.
	a := mustOpen(t, t.TempDir(), cfg)
	defer a.Close()
	b := mustOpen(t, t.TempDir(), cfg)
	defer b.Close()
	rng := rand.New(rand.NewPCG(4, 4))
	common := appendRandom(t, a, rng, 40, clock, 1)
	if _, err := b.AppendReplica(common); err != nil {
		t.Fatal(err)
	}
	split := a.EndOffset()
	histA := append(bytes.Clone(common), appendRandom(t, a, rng, 60, clock, 2)...)
	histB := append(bytes.Clone(common), appendRandom(t, b, rng, 60, clock, 3)...)
	valid := map[int64][][]byte{}
	for _, hist := range [][]byte{histA, histB} {
		for _, bt := range batchesOf(t, hist) {
			off := decodeHeader(bt).BaseOffset
			valid[off] = append(valid[off], bt)
		}
	}

	l := mustOpen(t, t.TempDir(), cfg)
	defer l.Close()
	if _, err := l.AppendReplica(histA); err != nil {
		t.Fatal(err)
	}
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
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				end := l.EndOffset()
				out, err := l.Read(nil, rng.Int64N(end+1), end, rng.IntN(32<<10))
				if err != nil && !errors.Is(err, ErrOffsetOutOfRange) {
					t.Error(err)
					return
				}
				for _, bt := range batchesOfErr(out) {
					h := decodeHeader(bt)
					if !slices.ContainsFunc(valid[h.BaseOffset], func(v []byte) bool { return bytes.Equal(v, bt) }) {
						t.Errorf("reader got a batch at %d (%d bytes) the log never held", h.BaseOffset, len(bt))
						return
					}
				}
				if out == nil && err == nil && end > 0 && rng.IntN(2) == 0 {
					l.MaxTimestamp()
					l.OffsetForTimestamp(clock.Millis())
				}
			}
		}()
	}
	for i := range 30 {
		hist := histA
		if i%2 == 0 {
			hist = histB
		}
		// Truncate a little below the split point sometimes, to cut
		// closed segments too.
		to := split - int64(rng.IntN(20))
		newEnd, err := l.TruncateTo(to)
		if err != nil {
			t.Fatal(err)
		}
		rest := hist[len(keptBatches(t, hist, newEnd)):]
		for len(rest) > 0 {
			n := min(len(rest), 1+rng.IntN(20<<10))
			info, err := l.AppendReplica(rest[:n])
			if err != nil {
				t.Fatal(err)
			}
			rest = rest[info.Bytes:]
		}
	}
	close(stop)
	wg.Wait()
	if got := readAll(t, l, 1<<20); !bytes.Equal(got, histA) {
		t.Fatal("the log does not end as the last history it copied")
	}
}

// batchesOfErr splits a Read result; a Read result is whole batches.
func batchesOfErr(b []byte) [][]byte {
	var out [][]byte
	for len(b) >= headerSize {
		h := decodeHeader(b)
		if h.Size() > len(b) || h.Size() < headerSize {
			return append(out, b)
		}
		out = append(out, b[:h.Size()])
		b = b[h.Size():]
	}
	if len(b) > 0 {
		out = append(out, b)
	}
	return out
}

// copyDir copies the files of src into a new directory: what a crash at
// this moment would leave on disk, every write before it being durable.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	for _, name := range dirNames(t, src) {
		in, err := os.Open(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		out.Close()
	}
	return dst
}

// A crash at any step of TruncateTo leaves a log that Open recovers to a
// prefix of the old one, no shorter than the truncation asked for, with
// its indexes, epochs and producer state matching its batches.
func TestTruncateToCrashSafe(t *testing.T) {
	clock := newClock()
	src := leaderLog(t, t.TempDir(), clock, 150)
	old := readAll(t, src, 1<<20)
	bases := segmentBases(src)
	src.Close()
	ends := batchEnds(t, old)
	for _, offset := range []int64{bases[len(bases)-1] + 3, bases[2] + 1, 0} {
		dir := t.TempDir()
		l := referenceLog(t, dir, clock, old)
		var crashes []string
		var points []string
		l.testHook = func(point string) {
			points = append(points, point)
			crashes = append(crashes, copyDir(t, dir))
		}
		newEnd, err := l.TruncateTo(offset)
		if err != nil {
			t.Fatal(err)
		}
		l.Close()
		if len(crashes) < 4 {
			t.Fatalf("only %d crash points: %v", len(crashes), points)
		}
		for i, cdir := range crashes {
			c := mustOpen(t, cdir, smallCfg(clock))
			got := readAll(t, c, 1<<20)
			end := c.EndOffset()
			switch {
			case !bytes.HasPrefix(old, got):
				t.Fatalf("offset %d, crash at %q: the log is not a prefix of the old one", offset, points[i])
			case end < newEnd || !slices.Contains(ends, end) || int64(len(got)) != c.Size():
				t.Fatalf("offset %d, crash at %q: end %d (truncating to %d), size %d for %d bytes", offset, points[i], end, newEnd, c.Size(), len(got))
			case !bytes.Equal(got, keptBatches(t, old, end)):
				t.Fatalf("offset %d, crash at %q: batches are not the old ones below %d", offset, points[i], end)
			}
			if !slices.Equal(logEpochs(c), epochsOf(t, got)) {
				t.Fatalf("offset %d, crash at %q: epochs %v, batches say %v", offset, points[i], logEpochs(c), epochsOf(t, got))
			}
			if !sameProducers(c.w.producers, replayProducers(t, got)) {
				t.Fatalf("offset %d, crash at %q: producer state does not match the batches", offset, points[i])
			}
			if got1 := readAll(t, c, 1); !bytes.Equal(got1, got) {
				t.Fatalf("offset %d, crash at %q: batch-by-batch reads differ", offset, points[i])
			}
			// The truncation can be done again, and appends carry on.
			if e, err := c.TruncateTo(offset); err != nil || e != newEnd {
				t.Fatalf("offset %d, crash at %q: TruncateTo again = %d, %v", offset, points[i], e, err)
			}
			if info := mustAppend(t, c, encodeBatch(t, batchSpec{values: values(2, 5, 0), firstTs: clock.Millis()}), 9); info.BaseOffset != newEnd {
				t.Fatalf("offset %d, crash at %q: append at %d, want %d", offset, points[i], info.BaseOffset, newEnd)
			}
			c.Close()
		}
	}
}

// Kafka's follower empties its log and starts at the leader's offset when
// the leader's log starts above its own end, or from the leader's local
// log start when older data is only in the bucket.
func TestTruncateFullyAndStartAt(t *testing.T) {
	clock := newClock()
	for _, tt := range []struct {
		name   string
		offset int64
	}{
		{"above the end", 1000},
		{"inside the log", 37},
		{"at an existing segment's base", -1}, // filled in below
		{"zero", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l := mustOpen(t, dir, smallCfg(clock))
			appendRandom(t, l, rand.New(rand.NewPCG(5, 5)), 60, clock, 3)
			mustAppend(t, l, idemBatch(t, clock, 7, 0, 0, 2), 4)
			offset := tt.offset
			if offset < 0 {
				offset = segmentBases(l)[2]
			}
			if err := l.TruncateFullyAndStartAt(offset, History{}); err != nil {
				t.Fatal(err)
			}
			check := func(l *Log) {
				t.Helper()
				if l.StartOffset() != offset || l.EndOffset() != offset || l.Size() != 0 || l.LatestEpoch() != -1 {
					t.Fatalf("start %d end %d size %d epoch %d; want an empty log at %d", l.StartOffset(), l.EndOffset(), l.Size(), l.LatestEpoch(), offset)
				}
				if out, err := l.Read(nil, offset, offset+10, 100); err != nil || len(out) != 0 {
					t.Fatalf("Read at the start: %d bytes, %v", len(out), err)
				}
				if _, err := l.Read(nil, offset-1, offset+10, 100); offset > 0 && !errors.Is(err, ErrOffsetOutOfRange) {
					t.Fatalf("Read below the start: %v", err)
				}
				if e, ep := l.EndOffsetForEpoch(3); e != -1 || ep != -1 {
					t.Fatalf("EndOffsetForEpoch(3) = %d, %d after the epochs were dropped", e, ep)
				}
				if len(l.w.producers) != 0 {
					t.Fatalf("producer state survived: %d producers", len(l.w.producers))
				}
			}
			check(l)
			if names := dirNames(t, dir); len(names) != 4 { // the segment's 3 files and the checkpoint
				t.Fatalf("files left: %v", names)
			}
			// Clean and unclean reopen both keep the start.
			l.Close()
			l = mustOpen(t, dir, smallCfg(clock))
			check(l)
			crash(l)
			l = mustOpen(t, dir, smallCfg(clock))
			check(l)
			defer l.Close()
			// Replication carries on from offset, as the leader's batches come.
			b := replicaBatch(t, offset, 6, batchSpec{values: values(3, 5, 0), idem: true, pid: 7, seq: 40, firstTs: clock.Millis()})
			if info, err := l.AppendReplica(b); err != nil || info.BaseOffset != offset {
				t.Fatalf("AppendReplica at the new start: %+v, %v", info, err)
			}
			info := mustAppend(t, l, encodeBatch(t, batchSpec{values: values(1, 5, 0), firstTs: clock.Millis()}), 6)
			if info.BaseOffset != offset+3 || l.LatestEpoch() != 6 {
				t.Fatalf("append after the restart: %+v, epoch %d", info, l.LatestEpoch())
			}
			if got := readAll(t, l, 1<<20); !bytes.Equal(got[:len(b)], b) {
				t.Fatal("replicated batch not read back")
			}
		})
	}
}

// A crash at any step of TruncateFullyAndStartAt leaves either the old log
// or the new empty one, never a mix.
func TestTruncateFullyCrashSafe(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, smallCfg(clock))
	old := appendRandom(t, l, rand.New(rand.NewPCG(6, 6)), 60, clock, 3)
	oldEnd := l.EndOffset()
	var crashes, points []string
	l.testHook = func(point string) {
		points = append(points, point)
		crashes = append(crashes, copyDir(t, dir))
	}
	const offset = 25
	if err := l.TruncateFullyAndStartAt(offset, History{}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if len(crashes) < 4 {
		t.Fatalf("only %d crash points: %v", len(crashes), points)
	}
	sawOld, sawNew := false, false
	for i, cdir := range crashes {
		c := mustOpen(t, cdir, smallCfg(clock))
		got := readAll(t, c, 1<<20)
		switch {
		case c.StartOffset() == 0 && c.EndOffset() == oldEnd && bytes.Equal(got, old) && c.LatestEpoch() == 3:
			sawOld = true
		case c.StartOffset() == offset && c.EndOffset() == offset && len(got) == 0 && c.LatestEpoch() == -1 && len(c.w.producers) == 0:
			sawNew = true
		default:
			t.Fatalf("crash at %q: start %d end %d, %d bytes, epoch %d: neither the old log nor the new one", points[i], c.StartOffset(), c.EndOffset(), len(got), c.LatestEpoch())
		}
		c.Close()
	}
	if !sawOld || !sawNew {
		t.Fatalf("crash points saw old %v new %v: %v", sawOld, sawNew, points)
	}
}

// OffsetForLeaderEpoch (KIP-101, KIP-279) as a Kafka leader answers it. A
// Kafka leader records its epoch at its log end offset when elected, so
// an epoch above every written one is answered with the log end and the
// latest written epoch, as that entry would give.
func TestEndOffsetForEpochTable(t *testing.T) {
	hist := []epochEntry{{1, 0}, {3, 6}, {5, 12}}
	tests := []struct {
		name      string
		epochs    []epochEntry
		requested int32
		leo       int64
		wantEnd   int64
		wantEpoch int32
	}{
		{"no history", nil, 0, 10, -1, -1},
		{"no history, undefined", nil, -1, 10, -1, -1},
		{"undefined epoch", hist, -1, 16, -1, -1},
		{"latest epoch: the log end", hist, 5, 16, 16, 5},
		{"above the latest: log end, latest epoch", hist, 6, 16, 16, 5},
		{"far above the latest", hist, 100, 16, 16, 5},
		{"known epoch: the next epoch's start", hist, 3, 16, 12, 3},
		{"first epoch", hist, 1, 16, 6, 1},
		{"unknown epoch between: next start, largest epoch below", hist, 4, 16, 12, 3},
		{"unknown epoch between, lower", hist, 2, 16, 6, 1},
		{"below every epoch: requested epoch, first start", hist, 0, 16, 0, 0},
		{"below every epoch after retention", []epochEntry{{4, 50}, {6, 70}}, 2, 90, 50, 2},
		{"one epoch, requested", []epochEntry{{2, 0}}, 2, 7, 7, 2},
		{"one epoch, above", []epochEntry{{2, 0}}, 3, 7, 7, 2},
		{"one epoch, below", []epochEntry{{2, 5}}, 1, 7, 5, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			end, ep := endOffsetForEpoch(tt.epochs, tt.requested, tt.leo)
			if end != tt.wantEnd || ep != tt.wantEpoch {
				t.Fatalf("endOffsetForEpoch(%v, %d, leo %d) = %d, %d; want %d, %d", tt.epochs, tt.requested, tt.leo, end, ep, tt.wantEnd, tt.wantEpoch)
			}
		})
	}
}

// After truncation the epochs answer for the log as it now ends.
func TestEndOffsetForEpochAfterTruncation(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now, SegmentBytes: 800})
	defer l.Close()
	for _, ep := range []int32{1, 1, 1, 3, 3, 5, 5} { // 2 records each: 1@0, 3@6, 5@10
		mustAppend(t, l, tsBatch(t, clock.Millis(), 2), ep)
	}
	if newEnd, err := l.TruncateTo(9); err != nil || newEnd != 8 {
		t.Fatalf("TruncateTo(9) = %d, %v", newEnd, err)
	}
	for _, c := range []struct {
		req       int32
		end       int64
		epoch     int32
		latestNow int32
	}{
		{3, 8, 3, 3}, // now the latest: the log end
		{5, 8, 3, 3}, // gone: above the latest
		{4, 8, 3, 3},
		{1, 6, 1, 3},
		{0, 0, 0, 3},
	} {
		if e, ep := l.EndOffsetForEpoch(c.req); e != c.end || ep != c.epoch || l.LatestEpoch() != c.latestNow {
			t.Fatalf("after truncation EndOffsetForEpoch(%d) = %d, %d (latest %d); want %d, %d (latest %d)", c.req, e, ep, l.LatestEpoch(), c.end, c.epoch, c.latestNow)
		}
	}
	// Truncating into the first epoch's batches drops the later ones.
	if _, err := l.TruncateTo(5); err != nil {
		t.Fatal(err)
	}
	if e, ep := l.EndOffsetForEpoch(1); e != 4 || ep != 1 || l.LatestEpoch() != 1 {
		t.Fatalf("EndOffsetForEpoch(1) = %d, %d, latest %d", e, ep, l.LatestEpoch())
	}
	// The new leader's epoch goes in after the cut.
	mustAppend(t, l, tsBatch(t, clock.Millis(), 2), 7)
	if e, ep := l.EndOffsetForEpoch(1); e != 4 || ep != 1 {
		t.Fatalf("EndOffsetForEpoch(1) after the new epoch = %d, %d", e, ep)
	}
	if e, ep := l.EndOffsetForEpoch(6); e != 4 || ep != 1 {
		t.Fatalf("EndOffsetForEpoch(6) = %d, %d", e, ep)
	}
}
