package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// The cleaner checkpoint (docs/format.md §13): the offset below which the
// log has been compacted and when that was recorded, so that a restart
// neither compacts the clean part again nor takes a dirty part for clean.
// 4 magic bytes "CLN1", the offset (int64), the time in Unix milliseconds
// (int64), a CRC-32C of the 20 bytes before it. Commit writes it; Open
// reads it, and a missing or damaged one means "never cleaned".
const cleanerCheckpointName = "cleaner-checkpoint"

var cleanerMagic = [4]byte{'C', 'L', 'N', '1'}

// cleanerMark is what the checkpoint holds.
type cleanerMark struct {
	cleanedTo int64
	at        time.Time
}

func encodeCleaner(m cleanerMark) []byte {
	return encodeCheckpoint(cleanerMagic, m.cleanedTo, m.at.UnixMilli())
}

func decodeCleaner(b []byte) (cleanerMark, bool) {
	f, ok := decodeCheckpoint(b, cleanerMagic, 2)
	if !ok {
		return cleanerMark{}, false
	}
	return cleanerMark{cleanedTo: f[0], at: time.UnixMilli(f[1])}, true
}

func cleanerPath(dir string) string { return filepath.Join(dir, cleanerCheckpointName) }

// writeCleaner records m durably.
func writeCleaner(dir string, m cleanerMark) error {
	if err := writeFileAtomic(cleanerPath(dir), encodeCleaner(m)); err != nil {
		return fmt.Errorf("recording the cleaner checkpoint: %w", err)
	}
	return nil
}

// recoverCleaner loads the cleaner checkpoint at Open. A damaged one is
// reported and ignored: compacting the log again is only work, while
// trusting a wrong offset could take dirty records for clean ones.
func (l *Log) recoverCleaner() {
	b, err := os.ReadFile(cleanerPath(l.dir))
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	m, ok := decodeCleaner(b)
	if err != nil || !ok {
		l.logger.Warn("ignoring a damaged cleaner checkpoint; the log counts as never compacted", "dir", l.dir, "err", err)
		return
	}
	l.cleaner.Store(&m)
}

// CleanerCheckpoint returns the offset below which the log has been
// compacted and when that was recorded; (StartOffset(), zero time) if
// never. The offset is never below the log start offset.
func (l *Log) CleanerCheckpoint() (cleanedTo int64, at time.Time) {
	start := l.StartOffset()
	m := l.cleaner.Load()
	if m == nil {
		return start, time.Time{}
	}
	return max(m.cleanedTo, start), m.at
}

// lowerCleanerLocked brings the cleaner checkpoint down to offset when it
// is above: truncation and restarts call it before they change any data,
// so that the batches written there again are never taken for compacted
// ones (a crash after it leaves only a lower checkpoint: more work, no
// harm). Call it with writeMu held.
func (l *Log) lowerCleanerLocked(offset int64) error {
	m := l.cleaner.Load()
	if m == nil || m.cleanedTo <= offset {
		return nil
	}
	lowered := cleanerMark{cleanedTo: offset, at: m.at}
	if err := writeCleaner(l.dir, lowered); err != nil {
		return err
	}
	l.cleaner.Store(&lowered)
	return nil
}

// SnapshotFirstUnstable returns, from an encoded producer snapshot (a
// .snapshot file, or the producer-snapshot part of a bucket object), the
// first offset of the earliest transaction open where the snapshot was
// taken; ok is false when none was. A cold-tier pass reads it from the
// newest object it would clean: nothing at or above it is decided yet.
func SnapshotFirstUnstable(snapshot []byte) (first int64, ok bool, err error) {
	if len(snapshot) < snapshotHeaderSize {
		return 0, false, fmt.Errorf("segment: %w: %d bytes", errBadSnapshot, len(snapshot))
	}
	m, err := decodeSnapshot(snapshot, int64(binary.BigEndian.Uint64(snapshot[6:])))
	if err != nil {
		return 0, false, fmt.Errorf("segment: %w", err)
	}
	for _, e := range m {
		if e.txnOpen && (!ok || e.txnFirst < first) {
			first, ok = e.txnFirst, true
		}
	}
	return first, ok, nil
}
