package broker

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
)

// DescribeGroups: v0-5
//
// State, protocol and members of each group; member metadata and
// assignments only while the group is Stable, as Kafka does. An unknown
// group is described as Dead.
//
// Authorization (Kafka's): DESCRIBE on each group, else that group is
// GROUP_AUTHORIZATION_FAILED.
//
// Version notes: v3 authorized operations, when asked for, of each group
// described (KIP-430); v4 group.instance.id; v5 flexible.
//
// Not done: v6 (GROUP_ID_NOT_FOUND for unknown groups and error messages,
// KIP-1043).
func init() { register(kmsg.DescribeGroups, 0, 5, (*Broker).handleDescribeGroups) }

func (b *Broker) handleDescribeGroups(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DescribeGroupsRequest)
	all := r.Groups
	var denied map[string]bool
	r.Groups = nil
	for _, g := range all {
		if b.authorized(req, acl.Describe, acl.Group, g) {
			r.Groups = append(r.Groups, g)
		} else {
			if denied == nil {
				denied = map[string]bool{}
			}
			denied[g] = true
		}
	}
	described := b.groups.DescribeGroups(r)
	resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, g := range all { // the request's order
		if denied[g] {
			rg := kmsg.NewDescribeGroupsResponseGroup()
			rg.Group, rg.ErrorCode = g, kerr.GroupAuthorizationFailed.Code
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg := described.Groups[0]
		described.Groups = described.Groups[1:]
		if r.Version >= 3 && r.IncludeAuthorizedOperations && rg.ErrorCode == 0 {
			rg.AuthorizedOperations = b.authorizedOps(req, acl.Group, rg.Group)
		}
		resp.Groups = append(resp.Groups, rg)
	}
	for _, g := range resp.Groups {
		b.metrics.countError(kmsg.DescribeGroups, g.ErrorCode)
	}
	return resp, nil
}
