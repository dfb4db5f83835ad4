package segment

import (
	"fmt"
)

// attrDeleteHorizon is attribute bit 6 (KIP-534): firstTimestamp holds the
// batch's delete horizon, and record timestamp deltas are relative to it.
const attrDeleteHorizon = 0x40

// Record is one record of a batch as compaction sees it.
type Record struct {
	Offset    int64  // base offset + offset delta
	Timestamp int64  // the record's timestamp (LogAppendTime batches: the header's maxTimestamp)
	Key       []byte // nil for a null key; valid only during the callback
	Tombstone bool   // the value is null
}

// DeleteHorizon returns the batch's delete horizon (KIP-534) and whether
// it has one: a compacted batch's tombstones may go once the horizon has
// passed.
func (h BatchHeader) DeleteHorizon() (int64, bool) {
	if h.Attributes&attrDeleteHorizon == 0 {
		return 0, false
	}
	return h.FirstTimestamp, true
}

// checkStoredBatch checks b, exactly one v2 batch, as the log may hold it:
// written by a producer, or left by compaction (on this replica or on the
// leader a follower copies). Compaction keeps a batch's offset span while
// removing records, so NumRecords may be anything from 0 to
// lastOffsetDelta+1. Only the header is read: the CRC-32C vouches for the
// records, which a follower or recovery has no reason to decompress.
func checkStoredBatch(b []byte) (BatchHeader, error) {
	h, err := ParseBatchHeader(b)
	if err != nil {
		return h, err
	}
	if int64(len(b)) != int64(h.Size()) {
		return h, fmt.Errorf("%w: batchLength %d does not match the %d bytes given", ErrCorruptMessage, h.Length, len(b))
	}
	if crc := batchCRC(b); crc != h.CRC {
		return h, fmt.Errorf("%w: CRC-32C mismatch (header %08x, computed %08x)", ErrCorruptMessage, h.CRC, crc)
	}
	if h.LastOffsetDelta < 0 || h.NumRecords < 0 || int64(h.NumRecords) > int64(h.LastOffsetDelta)+1 {
		return h, fmt.Errorf("%w: %d records in a batch with lastOffsetDelta %d", ErrInvalidRecord, h.NumRecords, h.LastOffsetDelta)
	}
	return h, nil
}

// batchRecords returns the encoded records of batch, whose header h
// checkStoredBatch accepted, decompressed when they are compressed, and a
// function that gives the buffer back once the caller is done with them.
// Decompression stops at maxDecompressed, the bound validation applies
// when no batch limit is set.
func batchRecords(h *BatchHeader, batch []byte) ([]byte, func(), error) {
	src := batch[headerSize:]
	codec := h.Codec()
	switch {
	case codec == codecNone:
		return src, func() {}, nil
	case codec > codecZstd:
		return nil, nil, fmt.Errorf("%w: unknown compression codec %d", ErrCorruptMessage, codec)
	case len(src) == 0 && h.NumRecords == 0:
		return nil, func() {}, nil
	}
	var pooled *[]byte
	var out []byte
	var err error
	if codec == codecSnappy {
		pooled, out, err = decompressSnappy(src, maxDecompressed)
	} else {
		pooled, out, err = decompress(codec, src)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("batch at offset %d: %w", h.BaseOffset, decompressError(codec, err, maxDecompressed))
	}
	return out, func() { putBuf(pooled) }, nil
}

// recordWalk iterates over the records of a stored batch, checking them
// as a compacted batch allows: exactly NumRecords of them, offset deltas
// strictly increasing within [0, lastOffsetDelta], nothing after the last.
type recordWalk struct {
	h    *BatchHeader
	it   recordIter
	i    int32
	prev int64
}

func newRecordWalk(h *BatchHeader, recs []byte) recordWalk {
	return recordWalk{h: h, it: recordIter{b: recs}, prev: -1}
}

// next returns the next record, its encoding (length prefix included) and
// its Record view; ok is false after the last record, when err says
// whether the records ended as they should.
func (w *recordWalk) next(rec *Record) (r record, raw []byte, ok bool, err error) {
	if w.i >= w.h.NumRecords {
		if len(w.it.b) != 0 {
			return r, nil, false, fmt.Errorf("%w: %d bytes after the last of %d records", ErrCorruptMessage, len(w.it.b), w.h.NumRecords)
		}
		return r, nil, false, nil
	}
	before := w.it.b
	if r, err = w.it.next(); err != nil {
		return r, nil, false, fmt.Errorf("record %d: %w", w.i, err)
	}
	if r.offsetDelta <= w.prev || r.offsetDelta > int64(w.h.LastOffsetDelta) {
		return r, nil, false, fmt.Errorf("%w: record %d has offset delta %d after %d in a batch with lastOffsetDelta %d",
			ErrInvalidRecord, w.i, r.offsetDelta, w.prev, w.h.LastOffsetDelta)
	}
	w.prev = r.offsetDelta
	w.i++
	raw = before[:len(before)-len(w.it.b)]
	*rec = Record{
		Offset:    w.h.BaseOffset + r.offsetDelta,
		Timestamp: recordTimestamp(w.h, r.timestampDelta),
		Key:       r.key,
		Tombstone: r.nullValue,
	}
	return r, raw, true, nil
}

// recordTimestamp is the timestamp a consumer sees for a record of h.
func recordTimestamp(h *BatchHeader, delta int64) int64 {
	if h.Attributes&attrLogAppendTime != 0 {
		return h.MaxTimestamp
	}
	return h.FirstTimestamp + delta
}

// ForEachRecord calls fn for each record of batch (one whole v2 batch), in
// order, decompressing as it goes with the same bounds as validation.
// Control batches are walked too (their keys are the control key bytes).
// An error from fn stops the walk and is returned.
//
// The batch is checked as the log stores it (CRC-32C, lengths), and its
// records as compaction may leave them: offset deltas strictly increasing
// but not necessarily contiguous. Compressed records are decompressed
// whole into a pooled buffer, bounded as validation bounds them; *Record
// and its Key are valid only during the call to fn.
func ForEachRecord(batch []byte, fn func(*Record) error) error {
	h, err := checkStoredBatch(batch)
	if err != nil {
		return err
	}
	recs, release, err := batchRecords(&h, batch)
	if err != nil {
		return err
	}
	defer release()
	w := newRecordWalk(&h, recs)
	var rec Record
	for {
		_, _, ok, err := w.next(&rec)
		if err != nil {
			return fmt.Errorf("batch at offset %d: %w", h.BaseOffset, err)
		}
		if !ok {
			return nil
		}
		if err := fn(&rec); err != nil {
			return err
		}
	}
}

// TxnMarkerOf returns the END_TXN marker a stored control batch carries;
// ok is false for any other batch, and for a control batch compaction
// emptied (its record gone).
func TxnMarkerOf(batch []byte) (m TxnMarker, ok bool, err error) {
	h, err := checkStoredBatch(batch)
	if err != nil {
		return TxnMarker{}, false, err
	}
	return markerOf(&h, batch)
}
