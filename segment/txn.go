package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Transaction markers (docs/format.md §14). A marker is a control batch
// (attributes transactional + control) holding one record whose key is
// version int16 + type int16 and whose value is version int16 +
// coordinatorEpoch int32, as Kafka's EndTransactionMarker.
const (
	markerTypeAbort  = 0
	markerTypeCommit = 1

	markerKeySize   = 4
	markerValueSize = 6
)

// TxnMarker is an END_TXN marker record: how a transaction ended and the
// epoch of the coordinator that ended it.
type TxnMarker struct {
	Commit           bool
	CoordinatorEpoch int32
}

// DecodeTxnMarker decodes the key and value of a control record. A key of
// another control type (Kafka's KRaft records) is not an END_TXN marker:
// ErrInvalidRecord, as for anything malformed.
func DecodeTxnMarker(key, value []byte) (TxnMarker, error) {
	if len(key) < markerKeySize {
		return TxnMarker{}, fmt.Errorf("%w: control record key of %d bytes", ErrInvalidRecord, len(key))
	}
	if v := int16(binary.BigEndian.Uint16(key)); v < 0 {
		return TxnMarker{}, fmt.Errorf("%w: control record key version %d", ErrInvalidRecord, v)
	}
	var m TxnMarker
	switch t := int16(binary.BigEndian.Uint16(key[2:])); t {
	case markerTypeAbort:
	case markerTypeCommit:
		m.Commit = true
	default:
		return TxnMarker{}, fmt.Errorf("%w: control record type %d is not a transaction marker", ErrInvalidRecord, t)
	}
	// Later value versions only append fields (KIP-890 adds tagged ones):
	// the epoch stays where version 0 put it.
	if len(value) < markerValueSize {
		return TxnMarker{}, fmt.Errorf("%w: transaction marker value of %d bytes", ErrInvalidRecord, len(value))
	}
	if v := int16(binary.BigEndian.Uint16(value)); v < 0 {
		return TxnMarker{}, fmt.Errorf("%w: transaction marker value version %d", ErrInvalidRecord, v)
	}
	m.CoordinatorEpoch = int32(binary.BigEndian.Uint32(value[2:]))
	return m, nil
}

// markerOf returns the marker a stored control batch carries; ok is false
// for an empty one (compaction removed its record) or any other batch.
func markerOf(h *BatchHeader, batch []byte) (TxnMarker, bool, error) {
	if !h.IsControl() || h.NumRecords == 0 {
		return TxnMarker{}, false, nil
	}
	recs, done, err := batchRecords(h, batch)
	if err != nil {
		return TxnMarker{}, false, err
	}
	defer done()
	w := newRecordWalk(h, recs)
	var rec Record
	r, _, ok, err := w.next(&rec)
	if err == nil && !ok {
		err = fmt.Errorf("%w: no record", ErrCorruptMessage)
	}
	if err != nil {
		return TxnMarker{}, false, fmt.Errorf("control batch at offset %d: %w", h.BaseOffset, err)
	}
	if r.nullKey || r.nullValue {
		return TxnMarker{}, false, fmt.Errorf("%w: control batch at offset %d has a null key or value", ErrInvalidRecord, h.BaseOffset)
	}
	m, err := DecodeTxnMarker(r.key, r.value)
	if err != nil {
		return TxnMarker{}, false, fmt.Errorf("control batch at offset %d: %w", h.BaseOffset, err)
	}
	return m, true, nil
}

