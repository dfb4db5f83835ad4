package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tier/objstore"
)

// deleteRecords calls DeleteRecords for one partition and returns its low
// watermark.
func deleteRecords(t *testing.T, adm *kadm.Client, topic string, partition int32, offset int64) (int64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var at kadm.Offsets
	at.Add(kadm.Offset{Topic: topic, Partition: partition, At: offset, LeaderEpoch: -1})
	resp, err := adm.DeleteRecords(ctx, at)
	if err != nil {
		return -1, err
	}
	r, ok := resp.Lookup(topic, partition)
	if !ok {
		t.Fatalf("no answer for %s-%d", topic, partition)
	}
	return r.LowWatermark, r.Err
}

// firstOffset is where a consumer from the earliest offset starts reading.
func firstOffset(t *testing.T, b *Broker, topic string) int64 {
	t.Helper()
	cl := testClient(t, b, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consume %s from the start: %v", topic, err)
		}
		if recs := fs.Records(); len(recs) > 0 {
			return recs[0].Offset
		}
	}
}

func startOffset(t *testing.T, adm *kadm.Client, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := starts.Lookup(topic, 0)
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	return o.Offset
}

func TestDeleteRecordsMovesTheLogStart(t *testing.T) {
	dir := t.TempDir()
	b := testBroker(t, dir)
	adm := testAdmin(t, b)
	createTopic(t, adm, "d", 1, map[string]*string{"segment.bytes": ptr("2048")})
	produceKeyed(t, b, "d", 100, 100)

	low, err := deleteRecords(t, adm, "d", 0, 40)
	if err != nil || low != 40 {
		t.Fatalf("DeleteRecords(40): low watermark %d, %v; want 40", low, err)
	}
	if got := startOffset(t, adm, "d"); got != 40 {
		t.Errorf("ListOffsets earliest %d, want 40", got)
	}
	if got := firstOffset(t, b, "d"); got != 40 {
		t.Errorf("a consumer from the start begins at %d, want 40", got)
	}
	// Lower: nothing moves. Above the high watermark: refused. -1: the
	// high watermark.
	if low, err := deleteRecords(t, adm, "d", 0, 10); err != nil || low != 40 {
		t.Errorf("DeleteRecords(10): %d, %v; want 40", low, err)
	}
	if _, err := deleteRecords(t, adm, "d", 0, 101); !errors.Is(err, kerr.OffsetOutOfRange) {
		t.Errorf("DeleteRecords(101): %v, want OFFSET_OUT_OF_RANGE", err)
	}
	if _, err := deleteRecords(t, adm, "nope", 0, 1); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Errorf("DeleteRecords on an unknown topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = testBroker(t, dir)
	adm = testAdmin(t, b)
	if got := startOffset(t, adm, "d"); got != 40 {
		t.Errorf("after a restart: ListOffsets earliest %d, want 40", got)
	}
	if low, err := deleteRecords(t, adm, "d", 0, -1); err != nil || low != 100 {
		t.Errorf("DeleteRecords(-1): %d, %v; want the high watermark 100", low, err)
	}
}

func TestDeleteRecordsReachesTheBucket(t *testing.T) {
	store, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := tieredBroker(t, "", store)
	adm := testAdmin(t, b)
	createTopic(t, adm, "db", 1, map[string]*string{"segment.bytes": ptr("4096"), "local.retention.bytes": ptr("4096")})
	produceKeyed(t, b, "db", 600, 100, kgo.ProducerBatchMaxBytes(1500))
	waitUploaded(t, b, "db", 1)
	p := b.partition("db", 0)
	if p.Log().StartOffset() == 0 {
		t.Fatal("nothing left the local log: the test needs history only in the bucket")
	}
	// Below the local log start: only the bucket holds it.
	target := p.Log().StartOffset() / 2
	low, err := deleteRecords(t, adm, "db", 0, target)
	if err != nil || low != target {
		t.Fatalf("DeleteRecords(%d): low watermark %d, %v", target, low, err)
	}
	if got := startOffset(t, adm, "db"); got != target {
		t.Errorf("ListOffsets earliest %d, want %d", got, target)
	}
	if got := firstOffset(t, b, "db"); got != target {
		t.Errorf("a consumer from the start begins at %d, want %d", got, target)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := b.tier.Refresh(ctx, p.BucketName())
	if err != nil {
		t.Fatal(err)
	}
	if m.LogStartOffset != target {
		t.Errorf("the bucket's manifest starts at %d, want %d", m.LogStartOffset, target)
	}
}

func TestClusterFollowersTakeTheDeletedStart(t *testing.T) {
	c := testCluster(t, 3)
	c.createTopic("df", 1, 3, nil)
	cl := c.client(kgo.RequiredAcks(kgo.AllISRAcks()))
	produceN(t, cl, "df", 0, "v", 50)
	adm := kadm.NewClient(c.client())
	if low, err := deleteRecords(t, adm, "df", 0, 30); err != nil || low != 30 {
		t.Fatalf("DeleteRecords(30): %d, %v", low, err)
	}
	st := c.partitionState("df", 0)
	for _, id := range st.Replicas {
		p := c.node(id).partition("df", 0)
		c.waitFor("every replica's log to start at 30", 10*time.Second, func() bool { return p.Log().StartOffset() == 30 })
	}
	// The new leader after a failover serves from 30 too.
	c.stop(st.Leader)
	c.waitFor("a new leader", 10*time.Second, func() bool {
		now := c.partitionState("df", 0)
		return now.Leader >= 0 && now.Leader != st.Leader && c.node(now.Leader).partition("df", 0).Leading()
	})
	// A client's metadata may still name the dead leader for a moment:
	// ask until a live leader answers.
	c.waitFor("the new leader's log start", 15*time.Second, func() bool {
		adm := kadm.NewClient(c.client())
		defer adm.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		starts, err := adm.ListStartOffsets(ctx, "df")
		if err != nil {
			return false
		}
		o, _ := starts.Lookup("df", 0)
		if o.Err != nil {
			return false
		}
		if o.Offset != 30 {
			t.Fatalf("after the failover the log starts at %d, want 30", o.Offset)
		}
		return true
	})
}
