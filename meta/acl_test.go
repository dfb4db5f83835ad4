package meta

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// Kinds are persisted: these two were given their numbers.
func TestACLKindNumbers(t *testing.T) {
	if kindCreateACLs != 16 || kindDeleteACLs != 17 {
		t.Fatalf("kindCreateACLs = %d, kindDeleteACLs = %d; want 16 and 17", kindCreateACLs, kindDeleteACLs)
	}
}

func strp(s string) *string { return &s }

func allowTopic(principal, name string, pattern, op int8) ACL {
	return ACL{ResourceType: aclTopic, ResourceName: name, PatternType: pattern, Principal: principal, Host: "*", Operation: op, Permission: aclAllow}
}

const (
	opRead  = 3
	opWrite = 4
)

func TestCreateACLs(t *testing.T) {
	h := newHarness(t)
	a := allowTopic("User:alice", "orders", aclLiteral, opRead)
	b := allowTopic("User:bob", "ord", aclPrefix, opWrite)
	bad := []ACL{
		{ResourceType: 0, ResourceName: "x", PatternType: aclLiteral, Principal: "User:a", Host: "*", Operation: opRead, Permission: aclAllow},
		{ResourceType: aclTopic, ResourceName: "x", PatternType: aclMatch, Principal: "User:a", Host: "*", Operation: opRead, Permission: aclAllow},
		{ResourceType: aclTopic, ResourceName: "x", PatternType: aclLiteral, Principal: "alice", Host: "*", Operation: opRead, Permission: aclAllow},
		{ResourceType: aclTopic, ResourceName: "", PatternType: aclLiteral, Principal: "User:a", Host: "*", Operation: opRead, Permission: aclAllow},
		{ResourceType: aclCluster, ResourceName: "other", PatternType: aclLiteral, Principal: "User:a", Host: "*", Operation: opRead, Permission: aclAllow},
		{ResourceType: aclTopic, ResourceName: "x", PatternType: aclLiteral, Principal: "User:a", Host: "*", Operation: aclAny, Permission: aclAllow},
		{ResourceType: aclTopic, ResourceName: "x", PatternType: aclLiteral, Principal: "User:a", Host: "*", Operation: opRead, Permission: aclAny},
	}
	res := h.must(kindCreateACLs, createACLsCmd{ACLs: append([]ACL{b, a, a}, bad...)})
	for i, err := range res.acl.created {
		if want := i >= 3; (err != nil) != want || want && !errors.Is(err, ErrInvalidACL) {
			t.Errorf("outcome %d = %v", i, err)
		}
	}
	if got, want := h.f.state().ACLs, []ACL{b, a}; !reflect.DeepEqual(got, want) {
		// "ord" sorts before "orders".
		t.Fatalf("ACLs = %+v, want %+v", got, want)
	}
	// Creating again changes nothing and succeeds.
	before := h.f.state()
	res = h.must(kindCreateACLs, createACLsCmd{ACLs: []ACL{a}})
	if res.acl.created[0] != nil || h.f.state() != before {
		t.Fatalf("re-create: %v, state changed: %v", res.acl.created[0], h.f.state() != before)
	}
}

