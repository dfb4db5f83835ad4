package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
)

// LeaveGroup: v0-5
//
// Removes members at once instead of waiting for their sessions to expire;
// the rest of the group rebalances.
//
// Authorization (Kafka's): READ on the group, else
// GROUP_AUTHORIZATION_FAILED.
//
// Version notes: v3 a batch of members, by member id or group.instance.id
// (KIP-345); v4 flexible; v5 reason (KIP-800).
func init() { register(kmsg.LeaveGroup, 0, 5, (*Broker).handleLeaveGroup) }

func (b *Broker) handleLeaveGroup(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.LeaveGroupRequest)
	if !b.authorized(req, acl.Read, acl.Group, r.Group) {
		return b.groupRefused(kmsg.LeaveGroup, r.ResponseKind()), nil
	}
	resp := b.groups.LeaveGroup(r)
	b.metrics.countError(kmsg.LeaveGroup, resp.ErrorCode)
	for _, m := range resp.Members {
		b.metrics.countError(kmsg.LeaveGroup, m.ErrorCode)
	}
	return resp, nil
}
