package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/partition"
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
		if got := partition.AlterOutcome(c.err); got != c.want {
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
	key := replica.Key{Topic: "kip903", Index: 0}
	c.waitFor("the follower to follow", 10*time.Second, func() bool {
		_, ok := c.node(follower).node.Replicas().Following(key)
		return ok
	})
	c.node(follower).node.Replicas().Unfollow(key)
	produceN(t, c.client(kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()), "kip903", 0, "r", 5)
	lp := c.node(st.Leader).partition("kip903", 0)
	hw0 := lp.HighWatermark()
	if end := lp.Log().EndOffset(); hw0 >= end {
		t.Fatalf("high watermark %d already at the log end %d: the test cannot tell", hw0, end)
	}
	registered := c.node(follower).node.BrokerEpoch()

	fetch := func(epoch int64) int16 {
		req := kmsg.NewPtrFetchRequest()
		req.ReplicaID = follower
		req.ReplicaState.ID, req.ReplicaState.Epoch = follower, epoch
		req.MaxWaitMillis = 10
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic, rt.TopicID = "kip903", c.any().meta.State().Topics["kip903"].ID
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.LastFetchedEpoch, rp.PartitionMaxBytes = 0, st.LeaderEpoch, -1, 1<<20
		rp.FetchOffset = lp.Log().EndOffset()
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
	if hw := lp.HighWatermark(); hw != hw0 {
		t.Fatalf("a stale incarnation's fetch moved the high watermark from %d to %d", hw0, hw)
	}
	// The registered incarnation's word is taken.
	if code := fetch(registered); code != 0 {
		t.Fatalf("fetch at the registered broker epoch: %v", kerr.ErrorForCode(code))
	}
	if hw, end := lp.HighWatermark(), lp.Log().EndOffset(); hw != end {
		t.Fatalf("high watermark %d after the follower fetched at the log end %d", hw, end)
	}
}

// listRaw asks broker id directly (no client retries) for the offset of
// topic's partition 0 at ts, and returns it and the error code.
func listRaw(t *testing.T, cl *kgo.Client, id int32, topic string, ts int64) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = 0, ts, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kresp, err := cl.Broker(int(id)).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	sp := kresp.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
	return sp.Offset, sp.ErrorCode
}

// roleTest is a single node whose partition "hw"-0 holds five records and
// whose role the test then sets by hand, as the metadata would: a
// follower of broker 99 (which does not exist: nothing is fetched), then
// a leader again.
func roleTest(t *testing.T) (*Broker, *kgo.Client, *partition.Partition, func(leader int32, replicas []int32)) {
	b := testBroker(t, "")
	cl := testClient(t, b, kgo.DisableIdempotentWrite())
	createTopic(t, kadm.NewClient(cl), "hw", 1, nil)
	produceN(t, cl, "hw", 0, "r", 5)
	p := b.partition("hw", 0)
	set := func(leader int32, replicas []int32) {
		p.SetRole(partition.Role{
			LeaderEpoch: p.LeaderEpoch() + 1, Leader: leader,
			Replicas: replicas, ISR: replicas, PartitionEpoch: p.PartitionEpoch() + 1,
		})
		if leads := p.Leading(); leads != (leader == b.cfg.NodeID) {
			t.Fatalf("leading %v after setRole with leader %d", leads, leader)
		}
	}
	set(99, []int32{b.cfg.NodeID, 99})
	if hw := p.HighWatermark(); hw != 5 {
		t.Fatalf("follower's high watermark %d, want 5", hw)
	}
	return b, cl, p, set
}

// A node that becomes leader caps its high watermark at its log end: the
// offsets it will assign above its log are not committed, and an acks=all
// produce written there must wait for the ISR.
func TestNewLeaderCapsItsHighWatermarkAtItsLogEnd(t *testing.T) {
	b, cl, p, set := roleTest(t)
	// A truncation that left the high watermark above the log (as every
	// follower truncation did before followerLog).
	if _, err := p.Log().TruncateTo(3); err != nil {
		t.Fatal(err)
	}
	set(b.cfg.NodeID, []int32{b.cfg.NodeID, 99})
	if hw, end := p.HighWatermark(), p.Log().EndOffset(); hw > end {
		t.Fatalf("new leader's high watermark %d is above its log end %d", hw, end)
	}
	// The record written at 3 is not committed until follower 99 has it.
	if code := rawProduceTo(t, cl, b.cfg.NodeID, "hw", 200*time.Millisecond); code != kerr.RequestTimedOut.Code {
		t.Fatalf("acks=all with follower 99 not fetching: %v, want REQUEST_TIMED_OUT", kerr.ErrorForCode(code))
	}
}

