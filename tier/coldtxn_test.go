package tier

import (
	"context"
	"testing"
	"time"

	"strata/segment"
)

// A read_committed replay of a partition from the bucket makes no more
// GETs than a read_uncommitted one (issue 25): the txn index and producer
// snapshot parts that Tier.AbortedTransactions needs come in the GET of
// the object's offset index that every read makes anyway. The replay is
// a consumer's fetches: ReadBelow from the bucket's start to its end, and
// for read_committed the aborted transactions of each range read.
func TestColdReadCommittedGETs(t *testing.T) {
	ctx := context.Background()
	h := writeTxnHistory(t, 600, 4<<10, 5)
	segs, err := h.log.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	inner := newDirStore(t)
	up := openTier(t, inner, time.Now)
	for _, s := range segs {
		if _, err := up.Upload(ctx, testTP, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	replay := func(committed bool) (gets, aborted int) {
		store := &recordingStore{Store: inner}
		tr := openTier(t, store, time.Now)
		m, err := tr.Manifest(ctx, testTP)
		if err != nil {
			t.Fatal(err)
		}
		end := m.EndOffset()
		for off := m.LogStartOffset; off < end; {
			b, err := tr.ReadBelow(ctx, testTP, nil, off, end, 2<<10)
			if err != nil {
				t.Fatalf("read at %d: %v", off, err)
			}
			next := off
			for p := 0; p < len(b); {
				bh, err := segment.ParseBatchHeader(b[p:])
				if err != nil {
					t.Fatal(err)
				}
				next, p = bh.LastOffset()+1, p+bh.Size()
			}
			if next == off {
				t.Fatalf("read at %d returned nothing", off)
			}
			if committed {
				list, err := tr.AbortedTransactions(ctx, testTP, off, next)
				if err != nil {
					t.Fatal(err)
				}
				aborted += len(list)
			}
			off = next
		}
		// Close waits for the read-ahead, so every GET it made is counted.
		tr.Close()
		store.mu.Lock()
		defer store.mu.Unlock()
		return len(store.gets), aborted
	}
	uncommitted, _ := replay(false)
	committed, aborted := replay(true)
	if aborted == 0 {
		t.Fatal("the replay met no aborted transaction: not the history the test needs")
	}
	if committed > uncommitted {
		t.Fatalf("%d objects: read_committed made %d GETs, read_uncommitted %d", len(segs), committed, uncommitted)
	}
	t.Logf("%d objects: %d GETs either way", len(segs), committed)
}
