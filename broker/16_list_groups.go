package broker

import "github.com/twmb/franz-go/pkg/kmsg"

// ListGroups: v0-5
//
// Every group this node coordinates.
//
// Version notes: v3 flexible; v4 state filter (KIP-518); v5 type filter
// and group type (KIP-848): every group here is "classic".
func init() { register(kmsg.ListGroups, 0, 5, (*Broker).handleListGroups) }

func (b *Broker) handleListGroups(req *request) (kmsg.Response, error) {
	resp := b.groups.ListGroups(req.kreq.(*kmsg.ListGroupsRequest))
	b.metrics.countError(kmsg.ListGroups, resp.ErrorCode)
	return resp, nil
}
