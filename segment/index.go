package segment

import (
	"encoding/binary"
	"fmt"
	"os"
	"sort"
)

// Sizes of index entries (docs/format.md §3, §4).
const (
	offsetEntrySize = 8
	timeEntrySize   = 12
)

type offsetEntry struct{ rel, pos uint32 }

type timeEntry struct {
	ts  int64
	rel uint32
}

// indexer builds a segment's sparse indexes as batches are appended or
// scanned, following Kafka's LogSegment.append: the running maximum is
// updated first, then, once more than interval bytes went by since the last
// entry, the batch gets an offset entry and the maximum a time entry.
type indexer struct {
	base     int64
	interval int64

	offsets []offsetEntry
	times   []timeEntry

	// maxTs is the largest batch maxTimestamp in the segment (-1: none) and
	// maxTsLast the last offset of the first batch carrying it.
	maxTs      int64
	maxTsLast  int64
	bytesSince int64
}

func newIndexer(base int64, interval int) indexer {
	return indexer{base: base, interval: int64(interval), maxTs: -1, maxTsLast: -1}
}

func (x *indexer) add(pos, lastOffset, maxTs int64, size int) {
	if maxTs > x.maxTs {
		x.maxTs, x.maxTsLast = maxTs, lastOffset
	}
	if x.bytesSince > x.interval {
		x.offsets = append(x.offsets, offsetEntry{rel: uint32(lastOffset - x.base), pos: uint32(pos)})
		x.maybeAddTime()
		x.bytesSince = 0
	}
	x.bytesSince += int64(size)
}

// maybeAddTime appends a time entry for the running maximum if it grew
// since the last entry. Called at index points and when sealing.
func (x *indexer) maybeAddTime() {
	last := int64(-1)
	if n := len(x.times); n > 0 {
		last = x.times[n-1].ts
	}
	if x.maxTs > last {
		x.times = append(x.times, timeEntry{ts: x.maxTs, rel: uint32(x.maxTsLast - x.base)})
	}
}

// lookup returns the position of the last indexed batch whose last offset
// is <= offset, or 0.
func lookup(offsets []offsetEntry, base, offset int64) int64 {
	pos, _ := lookupEntry(offsets, base, offset)
	return pos
}

// lookupEntry is lookup that also returns the indexed batch's last offset,
// or -1 when there is none.
func lookupEntry(offsets []offsetEntry, base, offset int64) (pos, last int64) {
	rel := offset - base
	i := sort.Search(len(offsets), func(i int) bool { return int64(offsets[i].rel) > rel }) - 1
	if i < 0 {
		return 0, -1
	}
	return int64(offsets[i].pos), base + int64(offsets[i].rel)
}

func encodeOffsets(dst []byte, es []offsetEntry) []byte {
	for _, e := range es {
		dst = binary.BigEndian.AppendUint32(dst, e.rel)
		dst = binary.BigEndian.AppendUint32(dst, e.pos)
	}
	return dst
}

func encodeTimes(dst []byte, es []timeEntry) []byte {
	for _, e := range es {
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.ts))
		dst = binary.BigEndian.AppendUint32(dst, e.rel)
	}
	return dst
}

// decodeOffsets parses an .index file and checks it against the segment:
// whole entries, both fields strictly increasing, positions inside the
// .log (logSize) and offsets below end - base.
func decodeOffsets(b []byte, logSize, span int64) ([]offsetEntry, error) {
	if len(b)%offsetEntrySize != 0 {
		return nil, fmt.Errorf("size %d is not a multiple of %d", len(b), offsetEntrySize)
	}
	es := make([]offsetEntry, len(b)/offsetEntrySize)
	for i := range es {
		e := offsetEntry{rel: binary.BigEndian.Uint32(b[i*8:]), pos: binary.BigEndian.Uint32(b[i*8+4:])}
		if int64(e.pos) >= logSize || int64(e.rel) >= span {
			return nil, fmt.Errorf("entry %d (%d, %d) points outside the segment", i, e.rel, e.pos)
		}
		if i > 0 && (e.rel <= es[i-1].rel || e.pos <= es[i-1].pos) {
			return nil, fmt.Errorf("entry %d is not increasing", i)
		}
		es[i] = e
	}
	return es, nil
}

// decodeTimes parses a .timeindex file: whole entries, timestamps strictly
// increasing, offsets non-decreasing and inside the segment.
func decodeTimes(b []byte, span int64) ([]timeEntry, error) {
	if len(b)%timeEntrySize != 0 {
		return nil, fmt.Errorf("size %d is not a multiple of %d", len(b), timeEntrySize)
	}
	es := make([]timeEntry, len(b)/timeEntrySize)
	for i := range es {
		e := timeEntry{ts: int64(binary.BigEndian.Uint64(b[i*12:])), rel: binary.BigEndian.Uint32(b[i*12+8:])}
		if int64(e.rel) >= span || e.ts < 0 {
			return nil, fmt.Errorf("entry %d (%d, %d) is outside the segment", i, e.ts, e.rel)
		}
		if i > 0 && (e.ts <= es[i-1].ts || e.rel < es[i-1].rel) {
			return nil, fmt.Errorf("entry %d is not increasing", i)
		}
		es[i] = e
	}
	return es, nil
}

// quickCheckIndex is the cheap check Open makes of a closed segment's index
// file: present, whole entries, and a last entry inside the segment.
func quickCheckIndex(path string, entrySize int, check func(last []byte) bool) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size()%int64(entrySize) != 0 {
		return false
	}
	if fi.Size() == 0 {
		return true
	}
	last := make([]byte, entrySize)
	if _, err := f.ReadAt(last, fi.Size()-int64(entrySize)); err != nil {
		return false
	}
	return check(last)
}
