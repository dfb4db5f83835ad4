package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"strata/broker"
)

// strata acl add|list|delete against a node with the authorizer on and a
// SASL listener: the super user (the bootstrap user) manages ACLs; a user
// without DESCRIBE on the cluster cannot list them until an ACL added
// through the CLI lets it, on its very next request; bad input is one
// line.
func TestACLVerbs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{
		DataDir:    t.TempDir(),
		Listeners:  []broker.Listener{{Name: "SASL", Security: broker.SASLPlaintext, Addr: "127.0.0.1:0"}},
		SASL:       broker.SASLConfig{BootstrapUser: "admin", BootstrapPassword: "admin-pw", FailedDelay: -1},
		SuperUsers: []string{"User:admin"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addr := b.ListenerAddr("SASL").String()
	asAdmin := []string{"--bootstrap", addr, "--sasl-username", "admin", "--sasl-password", "admin-pw"}
	cli := func(extra []string, args ...string) (int, string, string) {
		return runCLI(t, nil, append(args, extra...)...)
	}
	if code, out, errOut := cli(asAdmin, "user", "create", "alice", "--password", "alice-pw"); code != 0 {
		t.Fatalf("user create: %d %q %q", code, out, errOut)
	}
	asAlice := []string{"--bootstrap", addr, "--sasl-username", "alice", "--sasl-password", "alice-pw", "--sasl-mechanism", "SCRAM-SHA-512"}

	code, _, errOut := cli(asAlice, "acl", "list")
	if code == 0 {
		t.Fatal("alice listed ACLs without DESCRIBE on the cluster")
	}
	assertOneLineError(t, errOut, "CLUSTER_AUTHORIZATION_FAILED")

	for _, add := range [][]string{
		{"acl", "add", "--allow", "User:alice", "--operation", "DESCRIBE", "--cluster"},
		{"acl", "add", "--allow", "User:alice", "--operation", "read,describe", "--topic", "orders"},
		{"acl", "add", "--allow", "User:alice", "--operation", "WRITE", "--topic", "events-", "--prefixed"},
		{"acl", "add", "--deny", "User:alice", "--operation", "ALL", "--group", "secret", "--host", "10.0.0.7"},
	} {
		if code, out, errOut := cli(asAdmin, add...); code != 0 || !strings.Contains(out, "added") {
			t.Fatalf("%v: %d %q %q", add, code, out, errOut)
		}
	}
	code, out, errOut := cli(asAlice, "acl", "list", "--json")
	if code != 0 {
		t.Fatalf("alice's acl list after the grant: %d %q", code, errOut)
	}
	var rows []aclRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("acl list --json: %v: %q", err, out)
	}
	if len(rows) != 5 {
		t.Fatalf("%d ACLs listed, want 5: %+v", len(rows), rows)
	}
	code, out, _ = cli(asAdmin, "acl", "list", "--topic", "events-eu", "--pattern", "match")
	if code != 0 || !strings.Contains(out, "events-") || !strings.Contains(out, "PREFIXED") || strings.Contains(out, "orders") {
		t.Fatalf("acl list --pattern match: %d %q", code, out)
	}

	code, out, errOut = cli(asAdmin, "acl", "delete", "--allow", "User:alice", "--topic", "orders", "--operation", "READ")
	if code != 0 || !strings.Contains(out, "deleted 1 ACLs") {
		t.Fatalf("acl delete: %d %q %q", code, out, errOut)
	}
	code, out, _ = cli(asAdmin, "acl", "delete", "--principal", "User:alice")
	if code != 0 || !strings.Contains(out, "deleted 4 ACLs") {
		t.Fatalf("acl delete --principal: %d %q", code, out)
	}
	if code, _, errOut := cli(asAlice, "acl", "list"); code == 0 {
		t.Fatal("alice still lists ACLs after her grant was deleted")
	} else {
		assertOneLineError(t, errOut, "CLUSTER_AUTHORIZATION_FAILED")
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"acl", "add", "--allow", "alice", "--operation", "READ", "--topic", "t"}, "Type:name"},
		{[]string{"acl", "add", "--allow", "User:a", "--operation", "EAT", "--topic", "t"}, `"EAT"`},
		{[]string{"acl", "add", "--allow", "User:a", "--operation", "READ"}, "name the resource"},
		{[]string{"acl", "add", "--allow", "User:a", "--deny", "User:b", "--operation", "READ", "--topic", "t"}, "one of --allow"},
		{[]string{"acl", "add", "--allow", "User:a", "--operation", "READ", "--topic", "t", "--group", "g"}, "one resource"},
		{[]string{"acl", "delete"}, "--all"},
		{[]string{"acl", "list", "--pattern", "fuzzy"}, `"fuzzy"`},
	} {
		code, _, errOut := cli(asAdmin, bad.args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2", bad.args, code)
		}
		assertOneLineError(t, errOut, bad.want)
	}
}
