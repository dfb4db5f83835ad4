// Package acl is the broker's authorizer: whether a principal connecting
// from a host may perform an operation on a resource, decided from the
// ACLs in the cluster metadata (meta.State.ACLs) with the semantics of
// Kafka's StandardAuthorizer (and AclAuthorizer before it):
//
//   - Super users (Config.SuperUsers, in Kafka's "User:name" form) may do
//     everything, whatever the ACLs say.
//   - The ACLs that apply to a resource are its literal ones, the literal
//     wildcard "*" of its type, and the prefixed ones whose prefix starts
//     its name; of those, an ACL applies to a request when its principal
//     is the request's or "User:*", its host the client's address or "*",
//     and its operation the one asked for or ALL.
//   - A DENY that applies wins over any ALLOW. An ALLOW of READ, WRITE,
//     DELETE or ALTER implies DESCRIBE, and one of ALTER_CONFIGS implies
//     DESCRIBE_CONFIGS; a DENY implies nothing.
//   - With no ACL at all on the resource (whatever its principal, host or
//     operation), the answer is Config.AllowEveryoneIfNoACLFound, false by
//     default (allow.everyone.if.no.acl.found).
//
// A nil *Authorizer is the broker without one: everything is allowed, as
// in Kafka with no authorizer. Decisions are pure functions of the
// ACLs and the request; denials the client asked about explicitly are
// logged, at most once per principal, operation and resource every
// DenialLogInterval, and counted in strata_authorization_denials_total.
package acl

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/meta"
)

// The vocabulary is the wire's: kmsg's enumerations, named here for
// short. Their String methods give Kafka's names (READ, TRANSACTIONAL_ID,
// ...), and kmsg's Parse functions read them.
type (
	Operation    = kmsg.ACLOperation
	ResourceType = kmsg.ACLResourceType
	PatternType  = kmsg.ACLResourcePatternType
	Permission   = kmsg.ACLPermissionType
)

const (
	All             = kmsg.ACLOperationAll
	Read            = kmsg.ACLOperationRead
	Write           = kmsg.ACLOperationWrite
	Create          = kmsg.ACLOperationCreate
	Delete          = kmsg.ACLOperationDelete
	Alter           = kmsg.ACLOperationAlter
	Describe        = kmsg.ACLOperationDescribe
	ClusterAction   = kmsg.ACLOperationClusterAction
	DescribeConfigs = kmsg.ACLOperationDescribeConfigs
	AlterConfigs    = kmsg.ACLOperationAlterConfigs
	IdempotentWrite = kmsg.ACLOperationIdempotentWrite
	CreateTokens    = kmsg.ACLOperationCreateTokens
	DescribeTokens  = kmsg.ACLOperationDescribeTokens

	Topic           = kmsg.ACLResourceTypeTopic
	Group           = kmsg.ACLResourceTypeGroup
	Cluster         = kmsg.ACLResourceTypeCluster
	TransactionalID = kmsg.ACLResourceTypeTransactionalId
	DelegationToken = kmsg.ACLResourceTypeDelegationToken
	User            = kmsg.ACLResourceTypeUser

	Literal  = kmsg.ACLResourcePatternTypeLiteral
	Prefixed = kmsg.ACLResourcePatternTypePrefixed

	Allow = kmsg.ACLPermissionTypeAllow
	Deny  = kmsg.ACLPermissionTypeDeny
)

// ClusterName is the name of the one CLUSTER resource.
const ClusterName = meta.ClusterResourceName

// Wildcards: the literal resource name, principal and host that match
// every one.
const (
	WildcardResource  = "*"
	WildcardPrincipal = "User:*"
	WildcardHost      = "*"
)

// DenialLogInterval is how often the same denial (principal, operation,
// resource) is logged at most.
const DenialLogInterval = 10 * time.Second

