package format

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// The lookups below run over the raw index parts, as fetched, without
// decoding them first: one fetched index serves many lookups. They check
// the framing (whole entries) and never read out of bounds, but do not
// re-check that entries increase; a part whose CRC checks out was checked
// when its object was written.

// LookupOffset returns the byte position in the log part at which to start
// scanning batch headers for offset target: the position of the last
// indexed batch whose last offset is <= target, or 0 if there is none.
// Scanning forward from it, the first batch whose last offset is >= target
// holds target.
func LookupOffset(index []byte, base, target int64) (position int64, err error) {
	position, _, err = LookupOffsetEntry(index, base, target)
	return position, err
}

// LookupOffsetEntry is LookupOffset that also returns the last offset of
// the batch at position, as the index records it, or -1 when position is
// 0 for want of an entry. A reader checks the batch it finds there against
// it: the base offset of a batch is not covered by the batch's CRC.
func LookupOffsetEntry(index []byte, base, target int64) (position, lastOffset int64, err error) {
	if len(index)%OffsetEntrySize != 0 {
		return 0, -1, fmt.Errorf("%w: offset index of %d bytes", ErrCorrupt, len(index))
	}
	n := len(index) / OffsetEntrySize
	rel := target - base
	i := sort.Search(n, func(i int) bool {
		return int64(binary.BigEndian.Uint32(index[i*OffsetEntrySize:])) > rel
	}) - 1
	if i < 0 {
		return 0, -1, nil
	}
	return int64(binary.BigEndian.Uint32(index[i*OffsetEntrySize+4:])), base + int64(binary.BigEndian.Uint32(index[i*OffsetEntrySize:])), nil
}

// LookupTimestamp returns the offset from which to scan for the first
// record with a timestamp >= ts: one past the last time-index entry whose
// timestamp is < ts (every record up to that entry's offset is older than
// ts), or base if there is none. ok is false if no entry reaches ts: the
// segment holds no such record (the last entry of a closed segment is its
// maximum timestamp). The caller turns the offset into a log position with
// LookupOffset, skips batches whose maxTimestamp < ts, and walks the
// records of the first remaining batch.
func LookupTimestamp(timeIndex []byte, base, ts int64) (offset int64, ok bool, err error) {
	if len(timeIndex)%TimeEntrySize != 0 {
		return 0, false, fmt.Errorf("%w: time index of %d bytes", ErrCorrupt, len(timeIndex))
	}
	n := len(timeIndex) / TimeEntrySize
	tsAt := func(i int) int64 { return int64(binary.BigEndian.Uint64(timeIndex[i*TimeEntrySize:])) }
	// i is the first entry with timestamp >= ts.
	i := sort.Search(n, func(i int) bool { return tsAt(i) >= ts })
	if i == n {
		return 0, false, nil
	}
	if i == 0 {
		return base, true, nil
	}
	prev := int64(binary.BigEndian.Uint32(timeIndex[(i-1)*TimeEntrySize+8:]))
	// Entry i's own offset bounds the answer even in a malformed index.
	return base + min(prev+1, int64(binary.BigEndian.Uint32(timeIndex[i*TimeEntrySize+8:]))), true, nil
}

// checkOffsetIndex checks an offset index against its segment, as the
// local log does on load: whole entries, both fields strictly increasing,
// positions inside the log (logLen bytes), relative offsets below span.
func checkOffsetIndex(b []byte, logLen, span int64) error {
	if len(b)%OffsetEntrySize != 0 {
		return fmt.Errorf("size %d is not a multiple of %d", len(b), OffsetEntrySize)
	}
	var prevRel, prevPos int64 = -1, -1
	for i := 0; i < len(b); i += OffsetEntrySize {
		rel := int64(binary.BigEndian.Uint32(b[i:]))
		pos := int64(binary.BigEndian.Uint32(b[i+4:]))
		if rel >= span || pos >= logLen {
			return fmt.Errorf("entry %d (%d, %d) points outside the segment", i/OffsetEntrySize, rel, pos)
		}
		if rel <= prevRel || pos <= prevPos {
			return fmt.Errorf("entry %d is not increasing", i/OffsetEntrySize)
		}
		prevRel, prevPos = rel, pos
	}
	return nil
}

// checkTimeIndex checks a time index: whole entries, timestamps strictly
// increasing and non-negative, relative offsets non-decreasing and below
// span.
func checkTimeIndex(b []byte, span int64) error {
	if len(b)%TimeEntrySize != 0 {
		return fmt.Errorf("size %d is not a multiple of %d", len(b), TimeEntrySize)
	}
	var prevTs, prevRel int64 = -1, 0
	for i := 0; i < len(b); i += TimeEntrySize {
		ts := int64(binary.BigEndian.Uint64(b[i:]))
		rel := int64(binary.BigEndian.Uint32(b[i+8:]))
		if rel >= span || ts < 0 {
			return fmt.Errorf("entry %d (%d, %d) is outside the segment", i/TimeEntrySize, ts, rel)
		}
		if ts <= prevTs || rel < prevRel {
			return fmt.Errorf("entry %d is not increasing", i/TimeEntrySize)
		}
		prevTs, prevRel = ts, rel
	}
	return nil
}
