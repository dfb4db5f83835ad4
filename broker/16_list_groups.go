package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
)

// ListGroups: v0-5
//
// Every group this node coordinates.
//
// Authorization (Kafka's): with DESCRIBE on the cluster every group is
// listed, otherwise only those the principal may DESCRIBE.
//
// Version notes: v3 flexible; v4 state filter (KIP-518); v5 type filter
// and group type (KIP-848): every group here is "classic".
func init() { register(kmsg.ListGroups, 0, 5, (*Broker).handleListGroups) }

func (b *Broker) handleListGroups(req *request) (kmsg.Response, error) {
	resp := b.groups.ListGroups(req.kreq.(*kmsg.ListGroupsRequest))
	if !b.allowed(req, acl.Describe, acl.Cluster, acl.ClusterName) {
		groups := resp.Groups[:0]
		for _, g := range resp.Groups {
			if b.allowed(req, acl.Describe, acl.Group, g.Group) {
				groups = append(groups, g)
			}
		}
		resp.Groups = groups
	}
	b.metrics.countError(kmsg.ListGroups, resp.ErrorCode)
	return resp, nil
}
