package segment

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"slices"
	"testing"
)

// compactedLeader is a leader's log after compaction, as batches: the
// originals (offsets 0-27) filtered by FilterBatch. The first batch and
// the one at 20 are gone (gaps before 5 and between 19 and 25), the one at
// 10 is the empty last batch of producer 2, the others lost records.
type compactedLeader struct {
	batches [][]byte // compacted, in offset order
	kept    map[int64]bool
	orig    []byte // the original batches, concatenated
}

func newCompactedLeader(t *testing.T, clock *fakeClock) compactedLeader {
	t.Helper()
	ts := clock.Millis()
	type plan struct {
		spec  batchSpec
		base  int64
		n     int
		keep  []int64
		empty bool
	}
	plans := []plan{
		{batchSpec{idem: true, pid: 1, seq: 0, firstTs: ts}, 0, 5, nil, false},
		{batchSpec{idem: true, pid: 1, seq: 5, firstTs: ts, codec: codecGzip}, 5, 5, []int64{6, 8}, false},
		{batchSpec{idem: true, pid: 2, seq: 0, firstTs: ts}, 10, 5, nil, true},
		{batchSpec{idem: true, pid: 1, seq: 10, firstTs: ts, codec: codecZstd}, 15, 5, []int64{19}, false},
		{batchSpec{firstTs: ts}, 20, 5, nil, false},
		{batchSpec{firstTs: ts, codec: codecLz4}, 25, 3, []int64{25, 26, 27}, false},
	}
	c := compactedLeader{kept: map[int64]bool{}}
	for _, p := range plans {
		b := compactedBatch(t, p.spec, p.base, 3, keyed(p.n))
		c.orig = append(c.orig, b...)
		for _, o := range p.keep {
			c.kept[o] = true
		}
		out, res, err := FilterBatch(nil, b, keepOffsets(p.keep...), FilterOptions{RetainEmpty: p.empty})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Dropped {
			c.batches = append(c.batches, out)
		}
	}
	return c
}

// A follower copies a compacted leader's log as it is: gaps before its
// first batch and between batches, batches with fewer records than
// offsets, empty batches. It keeps them across a crash, and a read inside
// a gap returns the next batch holding a later offset.
func TestAppendReplicaAcceptsCompactedBatches(t *testing.T) {
	clock := newClock()
	c := newCompactedLeader(t, clock)
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Now: clock.Now})

	// The leader's log now starts at 5 for a follower fetching at 0.
	info, err := l.AppendReplica(c.batches[0])
	if err != nil {
		t.Fatalf("first batch above the log end: %v", err)
	}
	if info.BaseOffset != 5 || info.LastOffset != 9 || info.Records != 2 {
		t.Fatalf("first append: %+v", info)
	}
	rest := slices.Concat(c.batches[1:]...)
	if info, err = l.AppendReplica(rest); err != nil {
		t.Fatalf("batches with gaps between them: %v", err)
	}
	if info.Batches != 3 || info.LastOffset != 27 || l.EndOffset() != 28 {
		t.Fatalf("second append: %+v, end %d", info, l.EndOffset())
	}

	check := func(l *Log) {
		t.Helper()
		all := slices.Concat(c.batches...)
		if got := readAll(t, l, 1<<20); !bytes.Equal(got, all) {
			t.Fatal("stored bytes differ from the leader's")
		}
		sameRecords(t, clientRecords(t, readAll(t, l, 1<<20)), keepWhere(clientRecords(t, c.orig), func(o int64) bool { return c.kept[o] }))
		for _, tc := range []struct{ offset, wantBase int64 }{
			{0, 5},   // the gap before the first batch
			{7, 5},   // a record compaction removed inside a batch
			{12, 10}, // inside the empty batch
			{21, 25}, // the gap between batches
		} {
			got, err := l.Read(nil, tc.offset, l.EndOffset(), 1)
			if err != nil || len(got) == 0 {
				t.Fatalf("Read(%d): %d bytes, %v", tc.offset, len(got), err)
			}
			if h := decodeHeader(got); h.BaseOffset != tc.wantBase {
				t.Fatalf("Read(%d) starts at batch %d, want %d", tc.offset, h.BaseOffset, tc.wantBase)
			}
		}
	}
	check(l)

	crash(l) // no clean-shutdown marker: the active segment is re-validated
	l = mustOpen(t, dir, Config{Now: clock.Now})
	if l.EndOffset() != 28 {
		t.Fatalf("end offset %d after recovery, want 28", l.EndOffset())
	}
	check(l)
	if err := l.Close(); err != nil { // and through a clean shutdown
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Config{Now: clock.Now})
	defer l.Close()
	check(l)

	// The empty batch still carries producer 2's sequence range: its
	// retry is recognised on this replica once it leads.
	retry := compactedBatch(t, batchSpec{idem: true, pid: 2, seq: 0, firstTs: clock.Millis()}, 0, -1, keyed(5))
	dup, err := l.Append(retry, 3)
	if err != nil || !dup.Duplicate || dup.BaseOffset != 10 || dup.LastOffset != 14 {
		t.Fatalf("retry of the emptied batch: %+v, %v", dup, err)
	}
}

