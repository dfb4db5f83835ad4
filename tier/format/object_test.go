package format

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"strings"
	"testing"
)

// offsetIndex encodes (relativeOffset, position) pairs.
func offsetIndex(es ...[2]uint32) []byte {
	var b []byte
	for _, e := range es {
		b = binary.BigEndian.AppendUint32(b, e[0])
		b = binary.BigEndian.AppendUint32(b, e[1])
	}
	return b
}

type timeEntry struct {
	ts  int64
	rel uint32
}

func timeIndex(es ...timeEntry) []byte {
	var b []byte
	for _, e := range es {
		b = binary.BigEndian.AppendUint64(b, uint64(e.ts))
		b = binary.BigEndian.AppendUint32(b, e.rel)
	}
	return b
}

// testParts returns valid parts for a 1000-byte log covering offsets
// [100, 199].
func testParts() (SegmentParts, []byte) {
	log := bytes.Repeat([]byte("0123456789"), 100)
	return SegmentParts{
		Log: bytes.NewReader(log), LogSize: int64(len(log)),
		Index:            offsetIndex([2]uint32{9, 0}, [2]uint32{49, 400}, [2]uint32{98, 800}),
		TimeIndex:        timeIndex(timeEntry{1000, 9}, timeEntry{1500, 49}, timeEntry{2000, 99}),
		ProducerSnapshot: []byte("snapshot bytes"),
		TxnIndex:         txnIndex([4]int64{7, 90, 120, 121}, [4]int64{8, 150, 180, 150}),
		BaseOffset:       100, LastOffset: 199, FirstTimestamp: 900, MaxTimestamp: 2000,
		RecordCount: 100, LeaderEpoch: 4,
	}, log
}

// txnIndex encodes aborted transactions (producer, first offset, marker
// offset, last stable offset) as a txn index part.
func txnIndex(es ...[4]int64) []byte {
	var b []byte
	for _, e := range es {
		b = binary.BigEndian.AppendUint16(b, 0)
		for _, v := range e {
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		}
	}
	return b
}

func writeObject(t testing.TB, p SegmentParts) ([]byte, Footer, uint32) {
	t.Helper()
	var buf bytes.Buffer
	f, crc, err := WriteSegmentObject(&buf, p)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), f, crc
}

