package broker

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
)

// DeleteGroups: v0-2
//
// Deletes empty groups: tombstones for each committed offset and for the
// group metadata. A group with members is NON_EMPTY_GROUP, an unknown one
// GROUP_ID_NOT_FOUND.
//
// Authorization (Kafka's): DELETE on each group, else that group is
// GROUP_AUTHORIZATION_FAILED.
//
// Version notes: v2 flexible.
//
// Not done: v3 (error messages).
func init() { register(kmsg.DeleteGroups, 0, 2, (*Broker).handleDeleteGroups) }

func (b *Broker) handleDeleteGroups(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DeleteGroupsRequest)
	var refused []string
	kept := r.Groups[:0:0]
	for _, g := range r.Groups {
		if b.authorized(req, acl.Delete, acl.Group, g) {
			kept = append(kept, g)
		} else {
			refused = append(refused, g)
		}
	}
	r.Groups = kept
	resp := b.groups.DeleteGroups(b.ctx, r)
	for _, g := range refused {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group, rg.ErrorCode = g, kerr.GroupAuthorizationFailed.Code
		resp.Groups = append(resp.Groups, rg)
	}
	for _, g := range resp.Groups {
		b.metrics.countError(kmsg.DeleteGroups, g.ErrorCode)
	}
	return resp, nil
}
