package format

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"
)

// A segment object is the concatenation, in this order, of
//
//	log | offset index | time index | producer snapshot | txn index | footer
//
// where the first five parts are the local segment's files byte for byte
// (docs/format.md) and the footer, FooterSize bytes at the very end, says
// where each part starts, how long it is and its CRC-32C. One object per
// segment means one PUT to upload it and one small ranged GET (the index,
// located through the manifest) to find any offset in it.
//
// Objects of footer version 1, written before transactions existed, have
// no txn index part and a FooterSizeV1-byte footer; they are read as
// holding no aborted transaction.

// FooterSize is the size of the footer this package writes (version 2).
const FooterSize = 156

// FooterSizeV1 is the size of a version 1 footer, the smallest there is.
const FooterSizeV1 = 136

// FooterMagic is the 4-byte magic near the end of every segment object.
const FooterMagic = "STSG"

// FooterVersion is the footer layout version this package writes; it
// reads versions 1 and 2.
const FooterVersion = 2

// Footer field offsets (big-endian throughout). The last 12 bytes are
// laid out alike in every version (version, size, magic, CRC), so that a
// reader holding an object's tail learns the footer's size from them.
const (
	ftBase        = 0
	ftLast        = 8
	ftFirstTs     = 16
	ftMaxTs       = 24
	ftRecordCount = 32
	ftEpoch       = 40
	ftParts       = 44 // parts of partSize bytes: log, index, time index, snapshot[, txn index]
	partSize      = 20 // offset int64, length int64, crc uint32
	// Offsets from the end of the footer.
	ftVersionEnd = 12
	ftSizeEnd    = 10
	ftMagicEnd   = 8
	ftCRCEnd     = 4
)

// TxnEntrySize is the size of an entry of the txn index part: Kafka's
// AbortedTxn (docs/format.md §14).
const TxnEntrySize = 34

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

// OptionalPart locates a part that objects of an older footer version
// lack. Its JSON form is a Part's, absent when the part is.
type OptionalPart struct {
	Part
	// Present is false for an object written before the part existed.
	Present bool
}

// IsZero reports an absent part, which the manifest omits.
func (p OptionalPart) IsZero() bool { return !p.Present }

// MarshalJSON writes the part as a Part.
func (p OptionalPart) MarshalJSON() ([]byte, error) { return json.Marshal(p.Part) }

// UnmarshalJSON reads a Part, strictly, and marks it present.
func (p *OptionalPart) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return errors.New("null part")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var part Part
	if err := dec.Decode(&part); err != nil {
		return err
	}
	*p = OptionalPart{Part: part, Present: true}
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
	// TxnIndex is the aborted-transaction index part, absent from objects
	// of footer version 1 (which hold no aborted transaction).
	TxnIndex OptionalPart `json:"txnIndex,omitzero"`
}

// Version returns the footer version of f's object.
func (f Footer) Version() int {
	if f.TxnIndex.Present {
		return 2
	}
	return 1
}

// footerSize returns the size of f's encoding.
func (f Footer) footerSize() int64 {
	if f.TxnIndex.Present {
		return FooterSize
	}
	return FooterSizeV1
}

// ObjectSize returns the size of the whole object, footer included.
func (f Footer) ObjectSize() int64 {
	if f.TxnIndex.Present {
		return f.TxnIndex.End() + FooterSize
	}
	return f.ProducerSnapshot.End() + FooterSizeV1
}

