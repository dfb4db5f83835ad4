package acl

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"strata/meta"
)

// b builds an ACL: "TOPIC:LITERAL:orders User:alice 10.0.0.1 READ ALLOW".
func b(t *testing.T, s string) meta.ACL {
	t.Helper()
	f := strings.Fields(s)
	if len(f) != 5 {
		t.Fatalf("bad ACL %q", s)
	}
	res := strings.SplitN(f[0], ":", 3)
	rt, err1 := parseResourceType(res[0])
	pt, err2 := parsePattern(res[1])
	op, err3 := parseOp(f[3])
	perm, err4 := parsePerm(f[4])
	for _, err := range []error{err1, err2, err3, err4} {
		if err != nil {
			t.Fatalf("ACL %q: %v", s, err)
		}
	}
	a := meta.ACL{ResourceType: int8(rt), ResourceName: res[2], PatternType: int8(pt), Principal: f[1], Host: f[2], Operation: int8(op), Permission: int8(perm)}
	if err := a.Validate(); err != nil {
		t.Fatalf("ACL %q: %v", s, err)
	}
	return a
}

func parseResourceType(s string) (ResourceType, error) {
	switch s {
	case "TOPIC":
		return Topic, nil
	case "GROUP":
		return Group, nil
	case "CLUSTER":
		return Cluster, nil
	case "TXN":
		return TransactionalID, nil
	}
	return 0, errBad(s)
}

func parsePattern(s string) (PatternType, error) {
	switch s {
	case "LITERAL":
		return Literal, nil
	case "PREFIXED":
		return Prefixed, nil
	}
	return 0, errBad(s)
}

func parseOp(s string) (Operation, error) {
	for op := All; op <= DescribeTokens; op++ {
		if op.String() == s {
			return op, nil
		}
	}
	return 0, errBad(s)
}

func parsePerm(s string) (Permission, error) {
	switch s {
	case "ALLOW":
		return Allow, nil
	case "DENY":
		return Deny, nil
	}
	return 0, errBad(s)
}

type errBad string

func (e errBad) Error() string { return "unknown " + string(e) }

