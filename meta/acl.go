package meta

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Access control lists (Kafka's ACL bindings, KIP-140): who may do what
// to which resource. The controller stores them through CreateAcls and
// DeleteAcls; every broker reads them from its State to authorize
// requests (broker/acl), so an ACL applies on a broker once that broker
// has applied the command that created it.
//
// The enumerations are numbered as on the wire (kmsg's ACLResourceType,
// ACLResourcePatternType, ACLOperation and ACLPermissionType), so a value
// passes between a request, the log and a response unchanged. meta knows
// only what it needs to validate and match them; their names and the
// authorization decisions belong to broker/acl.

// ACL is one binding: Permission (ALLOW or DENY) of Operation on the
// resources ResourceType:PatternType:ResourceName, for Principal
// connecting from Host.
type ACL struct {
	// ResourceType is TOPIC (2), GROUP (3), CLUSTER (4), TRANSACTIONAL_ID
	// (5), DELEGATION_TOKEN (6) or USER (7).
	ResourceType int8
	// ResourceName is a name, a prefix (PREFIXED) or "*" (LITERAL, every
	// name). A CLUSTER resource is named "kafka-cluster".
	ResourceName string
	// PatternType is LITERAL (3) or PREFIXED (4).
	PatternType int8
	// Principal is "Type:name", e.g. "User:alice", or "User:*" for every
	// user.
	Principal string
	// Host is a client's IP address, or "*" for every host.
	Host string
	// Operation is ALL (2) or one operation, READ (3) to DESCRIBE_TOKENS
	// (14).
	Operation int8
	// Permission is DENY (2) or ALLOW (3).
	Permission int8
}

// ACLFilter selects ACLs, as DescribeAcls and DeleteAcls do. Each field
// either names a value or takes any: ResourceType, Operation and
// Permission by ANY (1), the strings by nil. PatternType ANY (1) takes
// any pattern and MATCH (2) takes the ACLs that would apply to the
// literal ResourceName: that name's own, the wildcard "*", and the
// prefixes of it.
type ACLFilter struct {
	ResourceType int8
	ResourceName *string
	PatternType  int8
	Principal    *string
	Host         *string
	Operation    int8
	Permission   int8
}

// ACLDeletion is one filter's outcome in DeleteACLs: the ACLs it deleted,
// or why it deleted none.
type ACLDeletion struct {
	Deleted []ACL
	Err     error
}

// ErrInvalidACL refuses an ACL or a filter that no request may hold: an
// unknown or non-concrete enumeration, an empty resource name, a
// principal without a type (Kafka's INVALID_REQUEST).
var ErrInvalidACL = errors.New("meta: invalid ACL")

// The wire values meta needs.
const (
	aclAny     = 1 // every enumeration: ANY
	aclMatch   = 2 // pattern type: MATCH
	aclLiteral = 3 // pattern type: LITERAL
	aclPrefix  = 4 // pattern type: PREFIXED

	aclTopic   = 2 // resource type: TOPIC
	aclUser    = 7 // resource type: USER, the last one
	aclCluster = 4 // resource type: CLUSTER

	aclAll            = 2  // operation: ALL
	aclDescribeTokens = 14 // operation: DESCRIBE_TOKENS, the last one
	aclDeny           = 2  // permission: DENY
	aclAllow          = 3  // permission: ALLOW

	aclWildcard = "*"
	// ClusterResourceName is the one name of the CLUSTER resource.
	ClusterResourceName = "kafka-cluster"
)

// createACLsCmd is one CreateAcls request's bindings.
type createACLsCmd struct {
	ACLs []ACL
}

// deleteACLsCmd is one DeleteAcls request's filters.
type deleteACLsCmd struct {
	Filters []ACLFilter
}

// aclOutcome is what the ACL commands return to their proposer: one error
// per created ACL, or one deletion per filter.
type aclOutcome struct {
	created []error
	deleted []ACLDeletion
}

// Validate reports whether a may be stored, as Kafka's controller checks
// a new binding, plus a principal with its type and a host.
func (a ACL) Validate() error {
	switch {
	case a.ResourceType < aclTopic || a.ResourceType > aclUser:
		return fmt.Errorf("%w: resource type %d", ErrInvalidACL, a.ResourceType)
	case a.PatternType != aclLiteral && a.PatternType != aclPrefix:
		return fmt.Errorf("%w: pattern type %d", ErrInvalidACL, a.PatternType)
	case a.Operation < aclAll || a.Operation > aclDescribeTokens:
		return fmt.Errorf("%w: operation %d", ErrInvalidACL, a.Operation)
	case a.Permission != aclDeny && a.Permission != aclAllow:
		return fmt.Errorf("%w: permission %d", ErrInvalidACL, a.Permission)
	case a.ResourceName == "":
		return fmt.Errorf("%w: empty resource name", ErrInvalidACL)
	case a.ResourceType == aclCluster && a.ResourceName != ClusterResourceName:
		return fmt.Errorf("%w: the only valid name for the CLUSTER resource is %s", ErrInvalidACL, ClusterResourceName)
	case !validPrincipal(a.Principal):
		return fmt.Errorf("%w: principal %q is not of the form Type:name", ErrInvalidACL, a.Principal)
	case a.Host == "":
		return fmt.Errorf("%w: empty host (use * for every host)", ErrInvalidACL)
	}
	return nil
}

func validPrincipal(p string) bool {
	typ, name, ok := strings.Cut(p, ":")
	return ok && typ != "" && name != ""
}

// Validate reports whether f may select ACLs: no UNKNOWN (0) anywhere,
// and values in range.
func (f ACLFilter) Validate() error {
	switch {
	case f.ResourceType < aclAny || f.ResourceType > aclUser:
		return fmt.Errorf("%w: filter resource type %d", ErrInvalidACL, f.ResourceType)
	case f.PatternType < aclAny || f.PatternType > aclPrefix:
		return fmt.Errorf("%w: filter pattern type %d", ErrInvalidACL, f.PatternType)
	case f.Operation < aclAny || f.Operation > aclDescribeTokens:
		return fmt.Errorf("%w: filter operation %d", ErrInvalidACL, f.Operation)
	case f.Permission < aclAny || f.Permission > aclAllow:
		return fmt.Errorf("%w: filter permission %d", ErrInvalidACL, f.Permission)
	}
	return nil
}

// Matches reports whether f selects a, with Kafka's semantics
// (ResourcePatternFilter and AccessControlEntryFilter).
func (f ACLFilter) Matches(a ACL) bool {
	if f.ResourceType != aclAny && f.ResourceType != a.ResourceType {
		return false
	}
	if f.PatternType != aclAny && f.PatternType != aclMatch && f.PatternType != a.PatternType {
		return false
	}
	if f.ResourceName != nil {
		name := *f.ResourceName
		switch {
		case f.PatternType == aclAny || f.PatternType == a.PatternType:
			if name != a.ResourceName {
				return false
			}
		case a.PatternType == aclLiteral: // MATCH
			if name != a.ResourceName && a.ResourceName != aclWildcard {
				return false
			}
		default: // MATCH, PREFIXED
			if !strings.HasPrefix(name, a.ResourceName) {
				return false
			}
		}
	}
	if f.Principal != nil && *f.Principal != a.Principal {
		return false
	}
	if f.Host != nil && *f.Host != a.Host {
		return false
	}
	if f.Operation != aclAny && f.Operation != a.Operation {
		return false
	}
	return f.Permission == aclAny || f.Permission == a.Permission
}

// compareACLs orders ACLs by resource first, so State.ACLs reads as
// Kafka's lists do and equal sets encode to equal bytes.
func compareACLs(a, b ACL) int {
	return cmp.Or(
		cmp.Compare(a.ResourceType, b.ResourceType),
		cmp.Compare(a.ResourceName, b.ResourceName),
		cmp.Compare(a.PatternType, b.PatternType),
		cmp.Compare(a.Principal, b.Principal),
		cmp.Compare(a.Host, b.Host),
		cmp.Compare(a.Operation, b.Operation),
		cmp.Compare(a.Permission, b.Permission),
	)
}

// CreateACLs stores acls and returns one outcome per ACL, in order: nil
// when it is stored (also when it already was: creating is idempotent),
// ErrInvalidACL when it may not be. The error is for the command as a
// whole (not the controller, raft).
func (s *Store) CreateACLs(ctx context.Context, acls []ACL) ([]error, error) {
	if err := s.checkController("CreateAcls"); err != nil {
		return nil, err
	}
	res, err := s.propose(ctx, kindCreateACLs, createACLsCmd{ACLs: acls})
	if err != nil {
		return nil, err
	}
	if res.acl == nil || len(res.acl.created) != len(acls) {
		return nil, fmt.Errorf("%w: CreateAcls outcome missing", errBadCommand)
	}
	return res.acl.created, nil
}

// DeleteACLs deletes the ACLs each filter selects and returns, per
// filter in order, the ACLs it selected (an ACL two filters select is in
// both), or ErrInvalidACL for a filter that may not be used, which
// deletes nothing.
func (s *Store) DeleteACLs(ctx context.Context, filters []ACLFilter) ([]ACLDeletion, error) {
	if err := s.checkController("DeleteAcls"); err != nil {
		return nil, err
	}
	res, err := s.propose(ctx, kindDeleteACLs, deleteACLsCmd{Filters: filters})
	if err != nil {
		return nil, err
	}
	if res.acl == nil || len(res.acl.deleted) != len(filters) {
		return nil, fmt.Errorf("%w: DeleteAcls outcome missing", errBadCommand)
	}
	return res.acl.deleted, nil
}

// ACLsMatching returns the stored ACLs f selects, in State order.
func (s *State) ACLsMatching(f ACLFilter) []ACL {
	var out []ACL
	for _, a := range s.ACLs {
		if f.Matches(a) {
			out = append(out, a)
		}
	}
	return out
}

func applyCreateACLs(s *State, _ uint64, payload []byte) (*State, result) {
	var c createACLsCmd
	if err := decodePayload(payload, &c); err != nil {
		return nil, result{err: err}
	}
	out := &aclOutcome{created: make([]error, len(c.ACLs))}
	var add []ACL
	for i, a := range c.ACLs {
		if err := a.Validate(); err != nil {
			out.created[i] = err
			continue
		}
		if _, found := slices.BinarySearchFunc(s.ACLs, a, compareACLs); !found {
			add = append(add, a)
		}
	}
	if len(add) == 0 {
		return nil, result{acl: out}
	}
	next := s.clone()
	// A new slice: the previous State's is shared, never modified.
	acls := append(slices.Clip(s.ACLs), add...)
	slices.SortFunc(acls, compareACLs)
	next.ACLs = slices.CompactFunc(acls, func(a, b ACL) bool { return a == b })
	return next, result{acl: out}
}

func applyDeleteACLs(s *State, _ uint64, payload []byte) (*State, result) {
	var c deleteACLsCmd
	if err := decodePayload(payload, &c); err != nil {
		return nil, result{err: err}
	}
	out := &aclOutcome{deleted: make([]ACLDeletion, len(c.Filters))}
	gone := make([]bool, len(s.ACLs))
	n := 0
	for i, f := range c.Filters {
		if err := f.Validate(); err != nil {
			out.deleted[i].Err = err
			continue
		}
		for j, a := range s.ACLs {
			if f.Matches(a) {
				out.deleted[i].Deleted = append(out.deleted[i].Deleted, a)
				if !gone[j] {
					gone[j] = true
					n++
				}
			}
		}
	}
	if n == 0 {
		return nil, result{acl: out}
	}
	next := s.clone()
	next.ACLs = nil
	if kept := len(s.ACLs) - n; kept > 0 {
		next.ACLs = make([]ACL, 0, kept)
		for j, a := range s.ACLs {
			if !gone[j] {
				next.ACLs = append(next.ACLs, a)
			}
		}
	}
	return next, result{acl: out}
}

// checkACLs validates a snapshot's ACLs and returns them in State order
// without duplicates.
func checkACLs(acls []ACL) ([]ACL, error) {
	for _, a := range acls {
		if err := a.Validate(); err != nil {
			return nil, err
		}
	}
	if len(acls) == 0 {
		return nil, nil
	}
	acls = slices.Clone(acls)
	slices.SortFunc(acls, compareACLs)
	return slices.CompactFunc(acls, func(a, b ACL) bool { return a == b }), nil
}
