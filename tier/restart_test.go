package tier

import (
	"context"
	"testing"
	"time"

	"strata/segment"
	"strata/tier/objstore"
)

// TestHistoryBelow: a log restarted from the bucket at or above an offset
// (a follower below its leader's local start, Kafka's
// buildRemoteLogAuxState) starts where the object holding the record
// before it ends, with that object's producer snapshot and leader epochs,
// and so knows the transaction open there. Below every object, or with
// the offset at 0, the bucket knows nothing.
func TestHistoryBelow(t *testing.T) {
	ctx := context.Background()
	l, err := segment.Open(t.TempDir(), segment.Config{SegmentBytes: 1 << 20, MaxBatchBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ts := time.Now().UnixMilli()
	appendAt := func(b []byte, epoch int32) {
		t.Helper()
		if _, err := l.Append(b, epoch); err != nil {
			t.Fatal(err)
		}
	}
	roll := func() {
		t.Helper()
		if _, err := l.RollIfOlder(0); err != nil {
			t.Fatal(err)
		}
	}
	appendAt(producerBatch(9, 0, 0, 0, ts, []byte("a"), []byte("b")), 0) // 0-1
	roll()
	appendAt(producerBatch(7, 0, 0, attrTransactional, ts, []byte("open")), 2) // 2: stays open
	appendAt(producerBatch(9, 0, 2, 0, ts, []byte("c")), 2)                    // 3
	roll()
	appendAt(producerBatch(9, 0, 3, 0, ts, []byte("d")), 3) // 4
	roll()
	segs, err := l.ClosedSegments(0)
	if err != nil || len(segs) != 3 {
		t.Fatalf("%d closed segments, %v", len(segs), err)
	}
	store, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Open(Config{Store: store, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for _, s := range segs {
		if _, err := tr.Upload(ctx, testTP, s, 3); err != nil {
			t.Fatal(err)
		}
	}

	for _, tt := range []struct {
		offset, start int64
		ok            bool
		open          map[int64]int64
		epoch         int32
	}{
		{0, 0, false, nil, 0},
		{1, 2, true, map[int64]int64{}, 0},     // in the first object: starts at its end
		{2, 2, true, map[int64]int64{}, 0},     // the first object ends just below
		{3, 4, true, map[int64]int64{7: 2}, 2}, // producer 7's transaction is open at 4
		{4, 4, true, map[int64]int64{7: 2}, 2},
		{5, 5, true, map[int64]int64{7: 2}, 3}, // the bucket's end
		{6, 0, false, nil, 0},                  // past the bucket
	} {
		start, h, ok, err := tr.HistoryBelow(ctx, testTP, tt.offset)
		if err != nil {
			t.Fatalf("HistoryBelow(%d): %v", tt.offset, err)
		}
		if ok != tt.ok || start != tt.start {
			t.Fatalf("HistoryBelow(%d) = start %d, ok %v; want %d, %v", tt.offset, start, ok, tt.start, tt.ok)
		}
		if !ok {
			continue
		}
		open, err := segment.SnapshotOpenTransactions(h.ProducerSnapshot)
		if err != nil {
			t.Fatalf("HistoryBelow(%d): snapshot: %v", tt.offset, err)
		}
		if len(open) != len(tt.open) || open[7] != tt.open[7] {
			t.Fatalf("HistoryBelow(%d): open transactions %v, want %v", tt.offset, open, tt.open)
		}
		if n := len(h.Epochs); n == 0 || h.Epochs[n-1].Epoch != tt.epoch {
			t.Fatalf("HistoryBelow(%d): epochs %+v, want the last %d", tt.offset, h.Epochs, tt.epoch)
		}
		// The log restarted there knows the transaction.
		r, err := segment.Open(t.TempDir(), segment.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.TruncateFullyAndStartAt(start, h); err != nil {
			t.Fatal(err)
		}
		first, unstable := r.FirstUnstableOffset()
		if want, wantOK := tt.open[7], len(tt.open) > 0; unstable != wantOK || (wantOK && first != want) {
			t.Fatalf("restarted at %d: first unstable %d/%v, want %d/%v", start, first, unstable, want, wantOK)
		}
		r.Close()
	}
}
