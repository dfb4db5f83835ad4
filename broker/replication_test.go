package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/replica"
	"strata/meta"
)

// An AlterPartition answer is read as Kafka's
// Partition.handleAlterPartitionError reads it: only INELIGIBLE_REPLICA and
// OPERATION_NOT_ATTEMPTED drop the change; a stale epoch waits for the
// metadata (an earlier attempt whose answer was lost may have committed);
// a lost answer, or raft losing its leadership mid-commit, is asked again.
func TestAlterPartitionOutcome(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want replica.Outcome
	}{
		{"ineligible replica (local)", fmt.Errorf("x: %w", meta.ErrIneligibleReplica), replica.NotApplied},
		{"ineligible replica (controller)", kerr.IneligibleReplica, replica.NotApplied},
		{"operation not attempted", kerr.OperationNotAttempted, replica.NotApplied},
		{"stale partition epoch (local)", fmt.Errorf("x: %w", meta.ErrInvalidUpdateVersion), replica.AwaitMetadata},
		{"stale partition epoch (controller)", kerr.InvalidUpdateVersion, replica.AwaitMetadata},
		{"fenced leader epoch", fmt.Errorf("x: %w", meta.ErrFencedLeaderEpoch), replica.AwaitMetadata},
		{"unknown topic", kerr.UnknownTopicID, replica.AwaitMetadata},
		{"raft leadership lost mid-commit", fmt.Errorf("%w: %w: leadership lost", meta.ErrNotController, meta.ErrOutcomeUnknown), replica.Unknown},
		{"controller moved", kerr.NotController, replica.Unknown},
		{"timeout", fmt.Errorf("meta: %w: %w", meta.ErrOutcomeUnknown, context.DeadlineExceeded), replica.Unknown},
		{"no answer", context.DeadlineExceeded, replica.Unknown},
		{"stale broker epoch (this node re-registers)", kerr.StaleBrokerEpoch, replica.Unknown},
		{"anything else", errors.New("connection reset"), replica.Unknown},
	} {
		if got := alterOutcome(c.err); got != c.want {
			t.Errorf("%s: outcome %d, want %d", c.name, got, c.want)
		}
	}
}

// KIP-903: a follower fetch that names an older incarnation than the one
// registered is STALE_BROKER_EPOCH and does not move the high watermark
// (nor, by the same refusal, make the follower eligible for the ISR): a
// replica that lost its disk and restarted is not vouched for by its
// previous life, nor is a paused previous life heard for the new one.
func TestClusterFollowerFetchAtStaleBrokerEpochIsRefused(t *testing.T) {
	c := testCluster(t, 2, func(cfg *Config) { cfg.ReplicaLagTimeMax = time.Minute })
	c.createTopic("kip903", 1, 2, nil)
	st := c.partitionState("kip903", 0)
	var follower int32
	for _, id := range st.Replicas {
		if id != st.Leader {
			follower = id
		}
	}
	// The follower stops fetching, so the leader's high watermark waits
	// for it; records written with acks=1 stay above it.
	c.node(follower).replicas.Unfollow(replica.Key{Topic: "kip903", Index: 0})
	produceN(t, c.client(kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()), "kip903", 0, "r", 5)
	lp := c.node(st.Leader).partition("kip903", 0)
	hw0 := lp.highWatermark()
	if end := lp.log.EndOffset(); hw0 >= end {
		t.Fatalf("high watermark %d already at the log end %d: the test cannot tell", hw0, end)
	}
	registered := c.node(follower).cluster.brokerEpoch()

	fetch := func(epoch int64) int16 {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = follower
		req.ReplicaState.ID, req.ReplicaState.Epoch = follower, epoch
		req.MaxWaitMillis = 10
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = "kip903", c.any().meta.State().Topics["kip903"].ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.LastFetchedEpoch, rp.PartitionMaxBytes = 0, st.LeaderEpoch, -1, 1<<20
		rp.FetchOffset = lp.log.EndOffset()
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kresp, err := c.client().Broker(int(st.Leader)).Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		resp := kresp.(*kmsg.FetchResponse)
		if resp.Version < 15 {
			t.Fatalf("fetch v%d carries no ReplicaState", resp.Version)
		}
		return resp.Topics[0].Partitions[0].ErrorCode
	}
	if code := fetch(registered - 1); code != kerr.StaleBrokerEpoch.Code {
		t.Fatalf("fetch at the previous broker epoch: %v, want STALE_BROKER_EPOCH", kerr.ErrorForCode(code))
	}
	if hw := lp.highWatermark(); hw != hw0 {
		t.Fatalf("a stale incarnation's fetch moved the high watermark from %d to %d", hw0, hw)
	}
	// The registered incarnation's word is taken.
	if code := fetch(registered); code != 0 {
		t.Fatalf("fetch at the registered broker epoch: %v", kerr.ErrorForCode(code))
	}
	if hw, end := lp.highWatermark(), lp.log.EndOffset(); hw != end {
		t.Fatalf("high watermark %d after the follower fetched at the log end %d", hw, end)
	}
}
