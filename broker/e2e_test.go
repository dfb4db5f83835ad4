package broker

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fillValue writes the deterministic value of record i into v, so a
// consumer can check every byte without the producer keeping anything.
func fillValue(v []byte, i uint64) {
	x := i*0x9E3779B97F4A7C15 + 1
	for j := 0; j+8 <= len(v); j += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(v[j:], x)
	}
	for j := len(v) &^ 7; j < len(v); j++ {
		v[j] = byte(x >> (8 * (j & 7)))
	}
}

// TestIdempotentProduceConsumeExactlyOnce is the single-node promise: with
// acks=all and an idempotent producer, every acknowledged record is consumed
// exactly once, byte-identical, in per-partition order. The full run is
// 1,000,000 records of 1 KiB over 6 partitions; -short runs 20,000.
func TestIdempotentProduceConsumeExactlyOnce(t *testing.T) {
	const partitions = 6
	const valueSize = 1024
	n := 1_000_000
	if testing.Short() {
		n = 20_000
	}
	b := testBroker(t, "")
	adm := testAdmin(t, b)
	createTopic(t, adm, "exactly-once", partitions, nil)

	prod := testClient(t, b,
		kgo.DefaultProduceTopic("exactly-once"),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.ProducerBatchMaxBytes(1<<20),
		kgo.MaxBufferedRecords(64<<10),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	start := time.Now()
	var (
		wg      sync.WaitGroup
		errMu   sync.Mutex
		prodErr error
		acked   = make([]int64, n) // offset acknowledged for record i
	)
	for i := 0; i < n; i++ {
		key := binary.BigEndian.AppendUint64(nil, uint64(i))
		val := make([]byte, valueSize)
		fillValue(val, uint64(i))
		wg.Add(1)
		prod.Produce(ctx, &kgo.Record{Key: key, Value: val}, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				errMu.Lock()
				if prodErr == nil {
					prodErr = err
				}
				errMu.Unlock()
				return
			}
			acked[binary.BigEndian.Uint64(r.Key)] = r.Offset
		})
	}
	wg.Wait()
	if prodErr != nil {
		t.Fatalf("produce: %v", prodErr)
	}
	t.Logf("produced %d records in %v", n, time.Since(start))

	cons := testClient(t, b,
		kgo.ConsumeTopics("exactly-once"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(50<<20),
	)
	start = time.Now()
	seen := make([]bool, n)
	lastKey := make(map[int32]int64)
	lastOffset := make(map[int32]int64)
	want := make([]byte, valueSize)
	got := 0
	for got < n {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d before timeout", got, n)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s-%d: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			i := int64(binary.BigEndian.Uint64(r.Key))
			if i < 0 || i >= int64(n) {
				t.Fatalf("unknown key %d", i)
			}
			if seen[i] {
				t.Fatalf("record %d consumed twice (partition %d offset %d)", i, r.Partition, r.Offset)
			}
			seen[i] = true
			got++
			if r.Offset != acked[i] {
				t.Fatalf("record %d at offset %d, acknowledged at %d", i, r.Offset, acked[i])
			}
			if prev, ok := lastKey[r.Partition]; ok && i <= prev {
				t.Fatalf("partition %d: record %d after %d: out of order", r.Partition, i, prev)
			}
			if prev, ok := lastOffset[r.Partition]; ok && r.Offset != prev+1 {
				t.Fatalf("partition %d: offset %d after %d: gap", r.Partition, r.Offset, prev)
			}
			lastKey[r.Partition], lastOffset[r.Partition] = i, r.Offset
			fillValue(want, uint64(i))
			if string(r.Value) != string(want) {
				t.Fatalf("record %d: value differs from what was produced", i)
			}
		})
	}
	t.Logf("consumed %d records in %v", n, time.Since(start))
	if len(lastKey) != partitions {
		t.Fatalf("records landed in %d partitions, want %d", len(lastKey), partitions)
	}
	for i, ok := range seen {
		if !ok {
			t.Fatalf("record %d never consumed", i)
		}
	}
}