// encodeMarkerBatch builds the control batch of one END_TXN marker as
// Kafka's MemoryRecords.withEndTransactionMarker does: no sequence, the
// producer's id and epoch, the marker's timestamp as every timestamp.
func encodeMarkerBatch(producerID int64, producerEpoch int16, m TxnMarker, ts int64) []byte {
	var key [markerKeySize]byte
	if m.Commit {
		binary.BigEndian.PutUint16(key[2:], markerTypeCommit)
	}
	var value [markerValueSize]byte
	binary.BigEndian.PutUint32(value[2:], uint32(m.CoordinatorEpoch))
	var body []byte
	body = append(body, 0)              // record attributes
	body = binary.AppendVarint(body, 0) // timestamp delta
	body = binary.AppendVarint(body, 0) // offset delta
	body = binary.AppendVarint(body, int64(len(key)))
	body = append(body, key[:]...)
	body = binary.AppendVarint(body, int64(len(value)))
	body = append(body, value[:]...)
	body = binary.AppendVarint(body, 0) // headers
	rec := binary.AppendVarint(nil, int64(len(body)))
	rec = append(rec, body...)

	b := make([]byte, headerSize, headerSize+len(rec))
	binary.BigEndian.PutUint64(b[offBaseOffset:], 0)
	binary.BigEndian.PutUint32(b[offLength:], uint32(headerSize+len(rec)-logOverhead))
	binary.BigEndian.PutUint32(b[offLeaderEpoch:], math.MaxUint32) // -1 until stamped
	b[offMagic] = 2
	binary.BigEndian.PutUint16(b[offAttributes:], attrTransactional|attrControl)
	binary.BigEndian.PutUint32(b[offLastOffsetDelta:], 0)
	binary.BigEndian.PutUint64(b[offFirstTimestamp:], uint64(ts))
	binary.BigEndian.PutUint64(b[offMaxTimestamp:], uint64(ts))
	binary.BigEndian.PutUint64(b[offProducerID:], uint64(producerID))
	binary.BigEndian.PutUint16(b[offProducerEpoch:], uint16(producerEpoch))
	binary.BigEndian.PutUint32(b[offBaseSequence:], math.MaxUint32) // -1
	binary.BigEndian.PutUint32(b[offNumRecords:], 1)
	b = append(b, rec...)
	binary.BigEndian.PutUint32(b[offCRC:], batchCRC(b))
	return b
}

// AppendMarker writes the END_TXN marker of producerID's transaction
// (WriteTxnMarkers), completing it: the last stable offset moves past it
// and an abort is recorded in the aborted-transaction index. A marker
// for a producer with no ongoing transaction is written all the same, as
// Kafka does (a retried WriteTxnMarkers), and completes nothing. A
// producer epoch below the producer's is ErrInvalidProducerEpoch, a
// coordinator epoch below the last marker's is
// ErrTransactionCoordinatorFenced.
func (l *Log) AppendMarker(producerID int64, producerEpoch int16, commit bool, coordinatorEpoch int32, leaderEpoch int32) (AppendInfo, error) {
	if producerID < 0 {
		return AppendInfo{}, fmt.Errorf("%w: transaction marker for producer id %d", ErrInvalidRecord, producerID)
	}
	b := encodeMarkerBatch(producerID, producerEpoch, TxnMarker{Commit: commit, CoordinatorEpoch: coordinatorEpoch}, l.now().UnixMilli())
	return l.Append(b, leaderEpoch)
}

// completedTxn is a transaction a marker ended, after Kafka's
// CompletedTxn.
type completedTxn struct {
	producerID              int64
	firstOffset, lastOffset int64
	aborted                 bool
	// lso is the last stable offset right after the marker, set by
	// whoever applies it (the state around it is theirs).
	lso int64
}

// FirstUnstableOffset returns the smallest first offset of the ongoing
// transactions, ok=false when there is none. The last stable offset a
// read_committed fetch stops at is min(high watermark, this).
func (l *Log) FirstUnstableOffset() (int64, bool) {
	v := l.unstable.Load()
	return v - 1, v > 0
}