// Parts returns the object's parts in their order: log, offset index,
// time index, producer snapshot and, from version 2, txn index.
func (f Footer) Parts() []Part {
	parts := []Part{f.Log, f.Index, f.TimeIndex, f.ProducerSnapshot}
	if f.TxnIndex.Present {
		parts = append(parts, f.TxnIndex.Part)
	}
	return parts
}

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
	case f.TxnIndex.Len%TxnEntrySize != 0:
		return fmt.Errorf("txn index of %d bytes", f.TxnIndex.Len)
	case !f.TxnIndex.Present && f.TxnIndex.Part != (Part{}):
		return errors.New("an absent txn index with a location")
	}
	var next int64
	for i, p := range f.Parts() {
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
	for _, p := range f.Parts() {
		dst = binary.BigEndian.AppendUint64(dst, uint64(p.Offset))
		dst = binary.BigEndian.AppendUint64(dst, uint64(p.Len))
		dst = binary.BigEndian.AppendUint32(dst, p.CRC)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(f.Version()))
	dst = binary.BigEndian.AppendUint16(dst, uint16(f.footerSize()))
	dst = append(dst, FooterMagic...)
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// ParseFooter decodes the footer of a segment object from b, which must be
// exactly the object's footer: its last FooterSize bytes for version 2,
// FooterSizeV1 for version 1 (the 2-byte size field, 10 bytes from the
// end, says which). It checks the magic, the version, the CRC and that the
// parts are consistent with each other.
func ParseFooter(b []byte) (Footer, error) {
	n := len(b)
	if n != FooterSize && n != FooterSizeV1 {
		return Footer{}, fmt.Errorf("%w: footer of %d bytes, want %d or %d", ErrCorrupt, n, FooterSize, FooterSizeV1)
	}
	if m := b[n-ftMagicEnd : n-ftMagicEnd+4]; string(m) != FooterMagic {
		return Footer{}, fmt.Errorf("%w: footer magic %q, want %q", ErrCorrupt, m, FooterMagic)
	}
	if c, want := crc32.Checksum(b[:n-ftCRCEnd], castagnoli), binary.BigEndian.Uint32(b[n-ftCRCEnd:]); c != want {
		return Footer{}, fmt.Errorf("%w: footer CRC-32C %08x, stored %08x", ErrCorrupt, c, want)
	}
	v, size := binary.BigEndian.Uint16(b[n-ftVersionEnd:]), binary.BigEndian.Uint16(b[n-ftSizeEnd:])
	switch {
	case v != 1 && v != 2:
		return Footer{}, fmt.Errorf("%w: footer version %d, want 1 or 2", ErrCorrupt, v)
	case v == 1 && size != FooterSizeV1, v == 2 && size != FooterSize, int(size) != n:
		return Footer{}, fmt.Errorf("%w: footer version %d of size %d in %d bytes", ErrCorrupt, v, size, n)
	}
	f := Footer{
		BaseOffset:     int64(binary.BigEndian.Uint64(b[ftBase:])),
		LastOffset:     int64(binary.BigEndian.Uint64(b[ftLast:])),
		FirstTimestamp: int64(binary.BigEndian.Uint64(b[ftFirstTs:])),
		MaxTimestamp:   int64(binary.BigEndian.Uint64(b[ftMaxTs:])),
		RecordCount:    int64(binary.BigEndian.Uint64(b[ftRecordCount:])),
		LeaderEpoch:    int32(binary.BigEndian.Uint32(b[ftEpoch:])),
	}
	parts := []*Part{&f.Log, &f.Index, &f.TimeIndex, &f.ProducerSnapshot}
	if v == 2 {
		f.TxnIndex.Present = true
		parts = append(parts, &f.TxnIndex.Part)
	}
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

// CheckTxnIndex checks a txn index part of an object covering offsets
// [base, last]: whole 34-byte entries of version 0, each with a producer
// id >= 0, 0 <= firstOffset <= lastOffset, its marker (lastOffset) in
// [base, last] and after the previous entry's, and lastStableOffset >= 0.
func CheckTxnIndex(b []byte, base, last int64) error {
	if len(b)%TxnEntrySize != 0 {
		return fmt.Errorf("%w: txn index of %d bytes", ErrCorrupt, len(b))
	}
	prev := base - 1
	for i := 0; len(b) > 0; i, b = i+1, b[TxnEntrySize:] {
		v := int16(binary.BigEndian.Uint16(b))
		pid := int64(binary.BigEndian.Uint64(b[2:]))
		first := int64(binary.BigEndian.Uint64(b[10:]))
		marker := int64(binary.BigEndian.Uint64(b[18:]))
		lso := int64(binary.BigEndian.Uint64(b[26:]))
		if v != 0 || pid < 0 || first < 0 || first > marker || marker <= prev || marker > last || lso < 0 {
			return fmt.Errorf("%w: txn index entry %d (version %d, producer %d, offsets [%d, %d], stable %d) in an object of [%d, %d]",
				ErrCorrupt, i, v, pid, first, marker, lso, base, last)
		}
		prev = marker
	}
	return nil
}

// SegmentParts is what WriteSegmentObject puts in a segment object.
type SegmentParts struct {
	// Log supplies exactly LogSize bytes: the closed segment's .log file.
	Log     io.Reader
	LogSize int64
	// Index and TimeIndex are the segment's .index and .timeindex files;
	// ProducerSnapshot is the producer state after the segment (the
	// .snapshot file named by its LastOffset+1), opaque here. TxnIndex is
	// the segment's .txnindex (nil for none), checked by CheckTxnIndex.
	Index, TimeIndex, ProducerSnapshot, TxnIndex []byte
	BaseOffset, LastOffset                       int64
	FirstTimestamp, MaxTimestamp                 int64
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
	f.TxnIndex = OptionalPart{Part{Offset: f.ProducerSnapshot.End(), Len: int64(len(p.TxnIndex)), CRC: crc32.Checksum(p.TxnIndex, castagnoli)}, true}
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
	if err := CheckTxnIndex(p.TxnIndex, p.BaseOffset, p.LastOffset); err != nil {
		return Footer{}, 0, fmt.Errorf("format: segment object: %w", err)
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
	for _, b := range [][]byte{p.Index, p.TimeIndex, p.ProducerSnapshot, p.TxnIndex, appendFooter(nil, f)} {
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
	for i, p := range s.Parts() {
		h := crc32.New(castagnoli)
		// The txn index part's entries are checked too, not only its
		// CRC: they are few, 34 bytes per aborted transaction.
		var txns bytes.Buffer
		if i == txnPart {
			h = teeHash{h, &txns}
		}
		if err := checkStream(r, p, h); err != nil {
			return fmt.Errorf("segment %s: %w", s.Key, err)
		}
		if i == txnPart {
			if err := CheckTxnIndex(txns.Bytes(), s.BaseOffset, s.LastOffset); err != nil {
				return fmt.Errorf("segment %s: %w", s.Key, err)
			}
		}
	}
	size := int(s.footerSize())
	tail := make([]byte, size+1)
	n, err := io.ReadFull(r, tail)
	if err != io.ErrUnexpectedEOF || n != size {
		if err == nil {
			return fmt.Errorf("%w: segment %s: object is longer than %d bytes", ErrCorrupt, s.Key, s.Size)
		}
		return fmt.Errorf("%w: segment %s: reading footer: %v", ErrCorrupt, s.Key, err)
	}
	if c := whole.Sum32(); c != s.CRC {
		return fmt.Errorf("%w: segment %s: object CRC-32C %08x, want %08x", ErrCorrupt, s.Key, c, s.CRC)
	}
	f, err := ParseFooter(tail[:size])
	if err != nil {
		return fmt.Errorf("segment %s: %w", s.Key, err)
	}
	if f != s.Footer {
		return fmt.Errorf("%w: segment %s: footer %+v disagrees with the manifest", ErrCorrupt, s.Key, f)
	}
	return nil
}

// txnPart is the txn index's place in Footer.Parts.
const txnPart = 4

// teeHash is a hash that also keeps what it is fed.
type teeHash struct {
	hash.Hash32
	w io.Writer
}

func (t teeHash) Write(p []byte) (int, error) {
	t.w.Write(p)
	return t.Hash32.Write(p)
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
