package segment

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestDeleteRecordsBeforeMovesTheStartAndSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{SegmentBytes: 600}
	l := mustOpen(t, dir, cfg)
	for range 20 {
		mustAppend(t, l, encodeBatch(t, batchSpec{firstTs: time.Now().UnixMilli(), values: values(5, 20, 1)}), 0)
	}
	if l.EndOffset() != 100 {
		t.Fatalf("end %d", l.EndOffset())
	}
	segsBefore := len(l.mu.segs)
	// Inside a segment: the start moves there, whole segments below go.
	got, err := l.DeleteRecordsBefore(42)
	if err != nil || got != 42 || l.StartOffset() != 42 {
		t.Fatalf("DeleteRecordsBefore(42) = %d, %v; start %d", got, err, l.StartOffset())
	}
	if len(l.mu.segs) >= segsBefore {
		t.Errorf("no segment deleted: %d before, %d after", segsBefore, len(l.mu.segs))
	}
	if _, err := l.Read(nil, 41, 100, 1<<20); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Errorf("read below the new start: %v, want ErrOffsetOutOfRange", err)
	}
	if b, err := l.Read(nil, 42, 100, 1<<20); err != nil || len(b) == 0 {
		t.Errorf("read at the new start: %d bytes, %v", len(b), err)
	}
	// Lower or equal: nothing changes; beyond the end: refused.
	if got, err := l.DeleteRecordsBefore(10); err != nil || got != 42 {
		t.Errorf("DeleteRecordsBefore(10) = %d, %v, want 42", got, err)
	}
	if _, err := l.DeleteRecordsBefore(101); !errors.Is(err, ErrOffsetOutOfRange) {
		t.Errorf("DeleteRecordsBefore(101): %v, want ErrOffsetOutOfRange", err)
	}
	// Kept across a clean close and a crash.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, cfg)
	if l.StartOffset() != 42 {
		t.Fatalf("start after reopen %d, want 42", l.StartOffset())
	}
	got, err = l.DeleteRecordsBefore(57)
	if err != nil || got != 57 {
		t.Fatal(got, err)
	}
	crash(l)
	l = mustOpen(t, dir, cfg)
	defer l.Close()
	if l.StartOffset() != 57 {
		t.Fatalf("start after a crash %d, want 57", l.StartOffset())
	}
	// Appends go on at the end.
	if info := mustAppend(t, l, encodeBatch(t, batchSpec{firstTs: time.Now().UnixMilli(), values: values(1, 20, 2)}), 0); info.BaseOffset != 100 {
		t.Errorf("append after: base %d, want 100", info.BaseOffset)
	}
}

func TestDeleteRecordsToTheEndAndRestartBehind(t *testing.T) {
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{})
	mustAppend(t, l, encodeBatch(t, batchSpec{firstTs: time.Now().UnixMilli(), values: values(10, 20, 1)}), 0)
	if _, err := l.DeleteRecordsBefore(10); err != nil || l.StartOffset() != 10 {
		t.Fatalf("delete to the end: start %d, %v", l.StartOffset(), err)
	}
	// A follower restarted behind the deleted point starts where it was
	// told; the old checkpoint does not cut the new log later.
	if err := l.TruncateFullyAndStartAt(5, History{}); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, stamped(encodeBatch(t, batchSpec{firstTs: time.Now().UnixMilli(), values: values(10, 20, 1)}), 5, 0), 0)
	l.Close()
	l = mustOpen(t, dir, Config{})
	if l.StartOffset() != 5 || l.EndOffset() != 15 {
		t.Fatalf("after restart at 5 and reopen: [%d, %d), want [5, 15)", l.StartOffset(), l.EndOffset())
	}
	l.Close()
	// A damaged checkpoint is ignored, not trusted.
	if err := os.WriteFile(filepath.Join(dir, logStartName), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Config{})
	defer l.Close()
	if l.StartOffset() != 5 {
		t.Fatalf("with a damaged checkpoint: start %d, want the first segment's 5", l.StartOffset())
	}
}
