package tier

import (
	"context"
	"errors"
	"testing"
	"time"

	"strata/segment"
	"strata/tier/format"
	"strata/tier/objstore"
)

// The bucket's lifecycle (issue 20 items 8 and 10): who may delete what,
// and when, while writers are still at work.

// uploadAll uploads segs at epoch and returns the manifest's segments.
func uploadAll(t *testing.T, tr *Tier, store objstore.Store, segs []segment.SegmentInfo, epoch int32) []format.RemoteSegment {
	t.Helper()
	ctx := context.Background()
	for _, s := range segs {
		if _, err := tr.Upload(ctx, testTP, s, epoch); err != nil {
			t.Fatal(err)
		}
	}
	m, err := tr.Manifest(ctx, testTP)
	if err != nil {
		t.Fatal(err)
	}
	return allSegments(t, store, m)
}

// A leader deposed without knowing it still runs its collector; the new
// leader's compaction outputs, held only in the new leader's memory, look
// like orphans to it. Collecting at its (old) epoch, it is fenced by the
// new leader's manifest and deletes nothing.
func TestDeposedLeaderCollectorIsFenced(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	deposed, leader := openTier(t, store, clk.Now), openTier(t, store, clk.Now)
	segs := closedSegments(t, 40, 16<<10)
	uploadAll(t, deposed, store, segs[:len(segs)-1], 1)
	if _, err := leader.Refresh(ctx, testTP); err != nil {
		t.Fatal(err)
	}
	before := uploadAll(t, leader, store, segs[len(segs)-1:], 2)
	out, release, _ := compactRange(t, leader, before[:2], 2, func(h segment.BatchHeader) bool { return h.BaseOffset%2 == 0 })
	defer release()
	clk.add(90 * time.Minute)

	if n, err := deposed.CollectOrphansAt(ctx, testTP, 1, time.Hour); !errors.Is(err, ErrFenced) || n != 0 {
		t.Fatalf("the deposed leader's collection at epoch 1: %d deleted, %v; want ErrFenced", n, err)
	}
	if _, err := store.Stat(ctx, out.Key); err != nil {
		t.Fatalf("the new leader's compaction output is gone: %v", err)
	}
	if _, err := leader.ReplaceCompacted(ctx, testTP, []format.RemoteSegment{out}, 2, out.LastOffset+1, clk.Now()); err != nil {
		t.Fatal(err)
	}
	checkCovers(t, store, 0, before[len(before)-1].LastOffset+1)
}

// A compaction swap whose output was deleted meanwhile (by a collector
// that did not know it: another node's, after a leader change) is
// refused, the manifest untouched, rather than naming a missing object.
func TestReplaceCompactedRefusesMissingOutput(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	tr := openTier(t, store, clk.Now)
	before := uploadAll(t, tr, store, closedSegments(t, 40, 16<<10), 1)
	out, release, _ := compactRange(t, tr, before[:2], 1, func(h segment.BatchHeader) bool { return h.BaseOffset%2 == 0 })
	defer release()
	if err := store.Delete(ctx, out.Key); err != nil {
		t.Fatal(err)
	}
	m, _ := tr.Manifest(ctx, testTP)
	if _, err := tr.ReplaceCompacted(ctx, testTP, []format.RemoteSegment{out}, 1, out.LastOffset+1, clk.Now()); !errors.Is(err, ErrObjectMissing) {
		t.Fatalf("swap of a deleted output: %v, want ErrObjectMissing", err)
	}
	if got := checkCovers(t, store, 0, m.EndOffset()); got.Key() != m.Key() {
		t.Fatalf("the manifest moved from %s to %s", m.Key(), got.Key())
	}
}

// Issue 20 item 10: a topic deleted while a compaction pass of one of its
// partitions runs. The pass writes its output, or swaps it in, after the
// deletion listed the partition's objects; nothing the pass wrote may be
// left in the bucket once DeletePartition returns: no output, no page,
// no root, which nobody would ever delete.
func TestDeletePartitionDuringCompactionLeavesNothing(t *testing.T) {
	for _, written := range []bool{false, true} {
		name := map[bool]string{false: "output written after the listing", true: "swap after the listing"}[written]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			clk := newClock()
			store := newHookStore(newDirStore(t), clk)
			tr := openTierWith(t, store, clk.Now, format.Paging{PageSegments: 2, Fanout: 2})
			before := uploadAll(t, tr, store, closedSegments(t, 40, 4<<10), 1)
			if len(before) < 4 {
				t.Fatalf("%d segments", len(before))
			}
			write := func() (format.RemoteSegment, func(), error) {
				w := tr.NewSegmentWriter(testTP, before[0].BaseOffset, 1)
				for _, s := range before[:2] {
					if err := tr.ReadLog(ctx, s, 0, w.Append); err != nil {
						t.Fatal(err)
					}
				}
				return w.Finish(ctx, before[1].LastOffset, nil)
			}
			var out format.RemoteSegment
			var release func()
			var err error
			if written {
				if out, release, err = write(); err != nil {
					t.Fatal(err)
				}
				defer release()
			}
			var passErr error
			passed := false
			store.list = func(prefix string, as []objstore.Attrs) []objstore.Attrs {
				if prefix != testTP.Prefix() || passed {
					return as
				}
				passed = true
				// The pass, between the deletion's listing and its deletes.
				if !written {
					out, release, passErr = write()
					defer release()
				}
				if passErr == nil {
					_, passErr = tr.ReplaceCompacted(ctx, testTP, []format.RemoteSegment{out}, 1, out.LastOffset+1, clk.Now())
				}
				return as
			}
			if err := tr.DeletePartition(ctx, testTP); err != nil {
				t.Fatal(err)
			}
			if !passed {
				t.Fatal("the deletion never listed the partition")
			}
			if !errors.Is(passErr, ErrPartitionDeleted) {
				t.Errorf("the pass ended with %v, want ErrPartitionDeleted", passErr)
			}
			var left []string
			if err := store.List(ctx, testTP.Prefix(), func(a objstore.Attrs) error {
				left = append(left, a.Key)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(left) > 0 {
				t.Fatalf("%d objects of the deleted partition left in the bucket, e.g. %s", len(left), left[0])
			}
		})
	}
}
