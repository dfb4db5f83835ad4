package broker

import "github.com/twmb/franz-go/pkg/kmsg"

// OffsetFetch: v1-9
//
// Returns committed offsets (-1 where none), for the named partitions or,
// with null topics (v2+), for every partition the group committed.
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
	resp := b.groups.OffsetFetch(req.kreq.(*kmsg.OffsetFetchRequest))
	b.metrics.countError(kmsg.OffsetFetch, resp.ErrorCode)
	for _, g := range resp.Groups {
		b.metrics.countError(kmsg.OffsetFetch, g.ErrorCode)
	}
	return resp, nil
}
