package broker

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/meta"
)

// CreateAcls: v0-3
//
// Stores ACL bindings through the controller (KIP-140): a broker that is
// not the controller passes the request on (forwarded, KIP-590), after
// checking that the client may ALTER the cluster (else every creation is
// CLUSTER_AUTHORIZATION_FAILED); without an authorizer every creation is
// SECURITY_DISABLED, as in Kafka. Each creation succeeds or fails alone:
// an unknown or non-concrete resource type, pattern, operation or
// permission, an empty name, a CLUSTER resource not named kafka-cluster,
// a principal not of the form Type:name or an empty host is
// INVALID_REQUEST. Creating an ACL that exists succeeds and changes
// nothing. A created ACL applies to a broker's requests once that broker
// has applied it from the metadata log; the broker that answers has.
//
// Version notes: v1 pattern types (KIP-290; v0 creates LITERAL); v2
// flexible; v3 USER resources.
func init() {
	register(kmsg.CreateACLs, 0, 3, (*Broker).handleCreateACLs)
	registerGate(kmsg.CreateACLs, gateCreateACLs)
}

// errSecurityDisabled answers the ACL APIs without an authorizer.
var errSecurityDisabled = fmt.Errorf("%w: no authorizer is configured on the broker (--authorizer, --super-users)", kerr.SecurityDisabled)

// aclChangeRefused is why a CreateAcls or DeleteAcls request is refused
// whole, nil when it is not: the principal may not ALTER the cluster, or
// there is no authorizer to store ACLs for.
func aclChangeRefused(b *Broker, req *request) error {
	switch {
	case !b.authorizedCluster(req, acl.Alter):
		return kerr.ClusterAuthorizationFailed
	case b.authz == nil:
		return errSecurityDisabled
	}
	return nil
}

// gateCreateACLs refuses the whole request, before it is forwarded, when
// the principal may not ALTER the cluster or there is no authorizer.
func gateCreateACLs(b *Broker, req *request) (func(kmsg.Response), kmsg.Response) {
	err := aclChangeRefused(b, req)
	if err == nil {
		return nil, nil
	}
	r := req.kreq.(*kmsg.CreateACLsRequest)
	resp := r.ResponseKind().(*kmsg.CreateACLsResponse)
	for range r.Creations {
		cr := kmsg.NewCreateACLsResponseResult()
		cr.ErrorCode, cr.ErrorMessage = b.answerError(kmsg.CreateACLs, err)
		resp.Results = append(resp.Results, cr)
	}
	return nil, resp
}

func (b *Broker) handleCreateACLs(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.CreateACLsRequest)
	resp := r.ResponseKind().(*kmsg.CreateACLsResponse)
	acls := make([]meta.ACL, len(r.Creations))
	for i, c := range r.Creations {
		acls[i] = meta.ACL{
			ResourceType: int8(c.ResourceType), ResourceName: c.ResourceName, PatternType: int8(c.ResourcePatternType),
			Principal: c.Principal, Host: c.Host, Operation: int8(c.Operation), Permission: int8(c.PermissionType),
		}
	}
	outcomes := make([]error, len(acls))
	if len(acls) > 0 {
		ctx, cancel := context.WithTimeout(b.ctx, controlTimeout)
		defer cancel()
		var err error
		if outcomes, err = b.meta.CreateACLs(ctx, acls); err != nil {
			outcomes = make([]error, len(acls))
			for i := range outcomes {
				outcomes[i] = err
			}
		}
	}
	for _, err := range outcomes {
		cr := kmsg.NewCreateACLsResponseResult()
		cr.ErrorCode, cr.ErrorMessage = b.answerError(kmsg.CreateACLs, err)
		resp.Results = append(resp.Results, cr)
	}
	return resp, nil
}
