package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/meta"
)

// AlterPartition: v2-3 (inter-broker, KIP-497)
//
// A partition leader asks the controller to change the partition's ISR,
// naming the leader epoch and partition epoch it knows: a request made on
// stale knowledge is refused (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION)
// and the leader decides again once the metadata reaches it. Answered only
// by the controller. v2 names topics by id; v3 names each ISR member's
// broker epoch as the leader saw it on its fetches (KIP-903), and a joiner
// registered at another epoch is INELIGIBLE_REPLICA.
//
// Not done: leader recovery state (no unclean recovery protocol).
//
// Authorization (Kafka's): CLUSTER_ACTION on the cluster (brokers only),
// else CLUSTER_AUTHORIZATION_FAILED.
func init() { register(kmsg.AlterPartition, 2, 3, (*Broker).handleAlterPartition) }

// controlTimeout bounds a controller request's wait for its raft commit.
const controlTimeout = 10 * time.Second

func (b *Broker) handleAlterPartition(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.AlterPartitionRequest)
	resp := r.ResponseKind().(*kmsg.AlterPartitionResponse)
	if !b.authorizedCluster(req, acl.ClusterAction) {
		resp.ErrorCode, _ = b.answerError(kmsg.AlterPartition, kerr.ClusterAuthorizationFailed)
		return resp, nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, controlTimeout)
	defer cancel()
	if !b.meta.IsLeader() {
		resp.ErrorCode, _ = b.answerError(kmsg.AlterPartition, meta.ErrNotController)
		return resp, nil
	}
	st := b.meta.State()
	for _, rt := range r.Topics {
		ot := kmsg.NewAlterPartitionResponseTopic()
		ot.TopidID = rt.TopicID
		t, known := st.TopicByID(rt.TopicID)
		for _, rp := range rt.Partitions {
			op := kmsg.NewAlterPartitionResponseTopicPartition()
			op.Partition = rp.Partition
			if !known {
				op.ErrorCode, _ = b.answerError(kmsg.AlterPartition, meta.ErrUnknownTopicOrPartition)
				ot.Partitions = append(ot.Partitions, op)
				continue
			}
			ar := meta.AlterPartitionRequest{
				Topic: t.Name, Partition: rp.Partition, BrokerID: r.BrokerID, BrokerEpoch: r.BrokerEpoch,
				LeaderEpoch: rp.LeaderEpoch, PartitionEpoch: rp.PartitionEpoch, ISR: rp.NewISR,
			}
			if r.Version >= 3 {
				ar.ISR = nil
				for _, bs := range rp.NewEpochISR {
					ar.ISR, ar.ISREpochs = append(ar.ISR, bs.BrokerID), append(ar.ISREpochs, bs.BrokerEpoch)
				}
			}
			p, err := b.meta.AlterPartition(ctx, ar)
			if err != nil {
				op.ErrorCode, _ = b.answerError(kmsg.AlterPartition, err)
			} else {
				op.LeaderID, op.LeaderEpoch, op.ISR, op.PartitionEpoch = p.Leader, p.LeaderEpoch, p.ISR, p.PartitionEpoch
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	return resp, nil
}