func TestSegmentObjectLayout(t *testing.T) {
	p, log := testParts()
	obj, f, crc := writeObject(t, p)
	if int64(len(obj)) != f.ObjectSize() {
		t.Fatalf("object of %d bytes, footer says %d", len(obj), f.ObjectSize())
	}
	if crc != crc32.Checksum(obj, castagnoli) {
		t.Fatal("returned object CRC is not the CRC-32C of the object")
	}
	for _, c := range []struct {
		name string
		part Part
		want []byte
	}{
		{"log", f.Log, log},
		{"index", f.Index, p.Index},
		{"timeindex", f.TimeIndex, p.TimeIndex},
		{"snapshot", f.ProducerSnapshot, p.ProducerSnapshot},
		{"txn index", f.TxnIndex.Part, p.TxnIndex},
	} {
		got := obj[c.part.Offset:c.part.End()]
		if !bytes.Equal(got, c.want) {
			t.Errorf("%s part differs", c.name)
		}
		if err := c.part.Check(got); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	parsed, err := ParseFooter(obj[len(obj)-FooterSize:])
	if err != nil {
		t.Fatal(err)
	}
	if parsed != f {
		t.Fatalf("parsed footer %+v, written %+v", parsed, f)
	}
	want := Footer{BaseOffset: 100, LastOffset: 199, FirstTimestamp: 900, MaxTimestamp: 2000, RecordCount: 100, LeaderEpoch: 4,
		Log:              Part{0, 1000, crc32.Checksum(log, castagnoli)},
		Index:            Part{1000, 24, crc32.Checksum(p.Index, castagnoli)},
		TimeIndex:        Part{1024, 36, crc32.Checksum(p.TimeIndex, castagnoli)},
		ProducerSnapshot: Part{1060, 14, crc32.Checksum(p.ProducerSnapshot, castagnoli)},
		TxnIndex:         OptionalPart{Part{1074, 68, crc32.Checksum(p.TxnIndex, castagnoli)}, true}}
	if f != want {
		t.Fatalf("footer %+v, want %+v", f, want)
	}
	// The byte layout of docs/bucket-format.md: version 2, 156 bytes, the
	// txn index as the fifth part.
	tail := obj[len(obj)-FooterSize:]
	if FooterSize != 156 || string(tail[148:152]) != "STSG" || binary.BigEndian.Uint16(tail[144:]) != 2 || binary.BigEndian.Uint16(tail[146:]) != FooterSize ||
		binary.BigEndian.Uint64(tail[44+20:]) != 1000 || binary.BigEndian.Uint64(tail[44+80:]) != 1074 || binary.BigEndian.Uint64(tail[44+88:]) != 68 ||
		binary.BigEndian.Uint32(tail[152:]) != crc32.Checksum(tail[:152], castagnoli) {
		t.Fatal("footer bytes do not follow the documented layout")
	}
}

// An object without aborted transactions has an empty txn index part,
// still present (version 2), right after the snapshot.
func TestSegmentObjectEmptyTxnIndex(t *testing.T) {
	p, _ := testParts()
	p.TxnIndex = nil
	obj, f, _ := writeObject(t, p)
	if !f.TxnIndex.Present || f.TxnIndex.Len != 0 || f.TxnIndex.Offset != f.ProducerSnapshot.End() || f.Version() != 2 {
		t.Fatalf("empty txn index: %+v", f.TxnIndex)
	}
	if parsed, err := ParseFooter(obj[len(obj)-FooterSize:]); err != nil || parsed != f {
		t.Fatalf("parsed %+v, %v", parsed, err)
	}
}

// A version 1 footer (no txn index part, 136 bytes) still parses, and
// its object verifies, reading as "no aborted transaction".
func TestFooterVersion1(t *testing.T) {
	p, _ := testParts()
	p.TxnIndex = nil
	obj, f, _ := writeObject(t, p)
	v1 := f
	v1.TxnIndex = OptionalPart{}
	enc := appendFooter(nil, v1)
	if len(enc) != FooterSizeV1 || binary.BigEndian.Uint16(enc[124:]) != 1 || binary.BigEndian.Uint16(enc[126:]) != FooterSizeV1 || string(enc[128:132]) != "STSG" {
		t.Fatalf("version 1 footer of %d bytes does not follow the version 1 layout", len(enc))
	}
	parsed, err := ParseFooter(enc)
	if err != nil || parsed != v1 || parsed.Version() != 1 || parsed.ObjectSize() != v1.ProducerSnapshot.End()+FooterSizeV1 {
		t.Fatalf("parsed %+v, %v", parsed, err)
	}
	whole := append(bytes.Clone(obj[:f.ProducerSnapshot.End()]), enc...)
	if err := v1.Segment("k", crc32.Checksum(whole, castagnoli)).VerifyObject(bytes.NewReader(whole)); err != nil {
		t.Fatal(err)
	}
	// A version 1 footer cut to a version 2 size, or the reverse, is
	// refused.
	if _, err := ParseFooter(append(make([]byte, 20), enc...)); err == nil {
		t.Fatal("a version 1 footer in 156 bytes parsed")
	}
}

func TestWriteSegmentObjectRejects(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*SegmentParts)
	}{
		{"no log", func(p *SegmentParts) { p.Log = nil }},
		{"negative base", func(p *SegmentParts) { p.BaseOffset = -1 }},
		{"last below base", func(p *SegmentParts) { p.LastOffset = 99 }},
		{"span too wide", func(p *SegmentParts) { p.LastOffset = p.BaseOffset + 1<<31 }},
		{"first ts above max", func(p *SegmentParts) { p.FirstTimestamp = 2001 }},
		{"record count", func(p *SegmentParts) { p.RecordCount = 101 }},
		{"record count -2", func(p *SegmentParts) { p.RecordCount = -2 }},
		{"negative epoch", func(p *SegmentParts) { p.LeaderEpoch = -1 }},
		{"negative log size", func(p *SegmentParts) { p.LogSize = -1 }},
		{"log too big", func(p *SegmentParts) { p.LogSize = 1 << 31 }},
		{"torn index", func(p *SegmentParts) { p.Index = p.Index[:7] }},
		{"torn time index", func(p *SegmentParts) { p.TimeIndex = p.TimeIndex[:13] }},
		{"index past log", func(p *SegmentParts) { p.Index = offsetIndex([2]uint32{1, 1000}) }},
		{"index past span", func(p *SegmentParts) { p.Index = offsetIndex([2]uint32{100, 1}) }},
		{"index not increasing", func(p *SegmentParts) { p.Index = offsetIndex([2]uint32{5, 10}, [2]uint32{5, 20}) }},
		{"torn txn index", func(p *SegmentParts) { p.TxnIndex = p.TxnIndex[:33] }},
		{"txn marker past the object", func(p *SegmentParts) { p.TxnIndex = txnIndex([4]int64{1, 150, 200, 201}) }},
		{"txn marker below the object", func(p *SegmentParts) { p.TxnIndex = txnIndex([4]int64{1, 10, 99, 100}) }},
		{"txn markers out of order", func(p *SegmentParts) { p.TxnIndex = txnIndex([4]int64{1, 150, 160, 161}, [4]int64{2, 150, 155, 161}) }},
		{"txn first above marker", func(p *SegmentParts) { p.TxnIndex = txnIndex([4]int64{1, 170, 160, 161}) }},
		{"txn negative producer", func(p *SegmentParts) { p.TxnIndex = txnIndex([4]int64{-1, 150, 160, 161}) }},
		{"time index not increasing", func(p *SegmentParts) { p.TimeIndex = timeIndex(timeEntry{5, 1}, timeEntry{5, 2}) }},
		{"time index past span", func(p *SegmentParts) { p.TimeIndex = timeIndex(timeEntry{5, 100}) }},
		{"negative timestamp entry", func(p *SegmentParts) { p.TimeIndex = timeIndex(timeEntry{-1, 1}) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, _ := testParts()
			c.edit(&p)
			var buf bytes.Buffer
			if _, _, err := WriteSegmentObject(&buf, p); err == nil {
				t.Fatal("no error")
			}
			if buf.Len() != 0 {
				t.Fatalf("wrote %d bytes of an invalid object", buf.Len())
			}
		})
	}
}

