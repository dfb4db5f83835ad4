package format

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
)

// A segment object is the concatenation, in this order, of
//
//	log | offset index | time index | producer snapshot | footer
//
// where the first four parts are the local segment's files byte for byte
// (docs/format.md) and the footer, FooterSize bytes at the very end, says
// where each part starts, how long it is and its CRC-32C. One object per
// segment means one PUT to upload it and one small ranged GET (the index,
// located through the manifest) to find any offset in it.

// FooterSize is the size of the footer at the end of every segment object.
const FooterSize = 136

// FooterMagic is the 4-byte magic near the end of every segment object.
const FooterMagic = "STSG"

// FooterVersion is the footer layout version this package writes and reads.
const FooterVersion = 1

// Footer field offsets (big-endian throughout).
const (
	ftBase        = 0
	ftLast        = 8
	ftFirstTs     = 16
	ftMaxTs       = 24
	ftRecordCount = 32
	ftEpoch       = 40
	ftParts       = 44 // 4 parts of partSize bytes: log, index, time index, snapshot
	partSize      = 20 // offset int64, length int64, crc uint32
	ftVersion     = 124
	ftSize        = 126
	ftMagic       = 128
	ftCRC         = 132
)

// Entry sizes of the local index formats, reused unchanged in the object.
const (
	OffsetEntrySize = 8  // relativeOffset uint32, position uint32
	TimeEntrySize   = 12 // timestamp int64, relativeOffset uint32
)

// maxLogLen bounds a segment's log part: index positions are 32-bit, and
// the local log never lets a segment reach 2 GiB.
const maxLogLen = math.MaxInt32

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by every error that reports bytes failing a
// checksum or a structural check, as opposed to bad arguments.
var ErrCorrupt = errors.New("format: corrupt")

// Part locates one part of a segment object.
type Part struct {
	// Offset is the byte position of the part in the object.
	Offset int64 `json:"offset"`
	// Len is its length in bytes.
	Len int64 `json:"length"`
	// CRC is the CRC-32C (Castagnoli) of its bytes.
	CRC uint32 `json:"crc32c"`
}

// End returns the position just past the part.
func (p Part) End() int64 { return p.Offset + p.Len }

// Check verifies that b is the whole part: its length and CRC-32C. A reader
// calls it on every part it fetched with a ranged GET.
func (p Part) Check(b []byte) error {
	if int64(len(b)) != p.Len {
		return fmt.Errorf("%w: part at %d is %d bytes, want %d", ErrCorrupt, p.Offset, len(b), p.Len)
	}
	if c := crc32.Checksum(b, castagnoli); c != p.CRC {
		return fmt.Errorf("%w: part at %d has CRC-32C %08x, want %08x", ErrCorrupt, p.Offset, c, p.CRC)
	}
	return nil
}

// Footer is the decoded footer of a segment object.
// The JSON names are those of the manifest, where a RemoteSegment embeds
// its object's footer.
type Footer struct {
	// BaseOffset and LastOffset bound the offsets the segment covers: every
	// record in it lies in [BaseOffset, LastOffset], and no other segment
	// of the partition covers any of them.
	BaseOffset int64 `json:"baseOffset"`
	LastOffset int64 `json:"lastOffset"`
	// FirstTimestamp is the first batch's base timestamp and MaxTimestamp
	// the largest record timestamp in the segment, in Unix milliseconds.
	FirstTimestamp int64 `json:"firstTimestamp"`
	MaxTimestamp   int64 `json:"maxTimestamp"`
	// RecordCount is the number of records, or -1 if unknown.
	RecordCount int64 `json:"recordCount"`
	// LeaderEpoch is the epoch of the leader that uploaded the segment.
	LeaderEpoch int32 `json:"leaderEpoch"`
	// The parts, contiguous and in this order from offset 0.
	Log              Part `json:"log"`
	Index            Part `json:"index"`
	TimeIndex        Part `json:"timeIndex"`
	ProducerSnapshot Part `json:"producerSnapshot"`
}

