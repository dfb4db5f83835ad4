package broker

import "github.com/twmb/franz-go/pkg/kmsg"

// DescribeGroups: v0-5
//
// State, protocol and members of each group; member metadata and
// assignments only while the group is Stable, as Kafka does. An unknown
// group is described as Dead.
//
// Version notes: v3 authorized operations (not computed: there are no
// ACLs, so the field keeps its "omitted" value); v4 group.instance.id;
// v5 flexible.
//
// Not done: v6 (GROUP_ID_NOT_FOUND for unknown groups and error messages,
// KIP-1043).
func init() { register(kmsg.DescribeGroups, 0, 5, (*Broker).handleDescribeGroups) }

func (b *Broker) handleDescribeGroups(req *request) (kmsg.Response, error) {
	resp := b.groups.DescribeGroups(req.kreq.(*kmsg.DescribeGroupsRequest))
	for _, g := range resp.Groups {
		b.metrics.countError(kmsg.DescribeGroups, g.ErrorCode)
	}
	return resp, nil
}