// Batches that no leader writes, compacted or not, are still refused.
func TestAppendReplicaRefusesImpossibleCompactedBatches(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()
	tooMany := compactedBatch(t, batchSpec{lastDelta: new(int32(1))}, 0, 0, keyed(3))
	negative := compactedBatch(t, batchSpec{count: -1}, 0, 0, nil)
	for name, b := range map[string][]byte{"more records than offsets": tooMany, "negative record count": negative} {
		if _, err := l.AppendReplica(b); !errors.Is(err, ErrInvalidRecord) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if l.EndOffset() != 0 || l.Size() != 0 {
		t.Fatalf("something was written: end %d size %d", l.EndOffset(), l.Size())
	}
}

// Recovery judges the active segment's batches as a follower does: a
// compacted batch stays, one claiming more records than offsets is a
// corrupt tail.
func TestRecoveryKeepsCompactedBatchesAndCutsImpossibleOnes(t *testing.T) {
	clock := newClock()
	c := newCompactedLeader(t, clock)
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Now: clock.Now})
	good := slices.Concat(c.batches...)
	if _, err := l.AppendReplica(good); err != nil {
		t.Fatal(err)
	}
	crash(l)
	// A CRC-valid batch after them that no log can hold.
	bad := compactedBatch(t, batchSpec{lastDelta: new(int32(0))}, 28, 3, keyed(2))
	path := offsetName(dir, 0, logSuffix)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bad); err != nil {
		t.Fatal(err)
	}
	f.Close()

	l = mustOpen(t, dir, Config{Now: clock.Now})
	defer l.Close()
	if l.EndOffset() != 28 {
		t.Fatalf("end offset %d, want 28", l.EndOffset())
	}
	if got := readAll(t, l, 1<<20); !bytes.Equal(got, good) {
		t.Fatal("recovery did not keep exactly the compacted batches")
	}
}