// ObjectSize returns the size of the whole object, footer included.
func (f Footer) ObjectSize() int64 { return f.ProducerSnapshot.End() + FooterSize }

func (f Footer) parts() [4]Part { return [4]Part{f.Log, f.Index, f.TimeIndex, f.ProducerSnapshot} }

// validate checks what a footer may claim, whether it came from bytes or
// from a writer's arguments.
func (f Footer) validate() error {
	switch {
	case f.BaseOffset < 0 || f.LastOffset < f.BaseOffset:
		return fmt.Errorf("offsets [%d, %d]", f.BaseOffset, f.LastOffset)
	case f.LastOffset-f.BaseOffset > math.MaxInt32:
		return fmt.Errorf("offsets [%d, %d] span more than 2^31-1", f.BaseOffset, f.LastOffset)
	case f.FirstTimestamp > f.MaxTimestamp:
		return fmt.Errorf("first timestamp %d above max timestamp %d", f.FirstTimestamp, f.MaxTimestamp)
	case f.RecordCount < -1 || f.RecordCount > f.LastOffset-f.BaseOffset+1:
		return fmt.Errorf("record count %d for offsets [%d, %d]", f.RecordCount, f.BaseOffset, f.LastOffset)
	case f.LeaderEpoch < 0:
		return fmt.Errorf("leader epoch %d", f.LeaderEpoch)
	case f.Log.Len > maxLogLen:
		return fmt.Errorf("log part of %d bytes exceeds 2^31-1", f.Log.Len)
	case f.Index.Len%OffsetEntrySize != 0:
		return fmt.Errorf("offset index of %d bytes", f.Index.Len)
	case f.TimeIndex.Len%TimeEntrySize != 0:
		return fmt.Errorf("time index of %d bytes", f.TimeIndex.Len)
	}
	var next int64
	for i, p := range f.parts() {
		// Every length is bounded so that no sum below overflows.
		if p.Offset != next || p.Len < 0 || p.Len > math.MaxInt32 {
			return fmt.Errorf("part %d at %d length %d, want it at %d", i, p.Offset, p.Len, next)
		}
		next = p.End()
	}
	return nil
}

