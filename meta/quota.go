package meta

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Client quotas (KIP-546): byte rates and request-time percentages set on
// a user, a client id, or a user and client id together, each of which
// may be the default entity of its type. The metadata only stores them;
// broker/quota decides which applies to a connection and enforces it.

// Quota keys, as Kafka names them.
const (
	QuotaProducerByteRate       = "producer_byte_rate"
	QuotaConsumerByteRate       = "consumer_byte_rate"
	QuotaRequestPercentage      = "request_percentage"
	QuotaControllerMutationRate = "controller_mutation_rate"
)

// quotaKeys are the keys a quota may set, and whether the value must be
// a whole number (Kafka's LONG keys; the others are DOUBLE).
// controller_mutation_rate is stored and described but not enforced.
var quotaKeys = map[string]bool{
	QuotaProducerByteRate:       true,
	QuotaConsumerByteRate:       true,
	QuotaRequestPercentage:      false,
	QuotaControllerMutationRate: false,
}

// Quota entity types, as Kafka names them on the wire.
const (
	QuotaEntityUser     = "user"
	QuotaEntityClientID = "client-id"
	QuotaEntityIP       = "ip"
)

// QuotaDefaultName is how the default entity of a type is written where
// a name is expected (the command line, ZooKeeper-era Kafka's paths);
// on the wire it is a null name.
const QuotaDefaultName = "<default>"

// ErrInvalidQuota marks a quota alteration or filter that Kafka refuses
// with INVALID_REQUEST: an unknown key, a value that is not positive, an
// entity without components.
var ErrInvalidQuota = errors.New("meta: invalid client quota")

// QuotaName is one component of a quota entity. It is comparable, so
// entities are map keys.
type QuotaName struct {
	// Set: the entity has this component. A user entity has no client id
	// component, which is not the same as the default client id.
	Set bool `json:",omitempty"`
	// Default: the component is the default entity of its type (Name is
	// empty).
	Default bool   `json:",omitempty"`
	Name    string `json:",omitempty"`
}

// QuotaNamed returns the component naming name.
func QuotaNamed(name string) QuotaName { return QuotaName{Set: true, Name: name} }

// QuotaDefault returns the component naming the default entity.
func QuotaDefault() QuotaName { return QuotaName{Set: true, Default: true} }

func (n QuotaName) String() string {
	if n.Default {
		return QuotaDefaultName
	}
	return n.Name
}

// QuotaEntity is who a client quota is set on: Kafka's
// /config/users/<user>[/clients/<client-id>] or /config/clients/<client-id>.
type QuotaEntity struct {
	User     QuotaName `json:",omitzero"`
	ClientID QuotaName `json:",omitzero"`
}

func (e QuotaEntity) String() string {
	var parts []string
	if e.User.Set {
		parts = append(parts, "user="+e.User.String())
	}
	if e.ClientID.Set {
		parts = append(parts, "client-id="+e.ClientID.String())
	}
	return strings.Join(parts, ",")
}

func (e QuotaEntity) validate() error {
	if !e.User.Set && !e.ClientID.Set {
		return fmt.Errorf("%w: empty entity", ErrInvalidQuota)
	}
	for _, c := range []struct {
		typ string
		n   QuotaName
	}{{QuotaEntityUser, e.User}, {QuotaEntityClientID, e.ClientID}} {
		if !c.n.Set {
			continue
		}
		if c.n.Default && c.n.Name != "" {
			return fmt.Errorf("%w: the default %s has no name", ErrInvalidQuota, c.typ)
		}
		if !c.n.Default && c.n.Name == "" {
			return fmt.Errorf("%w: empty %s name", ErrInvalidQuota, c.typ)
		}
	}
	return nil
}

// ClientQuota is an entity and the quotas set on it.
type ClientQuota struct {
	Entity QuotaEntity
	Values map[string]float64
}

// QuotaAlteration is one entry of AlterClientQuotas: keys to set and keys
// to remove on one entity. Removing a key that is not set is no error.
type QuotaAlteration struct {
	Entity QuotaEntity
	Set    map[string]float64 `json:",omitempty"`
	Remove []string           `json:",omitempty"`
}