// A closed segment whose batches compaction all removed holds nothing: a
// read at an offset in its range goes on to the next segment.
func TestReadAcrossEmptiedSegment(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, smallCfg(clock))
	for i := range 40 {
		mustAppend(t, l, encodeBatch(t, batchSpec{values: values(4, 300, byte(i)), firstTs: clock.Millis()}), 0)
	}
	segs := l.mu.segs
	if len(segs) < 4 {
		t.Fatalf("%d segments", len(segs))
	}
	mid, next := segs[1].base, segs[2].base
	before := readAll(t, l, 1<<20)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// What a rewrite leaves when every batch of the segment went.
	for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		if err := os.Truncate(offsetName(dir, mid, suffix), 0); err != nil {
			t.Fatal(err)
		}
	}
	l = mustOpen(t, dir, smallCfg(clock))
	defer l.Close()
	got, err := l.Read(nil, mid+1, l.EndOffset(), 1)
	if err != nil || len(got) == 0 {
		t.Fatalf("Read(%d): %d bytes, %v", mid+1, len(got), err)
	}
	if h := decodeHeader(got); h.BaseOffset != next {
		t.Fatalf("Read(%d) returned the batch at %d, want the next segment's first at %d", mid+1, h.BaseOffset, next)
	}
	var want []byte
	for _, b := range batchesOf(t, before) {
		if h := decodeHeader(b); h.BaseOffset < mid || h.BaseOffset >= next {
			want = append(want, b...)
		}
	}
	if got := readAll(t, l, 1<<20); !bytes.Equal(got, want) {
		t.Fatal("reading the whole log across the emptied segment")
	}
}

// lastOffsetsOf is what the producer state should say about batches: the
// last offset of each producer's last data batch.
func lastOffsetsOf(t *testing.T, batches []byte) map[int64]int64 {
	t.Helper()
	want := map[int64]int64{}
	for _, b := range batchesOf(t, batches) {
		if h := decodeHeader(b); h.ProducerID >= 0 && !h.IsControl() {
			want[h.ProducerID] = h.LastOffset()
		}
	}
	return want
}

// Compaction keeps the last batch of each producer; the log and its
// snapshots say which batch that is.
func TestProducerLastOffsets(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, smallCfg(clock))
	if got := l.ProducerLastOffsets(); len(got) != 0 {
		t.Fatalf("empty log: %v", got)
	}
	seq := map[int64]int32{}
	for i := range 200 {
		pid := int64(1 + i%3)
		n := 1 + i%4
		if i%5 == 4 {
			mustAppend(t, l, encodeBatch(t, batchSpec{values: values(n, 100, byte(i)), firstTs: clock.Millis()}), 0)
			continue
		}
		mustAppend(t, l, idemBatch(t, clock, pid, 0, seq[pid], n), 0)
		seq[pid] += int32(n)
	}
	all := readAll(t, l, 1<<20)
	if got, want := l.ProducerLastOffsets(), lastOffsetsOf(t, all); !maps.Equal(got, want) {
		t.Fatalf("ProducerLastOffsets %v, want %v", got, want)
	}

	// Each roll's snapshot holds the state as of the segment's end.
	segs := l.mu.segs
	if len(segs) < 3 {
		t.Fatalf("%d segments", len(segs))
	}
	for _, s := range segs[1:] {
		snap, err := os.ReadFile(offsetName(dir, s.base, snapshotSuffix))
		if err != nil {
			t.Fatal(err)
		}
		var before []byte
		for _, b := range batchesOf(t, all) {
			if decodeHeader(b).BaseOffset < s.base {
				before = append(before, b...)
			}
		}
		if got, err := SnapshotLastOffsets(snap); err != nil || !maps.Equal(got, lastOffsetsOf(t, before)) {
			t.Fatalf("snapshot at %d: %v, %v; want %v", s.base, got, err, lastOffsetsOf(t, before))
		}
		bad := bytes.Clone(snap)
		bad[len(bad)-1] ^= 1
		if _, err := SnapshotLastOffsets(bad); err == nil {
			t.Fatal("a damaged snapshot was read")
		}
	}
	for _, b := range [][]byte{nil, {0, 1}, make([]byte, snapshotHeaderSize)} {
		if _, err := SnapshotLastOffsets(b); err == nil {
			t.Fatalf("snapshot %v was read", b)
		}
	}
	l.Close()

	// A follower of a compacted leader: the emptied batch is producer
	// 2's last, and it stays so across a restart.
	c := newCompactedLeader(t, clock)
	fdir := t.TempDir()
	f := mustOpen(t, fdir, Config{Now: clock.Now})
	compacted := slices.Concat(c.batches...)
	if _, err := f.AppendReplica(compacted); err != nil {
		t.Fatal(err)
	}
	want := lastOffsetsOf(t, compacted)
	if got := f.ProducerLastOffsets(); !maps.Equal(got, want) || got[2] != 14 {
		t.Fatalf("follower: %v, want %v", got, want)
	}
	crash(f)
	f = mustOpen(t, fdir, Config{Now: clock.Now})
	defer f.Close()
	if got := f.ProducerLastOffsets(); !maps.Equal(got, want) {
		t.Fatalf("after recovery: %v, want %v", got, want)
	}
}