// appendFooter appends the FooterSize-byte encoding of f to dst.
func appendFooter(dst []byte, f Footer) []byte {
	start := len(dst)
	dst = binary.BigEndian.AppendUint64(dst, uint64(f.BaseOffset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(f.LastOffset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(f.FirstTimestamp))
	dst = binary.BigEndian.AppendUint64(dst, uint64(f.MaxTimestamp))
	dst = binary.BigEndian.AppendUint64(dst, uint64(f.RecordCount))
	dst = binary.BigEndian.AppendUint32(dst, uint32(f.LeaderEpoch))
	for _, p := range f.parts() {
		dst = binary.BigEndian.AppendUint64(dst, uint64(p.Offset))
		dst = binary.BigEndian.AppendUint64(dst, uint64(p.Len))
		dst = binary.BigEndian.AppendUint32(dst, p.CRC)
	}
	dst = binary.BigEndian.AppendUint16(dst, FooterVersion)
	dst = binary.BigEndian.AppendUint16(dst, FooterSize)
	dst = append(dst, FooterMagic...)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// ParseFooter decodes the footer of a segment object from b, which must be
// exactly the object's last FooterSize bytes. It checks the magic, the
// version, the CRC and that the parts are consistent with each other.
func ParseFooter(b []byte) (Footer, error) {
	if len(b) != FooterSize {
		return Footer{}, fmt.Errorf("%w: footer of %d bytes, want %d", ErrCorrupt, len(b), FooterSize)
	}
	if string(b[ftMagic:ftMagic+4]) != FooterMagic {
		return Footer{}, fmt.Errorf("%w: footer magic %q, want %q", ErrCorrupt, b[ftMagic:ftMagic+4], FooterMagic)
	}
	if c, want := crc32.Checksum(b[:ftCRC], castagnoli), binary.BigEndian.Uint32(b[ftCRC:]); c != want {
		return Footer{}, fmt.Errorf("%w: footer CRC-32C %08x, stored %08x", ErrCorrupt, c, want)
	}
	if v := binary.BigEndian.Uint16(b[ftVersion:]); v != FooterVersion {
		return Footer{}, fmt.Errorf("%w: footer version %d, want %d", ErrCorrupt, v, FooterVersion)
	}
	if n := binary.BigEndian.Uint16(b[ftSize:]); n != FooterSize {
		return Footer{}, fmt.Errorf("%w: footer size field %d, want %d", ErrCorrupt, n, FooterSize)
	}
	f := Footer{
		BaseOffset:     int64(binary.BigEndian.Uint64(b[ftBase:])),
		LastOffset:     int64(binary.BigEndian.Uint64(b[ftLast:])),
		FirstTimestamp: int64(binary.BigEndian.Uint64(b[ftFirstTs:])),
		MaxTimestamp:   int64(binary.BigEndian.Uint64(b[ftMaxTs:])),
		RecordCount:    int64(binary.BigEndian.Uint64(b[ftRecordCount:])),
		LeaderEpoch:    int32(binary.BigEndian.Uint32(b[ftEpoch:])),
	}
	parts := [4]*Part{&f.Log, &f.Index, &f.TimeIndex, &f.ProducerSnapshot}
	for i, p := range parts {
		o := ftParts + i*partSize
		p.Offset = int64(binary.BigEndian.Uint64(b[o:]))
		p.Len = int64(binary.BigEndian.Uint64(b[o+8:]))
		p.CRC = binary.BigEndian.Uint32(b[o+16:])
	}
	if err := f.validate(); err != nil {
		return Footer{}, fmt.Errorf("%w: footer: %v", ErrCorrupt, err)
	}
	return f, nil
}

// SegmentParts is what WriteSegmentObject puts in a segment object.
type SegmentParts struct {
	// Log supplies exactly LogSize bytes: the closed segment's .log file.
	Log     io.Reader
	LogSize int64
	// Index and TimeIndex are the segment's .index and .timeindex files;
	// ProducerSnapshot is the producer state after the segment (the
	// .snapshot file named by its LastOffset+1), opaque here.
	Index, TimeIndex, ProducerSnapshot []byte
	BaseOffset, LastOffset             int64
	FirstTimestamp, MaxTimestamp       int64
	// RecordCount is the number of records, or -1 if unknown.
	RecordCount int64
	// LeaderEpoch is the epoch of the uploading leader, as in the key.
	LeaderEpoch int32
}

// WriteSegmentObject writes a segment object to w: p.LogSize bytes streamed
// from p.Log (never held in memory as a whole), then the indexes, the
// snapshot and the footer. It returns the footer and the CRC-32C of the
// whole object, which the manifest records. It checks p first (the indexes
// must be well formed and inside the segment) and writes nothing if p is
// invalid; an error from w or p.Log leaves a partial object the caller must
// discard.
func WriteSegmentObject(w io.Writer, p SegmentParts) (f Footer, objectCRC uint32, err error) {
	if p.Log == nil {
		return Footer{}, 0, errors.New("format: segment object without a log")
	}
	f = Footer{
		BaseOffset: p.BaseOffset, LastOffset: p.LastOffset,
		FirstTimestamp: p.FirstTimestamp, MaxTimestamp: p.MaxTimestamp,
		RecordCount: p.RecordCount, LeaderEpoch: p.LeaderEpoch,
	}
	f.Log = Part{Offset: 0, Len: p.LogSize}
	f.Index = Part{Offset: f.Log.End(), Len: int64(len(p.Index)), CRC: crc32.Checksum(p.Index, castagnoli)}
	f.TimeIndex = Part{Offset: f.Index.End(), Len: int64(len(p.TimeIndex)), CRC: crc32.Checksum(p.TimeIndex, castagnoli)}
	f.ProducerSnapshot = Part{Offset: f.TimeIndex.End(), Len: int64(len(p.ProducerSnapshot)), CRC: crc32.Checksum(p.ProducerSnapshot, castagnoli)}
	if err := f.validate(); err != nil {
		return Footer{}, 0, fmt.Errorf("format: segment object: %w", err)
	}
	span := p.LastOffset - p.BaseOffset + 1
	if err := checkOffsetIndex(p.Index, p.LogSize, span); err != nil {
		return Footer{}, 0, fmt.Errorf("format: segment object: offset index: %w", err)
	}
	if err := checkTimeIndex(p.TimeIndex, span); err != nil {
		return Footer{}, 0, fmt.Errorf("format: segment object: time index: %w", err)
	}

	whole := crc32.New(castagnoli)
	logCRC := crc32.New(castagnoli)
	out := io.MultiWriter(w, whole)
	n, err := io.CopyN(io.MultiWriter(out, logCRC), p.Log, p.LogSize)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("log ended after %d of %d bytes: %w", n, p.LogSize, io.ErrUnexpectedEOF)
		}
		return Footer{}, 0, fmt.Errorf("format: writing segment object: %w", err)
	}
	f.Log.CRC = logCRC.Sum32()
	for _, b := range [][]byte{p.Index, p.TimeIndex, p.ProducerSnapshot, appendFooter(nil, f)} {
		if _, err := out.Write(b); err != nil {
			return Footer{}, 0, fmt.Errorf("format: writing segment object: %w", err)
		}
	}
	return f, whole.Sum32(), nil
}

// VerifyObject reads a whole segment object from r and checks it against
// the manifest entry s: the size and CRC-32C of the object, the CRC-32C of
// every part, and a footer that agrees with s. It is what `tier verify`
// runs; it holds at most one part-sized read buffer, never the object.
func (s RemoteSegment) VerifyObject(r io.Reader) error {
	whole := crc32.New(castagnoli)
	r = io.TeeReader(r, whole)
	for _, p := range [4]Part{s.Log, s.Index, s.TimeIndex, s.ProducerSnapshot} {
		if err := checkStream(r, p, crc32.New(castagnoli)); err != nil {
			return fmt.Errorf("segment %s: %w", s.Key, err)
		}
	}
	tail := make([]byte, FooterSize+1)
	n, err := io.ReadFull(r, tail)
	if err != io.ErrUnexpectedEOF || n != FooterSize {
		if err == nil {
			return fmt.Errorf("%w: segment %s: object is longer than %d bytes", ErrCorrupt, s.Key, s.Size)
		}
		return fmt.Errorf("%w: segment %s: reading footer: %v", ErrCorrupt, s.Key, err)
	}
	if c := whole.Sum32(); c != s.CRC {
		return fmt.Errorf("%w: segment %s: object CRC-32C %08x, want %08x", ErrCorrupt, s.Key, c, s.CRC)
	}
	f, err := ParseFooter(tail[:FooterSize])
	if err != nil {
		return fmt.Errorf("segment %s: %w", s.Key, err)
	}
	if f != s.Footer {
		return fmt.Errorf("%w: segment %s: footer %+v disagrees with the manifest", ErrCorrupt, s.Key, f)
	}
	return nil
}

// checkStream consumes part p from r and checks its CRC-32C.
func checkStream(r io.Reader, p Part, h hash.Hash32) error {
	n, err := io.CopyN(h, r, p.Len)
	if err != nil {
		return fmt.Errorf("%w: part at %d: read %d of %d bytes: %v", ErrCorrupt, p.Offset, n, p.Len, err)
	}
	if c := h.Sum32(); c != p.CRC {
		return fmt.Errorf("%w: part at %d has CRC-32C %08x, want %08x", ErrCorrupt, p.Offset, c, p.CRC)
	}
	return nil
}
