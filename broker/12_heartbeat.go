package broker

import "github.com/twmb/franz-go/pkg/kmsg"

// Heartbeat: v0-4
//
// Keeps a member's session alive and tells it, with REBALANCE_IN_PROGRESS,
// when it must rejoin.
//
// Version notes: v1 throttle time; v3 group.instance.id (KIP-345); v4
// flexible.
func init() { register(kmsg.Heartbeat, 0, 4, (*Broker).handleHeartbeat) }

func (b *Broker) handleHeartbeat(req *request) (kmsg.Response, error) {
	resp := b.groups.Heartbeat(req.kreq.(*kmsg.HeartbeatRequest))
	b.metrics.countError(kmsg.Heartbeat, resp.ErrorCode)
	return resp, nil
}
