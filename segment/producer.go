package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
)

// maxCachedBatches is how many recent batches are remembered per producer
// for duplicate detection, as in Kafka (the producer keeps at most five
// requests in flight per connection).
const maxCachedBatches = 5

// batchMeta identifies an appended idempotent batch.
type batchMeta struct {
	firstSeq, lastSeq       int32
	firstOffset, lastOffset int64
}

// producerEntry is the state of one idempotent producer, after Kafka's
// ProducerStateEntry.
type producerEntry struct {
	epoch int16
	// lastWrite is when the producer last appended (Unix ms, the log's
	// clock), what expiry goes by: its records' CreateTime may be any age
	// (a mirror, a backfill) while it is very much alive.
	lastWrite int64
	n         int // cached batches in use, oldest first
	batches   [maxCachedBatches]batchMeta
	// coordEpoch is the coordinator epoch of the producer's last marker:
	// a marker from an older coordinator is fenced.
	coordEpoch int32
	// txnOpen says the producer has a transaction ongoing here, which
	// began at txnFirst (Kafka's currentTxnFirstOffset).
	txnOpen  bool
	txnFirst int64
}

func (e *producerEntry) lastSeq() (int32, bool) {
	if e.n == 0 {
		return 0, false
	}
	return e.batches[e.n-1].lastSeq, true
}

// duplicateOf returns the cached batch with the same sequence range.
func (e *producerEntry) duplicateOf(h *BatchHeader) (batchMeta, bool) {
	if h.ProducerEpoch != e.epoch {
		return batchMeta{}, false
	}
	last := h.lastSequence()
	for _, m := range e.batches[:e.n] {
		if m.firstSeq == h.BaseSequence && m.lastSeq == last {
			return m, true
		}
	}
	return batchMeta{}, false
}

// check applies Kafka's ProducerAppendInfo rules to a batch from a producer
// whose state is e (known=false: never seen, or forgotten); m is the
// marker of a control batch.
func (e *producerEntry) check(known bool, h *BatchHeader, m TxnMarker, origin appendOrigin) error {
	if err := e.checkSequence(known, h, origin); err != nil || !known {
		return err
	}
	switch {
	case h.IsControl() && m.CoordinatorEpoch < e.coordEpoch:
		return fmt.Errorf("%w: marker for producer %d from coordinator epoch %d, below the last one's %d", ErrTransactionCoordinatorFenced, h.ProducerID, m.CoordinatorEpoch, e.coordEpoch)
	case !h.IsControl() && e.txnOpen && !h.IsTransactional():
		return fmt.Errorf("%w: producer %d has a transaction ongoing since offset %d and sent a non-transactional batch", ErrInvalidTxnState, h.ProducerID, e.txnFirst)
	}
	return nil
}

// checkSequence is check's epoch and sequence part.
func (e *producerEntry) checkSequence(known bool, h *BatchHeader, origin appendOrigin) error {
	if !known {
		// KIP-360: the producer's state may have expired or gone with
		// deleted segments while it lives on, so any first sequence is
		// accepted and the ones after it are checked.
		return nil
	}
	if h.ProducerEpoch < e.epoch {
		return fmt.Errorf("%w: producer %d epoch %d is older than the current %d", ErrInvalidProducerEpoch, h.ProducerID, h.ProducerEpoch, e.epoch)
	}
	if h.IsControl() || origin == originCoordinator {
		return nil // markers carry no sequence; see FromCoordinator
	}
	if h.ProducerEpoch != e.epoch {
		if h.BaseSequence != 0 {
			return fmt.Errorf("%w: producer %d epoch %d must start at sequence 0, not %d", ErrOutOfOrderSequence, h.ProducerID, h.ProducerEpoch, h.BaseSequence)
		}
		return nil
	}
	last, ok := e.lastSeq()
	if !ok {
		if h.BaseSequence != 0 {
			return fmt.Errorf("%w: producer %d must start at sequence 0, not %d", ErrOutOfOrderSequence, h.ProducerID, h.BaseSequence)
		}
		return nil
	}
	if !(h.BaseSequence == last+1 || (last == 1<<31-1 && h.BaseSequence == 0)) {
		return fmt.Errorf("%w: producer %d expected sequence %d, got %d", ErrOutOfOrderSequence, h.ProducerID, incrementSequence(last, 1), h.BaseSequence)
	}
	return nil
}