// Validate checks an alteration as Kafka does before writing anything:
// a non-empty entity, known keys, each at most once, positive values,
// whole numbers for the byte rates.
func (a QuotaAlteration) Validate() error {
	if err := a.Entity.validate(); err != nil {
		return err
	}
	for k, v := range a.Set {
		integral, ok := quotaKeys[k]
		if !ok {
			return fmt.Errorf("%w: unknown quota key %q", ErrInvalidQuota, k)
		}
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0) || v <= 0:
			return fmt.Errorf("%w: %s must be greater than 0, not %v", ErrInvalidQuota, k, v)
		case integral && v != math.Trunc(v):
			return fmt.Errorf("%w: %s must be a whole number, not %v", ErrInvalidQuota, k, v)
		case integral && v >= math.MaxInt64:
			return fmt.Errorf("%w: %s %v is too large", ErrInvalidQuota, k, v)
		}
	}
	for _, k := range a.Remove {
		if _, ok := quotaKeys[k]; !ok {
			return fmt.Errorf("%w: unknown quota key %q", ErrInvalidQuota, k)
		}
		if _, ok := a.Set[k]; ok {
			return fmt.Errorf("%w: %s is both set and removed", ErrInvalidQuota, k)
		}
	}
	if len(slices.Compact(slices.Sorted(slices.Values(a.Remove)))) != len(a.Remove) {
		return fmt.Errorf("%w: a key is removed twice", ErrInvalidQuota)
	}
	return nil
}

// alterClientQuotasCmd applies alterations in order. The proposer sends
// only alterations that Validate accepts.
type alterClientQuotasCmd struct {
	Alterations []QuotaAlteration
}

// AlterClientQuotas applies the alterations, all or none. Each must pass
// Validate; callers answer per entry, so they validate first.
func (s *Store) AlterClientQuotas(ctx context.Context, alts []QuotaAlteration) error {
	for _, a := range alts {
		if err := a.Validate(); err != nil {
			return err
		}
	}
	_, err := s.propose(ctx, kindAlterClientQuotas, alterClientQuotasCmd{Alterations: alts})
	return err
}

func applyAlterClientQuotas(s *State, _ uint64, payload []byte) (*State, result) {
	var c alterClientQuotasCmd
	if err := decodePayload(payload, &c); err != nil {
		return nil, result{err: err}
	}
	for _, a := range c.Alterations {
		if err := a.Validate(); err != nil {
			return nil, result{err: fmt.Errorf("%w: %w", errBadCommand, err)}
		}
	}
	next := s.clone()
	if next.ClientQuotas == nil {
		next.ClientQuotas = map[QuotaEntity]map[string]float64{}
	}
	for _, a := range c.Alterations {
		// The entity's map is replaced, never modified: s shares it.
		vals := maps.Clone(next.ClientQuotas[a.Entity])
		if vals == nil {
			vals = map[string]float64{}
		}
		maps.Copy(vals, a.Set)
		for _, k := range a.Remove {
			delete(vals, k)
		}
		if len(vals) == 0 {
			delete(next.ClientQuotas, a.Entity)
		} else {
			next.ClientQuotas[a.Entity] = vals
		}
	}
	if maps.EqualFunc(next.ClientQuotas, s.ClientQuotas, maps.Equal) {
		return nil, result{}
	}
	return next, result{}
}

// ClientQuota returns the value of key set on entity e, if any.
func (s *State) ClientQuota(e QuotaEntity, key string) (float64, bool) {
	v, ok := s.ClientQuotas[e][key]
	return v, ok
}

// HasClientQuotas reports whether any entity has any quota set: with
// none, the broker measures nothing.
func (s *State) HasClientQuotas() bool { return len(s.ClientQuotas) > 0 }

// QuotaMatch is how a DescribeClientQuotas filter component matches an
// entity's component of its type (KIP-546's match_type).
type QuotaMatch int8

const (
	QuotaMatchExact   QuotaMatch = 0 // the named entity
	QuotaMatchDefault QuotaMatch = 1 // the default entity
	QuotaMatchAny     QuotaMatch = 2 // any entity of the type, the default included
)

// QuotaFilterComponent is one component of a DescribeClientQuotas filter.
type QuotaFilterComponent struct {
	EntityType string
	Match      QuotaMatch
	// Name is the name an exact match wants; it must be nil otherwise.
	Name *string
}

// ErrUnsupportedQuotaFilter marks a filter Kafka answers with
// UNSUPPORTED_VERSION: an entity type or match type it does not know.
var ErrUnsupportedQuotaFilter = errors.New("meta: unsupported client quota filter")