// The decisions of Kafka's StandardAuthorizer, as a table: every row is
// a set of ACLs, a request, and the answer.
func TestDecisions(t *testing.T) {
	alice := Client{Principal: "User:alice", Host: "10.0.0.1"}
	bob := Client{Principal: "User:bob", Host: "10.0.0.2"}
	root := Client{Principal: "User:root", Host: "10.0.0.9"}
	type ask struct {
		c    Client
		op   Operation
		rt   ResourceType
		name string
	}
	for _, tc := range []struct {
		name          string
		acls          []string
		allowEveryone bool
		ask           ask
		want          bool
	}{
		{"no ACLs: denied", nil, false, ask{alice, Read, Topic, "orders"}, false},
		{"no ACLs, allow everyone", nil, true, ask{alice, Read, Topic, "orders"}, true},
		{"super user despite deny", []string{"TOPIC:LITERAL:orders User:root * READ DENY"}, false, ask{root, Read, Topic, "orders"}, true},
		{"literal allow", []string{"TOPIC:LITERAL:orders User:alice * READ ALLOW"}, false, ask{alice, Read, Topic, "orders"}, true},
		{"literal allow is not a prefix", []string{"TOPIC:LITERAL:orders User:alice * READ ALLOW"}, false, ask{alice, Read, Topic, "orders-eu"}, false},
		{"literal allow, other op", []string{"TOPIC:LITERAL:orders User:alice * READ ALLOW"}, false, ask{alice, Write, Topic, "orders"}, false},
		{"literal allow, other principal", []string{"TOPIC:LITERAL:orders User:alice * READ ALLOW"}, false, ask{bob, Read, Topic, "orders"}, false},
		{"literal allow, other type", []string{"TOPIC:LITERAL:orders User:alice * READ ALLOW"}, false, ask{alice, Read, Group, "orders"}, false},
		{"prefixed allow", []string{"TOPIC:PREFIXED:ord User:alice * WRITE ALLOW"}, false, ask{alice, Write, Topic, "orders"}, true},
		{"prefixed equal to the name", []string{"TOPIC:PREFIXED:orders User:alice * WRITE ALLOW"}, false, ask{alice, Write, Topic, "orders"}, true},
		{"prefixed, not a prefix", []string{"TOPIC:PREFIXED:pay User:alice * WRITE ALLOW"}, false, ask{alice, Write, Topic, "orders"}, false},
		{"prefixed longer than the name", []string{"TOPIC:PREFIXED:orders-eu User:alice * WRITE ALLOW"}, false, ask{alice, Write, Topic, "orders"}, false},
		{"wildcard resource", []string{"TOPIC:LITERAL:* User:alice * READ ALLOW"}, false, ask{alice, Read, Topic, "anything"}, true},
		{"prefixed * is not a wildcard", []string{"TOPIC:PREFIXED:* User:alice * READ ALLOW"}, false, ask{alice, Read, Topic, "anything"}, false},
		{"wildcard principal", []string{"TOPIC:LITERAL:orders User:* * READ ALLOW"}, false, ask{bob, Read, Topic, "orders"}, true},
		{"host must match", []string{"TOPIC:LITERAL:orders User:alice 10.0.0.2 READ ALLOW"}, false, ask{alice, Read, Topic, "orders"}, false},
		{"host matches", []string{"TOPIC:LITERAL:orders User:alice 10.0.0.1 READ ALLOW"}, false, ask{alice, Read, Topic, "orders"}, true},
		{"ALL allows every op", []string{"TOPIC:LITERAL:orders User:alice * ALL ALLOW"}, false, ask{alice, AlterConfigs, Topic, "orders"}, true},
		{"deny wins over allow", []string{"TOPIC:LITERAL:orders User:alice * READ ALLOW", "TOPIC:LITERAL:orders User:alice * READ DENY"}, false, ask{alice, Read, Topic, "orders"}, false},
		{"prefixed deny wins over literal allow", []string{"TOPIC:LITERAL:orders User:alice * READ ALLOW", "TOPIC:PREFIXED:or User:alice * READ DENY"}, false, ask{alice, Read, Topic, "orders"}, false},
		{"wildcard deny wins", []string{"TOPIC:LITERAL:orders User:alice * READ ALLOW", "TOPIC:LITERAL:* User:* * READ DENY"}, false, ask{alice, Read, Topic, "orders"}, false},
		{"ALL deny wins", []string{"TOPIC:LITERAL:orders User:alice * READ ALLOW", "TOPIC:LITERAL:orders User:alice * ALL DENY"}, false, ask{alice, Read, Topic, "orders"}, false},
		{"deny from another host does not apply", []string{"TOPIC:LITERAL:orders User:alice * READ ALLOW", "TOPIC:LITERAL:orders User:alice 10.9.9.9 READ DENY"}, false, ask{alice, Read, Topic, "orders"}, true},
		{"deny of another principal does not apply", []string{"TOPIC:LITERAL:orders User:* * READ ALLOW", "TOPIC:LITERAL:orders User:bob * READ DENY"}, false, ask{alice, Read, Topic, "orders"}, true},
		{"READ implies DESCRIBE", []string{"TOPIC:LITERAL:orders User:alice * READ ALLOW"}, false, ask{alice, Describe, Topic, "orders"}, true},
		{"WRITE implies DESCRIBE", []string{"TOPIC:LITERAL:orders User:alice * WRITE ALLOW"}, false, ask{alice, Describe, Topic, "orders"}, true},
		{"DELETE implies DESCRIBE", []string{"TOPIC:LITERAL:orders User:alice * DELETE ALLOW"}, false, ask{alice, Describe, Topic, "orders"}, true},
		{"ALTER implies DESCRIBE", []string{"TOPIC:LITERAL:orders User:alice * ALTER ALLOW"}, false, ask{alice, Describe, Topic, "orders"}, true},
		{"CREATE does not imply DESCRIBE", []string{"TOPIC:LITERAL:orders User:alice * CREATE ALLOW"}, false, ask{alice, Describe, Topic, "orders"}, false},
		{"ALTER_CONFIGS implies DESCRIBE_CONFIGS", []string{"TOPIC:LITERAL:orders User:alice * ALTER_CONFIGS ALLOW"}, false, ask{alice, DescribeConfigs, Topic, "orders"}, true},
		{"DESCRIBE does not imply READ", []string{"TOPIC:LITERAL:orders User:alice * DESCRIBE ALLOW"}, false, ask{alice, Read, Topic, "orders"}, false},
		{"a DENY of READ does not deny DESCRIBE", []string{"TOPIC:LITERAL:orders User:alice * WRITE ALLOW", "TOPIC:LITERAL:orders User:alice * READ DENY"}, false, ask{alice, Describe, Topic, "orders"}, true},
		{"a DENY of DESCRIBE denies what READ implied", []string{"TOPIC:LITERAL:orders User:alice * READ ALLOW", "TOPIC:LITERAL:orders User:alice * DESCRIBE DENY"}, false, ask{alice, Describe, Topic, "orders"}, false},
		{"allow everyone: an ACL on the resource for someone else denies", []string{"TOPIC:LITERAL:orders User:bob * READ ALLOW"}, true, ask{alice, Read, Topic, "orders"}, false},
		{"allow everyone: an ACL for another op on the resource denies", []string{"TOPIC:LITERAL:orders User:alice * WRITE ALLOW"}, true, ask{alice, Read, Topic, "orders"}, false},
		{"allow everyone: ACLs on other resources only", []string{"TOPIC:LITERAL:payments User:bob * READ ALLOW", "GROUP:LITERAL:orders User:bob * READ ALLOW"}, true, ask{alice, Read, Topic, "orders"}, true},
		{"allow everyone: a prefixed ACL covers the resource", []string{"TOPIC:PREFIXED:ord User:bob * READ ALLOW"}, true, ask{alice, Read, Topic, "orders"}, false},
		{"cluster", []string{"CLUSTER:LITERAL:kafka-cluster User:alice * ALTER ALLOW"}, false, ask{alice, Alter, Cluster, ClusterName}, true},
		{"cluster, other op", []string{"CLUSTER:LITERAL:kafka-cluster User:alice * ALTER ALLOW"}, false, ask{alice, ClusterAction, Cluster, ClusterName}, false},
		{"transactional id prefixed", []string{"TXN:PREFIXED:app- User:alice * WRITE ALLOW"}, false, ask{alice, Write, TransactionalID, "app-1"}, true},
		{"group", []string{"GROUP:LITERAL:g User:alice * READ ALLOW"}, false, ask{alice, Read, Group, "g"}, true},
		{"many prefixes, the longest denies", []string{"TOPIC:PREFIXED:o User:alice * READ ALLOW", "TOPIC:PREFIXED:orders-e User:alice * READ DENY", "TOPIC:PREFIXED:ord User:alice * READ ALLOW"}, false, ask{alice, Read, Topic, "orders-eu"}, false},
		{"many prefixes, none denies", []string{"TOPIC:PREFIXED:o User:alice * READ ALLOW", "TOPIC:PREFIXED:orders-e User:alice * READ DENY", "TOPIC:PREFIXED:ord User:alice * READ ALLOW"}, false, ask{alice, Read, Topic, "orders-us"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var acls []meta.ACL
			for _, s := range tc.acls {
				acls = append(acls, b(t, s))
			}
			a := New(Config{SuperUsers: []string{"User:root"}, AllowEveryoneIfNoACLFound: tc.allowEveryone}, func() []meta.ACL { return acls })
			if got := a.Authorize(tc.ask.c, tc.ask.op, tc.ask.rt, tc.ask.name); got != tc.want {
				t.Fatalf("Authorize(%s %s %s:%s) = %v, want %v", tc.ask.c.Principal, tc.ask.op, tc.ask.rt, tc.ask.name, got, tc.want)
			}
		})
	}
}

