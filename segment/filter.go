package segment

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// FilterOptions steer FilterBatch.
type FilterOptions struct {
	// RetainEmpty keeps a batch none of whose records is kept as an empty
	// batch (header only, NumRecords 0): Kafka's RETAIN_EMPTY for the last
	// batch of a producer, whose sequence numbers the producer state must
	// still find after a restart.
	RetainEmpty bool
	// DeleteHorizonMs, when > 0, is stamped as the batch's delete horizon
	// (KIP-534) if a kept record is a tombstone and the batch has no
	// horizon yet.
	DeleteHorizonMs int64
	// Discard removes every record without asking keep (Kafka's
	// discardBatchRecords): the batch of an aborted transaction, or a
	// marker past its delete horizon. RetainEmpty still keeps the header.
	Discard bool
	// StampMarker stamps DeleteHorizonMs on a control batch kept with its
	// record, if it has no horizon yet: Kafka's cleaner starts a marker's
	// delete.retention.ms once its transaction has no batch left.
	StampMarker bool
}

// FilterResult says what FilterBatch did.
type FilterResult struct {
	Kept, Removed int  // records kept and removed
	Rewritten     bool // a new batch was encoded (records removed, or a horizon stamped)
	Dropped       bool // nothing was appended to dst
}

// FilterBatch appends to dst the batch with only the records keep returns
// true for, and returns the extended slice. A batch whose records are all
// kept (and needs no horizon) is appended byte for byte. A rewritten batch
// keeps the base offset, lastOffsetDelta, partition leader epoch,
// attributes (codec, timestamp type, transactional, control), producer id,
// epoch and base sequence; its records keep their offset deltas and
// timestamps; its firstTimestamp is the first kept record's timestamp (or
// the horizon), its maxTimestamp the largest kept one (LogAppendTime:
// unchanged); it is compressed again with the same codec, and its CRC-32C
// recomputed. Control batches are appended unchanged (keep is not called),
// unless o.StampMarker gives one a horizon. A batch with nothing kept (or
// o.Discard) is dropped, or kept empty with o.RetainEmpty (Kafka's
// writeEmptyHeader: no compression, firstTimestamp = maxTimestamp = the
// original maxTimestamp).
//
// batch is checked as ForEachRecord checks it; on error dst is returned
// as it was. keep sees each record once, in order; its *Record and Key
// are valid only during the call.
func FilterBatch(dst, batch []byte, keep func(*Record) bool, o FilterOptions) ([]byte, FilterResult, error) {
	var res FilterResult
	h, err := checkStoredBatch(batch)
	if err != nil {
		return dst, res, err
	}
	_, hasHorizon := h.DeleteHorizon()
	stampMarker := h.IsControl() && o.StampMarker && !hasHorizon && o.DeleteHorizonMs > 0
	switch {
	case o.Discard:
		// Nothing to look at inside: Kafka deletes such a batch without
		// decompressing it.
		res.Removed = int(h.NumRecords)
		if !o.RetainEmpty {
			res.Dropped = true
			return dst, res, nil
		}
		if h.NumRecords == 0 {
			return append(dst, batch...), res, nil // already empty
		}
		res.Rewritten = true
		return appendEmptyBatch(dst, &h), res, nil
	case h.IsControl() && !stampMarker:
		// Markers are the cleaner's to judge as whole batches: their
		// single record is never a key's latest value.
		res.Kept = int(h.NumRecords)
		return append(dst, batch...), res, nil
	case h.IsControl():
		keep = func(*Record) bool { return true }
	}
	recs, release, err := batchRecords(&h, batch)
	if err != nil {
		return dst, res, err
	}
	defer release()

	// First pass: what stays. A rewrite needs to know before encoding
	// whether a kept tombstone calls for a horizon.
	var kept []bool
	firstTs, maxTs := int64(0), int64(-1)
	tombstone := false
	w := newRecordWalk(&h, recs)
	var rec Record
	for {
		_, _, ok, err := w.next(&rec)
		if err != nil {
			return dst, FilterResult{}, fmt.Errorf("batch at offset %d: %w", h.BaseOffset, err)
		}
		if !ok {
			break
		}
		k := keep(&rec)
		kept = append(kept, k)
		if !k {
			res.Removed++
			continue
		}
		if res.Kept == 0 {
			firstTs = rec.Timestamp
		}
		res.Kept++
		maxTs = max(maxTs, rec.Timestamp)
		tombstone = tombstone || rec.Tombstone
	}
	horizon, _ := h.DeleteHorizon()
	stamp := stampMarker || (!hasHorizon && o.DeleteHorizonMs > 0 && tombstone)

	switch {
	case res.Kept == 0 && !o.RetainEmpty:
		res.Dropped = true
		return dst, res, nil
	case res.Kept == 0 && h.NumRecords == 0:
		return append(dst, batch...), res, nil // already empty
	case res.Kept == 0:
		res.Rewritten = true
		return appendEmptyBatch(dst, &h), res, nil
	case res.Removed == 0 && !stamp:
		return append(dst, batch...), res, nil
	}

	res.Rewritten = true
	attrs := h.Attributes
	switch {
	case stamp:
		attrs |= attrDeleteHorizon
		firstTs = o.DeleteHorizonMs
	case hasHorizon:
		firstTs = horizon
	}
	if h.Attributes&attrLogAppendTime != 0 {
		maxTs = h.MaxTimestamp
	}

	// Second pass: re-encode the kept records with timestamp deltas
	// relative to the new firstTimestamp, everything else as it was.
	raw := bufPool.Get().(*[]byte)
	defer putBuf(raw)
	body := (*raw)[:0]
	w = newRecordWalk(&h, recs)
	for i := 0; ; i++ {
		r, enc, ok, err := w.next(&rec)
		if err != nil || !ok {
			break // the first pass went through the same records
		}
		if kept[i] {
			body = appendRetimed(body, enc, r, rec.Timestamp-firstTs)
		}
	}
	*raw = body[:0]

	start := len(dst)
	dst = slices.Grow(dst, headerSize+len(body))
	dst = dst[:start+headerSize]
	hdr := dst[start:]
	copy(hdr, batch[:headerSize])
	be := binary.BigEndian
	be.PutUint16(hdr[offAttributes:], uint16(attrs))
	be.PutUint64(hdr[offFirstTimestamp:], uint64(firstTs))
	be.PutUint64(hdr[offMaxTimestamp:], uint64(maxTs))
	be.PutUint32(hdr[offNumRecords:], uint32(res.Kept))
	if dst, err = appendCompressed(dst, h.Codec(), body, isXerial(h.Codec(), batch[headerSize:])); err != nil {
		return dst[:start], FilterResult{}, fmt.Errorf("batch at offset %d: recompressing: %w", h.BaseOffset, err)
	}
	b := dst[start:]
	be.PutUint32(b[offLength:], uint32(len(b)-logOverhead))
	be.PutUint32(b[offCRC:], batchCRC(b))
	return dst, res, nil
}

