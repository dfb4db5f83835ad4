package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/meta"
)

// DeleteAcls: v0-3
//
// Deletes the ACLs each filter selects, through the controller, and
// answers per filter with the ACLs it deleted (KIP-140), with Kafka's
// filter semantics (ANY, MATCH: meta.ACLFilter). Like CreateAcls it is
// forwarded by a broker that is not the controller, after checking ALTER
// on the cluster (else every filter is CLUSTER_AUTHORIZATION_FAILED), and
// answers SECURITY_DISABLED without an authorizer. A filter with an
// UNKNOWN field is INVALID_REQUEST and deletes nothing; the others go on.
//
// Version notes: v1 pattern types (KIP-290; v0 filters LITERAL); v2
// flexible; v3 USER resources.
func init() {
	register(kmsg.DeleteACLs, 0, 3, (*Broker).handleDeleteACLs)
	registerGate(kmsg.DeleteACLs, gateDeleteACLs)
}

// gateDeleteACLs refuses the whole request, before it is forwarded, when
// the principal may not ALTER the cluster or there is no authorizer.
func gateDeleteACLs(b *Broker, req *request) (func(kmsg.Response), kmsg.Response) {
	err := aclChangeRefused(b, req)
	if err == nil {
		return nil, nil
	}
	r := req.kreq.(*kmsg.DeleteACLsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteACLsResponse)
	for range r.Filters {
		fr := kmsg.NewDeleteACLsResponseResult()
		fr.ErrorCode, fr.ErrorMessage = b.answerError(kmsg.DeleteACLs, err)
		resp.Results = append(resp.Results, fr)
	}
	return nil, resp
}

func (b *Broker) handleDeleteACLs(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DeleteACLsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteACLsResponse)
	filters := make([]meta.ACLFilter, len(r.Filters))
	for i, f := range r.Filters {
		filters[i] = meta.ACLFilter{
			ResourceType: int8(f.ResourceType), ResourceName: f.ResourceName, PatternType: int8(f.ResourcePatternType),
			Principal: f.Principal, Host: f.Host, Operation: int8(f.Operation), Permission: int8(f.PermissionType),
		}
	}
	outcomes := make([]meta.ACLDeletion, len(filters))
	if len(filters) > 0 {
		ctx, cancel := context.WithTimeout(b.ctx, controlTimeout)
		defer cancel()
		var err error
		if outcomes, err = b.meta.DeleteACLs(ctx, filters); err != nil {
			outcomes = make([]meta.ACLDeletion, len(filters))
			for i := range outcomes {
				outcomes[i].Err = err
			}
		}
	}
	for _, o := range outcomes {
		fr := kmsg.NewDeleteACLsResponseResult()
		fr.ErrorCode, fr.ErrorMessage = b.answerError(kmsg.DeleteACLs, o.Err)
		for _, a := range o.Deleted {
			m := kmsg.NewDeleteACLsResponseResultMatchingACL()
			m.ResourceType, m.ResourceName, m.ResourcePatternType = acl.ResourceType(a.ResourceType), a.ResourceName, acl.PatternType(a.PatternType)
			m.Principal, m.Host, m.Operation, m.PermissionType = a.Principal, a.Host, acl.Operation(a.Operation), acl.Permission(a.Permission)
			fr.MatchingACLs = append(fr.MatchingACLs, m)
		}
		resp.Results = append(resp.Results, fr)
	}
	return resp, nil
}