// SupportedOperations are the operations that mean something on each
// resource type, in Kafka's order; authorized-operations fields are
// computed over them.
var SupportedOperations = map[ResourceType][]Operation{
	Topic:           {Read, Write, Create, Describe, Delete, Alter, DescribeConfigs, AlterConfigs},
	Group:           {Read, Describe, Delete, DescribeConfigs, AlterConfigs},
	Cluster:         {Create, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite, Alter, Describe},
	TransactionalID: {Describe, Write},
	DelegationToken: {Describe},
	User:            {CreateTokens, DescribeTokens},
}

// Config configures an Authorizer.
type Config struct {
	// SuperUsers may do everything (super.users), each in Kafka's
	// "Type:name" form.
	SuperUsers []string
	// AllowEveryoneIfNoACLFound allows what no ACL on the resource
	// speaks of (allow.everyone.if.no.acl.found).
	AllowEveryoneIfNoACLFound bool
	// Logger receives the denials; nil discards them.
	Logger *slog.Logger
	// Registerer receives strata_authorization_denials_total; nil
	// registers it nowhere.
	Registerer prometheus.Registerer
	// Now is the clock of the denial log's rate limit; nil is time.Now.
	Now func() time.Time
}

// Client is who asks: the request's principal, the client's address
// (an IP, without port) and, for the denial log, the API it called.
type Client struct {
	Principal string
	Host      string
	API       string
}

// Authorizer decides requests against the ACLs its source returns. It is
// safe for concurrent use.
type Authorizer struct {
	cfg    Config
	supers map[string]bool
	source func() []meta.ACL
	now    func() time.Time

	// idx is the index of the ACLs last seen; rebuilt when the source
	// returns another slice (meta replaces the slice whenever the ACLs
	// change, and never modifies one).
	idx atomic.Pointer[index]

	denials *prometheus.CounterVec // operation, resource_type

	// logMu guards logged: when each denial was last logged.
	logMu  sync.Mutex
	logged map[denial]time.Time
}

type denial struct {
	principal string
	op        Operation
	rt        ResourceType
	name      string
}

// New returns an authorizer over the ACLs source returns (typically the
// current metadata State's). Validate cfg first.
func New(cfg Config, source func() []meta.ACL) *Authorizer {
	a := &Authorizer{
		cfg:    cfg,
		supers: map[string]bool{},
		source: source,
		now:    cfg.Now,
		logged: map[denial]time.Time{},
	}
	if a.now == nil {
		a.now = time.Now
	}
	if a.cfg.Logger == nil {
		a.cfg.Logger = slog.New(slog.DiscardHandler)
	}
	for _, s := range cfg.SuperUsers {
		a.supers[s] = true
	}
	a.denials = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "strata_authorization_denials_total",
		Help: "Requests (or parts of requests) the authorizer refused, by operation and resource type.",
	}, []string{"operation", "resource_type"})
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(a.denials)
	}
	return a
}

// ValidatePrincipal checks a principal's form, "Type:name".
func ValidatePrincipal(p string) error {
	typ, name, ok := strings.Cut(p, ":")
	if !ok || typ == "" || name == "" {
		return fmt.Errorf("principal %q is not of the form Type:name (e.g. User:alice)", p)
	}
	return nil
}

// Validate checks the super users' form.
func (c Config) Validate() error {
	for _, s := range c.SuperUsers {
		if err := ValidatePrincipal(s); err != nil {
			return fmt.Errorf("super user: %w", err)
		}
	}
	return nil
}

// Authorize reports whether c may do op on the resource rt named name,
// and logs and counts a denial: for what the client named explicitly.
func (a *Authorizer) Authorize(c Client, op Operation, rt ResourceType, name string) bool {
	if a.Allowed(c, op, rt, name) {
		return true
	}
	a.denied(c, op, rt, name)
	return false
}

// Allowed is Authorize without the log: for filtering what the client
// did not name (all topics in Metadata, the groups ListGroups lists) and
// for authorized-operations fields.
func (a *Authorizer) Allowed(c Client, op Operation, rt ResourceType, name string) bool {
	if a == nil || a.supers[c.Principal] {
		return true
	}
	return decide(a.index(), a.cfg.AllowEveryoneIfNoACLFound, c, op, rt, name)
}