// appendRetimed appends enc, one encoded record whose decoded fields are
// r, with its timestamp delta replaced by tsDelta and its length prefix
// recomputed.
func appendRetimed(dst, enc []byte, r record, tsDelta int64) []byte {
	if tsDelta == r.timestampDelta {
		return append(dst, enc...)
	}
	// enc is: length, attributes (1 byte), timestampDelta, then the rest.
	_, n := varint(enc)
	body := enc[n:]
	_, tn := varint(body[1:])
	rest := body[1+tn:]
	var tmp [binary.MaxVarintLen64]byte
	tl := binary.PutVarint(tmp[:], tsDelta)
	dst = binary.AppendVarint(dst, int64(1+tl+len(rest)))
	dst = append(dst, body[0])
	dst = append(dst, tmp[:tl]...)
	return append(dst, rest...)
}

// appendEmptyBatch appends the header-only batch Kafka's writeEmptyHeader
// leaves for h: same offsets, producer fields and attributes but no
// compression and no horizon, both timestamps the original maxTimestamp.
func appendEmptyBatch(dst []byte, h *BatchHeader) []byte {
	start := len(dst)
	dst = slices.Grow(dst, headerSize)[:start+headerSize]
	b := dst[start:]
	be := binary.BigEndian
	be.PutUint64(b[offBaseOffset:], uint64(h.BaseOffset))
	be.PutUint32(b[offLength:], uint32(minBatchLength))
	be.PutUint32(b[offLeaderEpoch:], uint32(h.LeaderEpoch))
	b[offMagic] = 2
	be.PutUint16(b[offAttributes:], uint16(h.Attributes&^(attrCodecMask|attrDeleteHorizon)))
	be.PutUint32(b[offLastOffsetDelta:], uint32(h.LastOffsetDelta))
	be.PutUint64(b[offFirstTimestamp:], uint64(h.MaxTimestamp))
	be.PutUint64(b[offMaxTimestamp:], uint64(h.MaxTimestamp))
	be.PutUint64(b[offProducerID:], uint64(h.ProducerID))
	be.PutUint16(b[offProducerEpoch:], uint16(h.ProducerEpoch))
	be.PutUint32(b[offBaseSequence:], uint32(h.BaseSequence))
	be.PutUint32(b[offNumRecords:], 0)
	be.PutUint32(b[offCRC:], batchCRC(b))
	return dst
}
