package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"strata/internal/certs"
	"strata/internal/loopback"
)

// secureNode is one node with a SASL_SSL listener (SCRAM-SHA-512) and an
// SSL listener that takes client certificates, the authorizer on, an
// admin user made at start, and a client certificate whose principal may
// write and read the test's topics.
type secureNode struct {
	*node
	scram, mtls string // listener addresses
	ca          string
	client      certs.Files // the client certificate, User:CN=app
}

const (
	secureAdmin = "admin"
	securePass  = "admin-secret-1"
)

func startSecureNode(t *testing.T) *secureNode {
	t.Helper()
	dir := t.TempDir()
	set, err := certs.GenerateDev(filepath.Join(dir, "certs"), nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	client, err := certs.DevClient(filepath.Join(dir, "certs"), "app", pkix.Name{CommonName: "app"})
	if err != nil {
		t.Fatal(err)
	}
	addrs := loopback.Addrs(t, 2)
	n := startNode(t, nil, "serve", "--data-dir", filepath.Join(dir, "data"), "--http-listen", "off",
		"--listener", "CLIENTS=SASL_SSL://"+addrs[0], "--listener", "APPS=SSL://"+addrs[1],
		"--sasl-mechanisms", "SCRAM-SHA-512",
		"--tls-cert-file", set.Nodes[0].CertFile, "--tls-key-file", set.Nodes[0].KeyFile,
		"--tls-ca-file", set.CAFile, "--tls-client-auth", "request",
		"--sasl-bootstrap-user", secureAdmin+":"+securePass,
		"--super-users", "User:"+secureAdmin)
	s := &secureNode{node: n, scram: addrs[0], mtls: addrs[1], ca: set.CAFile, client: client}
	// The application's certificate may write, read and join groups
	// named after the topics the test uses.
	for _, a := range [][]string{
		{"--operation", "ALL", "--topic", "secure-", "--prefixed"},
		{"--operation", "READ", "--group", "secure-", "--prefixed"},
	} {
		args := append([]string{"acl", "add", "--allow", "User:CN=app"}, a...)
		if code, _, stderr := runCLI(t, nil, append(args, s.adminFlags()...)...); code != 0 {
			t.Fatalf("acl add %v: %s", a, stderr)
		}
	}
	return s
}

// adminFlags are the CLI flags of the admin user over SASL_SSL.
func (s *secureNode) adminFlags() []string {
	return []string{"--bootstrap", s.scram, "--tls", "--tls-ca-file", s.ca,
		"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", secureAdmin, "--sasl-password", securePass}
}

func (s *secureNode) createTopic(t *testing.T, topic string) {
	t.Helper()
	args := append([]string{"topic", "create", topic, "--partitions", "2"}, s.adminFlags()...)
	if code, _, stderr := runCLI(t, nil, args...); code != 0 {
		t.Fatalf("topic create %s: %s", topic, stderr)
	}
}

func (s *secureNode) clientTLS(t *testing.T, withCert bool) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(s.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if withCert {
		pair, err := tls.LoadX509KeyPair(s.client.CertFile, s.client.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg
}

// roundTrip produces n records with cl and reads them back in a group.
func roundTrip(t *testing.T, topic string, opts ...kgo.Opt) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 20 {
		if err := p.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: fmt.Appendf(nil, "go%d", i)}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	c, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic), kgo.ConsumerGroup(topic+"-go"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := 0
	for got < 20 {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of 20 records: %v", got, err)
		}
		for _, e := range fs.Errors() {
			t.Fatalf("consume: %v", e.Err)
		}
		got += fs.NumRecords()
	}
}

// TestSecureClients (issue 24, "Done when"): real clients over SASL_SSL
// with SCRAM-SHA-512 and over SSL with client certificates — franz-go,
// sarama, kcat (librdkafka), kafka-python, confluent-kafka-python and kafkajs —
// each produce and read back in a consumer group against a node with the
// authorizer on; a wrong password is refused with
// SASL_AUTHENTICATION_FAILED and the connection closed; a certificate's
// principal without ACLs gets TOPIC_AUTHORIZATION_FAILED. The non-Go
// clients skip when they are not installed (.ci/run installs them).
func TestSecureClients(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node and five kinds of client: not under -short")
	}
	s := startSecureNode(t)
	scramOpts := func(user, pass string) []kgo.Opt {
		return []kgo.Opt{kgo.SeedBrokers(s.scram), kgo.DialTLSConfig(s.clientTLS(t, false)),
			kgo.SASL(scram.Auth{User: user, Pass: pass}.AsSha512Mechanism())}
	}
	mtlsOpts := []kgo.Opt{kgo.SeedBrokers(s.mtls), kgo.DialTLSConfig(s.clientTLS(t, true))}

	t.Run("franz-go", func(t *testing.T) {
		s.createTopic(t, "secure-go-scram")
		roundTrip(t, "secure-go-scram", scramOpts(secureAdmin, securePass)...)
		s.createTopic(t, "secure-go-mtls")
		roundTrip(t, "secure-go-mtls", mtlsOpts...)

		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		bad, err := kgo.NewClient(scramOpts(secureAdmin, "wrong")...)
		if err != nil {
			t.Fatal(err)
		}
		defer bad.Close()
		if err := bad.Ping(ctx); !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("wrong password: got %v, want SASL_AUTHENTICATION_FAILED", err)
		}
		// The certificate's principal has no ACL on other topics.
		s.createTopic(t, "private")
		cl, err := kgo.NewClient(mtlsOpts...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		err = cl.ProduceSync(ctx, &kgo.Record{Topic: "private", Value: []byte("x")}).FirstErr()
		if !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("produce without WRITE: got %v, want TOPIC_AUTHORIZATION_FAILED", err)
		}
	})

	t.Run("sarama", func(t *testing.T) { testSarama(t, s) })

	t.Run("kcat", func(t *testing.T) {
		kcatPath(t)
		sasl := []string{"-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanisms=SCRAM-SHA-512",
			"-X", "ssl.ca.location=" + s.ca}
		mtls := []string{"-b", s.mtls, "-X", "security.protocol=SSL", "-X", "ssl.ca.location=" + s.ca,
			"-X", "ssl.certificate.location=" + s.client.CertFile, "-X", "ssl.key.location=" + s.client.KeyFile}
		for _, c := range []struct {
			topic string
			args  []string
		}{
			{"secure-kcat-scram", append([]string{"-b", s.scram, "-X", "sasl.username=" + secureAdmin, "-X", "sasl.password=" + securePass}, sasl...)},
			{"secure-kcat-mtls", mtls},
		} {
			s.createTopic(t, c.topic)
			in := "k1\nk2\nk3\n"
			kcat(t, []byte(in), append(c.args, "-P", "-t", c.topic, "-p", "0")...)
			out := kcat(t, nil, append(c.args, "-C", "-t", c.topic, "-p", "0", "-o", "beginning", "-e", "-q")...)
			if out != in {
				t.Fatalf("%s: kcat read %q, want %q", c.topic, out, in)
			}
		}
		// A wrong password: librdkafka reports the broker's refusal.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, kcatPath(t), append([]string{"-b", s.scram, "-X", "sasl.username=" + secureAdmin,
			"-X", "sasl.password=wrong", "-L", "-m", "5"}, sasl...)...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "Authentication failed") {
			t.Fatalf("kcat with a wrong password: %v\n%s", err, out)
		}
	})

	runScript := func(t *testing.T, name string, argv ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Env = os.Environ()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err != nil || strings.TrimSpace(stdout.String()) != "ok" {
			t.Fatalf("%s: %v\n%s\n%s", name, err, stdout.String(), stderr.String())
		}
	}
	pyClients := []struct{ name, module, script string }{
		{"kafka-python", "kafka", "kafka_python_secure.py"},
		{"confluent-kafka-python", "confluent_kafka", "confluent_secure.py"},
	}
	for _, c := range pyClients {
		t.Run(c.name, func(t *testing.T) {
			py := pythonWith(t, c.module, c.name)
			script := filepath.Join("testdata", "secure", c.script)
			s.createTopic(t, "secure-"+c.module+"-scram")
			runScript(t, c.name, py, script, s.scram, "secure-"+c.module+"-scram", "scram", s.ca, secureAdmin, securePass)
			s.createTopic(t, "secure-"+c.module+"-mtls")
			runScript(t, c.name, py, script, s.mtls, "secure-"+c.module+"-mtls", "mtls", s.ca, s.client.CertFile, s.client.KeyFile)
		})
	}

	t.Run("kafkajs", func(t *testing.T) {
		node, modules := kafkajs(t)
		script, err := filepath.Abs(filepath.Join("testdata", "secure", "kafkajs_secure.js"))
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("NODE_PATH", modules)
		s.createTopic(t, "secure-js-scram")
		runScript(t, "kafkajs", node, script, s.scram, "secure-js-scram", "scram", s.ca, secureAdmin, securePass)
		s.createTopic(t, "secure-js-mtls")
		runScript(t, "kafkajs", node, script, s.mtls, "secure-js-mtls", "mtls", s.ca, s.client.CertFile, s.client.KeyFile)
	})
}

// pythonWith returns a python3 that can import module, or skips.
func pythonWith(t *testing.T, module, what string) string {
	t.Helper()
	for _, name := range []string{"python3", "/usr/bin/python3"} {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		if exec.Command(p, "-c", "import "+module).Run() == nil {
			return p
		}
	}
	t.Skipf("%s is not installed (.ci/run installs it from Debian's packages); skipping", what)
	return ""
}

// kafkajs returns node and the node_modules directory holding kafkajs
// (STRATA_KAFKAJS_MODULES, else ~/.cache/strata-kafkajs/node_modules,
// where .ci/run installs it), or skips.
func kafkajs(t *testing.T) (node, modules string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed; skipping the kafkajs test")
	}
	modules = os.Getenv("STRATA_KAFKAJS_MODULES")
	if modules == "" {
		home, _ := os.UserHomeDir()
		modules = filepath.Join(home, ".cache", "strata-kafkajs", "node_modules")
	}
	if _, err := os.Stat(filepath.Join(modules, "kafkajs", "package.json")); err != nil {
		t.Skipf("kafkajs is not in %s (.ci/run installs it with npm); skipping", modules)
	}
	return node, modules
}
