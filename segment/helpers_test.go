package segment

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// batchSpec describes a v2 batch for the test encoder. Zero values give a
// non-idempotent, uncompressed CreateTime batch.
type batchSpec struct {
	codec      int
	xerial     bool // snappy in Java's xerial framing
	attrs      int16
	pid        int64 // 0 means -1 (none) unless idempotent is set
	idem       bool
	pepoch     int16
	seq        int32
	firstTs    int64
	tsDeltas   []int64 // per record; default i
	values     [][]byte
	offDeltas  []int64 // override offset deltas
	count      int32   // override recordCount (0: len(values))
	lastDelta  *int32  // override lastOffsetDelta
	maxTs      *int64  // override maxTimestamp
	trailing   []byte  // bytes after the records (inside the batch)
	keyPrefix  string
	withHeader bool
	payload    []byte // records already encoded and compressed: used as is, with count
}

func appendRecord(dst []byte, tsDelta, offDelta int64, key, value []byte, header bool) []byte {
	var body []byte
	body = append(body, 0)
	body = binary.AppendVarint(body, tsDelta)
	body = binary.AppendVarint(body, offDelta)
	if key == nil {
		body = binary.AppendVarint(body, -1)
	} else {
		body = binary.AppendVarint(body, int64(len(key)))
		body = append(body, key...)
	}
	if value == nil {
		body = binary.AppendVarint(body, -1)
	} else {
		body = binary.AppendVarint(body, int64(len(value)))
		body = append(body, value...)
	}
	if header {
		body = binary.AppendVarint(body, 1)
		body = binary.AppendVarint(body, 1)
		body = append(body, 'h')
		body = binary.AppendVarint(body, -1)
	} else {
		body = binary.AppendVarint(body, 0)
	}
	dst = binary.AppendVarint(dst, int64(len(body)))
	return append(dst, body...)
}

func compressFor(t testing.TB, codec int, xerial bool, raw []byte) []byte {
	var buf bytes.Buffer
	switch codec {
	case codecNone:
		return raw
	case codecGzip:
		w := gzip.NewWriter(&buf)
		w.Write(raw)
		w.Close()
	case codecSnappy:
		if !xerial {
			return s2.EncodeSnappy(nil, raw)
		}
		buf.Write(xerialMagic)
		buf.Write([]byte{0, 0, 0, 1, 0, 0, 0, 1})
		for len(raw) > 0 {
			n := min(len(raw), 1000)
			blk := s2.EncodeSnappy(nil, raw[:n])
			buf.Write(binary.BigEndian.AppendUint32(nil, uint32(len(blk))))
			buf.Write(blk)
			raw = raw[n:]
		}
	case codecLz4:
		w := lz4.NewWriter(&buf)
		w.Write(raw)
		w.Close()
	case codecZstd:
		w, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(raw)
		w.Close()
	default:
		return raw
	}
	return buf.Bytes()
}

// encodeBatch encodes a v2 batch as a producer would (baseOffset 0,
// partitionLeaderEpoch -1).
func encodeBatch(t testing.TB, s batchSpec) []byte {
	var recs []byte
	maxTs := int64(-1)
	for i, v := range s.values {
		d := int64(i)
		if s.tsDeltas != nil {
			d = s.tsDeltas[i]
		}
		od := int64(i)
		if s.offDeltas != nil {
			od = s.offDeltas[i]
		}
		maxTs = max(maxTs, s.firstTs+d)
		var key []byte
		if s.keyPrefix != "" {
			key = []byte(s.keyPrefix)
		}
		recs = appendRecord(recs, d, od, key, v, s.withHeader)
	}
	recs = append(recs, s.trailing...)
	recs = compressFor(t, s.codec, s.xerial, recs)
	if s.payload != nil {
		recs = s.payload
	}
	count := int32(len(s.values))
	if s.count != 0 {
		count = s.count
	}
	last := int32(len(s.values)) - 1
	if s.payload != nil {
		last = count - 1
	}
	if s.lastDelta != nil {
		last = *s.lastDelta
	}
	if s.maxTs != nil {
		maxTs = *s.maxTs
	}
	pid, pepoch, seq := int64(-1), int16(-1), int32(-1)
	if s.idem {
		pid, pepoch, seq = s.pid, s.pepoch, s.seq
	}
	b := make([]byte, headerSize, headerSize+len(recs))
	be := binary.BigEndian
	be.PutUint32(b[offLength:], uint32(headerSize-logOverhead+len(recs)))
	be.PutUint32(b[offLeaderEpoch:], 0xffffffff)
	b[offMagic] = 2
	be.PutUint16(b[offAttributes:], uint16(int16(s.codec)|s.attrs))
	be.PutUint32(b[offLastOffsetDelta:], uint32(last))
	be.PutUint64(b[offFirstTimestamp:], uint64(s.firstTs))
	be.PutUint64(b[offMaxTimestamp:], uint64(maxTs))
	be.PutUint64(b[offProducerID:], uint64(pid))
	be.PutUint16(b[offProducerEpoch:], uint16(pepoch))
	be.PutUint32(b[offBaseSequence:], uint32(seq))
	be.PutUint32(b[offNumRecords:], uint32(count))
	b = append(b, recs...)
	fixCRC(b)
	return b
}

