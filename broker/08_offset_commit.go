package broker

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
)

// OffsetCommit: v2-9
//
// Writes the offsets as OffsetCommitKey/Value records to the group's
// __consumer_offsets partition and answers once they are committed
// (acks=all). A commit with generation -1 and no member id is allowed for
// an empty or unknown group (manual assignment, admin tools).
//
// Version notes: v2-4 retention time, ignored as Kafka 2.1+ does (offsets
// expire offsets.retention.minutes after the group empties); v6 leader
// epoch (KIP-320); v7 group.instance.id (KIP-345); v8 flexible; v9 no
// change for classic groups (KIP-848).
//
// Authorization (Kafka's): READ on the group, else every partition is
// GROUP_AUTHORIZATION_FAILED; READ on each topic, else its partitions are
// TOPIC_AUTHORIZATION_FAILED (whether it exists or not).
//
// Not done: v10 (topic ids, KIP-848); offsets of unknown partitions are
// refused with UNKNOWN_TOPIC_OR_PARTITION.
func init() { register(kmsg.OffsetCommit, 2, 9, (*Broker).handleOffsetCommit) }

func (b *Broker) handleOffsetCommit(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.OffsetCommitRequest)
	var refused []kmsg.OffsetCommitRequestTopic
	code := kerr.TopicAuthorizationFailed.Code
	if !b.authorized(req, acl.Read, acl.Group, r.Group) {
		refused, r.Topics, code = r.Topics, nil, kerr.GroupAuthorizationFailed.Code
	} else {
		refused = splitTopics(&r.Topics, func(t *kmsg.OffsetCommitRequestTopic) string { return t.Topic }, b.topicAuth(req, acl.Read).ok)
	}
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	if len(r.Topics) > 0 || len(refused) == 0 {
		resp = b.groups.OffsetCommit(b.ctx, r)
	}
	for _, t := range refused {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			b.metrics.countError(kmsg.OffsetCommit, p.ErrorCode)
		}
	}
	return resp, nil
}