// While a new leader's high watermark is below the start of its epoch it
// does not know how far its predecessor committed: ListOffsets latest is
// OFFSET_NOT_AVAILABLE (retriable) rather than an offset below one the
// previous leader may have served, as in Kafka.
func TestNewLeaderBelowItsEpochStartAnswersOffsetNotAvailable(t *testing.T) {
	b, cl, p, set := roleTest(t)
	self := b.cfg.NodeID
	p.FollowerFetched(2) // the old leader's last word: committed up to 2
	set(self, []int32{self, 99})
	if _, code := listRaw(t, cl, self, "hw", -1); code != kerr.OffsetNotAvailable.Code {
		t.Fatalf("latest at high watermark %d below the epoch start 5: %v, want OFFSET_NOT_AVAILABLE", p.HighWatermark(), kerr.ErrorForCode(code))
	}
	// A timestamp found below the high watermark is answered.
	if off, code := listRaw(t, cl, self, "hw", 0); code != 0 || off != 0 {
		t.Fatalf("timestamp 0: offset %d, %v", off, kerr.ErrorForCode(code))
	}
	if _, code := listRaw(t, cl, self, "hw", -2); code != 0 {
		t.Fatalf("earliest: %v", kerr.ErrorForCode(code))
	}
	// Once the follower shows it has the whole epoch start, the high
	// watermark reaches it and latest is answered.
	if err := p.ReplicaFetched(99, -1, 5); err != nil {
		t.Fatal(err)
	}
	if off, code := listRaw(t, cl, self, "hw", -1); code != 0 || off != 5 {
		t.Fatalf("latest after the follower caught up: offset %d, %v, want 5", off, kerr.ErrorForCode(code))
	}
}

// rawProduceTo sends one acks=all record to broker id and returns the
// partition's error code.
func rawProduceTo(t *testing.T, cl *kgo.Client, id int32, topic string, timeout time.Duration) int16 {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = int32(timeout / time.Millisecond)
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = rawBatch(-1, -1, -1, time.Now().UnixMilli(), "x")
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer cancel()
	kresp, err := cl.Broker(int(id)).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return kresp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
}

