package loadtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/loadtest"
	"strata/loadtest/loadtesttest"
)

// When a partition keeps answering KAFKA_STORAGE_ERROR (its data is out of
// reach), a verifying consumer counts its unread records, up to the end
// offsets, as missing and stops, instead of waiting for them until
// --duration.
func TestVerifyCountsUnreadablePartitionAsMissing(t *testing.T) {
	c := newCluster(t, kfake.NumBrokers(2))
	bootstrap := c.ListenAddrs()[0]
	topic := loadtesttest.Topic(t)
	p, err := loadtest.Produce(t.Context(), loadtest.ProduceConfig{
		Bootstrap: []string{bootstrap}, Topic: topic, Records: 400, Size: 16,
		Idempotent: true, Create: true, Partitions: 2, Verify: true, Seed: 8,
	})
	if err != nil || p.Err() != nil {
		t.Fatalf("produce: %v %v", err, p.Err())
	}
	// Partition 1 alone on its broker, whose fetches then all fail.
	bad := c.LeaderFor(topic, 1)
	if c.LeaderFor(topic, 0) == bad {
		other := int32(0)
		if bad == 0 {
			other = 1
		}
		if err := c.MoveTopicPartition(topic, 0, other); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	ends, err := kadm.NewClient(cl).ListEndOffsets(t.Context(), topic)
	cl.Close()
	if err != nil {
		t.Fatal(err)
	}
	end1, _ := ends.Lookup(topic, 1)
	if end1.Offset == 0 {
		t.Fatal("partition 1 is empty")
	}

	c.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if c.CurrentNode() != bad {
			return nil, nil, false
		}
		r := req.(*kmsg.FetchRequest)
		resp := r.ResponseKind().(*kmsg.FetchResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewFetchResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewFetchResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.KafkaStorageError.Code
				sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	got, err := loadtest.Consume(ctx, loadtest.ConsumeConfig{
		Bootstrap:       []string{bootstrap},
		Topic:           topic,
		Duration:        time.Hour, // far beyond the test: it must stop by itself
		Verify:          true,
		Seed:            8,
		UnreadableAfter: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the verifying consumer waited for the unreadable partition instead of stopping")
	}
	v := got.Verify
	var p0, p1 loadtest.PartitionReport
	for _, pr := range v.Partitions {
		switch pr.Partition {
		case 0:
			p0 = pr
		case 1:
			p1 = pr
		}
	}
	if p1.Missing != end1.Offset || p1.Records != 0 {
		t.Errorf("unreadable partition: %+v, want its %d unread records missing", p1, end1.Offset)
	}
	if p0.Missing != 0 || p0.Records == 0 || p0.Corrupt != 0 {
		t.Errorf("readable partition: %+v, want all read", p0)
	}
	if got.Err() == nil {
		t.Error("verification passed with a partition unread")
	}
}
