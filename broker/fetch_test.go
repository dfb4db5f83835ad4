package broker

import (
	"context"
	"encoding/binary"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetchOnce sends one Fetch for partition 0 of the topic and returns that
// partition's answer.
func fetchOnce(t *testing.T, cl *kgo.Client, id [16]byte, offset int64, maxBytes, partMaxBytes int32) kmsg.FetchResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.MaxBytes = maxBytes
	req.ReplicaID = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.TopicID = id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset = offset
	rp.PartitionMaxBytes = partMaxBytes
	rp.CurrentLeaderEpoch = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("fetch: error %d, %d topics", resp.ErrorCode, len(resp.Topics))
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		t.Fatalf("fetch: partition error %d", p.ErrorCode)
	}
	return p
}

// batchCount counts the whole record batches in b.
func batchCount(b []byte) int {
	n := 0
	for len(b) >= 12 {
		size := 12 + int(binary.BigEndian.Uint32(b[8:]))
		if size > len(b) {
			break
		}
		b = b[size:]
		n++
	}
	return n
}

// fetchTopic creates a one-partition topic holding n batches of one
// record of size bytes each and returns its id.
func fetchTopic(t *testing.T, b *Broker, cl *kgo.Client, name string, n, size int) [16]byte {
	t.Helper()
	resp := createTopic(t, kadmFor(cl), name, 1, nil)
	v := strings.Repeat("x", size)
	for i := 0; i < n; i++ {
		if pr := produceRaw(t, cl, name, rawBatch(-1, -1, -1, time.Now().UnixMilli(), v)); pr.ErrorCode != 0 {
			t.Fatalf("produce: error %d", pr.ErrorCode)
		}
	}
	return resp.ID
}

// A response limit of 0 (or less) means "the first batch only", as in
// Kafka (KIP-74 keeps that one batch whole), not "no limit".
func TestFetchMaxBytesZeroIsFirstBatchOnly(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	id := fetchTopic(t, b, cl, "zero", 5, 1000)
	for _, maxBytes := range []int32{0, -1} {
		p := fetchOnce(t, cl, id, 0, maxBytes, 1<<20)
		if n := batchCount(p.RecordBatches); n != 1 {
			t.Errorf("MaxBytes %d: %d batches, want the first only", maxBytes, n)
		}
	}
}

// The broker caps every response at its own fetch.max.bytes whatever the
// client asks for; the first batch still goes whole (KIP-74).
func TestFetchCappedByBroker(t *testing.T) {
	b := testBroker(t, "", func(c *Config) { c.FetchMaxBytes = 64 << 10 })
	cl := testClient(t, b)
	id := fetchTopic(t, b, cl, "capped", 100, 4000) // about 400 KB
	p := fetchOnce(t, cl, id, 0, 1<<30, 1<<30)
	if got := len(p.RecordBatches); got == 0 || got > 64<<10 {
		t.Errorf("fetch asking for 1 GiB returned %d bytes, want at most the broker's 64 KiB", got)
	}
	// One batch larger than the cap still comes back whole, alone.
	big := fetchTopic(t, b, cl, "capped-big", 2, 100<<10)
	p = fetchOnce(t, cl, big, 0, 1<<30, 1<<30)
	if n := batchCount(p.RecordBatches); n != 1 || len(p.RecordBatches) < 100<<10 {
		t.Errorf("oversized first batch: %d batches in %d bytes, want one whole batch", n, len(p.RecordBatches))
	}
}

// A fetch with a large limit that finds little data allocates about what
// it found, not its limit.
func TestFetchMemoryFollowsData(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	id := fetchTopic(t, b, cl, "small", 3, 100)
	fetchOnce(t, cl, id, 0, 1<<30, 1<<30)  // warm the connection and the client
	for _, offset := range []int64{0, 3} { // some data, then none
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		p := fetchOnce(t, cl, id, offset, 1<<30, 1<<30)
		runtime.ReadMemStats(&after)
		if want := int(3 - offset); batchCount(p.RecordBatches) != want {
			t.Fatalf("offset %d: %d batches, want %d", offset, batchCount(p.RecordBatches), want)
		}
		// Client and broker share this process; both together should
		// stay far below the 55 MiB default cap for under a kilobyte of
		// records.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
			t.Errorf("offset %d: fetch of %d bytes allocated %d MiB", offset, len(p.RecordBatches), alloc>>20)
		}
	}
}
