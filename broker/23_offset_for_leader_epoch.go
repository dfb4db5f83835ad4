package broker

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/partition"
)

// OffsetForLeaderEpoch: v0-4
//
// For each partition, the end offset of the largest leader epoch at or
// below the one asked for, as the leader's log records it (KIP-101,
// KIP-279): a consumer that saw the log under an older leader uses it to
// detect truncation (KIP-320), and it is the same answer a follower gets
// as DivergingEpoch. Only the leader answers; CurrentLeaderEpoch (v2+) is
// checked as Fetch checks it. An epoch older than every epoch in the log
// is answered with the requested epoch and the log's first epoch start, as
// Kafka's leader-epoch cache answers it.
//
// Authorization (Kafka's): CLUSTER_ACTION on the cluster (followers), or
// DESCRIBE on each topic (consumers, KIP-320), else its partitions are
// TOPIC_AUTHORIZATION_FAILED.
//
// Version notes: v1 LeaderEpoch in the answer; v2 CurrentLeaderEpoch; v3
// ReplicaID; v4 flexible.
func init() { register(kmsg.OffsetForLeaderEpoch, 0, 4, (*Broker).handleOffsetForLeaderEpoch) }

func (b *Broker) handleOffsetForLeaderEpoch(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.OffsetForLeaderEpochRequest)
	resp := r.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
	replica := b.allowed(req, acl.ClusterAction, acl.Cluster, acl.ClusterName)
	describable := b.topicAuth(req, acl.Describe)
	for _, rt := range r.Topics {
		allowed := replica || describable.ok(rt.Topic)
		ot := kmsg.NewOffsetForLeaderEpochResponseTopic()
		ot.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			op := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
			op.Partition = rp.Partition
			op.LeaderEpoch, op.EndOffset = -1, -1
			var p *partition.Partition
			err := error(kerr.TopicAuthorizationFailed)
			if allowed {
				p, err = b.led(rt.Topic, rp.Partition)
			}
			if err == nil {
				err = p.CheckLeaderEpoch(rp.CurrentLeaderEpoch)
			}
			if err != nil {
				op.ErrorCode, _ = b.answerError(kmsg.OffsetForLeaderEpoch, err)
			} else {
				op.EndOffset, op.LeaderEpoch = p.Log().EndOffsetForEpoch(rp.LeaderEpoch)
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	return resp, nil
}
