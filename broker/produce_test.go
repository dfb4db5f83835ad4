package broker

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// withAttributes returns batch (from rawBatch) with its attributes set to
// attrs and the CRC recomputed, as a client that sets them would send it.
func withAttributes(batch []byte, attrs int16) []byte {
	binary.BigEndian.PutUint16(batch[21:], uint16(attrs))
	binary.BigEndian.PutUint32(batch[17:], crc32.Checksum(batch[21:], crc32.MakeTable(crc32.Castagnoli)))
	return batch
}

// A producer may not stamp its batch LogAppendTime (Kafka's LogValidator:
// "Producer should not set timestamp type to LogAppendTime"): the batch is
// refused with INVALID_TIMESTAMP, so its timestamp can neither escape
// message.timestamp.after.max.ms nor become the partition's max timestamp.
func TestProduceRefusesLogAppendTimeFromProducer(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "lat", 1, nil)
	future := time.Now().AddDate(100, 0, 0).UnixMilli()
	resp := produceRaw(t, cl, "lat", withAttributes(rawBatch(-1, -1, -1, future, "from the future"), 0x08))
	if resp.ErrorCode != kerr.InvalidTimestamp.Code {
		t.Fatalf("got %v, want INVALID_TIMESTAMP", kerr.ErrorForCode(resp.ErrorCode))
	}
	if end := listOffset(t, cl, "lat", -1); end != 0 {
		t.Fatalf("log end %d after a refused batch", end)
	}
	ok := produceRaw(t, cl, "lat", rawBatch(-1, -1, -1, time.Now().UnixMilli(), "now"))
	if ok.ErrorCode != 0 || ok.BaseOffset != 0 {
		t.Fatalf("CreateTime batch: %v at %d", kerr.ErrorForCode(ok.ErrorCode), ok.BaseOffset)
	}
}