// ListOffsets by timestamp names a record that is there: in a compacted
// LogAppendTime batch, the first kept record, and never an empty batch.
func TestOffsetForTimestampSkipsRemovedRecords(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()
	at := clock.Millis()
	lat := func(base int64, keep ...int64) []byte {
		b := compactedBatch(t, batchSpec{attrs: attrLogAppendTime, maxTs: i64(at + base), firstTs: at}, base, 0, keyed(4))
		out, _, err := FilterBatch(nil, b, keepOffsets(keep...), FilterOptions{RetainEmpty: true})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// [0,3]: empty; [4,7]: only 6 and 7 left; [8,11]: all there.
	if _, err := l.AppendReplica(slices.Concat(lat(0), lat(4, 6, 7), lat(8, 8, 9, 10, 11))); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ ts, want int64 }{{at, 6}, {at + 4, 6}, {at + 5, 8}} {
		off, _, ok, err := l.OffsetForTimestamp(tc.ts)
		if err != nil || !ok || off != tc.want {
			t.Fatalf("OffsetForTimestamp(%d): %d, %v, %v; want %d", tc.ts-at, off, ok, err, tc.want)
		}
	}
}

// A compacted leader may have removed more offsets in a row than one
// segment can index: the follower starts a segment where the batches are.
func TestAppendReplicaGapBeyondSegmentSpan(t *testing.T) {
	t.Run("after a batch", func(t *testing.T) { testGapBeyondSegmentSpan(t, true) })
	t.Run("into an empty log", func(t *testing.T) { testGapBeyondSegmentSpan(t, false) })
}

func testGapBeyondSegmentSpan(t *testing.T, withFirst bool) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Now: clock.Now})
	var first []byte
	if withFirst {
		first = compactedBatch(t, batchSpec{firstTs: clock.Millis()}, 0, 0, keyed(3))
	}
	far := int64(5) << 30
	next := compactedBatch(t, batchSpec{firstTs: clock.Millis()}, far, 0, keyed(4))
	for _, b := range slices.DeleteFunc([][]byte{first, next}, func(b []byte) bool { return b == nil }) {
		if _, err := l.AppendReplica(b); err != nil {
			t.Fatalf("AppendReplica at %d: %v", decodeHeader(b).BaseOffset, err)
		}
	}
	check := func(l *Log) {
		t.Helper()
		if l.EndOffset() != far+4 {
			t.Fatalf("end offset %d, want %d", l.EndOffset(), far+4)
		}
		if got := readAll(t, l, 1<<20); !bytes.Equal(got, slices.Concat(first, next)) {
			t.Fatal("stored bytes differ")
		}
		got, err := l.Read(nil, 1<<31, l.EndOffset(), 1)
		if err != nil || !bytes.Equal(got, next) {
			t.Fatalf("Read in the gap: %d bytes, %v", len(got), err)
		}
	}
	check(l)
	crash(l)
	l = mustOpen(t, dir, Config{Now: clock.Now})
	defer l.Close()
	check(l)
	more := compactedBatch(t, batchSpec{firstTs: clock.Millis()}, far+4, 0, keyed(2))
	if _, err := l.AppendReplica(more); err != nil || l.EndOffset() != far+6 {
		t.Fatalf("appending after the gap: %v, end %d", err, l.EndOffset())
	}
}
