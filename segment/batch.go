package segment

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
)

// Byte offsets of the v2 RecordBatch header fields (docs/format.md §2).
const (
	offBaseOffset      = 0
	offLength          = 8
	offLeaderEpoch     = 12
	offMagic           = 16
	offCRC             = 17
	offAttributes      = 21
	offLastOffsetDelta = 23
	offFirstTimestamp  = 27
	offMaxTimestamp    = 35
	offProducerID      = 43
	offProducerEpoch   = 51
	offBaseSequence    = 53
	offNumRecords      = 57

	// headerSize is the size of the batch header up to the records.
	headerSize = 61
	// logOverhead is the part of the header outside batchLength.
	logOverhead = 12
	// minBatchLength is the smallest valid batchLength: a header with no records.
	minBatchLength = headerSize - logOverhead
)

// Attribute bits.
const (
	attrCodecMask     = 0x07
	attrLogAppendTime = 0x08
	attrTransactional = 0x10
	attrControl       = 0x20
)

// Compression codecs (attributes & attrCodecMask).
const (
	codecNone   = 0
	codecGzip   = 1
	codecSnappy = 2
	codecLz4    = 3
	codecZstd   = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BatchHeader is the decoded fixed header of a v2 RecordBatch.
type BatchHeader struct {
	BaseOffset      int64
	Length          int32 // batchLength: bytes after the length field
	LeaderEpoch     int32
	Magic           int8
	CRC             uint32
	Attributes      int16
	LastOffsetDelta int32
	FirstTimestamp  int64
	MaxTimestamp    int64
	ProducerID      int64
	ProducerEpoch   int16
	BaseSequence    int32
	NumRecords      int32
}

// Size is the batch's total size in bytes, header included.
func (h BatchHeader) Size() int { return logOverhead + int(h.Length) }

// LastOffset is the offset of the batch's last record.
func (h BatchHeader) LastOffset() int64 { return h.BaseOffset + int64(h.LastOffsetDelta) }

// Codec is the compression codec id (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
func (h BatchHeader) Codec() int { return int(h.Attributes & attrCodecMask) }

// IsTransactional reports attribute bit 4.
func (h BatchHeader) IsTransactional() bool { return h.Attributes&attrTransactional != 0 }

// IsControl reports attribute bit 5 (transaction markers).
func (h BatchHeader) IsControl() bool { return h.Attributes&attrControl != 0 }

// lastSequence is the sequence number of the batch's last record, wrapping
// at math.MaxInt32 as Kafka's DefaultRecordBatch.incrementSequence does.
func (h BatchHeader) lastSequence() int32 {
	return incrementSequence(h.BaseSequence, h.LastOffsetDelta)
}

func incrementSequence(seq, by int32) int32 {
	if seq > math.MaxInt32-by {
		return by - (math.MaxInt32 - seq) - 1
	}
	return seq + by
}

// ParseBatchHeader decodes the header of the v2 batch at the start of b. It
// checks only that the header is present, the magic is 2 and batchLength is
// plausible; it does not look at the records or the CRC.
func ParseBatchHeader(b []byte) (BatchHeader, error) {
	if len(b) < headerSize {
		return BatchHeader{}, fmt.Errorf("%w: %d bytes, shorter than a batch header", ErrCorruptMessage, len(b))
	}
	h := decodeHeader(b)
	if h.Magic != 2 {
		return h, fmt.Errorf("%w: magic %d", ErrUnsupportedMagic, h.Magic)
	}
	if h.Length < minBatchLength {
		return h, fmt.Errorf("%w: batchLength %d below minimum %d", ErrCorruptMessage, h.Length, minBatchLength)
	}
	return h, nil
}

// decodeHeader decodes b[:headerSize] without any check.
func decodeHeader(b []byte) BatchHeader {
	_ = b[headerSize-1]
	be := binary.BigEndian
	return BatchHeader{
		BaseOffset:      int64(be.Uint64(b[offBaseOffset:])),
		Length:          int32(be.Uint32(b[offLength:])),
		LeaderEpoch:     int32(be.Uint32(b[offLeaderEpoch:])),
		Magic:           int8(b[offMagic]),
		CRC:             be.Uint32(b[offCRC:]),
		Attributes:      int16(be.Uint16(b[offAttributes:])),
		LastOffsetDelta: int32(be.Uint32(b[offLastOffsetDelta:])),
		FirstTimestamp:  int64(be.Uint64(b[offFirstTimestamp:])),
		MaxTimestamp:    int64(be.Uint64(b[offMaxTimestamp:])),
		ProducerID:      int64(be.Uint64(b[offProducerID:])),
		ProducerEpoch:   int16(be.Uint16(b[offProducerEpoch:])),
		BaseSequence:    int32(be.Uint32(b[offBaseSequence:])),
		NumRecords:      int32(be.Uint32(b[offNumRecords:])),
	}
}

// batchCRC computes the CRC-32C a v2 batch carries: over attributes..end.
func batchCRC(b []byte) uint32 { return crc32.Checksum(b[offAttributes:], castagnoli) }

// ValidateBatch fully validates b, which must hold exactly one v2 batch:
// lengths, magic, size against maxBytes (<= 0: no limit), CRC-32C, and the
// records themselves, walked as they decompress: their encoding, that
// their count matches recordCount, that offset deltas run 0..n-1 and that
// lastOffsetDelta is recordCount-1. Compressed records may decompress to
// at most max(recordCount, 16) × maxBytes (decompressedLimit;
// ErrMessageTooLarge beyond). It does not check timestamps against a
// clock.
func ValidateBatch(b []byte, maxBytes int) (BatchHeader, error) {
	f, err := validateBatch(b, maxBytes, nil)
	return f.hdr, err
}

// tsBounds limits record timestamps (CreateTime batches); a bound is off
// when its flag is false. Validation with bounds is validation of what a
// producer sent.
type tsBounds struct {
	min, max       int64
	hasMin, hasMax bool
	// keysRequired refuses records without a key (a compacted topic's).
	keysRequired bool
}

// batchFacts is what validation learns about a batch beyond its header.
type batchFacts struct {
	hdr BatchHeader
	// maxTs is the largest record timestamp (for LogAppendTime batches,
	// the header's maxTimestamp) and maxTsDelta the offset delta of the
	// first record carrying it.
	maxTs      int64
	maxTsDelta int32
}

func validateBatch(b []byte, maxBytes int, bounds *tsBounds) (batchFacts, error) {
	var f batchFacts
	h, err := ParseBatchHeader(b)
	f.hdr = h
	if err != nil {
		return f, err
	}
	if int64(len(b)) != int64(h.Size()) {
		return f, fmt.Errorf("%w: batchLength %d does not match the %d bytes given", ErrCorruptMessage, h.Length, len(b))
	}
	if maxBytes > 0 && len(b) > maxBytes {
		return f, fmt.Errorf("%w: batch of %d bytes exceeds the limit of %d", ErrMessageTooLarge, len(b), maxBytes)
	}
	if crc := batchCRC(b); crc != h.CRC {
		return f, fmt.Errorf("%w: CRC-32C mismatch (header %08x, computed %08x)", ErrCorruptMessage, h.CRC, crc)
	}
	if h.NumRecords < 0 {
		return f, fmt.Errorf("%w: negative record count %d", ErrCorruptMessage, h.NumRecords)
	}
	if h.NumRecords == 0 {
		return f, fmt.Errorf("%w: batch has no records", ErrInvalidRecord)
	}
	if h.LastOffsetDelta != h.NumRecords-1 {
		return f, fmt.Errorf("%w: lastOffsetDelta %d with %d records", ErrInvalidRecord, h.LastOffsetDelta, h.NumRecords)
	}
	if h.IsTransactional() && h.ProducerID < 0 {
		return f, fmt.Errorf("%w: transactional batch without a producer id", ErrInvalidRecord)
	}
	if h.ProducerID >= 0 && !h.IsControl() && h.BaseSequence < 0 {
		return f, fmt.Errorf("%w: idempotent batch with sequence %d", ErrInvalidRecord, h.BaseSequence)
	}
	logAppend := h.Attributes&attrLogAppendTime != 0
	if logAppend && bounds != nil {
		// Only the broker stamps LogAppendTime; a producer's claim would
		// put its header timestamp beyond the bounds below, as Kafka's
		// LogValidator also refuses.
		return f, fmt.Errorf("%w: a producer may not set the LogAppendTime attribute", ErrInvalidTimestamp)
	}
	codec := h.Codec()
	if codec > codecZstd {
		return f, fmt.Errorf("%w: unknown compression codec %d", ErrCorruptMessage, codec)
	}
	f.maxTs, f.maxTsDelta = -1, 0
	if logAppend {
		f.maxTs = h.MaxTimestamp
	}
	recs := b[headerSize:]
	if codec != codecNone {
		return f, validateCompressed(&f, codec, recs, decompressedLimit(h.NumRecords, maxBytes), bounds)
	}
	it := recordIter{b: recs}
	for i := int32(0); i < h.NumRecords; i++ {
		r, err := it.next()
		if err != nil {
			return f, fmt.Errorf("record %d: %w", i, err)
		}
		if err := f.check(i, r, bounds); err != nil {
			return f, err
		}
	}
	if len(it.b) != 0 {
		return f, fmt.Errorf("%w: %d bytes after the last of %d records", ErrCorruptMessage, len(it.b), h.NumRecords)
	}
	return f, nil
}

// decompressedLimit is how many bytes the records of a compressed batch
// may decompress to. Kafka checks max.message.bytes against the batch as
// sent, compressed, and never bounds what it inflates to: producers whose
// batch limit is above max.message.bytes count on compression (franz-go's
// ProducerBatchMaxBytes and librdkafka's batch.size are uncompressed
// sizes), and a few records of a MiB each may gzip to a few KB. Validation
// streams the records (memory stays at the decoder's window and a read
// buffer, whatever they inflate to), so this bound is not what protects
// memory: it caps the work one small batch can make the broker do. It is
// max.message.bytes per record, and never less than minDecompressedBatches
// of them, so a batch of a few large records is accepted; and never more
// than maxDecompressed. Without a batch limit, only the latter.
func decompressedLimit(numRecords int32, maxBytes int) int64 {
	if maxBytes <= 0 {
		return maxDecompressed
	}
	return min(int64(max(numRecords, minDecompressedBatches))*int64(maxBytes), maxDecompressed)
}

// minDecompressedBatches is the least number of max.message.bytes a
// compressed batch may decompress to, whatever its record count: 16 MiB
// at the default, well above what a client batches uncompressed, and well
// below the gigabytes a batch of max.message.bytes could claim.
const minDecompressedBatches = 16

// validateCompressed walks the records of a compressed batch while they
// decompress, failing as soon as their lengths claim more than limit
// bytes: memory stays at the decoder's window and a small read buffer, and
// a batch that inflates past its bound costs no more than the bound.
func validateCompressed(f *batchFacts, codec int, src []byte, limit int64, bounds *tsBounds) error {
	h := &f.hdr
	if codec == codecSnappy {
		// A snappy block does not stream; its header says what it will
		// expand to, which is checked before anything is allocated.
		pooled, recs, err := decompressSnappy(src, limit)
		if err != nil {
			return decompressError(codec, err, limit)
		}
		defer putBuf(pooled)
		it := recordIter{b: recs}
		for i := int32(0); i < h.NumRecords; i++ {
			r, err := it.next()
			if err != nil {
				return fmt.Errorf("record %d: %w", i, err)
			}
			if err := f.check(i, r, bounds); err != nil {
				return err
			}
		}
		if len(it.b) != 0 {
			return fmt.Errorf("%w: %d bytes after the last of %d records", ErrCorruptMessage, len(it.b), h.NumRecords)
		}
		return nil
	}
	br, done, err := openStream(codec, src)
	if err != nil {
		return decompressError(codec, err, limit)
	}
	defer done()
	it := streamIter{r: br, left: limit}
	for i := int32(0); i < h.NumRecords; i++ {
		r, err := it.next()
		if err != nil {
			return fmt.Errorf("record %d: %w", i, decompressError(codec, err, limit))
		}
		if err := f.check(i, r, bounds); err != nil {
			return err
		}
	}
	switch _, err := br.ReadByte(); {
	case err == nil:
		return fmt.Errorf("%w: bytes after the last of %d records", ErrCorruptMessage, h.NumRecords)
	case err != io.EOF:
		return decompressError(codec, err, limit)
	}
	return nil
}

// decompressError classifies an error met while decompressing: running
// over the bound is MESSAGE_TOO_LARGE, anything else a corrupt batch.
func decompressError(codec int, err error, limit int64) error {
	switch {
	case errors.Is(err, ErrCorruptMessage), errors.Is(err, ErrInvalidRecord), errors.Is(err, ErrMessageTooLarge):
		return err
	case errors.Is(err, errTooLarge):
		return fmt.Errorf("%w: records decompress to more than %d bytes", ErrMessageTooLarge, limit)
	}
	return fmt.Errorf("%w: decompressing codec %d: %v", ErrCorruptMessage, codec, err)
}

// check applies the per-record rules to record i: its offset delta and,
// for CreateTime batches, its timestamp against bounds; it tracks the
// largest timestamp.
func (f *batchFacts) check(i int32, r record, bounds *tsBounds) error {
	if r.offsetDelta != int64(i) {
		return fmt.Errorf("%w: record %d has offset delta %d", ErrInvalidRecord, i, r.offsetDelta)
	}
	if bounds != nil && bounds.keysRequired && r.nullKey && !f.hdr.IsControl() {
		return fmt.Errorf("%w: record %d has no key, which a compacted topic requires", ErrInvalidRecord, i)
	}
	if f.hdr.Attributes&attrLogAppendTime != 0 {
		return nil
	}
	ts := f.hdr.FirstTimestamp + r.timestampDelta
	if ts > f.maxTs {
		f.maxTs, f.maxTsDelta = ts, i
	}
	// NO_TIMESTAMP (-1) is exempt, as in Kafka.
	if bounds != nil && ts != -1 {
		if bounds.hasMin && ts < bounds.min {
			return fmt.Errorf("%w: record %d timestamp %d is before the allowed minimum %d", ErrInvalidTimestamp, i, ts, bounds.min)
		}
		if bounds.hasMax && ts > bounds.max {
			return fmt.Errorf("%w: record %d timestamp %d is after the allowed maximum %d", ErrInvalidTimestamp, i, ts, bounds.max)
		}
	}
	return nil
}

// record is what a walk over records needs; the key, value and headers are
// skipped in place.
type record struct {
	timestampDelta int64
	offsetDelta    int64
	nullKey        bool
	// key, value and nullValue are filled by recordIter only: a stream
	// walk never holds the record.
	key, value []byte
	nullValue  bool
}

// recordIter walks encoded records without allocating.
type recordIter struct{ b []byte }

func (it *recordIter) next() (record, error) {
	var r record
	length, n := varint(it.b)
	if n <= 0 || length < 0 || length > int64(len(it.b)-n) {
		return r, fmt.Errorf("%w: bad record length", ErrCorruptMessage)
	}
	body := it.b[n : n+int(length)]
	it.b = it.b[n+int(length):]
	if len(body) < 1 {
		return r, fmt.Errorf("%w: empty record", ErrCorruptMessage)
	}
	body = body[1:] // attributes: unused in v2
	if r.timestampDelta, n = varint(body); n <= 0 {
		return r, fmt.Errorf("%w: bad timestamp delta", ErrCorruptMessage)
	}
	body = body[n:]
	if r.offsetDelta, n = varint(body); n <= 0 || r.offsetDelta != int64(int32(r.offsetDelta)) {
		return r, fmt.Errorf("%w: bad offset delta", ErrCorruptMessage)
	}
	body = body[n:]
	var ok bool
	if r.key, body, r.nullKey, ok = bytesField(body, true); !ok {
		return r, fmt.Errorf("%w: bad record key", ErrCorruptMessage)
	}
	if r.value, body, r.nullValue, ok = bytesField(body, true); !ok {
		return r, fmt.Errorf("%w: bad record value", ErrCorruptMessage)
	}
	count, n := varint(body)
	if n <= 0 || count < 0 {
		return r, fmt.Errorf("%w: bad header count", ErrCorruptMessage)
	}
	body = body[n:]
	for j := int64(0); j < count; j++ {
		if body, ok = skipBytes(body, false); !ok {
			return r, fmt.Errorf("%w: bad header key", ErrCorruptMessage)
		}
		if body, ok = skipBytes(body, true); !ok {
			return r, fmt.Errorf("%w: bad header value", ErrCorruptMessage)
		}
	}
	if len(body) != 0 {
		return r, fmt.Errorf("%w: record length disagrees with its fields", ErrCorruptMessage)
	}
	return r, nil
}

// streamIter walks records as they come out of a decompressor, skipping
// keys, values and headers without holding them. left is what the
// records may still decompress to; a record length beyond it stops the
// walk before its bytes are decompressed.
type streamIter struct {
	r    *bufio.Reader
	left int64
}

var errRecordOverrun = fmt.Errorf("%w: record length disagrees with its fields", ErrCorruptMessage)

func (it *streamIter) next() (record, error) {
	var r record
	length, err := it.varint(&it.left)
	switch {
	case errors.Is(err, errRecordOverrun):
		return r, errTooLarge
	case err != nil:
		return r, streamErr(err, "record length")
	case length < 0:
		return r, fmt.Errorf("%w: bad record length", ErrCorruptMessage)
	case length > it.left:
		return r, errTooLarge
	}
	it.left -= length
	body := length
	if body < 1 {
		return r, fmt.Errorf("%w: empty record", ErrCorruptMessage)
	}
	if _, err := it.r.ReadByte(); err != nil { // attributes: unused in v2
		return r, streamErr(err, "record attributes")
	}
	body--
	if r.timestampDelta, err = it.varint(&body); err != nil {
		return r, streamErr(err, "timestamp delta")
	}
	if r.offsetDelta, err = it.varint(&body); err != nil || r.offsetDelta != int64(int32(r.offsetDelta)) {
		return r, streamErr(err, "offset delta")
	}
	keyLen, err := it.skipBytes(&body, true)
	if err != nil { // key
		return r, streamErr(err, "record key")
	}
	r.nullKey = keyLen < 0
	if _, err := it.skipBytes(&body, true); err != nil { // value
		return r, streamErr(err, "record value")
	}
	count, err := it.varint(&body)
	if err != nil || count < 0 {
		return r, streamErr(err, "header count")
	}
	for j := int64(0); j < count; j++ {
		if _, err := it.skipBytes(&body, false); err != nil {
			return r, streamErr(err, "header key")
		}
		if _, err := it.skipBytes(&body, true); err != nil {
			return r, streamErr(err, "header value")
		}
	}
	if body != 0 {
		return r, errRecordOverrun
	}
	return r, nil
}

// varint reads a zig-zag varint of at most 10 bytes, all within *budget,
// which it decrements.
func (it *streamIter) varint(budget *int64) (int64, error) {
	var u uint64
	for i, shift := 0, uint(0); i < binary.MaxVarintLen64; i, shift = i+1, shift+7 {
		if *budget <= 0 {
			return 0, errRecordOverrun
		}
		c, err := it.r.ReadByte()
		if err != nil {
			return 0, err
		}
		*budget--
		if c < 0x80 {
			if i == binary.MaxVarintLen64-1 && c > 1 {
				break
			}
			u |= uint64(c) << shift
			return int64(u>>1) ^ -int64(u&1), nil
		}
		u |= uint64(c&0x7f) << shift
	}
	return 0, fmt.Errorf("%w: varint overflows 64 bits", ErrCorruptMessage)
}

// skipBytes skips a varint-length-prefixed byte string (-1 = null, if
// nullable) within *budget, and returns its length.
func (it *streamIter) skipBytes(budget *int64, nullable bool) (int64, error) {
	l, err := it.varint(budget)
	switch {
	case err != nil:
		return 0, err
	case l == -1 && nullable:
		return -1, nil
	case l < 0:
		return 0, fmt.Errorf("%w: negative length %d", ErrCorruptMessage, l)
	case l > *budget:
		return 0, errRecordOverrun
	}
	*budget -= l
	length := l
	for l > 0 { // Discard takes an int
		n, err := it.r.Discard(int(min(l, 1<<30)))
		if err != nil {
			return 0, err
		}
		l -= int64(n)
	}
	return length, nil
}

// streamErr reports what a failed read inside a record means: the stream
// ending early or refusing to decode is a corrupt batch.
func streamErr(err error, what string) error {
	switch {
	case err == nil:
		return fmt.Errorf("%w: bad %s", ErrCorruptMessage, what)
	case errors.Is(err, ErrCorruptMessage), errors.Is(err, errTooLarge):
		return err
	case err == io.EOF, errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: records end inside the %s", ErrCorruptMessage, what)
	}
	return fmt.Errorf("%w: decompressing at the %s: %v", ErrCorruptMessage, what, err)
}

// skipBytes skips a varint-length-prefixed byte string (-1 = null, if
// nullable).
func skipBytes(b []byte, nullable bool) ([]byte, bool) {
	_, rest, _, ok := bytesField(b, nullable)
	return rest, ok
}

// bytesField splits a varint-length-prefixed byte string (-1 = null, if
// nullable) off the front of b.
func bytesField(b []byte, nullable bool) (field, rest []byte, null, ok bool) {
	l, n := varint(b)
	if n <= 0 {
		return nil, b, false, false
	}
	b = b[n:]
	switch {
	case l == -1 && nullable:
		return nil, b, true, true
	case l < 0 || l > int64(len(b)):
		return nil, b, false, false
	}
	return b[:l], b[l:], false, true
}

// varint decodes a zig-zag varint of at most 10 bytes. n <= 0 on error.
func varint(b []byte) (int64, int) {
	if len(b) > 0 && b[0] < 0x80 { // fast path: one byte
		u := uint64(b[0])
		return int64(u>>1) ^ -int64(u&1), 1
	}
	return binary.Varint(b)
}
