package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/meta"
)

// AlterClientQuotas: v0-1
//
// Sets and removes client quotas (KIP-546) through the Raft metadata
// log: producer_byte_rate, consumer_byte_rate and request_percentage,
// which broker/quota enforces, and controller_mutation_rate, which is
// stored and described but not enforced. An entity is a user, a client
// id, or both, each named or the default entity (a null name). Each
// entry is answered on its own: an entity without components, with an
// unknown or repeated type or an empty name, an unknown or repeated key,
// or a value that is not positive (or not whole, for the byte rates) is
// INVALID_REQUEST for that entry, and the valid entries are applied
// together. ValidateOnly checks and writes nothing. Forwarded to the
// controller from any node (KIP-590); the change applies to the next
// request of every connection, without a restart.
//
// Version notes: v1 flexible.
//
// Authorization (Kafka's), before the request is forwarded: ALTER_CONFIGS
// on the cluster, else every entry is CLUSTER_AUTHORIZATION_FAILED.
//
// Not done: ip entities (connection_creation_rate), INVALID_REQUEST.
func init() {
	register(kmsg.AlterClientQuotas, 0, 1, (*Broker).handleAlterClientQuotas)
	registerGate(kmsg.AlterClientQuotas, gateAlterClientQuotas)
}

// gateAlterClientQuotas refuses the whole request, before it is
// forwarded, when the principal may not ALTER_CONFIGS the cluster.
func gateAlterClientQuotas(b *Broker, req *request) (func(kmsg.Response), kmsg.Response) {
	if b.authorizedCluster(req, acl.AlterConfigs) {
		return nil, nil
	}
	r := req.kreq.(*kmsg.AlterClientQuotasRequest)
	resp := r.ResponseKind().(*kmsg.AlterClientQuotasResponse)
	for _, e := range r.Entries {
		se := kmsg.NewAlterClientQuotasResponseEntry()
		for _, c := range e.Entity {
			sc := kmsg.NewAlterClientQuotasResponseEntryEntity()
			sc.Type, sc.Name = c.Type, c.Name
			se.Entity = append(se.Entity, sc)
		}
		se.ErrorCode, se.ErrorMessage = b.answerError(kmsg.AlterClientQuotas, kerr.ClusterAuthorizationFailed)
		resp.Entries = append(resp.Entries, se)
	}
	return nil, resp
}

func (b *Broker) handleAlterClientQuotas(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.AlterClientQuotasRequest)
	resp := r.ResponseKind().(*kmsg.AlterClientQuotasResponse)
	var valid []meta.QuotaAlteration
	var answers []int // valid[i] answers resp.Entries[answers[i]]
	for _, e := range r.Entries {
		se := kmsg.NewAlterClientQuotasResponseEntry()
		for _, c := range e.Entity {
			sc := kmsg.NewAlterClientQuotasResponseEntryEntity()
			sc.Type, sc.Name = c.Type, c.Name
			se.Entity = append(se.Entity, sc)
		}
		a, err := quotaAlteration(e)
		if err == nil {
			err = a.Validate()
		}
		if err != nil {
			se.ErrorCode, se.ErrorMessage = b.answerError(kmsg.AlterClientQuotas, fmt.Errorf("%w: %v", kerr.InvalidRequest, err))
		} else {
			valid = append(valid, a)
			answers = append(answers, len(resp.Entries))
		}
		resp.Entries = append(resp.Entries, se)
	}
	if len(valid) == 0 || r.ValidateOnly {
		return resp, nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	if err := b.meta.AlterClientQuotas(ctx, valid); err != nil {
		err = fmt.Errorf("alter client quotas: %w", err)
		for _, i := range answers {
			se := &resp.Entries[i]
			se.ErrorCode, se.ErrorMessage = b.answerError(kmsg.AlterClientQuotas, err)
		}
	}
	return resp, nil
}

// quotaAlteration reads one entry of the request: its entity's components
// and its operations, refusing repeats.
func quotaAlteration(e kmsg.AlterClientQuotasRequestEntry) (meta.QuotaAlteration, error) {
	var a meta.QuotaAlteration
	for _, c := range e.Entity {
		var n *meta.QuotaName
		switch c.Type {
		case meta.QuotaEntityUser:
			n = &a.Entity.User
		case meta.QuotaEntityClientID:
			n = &a.Entity.ClientID
		case meta.QuotaEntityIP:
			return a, fmt.Errorf("ip quotas are not supported")
		default:
			return a, fmt.Errorf("unknown quota entity type %q", c.Type)
		}
		if n.Set {
			return a, fmt.Errorf("entity type %s appears more than once", c.Type)
		}
		if c.Name == nil {
			*n = meta.QuotaDefault()
		} else {
			*n = meta.QuotaNamed(*c.Name)
		}
	}
	seen := map[string]bool{}
	for _, op := range e.Ops {
		if seen[op.Key] {
			return a, fmt.Errorf("quota key %s appears more than once", op.Key)
		}
		seen[op.Key] = true
		if op.Remove {
			a.Remove = append(a.Remove, op.Key)
			continue
		}
		if a.Set == nil {
			a.Set = map[string]float64{}
		}
		a.Set[op.Key] = op.Value
	}
	return a, nil
}
