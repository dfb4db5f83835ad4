package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
)

// Heartbeat: v0-4
//
// Keeps a member's session alive and tells it, with REBALANCE_IN_PROGRESS,
// when it must rejoin.
//
// Authorization (Kafka's): READ on the group, else
// GROUP_AUTHORIZATION_FAILED.
//
// Version notes: v1 throttle time; v3 group.instance.id (KIP-345); v4
// flexible.
func init() { register(kmsg.Heartbeat, 0, 4, (*Broker).handleHeartbeat) }

func (b *Broker) handleHeartbeat(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.HeartbeatRequest)
	if !b.authorized(req, acl.Read, acl.Group, r.Group) {
		return b.groupRefused(kmsg.Heartbeat, r.ResponseKind()), nil
	}
	resp := b.groups.Heartbeat(r)
	b.metrics.countError(kmsg.Heartbeat, resp.ErrorCode)
	return resp, nil
}