// apply records a batch (whose offsets are final in h) appended at
// writeMs; a control batch carries marker m when isMarker. It returns the
// transaction the marker completed, if it completed one: a marker with
// no transaction ongoing (a retry, or one whose data went with expired
// state) completes nothing, as in Kafka.
func (e *producerEntry) apply(h *BatchHeader, m TxnMarker, isMarker bool, writeMs int64) (completedTxn, bool) {
	if h.ProducerEpoch != e.epoch {
		e.epoch, e.n = h.ProducerEpoch, 0
	}
	e.lastWrite = max(e.lastWrite, writeMs)
	if h.IsControl() {
		if !isMarker {
			return completedTxn{}, false
		}
		c := completedTxn{producerID: h.ProducerID, firstOffset: e.txnFirst, lastOffset: h.BaseOffset, aborted: !m.Commit}
		done := e.txnOpen
		e.txnOpen, e.txnFirst, e.coordEpoch = false, 0, m.CoordinatorEpoch
		return c, done
	}
	if h.IsTransactional() && !e.txnOpen {
		e.txnOpen, e.txnFirst = true, h.BaseOffset
	}
	if e.n == maxCachedBatches {
		copy(e.batches[:], e.batches[1:])
		e.n--
	}
	e.batches[e.n] = batchMeta{
		firstSeq: h.BaseSequence, lastSeq: h.lastSequence(),
		firstOffset: h.BaseOffset, lastOffset: h.LastOffset(),
	}
	e.n++
	return completedTxn{}, false
}

// Snapshot encoding (docs/format.md §5).
// Version 2 adds each producer's coordinator epoch and ongoing
// transaction; version 1 files still load, as producers with neither.
const (
	snapshotVersion    = 2
	snapshotHeaderSize = 2 + 4 + 8 + 4
	// Fixed part of a producer: id, epoch, lastWrite, [v2: coordinator
	// epoch, transaction first offset or -1], batch count.
	snapshotEntryV1 = 8 + 2 + 8 + 1
	snapshotEntryV2 = snapshotEntryV1 + 4 + 8
)

func encodeSnapshot(offset int64, producers map[int64]*producerEntry) []byte {
	ids := make([]int64, 0, len(producers))
	for id := range producers {
		ids = append(ids, id)
	}
	slices.Sort(ids) // deterministic files
	b := make([]byte, snapshotHeaderSize, snapshotHeaderSize+len(ids)*(snapshotEntryV2+maxCachedBatches*24))
	binary.BigEndian.PutUint16(b, snapshotVersion)
	binary.BigEndian.PutUint64(b[6:], uint64(offset))
	binary.BigEndian.PutUint32(b[14:], uint32(len(ids)))
	for _, id := range ids {
		e := producers[id]
		b = binary.BigEndian.AppendUint64(b, uint64(id))
		b = binary.BigEndian.AppendUint16(b, uint16(e.epoch))
		b = binary.BigEndian.AppendUint64(b, uint64(e.lastWrite))
		b = binary.BigEndian.AppendUint32(b, uint32(e.coordEpoch))
		first := int64(-1)
		if e.txnOpen {
			first = e.txnFirst
		}
		b = binary.BigEndian.AppendUint64(b, uint64(first))
		b = append(b, byte(e.n))
		for _, m := range e.batches[:e.n] {
			b = binary.BigEndian.AppendUint32(b, uint32(m.firstSeq))
			b = binary.BigEndian.AppendUint32(b, uint32(m.lastSeq))
			b = binary.BigEndian.AppendUint64(b, uint64(m.firstOffset))
			b = binary.BigEndian.AppendUint64(b, uint64(m.lastOffset))
		}
	}
	binary.BigEndian.PutUint32(b[2:], crc32.Checksum(b[6:], castagnoli))
	return b
}

var errBadSnapshot = errors.New("malformed producer snapshot")

