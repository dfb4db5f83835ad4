package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"hash/crc32"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/tier/format"
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

// initProducerID asks b for an idempotent producer id.
func initProducerID(t *testing.T, cl *kgo.Client) int64 {
	t.Helper()
	resp, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(context.Background(), cl)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("init producer id: %v %v", err, kerr.ErrorForCode(resp.ErrorCode))
	}
	return resp.ProducerID
}

// One Produce request carrying the same idempotent batch twice: Kafka
// checks duplicates against committed producer state only, so the second
// copy is OUT_OF_ORDER_SEQUENCE_NUMBER and the request writes nothing; it
// is not acknowledged as a duplicate of its own unwritten first copy.
func TestProduceSameIdempotentBatchTwiceInOneRequest(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "twice", 1, nil)
	pid := initProducerID(t, cl)
	batch := rawBatch(pid, 0, 0, time.Now().UnixMilli(), "a", "b")
	resp := produceRaw(t, cl, "twice", append(bytes.Clone(batch), batch...))
	if resp.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("got %v at offset %d, want OUT_OF_ORDER_SEQUENCE_NUMBER", kerr.ErrorForCode(resp.ErrorCode), resp.BaseOffset)
	}
	if end := listOffset(t, cl, "twice", -1); end != 0 {
		t.Fatalf("log end %d after a refused request", end)
	}
	if once := produceRaw(t, cl, "twice", batch); once.ErrorCode != 0 || once.BaseOffset != 0 {
		t.Fatalf("the batch alone: %v at %d", kerr.ErrorForCode(once.ErrorCode), once.BaseOffset)
	}
	if end := listOffset(t, cl, "twice", -1); end != 2 {
		t.Fatalf("log end %d, want 2", end)
	}
}

// KIP-360: a producer the partition has no state for (never seen here, or
// forgotten) is accepted at whatever sequence it is at, and checked from
// there on.
func TestProduceUnknownProducerAtAnySequence(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "kip360", 1, nil)
	pid := initProducerID(t, cl)
	now := time.Now().UnixMilli()
	if resp := produceRaw(t, cl, "kip360", rawBatch(pid, 0, 17, now, "a", "b")); resp.ErrorCode != 0 || resp.BaseOffset != 0 {
		t.Fatalf("first batch at sequence 17: %v at %d", kerr.ErrorForCode(resp.ErrorCode), resp.BaseOffset)
	}
	if resp := produceRaw(t, cl, "kip360", rawBatch(pid, 0, 20, now, "c")); resp.ErrorCode != kerr.OutOfOrderSequenceNumber.Code {
		t.Fatalf("gap after it: %v, want OUT_OF_ORDER_SEQUENCE_NUMBER", kerr.ErrorForCode(resp.ErrorCode))
	}
	if resp := produceRaw(t, cl, "kip360", rawBatch(pid, 0, 19, now, "c")); resp.ErrorCode != 0 || resp.BaseOffset != 2 {
		t.Fatalf("next batch: %v at %d", kerr.ErrorForCode(resp.ErrorCode), resp.BaseOffset)
	}
}

// A topic setting of 0 means what it means in Kafka, not "the default":
// retention.ms=0 and retention.bytes=0 delete every closed segment, and
// message.timestamp.{after,before}.max.ms=0 allow no skew either way.
func TestTopicZeroSettingsMeanZero(t *testing.T) {
	b := testBroker(t, "", func(c *Config) { c.MaintenanceInterval = 20 * time.Millisecond })
	adm := testAdmin(t, b)
	for _, key := range []string{"retention.ms", "retention.bytes"} {
		t.Run(key, func(t *testing.T) {
			topic := "zero-" + key
			createTopic(t, adm, topic, 1, map[string]*string{"segment.bytes": ptr("1024"), key: ptr("0")})
			produceKeyed(t, b, topic, 60, 100, kgo.ProducerBatchMaxBytes(512))
			cl := testClient(t, b)
			end := listOffset(t, cl, topic, -1)
			waitFor(t, 10*time.Second, "every closed segment to go", func() bool {
				return segmentFiles(t, b, topic, 0) == 1
			})
			if start := listOffset(t, cl, topic, -2); start == 0 || start > end {
				t.Fatalf("earliest offset %d with %s=0, log end %d", start, key, end)
			}
		})
	}

	createTopic(t, adm, "zero-skew", 1, map[string]*string{
		"message.timestamp.after.max.ms":  ptr("0"),
		"message.timestamp.before.max.ms": ptr("0"),
	})
	cl := testClient(t, b)
	for _, skew := range []time.Duration{time.Minute, -time.Minute} {
		ts := time.Now().Add(skew).UnixMilli()
		if resp := produceRaw(t, cl, "zero-skew", rawBatch(-1, -1, -1, ts, "skewed")); resp.ErrorCode != kerr.InvalidTimestamp.Code {
			t.Fatalf("timestamp %v off: %v, want INVALID_TIMESTAMP", skew, kerr.ErrorForCode(resp.ErrorCode))
		}
	}
}

