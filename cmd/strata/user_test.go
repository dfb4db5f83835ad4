package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"strata/broker"
)

// strata user create|list|delete against a node's SASL listener, as its
// bootstrap user (flags for one verb, the STRATA_SASL_* variables for
// another); the new user authenticates at once; a wrong password is one
// line saying authentication failed.
func TestUserVerbsOverSASL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{
		DataDir:   t.TempDir(),
		Listeners: []broker.Listener{{Name: "SASL", Security: broker.SASLPlaintext, Addr: "127.0.0.1:0"}},
		SASL:      broker.SASLConfig{BootstrapUser: "admin", BootstrapPassword: "admin-pw", FailedDelay: -1},
		// A SASL inter-broker listener: the node authenticates to itself
		// as the bootstrap user too.
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addr := b.ListenerAddr("SASL").String()
	asAdmin := []string{"--bootstrap", addr, "--sasl-username", "admin", "--sasl-password", "admin-pw"}

	code, out, errOut := runCLI(t, nil, append([]string{"user", "create", "alice", "--password", "alice-pw", "--mechanism", "SCRAM-SHA-256,SCRAM-SHA-512"}, asAdmin...)...)
	if code != 0 || !strings.Contains(out, "created user alice") {
		t.Fatalf("user create: %d %q %q", code, out, errOut)
	}
	env := []string{"STRATA_BOOTSTRAP=" + addr, "STRATA_SASL_USERNAME=alice", "STRATA_SASL_PASSWORD=alice-pw", "STRATA_SASL_MECHANISM=SCRAM-SHA-256"}
	code, out, errOut = runCLI(t, env, "user", "list")
	if code != 0 || !strings.Contains(out, "alice") || !strings.Contains(out, "admin") || !strings.Contains(out, "SCRAM-SHA-512 (8192 iterations)") {
		t.Fatalf("user list as alice: %d %q %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, nil, append([]string{"user", "delete", "alice"}, asAdmin...)...)
	if code != 0 || !strings.Contains(out, "deleted user alice") {
		t.Fatalf("user delete: %d %q %q", code, out, errOut)
	}
	code, _, errOut = runCLI(t, env, "topic", "list")
	if code == 0 {
		t.Fatal("a deleted user listed topics")
	}
	assertOneLineError(t, errOut, "authentication failed", `"alice"`)
	if strings.Contains(errOut, "alice-pw") {
		t.Fatal("the error shows the password")
	}
	code, _, errOut = runCLI(t, nil, "user", "delete", "nobody", "--bootstrap", addr, "--sasl-username", "admin", "--sasl-password", "admin-pw")
	if code == 0 {
		t.Fatal("deleting a user that does not exist succeeded")
	}
	assertOneLineError(t, errOut, "nobody")
}