func fixCRC(b []byte) { binary.BigEndian.PutUint32(b[offCRC:], batchCRC(b)) }

// values returns n values of size bytes derived from seed.
func values(n, size int, seed byte) [][]byte {
	vs := make([][]byte, n)
	for i := range vs {
		v := make([]byte, size)
		for j := range v {
			v[j] = seed + byte(i*7+j)
		}
		vs[i] = v
	}
	return vs
}

// stamped returns b as the log stores it at base with leader epoch.
func stamped(b []byte, base int64, epoch int32) []byte {
	c := bytes.Clone(b)
	binary.BigEndian.PutUint64(c[offBaseOffset:], uint64(base))
	binary.BigEndian.PutUint32(c[offLeaderEpoch:], uint32(epoch))
	return c
}

// fakeClock is an injectable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.UnixMilli(1_700_000_000_000)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Millis() int64 { return c.Now().UnixMilli() }

// crash abandons l the way a killed process would: no flush, no marker,
// descriptors dropped.
func crash(l *Log) {
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	l.dropSegmentsLocked()
}

func mustOpen(t testing.TB, dir string, cfg Config) *Log {
	t.Helper()
	l, err := Open(dir, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return l
}

func mustAppend(t testing.TB, l *Log, b []byte, epoch int32) AppendInfo {
	t.Helper()
	info, err := l.Append(b, epoch)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return info
}

// readAll reads every batch from the start to the end, checking each read
// makes progress, and returns the concatenation.
func readAll(t testing.TB, l *Log, maxBytes int) []byte {
	t.Helper()
	var out []byte
	off := l.StartOffset()
	end := l.EndOffset()
	for off < end {
		before := len(out)
		var err error
		out, err = l.Read(out, off, end, maxBytes)
		if err != nil {
			t.Fatalf("Read(%d): %v", off, err)
		}
		if len(out) == before {
			t.Fatalf("Read(%d) made no progress (end %d)", off, end)
		}
		// Continue after the last batch returned.
		for p := before; p < len(out); {
			h := decodeHeader(out[p:])
			off = h.LastOffset() + 1
			p += h.Size()
		}
	}
	return out
}

// historyAt is what the bucket object of l's records below offset carries
// for a log restarted at offset (TruncateFullyAndStartAt): the producer
// state as of offset, as the snapshot taken when a segment is sealed there
// holds it, and the leader epochs below offset.
func historyAt(t *testing.T, l *Log, offset int64) History {
	t.Helper()
	l.writeMu.Lock()
	defer l.writeMu.Unlock()
	producers := make(map[int64]*producerEntry)
	nowMs := l.now().UnixMilli()
	err := l.scanProducerBatches(l.mu.start, func(h *BatchHeader, m TxnMarker, isMarker bool) {
		if h.BaseOffset < offset {
			applyProducerBatch(producers, h, m, isMarker, nowMs)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	var epochs []EpochStart
	for _, e := range l.mu.epochs {
		if e.start < offset {
			epochs = append(epochs, EpochStart{Epoch: e.epoch, StartOffset: e.start})
		}
	}
	return History{ProducerSnapshot: encodeSnapshot(offset, producers), Epochs: epochs}
}
