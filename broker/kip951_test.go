package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// roundTripAt sends req at its version on a new connection to b and
// decodes the answer at the same version.
func roundTripAt(t *testing.T, b *Broker, req kmsg.Request) kmsg.Response {
	t.Helper()
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(rawRoundTrip(t, b, req)); err != nil {
		t.Fatalf("decode %s v%d: %v", kmsg.NameForKey(req.Key()), req.GetVersion(), err)
	}
	return resp
}

// TestClusterNotLeaderNamesTheLeader: KIP-951. A Produce (v10+) or Fetch
// (v12+) sent to a follower is refused with NOT_LEADER_OR_FOLLOWER and
// names the partition's leader and leader epoch in CurrentLeader, and the
// response carries the leader's endpoint (Produce v10+, Fetch v16+), so
// that a client moves without a metadata round trip. Older versions have
// neither field on the wire.
func TestClusterNotLeaderNamesTheLeader(t *testing.T) {
	c := testCluster(t, 3)
	c.createTopic("hint", 1, 3, nil)
	st := c.partitionState("hint", 0)
	var follower int32 = -1
	for _, id := range st.Replicas {
		if id != st.Leader {
			follower = id
		}
	}
	leader := c.node(st.Leader)
	lhost, lport := splitHostPort(t, leader.Addr().String())
	id := c.any().meta.State().Topics["hint"].ID
	fnode := c.node(follower)

	checkHint := func(t *testing.T, code int16, gotID, gotEpoch int32, hinted bool) {
		t.Helper()
		if code != kerr.NotLeaderForPartition.Code {
			t.Fatalf("error %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(code))
		}
		wantID, wantEpoch := int32(-1), int32(-1)
		if hinted {
			wantID, wantEpoch = st.Leader, st.LeaderEpoch
		}
		if gotID != wantID || gotEpoch != wantEpoch {
			t.Fatalf("CurrentLeader %d at epoch %d, want %d at epoch %d", gotID, gotEpoch, wantID, wantEpoch)
		}
	}
	checkEndpoints := func(t *testing.T, got []kmsg.ProduceResponseBroker, want bool) {
		t.Helper()
		if !want {
			if len(got) != 0 {
				t.Fatalf("%d node endpoints before the version that has them", len(got))
			}
			return
		}
		if len(got) != 1 || got[0].NodeID != st.Leader || got[0].Host != lhost || got[0].Port != lport {
			t.Fatalf("node endpoints %+v, want node %d at %s:%d", got, st.Leader, lhost, lport)
		}
	}

	for v := apis[int16(kmsg.Produce)].min; v <= apis[int16(kmsg.Produce)].max; v++ {
		t.Run(fmt.Sprintf("Produce v%d", v), func(t *testing.T) {
			req := kmsg.NewPtrProduceRequest()
			req.SetVersion(v)
			req.Acks, req.TimeoutMillis = 1, 5000
			rt := kmsg.NewProduceRequestTopic()
			rt.Topic = "hint"
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Records = rawBatch(-1, -1, -1, time.Now().UnixMilli(), "to a follower")
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp := roundTripAt(t, fnode, req).(*kmsg.ProduceResponse)
			sp := resp.Topics[0].Partitions[0]
			checkHint(t, sp.ErrorCode, sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch, v >= 10)
			checkEndpoints(t, resp.Brokers, v >= 10)
		})
	}
	for v := apis[int16(kmsg.Fetch)].min; v <= apis[int16(kmsg.Fetch)].max; v++ {
		t.Run(fmt.Sprintf("Fetch v%d", v), func(t *testing.T) {
			req := kmsg.NewPtrFetchRequest()
			req.SetVersion(v)
			req.ReplicaID, req.MaxBytes = -1, 1<<20
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = "hint", id
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.PartitionMaxBytes = 1 << 20
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			resp := roundTripAt(t, fnode, req).(*kmsg.FetchResponse)
			sp := resp.Topics[0].Partitions[0]
			checkHint(t, sp.ErrorCode, sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch, v >= 12)
			var eps []kmsg.ProduceResponseBroker
			for _, b := range resp.Brokers {
				eps = append(eps, kmsg.ProduceResponseBroker{NodeID: b.NodeID, Host: b.Host, Port: b.Port, Rack: b.Rack})
			}
			checkEndpoints(t, eps, v >= 16)
		})
	}
}

// splitHostPort splits a listener address into the host and port a
// client is given.
func splitHostPort(t *testing.T, addr string) (string, int32) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	var port int32
	if _, err := fmt.Sscan(p, &port); err != nil {
		t.Fatal(err)
	}
	return h, port
}