func decodeSnapshot(b []byte, offset int64) (map[int64]*producerEntry, error) {
	if len(b) < snapshotHeaderSize {
		return nil, fmt.Errorf("%w: %d bytes", errBadSnapshot, len(b))
	}
	version := binary.BigEndian.Uint16(b)
	fixed := snapshotEntryV2
	switch version {
	case 1:
		fixed = snapshotEntryV1
	case snapshotVersion:
	default:
		return nil, fmt.Errorf("%w: version %d", errBadSnapshot, version)
	}
	if want, got := binary.BigEndian.Uint32(b[2:]), crc32.Checksum(b[6:], castagnoli); want != got {
		return nil, fmt.Errorf("%w: CRC-32C mismatch", errBadSnapshot)
	}
	if off := int64(binary.BigEndian.Uint64(b[6:])); off != offset {
		return nil, fmt.Errorf("%w: offset %d does not match its name", errBadSnapshot, off)
	}
	n := binary.BigEndian.Uint32(b[14:])
	b = b[snapshotHeaderSize:]
	if uint64(n)*uint64(fixed) > uint64(len(b)) {
		return nil, fmt.Errorf("%w: %d producers in %d bytes", errBadSnapshot, n, len(b))
	}
	m := make(map[int64]*producerEntry, n)
	for range n {
		if len(b) < fixed {
			return nil, fmt.Errorf("%w: truncated", errBadSnapshot)
		}
		id := int64(binary.BigEndian.Uint64(b))
		e := &producerEntry{
			epoch:     int16(binary.BigEndian.Uint16(b[8:])),
			lastWrite: int64(binary.BigEndian.Uint64(b[10:])),
			n:         int(b[fixed-1]),
		}
		if version >= 2 {
			e.coordEpoch = int32(binary.BigEndian.Uint32(b[18:]))
			if first := int64(binary.BigEndian.Uint64(b[22:])); first >= 0 {
				e.txnOpen, e.txnFirst = true, first
			} else if first != -1 {
				return nil, fmt.Errorf("%w: transaction first offset %d", errBadSnapshot, first)
			}
		}
		b = b[fixed:]
		if e.n > maxCachedBatches || len(b) < e.n*24 {
			return nil, fmt.Errorf("%w: truncated", errBadSnapshot)
		}
		for i := range e.n {
			e.batches[i] = batchMeta{
				firstSeq:    int32(binary.BigEndian.Uint32(b)),
				lastSeq:     int32(binary.BigEndian.Uint32(b[4:])),
				firstOffset: int64(binary.BigEndian.Uint64(b[8:])),
				lastOffset:  int64(binary.BigEndian.Uint64(b[16:])),
			}
			b = b[24:]
		}
		m[id] = e
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBadSnapshot, len(b))
	}
	return m, nil
}

// ProducerLastOffsets returns, for each producer in the log's current
// state, the last offset of its last batch: compaction keeps that batch,
// emptied if need be (FilterOptions.RetainEmpty), so that the producer's
// sequence numbers are still found after a restart (Kafka's
// BatchRetention.RETAIN_EMPTY). A producer whose state holds no data batch
// (only transaction markers since its epoch began) is left out.
func (l *Log) ProducerLastOffsets() map[int64]int64 {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	return lastOffsets(l.w.producers)
}

// SnapshotLastOffsets is ProducerLastOffsets for an encoded producer
// snapshot (a .snapshot file, or the producer-snapshot part of a bucket
// object): the state as of the offset the snapshot was taken at.
func SnapshotLastOffsets(snapshot []byte) (map[int64]int64, error) {
	if len(snapshot) < snapshotHeaderSize {
		return nil, fmt.Errorf("segment: %w: %d bytes", errBadSnapshot, len(snapshot))
	}
	m, err := decodeSnapshot(snapshot, int64(binary.BigEndian.Uint64(snapshot[6:])))
	if err != nil {
		return nil, fmt.Errorf("segment: %w", err)
	}
	return lastOffsets(m), nil
}

func lastOffsets(producers map[int64]*producerEntry) map[int64]int64 {
	out := make(map[int64]int64, len(producers))
	for id, e := range producers {
		if e.n > 0 {
			out[id] = e.batches[e.n-1].lastOffset
		}
	}
	return out
}
