package broker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/internal/loopback"
	"strata/meta"
)

// describeQuorum sends DescribeQuorum at version v for topic/partition to
// the broker at addr, and no other.
func describeQuorum(t *testing.T, addr string, v int16, topic string, partition int32) *kmsg.DescribeQuorumResponse {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrDescribeQuorumRequest()
	req.Version = v
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewDescribeQuorumRequestTopicPartition()
	rp.Partition = partition
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Sent to this seed alone, at the version set: a client would route
	// it and pick the version itself.
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil {
		t.Fatalf("describe quorum v%d: %v", v, err)
	}
	return resp
}

// onlyPartition returns the one partition of a DescribeQuorum answer.
func onlyPartition(t *testing.T, resp *kmsg.DescribeQuorumResponse) kmsg.DescribeQuorumResponseTopicPartition {
	t.Helper()
	if resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("response: error %d, topics %+v", resp.ErrorCode, resp.Topics)
	}
	return resp.Topics[0].Partitions[0]
}

// TestDescribeQuorumOneNode: a single node is a one-voter quorum (DESIGN
// section 4) and says so in Kafka's terms (KIP-595, KIP-836): it leads
// the metadata log, in a term of at least 1, with its own log end at or
// past the committed index, and no observers. ApiVersions advertises the
// versions served.
func TestDescribeQuorumOneNode(t *testing.T) {
	b := testBroker(t, "", func(c *Config) { c.NodeID = 4 })
	createTopic(t, testAdmin(t, b), "q", 1, nil) // something in the log past the start

	served := false
	for _, k := range probeApiVersions(t, b.Addr().String()).ApiKeys {
		if k.ApiKey == int16(kmsg.DescribeQuorum) {
			served = k.MinVersion == 0 && k.MaxVersion == 2
		}
	}
	if !served {
		t.Error("ApiVersions does not advertise DescribeQuorum v0-2")
	}

	for v := int16(0); v <= 2; v++ {
		p := onlyPartition(t, describeQuorum(t, b.Addr().String(), v, "__cluster_metadata", 0))
		if p.ErrorCode != 0 || p.LeaderID != 4 || p.LeaderEpoch < 1 || p.HighWatermark < 1 {
			t.Errorf("v%d: error %d, leader %d, epoch %d, high watermark %d", v, p.ErrorCode, p.LeaderID, p.LeaderEpoch, p.HighWatermark)
		}
		if len(p.CurrentVoters) != 1 || p.CurrentVoters[0].ReplicaID != 4 || p.CurrentVoters[0].LogEndOffset < p.HighWatermark {
			t.Errorf("v%d: voters %+v (high watermark %d)", v, p.CurrentVoters, p.HighWatermark)
		}
		if len(p.Observers) != 0 {
			t.Errorf("v%d: observers %+v", v, p.Observers)
		}
	}
}

// TestDescribeQuorumUnknownPartition: the metadata log is partition 0 of
// __cluster_metadata; anything else is UNKNOWN_TOPIC_OR_PARTITION, as
// Kafka answers, not a crash or an empty success.
func TestDescribeQuorumUnknownPartition(t *testing.T) {
	b := testBroker(t, "")
	for _, tp := range []struct {
		topic     string
		partition int32
	}{{"__cluster_metadata", 1}, {"orders", 0}} {
		resp := describeQuorum(t, b.Addr().String(), 1, tp.topic, tp.partition)
		p := onlyPartition(t, resp)
		if p.ErrorCode != kerr.UnknownTopicOrPartition.Code || resp.Topics[0].Topic != tp.topic || p.Partition != tp.partition {
			t.Errorf("%s/%d: %+v", tp.topic, tp.partition, resp.Topics)
		}
	}
}

// TestDescribeQuorumThreeVoters: in a three-voter quorum every node names
// the same leader and the same three voters; each knows its own log end
// (raft does not tell a node its peers' progress, so theirs are -1).
func TestDescribeQuorumThreeVoters(t *testing.T) {
	var voters []meta.Voter
	for i, addr := range loopback.Addrs(t, 3) {
		voters = append(voters, meta.Voter{ID: int32(i + 1), Addr: addr})
	}
	brokers := make([]*Broker, 3)
	var wg sync.WaitGroup
	for i := range brokers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			brokers[i] = testBroker(t, "", func(c *Config) {
				c.NodeID, c.RaftListen, c.Voters = int32(i+1), voters[i].Addr, voters
			})
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	leaders := map[int32]bool{}
	for i, b := range brokers {
		p := onlyPartition(t, describeQuorum(t, b.Addr().String(), 2, "__cluster_metadata", 0))
		leaders[p.LeaderID] = true
		if len(p.CurrentVoters) != 3 {
			t.Fatalf("node %d: voters %+v", i+1, p.CurrentVoters)
		}
		for _, v := range p.CurrentVoters {
			known := v.LogEndOffset >= 0
			if self := v.ReplicaID == int32(i+1); known != self {
				t.Errorf("node %d: voter %d log end %d", i+1, v.ReplicaID, v.LogEndOffset)
			}
		}
		if p.HighWatermark < 1 {
			t.Errorf("node %d: high watermark %d", i+1, p.HighWatermark)
		}
	}
	if len(leaders) != 1 || leaders[-1] || leaders[0] {
		t.Errorf("nodes name leaders %v", leaders)
	}
}
