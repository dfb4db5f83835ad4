package txn

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/segment"
)

// The records of __transaction_state sit in the log as Kafka's v2 record
// batches. The coordinator writes each record as a batch of its own,
// uncompressed and with no producer (EncodeBatch), and reads a partition
// back batch by batch when it loads it (ReadBatches).

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ReadBatches appends to recs the records of the whole batches in buf and
// returns recs and the offset after the last batch (-1 when buf holds no
// whole batch). A batch cut short at the end of buf is left for the next
// read. Control batches (none are written to this topic, but a compacted
// log may hold empty ones) and empty batches are skipped. Keys and values
// are copies: buf may be reused once it returns.
//
// On an error the records already appended are returned with it, and the
// offset is the one after the batch that failed (or after the last whole
// batch before it).
func ReadBatches(buf []byte, recs []Record) ([]Record, int64, error) {
	next := int64(-1)
	for len(buf) >= 61 {
		h, err := segment.ParseBatchHeader(buf)
		if err != nil {
			return recs, next, err
		}
		size := h.Size()
		if size > len(buf) {
			break
		}
		batch := buf[:size]
		buf = buf[size:]
		next = h.LastOffset() + 1
		if h.IsControl() || h.NumRecords == 0 {
			continue
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(batch); err != nil {
			return recs, next, fmt.Errorf("batch at %d: %w", h.BaseOffset, err)
		}
		if rb.Attributes&0x07 != 0 {
			return recs, next, fmt.Errorf("batch at %d: compressed transaction state is not written by any version", h.BaseOffset)
		}
		raw := rb.Records
		for i := int32(0); i < rb.NumRecords; i++ {
			var r kmsg.Record
			n, err := readRecord(raw, &r)
			if err != nil {
				return recs, next, fmt.Errorf("batch at %d, record %d: %w", h.BaseOffset, i, err)
			}
			raw = raw[n:]
			recs = append(recs, Record{Key: slices.Clone(r.Key), Value: slices.Clone(r.Value)})
		}
	}
	return recs, next, nil
}

// readRecord decodes one length-prefixed record from raw and returns its
// encoded size.
func readRecord(raw []byte, r *kmsg.Record) (int, error) {
	l, n := kbin.Varint(raw)
	if n <= 0 || l < 0 || int(l) > len(raw)-n {
		return 0, fmt.Errorf("%w: record length", segment.ErrCorruptMessage)
	}
	size := n + int(l)
	if err := r.ReadFrom(raw[:size]); err != nil {
		return 0, err
	}
	return size, nil
}

// EncodeBatch encodes r as an uncompressed v2 batch of one record, with
// timestamp ts (Unix milliseconds) and no producer. The log assigns the
// offset and stamps the leader epoch.
func EncodeBatch(r Record, ts int64) []byte {
	rec := kmsg.Record{Key: r.Key, Value: r.Value}
	// Length counts the bytes after itself: encoded with 0 (one byte),
	// the record is one byte longer than that.
	rec.Length = int32(len(rec.AppendTo(nil)) - 1)
	body := rec.AppendTo(nil)
	rb := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1,
		Magic:                2,
		FirstTimestamp:       ts,
		MaxTimestamp:         ts,
		ProducerID:           -1,
		ProducerEpoch:        -1,
		FirstSequence:        -1,
		NumRecords:           1,
		Records:              body,
	}
	out := rb.AppendTo(nil)
	// Length counts everything after itself (offset 12); the CRC covers
	// everything after itself (attributes at offset 21).
	binary.BigEndian.PutUint32(out[8:12], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:21], crc32.Checksum(out[21:], castagnoli))
	return out
}
