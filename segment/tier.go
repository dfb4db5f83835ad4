package segment

import (
	"encoding/binary"
	"fmt"
	"os"
	"time"
)

// SegmentInfo describes a closed segment, for copying it to the cold tier.
// The files it names are immutable while the segment exists; a caller that
// reads them may find them gone if retention or topic deletion removed the
// segment in the meantime, and must treat that as "no longer needed".
type SegmentInfo struct {
	// BaseOffset is the first offset the segment may hold and EndOffset the
	// next segment's base: the segment covers [BaseOffset, EndOffset).
	BaseOffset, EndOffset int64
	// Size is the number of bytes of the .log file.
	Size int64
	// MaxTimestamp is the largest record timestamp, -1 if none.
	MaxTimestamp int64
	// LogPath, IndexPath and TimeIndexPath are the segment's files.
	LogPath, IndexPath, TimeIndexPath string
	// SnapshotPath is the idempotent-producer snapshot taken when the
	// segment was sealed (state as of EndOffset), "" if there is none.
	SnapshotPath string
	// TxnIndexPath is the segment's aborted-transaction index
	// (docs/format.md §14), "" if no transaction aborted in it.
	TxnIndexPath string
}

// ClosedSegments lists the sealed segments in offset order, starting with
// the first one that ends after from (so a caller that has copied
// everything below from gets only what is new).
func (l *Log) ClosedSegments(from int64) ([]SegmentInfo, error) {
	l.mu.RLock()
	segs := l.mu.segs
	// Sizes are read here: TruncateTo may cut one of these segments once
	// they are unpinned.
	sizes := make([]int64, len(segs))
	for i, s := range segs {
		s.pin()
		sizes[i] = s.size
	}
	interval := l.mu.interval
	l.mu.RUnlock()
	defer unpinAll(segs)

	var out []SegmentInfo
	for i := 0; i < len(segs)-1; i++ {
		s, next := segs[i], segs[i+1]
		if next.base <= from {
			continue
		}
		ts, _, err := s.maxTimestampShallow(sizes[i], interval, l.logger)
		if err != nil {
			return nil, fmt.Errorf("segment %d: %w", s.base, err)
		}
		info := SegmentInfo{
			BaseOffset:    s.base,
			EndOffset:     next.base,
			Size:          sizes[i],
			MaxTimestamp:  ts,
			LogPath:       s.logPath(),
			IndexPath:     s.indexPath(),
			TimeIndexPath: s.timeIndexPath(),
		}
		snap := offsetName(l.dir, next.base, snapshotSuffix)
		if _, err := os.Stat(snap); err == nil {
			info.SnapshotPath = snap
		}
		if fi, err := os.Stat(s.txnIndexPath()); err == nil && fi.Size() > 0 {
			info.TxnIndexPath = s.txnIndexPath()
		}
		out = append(out, info)
	}
	return out, nil
}

// SetTieredOffset records that every record below offset is in the cold
// tier, which lets a Tiered log's retention delete local segments wholly
// below it. The offset never moves backwards.
func (l *Log) SetTieredOffset(offset int64) {
	l.writeMu.Lock()
	l.w.tiered = max(l.w.tiered, offset)
	l.writeMu.Unlock()
}

// RollIfOlder seals the active segment when it holds data and its first
// append is older than age, so that a quiet partition's data still becomes
// a closed segment the tier can copy. It reports whether it rolled.
func (l *Log) RollIfOlder(age time.Duration) (bool, error) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.mu.closed {
		return false, ErrClosed
	}
	if l.w.failed != nil {
		return false, l.w.failed
	}
	s := l.active()
	if s.size == 0 || s.created.IsZero() || l.now().Sub(s.created) < age {
		return false, nil
	}
	if err := l.rollLocked(); err != nil {
		return false, err
	}
	return true, nil
}

// FirstRecordAtOrAfter looks inside one stored batch (as Read returns them,
// CRC already checked) for the first record whose timestamp is at least ts
// and whose offset is at least minOffset, decompressing if it must. The
// cold tier uses it to answer ListOffsets by timestamp from bucket bytes.
func FirstRecordAtOrAfter(batch []byte, ts, minOffset int64) (offset, timestamp int64, ok bool, err error) {
	h, err := ParseBatchHeader(batch)
	if err != nil {
		return 0, 0, false, err
	}
	if h.Size() != len(batch) {
		return 0, 0, false, fmt.Errorf("%w: batch of %d bytes holds %d", ErrCorruptMessage, h.Size(), len(batch))
	}
	return firstRecordAtOrAfter(batch, ts, minOffset)
}

// CRCMatches reports whether batch, the whole batch h was parsed from,
// matches its CRC-32C.
func (h BatchHeader) CRCMatches(batch []byte) bool {
	return h.Size() == len(batch) && batchCRC(batch) == h.CRC
}

// SnapshotOpenTransactions returns the transactions open in an encoded
// producer snapshot (a .snapshot file, or the producer-snapshot part of a
// bucket object), producer id -> first offset: the state as of the offset
// the snapshot was taken at. A version 1 snapshot, written before
// transactions existed, has none.
func SnapshotOpenTransactions(snapshot []byte) (map[int64]int64, error) {
	if len(snapshot) < snapshotHeaderSize {
		return nil, fmt.Errorf("segment: %w: %d bytes", errBadSnapshot, len(snapshot))
	}
	m, err := decodeSnapshot(snapshot, int64(binary.BigEndian.Uint64(snapshot[6:])))
	if err != nil {
		return nil, fmt.Errorf("segment: %w", err)
	}
	out := make(map[int64]int64)
	for id, e := range m {
		if e.txnOpen {
			out[id] = e.txnFirst
		}
	}
	return out, nil
}

// CheckSnapshot reports whether snapshot is a producer snapshot (a
// .snapshot file, or the producer-snapshot part of a bucket object) taken
// at offset, as TruncateFullyAndStartAt takes one.
func CheckSnapshot(snapshot []byte, offset int64) error {
	if _, err := decodeSnapshot(snapshot, offset); err != nil {
		return fmt.Errorf("segment: %w", err)
	}
	return nil
}

// EncodeTxnIndex encodes aborted transactions as a .txnindex file holds
// them (docs/format.md §14), in the order given: what the bucket object of
// a rewritten segment carries as its txn index part.
func EncodeTxnIndex(txns []AbortedTxn) []byte {
	var b []byte
	for _, a := range txns {
		b = appendTxnEntry(b, a)
	}
	return b
}
