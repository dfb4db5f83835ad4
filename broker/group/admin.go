package group

import (
	"context"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DescribeGroups handles a DescribeGroups request. As in Kafka, member
// metadata and assignments are shown only for a Stable group, and an
// unknown group is described as Dead without an error.
func (c *Coordinator) DescribeGroups(req *kmsg.DescribeGroupsRequest) *kmsg.DescribeGroupsResponse {
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	for _, id := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group = id
		rg.State = StateDead.String()
		g, e := c.lookup(id, false)
		switch {
		case e != nil:
			rg.ErrorCode = e.Code
		case g != nil:
			rg.State = g.state.String()
			rg.ProtocolType = g.protocolType
			stable := g.state == StateStable
			if stable {
				rg.Protocol = g.protocol
			}
			for _, m := range g.sortedMembersLocked() {
				rm := kmsg.NewDescribeGroupsResponseGroupMember()
				rm.MemberID, rm.ClientID, rm.ClientHost = m.id, m.clientID, m.clientHost
				if m.instanceID != "" {
					rm.InstanceID = kmsg.StringPtr(m.instanceID)
				}
				rm.ProtocolMetadata, rm.MemberAssignment = []byte{}, []byte{}
				if stable {
					rm.ProtocolMetadata = m.metadataFor(g.protocol)
					rm.MemberAssignment = m.assignment
				}
				rg.Members = append(rg.Members, rm)
			}
			g.mu.Unlock()
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

// ListGroups handles a ListGroups request, with the state filter of v4
// (KIP-518) and the type filter of v5 (KIP-848: every group here is
// "classic").
func (c *Coordinator) ListGroups(req *kmsg.ListGroupsRequest) *kmsg.ListGroupsResponse {
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	if len(req.TypesFilter) > 0 && !containsFold(req.TypesFilter, "classic") {
		return resp
	}
	for _, g := range c.groups() {
		g.mu.Lock()
		if g.dead || len(req.StatesFilter) > 0 && !containsFold(req.StatesFilter, g.state.String()) {
			g.mu.Unlock()
			continue
		}
		lg := kmsg.NewListGroupsResponseGroup()
		lg.Group, lg.ProtocolType, lg.GroupState, lg.GroupType = g.id, g.protocolType, g.state.String(), "classic"
		g.mu.Unlock()
		resp.Groups = append(resp.Groups, lg)
	}
	return resp
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// DeleteGroups handles a DeleteGroups request: an empty group's offsets,
// those pending in transactions included, and metadata are deleted with
// tombstones.
func (c *Coordinator) DeleteGroups(ctx context.Context, req *kmsg.DeleteGroupsRequest) *kmsg.DeleteGroupsResponse {
	resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
	for _, id := range req.Groups {
		rg := kmsg.NewDeleteGroupsResponseGroup()
		rg.Group = id
		if e := c.deleteGroup(ctx, id); e != nil {
			rg.ErrorCode = e.Code
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

func (c *Coordinator) deleteGroup(ctx context.Context, id string) *kerr.Error {
	if id == "" {
		return kerr.InvalidGroupID
	}
	g, e := c.lookup(id, false)
	if e != nil {
		return e
	}
	if g == nil {
		return kerr.GroupIDNotFound
	}
	defer g.mu.Unlock()
	if g.state != StateEmpty || len(g.members) > 0 || len(g.pending) > 0 {
		return kerr.NonEmptyGroup
	}
	var recs []record
	for t, ps := range g.offsets {
		for p := range ps {
			recs = append(recs, record{key: offsetKey(g.id, t, p)})
		}
	}
	// Offsets pending in a transaction get a tombstone too, so that its
	// commit, in memory or replayed, does not bring them back (Kafka's
	// OffsetMetadataManager.deleteAllOffsets).
	pending := offsetTable{}
	for _, ot := range g.txns {
		for t, ps := range ot {
			for p := range ps {
				if _, ok := g.offsets[t][p]; !ok {
					pending.set(t, p, offset{})
				}
			}
		}
	}
	for t, ps := range pending {
		for p := range ps {
			recs = append(recs, record{key: offsetKey(g.id, t, p)})
		}
	}
	recs = append(recs, record{key: groupKey(g.id)})
	if _, err := g.appendLocked(ctx, recs, noProducer); err != nil {
		return writeErr(err)
	}
	g.offsets = offsetTable{}
	g.txns = txnOffsets{}
	c.removeGroupLocked(g)
	return nil
}
