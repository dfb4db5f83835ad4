package broker

import "github.com/twmb/franz-go/pkg/kmsg"

// LeaveGroup: v0-5
//
// Removes members at once instead of waiting for their sessions to expire;
// the rest of the group rebalances.
//
// Version notes: v3 a batch of members, by member id or group.instance.id
// (KIP-345); v4 flexible; v5 reason (KIP-800).
func init() { register(kmsg.LeaveGroup, 0, 5, (*Broker).handleLeaveGroup) }

func (b *Broker) handleLeaveGroup(req *request) (kmsg.Response, error) {
	resp := b.groups.LeaveGroup(req.kreq.(*kmsg.LeaveGroupRequest))
	b.metrics.countError(kmsg.LeaveGroup, resp.ErrorCode)
	for _, m := range resp.Members {
		b.metrics.countError(kmsg.LeaveGroup, m.ErrorCode)
	}
	return resp, nil
}
