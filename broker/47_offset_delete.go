package broker

import "github.com/twmb/franz-go/pkg/kmsg"

// OffsetDelete: v0
//
// Deletes a group's committed offsets with tombstones (KIP-496). Topics the
// group's members subscribe to are GROUP_SUBSCRIBED_TO_TOPIC; a non-empty
// group that does not use the consumer protocol is NON_EMPTY_GROUP.
func init() { register(kmsg.OffsetDelete, 0, 0, (*Broker).handleOffsetDelete) }

func (b *Broker) handleOffsetDelete(req *request) (kmsg.Response, error) {
	resp := b.groups.OffsetDelete(b.ctx, req.kreq.(*kmsg.OffsetDeleteRequest))
	b.metrics.countError(kmsg.OffsetDelete, resp.ErrorCode)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			b.metrics.countError(kmsg.OffsetDelete, p.ErrorCode)
		}
	}
	return resp, nil
}