// DeleteAcls' filters, with Kafka's ANY and MATCH semantics.
func TestDeleteACLsFilters(t *testing.T) {
	lit := allowTopic("User:alice", "orders", aclLiteral, opRead)
	wild := allowTopic("User:alice", "*", aclLiteral, opRead)
	pre := allowTopic("User:bob", "ord", aclPrefix, opWrite)
	other := allowTopic("User:bob", "payments", aclLiteral, opWrite)
	deny := lit
	deny.Permission = aclDeny
	group := ACL{ResourceType: 3, ResourceName: "orders", PatternType: aclLiteral, Principal: "User:alice", Host: "10.0.0.1", Operation: opRead, Permission: aclAllow}
	all := []ACL{lit, wild, pre, other, deny, group}

	anyF := ACLFilter{ResourceType: aclAny, PatternType: aclAny, Operation: aclAny, Permission: aclAny}
	for _, tc := range []struct {
		name string
		f    ACLFilter
		want []ACL
	}{
		{"any", anyF, all},
		{"literal name, any pattern: exact names only", func() ACLFilter {
			f := anyF
			f.ResourceName = strp("orders")
			return f
		}(), []ACL{lit, deny, group}},
		{"match: literal, wildcard and prefixes", func() ACLFilter {
			f := anyF
			f.ResourceType, f.PatternType, f.ResourceName = aclTopic, aclMatch, strp("orders")
			return f
		}(), []ACL{lit, wild, pre, deny}},
		{"prefixed pattern only", func() ACLFilter {
			f := anyF
			f.PatternType = aclPrefix
			return f
		}(), []ACL{pre}},
		{"principal, host, operation, permission", func() ACLFilter {
			f := anyF
			f.Principal, f.Host, f.Operation, f.Permission = strp("User:alice"), strp("10.0.0.1"), opRead, aclAllow
			return f
		}(), []ACL{group}},
		{"deny only", func() ACLFilter {
			f := anyF
			f.Permission = aclDeny
			return f
		}(), []ACL{deny}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.must(kindCreateACLs, createACLsCmd{ACLs: all})
			if got := h.f.state().ACLsMatching(tc.f); !sameACLs(got, tc.want) {
				t.Fatalf("ACLsMatching = %+v, want %+v", got, tc.want)
			}
			res := h.must(kindDeleteACLs, deleteACLsCmd{Filters: []ACLFilter{tc.f}})
			d := res.acl.deleted[0]
			if d.Err != nil || !sameACLs(d.Deleted, tc.want) {
				t.Fatalf("deleted %+v (%v), want %+v", d.Deleted, d.Err, tc.want)
			}
			if left := h.f.state().ACLs; len(left) != len(all)-len(tc.want) {
				t.Fatalf("%d ACLs left, want %d", len(left), len(all)-len(tc.want))
			}
		})
	}

	// A filter with UNKNOWN fails alone; the others delete.
	h := newHarness(t)
	h.must(kindCreateACLs, createACLsCmd{ACLs: all})
	f := anyF
	f.Principal = strp("User:bob")
	res := h.must(kindDeleteACLs, deleteACLsCmd{Filters: []ACLFilter{{}, f, f}})
	if !errors.Is(res.acl.deleted[0].Err, ErrInvalidACL) || len(res.acl.deleted[0].Deleted) != 0 {
		t.Fatalf("unknown filter: %+v", res.acl.deleted[0])
	}
	if !sameACLs(res.acl.deleted[1].Deleted, []ACL{pre, other}) || !sameACLs(res.acl.deleted[2].Deleted, []ACL{pre, other}) {
		t.Fatalf("both filters report what they select: %+v", res.acl.deleted[1:])
	}
	if len(h.f.state().ACLs) != len(all)-2 {
		t.Fatalf("ACLs left: %+v", h.f.state().ACLs)
	}
}

func sameACLs(a, b []ACL) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[ACL]int{}
	for _, x := range a {
		seen[x]++
	}
	for _, x := range b {
		seen[x]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

// The ACLs survive a snapshot, and states share them until they change.
func TestACLsInSnapshotAndClone(t *testing.T) {
	h := newHarness(t)
	script(h)
	h.must(kindCreateACLs, createACLsCmd{ACLs: []ACL{allowTopic("User:a", "t", aclLiteral, opRead), allowTopic("User:b", "t", aclPrefix, opWrite)}})
	s := h.f.state()
	var buf bytes.Buffer
	if err := encodeSnapshot(&buf, s); err != nil {
		t.Fatal(err)
	}
	got, err := decodeSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("restored ACLs %+v, want %+v", got.ACLs, s.ACLs)
	}
	h.must(kindBarrier, nil)
	h.must(kindCreateTopic, topicCmd("other", 9, 1, 1))
	if n := h.f.state(); &n.ACLs[0] != &s.ACLs[0] {
		t.Fatal("a command that changes no ACL copied them")
	}

	// A damaged snapshot ACL is refused.
	bad := s.clone()
	bad.ACLs = []ACL{{ResourceType: aclTopic}}
	buf.Reset()
	if err := encodeSnapshot(&buf, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := decodeSnapshot(&buf); !errors.Is(err, ErrInvalidACL) {
		t.Fatalf("decode damaged: %v", err)
	}
}