// On a tiered topic a 0 means the same on both tiers: with retention.ms=0
// (or retention.bytes=0) and local.retention.* following them (-2), the
// bucket drops every uploaded segment and the local log keeps no closed
// segment, so the earliest offset reaches the active segment.
func TestTieredTopicZeroRetentionOnBothTiers(t *testing.T) {
	for _, key := range []string{"retention.ms", "retention.bytes"} {
		t.Run(key, func(t *testing.T) {
			b := tieredBroker(t, "", tierStores[0].open(t), func(c *Config) { c.MaintenanceInterval = 20 * time.Millisecond })
			createTopic(t, testAdmin(t, b), "zero", 1, map[string]*string{"segment.bytes": ptr("1024"), key: ptr("0")})
			produceKeyed(t, b, "zero", 60, 100, kgo.ProducerBatchMaxBytes(512))
			p := b.partition("zero", 0)
			var m *format.Root
			waitFor(t, 20*time.Second, "both tiers to drop every closed segment", func() bool {
				var err error
				if m, err = b.tier.Manifest(context.Background(), p.BucketName()); err != nil {
					t.Fatal(err)
				}
				segs, err := p.Log().ClosedSegments(0)
				if err != nil {
					t.Fatal(err)
				}
				// The bucket is empty, and the partition has read the
				// manifest that says so: the pass that publishes it reads
				// it back a moment later.
				return m.EndOffset() > 0 && len(segs) == 0 && m.Empty() &&
					p.RemoteStart() == -1 && p.UploadedEnd() == m.EndOffset()
			})
			cl := testClient(t, b)
			if start := listOffset(t, cl, "zero", -2); start < m.EndOffset() {
				t.Fatalf("earliest offset %d below the uploaded end %d", start, m.EndOffset())
			}
		})
	}
}

// zstdBomb is a Produce batch of one record whose value is size zero bytes,
// zstd-compressed to a few KB.
func zstdBomb(t *testing.T, size int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	r := kmsg.Record{Value: make([]byte, size)}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	w.Write(r.AppendTo(nil))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	ts := time.Now().UnixMilli()
	rb := kmsg.RecordBatch{Magic: 2, Attributes: 4, FirstTimestamp: ts, MaxTimestamp: ts, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: 1, PartitionLeaderEpoch: -1, Records: buf.Bytes()}
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	return withAttributes(raw, 4)
}

// A small compressed batch that inflates past its bound (16 ×
// max.message.bytes for a batch of one record) is MESSAGE_TOO_LARGE,
// found while it decompresses and before the
// partition's append lock: produce to a partition whose appends are held
// up still gets its answer.
func TestProduceDecompressionBombOutsidePartitionLock(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "bomb", 1, nil)
	bomb := zstdBomb(t, 32<<20)
	p := b.partition("bomb", 0)
	release := p.HoldAppends()
	locked := true
	defer func() {
		if locked {
			release()
		}
	}()
	done := make(chan kmsg.ProduceResponseTopicPartition, 1)
	go func() {
		// Not produceRaw: this goroutine may outlive a failed test.
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = 1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "bomb"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Records = bomb
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		var out kmsg.ProduceResponseTopicPartition
		out.ErrorCode = -1
		if resp, err := req.RequestWith(context.Background(), cl); err == nil && len(resp.Topics) == 1 && len(resp.Topics[0].Partitions) == 1 {
			out = resp.Topics[0].Partitions[0]
		}
		done <- out
	}()
	select {
	case resp := <-done:
		if resp.ErrorCode != kerr.MessageTooLarge.Code {
			t.Fatalf("%d-byte batch inflating to 32 MiB: %v, want MESSAGE_TOO_LARGE", len(bomb), kerr.ErrorForCode(resp.ErrorCode))
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the batch was validated under the partition's append lock")
	}
	release()
	locked = false
	if end := listOffset(t, cl, "bomb", -1); end != 0 {
		t.Fatalf("log end %d after a refused batch", end)
	}
}
