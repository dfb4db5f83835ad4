package broker

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/partition"
)

// The partition side of transactions, driven without a coordinator: data
// batches go in through partition.append and markers through
// partition.appendMarker, as the WriteTxnMarkers handler writes them.

// txnRawBatch is rawBatch with the transactional attribute, as a
// transactional producer sends it.
func txnRawBatch(pid int64, epoch int16, seq int32, ts int64, values ...string) []byte {
	return withAttributes(rawBatch(pid, epoch, seq, ts, values...), partition.AttrTransactional)
}

func mustAppendTo(t *testing.T, p *partition.Partition, records []byte) int64 {
	t.Helper()
	info, _, err := p.Append(records)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return info.BaseOffset
}

func mustMarkerTo(t *testing.T, p *partition.Partition, pid int64, epoch int16, commit bool) int64 {
	t.Helper()
	info, _, err := p.AppendMarker(pid, epoch, commit, 0)
	if err != nil {
		t.Fatalf("marker for producer %d: %v", pid, err)
	}
	return info.BaseOffset
}

// fetchIsolated sends one Fetch of partition 0 at offset with the
// isolation level (0 read_uncommitted, 1 read_committed) and returns the
// partition's answer.
func fetchIsolated(t *testing.T, cl *kgo.Client, id [16]byte, offset int64, isolation int8, wait time.Duration) kmsg.FetchResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxBytes = 1 << 20
	req.IsolationLevel = isolation
	req.MaxWaitMillis = int32(wait.Milliseconds())
	req.MinBytes = 1
	rt := kmsg.NewFetchRequestTopic()
	rt.TopicID = id
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset = offset
	rp.PartitionMaxBytes = 1 << 20
	rp.CurrentLeaderEpoch = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), wait+10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Errorf("fetch: %v", err)
		return kmsg.FetchResponseTopicPartition{ErrorCode: -1}
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		t.Errorf("fetch: %v", kerr.ErrorForCode(p.ErrorCode))
	}
	return p
}

// batchOffsets returns the base offset of each whole batch in b.
func batchOffsets(b []byte) []int64 {
	var out []int64
	for len(b) >= 61 {
		size := 12 + int(binary.BigEndian.Uint32(b[8:]))
		if size > len(b) {
			break
		}
		out = append(out, int64(binary.BigEndian.Uint64(b)))
		b = b[size:]
	}
	return out
}

// listOffsetIsolated is ListOffsets for partition 0 at the isolation
// level; it returns the offset.
func listOffsetIsolated(t *testing.T, cl *kgo.Client, topic string, ts int64, isolation int8) int64 {
	t.Helper()
	return listOffsetAt(t, cl, topic, 0, ts, isolation)
}

// listOffsetAt is ListOffsets for one partition at timestamp ts (-1:
// latest) and the isolation level; it returns the offset.
func listOffsetAt(t *testing.T, cl *kgo.Client, topic string, partition int32, ts int64, isolation int8) int64 {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	req.IsolationLevel = isolation
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition = partition
	rp.Timestamp = ts
	rp.CurrentLeaderEpoch = -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("list offsets: %v", err)
	}
	p := resp.Topics[0].Partitions[0]
	if p.ErrorCode != 0 {
		t.Fatalf("list offsets %s-%d at %d, isolation %d: %v", topic, partition, ts, isolation, kerr.ErrorForCode(p.ErrorCode))
	}
	return p.Offset
}

// txnLog writes, to partition 0 of a new topic:
//
//	0-1 producer 1's transaction (later committed)
//	2   producer 2's transaction (later aborted)
//	3   a plain record
//	4   COMMIT of producer 1
//	5   ABORT of producer 2
//	6   producer 3's transaction, left open
//	7   a plain record
//
// so the high watermark is 8 and the last stable offset 6. The records
// from 6 on carry the timestamp late, the earlier ones early.
func txnLog(t *testing.T, b *Broker, cl *kgo.Client, topic string) (p *partition.Partition, id [16]byte, early, late int64) {
	t.Helper()
	id = createTopic(t, kadmFor(cl), topic, 1, nil).ID
	p = b.partition(topic, 0)
	early = time.Now().Add(-time.Minute).UnixMilli()
	// Later than the markers too, which carry the time they are written.
	late = time.Now().Add(time.Minute).UnixMilli()
	mustAppendTo(t, p, txnRawBatch(1, 0, 0, early, "a1", "a2"))
	mustAppendTo(t, p, txnRawBatch(2, 0, 0, early, "aborted"))
	mustAppendTo(t, p, rawBatch(-1, -1, -1, early, "p1"))
	mustMarkerTo(t, p, 1, 0, true)
	mustMarkerTo(t, p, 2, 0, false)
	mustAppendTo(t, p, txnRawBatch(3, 0, 0, late, "c1"))
	mustAppendTo(t, p, rawBatch(-1, -1, -1, late, "p2"))
	if hw := p.HighWatermark(); hw != 8 {
		t.Fatalf("high watermark %d, want 8", hw)
	}
	return p, id, early, late
}

// KIP-98: the last stable offset is the first offset of the earliest open
// transaction, never above the high watermark; it moves on when that
// transaction's marker lands.
func TestTxnLastStableOffset(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	p, _, _, _ := txnLog(t, b, cl, "lso")
	if got := p.LastStableOffset(); got != 6 {
		t.Fatalf("last stable offset %d with producer 3's transaction open at 6, want 6", got)
	}
	mustMarkerTo(t, p, 3, 0, true) // 8
	if got := p.LastStableOffset(); got != 9 {
		t.Fatalf("last stable offset %d once every transaction is complete, want the high watermark 9", got)
	}
}

