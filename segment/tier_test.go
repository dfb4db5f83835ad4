package segment

import (
	"os"
	"testing"
	"time"
)

// A tiered log deletes local segments only once they are wholly in the
// cold tier, then by local retention; the files it lists for upload are
// the sealed segments with their indexes and producer snapshot.
func TestTieredRetentionWaitsForUpload(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{
		SegmentBytes:        2048,
		Tiered:              true,
		LocalRetentionBytes: 0, // keep nothing closed once it is uploaded
		LocalRetentionMs:    -1,
		Now:                 clock.Now,
	})
	for i := range 20 {
		mustAppend(t, l, encodeBatch(t, batchSpec{values: values(4, 100, byte(i)), firstTs: clock.Millis()}), 0)
	}
	segs, err := l.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 3 {
		t.Fatalf("%d closed segments, want several", len(segs))
	}
	for i, s := range segs {
		if i > 0 && s.BaseOffset != segs[i-1].EndOffset {
			t.Fatalf("segment %d starts at %d, previous ends at %d", i, s.BaseOffset, segs[i-1].EndOffset)
		}
		for _, p := range []string{s.LogPath, s.IndexPath, s.TimeIndexPath, s.SnapshotPath} {
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("segment %d: %v", s.BaseOffset, err)
			}
		}
		if fi, _ := os.Stat(s.LogPath); fi.Size() != s.Size {
			t.Fatalf("segment %d: size %d, file has %d", s.BaseOffset, s.Size, fi.Size())
		}
	}
	if later, _ := l.ClosedSegments(segs[1].EndOffset); len(later) != len(segs)-2 || later[0].BaseOffset != segs[2].BaseOffset {
		t.Fatalf("ClosedSegments(from) did not skip what is below from")
	}

	// Nothing uploaded: nothing may go, however tight local retention is.
	if err := l.Maintain(); err != nil {
		t.Fatal(err)
	}
	if l.StartOffset() != 0 {
		t.Fatalf("log start moved to %d before anything was uploaded", l.StartOffset())
	}
	// Two segments uploaded: exactly those two go.
	l.SetTieredOffset(segs[1].EndOffset)
	if err := l.Maintain(); err != nil {
		t.Fatal(err)
	}
	if got := l.StartOffset(); got != segs[1].EndOffset {
		t.Fatalf("log start %d, want %d", got, segs[1].EndOffset)
	}
	if _, err := os.Stat(segs[0].LogPath); !os.IsNotExist(err) {
		t.Fatalf("uploaded segment still on disk: %v", err)
	}
	// The tiered offset never moves back.
	l.SetTieredOffset(0)
	if err := l.Maintain(); err != nil {
		t.Fatal(err)
	}
	if got := l.StartOffset(); got != segs[1].EndOffset {
		t.Fatalf("log start %d after a smaller tiered offset", got)
	}
}

// RollIfOlder seals a quiet active segment so its data can be uploaded.
func TestRollIfOlder(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	if rolled, err := l.RollIfOlder(time.Minute); rolled || err != nil {
		t.Fatalf("empty segment rolled: %v %v", rolled, err)
	}
	mustAppend(t, l, encodeBatch(t, batchSpec{values: values(1, 10, 1), firstTs: clock.Millis()}), 0)
	if rolled, _ := l.RollIfOlder(time.Minute); rolled {
		t.Fatal("young segment rolled")
	}
	clock.Advance(2 * time.Minute)
	if rolled, err := l.RollIfOlder(time.Minute); !rolled || err != nil {
		t.Fatalf("old segment not rolled: %v %v", rolled, err)
	}
	if segs, _ := l.ClosedSegments(0); len(segs) != 1 || segs[0].EndOffset != 1 {
		t.Fatalf("closed segments after the roll: %+v", segs)
	}
}