// FirstUnstableOffsetBelow is FirstUnstableOffset for a reader bounded by
// the high watermark hw: a transaction whose marker is at or above hw is
// still unstable there (the marker may not survive a change of leader, so
// neither may the outcome a reader would draw from it), as in Kafka's
// ProducerStateManager.firstUnstableOffset. Transactions whose markers
// hw has passed are forgotten: hw only moves past what the replicas hold.
func (l *Log) FirstUnstableOffsetBelow(hw int64) (int64, bool) {
	first, ok := l.FirstUnstableOffset()
	u := &l.unreplicated
	u.Lock()
	defer u.Unlock()
	drop := 0
	for drop < len(u.txns) && u.txns[drop].lastOffset < hw {
		drop++
	}
	u.txns = u.txns[drop:]
	for _, c := range u.txns {
		if !ok || c.firstOffset < first {
			first, ok = c.firstOffset, true
		}
	}
	return first, ok
}

// addUnreplicated records the transactions markers just completed.
func (l *Log) addUnreplicated(completed []completedTxn) {
	u := &l.unreplicated
	u.Lock()
	u.txns = append(u.txns, completed...)
	u.Unlock()
}

// dropUnreplicatedFrom forgets the completed transactions whose markers a
// truncation to end removed.
func (l *Log) dropUnreplicatedFrom(end int64) {
	u := &l.unreplicated
	u.Lock()
	defer u.Unlock()
	keep := u.txns[:0]
	for _, c := range u.txns {
		if c.lastOffset < end {
			keep = append(keep, c)
		}
	}
	u.txns = keep
}

// publishUnstableLocked recomputes the first unstable offset from the
// producer state after it changed.
func (l *Log) publishUnstableLocked() {
	first := int64(-1)
	for _, e := range l.w.producers {
		if e.txnOpen && (first < 0 || e.txnFirst < first) {
			first = e.txnFirst
		}
	}
	l.unstable.Store(first + 1) // 0: none
}

// stableAfter is the last stable offset once c is complete: the
// first offset of the earliest other ongoing transaction, or the offset
// after the marker (Kafka's ProducerStateManager.lastStableOffset).
func stableAfter(producers map[int64]*producerEntry, c completedTxn) int64 {
	lso := c.lastOffset + 1
	for id, e := range producers {
		if id != c.producerID && e.txnOpen && e.txnFirst < lso {
			lso = e.txnFirst
		}
	}
	return lso
}

// replayFn receives each batch of a scan with the marker it carries.
type replayFn func(h *BatchHeader, m TxnMarker, isMarker bool)

// scanProducerBatches is scanHeaders that also reads the marker of each
// control batch, which producer state and the aborted-transaction index
// need. A control batch whose marker cannot be read counts as carrying
// none: the scan stops at nothing recovery kept.
func (l *Log) scanProducerBatches(from int64, fn replayFn) error {
	segs := l.mu.segs
	for i, s := range segs {
		if i+1 < len(segs) && segs[i+1].base <= from {
			continue
		}
		var pos int64
		if s.base < from {
			var err error
			if pos, _, err = s.position(from, s.size, l.w.cfg.IndexIntervalBytes, l.logger); err != nil {
				return err
			}
		}
		sc := newScanner(s.f, pos, s.size, false)
		for {
			hb, p, err := sc.next()
			if err == io.EOF {
				break
			}
			var se *scanError
			if errors.As(err, &se) {
				l.logger.Warn("stopping header scan at an unreadable batch", "segment", s.logPath(), "err", err)
				break
			}
			if err != nil {
				return err
			}
			h := decodeHeader(hb)
			if h.BaseOffset < from {
				continue
			}
			var m TxnMarker
			var isMarker bool
			if h.IsControl() && h.ProducerID >= 0 {
				batch, rerr := s.readBatchAt(nil, p, h.Size())
				if rerr == nil {
					m, isMarker, rerr = markerOf(&h, batch)
				}
				if rerr != nil {
					l.logger.Warn("unreadable transaction marker", "segment", s.logPath(), "offset", h.BaseOffset, "err", rerr)
				}
			}
			fn(&h, m, isMarker)
		}
	}
	return nil
}

