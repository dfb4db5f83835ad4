package group

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Key and value versions written to __consumer_offsets, as Kafka 3.x and
// 4.x write them for classic groups: offset commit keys are versions 0-1,
// group metadata keys version 2.
const (
	offsetKeyVersion   = 1
	offsetValueVersion = 3 // leader epoch, no expire timestamp
	groupKeyVersion    = 2
	groupValueVersion  = 3 // static members (KIP-345)
)

// record is one key and value of __consumer_offsets; a nil value is a
// tombstone.
type record struct {
	key, value []byte
}

func offsetKey(group, topic string, partition int32) []byte {
	k := kmsg.OffsetCommitKey{Version: offsetKeyVersion, Group: group, Topic: topic, Partition: partition}
	return k.AppendTo(nil)
}

func offsetValue(o offset) []byte {
	v := kmsg.NewOffsetCommitValue()
	v.Version = offsetValueVersion
	v.Offset = o.offset
	v.LeaderEpoch = o.leaderEpoch
	v.Metadata = o.metadata
	v.CommitTimestamp = o.commitTime
	return v.AppendTo(nil)
}

func groupKey(group string) []byte {
	k := kmsg.GroupMetadataKey{Version: groupKeyVersion, Group: group}
	return k.AppendTo(nil)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Batch header layout (Kafka's v2 RecordBatch), offsets into the batch.
const (
	batchLengthAt     = 8
	batchCRCAt        = 17
	batchAttrsAt      = 21
	batchHeaderLength = 61
)

// Batch attributes the coordinator reads.
const (
	attrCompression   = 0x07
	attrTransactional = 0x10
	attrControl       = 0x20
)

// producer is the transactional producer a batch is written for
// (TxnOffsetCommit), or noProducer for the coordinator's own records.
type producer struct {
	id    int64
	epoch int16
}

var noProducer = producer{id: -1, epoch: -1}

// buildBatch encodes records as one uncompressed v2 record batch with base
// offset 0 (the log assigns the real one) and no producer id.
func buildBatch(recs []record, timestamp int64) []byte {
	return buildBatchFor(recs, timestamp, noProducer)
}

// buildBatchFor is buildBatch for producer p: with a producer id the batch
// is transactional, with base sequence 0 as Kafka's coordinator writes it
// (the log checks no sequence of the coordinator's batches, only the
// epoch).
func buildBatchFor(recs []record, timestamp int64, p producer) []byte {
	b := make([]byte, batchHeaderLength, batchHeaderLength+64*len(recs))
	be := binary.BigEndian
	attrs, seq := uint16(0), ^uint32(0) // base sequence -1
	if p.id >= 0 {
		attrs, seq = attrTransactional, 0
	}
	be.PutUint32(b[12:], ^uint32(0)) // partition leader epoch: stamped by the log
	b[16] = 2                        // magic
	be.PutUint16(b[batchAttrsAt:], attrs)
	be.PutUint32(b[23:], uint32(len(recs)-1)) // last offset delta
	be.PutUint64(b[27:], uint64(timestamp))   // first timestamp
	be.PutUint64(b[35:], uint64(timestamp))   // max timestamp
	be.PutUint64(b[43:], uint64(p.id))
	be.PutUint16(b[51:], uint16(p.epoch))
	be.PutUint32(b[53:], seq)
	be.PutUint32(b[57:], uint32(len(recs)))

	var body []byte
	for i, r := range recs {
		body = body[:0]
		body = append(body, 0)                       // attributes
		body = kbin.AppendVarlong(body, 0)           // timestamp delta
		body = kbin.AppendVarint(body, int32(i))     // offset delta
		body = kbin.AppendVarintBytes(body, r.key)   // key
		body = kbin.AppendVarintBytes(body, r.value) // value; nil encodes -1
		body = kbin.AppendVarint(body, 0)            // headers
		b = kbin.AppendVarint(b, int32(len(body)))
		b = append(b, body...)
	}
	be.PutUint32(b[batchLengthAt:], uint32(len(b)-12))
	be.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchAttrsAt:], castagnoli))
	return b
}

var errCorruptBatch = errors.New("group: malformed batch in __consumer_offsets")

// eachBatch calls fn for every whole batch in buf with the batch's last
// offset, and returns the offset after the last batch seen (or -1 if none).
func eachBatch(buf []byte, fn func(h batchInfo, records []byte) error) (next int64, err error) {
	next = -1
	be := binary.BigEndian
	for len(buf) >= batchHeaderLength {
		size := 12 + int(be.Uint32(buf[batchLengthAt:]))
		if size < batchHeaderLength || size > len(buf) {
			return next, fmt.Errorf("%w: batch length %d", errCorruptBatch, size)
		}
		b := buf[:size]
		buf = buf[size:]
		h := batchInfo{
			baseOffset: int64(be.Uint64(b)),
			attrs:      int16(be.Uint16(b[batchAttrsAt:])),
			lastDelta:  int32(be.Uint32(b[23:])),
			timestamp:  int64(be.Uint64(b[27:])),
			producerID: int64(be.Uint64(b[43:])),
			count:      int32(be.Uint32(b[57:])),
		}
		next = h.baseOffset + int64(h.lastDelta) + 1
		if err := fn(h, b[batchHeaderLength:]); err != nil {
			return next, err
		}
	}
	return next, nil
}

type batchInfo struct {
	baseOffset int64
	attrs      int16
	lastDelta  int32
	timestamp  int64
	producerID int64
	count      int32
}

func (h batchInfo) compressed() bool    { return h.attrs&attrCompression != 0 }
func (h batchInfo) control() bool       { return h.attrs&attrControl != 0 }
func (h batchInfo) transactional() bool { return h.attrs&attrTransactional != 0 }

// eachRecord decodes the records of an uncompressed batch.
func eachRecord(h batchInfo, raw []byte, fn func(r record) error) error {
	rd := kbin.Reader{Src: raw}
	for i := int32(0); i < h.count; i++ {
		length := rd.Varint()
		if rd.Complete() != nil || length < 0 || int(length) > len(rd.Src) {
			return fmt.Errorf("%w: record length %d", errCorruptBatch, length)
		}
		body := kbin.Reader{Src: rd.Src[:length]}
		rd.Src = rd.Src[length:]
		body.Int8()
		body.Varlong()
		body.Varint()
		key := body.VarintBytes()
		value := body.VarintBytes()
		if err := body.Complete(); err != nil {
			return fmt.Errorf("%w: record: %v", errCorruptBatch, err)
		}
		if err := fn(record{key: key, value: value}); err != nil {
			return err
		}
	}
	return nil
}