// Without an authorizer, everything is allowed and every operation is
// in the authorized-operations fields.
func TestNilAuthorizerAllows(t *testing.T) {
	var a *Authorizer
	c := Client{Principal: "User:ANONYMOUS", Host: "127.0.0.1"}
	if !a.Authorize(c, Delete, Topic, "x") || !a.AuthorizeByResourceType(c, Write, Topic) {
		t.Fatal("nil authorizer denied")
	}
	if got, want := a.AuthorizedOperations(c, Group, "g"), int32(1<<Read|1<<Describe|1<<Delete|1<<DescribeConfigs|1<<AlterConfigs); got != want {
		t.Fatalf("authorized operations %b, want %b", got, want)
	}
}

func TestAuthorizedOperations(t *testing.T) {
	acls := []meta.ACL{b(t, "TOPIC:LITERAL:t User:alice * WRITE ALLOW"), b(t, "TOPIC:PREFIXED:t User:alice * ALTER_CONFIGS ALLOW")}
	a := New(Config{}, func() []meta.ACL { return acls })
	got := a.AuthorizedOperations(Client{Principal: "User:alice", Host: "h"}, Topic, "t")
	if want := int32(1<<Write | 1<<Describe | 1<<AlterConfigs | 1<<DescribeConfigs); got != want {
		t.Fatalf("authorized operations %b, want %b", got, want)
	}
}

