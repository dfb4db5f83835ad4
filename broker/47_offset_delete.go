package broker

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
)

// OffsetDelete: v0
//
// Deletes a group's committed offsets with tombstones (KIP-496). Topics the
// group's members subscribe to are GROUP_SUBSCRIBED_TO_TOPIC; a non-empty
// group that does not use the consumer protocol is NON_EMPTY_GROUP.
//
// Authorization (Kafka's): DELETE on the group, else
// GROUP_AUTHORIZATION_FAILED; READ on each topic, else its partitions are
// TOPIC_AUTHORIZATION_FAILED.
func init() { register(kmsg.OffsetDelete, 0, 0, (*Broker).handleOffsetDelete) }

func (b *Broker) handleOffsetDelete(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.OffsetDeleteRequest)
	if !b.authorized(req, acl.Delete, acl.Group, r.Group) {
		return b.groupRefused(kmsg.OffsetDelete, r.ResponseKind()), nil
	}
	refused := splitTopics(&r.Topics, func(t *kmsg.OffsetDeleteRequestTopic) string { return t.Topic }, b.topicAuth(req, acl.Read).ok)
	resp := b.groups.OffsetDelete(b.ctx, r)
	if resp.ErrorCode == 0 {
		for _, t := range refused {
			rt := kmsg.NewOffsetDeleteResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetDeleteResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, kerr.TopicAuthorizationFailed.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
	}
	b.metrics.countError(kmsg.OffsetDelete, resp.ErrorCode)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			b.metrics.countError(kmsg.OffsetDelete, p.ErrorCode)
		}
	}
	return resp, nil
}