func TestWriteSegmentObjectShortLog(t *testing.T) {
	p, log := testParts()
	p.Log = bytes.NewReader(log[:500])
	_, _, err := WriteSegmentObject(io.Discard, p)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(b []byte) (int, error) {
	if w.n < len(b) {
		return 0, errors.New("store down")
	}
	w.n -= len(b)
	return len(b), nil
}

func TestWriteSegmentObjectWriterError(t *testing.T) {
	for _, n := range []int{0, 1000, 1024, 1060} {
		p, _ := testParts()
		if _, _, err := WriteSegmentObject(&failWriter{n}, p); err == nil || !strings.Contains(err.Error(), "store down") {
			t.Fatalf("after %d bytes: got %v", n, err)
		}
	}
}

// Every single-bit flip in the footer is detected.
func TestFooterBitFlips(t *testing.T) {
	p, _ := testParts()
	obj, _, _ := writeObject(t, p)
	footer := obj[len(obj)-FooterSize:]
	for i := range FooterSize * 8 {
		b := bytes.Clone(footer)
		b[i/8] ^= 1 << (i % 8)
		if f, err := ParseFooter(b); err == nil {
			t.Fatalf("flip of bit %d undetected: %+v", i, f)
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip of bit %d: %v does not wrap ErrCorrupt", i, err)
		}
	}
	for _, n := range []int{0, FooterSize - 1, FooterSize + 1} {
		if _, err := ParseFooter(make([]byte, n)); err == nil {
			t.Fatalf("%d bytes: no error", n)
		}
	}
}

// A footer whose CRC checks out but whose fields are inconsistent is
// rejected: a buggy writer must not get past a reader.
func TestParseFooterInconsistent(t *testing.T) {
	p, _ := testParts()
	_, good, _ := writeObject(t, p)
	for _, c := range []struct {
		name string
		edit func(*Footer)
	}{
		{"gap between parts", func(f *Footer) { f.Index.Offset++ }},
		{"log not at 0", func(f *Footer) { f.Log.Offset = 1 }},
		{"negative length", func(f *Footer) { f.ProducerSnapshot.Len = -1 }},
		{"huge length", func(f *Footer) { f.ProducerSnapshot.Len = 1 << 62 }},
		{"torn index", func(f *Footer) { f.Index.Len = 7 }},
		{"last below base", func(f *Footer) { f.LastOffset = 1 }},
		{"gap before txn index", func(f *Footer) { f.TxnIndex.Offset++ }},
		{"torn txn index", func(f *Footer) { f.TxnIndex.Len = 35 }},
	} {
		f := good
		c.edit(&f)
		if _, err := ParseFooter(appendFooter(nil, f)); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
	b := appendFooter(nil, good)
	binary.BigEndian.PutUint16(b[FooterSize-ftVersionEnd:], 3)
	binary.BigEndian.PutUint32(b[FooterSize-ftCRCEnd:], crc32.Checksum(b[:FooterSize-ftCRCEnd], castagnoli))
	if _, err := ParseFooter(b); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("version 3: %v", err)
	}
}

func TestVerifyObject(t *testing.T) {
	p, _ := testParts()
	obj, f, crc := writeObject(t, p)
	seg := f.Segment("k", crc)
	if err := seg.VerifyObject(bytes.NewReader(obj)); err != nil {
		t.Fatal(err)
	}
	for i := range len(obj) * 8 {
		b := bytes.Clone(obj)
		b[i/8] ^= 1 << (i % 8)
		if err := seg.VerifyObject(bytes.NewReader(b)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip of bit %d: %v", i, err)
		}
	}
	for _, b := range [][]byte{obj[:len(obj)-1], obj[:10], nil, append(bytes.Clone(obj), 0)} {
		if err := seg.VerifyObject(bytes.NewReader(b)); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%d bytes: %v", len(b), err)
		}
	}
	if err := f.Index.Check(obj[f.Index.Offset : f.Index.End()-1]); err == nil {
		t.Fatal("short part passed Check")
	}
}
