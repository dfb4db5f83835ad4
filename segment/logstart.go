package segment

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// The log start offset checkpoint (docs/format.md §12): DeleteRecords
// moves the log start offset into the middle of a segment, which the
// segment files alone cannot say, so it is written down: 4 magic bytes
// "LSO1", the offset (int64), a CRC-32C of the 12 bytes before it. Open
// takes the larger of it and the first segment's base, and never more than
// the log end.
const logStartName = "log-start-offset"

var logStartMagic = [4]byte{'L', 'S', 'O', '1'}

func encodeLogStart(offset int64) []byte { return encodeCheckpoint(logStartMagic, offset) }

func decodeLogStart(b []byte) (int64, bool) {
	f, ok := decodeCheckpoint(b, logStartMagic, 1)
	if !ok {
		return 0, false
	}
	return f[0], true
}

func (l *Log) logStartPath() string { return filepath.Join(l.dir, logStartName) }

// DeleteRecordsBefore makes offset the log start offset (Kafka's
// DeleteRecords): records below it are no longer served, segments wholly
// below it are deleted, and the new start survives a restart. An offset at
// or below the current start changes nothing; one above the log end is
// ErrOffsetOutOfRange. It returns the log start offset after the call.
// Producer state is kept: a producer's sequence does not depend on what was
// deleted.
func (l *Log) DeleteRecordsBefore(offset int64) (int64, error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.mu.closed {
		return 0, ErrClosed
	}
	start, end := l.mu.start, l.mu.end
	if offset <= start {
		return start, nil
	}
	if offset > end {
		return start, fmt.Errorf("%w: deleting records before %d, beyond the log end %d", ErrOffsetOutOfRange, offset, end)
	}
	// Written first: after a crash the start is never below what a
	// client was told.
	if err := writeFileAtomic(l.logStartPath(), encodeLogStart(offset)); err != nil {
		return start, fmt.Errorf("segment: recording log start offset %d: %w", offset, err)
	}
	n := 0
	for n < len(l.mu.segs)-1 && l.mu.segs[n+1].base <= offset {
		n++
	}
	l.mu.Lock()
	l.mu.start = offset
	l.mu.Unlock()
	if n > 0 {
		if err := l.deleteOldestLocked(n); err != nil {
			return offset, err
		}
	} else if epochs := truncateEpochsFromStart(l.mu.epochs, offset); !slices.Equal(epochs, l.mu.epochs) {
		if err := writeFileAtomic(l.epochPath(), encodeEpochs(epochs)); err != nil {
			return offset, fmt.Errorf("segment: trimming leader epochs to %d: %w", offset, err)
		}
		l.mu.Lock()
		l.mu.epochs = epochs
		l.mu.Unlock()
	}
	return offset, nil
}

// recoverLogStart raises the recovered log start offset to the checkpoint
// DeleteRecordsBefore wrote, if any; a damaged checkpoint is reported and
// ignored (the log then starts at its first segment, as before the call).
func (l *Log) recoverLogStart() {
	b, err := os.ReadFile(l.logStartPath())
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	off, ok := decodeLogStart(b)
	if err != nil || !ok {
		l.logger.Warn("ignoring a damaged log start offset checkpoint", "dir", l.dir, "err", err)
		return
	}
	l.mu.start = max(l.mu.start, min(off, l.mu.end))
}