// authorizeByResourceType, as Kafka's default implementation decides it.
func TestAuthorizeByResourceType(t *testing.T) {
	alice := Client{Principal: "User:alice", Host: "10.0.0.1"}
	for _, tc := range []struct {
		name          string
		acls          []string
		allowEveryone bool
		want          bool
	}{
		{"nothing", nil, false, false},
		{"nothing, allow everyone", nil, true, true},
		{"a literal allow", []string{"TOPIC:LITERAL:t User:alice * WRITE ALLOW"}, false, true},
		{"a literal allow denied literally", []string{"TOPIC:LITERAL:t User:alice * WRITE ALLOW", "TOPIC:LITERAL:t User:alice * WRITE DENY"}, false, false},
		{"a literal allow under a prefixed deny", []string{"TOPIC:LITERAL:team-t User:alice * WRITE ALLOW", "TOPIC:PREFIXED:team User:alice * WRITE DENY"}, false, false},
		{"a prefixed allow under a shorter prefixed deny", []string{"TOPIC:PREFIXED:team-a User:alice * WRITE ALLOW", "TOPIC:PREFIXED:team User:* * WRITE DENY"}, false, false},
		{"a prefixed allow beside a longer prefixed deny", []string{"TOPIC:PREFIXED:team User:alice * WRITE ALLOW", "TOPIC:PREFIXED:team-a User:alice * WRITE DENY"}, false, true},
		{"a wildcard deny", []string{"TOPIC:LITERAL:t User:alice * WRITE ALLOW", "TOPIC:LITERAL:* User:alice * WRITE DENY"}, false, false},
		{"a wildcard allow", []string{"TOPIC:LITERAL:* User:alice * ALL ALLOW"}, false, true},
		{"another op", []string{"TOPIC:LITERAL:t User:alice * READ ALLOW"}, false, false},
		{"another host", []string{"TOPIC:LITERAL:t User:alice 10.9.9.9 WRITE ALLOW"}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var acls []meta.ACL
			for _, s := range tc.acls {
				acls = append(acls, b(t, s))
			}
			a := New(Config{AllowEveryoneIfNoACLFound: tc.allowEveryone}, func() []meta.ACL { return acls })
			if got := a.AuthorizeByResourceType(alice, Write, Topic); got != tc.want {
				t.Fatalf("= %v, want %v", got, tc.want)
			}
		})
	}
}

// The index follows the source: a new slice is a new set of ACLs.
func TestIndexFollowsSource(t *testing.T) {
	var acls []meta.ACL
	a := New(Config{}, func() []meta.ACL { return acls })
	alice := Client{Principal: "User:alice", Host: "h"}
	if a.Authorize(alice, Read, Topic, "t") {
		t.Fatal("allowed with no ACLs")
	}
	acls = []meta.ACL{b(t, "TOPIC:LITERAL:t User:alice * READ ALLOW")}
	if !a.Authorize(alice, Read, Topic, "t") {
		t.Fatal("the new ACL does not apply")
	}
	acls = nil
	if a.Authorize(alice, Read, Topic, "t") {
		t.Fatal("the deleted ACL still applies")
	}
}

// Denials are counted every time and logged once per interval.
func TestDenialLogRateLimited(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	reg := prometheus.NewRegistry()
	a := New(Config{Logger: slog.New(slog.NewTextHandler(&buf, nil)), Registerer: reg, Now: func() time.Time { return now }}, func() []meta.ACL { return nil })
	alice := Client{Principal: "User:alice", Host: "h", API: "Produce"}
	for range 5 {
		a.Authorize(alice, Write, Topic, "t")
	}
	a.Authorize(alice, Write, Topic, "u")
	a.Allowed(alice, Write, Topic, "quiet")
	if n := strings.Count(buf.String(), "authorization denied"); n != 2 {
		t.Fatalf("%d lines logged, want 2:\n%s", n, buf.String())
	}
	for _, want := range []string{"principal=User:alice", "operation=WRITE", "resource=TOPIC:t", "api=Produce"} {
		if !strings.Contains(buf.String(), want) {
			t.Fatalf("log lacks %q:\n%s", want, buf.String())
		}
	}
	now = now.Add(DenialLogInterval)
	a.Authorize(alice, Write, Topic, "t")
	if n := strings.Count(buf.String(), "authorization denied"); n != 3 {
		t.Fatalf("%d lines logged after the interval, want 3", n)
	}
	var m dto.Metric
	if err := a.denials.WithLabelValues("WRITE", "TOPIC").Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 7 {
		t.Fatalf("denials counted %v, want 7", got)
	}
}
