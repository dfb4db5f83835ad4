package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
)

// SyncGroup: v0-5
//
// The leader sends every member's assignment; the coordinator stores the
// generation in __consumer_offsets and then answers every member. Followers
// block, on their own connection, until the leader's assignment is stored.
//
// Authorization (Kafka's): READ on the group, else
// GROUP_AUTHORIZATION_FAILED.
//
// Version notes: v3 group.instance.id (KIP-345); v4 flexible; v5 protocol
// type and name, checked against the group's (KIP-559).
func init() { register(kmsg.SyncGroup, 0, 5, (*Broker).handleSyncGroup) }

func (b *Broker) handleSyncGroup(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.SyncGroupRequest)
	if !b.authorized(req, acl.Read, acl.Group, r.Group) {
		return b.groupRefused(kmsg.SyncGroup, r.ResponseKind()), nil
	}
	resp := b.groups.SyncGroup(b.ctx, r)
	b.metrics.countError(kmsg.SyncGroup, resp.ErrorCode)
	return resp, nil
}
