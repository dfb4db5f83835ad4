package main

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"strata/broker"
)

// TestFranzGoSASLSuite runs franz-go's own SASL integration tests
// (TestSCRAMAuth, TestSCRAMAuthBadCredentials, TestOAuthAuth in
// pkg/kgo/client_test.go) against a Strata node with a PLAINTEXT listener
// (KGO_SEEDS) and a SASL_PLAINTEXT one offering SCRAM-SHA-256,
// SCRAM-SHA-512 and OAUTHBEARER with Kafka's unsecured validator
// (KGO_TEST_SCRAM_SEEDS, KGO_TEST_OAUTH_SEEDS), whose SCRAM user is the
// bootstrap user: once with SCRAM-SHA-256, once with SCRAM-SHA-512. The
// tests skip themselves when their settings are missing, so each must be
// seen to PASS in the -v output, not merely not fail.
//
// The node runs in this process, started as `strata serve` starts one:
// the --listener flags that would let the binary open two listeners are
// not in yet.
func TestFranzGoSASLSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs franz-go's kgo tests")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to run franz-go's tests with")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b, err := broker.Start(ctx, broker.Config{
		DataDir: t.TempDir(),
		Listeners: []broker.Listener{
			{Name: "PLAINTEXT", Security: broker.Plaintext, Addr: "127.0.0.1:0"},
			{Name: "SASL", Security: broker.SASLPlaintext, Addr: "127.0.0.1:0"},
		},
		AutoCreateTopics: true,
		SASL: broker.SASLConfig{
			Mechanisms:        []string{"SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"},
			OAuthUnsecured:    true,
			BootstrapUser:     "kgo",
			BootstrapPassword: "kgo-secret",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	plain, sasl := b.ListenerAddr("PLAINTEXT").String(), b.ListenerAddr("SASL").String()

	tests := []string{"TestSCRAMAuth", "TestSCRAMAuthBadCredentials", "TestOAuthAuth"}
	for _, bits := range []string{"256", "512"} {
		t.Run("SCRAM-SHA-"+bits, func(t *testing.T) {
			tctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(tctx, "go", "test", "github.com/twmb/franz-go/pkg/kgo",
				"-run", "^("+strings.Join(tests, "|")+")$", "-count=1", "-v")
			cmd.Env = append(os.Environ(),
				"KGO_SEEDS="+plain,
				"KGO_TEST_SCRAM_SEEDS="+sasl,
				"KGO_TEST_SCRAM=kgo:kgo-secret:"+bits,
				"KGO_TEST_OAUTH_SEEDS="+sasl,
				"KGO_LOG_LEVEL=none",
			)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("go test github.com/twmb/franz-go/pkg/kgo: %v\n%s", err, out)
			}
			for _, name := range tests {
				if !regexp.MustCompile(`(?m)^\s*--- PASS: ` + name + ` `).Match(out) {
					t.Errorf("%s did not PASS (skipped or not run):\n%s", name, out)
				}
			}
			t.Logf("franz-go's output:\n%s", out)
			if strings.Contains(string(out), "--- SKIP") {
				t.Errorf("a franz-go test skipped:\n%s", out)
			}
		})
	}
}
