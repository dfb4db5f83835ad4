package broker

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/meta"
)

// DescribeAcls: v0-3
//
// The ACLs a filter selects (KIP-140), from this node's metadata, grouped
// by resource, with Kafka's filter semantics (ANY, MATCH: meta.ACLFilter).
// Needs DESCRIBE on the cluster (CLUSTER_AUTHORIZATION_FAILED); without
// an authorizer the answer is SECURITY_DISABLED, as in Kafka. A filter
// with an UNKNOWN field is INVALID_REQUEST.
//
// Version notes: v1 pattern types (KIP-290; v0 filters LITERAL); v2
// flexible; v3 USER resources (KIP-554's principal resources).
func init() { register(kmsg.DescribeACLs, 0, 3, (*Broker).handleDescribeACLs) }

func (b *Broker) handleDescribeACLs(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DescribeACLsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeACLsResponse)
	fail := func(err error) (kmsg.Response, error) {
		resp.ErrorCode, resp.ErrorMessage = b.answerError(kmsg.DescribeACLs, err)
		return resp, nil
	}
	switch {
	case !b.authorizedCluster(req, acl.Describe):
		return fail(kerr.ClusterAuthorizationFailed)
	case b.authz == nil:
		return fail(errSecurityDisabled)
	}
	f := meta.ACLFilter{
		ResourceType: int8(r.ResourceType), ResourceName: r.ResourceName, PatternType: int8(r.ResourcePatternType),
		Principal: r.Principal, Host: r.Host, Operation: int8(r.Operation), Permission: int8(r.PermissionType),
	}
	if err := f.Validate(); err != nil {
		return fail(err)
	}
	// State.ACLs is in resource order: one response resource per run.
	for _, a := range b.meta.State().ACLsMatching(f) {
		n := len(resp.Resources)
		if n == 0 || resp.Resources[n-1].ResourceType != acl.ResourceType(a.ResourceType) ||
			resp.Resources[n-1].ResourceName != a.ResourceName || resp.Resources[n-1].ResourcePatternType != acl.PatternType(a.PatternType) {
			rr := kmsg.NewDescribeACLsResponseResource()
			rr.ResourceType, rr.ResourceName, rr.ResourcePatternType = acl.ResourceType(a.ResourceType), a.ResourceName, acl.PatternType(a.PatternType)
			resp.Resources = append(resp.Resources, rr)
			n++
		}
		ra := kmsg.NewDescribeACLsResponseResourceACL()
		ra.Principal, ra.Host, ra.Operation, ra.PermissionType = a.Principal, a.Host, acl.Operation(a.Operation), acl.Permission(a.Permission)
		resp.Resources[n-1].ACLs = append(resp.Resources[n-1].ACLs, ra)
	}
	return resp, nil
}
