package broker

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
)

// OffsetFetch: v1-9
//
// Returns committed offsets (-1 where none), for the named partitions or,
// with null topics (v2+), for every partition the group committed.
//
// Authorization (Kafka's): DESCRIBE on each group, else that group is
// GROUP_AUTHORIZATION_FAILED; DESCRIBE on each topic named, else its
// partitions are TOPIC_AUTHORIZATION_FAILED (offset -1); a fetch of every
// topic leaves out the topics the principal may not DESCRIBE.
//
// Version notes: v2 top-level error and all-topics fetch; v5 leader epoch;
// v6 flexible; v7 RequireStable (KIP-447: a partition with an offset
// pending in a transaction answers UNSTABLE_OFFSET_COMMIT, and the client
// retries); v8 several groups per request (KIP-709); v9 member id and
// epoch, ignored for classic groups (KIP-848).
//
// Not done: v10 (topic ids).
func init() { register(kmsg.OffsetFetch, 1, 9, (*Broker).handleOffsetFetch) }

func (b *Broker) handleOffsetFetch(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.OffsetFetchRequest)
	var resp *kmsg.OffsetFetchResponse
	if r.Version < 8 {
		resp = b.offsetFetchOne(req, r)
	} else {
		resp = b.offsetFetchGroups(req, r)
	}
	b.metrics.countError(kmsg.OffsetFetch, resp.ErrorCode)
	for _, g := range resp.Groups {
		b.metrics.countError(kmsg.OffsetFetch, g.ErrorCode)
	}
	return resp, nil
}

func refusedOffset(partition int32) kmsg.OffsetFetchResponseGroupTopicPartition {
	rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
	rp.Partition, rp.Offset, rp.ErrorCode = partition, -1, kerr.TopicAuthorizationFailed.Code
	return rp
}

// offsetFetchOne answers the one-group form (v1-7).
func (b *Broker) offsetFetchOne(req *request, r *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	if !b.authorized(req, acl.Describe, acl.Group, r.Group) {
		resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.ErrorCode = kerr.GroupAuthorizationFailed.Code
		if r.Version < 2 { // no top-level error: every partition carries it
			for _, t := range r.Topics {
				rt := kmsg.NewOffsetFetchResponseTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rp := kmsg.NewOffsetFetchResponseTopicPartition()
					rp.Partition, rp.Offset, rp.ErrorCode = p, -1, kerr.GroupAuthorizationFailed.Code
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
		}
		return resp
	}
	all := r.Topics == nil
	refused := splitTopics(&r.Topics, func(t *kmsg.OffsetFetchRequestTopic) string { return t.Topic }, b.topicAuth(req, acl.Describe).ok)
	resp := b.groups.OffsetFetch(r)
	if resp.ErrorCode != 0 {
		return resp
	}
	if all {
		topics := resp.Topics[:0]
		for _, t := range resp.Topics {
			if b.allowed(req, acl.Describe, acl.Topic, t.Topic) {
				topics = append(topics, t)
			}
		}
		resp.Topics = topics
	}
	for _, t := range refused {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := refusedOffset(p)
			rt.Partitions = append(rt.Partitions, kmsg.OffsetFetchResponseTopicPartition{
				Partition: rp.Partition, Offset: rp.Offset, LeaderEpoch: rp.LeaderEpoch, ErrorCode: rp.ErrorCode,
			})
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

// offsetFetchGroups answers the several-groups form (v8+), in the
// request's order of groups.
func (b *Broker) offsetFetchGroups(req *request, r *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	type asked struct {
		denied  bool
		all     bool
		refused []kmsg.OffsetFetchRequestGroupTopic
	}
	describable := b.topicAuth(req, acl.Describe)
	groups := r.Groups
	asks := make([]asked, len(groups))
	r.Groups = nil
	for i, g := range groups {
		if !b.authorized(req, acl.Describe, acl.Group, g.Group) {
			asks[i].denied = true
			continue
		}
		asks[i].all = g.Topics == nil
		asks[i].refused = splitTopics(&g.Topics, func(t *kmsg.OffsetFetchRequestGroupTopic) string { return t.Topic }, describable.ok)
		r.Groups = append(r.Groups, g)
	}
	fetched := b.groups.OffsetFetch(r)
	resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
	for i, g := range groups {
		if asks[i].denied {
			rg := kmsg.NewOffsetFetchResponseGroup()
			rg.Group, rg.ErrorCode = g.Group, kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg := fetched.Groups[0]
		fetched.Groups = fetched.Groups[1:]
		if rg.ErrorCode == 0 {
			if asks[i].all {
				topics := rg.Topics[:0]
				for _, t := range rg.Topics {
					if b.allowed(req, acl.Describe, acl.Topic, t.Topic) {
						topics = append(topics, t)
					}
				}
				rg.Topics = topics
			}
			for _, t := range asks[i].refused {
				rt := kmsg.NewOffsetFetchResponseGroupTopic()
				rt.Topic = t.Topic
				for _, p := range t.Partitions {
					rt.Partitions = append(rt.Partitions, refusedOffset(p))
				}
				rg.Topics = append(rg.Topics, rt)
			}
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}