// completeTxnsLocked records what an append's transactional batches did,
// once they are written: aborts go to the active segment's index and the
// first unstable offset is published again.
func (l *Log) completeTxnsLocked(s *segment) error {
	if !l.w.txnChanged {
		return nil
	}
	l.w.txnChanged = false
	err := l.indexAbortsLocked(s, l.w.completed)
	l.addUnreplicated(l.w.completed)
	l.publishUnstableLocked()
	return err
}

// indexAbortsLocked appends the aborted ones of completed to s's index.
func (l *Log) indexAbortsLocked(s *segment, completed []completedTxn) error {
	var entries []AbortedTxn
	for _, c := range completed {
		if !c.aborted {
			continue
		}
		entries = append(entries, AbortedTxn{ProducerID: c.producerID, FirstOffset: c.firstOffset, LastOffset: c.lastOffset, LastStableOffset: c.lso})
	}
	if len(entries) == 0 {
		return nil
	}
	return l.appendTxnIndexLocked(s, entries)
}

func abortedEntry(producers map[int64]*producerEntry, c completedTxn) AbortedTxn {
	return AbortedTxn{ProducerID: c.producerID, FirstOffset: c.firstOffset, LastOffset: c.lastOffset, LastStableOffset: stableAfter(producers, c)}
}

// stableAfterPendingLocked is stableAfter for a marker of an append being
// checked, against the state as staged up to it. Markers are rare enough
// that building the view each time costs nothing that matters.
func (l *Log) stableAfterPendingLocked(c completedTxn) int64 {
	return stableAfter(l.pendingView(), c)
}

// pendingView is the committed producer state overlaid with the staged.
func (l *Log) pendingView() map[int64]*producerEntry {
	m := make(map[int64]*producerEntry, len(l.w.producers)+len(l.w.pending))
	for id, e := range l.w.producers {
		m[id] = e
	}
	for i := range l.w.pending {
		m[l.w.pending[i].id] = &l.w.pending[i].e
	}
	return m
}

// applyReplicaProducersLocked applies replicated batches to producer state
// and the transaction index as the leader's append did, without judging
// them (the leader did, as Kafka's REPLICATION origin): the same markers
// give the same .txnindex entries on every replica.
func (l *Log) applyReplicaProducersLocked(seg *segment, records []byte, hdrs []BatchHeader, nowMs int64) error {
	var completed []completedTxn
	changed := false
	p := 0
	for i := range hdrs {
		h := &hdrs[i]
		batch := records[p : p+h.Size()]
		p += h.Size()
		if h.ProducerID < 0 {
			continue
		}
		var m TxnMarker
		isMarker := false
		if h.IsControl() {
			var err error
			if m, isMarker, err = markerOf(h, batch); err != nil {
				l.logger.Warn("replicated control batch without a readable marker", "dir", l.dir, "offset", h.BaseOffset, "err", err)
			}
		}
		wasOpen := false
		if e, ok := l.w.producers[h.ProducerID]; ok {
			wasOpen = e.txnOpen
		}
		c, done := applyProducerBatch(l.w.producers, h, m, isMarker, nowMs)
		if done {
			c.lso = stableAfter(l.w.producers, c)
			completed = append(completed, c)
		}
		changed = changed || done || wasOpen != l.w.producers[h.ProducerID].txnOpen
	}
	if !changed {
		return nil
	}
	l.w.completed, l.w.txnChanged = completed, true
	return l.completeTxnsLocked(seg)
}

// truncateTxnIndex drops the entries of aborts whose markers are at or
// above end (Kafka's TransactionIndex.truncateTo).
func truncateTxnIndex(path string, end int64) error {
	entries, err := readTxnIndex(path)
	if err != nil && !errors.Is(err, errBadTxnIndex) {
		return err
	}
	// A torn file keeps its whole entries.
	keep := entries
	for i, a := range entries {
		if a.LastOffset >= end {
			keep = entries[:i]
			break
		}
	}
	if len(keep) == len(entries) && err == nil {
		return nil
	}
	return writeTxnIndex(path, keep)
}