// A read_committed fetch stops at the last stable offset and names the
// aborted transactions in what it returns, so the consumer drops producer
// 2's records; read_uncommitted reads to the high watermark and gets no
// aborted list. Both see LastStableOffset, as in Kafka.
func TestTxnFetchReadCommitted(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	_, id, _, _ := txnLog(t, b, cl, "rc")

	rc := fetchIsolated(t, cl, id, 0, 1, 0)
	if rc.HighWatermark != 8 || rc.LastStableOffset != 6 {
		t.Fatalf("read_committed: high watermark %d, last stable %d; want 8 and 6", rc.HighWatermark, rc.LastStableOffset)
	}
	if got, want := batchOffsets(rc.RecordBatches), []int64{0, 2, 3, 4, 5}; !slices.Equal(got, want) {
		t.Fatalf("read_committed returned batches at %v, want %v (nothing of the open transaction)", got, want)
	}
	if len(rc.AbortedTransactions) != 1 || rc.AbortedTransactions[0].ProducerID != 2 || rc.AbortedTransactions[0].FirstOffset != 2 {
		t.Fatalf("aborted transactions %+v, want producer 2 from offset 2", rc.AbortedTransactions)
	}
	// A read_committed fetch past the abort needs no entry for it.
	if later := fetchIsolated(t, cl, id, 6, 1, 0); len(later.RecordBatches) != 0 || len(later.AbortedTransactions) != 0 {
		t.Fatalf("read_committed at the last stable offset: %d bytes, aborted %+v", len(later.RecordBatches), later.AbortedTransactions)
	}

	ru := fetchIsolated(t, cl, id, 0, 0, 0)
	if ru.HighWatermark != 8 || ru.LastStableOffset != 6 {
		t.Fatalf("read_uncommitted: high watermark %d, last stable %d; want 8 and 6", ru.HighWatermark, ru.LastStableOffset)
	}
	if got, want := batchOffsets(ru.RecordBatches), []int64{0, 2, 3, 4, 5, 6, 7}; !slices.Equal(got, want) {
		t.Fatalf("read_uncommitted returned batches at %v, want %v", got, want)
	}
	if ru.AbortedTransactions != nil {
		t.Fatalf("read_uncommitted got aborted transactions %+v", ru.AbortedTransactions)
	}
}

// What a franz-go consumer sees: under read_committed never the aborted
// record, and nothing past the open transaction until it commits; under
// read_uncommitted everything.
func TestTxnConsumerIsolation(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	p, _, _, _ := txnLog(t, b, cl, "iso")

	consume := func(level kgo.IsolationLevel, want int) []string {
		t.Helper()
		c := testClient(t, b, kgo.ConsumeTopics("iso"), kgo.FetchIsolationLevel(level), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var got []string
		for len(got) < want && ctx.Err() == nil {
			c.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		}
		return got
	}
	if got, want := consume(kgo.ReadUncommitted(), 6), []string{"a1", "a2", "aborted", "p1", "c1", "p2"}; !slices.Equal(got, want) {
		t.Fatalf("read_uncommitted consumed %q, want %q", got, want)
	}
	mustMarkerTo(t, p, 3, 0, true)
	mustAppendTo(t, p, rawBatch(-1, -1, -1, time.Now().UnixMilli(), "p3"))
	if got, want := consume(kgo.ReadCommitted(), 6), []string{"a1", "a2", "p1", "c1", "p2", "p3"}; !slices.Equal(got, want) {
		t.Fatalf("read_committed consumed %q, want %q", got, want)
	}
}

// A read_committed fetch parked at the last stable offset wakes when the
// marker of the transaction holding it lands, not at its wait's end.
func TestTxnFetchWaitsForLastStableOffset(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	p, id, _, _ := txnLog(t, b, cl, "park")

	got := make(chan kmsg.FetchResponseTopicPartition, 1)
	go func() { got <- fetchIsolated(t, cl, id, 6, 1, 20*time.Second) }()
	waitFor(t, 10*time.Second, "the fetch to park", func() bool {
		return p.Waiters() > 0
	})
	mustMarkerTo(t, p, 3, 0, true) // 8
	r := <-got
	if r.LastStableOffset != 9 {
		t.Fatalf("last stable offset %d after the commit, want 9", r.LastStableOffset)
	}
	if got, want := batchOffsets(r.RecordBatches), []int64{6, 7, 8}; !slices.Equal(got, want) {
		t.Fatalf("woken fetch returned batches at %v, want %v", got, want)
	}
}

// ListOffsets honours the isolation level (Kafka's
// Partition.fetchOffsetForTimestamp): latest is the last stable offset
// under read_committed and the high watermark otherwise, and no lookup
// under read_committed returns an offset at or above the last stable one.
func TestTxnListOffsetsIsolation(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	_, _, _, late := txnLog(t, b, cl, "lo")
	for _, c := range []struct {
		name      string
		ts        int64
		isolation int8
		want      int64
	}{
		{"latest, read_uncommitted", -1, 0, 8},
		{"latest, read_committed", -1, 1, 6},
		{"timestamp of the open transaction, read_uncommitted", late, 0, 6},
		{"timestamp of the open transaction, read_committed", late, 1, -1},
		{"max timestamp, read_uncommitted", -3, 0, 6},
		{"max timestamp, read_committed", -3, 1, -1},
		{"earliest, read_committed", -2, 1, 0},
	} {
		if got := listOffsetIsolated(t, cl, "lo", c.ts, c.isolation); got != c.want {
			t.Errorf("%s: offset %d, want %d", c.name, got, c.want)
		}
	}
}