// AuthorizedOperations is the authorized-operations bit field of a
// resource (KIP-430): bit n set when operation n is allowed, over the
// type's SupportedOperations.
func (a *Authorizer) AuthorizedOperations(c Client, rt ResourceType, name string) int32 {
	var bits int32
	for _, op := range SupportedOperations[rt] {
		if a.Allowed(c, op, rt, name) {
			bits |= 1 << op
		}
	}
	return bits
}

// AuthorizeByResourceType reports whether c may do op on at least one
// resource of type rt, as Kafka's Authorizer.authorizeByResourceType
// decides (KIP-679: an idempotent producer with WRITE on some topic): a
// resource named "hardcode" allowed (super users, no ACLs at all with
// AllowEveryoneIfNoACLFound) is enough; otherwise some ALLOW of op or ALL
// for c must not be covered by a DENY: a wildcard DENY covers
// everything, a literal DENY its name, a prefixed DENY every name under
// it.
func (a *Authorizer) AuthorizeByResourceType(c Client, op Operation, rt ResourceType) bool {
	if a.Allowed(c, op, rt, "hardcode") {
		return true
	}
	if byResourceType(a.index().types[rt], c, op) {
		return true
	}
	a.denied(c, op, rt, "*")
	return false
}

func byResourceType(ti *typeIndex, c Client, op Operation) bool {
	if ti == nil {
		return false
	}
	denyLiteral, denyPrefix := map[string]bool{}, map[string]bool{}
	var allowLiteral, allowPrefix []string
	for _, acl := range ti.all {
		if !principalMatches(acl.Principal, c.Principal) || !hostMatches(acl.Host, c.Host) {
			continue
		}
		if o := Operation(acl.Operation); o != op && o != All {
			continue
		}
		literal := PatternType(acl.PatternType) == Literal
		switch Permission(acl.Permission) {
		case Deny:
			if literal && acl.ResourceName == WildcardResource {
				return false
			}
			if literal {
				denyLiteral[acl.ResourceName] = true
			} else {
				denyPrefix[acl.ResourceName] = true
			}
		case Allow:
			if literal && acl.ResourceName == WildcardResource {
				return true // Kafka: a wildcard allow, once no wildcard deny
			}
			if literal {
				allowLiteral = append(allowLiteral, acl.ResourceName)
			} else {
				allowPrefix = append(allowPrefix, acl.ResourceName)
			}
		}
	}
	dominated := func(name string) bool {
		for i := 1; i <= len(name); i++ {
			if denyPrefix[name[:i]] {
				return true
			}
		}
		return false
	}
	for _, name := range allowLiteral {
		if !denyLiteral[name] && !dominated(name) {
			return true
		}
	}
	for _, name := range allowPrefix {
		if !dominated(name) {
			return true
		}
	}
	return false
}

// decide is the decision for someone who is not a super user, as
// StandardAuthorizerData.findAclRule makes it.
func decide(idx *index, allowEveryone bool, c Client, op Operation, rt ResourceType, name string) bool {
	ti := idx.types[rt]
	if ti == nil {
		return allowEveryone
	}
	found, allowed := false, false
	check := func(acls []meta.ACL) bool { // true: a DENY applies
		for _, acl := range acls {
			found = true
			switch applies(acl, c, op) {
			case Deny:
				return true
			case Allow:
				allowed = true
			}
		}
		return false
	}
	if check(ti.literal[name]) || check(ti.literal[WildcardResource]) {
		return false
	}
	for _, n := range ti.prefixLens {
		if n > len(name) {
			break
		}
		if check(ti.prefixed[name[:n]]) {
			return false
		}
	}
	if allowed {
		return true
	}
	return !found && allowEveryone
}

