package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"strata/segment"
	"strata/tier/format"
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
