package tier

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/segment"
	"strata/tier/format"
	"strata/tier/objstore"
)

// compactedLog uploads n batches of one 1 KiB record each in segments of
// about segBytes, batch i stamped ts0+i, and returns the tier, its store and
// the manifest's segments.
func compactedLog(t *testing.T, n int, segBytes int64) (*Tier, *recordingStore, []format.RemoteSegment) {
	t.Helper()
	_, tr, store := uploadedLog(t, n, segBytes, func(i int) int64 { return ts0 + int64(i) }, Config{ChunkBytes: 64 << 10, MemoryBytes: 4 << 20, CacheBytes: 4 << 20})
	m, err := tr.Manifest(context.Background(), testTP)
	if err != nil {
		t.Fatal(err)
	}
	return tr, store, allSegments(t, store, m)
}

const ts0 = 1_700_000_000_000

// logPart returns the log part of s's object as stored.
func logPart(t *testing.T, tr *Tier, s format.RemoteSegment) []byte {
	t.Helper()
	return getObject(t, tr.cfg.Store, s.Key)[s.Log.Offset:s.Log.End()]
}

// TestReadLogChunks: ReadLog hands over every batch of the log part whole
// and in order, whatever the chunk size (smaller than a batch, cutting
// batches anywhere, larger than the object), reads each byte once, and
// makes ceil(log / chunk) GETs when batches fit in a chunk.
func TestReadLogChunks(t *testing.T) {
	ctx := context.Background()
	tr, store, segs := compactedLog(t, 30, 16<<10)
	s := segs[0]
	want := logPart(t, tr, s)
	h, _ := segment.ParseBatchHeader(want)
	batch := int64(h.Size())
	for _, chunk := range []int64{1, 61, 100, batch - 1, batch, batch + 1, 2*batch - 7, 4096, 5000, s.Log.Len - 1, s.Log.Len, s.Log.Len + 1, 1 << 20} {
		t.Run(fmt.Sprint(chunk), func(t *testing.T) {
			store.reset()
			gets0, _ := tr.RequestCounts()
			var got []byte
			var bases []int64
			err := tr.ReadLog(ctx, s, chunk, func(b []byte) error {
				h, err := segment.ParseBatchHeader(b)
				if err != nil || h.Size() != len(b) {
					t.Fatalf("not one whole batch: %d bytes, %v", len(b), err)
				}
				got = append(got, b...)
				bases = append(bases, h.BaseOffset)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("batches of %d bytes differ from the %d-byte log part", len(got), len(want))
			}
			if bases[0] != s.BaseOffset || bases[len(bases)-1] != s.LastOffset {
				t.Fatalf("batches from %d to %d, segment [%d, %d]", bases[0], bases[len(bases)-1], s.BaseOffset, s.LastOffset)
			}
			var read int64
			next := s.Log.Offset
			gets := store.getsOf(s.Key)
			for _, g := range gets {
				if g.off != next || g.n <= 0 {
					t.Fatalf("GET [%d, +%d), want it to start at %d: %v", g.off, g.n, next, gets)
				}
				next += g.n
				read += g.n
			}
			if read != s.Log.Len {
				t.Fatalf("read %d bytes of a %d-byte log part", read, s.Log.Len)
			}
			if chunk >= batch {
				if n := (s.Log.Len + chunk - 1) / chunk; int64(len(gets)) != n {
					t.Fatalf("%d GETs of %d-byte chunks for %d bytes, want %d", len(gets), chunk, s.Log.Len, n)
				}
			}
			if g, _ := tr.RequestCounts(); g-gets0 != int64(len(gets)) {
				t.Fatalf("RequestCounts counted %d GETs, the store saw %d", g-gets0, len(gets))
			}
		})
	}
}

// TestReadLogDetectsCorruption: a byte changed anywhere in the log part,
// inside a batch's CRC or outside it (the base offset), fails ReadLog with
// an error naming the object, and a corrupt producer snapshot fails
// ProducerSnapshot.
func TestReadLogDetectsCorruption(t *testing.T) {
	ctx := context.Background()
	tr, _, segs := compactedLog(t, 30, 16<<10)
	s := segs[1]
	obj := getObject(t, tr.cfg.Store, s.Key)
	h, _ := segment.ParseBatchHeader(obj[s.Log.Offset:])
	batch := int64(h.Size())
	for _, at := range []int64{0, 3, 7, 17, 40, 70, batch + 5, 3*batch + 100, s.Log.Len - 1} {
		t.Run(fmt.Sprint(at), func(t *testing.T) {
			bad := bytes.Clone(obj)
			bad[s.Log.Offset+at] ^= 0x10
			if err := tr.cfg.Store.Put(ctx, s.Key, bytes.NewReader(bad), int64(len(bad))); err != nil {
				t.Fatal(err)
			}
			err := tr.ReadLog(ctx, s, 4096, func([]byte) error { return nil })
			if !errors.Is(err, segment.ErrCorruptSegment) || !strings.Contains(err.Error(), s.Key) {
				t.Fatalf("byte %d flipped: %v", at, err)
			}
		})
	}
	// The callback's error ends the read as it is.
	if err := tr.cfg.Store.Put(ctx, s.Key, bytes.NewReader(obj), int64(len(obj))); err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop")
	if err := tr.ReadLog(ctx, s, 4096, func([]byte) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("callback error: %v", err)
	}
}

func TestProducerSnapshot(t *testing.T) {
	ctx := context.Background()
	tr, store, segs := compactedLog(t, 30, 16<<10)
	for _, s := range segs {
		obj := getObject(t, tr.cfg.Store, s.Key)
		store.reset()
		snap, err := tr.ProducerSnapshot(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(snap, obj[s.ProducerSnapshot.Offset:s.ProducerSnapshot.End()]) {
			t.Fatalf("snapshot of %s differs", s.Key)
		}
		if n := len(store.getsOf(s.Key)); s.ProducerSnapshot.Len > 0 && n != 1 || s.ProducerSnapshot.Len == 0 && n != 0 {
			t.Fatalf("%d GETs for a %d-byte snapshot", n, s.ProducerSnapshot.Len)
		}
	}
	// A snapshot whose bytes changed is refused.
	s := segs[0]
	s.ProducerSnapshot.CRC ^= 1
	if s.ProducerSnapshot.Len == 0 {
		s.ProducerSnapshot.Len = 1 // claims a byte the object's footer has instead
	}
	if _, err := tr.ProducerSnapshot(ctx, s); !errors.Is(err, segment.ErrCorruptSegment) || !strings.Contains(err.Error(), s.Key) {
		t.Fatalf("corrupt snapshot: %v", err)
	}
}

// closedSegments writes n batches of one 1 KiB record each, batch i
// stamped ts0+i, into a local log with segments of segBytes, and returns
// its closed segments.
func closedSegments(t *testing.T, n int, segBytes int64) []segment.SegmentInfo {
	t.Helper()
	l, err := segment.Open(t.TempDir(), segment.Config{SegmentBytes: segBytes, MaxBatchBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	value := make([]byte, 1<<10)
	for i := range n {
		binary.BigEndian.PutUint64(value, uint64(i))
		if _, err := l.Append(timedBatch(ts0+int64(i), value), 0); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := l.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

// span is a batch's offsets.
type span struct{ base, last int64 }

// compactRange builds, from the segments olds (adjacent), one object
// covering all of their offsets that keeps the batches keep accepts, with
// the last segment's producer snapshot, written at epoch. It returns the
// object's entry, its release and the batches kept.
func compactRange(t *testing.T, tr *Tier, olds []format.RemoteSegment, epoch int32, keep func(h segment.BatchHeader) bool) (format.RemoteSegment, func(), []span) {
	t.Helper()
	ctx := context.Background()
	w := tr.NewSegmentWriter(testTP, olds[0].BaseOffset, epoch)
	var kept []span
	for _, s := range olds {
		err := tr.ReadLog(ctx, s, 4096, func(b []byte) error {
			h, err := segment.ParseBatchHeader(b)
			if err != nil || !keep(h) {
				return err
			}
			kept = append(kept, span{h.BaseOffset, h.LastOffset()})
			return w.Append(b)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	last := olds[len(olds)-1]
	snap, err := tr.ProducerSnapshot(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	seg, release, err := w.Finish(ctx, last.LastOffset, snap)
	if err != nil {
		t.Fatal(err)
	}
	return seg, release, kept
}

// batchSpans lists the batches of segs as ReadLog hands them over.
func batchSpans(t *testing.T, tr *Tier, segs []format.RemoteSegment) []span {
	t.Helper()
	var out []span
	for _, s := range segs {
		if err := tr.ReadLog(context.Background(), s, 0, func(b []byte) error {
			h, _ := segment.ParseBatchHeader(b)
			out = append(out, span{h.BaseOffset, h.LastOffset()})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkReadsAcrossGaps reads every offset of [from, end) through a tier
// that has never seen the bucket and checks that each read starts with the
// first batch of want ending at or after it: an offset compaction removed
// reads as the next record kept, in its object or a later one.
func checkReadsAcrossGaps(t *testing.T, tr *Tier, want []span, from, end int64) {
	t.Helper()
	ctx := context.Background()
	for o := from; o < end; o++ {
		i := 0
		for i < len(want) && want[i].last < o {
			i++
		}
		b, err := tr.Read(ctx, testTP, nil, o, 1)
		if i == len(want) {
			if err != nil || len(b) != 0 {
				t.Fatalf("read at %d, past the last batch: %d bytes, %v", o, len(b), err)
			}
			continue
		}
		if err != nil || len(b) == 0 {
			t.Fatalf("read at %d: %d bytes, %v; want the batch at %d", o, len(b), err, want[i].base)
		}
		if got := firstBase(b); got != want[i].base {
			t.Fatalf("read at %d starts with the batch at %d, want %d", o, got, want[i].base)
		}
	}
}

// TestReplaceCompacted is issue 13's cold-tier swap: two adjacent objects
// become one holding every third batch (offsets kept, gaps between), and
// the next object one with no batch at all, in one manifest step that
// records the compaction state. Every original offset still reads, as
// the next record kept; the replaced objects stay through the orphan
// grace and go after it; the new objects are never collected, not even
// while they are written and not yet named by the manifest.
func TestReplaceCompacted(t *testing.T) {
	t.Run("inline", func(t *testing.T) { checkReplaceCompacted(t, format.Paging{}) })
	// With pages of two segments, the replaced range straddles pages.
	t.Run("paged", func(t *testing.T) { checkReplaceCompacted(t, smallPages) })
}

func checkReplaceCompacted(t *testing.T, pg format.Paging) {
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	tr := openTierWith(t, store, clk.Now, pg)
	for _, s := range closedSegments(t, 80, 16<<10) {
		if _, err := tr.Upload(ctx, testTP, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := tr.Manifest(ctx, testTP)
	before := allSegments(t, store, m)
	if len(before) < 5 || pg.PageSegments > 0 && len(m.Pages) == 0 {
		t.Fatalf("%d segments, %d pages", len(before), len(m.Pages))
	}
	all := batchSpans(t, tr, before)
	gets0, puts0 := tr.RequestCounts()

	a, releaseA, keptA := compactRange(t, tr, before[1:3], 1, func(h segment.BatchHeader) bool {
		return h.BaseOffset%3 == 0 && h.LastOffset() != before[2].LastOffset
	})
	b, releaseB, keptB := compactRange(t, tr, before[3:4], 1, func(segment.BatchHeader) bool { return false })
	defer releaseA()
	defer releaseB()
	if a.BaseOffset != before[1].BaseOffset || a.LastOffset != before[2].LastOffset || a.RecordCount != int64(len(keptA)) || len(keptB) != 0 || b.Log.Len != 0 || b.RecordCount != 0 {
		t.Fatalf("compacted objects [%d, %d] of %d records, [%d, %d] of %d bytes of log", a.BaseOffset, a.LastOffset, a.RecordCount, b.BaseOffset, b.LastOffset, b.Log.Len)
	}

	// Written and held, not yet in the manifest: the collector keeps them
	// whatever their age.
	clk.add(3 * time.Hour)
	if _, err := tr.CollectOrphans(ctx, testTP, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, s := range []format.RemoteSegment{a, b} {
		if _, err := store.Stat(ctx, s.Key); err != nil {
			t.Fatalf("held object %s collected: %v", s.Key, err)
		}
	}

	cleaned := before[3].LastOffset + 1
	now := clk.Now()
	root, err := tr.ReplaceCompacted(ctx, testTP, []format.RemoteSegment{a, b}, 1, cleaned, now)
	if err != nil {
		t.Fatal(err)
	}
	releaseA()
	releaseB()
	if root.CleanedOffset != cleaned || root.LastCompactionMs != now.UnixMilli() || root.LeaderEpoch != 1 {
		t.Fatalf("root after compaction: cleaned %d at %d, epoch %d", root.CleanedOffset, root.LastCompactionMs, root.LeaderEpoch)
	}
	gets, puts := tr.RequestCounts()
	// 3 log parts and their snapshots read; 2 objects and the manifest
	// written.
	if puts-puts0 < 3 || gets-gets0 < 3 {
		t.Fatalf("compaction counted %d GETs and %d PUTs", gets-gets0, puts-puts0)
	}
	t.Logf("compaction of 3 objects: %d GETs, %d PUTs", gets-gets0, puts-puts0)

	got := checkCovers(t, store, 0, before[len(before)-1].LastOffset+1)
	if got.CleanedOffset != cleaned {
		t.Fatalf("the bucket's manifest has cleaned offset %d", got.CleanedOffset)
	}
	after := allSegments(t, store, got)
	if len(after) != len(before)-1 || after[1].Key != a.Key || after[2].Key != b.Key {
		t.Fatalf("after replacement: %d segments, want %d with the new objects second and third", len(after), len(before)-1)
	}

	var want []span
	for _, sp := range all {
		switch {
		case sp.base < a.BaseOffset || sp.base > b.LastOffset:
			want = append(want, sp)
		case sp.base <= a.LastOffset && slices.Contains(keptA, sp):
			want = append(want, sp)
		}
	}
	fresh := openTierWith(t, store, clk.Now, pg)
	checkReadsAcrossGaps(t, fresh, want, 0, got.EndOffset())
	checkReadsAcrossGaps(t, tr, want, 0, got.EndOffset())

	// The replaced objects stay through the grace, then go; the new ones
	// stay.
	clk.add(10 * time.Minute)
	if _, err := tr.CollectOrphans(ctx, testTP, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, s := range before[1:4] {
		if _, err := store.Stat(ctx, s.Key); err != nil {
			t.Fatalf("within the grace, replaced object %s is gone: %v", s.Key, err)
		}
	}
	clk.add(2 * time.Hour)
	if _, err := tr.CollectOrphans(ctx, testTP, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, s := range before[1:4] {
		if _, err := store.Stat(ctx, s.Key); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("after the grace, replaced object %s: %v", s.Key, err)
		}
	}
	checkCovers(t, store, 0, got.EndOffset())
	checkReadsAcrossGaps(t, openTier(t, store, clk.Now), want, 0, got.EndOffset())
}

// TestReplaceCompactedRaces: an upload or a merge of small segments may
// change the manifest between the compacted objects' PUT and their swap,
// in this tier or through another writer of the bucket (whose manifest
// this tier learns of only when its publication collides). An upload
// leaves the range alone: the swap goes through and the upload stays. A
// merge that took the range fails the swap cleanly: the manifest keeps
// every record, and the compacted objects are orphans the collector
// removes after the grace.
func TestReplaceCompactedRaces(t *testing.T) {
	for _, tc := range []struct {
		name    string
		other   bool // the change comes from another Tier on the bucket
		merge   bool
		swapped bool
	}{
		{"upload here", false, false, true},
		{"upload by another writer", true, false, true},
		{"merge here", false, true, false},
		{"merge by another writer", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clk := newClock()
			store := newHookStore(newDirStore(t), clk)
			tr := openTier(t, store, clk.Now)
			local := closedSegments(t, 80, 16<<10)
			for _, s := range local[:len(local)-1] {
				if _, err := tr.Upload(ctx, testTP, s, 1); err != nil {
					t.Fatal(err)
				}
			}
			m, _ := tr.Manifest(ctx, testTP)
			before := allSegments(t, store, m)
			all := batchSpans(t, tr, before)
			a, release, kept := compactRange(t, tr, before[1:3], 1, func(h segment.BatchHeader) bool { return h.BaseOffset%2 == 0 })

			writer := tr
			if tc.other {
				writer = openTier(t, store, clk.Now)
			}
			if tc.merge {
				if n, err := writer.MergeSmall(ctx, testTP, Merge{SegmentBytes: 1 << 20, LeaderEpoch: 1, Max: 1}); err != nil || n != 1 {
					t.Fatalf("merge: %d, %v", n, err)
				}
			} else if _, err := writer.Upload(ctx, testTP, local[len(local)-1], 1); err != nil {
				t.Fatal(err)
			}
			end := before[len(before)-1].LastOffset + 1
			if !tc.merge {
				end = local[len(local)-1].EndOffset
			}

			_, err := tr.ReplaceCompacted(ctx, testTP, []format.RemoteSegment{a}, 1, a.LastOffset+1, clk.Now())
			release()
			if tc.swapped != (err == nil) {
				t.Fatalf("swap after the race: %v", err)
			}
			got := checkCovers(t, store, 0, end)
			checkEveryManifestComplete(t, store)
			segs := allSegments(t, store, got)
			listed := slices.ContainsFunc(segs, func(s format.RemoteSegment) bool { return s.Key == a.Key })
			if listed != tc.swapped || (got.CleanedOffset != 0) != tc.swapped {
				t.Fatalf("compacted object listed %v, cleaned offset %d", listed, got.CleanedOffset)
			}
			want := all
			if tc.swapped {
				want = nil
				for _, sp := range all {
					if sp.base < a.BaseOffset || sp.base > a.LastOffset || slices.Contains(kept, sp) {
						want = append(want, sp)
					}
				}
				// The upload's batches follow.
				want = append(want, batchSpans(t, tr, segs[len(segs)-1:])...)
			}
			checkReadsAcrossGaps(t, openTier(t, store, clk.Now), want, 0, end)

			clk.add(2 * time.Hour)
			if _, err := tr.CollectOrphans(ctx, testTP, time.Hour); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Stat(ctx, a.Key); tc.swapped != (err == nil) {
				t.Fatalf("compacted object after the grace: %v", err)
			}
			checkCovers(t, store, 0, end)
		})
	}
}

// rec is a record compaction kept: its offset delta and timestamp.
type rec struct {
	delta int32
	ts    int64
}

// compactedBatch encodes a batch as compaction leaves it: its base offset
// and lastOffsetDelta unchanged, only the records kept, and the header's
// timestamps given (firstTs is the delete horizon when attrs has bit 6).
func compactedBatch(base int64, lastDelta int32, attrs int16, firstTs, maxTs int64, recs ...rec) []byte {
	rb := kmsg.RecordBatch{FirstOffset: base, Magic: 2, Attributes: attrs, LastOffsetDelta: lastDelta, NumRecords: int32(len(recs)),
		FirstTimestamp: firstTs, MaxTimestamp: maxTs, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1}
	for _, r := range recs {
		kr := kmsg.Record{OffsetDelta: r.delta, TimestampDelta64: r.ts - firstTs, Value: []byte(fmt.Sprint(base + int64(r.delta)))}
		kr.Length = int32(len(kr.AppendTo(nil)) - 1)
		rb.Records = kr.AppendTo(rb.Records)
	}
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// TestReadsAcrossCompactedBatches is issue 13 item 4: what compaction
// leaves inside objects reads as Kafka serves it. Batches keep their
// offsets with fewer records than lastOffsetDelta+1, or none (an empty
// batch, kept as its producer's last); the first carries a delete horizon
// in its first timestamp; objects end in a gap or hold no batch. Fetches
// at every offset, a sequential replay, lookups by timestamp and the
// largest timestamp all find the records kept, and only them.
func TestReadsAcrossCompactedBatches(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	tr := openTier(t, store, clk.Now)
	for _, s := range closedSegments(t, 80, 16<<10) {
		if _, err := tr.Upload(ctx, testTP, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	m, _ := tr.Manifest(ctx, testTP)
	before := allSegments(t, store, m)
	b0 := before[1].BaseOffset
	const (
		horizon = ts0 + 1_000_000_000 // a tombstone's delete horizon: not a record's time
		peak    = ts0 + 100_000       // the partition's largest record timestamp
	)
	compacted := [][]byte{
		compactedBatch(b0, 4, 0x40, horizon, peak, rec{1, ts0 + b0 + 1}, rec{3, peak}),
		// An empty batch keeps its header, and a timestamp no record has.
		compactedBatch(b0+5, 2, 0, peak+50, peak+50),
		compactedBatch(b0+8, 0, 0, ts0+b0+8, ts0+b0+8, rec{0, ts0 + b0 + 8}),
		compactedBatch(b0+9, 5, 0, ts0+b0+9, ts0+b0+14, rec{0, ts0 + b0 + 9}, rec{2, ts0 + b0 + 11}, rec{5, ts0 + b0 + 14}),
	}
	w := tr.NewSegmentWriter(testTP, b0, 0)
	for _, b := range compacted {
		if err := w.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	a, releaseA, err := w.Finish(ctx, before[2].LastOffset, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseA()
	empty, releaseE, err := tr.NewSegmentWriter(testTP, before[3].BaseOffset, 0).Finish(ctx, before[3].LastOffset, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseE()
	if a.MaxTimestamp != peak || a.FirstTimestamp > a.MaxTimestamp || a.RecordCount != 6 || empty.Log.Len != 0 {
		t.Fatalf("compacted object: timestamps [%d, %d], %d records; empty object of %d bytes", a.FirstTimestamp, a.MaxTimestamp, a.RecordCount, empty.Log.Len)
	}
	if _, err := tr.ReplaceCompacted(ctx, testTP, []format.RemoteSegment{a, empty}, 0, before[3].LastOffset+1, clk.Now()); err != nil {
		t.Fatal(err)
	}

	// What should read: the batches and records outside the compacted
	// range as uploaded, and inside it the compacted ones.
	var want []span
	type record struct{ offset, ts int64 }
	var records []record
	for _, sp := range batchSpans(t, tr, before) {
		if sp.base < b0 {
			want = append(want, sp)
			records = append(records, record{sp.base, ts0 + sp.base})
		}
	}
	for _, b := range compacted {
		h, _ := segment.ParseBatchHeader(b)
		want = append(want, span{h.BaseOffset, h.LastOffset()})
	}
	records = append(records, record{b0 + 1, ts0 + b0 + 1}, record{b0 + 3, peak}, record{b0 + 8, ts0 + b0 + 8},
		record{b0 + 9, ts0 + b0 + 9}, record{b0 + 11, ts0 + b0 + 11}, record{b0 + 14, ts0 + b0 + 14})
	for _, sp := range batchSpans(t, tr, before[4:]) {
		want = append(want, sp)
		records = append(records, record{sp.base, ts0 + sp.base})
	}
	end := before[len(before)-1].LastOffset + 1

	for _, rd := range []*Tier{tr, openTier(t, store, clk.Now)} {
		checkReadsAcrossGaps(t, rd, want, 0, end)

		// A consumer replaying the partition from the start, in fetches of
		// a few batches, sees every batch once, in order.
		var got []span
		for o := int64(0); o < end; {
			b, err := rd.Read(ctx, testTP, nil, o, 5000)
			if err != nil || len(b) == 0 {
				t.Fatalf("replay at %d: %d bytes, %v", o, len(b), err)
			}
			for p := 0; p < len(b); {
				h, _ := segment.ParseBatchHeader(b[p:])
				got = append(got, span{h.BaseOffset, h.LastOffset()})
				p += h.Size()
				o = h.LastOffset() + 1
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("replay: %d batches, want %d:\n%v\n%v", len(got), len(want), got, want)
		}

		for _, ts := range []int64{ts0, ts0 + b0 - 1, ts0 + b0, ts0 + b0 + 1, ts0 + b0 + 2, ts0 + b0 + 5, ts0 + b0 + 9, ts0 + b0 + 10, ts0 + b0 + 14, ts0 + b0 + 15, ts0 + 79, ts0 + 80, peak, peak + 1} {
			wantOff, wantOK := int64(-1), false
			for _, r := range records {
				if r.ts >= ts {
					wantOff, wantOK = r.offset, true
					break
				}
			}
			off, _, ok, err := rd.OffsetForTimestamp(ctx, testTP, ts)
			if err != nil || ok != wantOK || ok && off != wantOff {
				t.Fatalf("offset for timestamp %d: %d %v %v, want %d %v", ts-ts0, off, ok, err, wantOff, wantOK)
			}
		}
		ts, off, ok, err := rd.MaxTimestamp(ctx, testTP)
		if err != nil || !ok || ts != peak || off != b0+3 {
			t.Fatalf("largest timestamp: %d at %d, %v %v; want %d at %d", ts, off, ok, err, peak, b0+3)
		}
	}
}

// TestReplaceCompactedFencedByNewLeader is issue 13 item 5: leadership
// moves while a compaction pass runs. The deposed leader's swap, at its
// old epoch, is refused with ErrFenced, whether or not its tier has seen
// the new leader's manifest yet, and the bucket's manifest stays the new
// leader's, complete; the compacted object is an orphan the new leader's
// collector removes after the grace.
func TestReplaceCompactedFencedByNewLeader(t *testing.T) {
	for _, seen := range []bool{false, true} {
		t.Run(fmt.Sprintf("seen=%v", seen), func(t *testing.T) {
			ctx := context.Background()
			clk := newClock()
			store := newHookStore(newDirStore(t), clk)
			old := openTier(t, store, clk.Now)
			local := closedSegments(t, 80, 16<<10)
			for _, s := range local[:len(local)-1] {
				if _, err := old.Upload(ctx, testTP, s, 1); err != nil {
					t.Fatal(err)
				}
			}
			m, _ := old.Manifest(ctx, testTP)
			before := allSegments(t, store, m)
			all := batchSpans(t, old, before)
			a, release, _ := compactRange(t, old, before[1:3], 1, func(h segment.BatchHeader) bool { return h.BaseOffset%2 == 0 })

			// The new leader, at epoch 2, uploads the next segment.
			cur := openTier(t, store, clk.Now)
			if _, err := cur.Refresh(ctx, testTP); err != nil {
				t.Fatal(err)
			}
			if _, err := cur.Upload(ctx, testTP, local[len(local)-1], 2); err != nil {
				t.Fatal(err)
			}
			if seen {
				if _, err := old.Refresh(ctx, testTP); err != nil {
					t.Fatal(err)
				}
			}
			_, err := old.ReplaceCompacted(ctx, testTP, []format.RemoteSegment{a}, 1, a.LastOffset+1, clk.Now())
			release()
			if !errors.Is(err, ErrFenced) {
				t.Fatalf("swap by the deposed leader: %v", err)
			}
			end := local[len(local)-1].EndOffset
			got := checkCovers(t, store, 0, end)
			checkEveryManifestComplete(t, store)
			if got.LeaderEpoch != 2 || got.CleanedOffset != 0 || got.LastCompactionMs != 0 {
				t.Fatalf("the bucket's manifest: epoch %d, cleaned %d at %d", got.LeaderEpoch, got.CleanedOffset, got.LastCompactionMs)
			}
			want := append(all, batchSpans(t, cur, allSegments(t, store, got)[len(before):])...)
			checkReadsAcrossGaps(t, openTier(t, store, clk.Now), want, 0, end)

			clk.add(2 * time.Hour)
			if _, err := cur.CollectOrphans(ctx, testTP, time.Hour); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Stat(ctx, a.Key); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("the deposed leader's compacted object after the grace: %v", err)
			}
			checkCovers(t, store, 0, end)
		})
	}
}

// TestSegmentWriterRejects: a writer refuses what would make a wrong
// object (batches out of order, of a later leader epoch than the writer's,
// a last offset below the last batch), leaves no temporary file behind
// whether finished or discarded, and its release is always safe to call.
func TestSegmentWriterRejects(t *testing.T) {
	ctx := context.Background()
	tr := openTier(t, newDirStore(t), time.Now)
	b := func(base int64, epoch int32) []byte {
		raw := compactedBatch(base, 1, 0, ts0, ts0, rec{0, ts0})
		binary.BigEndian.PutUint32(raw[12:], uint32(epoch))
		binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
		return raw
	}
	w := tr.NewSegmentWriter(testTP, 100, 3)
	if err := w.Append(b(100, 2)); err != nil {
		t.Fatal(err)
	}
	for name, batch := range map[string][]byte{
		"overlapping":    b(101, 2),
		"below the base": b(98, 2),
		"later epoch":    b(110, 4),
		"earlier epoch":  b(110, 1),
		"cut":            b(110, 2)[:70],
	} {
		if err := w.Append(batch); err == nil {
			t.Errorf("%s batch accepted", name)
		}
	}
	if err := w.Append(b(110, 3)); err != nil {
		t.Fatal(err)
	}
	if w.Bytes() != int64(len(b(100, 2))+len(b(110, 3))) {
		t.Fatalf("%d bytes appended", w.Bytes())
	}
	_, release, err := w.Finish(ctx, 110, nil)
	if err == nil {
		t.Fatal("finished with the last offset inside the last batch")
	}
	release()
	if _, _, err := w.Finish(ctx, 200, nil); err == nil {
		t.Fatal("finished twice")
	}

	w = tr.NewSegmentWriter(testTP, 200, 3)
	if err := w.Append(b(200, 3)); err != nil {
		t.Fatal(err)
	}
	w.Discard()
	w = tr.NewSegmentWriter(testTP, 300, 3)
	if err := w.Append(b(305, 3)); err != nil {
		t.Fatal(err)
	}
	seg, release, err := w.Finish(ctx, 320, nil)
	if err != nil {
		t.Fatal(err)
	}
	release()
	if seg.LeaderEpochs[0] != (format.EpochStart{Epoch: 3, StartOffset: 300}) || seg.RecordCount != 1 || seg.LastOffset != 320 {
		t.Fatalf("object %+v", seg)
	}
	left, err := filepath.Glob(filepath.Join(tr.cfg.CacheDir, ".compact-*"))
	if err != nil || len(left) != 0 {
		t.Fatalf("temporary files left: %v %v", left, err)
	}
}
