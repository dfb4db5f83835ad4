package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// AppendReplica appends batches copied from the partition leader as they
// are: their base offsets, leader epochs, producer ids, epochs and
// sequences and timestamps are kept, and the bytes stored are the bytes
// given. records is one or more concatenated v2 batches (the records of a
// Fetch response).
//
// The first batch must start at EndOffset and each next one right after
// the previous one's last offset, else ErrOffsetMismatch and nothing is
// appended. Each batch is checked for its length, magic, CRC-32C and
// record count, not against timestamp bounds, MaxBatchBytes or the
// idempotence rules: the leader applied those, and a replica that judged
// them again by its own clock or settings would diverge from its leader.
// Producer state is updated from the batches as recovery does, so a
// follower that becomes leader recognises retries. A leader epoch higher
// than the latest known is recorded in the epoch history before its
// first batch is written; a lower one is refused (ErrInvalidRecord), as
// a leader never writes one.
//
// A Fetch response may end in a partial batch: only the whole batches
// before it are appended, and AppendInfo.Bytes says how many bytes they
// took. With no whole batch nothing is appended and there is no error.
// Like Append it rolls segments, is all-or-nothing, publishes the batches
// to readers at once and syncs nothing.
func (l *Log) AppendReplica(records []byte) (AppendInfo, error) {
	// The CRCs are checked before the lock, as Prepare does for Append.
	hdrs, used, err := replicaBatches(records)
	if err != nil {
		return AppendInfo{}, err
	}
	records = records[:used]
	if used > maxSegmentBytes {
		return AppendInfo{}, fmt.Errorf("%w: replica append of %d bytes", ErrMessageTooLarge, used)
	}

	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	if l.mu.closed {
		return AppendInfo{}, ErrClosed
	}
	if l.w.failed != nil {
		return AppendInfo{}, fmt.Errorf("segment: log %s failed earlier: %w", l.dir, l.w.failed)
	}
	base := l.mu.end
	info := AppendInfo{BaseOffset: base, LastOffset: base - 1, MaxTimestamp: -1, LogStartOffset: l.mu.start, Batches: len(hdrs), Bytes: used}
	if len(hdrs) == 0 {
		return info, nil
	}

	// Offsets and epochs.
	latest := int32(-1)
	if n := len(l.mu.epochs); n > 0 {
		latest = l.mu.epochs[n-1].epoch
	}
	var newEpochs []epochEntry
	next := base
	for i := range hdrs {
		h := &hdrs[i]
		if h.BaseOffset != next {
			return AppendInfo{}, fmt.Errorf("%w: batch %d starts at offset %d, the log continues at %d", ErrOffsetMismatch, i, h.BaseOffset, next)
		}
		switch {
		case h.LeaderEpoch < latest:
			return AppendInfo{}, fmt.Errorf("%w: batch %d at offset %d has leader epoch %d, below the latest %d", ErrInvalidRecord, i, h.BaseOffset, h.LeaderEpoch, latest)
		case h.LeaderEpoch > latest:
			newEpochs = append(newEpochs, epochEntry{h.LeaderEpoch, h.BaseOffset})
			latest = h.LeaderEpoch
		}
		next = h.LastOffset() + 1
		info.Records += int(h.NumRecords)
		info.MaxTimestamp = max(info.MaxTimestamp, h.MaxTimestamp)
	}
	now := l.now()

	seg := l.active()
	if l.shouldRollLocked(seg, int64(used), next-1, now) {
		if err := l.rollLocked(); err != nil {
			return AppendInfo{}, err
		}
		seg = l.active()
	}
	if next-1-seg.base > math.MaxInt32 {
		// Only a claimed record count can span this far: the relative
		// offsets of the index would not hold it.
		return AppendInfo{}, fmt.Errorf("%w: batches span offsets %d to %d, more than one segment can index", ErrInvalidRecord, base, next-1)
	}

	var epochs []epochEntry
	if newEpochs != nil {
		epochs = append(slices.Clip(l.mu.epochs), newEpochs...)
		if err := writeFileAtomic(l.epochPath(), encodeEpochs(epochs)); err != nil {
			return AppendInfo{}, fmt.Errorf("segment: recording leader epoch %d: %w", latest, err)
		}
	}

	pos := seg.size
	if _, err := seg.f.WriteAt(records, pos); err != nil {
		err = fmt.Errorf("segment: appending to %s: %w", seg.logPath(), err)
		if terr := seg.f.Truncate(pos); terr != nil {
			l.w.failed = errors.Join(err, terr)
		}
		return AppendInfo{}, err
	}
	if seg.created.IsZero() {
		seg.created = now
	}

	seg.imu.Lock()
	p := pos
	for i := range hdrs {
		h := &hdrs[i]
		prevMax := seg.ix.maxTs
		seg.ix.add(p, h.LastOffset(), h.MaxTimestamp, h.Size())
		if seg.ix.maxTs > prevMax {
			seg.ix.maxTsRecord = -1 // found lazily: the records were not walked
		}
		p += int64(h.Size())
	}
	seg.imu.Unlock()
	nowMs := now.UnixMilli()
	for i := range hdrs {
		applyProducerBatch(l.w.producers, &hdrs[i], nowMs)
	}

	l.mu.Lock()
	seg.size += int64(used)
	l.mu.end = next
	if epochs != nil {
		l.mu.epochs = epochs
	}
	info.LogStartOffset = l.mu.start
	l.mu.Unlock()
	l.size.Add(int64(used))

	info.LastOffset = next - 1
	return info, nil
}

// replicaBatches checks the whole batches at the start of records and
// returns their headers and the bytes they take; a partial batch at the
// end is left out.
func replicaBatches(records []byte) ([]BatchHeader, int, error) {
	var hdrs []BatchHeader
	p := 0
	for len(records)-p >= logOverhead {
		n := int64(logOverhead) + int64(int32(binary.BigEndian.Uint32(records[p+offLength:])))
		if n < headerSize {
			return nil, 0, fmt.Errorf("%w: batch %d claims %d bytes", ErrCorruptMessage, len(hdrs), n)
		}
		if n > int64(len(records)-p) {
			break // the partial last batch of a size-limited Fetch
		}
		b := records[p : p+int(n)]
		h, err := ParseBatchHeader(b)
		if err != nil {
			return nil, 0, fmt.Errorf("batch %d: %w", len(hdrs), err)
		}
		if crc := batchCRC(b); crc != h.CRC {
			return nil, 0, fmt.Errorf("%w: batch %d at offset %d: CRC-32C mismatch (header %08x, computed %08x)", ErrCorruptMessage, len(hdrs), h.BaseOffset, h.CRC, crc)
		}
		// The leader's Append holds every batch to this, and the offsets
		// the follower derives rest on it.
		if h.NumRecords <= 0 || h.LastOffsetDelta != h.NumRecords-1 {
			return nil, 0, fmt.Errorf("%w: batch %d at offset %d: lastOffsetDelta %d with %d records", ErrInvalidRecord, len(hdrs), h.BaseOffset, h.LastOffsetDelta, h.NumRecords)
		}
		hdrs = append(hdrs, h)
		p += int(n)
	}
	return hdrs, p, nil
}