// KIP-903 at the controller: AlterPartition v3 names each member's broker
// epoch, and a joiner registered at another epoch is INELIGIBLE_REPLICA,
// whatever the leader's (possibly stale) metadata said.
func TestClusterAlterPartitionRefusesAJoinerAtAnotherBrokerEpoch(t *testing.T) {
	c := testCluster(t, 3, func(cfg *Config) { cfg.ReplicaLagTimeMax = time.Minute })
	c.createTopicOn("v3", []int32{1, 2})
	st := c.partitionState("v3", 0)
	follower := int32(3 - st.Leader) // of 1 and 2, the one not leading
	key := replica.Key{Topic: "v3", Index: 0}
	c.waitFor("the follower to follow", 10*time.Second, func() bool {
		_, ok := c.node(follower).node.Replicas().Following(key)
		return ok
	})
	c.node(follower).node.Replicas().Unfollow(key)
	// A record the follower does not get keeps it from rejoining by
	// itself once it is out.
	produceN(t, c.client(kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()), "v3", 0, "r", 1)
	leaderEpoch := c.node(st.Leader).node.BrokerEpoch()
	registered := c.node(follower).node.BrokerEpoch()
	epochOf := map[int32]int64{st.Leader: leaderEpoch, follower: registered}
	partitionEpoch := st.PartitionEpoch
	alter := func(isr []int32, epochOf map[int32]int64) int16 {
		t.Helper()
		req := kmsg.NewPtrAlterPartitionRequest()
		req.BrokerID, req.BrokerEpoch = st.Leader, leaderEpoch
		rt := kmsg.NewAlterPartitionRequestTopic()
		rt.TopicID = c.any().meta.State().Topics["v3"].ID
		rp := kmsg.NewAlterPartitionRequestTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.PartitionEpoch, rp.NewISR = 0, st.LeaderEpoch, partitionEpoch, isr
		for _, id := range isr {
			bs := kmsg.NewAlterPartitionRequestTopicPartitionNewEpochISR()
			bs.BrokerID, bs.BrokerEpoch = id, epochOf[id]
			rp.NewEpochISR = append(rp.NewEpochISR, bs)
		}
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kresp, err := c.client().Broker(int(c.any().meta.ControllerID())).Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		resp := kresp.(*kmsg.AlterPartitionResponse)
		if resp.Version < 3 {
			t.Fatalf("AlterPartition v%d names no broker epochs", resp.Version)
		}
		if resp.ErrorCode != 0 {
			return resp.ErrorCode
		}
		op := resp.Topics[0].Partitions[0]
		if op.ErrorCode == 0 {
			partitionEpoch = op.PartitionEpoch
		}
		return op.ErrorCode
	}
	if code := alter([]int32{st.Leader}, epochOf); code != 0 {
		t.Fatalf("shrink to the leader: %v", kerr.ErrorForCode(code))
	}
	stale := map[int32]int64{st.Leader: leaderEpoch, follower: registered - 1}
	if code := alter([]int32{1, 2}, stale); code != kerr.IneligibleReplica.Code {
		t.Fatalf("joiner at a previous broker epoch: %v, want INELIGIBLE_REPLICA", kerr.ErrorForCode(code))
	}
	if code := alter([]int32{1, 2}, epochOf); code != 0 {
		t.Fatalf("joiner at its registered broker epoch: %v", kerr.ErrorForCode(code))
	}
}

// A leader slow to open a burst of new partitions (a topic with many of
// them, the internal topics at start) goes on serving its followers the
// partitions it already leads: a follower's fetch that names a partition
// the leader has not opened yet does not wait for the leader's reconcile,
// which would hold the whole fetch and let the ISR of every partition it
// names fall behind. Found as an ISR shrink, and acks=all answered
// NOT_ENOUGH_REPLICAS_AFTER_APPEND, on a loaded machine right after start.
func TestClusterFollowerFetchDoesNotWaitForTheLeadersReconcile(t *testing.T) {
	c := testCluster(t, 3)
	ctrl := c.any().meta.ControllerID()
	leader := int32(1)
	if leader == ctrl {
		leader = 2
	}
	var replicas []int32
	replicas = append(replicas, leader)
	for id := int32(1); id <= 3; id++ {
		if id != leader {
			replicas = append(replicas, id)
		}
	}
	c.createTopicOn("served", replicas)
	c.waitFor("the ISR to be full", 10*time.Second, func() bool { return len(c.partitionState("served", 0).ISR) == 3 })

	// The leader's reconcile is held, as a slow one would be; its
	// followers open the new partition and fetch it alongside the other.
	b := c.node(leader)
	release := b.node.HoldReconcile()
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			release()
		}
	}
	defer unlock()
	c.sendCreateTopicOn("new", replicas)
	c.waitFor("the followers to follow the new partition", 10*time.Second, func() bool {
		for _, id := range replicas[1:] {
			if l, ok := c.node(id).node.Replicas().Following(replica.Key{Topic: "new", Index: 0}); !ok || l != leader {
				return false
			}
		}
		return true
	})
	if b.partition("new", 0) != nil {
		t.Fatal("the leader opened the new partition with its reconcile held")
	}

	for i := range 5 {
		if code := c.rawProduce(leader, "served", -1, 3*time.Second); code != 0 {
			t.Fatalf("acks=all %d to a partition the leader serves, while it has not opened another: %v", i, kerr.ErrorForCode(code))
		}
	}
	unlock()
	c.waitFor("the leader to lead the new partition", 10*time.Second, func() bool {
		p := b.partition("new", 0)
		return p != nil && p.Leading()
	})
	if code := c.rawProduce(leader, "new", -1, 5*time.Second); code != 0 {
		t.Fatalf("acks=all to the new partition once opened: %v", kerr.ErrorForCode(code))
	}
}
