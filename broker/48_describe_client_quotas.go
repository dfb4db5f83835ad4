package broker

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/meta"
)

// DescribeClientQuotas: v0-1
//
// Lists the client quotas (KIP-546) of the entities that match the
// filter: each component names an entity type (user, client-id, ip) and
// matches one name (exact), the default entity (default) or any entity
// of the type, the default included (any); an entity must match every
// component, and with Strict have no components of other types. No
// components and not Strict is every quota. A bad filter (an empty or
// repeated type, a name where none belongs, ip with user or client-id)
// is INVALID_REQUEST, an unknown entity or match type
// UNSUPPORTED_VERSION, for the whole response. Answered from this node's
// metadata, which a change made through any node reaches before that
// node answers the change.
//
// Version notes: v1 flexible.
//
// Authorization (Kafka's): DESCRIBE_CONFIGS on the cluster, else the
// whole response is CLUSTER_AUTHORIZATION_FAILED.
//
// Not done: ip quotas (connection_creation_rate) are neither stored nor
// enforced, so an ip filter matches nothing.
func init() { register(kmsg.DescribeClientQuotas, 0, 1, (*Broker).handleDescribeClientQuotas) }

func (b *Broker) handleDescribeClientQuotas(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DescribeClientQuotasRequest)
	resp := r.ResponseKind().(*kmsg.DescribeClientQuotasResponse)
	if !b.authorizedCluster(req, acl.DescribeConfigs) {
		resp.ErrorCode, resp.ErrorMessage = b.answerError(kmsg.DescribeClientQuotas, kerr.ClusterAuthorizationFailed)
		return resp, nil
	}
	components := make([]meta.QuotaFilterComponent, 0, len(r.Components))
	for _, c := range r.Components {
		components = append(components, meta.QuotaFilterComponent{EntityType: c.EntityType, Match: meta.QuotaMatch(c.MatchType), Name: c.Match})
	}
	quotas, err := b.meta.State().DescribeClientQuotas(components, r.Strict)
	if err != nil {
		switch {
		case errors.Is(err, meta.ErrUnsupportedQuotaFilter):
			err = fmt.Errorf("%w: %v", kerr.UnsupportedVersion, err)
		case errors.Is(err, meta.ErrInvalidQuota):
			err = fmt.Errorf("%w: %v", kerr.InvalidRequest, err)
		}
		resp.ErrorCode, resp.ErrorMessage = b.answerError(kmsg.DescribeClientQuotas, err)
		return resp, nil
	}
	resp.Entries = make([]kmsg.DescribeClientQuotasResponseEntry, 0, len(quotas))
	for _, q := range quotas {
		e := kmsg.NewDescribeClientQuotasResponseEntry()
		for _, c := range quotaEntityComponents(q.Entity) {
			ee := kmsg.NewDescribeClientQuotasResponseEntryEntity()
			ee.Type, ee.Name = c.typ, c.name
			e.Entity = append(e.Entity, ee)
		}
		for _, k := range slices.Sorted(maps.Keys(q.Values)) {
			v := kmsg.NewDescribeClientQuotasResponseEntryValue()
			v.Key, v.Value = k, q.Values[k]
			e.Values = append(e.Values, v)
		}
		resp.Entries = append(resp.Entries, e)
	}
	return resp, nil
}

// quotaComponent is one component of a quota entity as the wire has it:
// a type and a name, nil for the default entity.
type quotaComponent struct {
	typ  string
	name *string
}

func quotaEntityComponents(e meta.QuotaEntity) []quotaComponent {
	var out []quotaComponent
	for _, c := range []struct {
		typ string
		n   meta.QuotaName
	}{{meta.QuotaEntityUser, e.User}, {meta.QuotaEntityClientID, e.ClientID}} {
		if !c.n.Set {
			continue
		}
		qc := quotaComponent{typ: c.typ}
		if !c.n.Default {
			name := c.n.Name
			qc.name = &name
		}
		out = append(out, qc)
	}
	return out
}
