package tier

import (
	"context"
	"testing"

	"strata/segment"
	"strata/tier/format"
)

// replicaSegments writes the same n one-record batches to a fresh log with
// segments of segBytes and returns its closed segments: two replicas of one
// partition that roll at different offsets.
func replicaSegments(t *testing.T, segBytes int64, n int) []segment.SegmentInfo {
	t.Helper()
	l, err := segment.Open(t.TempDir(), segment.Config{SegmentBytes: segBytes, MaxBatchBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	value := make([]byte, 1000)
	for i := range n {
		value[0] = byte(i)
		if _, err := l.Append(testBatch(value), 0); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := l.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

// TestUploadAfterFailoverToOtherBoundaries: the leader that uploaded
// rolled its segments every ~4 records; the new one (rebuilt, so rolling
// at its own offsets) every ~6. Its segment that straddles the bucket's end
// goes up from the bucket's end on, and the next ones whole: the bucket
// stays gap-free and overlap-free and every offset reads back.
func TestUploadAfterFailoverToOtherBoundaries(t *testing.T) {
	ctx := context.Background()
	store := newDirStore(t)
	a := replicaSegments(t, 4<<10, 40)
	b := replicaSegments(t, 6<<10, 40)
	old := openTierWith(t, store, nil, format.Paging{})
	cur := openTierWith(t, store, nil, format.Paging{})
	for _, s := range a[:2] {
		if _, err := old.Upload(ctx, testTP, s, 1); err != nil {
			t.Fatal(err)
		}
	}
	end := a[1].EndOffset
	straddles := false
	for _, s := range b {
		if s.BaseOffset < end && s.EndOffset > end {
			straddles = true
		}
	}
	if !straddles {
		t.Fatalf("no segment of the new leader straddles the bucket's end %d: the test needs other boundaries", end)
	}
	var m *format.Root
	for _, s := range b {
		var err error
		if m, err = cur.Upload(ctx, testTP, s, 2); err != nil {
			t.Fatalf("upload of the new leader's segment [%d, %d) over a bucket ending at %d: %v", s.BaseOffset, s.EndOffset, end, err)
		}
	}
	if last := b[len(b)-1].EndOffset; m.EndOffset() != last {
		t.Fatalf("bucket ends at %d, want %d", m.EndOffset(), last)
	}
	segs, err := cur.Segments(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	next := int64(0)
	for _, s := range segs {
		if s.BaseOffset != next {
			t.Fatalf("bucket segment [%d, %d] after offset %d: gap or overlap", s.BaseOffset, s.LastOffset, next-1)
		}
		if s.RecordCount != s.LastOffset-s.BaseOffset+1 {
			t.Errorf("segment [%d, %d] counts %d records", s.BaseOffset, s.LastOffset, s.RecordCount)
		}
		if len(s.LeaderEpochs) == 0 || s.LeaderEpochs[0].StartOffset != s.BaseOffset {
			t.Errorf("segment [%d, %d] has leader epochs %v", s.BaseOffset, s.LastOffset, s.LeaderEpochs)
		}
		next = s.LastOffset + 1
	}
	readAll(t, store, 0, m.EndOffset())
}