// TestClusterControlledShutdownAnswersWithTheNewLeader: a broker in
// controlled shutdown keeps answering for a moment after its leaderships
// moved, so a producer's next request gets NOT_LEADER_OR_FOLLOWER naming
// the new leader (KIP-951) and moves at once, instead of meeting a closed
// connection and waiting for its next metadata refresh (franz-go: at most
// every 5 s by default).
func TestClusterControlledShutdownAnswersWithTheNewLeader(t *testing.T) {
	c := testCluster(t, 3)
	c.createTopic("drain", 1, 3, nil)
	st := c.partitionState("drain", 0)
	victim := c.node(st.Leader)
	conn, err := net.Dial("tcp", victim.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	c.nodes[st.Leader-1] = nil
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- victim.Shutdown(ctx)
	}()
	select {
	case <-victim.node.ShutdownDone(): // the controller says its leaderships moved
	case err := <-done:
		t.Fatalf("shutdown ended before its leaderships moved: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("leaderships did not move")
	}

	// Until this node has applied the move it still leads and takes the
	// records (acks=1); then it refuses them, naming the new leader.
	var resp *kmsg.ProduceResponse
	deadline := time.Now().Add(5 * time.Second)
	for corr := int32(1); ; corr++ {
		resp = produceOn(t, conn, corr, "drain")
		if resp.Topics[0].Partitions[0].ErrorCode != 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	sp := resp.Topics[0].Partitions[0]
	c.waitFor("a running node to know the new leader", 5*time.Second, func() bool {
		return c.partitionState("drain", 0).LeaderEpoch > st.LeaderEpoch
	})
	now := c.partitionState("drain", 0)
	if sp.ErrorCode != kerr.NotLeaderForPartition.Code || sp.CurrentLeader.LeaderID != now.Leader || sp.CurrentLeader.LeaderID == st.Leader ||
		sp.CurrentLeader.LeaderEpoch != now.LeaderEpoch {
		t.Fatalf("error %v naming leader %d at epoch %d; want NOT_LEADER_OR_FOLLOWER naming %d at epoch %d",
			kerr.ErrorForCode(sp.ErrorCode), sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch, now.Leader, now.LeaderEpoch)
	}
	if len(resp.Brokers) != 1 || resp.Brokers[0].NodeID != now.Leader {
		t.Fatalf("node endpoints %+v, want the new leader %d", resp.Brokers, now.Leader)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// produceOn sends an acks=1 Produce of one record to partition 0 of topic
// on conn at our highest version and reads its answer; a closed connection
// fails the test.
func produceOn(t *testing.T, conn net.Conn, corr int32, topic string) *kmsg.ProduceResponse {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(apis[int16(kmsg.Produce)].max)
	req.Acks, req.TimeoutMillis = 1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = rawBatch(-1, -1, -1, time.Now().UnixMilli(), "during the shutdown")
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	writeFrames(t, conn, corr, req)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var size [4]byte
	if _, err := io.ReadFull(conn, size[:]); err != nil {
		t.Fatalf("the broker closed the connection instead of answering: %v", err)
	}
	frame := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(conn, frame); err != nil {
		t.Fatal(err)
	}
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(req.GetVersion())
	if err := resp.ReadFrom(frame[5:]); err != nil { // correlation id, header tags
		t.Fatal(err)
	}
	return resp
}
