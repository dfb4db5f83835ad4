package broker

import (
	"fmt"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/meta"
)

// DescribeQuorum: v0-2
//
// The metadata quorum in Kafka's terms (KIP-595, KIP-836, KIP-853): the
// metadata log is partition 0 of __cluster_metadata, its leader is the
// raft leader (the controller), its epoch is the raft term, and its high
// watermark is the commit index. Voters and observers (raft non-voters)
// come from the raft configuration; v2's Nodes carry each member's raft
// address as a listener named RAFT.
//
// Where Strata differs, deliberately: every node answers, not only the
// leader, each from its own raft state, so an operator can ask each node
// how far its log is (strata cluster status does). Raft does not tell a
// node its peers' progress, so only the answering node's own entry has a
// log end offset; the others, and every timestamp, are -1 ("unknown", as
// the protocol allows). ReplicaDirectoryID (v2) is zero: raft here has no
// directory ids (KIP-853's voter changes are not served).
//
// Authorization (Kafka's): DESCRIBE on the cluster, else the top-level
// CLUSTER_AUTHORIZATION_FAILED.
func init() { register(kmsg.DescribeQuorum, 0, 2, (*Broker).handleDescribeQuorum) }

// metadataTopic is the name Kafka gives the metadata log.
const metadataTopic = "__cluster_metadata"

// raftListener names the raft address in DescribeQuorum v2's Nodes.
const raftListener = "RAFT"

func (b *Broker) handleDescribeQuorum(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DescribeQuorumRequest)
	resp := r.ResponseKind().(*kmsg.DescribeQuorumResponse)
	if !b.authorizedCluster(req, acl.Describe) {
		resp.ErrorCode, _ = b.answerError(kmsg.DescribeQuorum, kerr.ClusterAuthorizationFailed)
		return resp, nil
	}
	servers, serversErr := b.meta.Servers()
	for _, rt := range r.Topics {
		st := kmsg.NewDescribeQuorumResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewDescribeQuorumResponseTopicPartition()
			sp.Partition = rp.Partition
			switch {
			case rt.Topic != metadataTopic || rp.Partition != 0:
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				b.metrics.countError(kmsg.DescribeQuorum, sp.ErrorCode)
			case serversErr != nil:
				sp.ErrorCode, sp.ErrorMessage = b.answerError(kmsg.DescribeQuorum, fmt.Errorf("raft configuration: %w", serversErr))
			default:
				b.describeQuorumPartition(&sp, servers)
			}
			if r.Version < 2 {
				sp.ErrorMessage = nil
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	if r.Version >= 2 && serversErr == nil {
		for _, s := range servers {
			host, port, ok := splitPort(s.Addr)
			if !ok {
				continue // the in-process transport has no address to show
			}
			n := kmsg.NewDescribeQuorumResponseNode()
			n.NodeID = s.ID
			l := kmsg.NewDescribeQuorumResponseNodeListener()
			l.Name, l.Host, l.Port = raftListener, host, port
			n.Listeners = append(n.Listeners, l)
			resp.Nodes = append(resp.Nodes, n)
		}
	}
	return resp, nil
}

// describeQuorumPartition fills in the metadata log's partition from this
// node's raft state.
func (b *Broker) describeQuorumPartition(sp *kmsg.DescribeQuorumResponseTopicPartition, servers []meta.Server) {
	stats := b.meta.RaftStats()
	sp.LeaderID = b.meta.ControllerID()
	sp.LeaderEpoch = int32(min(stats.Term, 1<<31-1))
	sp.HighWatermark = int64(stats.CommitIndex)
	for _, s := range servers {
		rs := kmsg.NewDescribeQuorumResponseTopicPartitionReplicaState()
		rs.ReplicaID = s.ID
		rs.LogEndOffset = -1
		if s.ID == b.cfg.NodeID {
			rs.LogEndOffset = int64(stats.LastIndex)
		}
		if s.Voter {
			sp.CurrentVoters = append(sp.CurrentVoters, rs)
		} else {
			sp.Observers = append(sp.Observers, rs)
		}
	}
}

// splitPort splits a host:port address whose port fits the protocol's
// uint16.
func splitPort(addr string) (string, uint16, bool) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, false
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "", 0, false
	}
	return host, uint16(port), true
}
