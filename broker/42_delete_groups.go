package broker

import "github.com/twmb/franz-go/pkg/kmsg"

// DeleteGroups: v0-2
//
// Deletes empty groups: tombstones for each committed offset and for the
// group metadata. A group with members is NON_EMPTY_GROUP, an unknown one
// GROUP_ID_NOT_FOUND.
//
// Version notes: v2 flexible.
//
// Not done: v3 (error messages).
func init() { register(kmsg.DeleteGroups, 0, 2, (*Broker).handleDeleteGroups) }

func (b *Broker) handleDeleteGroups(req *request) (kmsg.Response, error) {
	resp := b.groups.DeleteGroups(b.ctx, req.kreq.(*kmsg.DeleteGroupsRequest))
	for _, g := range resp.Groups {
		b.metrics.countError(kmsg.DeleteGroups, g.ErrorCode)
	}
	return resp, nil
}