// DescribeClientQuotas returns the quotas of the entities that match
// every component (an entity without a component's type does not match
// it); with strict, entities with components of other types do not match
// either. No components and not strict is every entity. The result is
// sorted by entity, each with its own copy of the values.
func (s *State) DescribeClientQuotas(components []QuotaFilterComponent, strict bool) ([]ClientQuota, error) {
	type want struct {
		match QuotaMatch
		name  string
	}
	wants := map[string]want{}
	for _, c := range components {
		switch c.EntityType {
		case QuotaEntityUser, QuotaEntityClientID, QuotaEntityIP:
		case "":
			return nil, fmt.Errorf("%w: empty entity type in filter", ErrInvalidQuota)
		default:
			return nil, fmt.Errorf("%w: entity type %q", ErrUnsupportedQuotaFilter, c.EntityType)
		}
		if _, dup := wants[c.EntityType]; dup {
			return nil, fmt.Errorf("%w: entity type %s appears more than once in the filter", ErrInvalidQuota, c.EntityType)
		}
		w := want{match: c.Match}
		switch c.Match {
		case QuotaMatchExact:
			if c.Name == nil {
				return nil, fmt.Errorf("%w: exact match on %s without a name", ErrInvalidQuota, c.EntityType)
			}
			w.name = *c.Name
		case QuotaMatchDefault, QuotaMatchAny:
			if c.Name != nil {
				return nil, fmt.Errorf("%w: match type %d on %s with a name", ErrInvalidQuota, c.Match, c.EntityType)
			}
		default:
			return nil, fmt.Errorf("%w: match type %d", ErrUnsupportedQuotaFilter, c.Match)
		}
		wants[c.EntityType] = w
	}
	if _, ip := wants[QuotaEntityIP]; ip && len(wants) > 1 {
		return nil, fmt.Errorf("%w: an ip filter component cannot be combined with user or client-id", ErrInvalidQuota)
	}
	matches := func(n QuotaName, w want) bool {
		switch w.match {
		case QuotaMatchExact:
			return n.Set && !n.Default && n.Name == w.name
		case QuotaMatchDefault:
			return n.Set && n.Default
		default:
			return n.Set
		}
	}
	var out []ClientQuota
	for e, vals := range s.ClientQuotas {
		ok := true
		for typ, w := range wants {
			switch typ {
			case QuotaEntityUser:
				ok = ok && matches(e.User, w)
			case QuotaEntityClientID:
				ok = ok && matches(e.ClientID, w)
			default: // ip: no ip quotas are stored
				ok = false
			}
		}
		if strict {
			n := 0
			if e.User.Set {
				n++
			}
			if e.ClientID.Set {
				n++
			}
			ok = ok && n == len(wants)
		}
		if ok {
			out = append(out, ClientQuota{Entity: e, Values: maps.Clone(vals)})
		}
	}
	slices.SortFunc(out, func(a, b ClientQuota) int { return compareQuotaEntities(a.Entity, b.Entity) })
	return out, nil
}

func compareQuotaEntities(a, b QuotaEntity) int {
	// Entities with a user first; within a user, the user alone first;
	// defaults before names.
	key := func(n QuotaName, absent string) string {
		switch {
		case !n.Set:
			return absent
		case n.Default:
			return "1"
		}
		return "2" + n.Name
	}
	if c := strings.Compare(key(a.User, "3"), key(b.User, "3")); c != 0 {
		return c
	}
	return strings.Compare(key(a.ClientID, "0"), key(b.ClientID, "0"))
}

// clientQuotasSnapshot lists the quotas in entity order, so equal states
// encode to equal bytes; nil when there are none.
func clientQuotasSnapshot(s *State) []ClientQuota {
	all, _ := s.DescribeClientQuotas(nil, false)
	return all
}

// restoreClientQuotas checks a snapshot's quotas and puts them into s.
func restoreClientQuotas(s *State, quotas []ClientQuota) error {
	for _, q := range quotas {
		if err := (QuotaAlteration{Entity: q.Entity, Set: q.Values}).Validate(); err != nil {
			return err
		}
		if len(q.Values) == 0 {
			return fmt.Errorf("%w: %s has no values", ErrInvalidQuota, q.Entity)
		}
		if _, dup := s.ClientQuotas[q.Entity]; dup {
			return fmt.Errorf("%w: %s twice", ErrInvalidQuota, q.Entity)
		}
		if s.ClientQuotas == nil {
			s.ClientQuotas = map[QuotaEntity]map[string]float64{}
		}
		s.ClientQuotas[q.Entity] = q.Values
	}
	return nil
}