// applies returns the permission of acl for c doing op, or 0 when acl
// does not apply to it (StandardAuthorizerData.findResult).
func applies(acl meta.ACL, c Client, op Operation) Permission {
	if !principalMatches(acl.Principal, c.Principal) || !hostMatches(acl.Host, c.Host) {
		return 0
	}
	perm, aop := Permission(acl.Permission), Operation(acl.Operation)
	if aop != All && aop != op {
		if perm != Allow {
			return 0
		}
		switch op {
		case Describe:
			if aop != Read && aop != Write && aop != Delete && aop != Alter {
				return 0
			}
		case DescribeConfigs:
			if aop != AlterConfigs {
				return 0
			}
		default:
			return 0
		}
	}
	return perm
}

func principalMatches(acl, p string) bool { return acl == p || acl == WildcardPrincipal }
func hostMatches(acl, h string) bool      { return acl == h || acl == WildcardHost }

// index is the ACLs arranged for lookups by resource.
type index struct {
	src   []meta.ACL
	types map[ResourceType]*typeIndex
}

type typeIndex struct {
	literal  map[string][]meta.ACL // by name, "*" included
	prefixed map[string][]meta.ACL // by prefix
	// prefixLens are the prefixes' distinct lengths, ascending: a name
	// is looked up under each of its prefixes of those lengths only.
	prefixLens []int
	all        []meta.ACL
}

func (a *Authorizer) index() *index {
	acls := a.source()
	if idx := a.idx.Load(); idx != nil && sameSlice(idx.src, acls) {
		return idx
	}
	idx := buildIndex(acls)
	a.idx.Store(idx)
	return idx
}

func sameSlice(x, y []meta.ACL) bool {
	return len(x) == len(y) && (len(x) == 0 || &x[0] == &y[0])
}

func buildIndex(acls []meta.ACL) *index {
	idx := &index{src: acls, types: map[ResourceType]*typeIndex{}}
	for _, acl := range acls {
		rt := ResourceType(acl.ResourceType)
		ti := idx.types[rt]
		if ti == nil {
			ti = &typeIndex{literal: map[string][]meta.ACL{}, prefixed: map[string][]meta.ACL{}}
			idx.types[rt] = ti
		}
		ti.all = append(ti.all, acl)
		if PatternType(acl.PatternType) == Prefixed {
			if _, ok := ti.prefixed[acl.ResourceName]; !ok {
				ti.prefixLens = append(ti.prefixLens, len(acl.ResourceName))
			}
			ti.prefixed[acl.ResourceName] = append(ti.prefixed[acl.ResourceName], acl)
		} else {
			ti.literal[acl.ResourceName] = append(ti.literal[acl.ResourceName], acl)
		}
	}
	for _, ti := range idx.types {
		ti.prefixLens = sortedUnique(ti.prefixLens)
	}
	return idx
}

func sortedUnique(xs []int) []int {
	// Few distinct lengths: insertion sort.
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j] < xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
	out := xs[:0]
	for i, x := range xs {
		if i == 0 || x != xs[i-1] {
			out = append(out, x)
		}
	}
	return out
}

// maxLogged bounds the denial log's memory: past it, entries older than
// the interval are dropped, and all of them if none is.
const maxLogged = 4096

// denied counts a denial and logs it unless the same one was logged
// within DenialLogInterval.
func (a *Authorizer) denied(c Client, op Operation, rt ResourceType, name string) {
	a.denials.WithLabelValues(op.String(), rt.String()).Inc()
	key := denial{c.Principal, op, rt, name}
	now := a.now()
	a.logMu.Lock()
	last, seen := a.logged[key]
	if seen && now.Sub(last) < DenialLogInterval {
		a.logMu.Unlock()
		return
	}
	if len(a.logged) >= maxLogged {
		for k, t := range a.logged {
			if now.Sub(t) >= DenialLogInterval {
				delete(a.logged, k)
			}
		}
		if len(a.logged) >= maxLogged {
			clear(a.logged)
		}
	}
	a.logged[key] = now
	a.logMu.Unlock()
	a.cfg.Logger.Info("authorization denied", "principal", c.Principal, "host", c.Host,
		"operation", op.String(), "resource", rt.String()+":"+name, "api", c.API)
}
