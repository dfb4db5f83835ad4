package broker

import (
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/meta"
)

// produceLeaderHints applies KIP-951 to a Produce answer (v10+): each
// partition refused with NOT_LEADER_OR_FOLLOWER names the leader and
// epoch this node's metadata knows, and the response carries those
// leaders' endpoints, so that a client moves its batches at once instead
// of waiting for a metadata refresh (franz-go refreshes at most every 5 s
// by default).
func (b *Broker) produceLeaderHints(c *conn, resp *kmsg.ProduceResponse) {
	h := leaderHints{st: b.meta.State()}
	for i := range resp.Topics {
		st := &resp.Topics[i]
		for j := range st.Partitions {
			sp := &st.Partitions[j]
			if sp.ErrorCode == kerr.NotLeaderForPartition.Code {
				sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = h.leader(st.Topic, sp.Partition)
			}
		}
	}
	for _, br := range h.endpoints() {
		pb := kmsg.NewProduceResponseBroker()
		pb.NodeID, pb.Rack = br.ID, rack(br)
		pb.Host, pb.Port = c.endpoint(br)
		resp.Brokers = append(resp.Brokers, pb)
	}
}

// leaderHints gathers KIP-951's CurrentLeader answers of one response
// and the leaders they name.
type leaderHints struct {
	st  *meta.State
	ids []int32
}

// leader returns the leader and leader epoch of the partition as this
// node's metadata knows them, -1 and -1 when it knows none (an unknown
// partition, an offline one).
func (h *leaderHints) leader(topic string, partition int32) (id, epoch int32) {
	t, ok := h.st.Topics[topic]
	if !ok || partition < 0 || int(partition) >= len(t.Partitions) || t.Partitions[partition].Leader < 0 {
		return -1, -1
	}
	p := &t.Partitions[partition]
	if !slices.Contains(h.ids, p.Leader) {
		h.ids = append(h.ids, p.Leader)
	}
	return p.Leader, p.LeaderEpoch
}

// endpoints returns the registered, unfenced brokers among the leaders
// named, in id order. A fenced one is left out, as in Kafka: a client
// takes a hint only with its leader's endpoint, and must not be sent to a
// broker the controller knows to be gone.
func (h *leaderHints) endpoints() []meta.Broker {
	slices.Sort(h.ids)
	var out []meta.Broker
	for _, id := range h.ids {
		if h.st.Alive(id) {
			out = append(out, h.st.Brokers[id])
		}
	}
	return out
}

// fetchLeaderHints applies KIP-951 to a Fetch answer: each partition
// refused with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names the
// leader and epoch this node's metadata knows (v12+), and from v16 the
// response carries those leaders' endpoints, so that a consumer or a
// follower moves at once instead of waiting for a metadata refresh.
func (b *Broker) fetchLeaderHints(c *conn, resp *kmsg.FetchResponse) {
	h := leaderHints{st: b.meta.State()}
	for i := range resp.Topics {
		ft := &resp.Topics[i]
		for j := range ft.Partitions {
			sp := &ft.Partitions[j]
			if sp.ErrorCode == kerr.NotLeaderForPartition.Code || sp.ErrorCode == kerr.FencedLeaderEpoch.Code {
				sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = h.leader(ft.Topic, sp.Partition)
			}
		}
	}
	if resp.Version < 16 {
		return
	}
	for _, br := range h.endpoints() {
		fb := kmsg.NewFetchResponseBroker()
		fb.NodeID, fb.Rack = br.ID, rack(br)
		fb.Host, fb.Port = c.endpoint(br)
		resp.Brokers = append(resp.Brokers, fb)
	}
}

// rack is a broker's rack as the protocol carries it: null when unset.
func rack(br meta.Broker) *string {
	if br.Rack == "" {
		return nil
	}
	return &br.Rack
}
