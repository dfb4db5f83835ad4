package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
)

// JoinGroup: v0-9
//
// The classic group protocol's join barrier (group package). A join waits
// until every member has joined or the rebalance timeout passes, the first
// rebalance of an empty group waits group.initial.rebalance.delay.ms for
// more members, and only the joining connection blocks.
//
// Version notes: v1 rebalance timeout (KIP-62); v4 MEMBER_ID_REQUIRED for
// new dynamic members (KIP-394); v5 group.instance.id (KIP-345); v6
// flexible; v7 protocol type in the response; v8 reason (KIP-800); v9
// SkipAssignment for a static leader rejoining a stable group (KIP-814).
//
// Authorization (Kafka's): READ on the group, else
// GROUP_AUTHORIZATION_FAILED.
//
// Not done: GROUP_MAX_SIZE_REACHED is only returned when a max size is
// configured (none by default).
func init() { register(kmsg.JoinGroup, 0, 9, (*Broker).handleJoinGroup) }

func (b *Broker) handleJoinGroup(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.JoinGroupRequest)
	if !b.authorized(req, acl.Read, acl.Group, r.Group) {
		return b.groupRefused(kmsg.JoinGroup, r.ResponseKind()), nil
	}
	resp := b.groups.JoinGroup(b.ctx, r, req.clientID, clientHost(req))
	b.metrics.countError(kmsg.JoinGroup, resp.ErrorCode)
	return resp, nil
}
