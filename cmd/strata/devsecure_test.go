package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// secureDevClient is a client of a strata dev --secure cluster as its
// hints say: the CA and the admin password from the data dir.
func secureDevClient(t *testing.T, dataDir, bootstrap string) *kgo.Client {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(dataDir, "certs", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		t.Fatal("ca.crt holds no certificate")
	}
	pw, err := os.ReadFile(filepath.Join(dataDir, "certs", "admin.password"))
	if err != nil {
		t.Fatal(err)
	}
	return newClient(t, bootstrap, kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool}),
		kgo.SASL(scram.Auth{User: "admin", Pass: strings.TrimSpace(string(pw))}.AsSha512Mechanism()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
}

// TestDevSecure (issue 24, item 8): strata dev --secure, with one node
// and with three, serves SASL_SSL with SCRAM-SHA-512 only, prints how to
// connect, and the admin user it made writes and reads a replicated
// topic; a plaintext client gets nothing; a restart keeps the password.
func TestDevSecure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts secured dev nodes: not under -short")
	}
	for _, nodes := range []int{1, 3} {
		t.Run(map[int]string{1: "one node", 3: "three nodes"}[nodes], func(t *testing.T) {
			dir := t.TempDir()
			// Port 0: each node picks its own, announced on the
			// bootstrap line.
			args := []string{"dev", "--secure", "--data-dir", dir, "--http-listen", "off", "--listen", "127.0.0.1:0"}
			if nodes > 1 {
				args = append(args, "--nodes", "3")
			}
			n, lines := launch(t, nil, args...)
			first := n.firstLine(t, lines)
			n.readBootstrap(t, first)
			hints := n.firstLine(t, lines)
			if !strings.Contains(hints, "SASL_SSL with SCRAM-SHA-512, user admin") || strings.Contains(hints+n.stderr.String(), mustRead(t, filepath.Join(dir, "certs", "admin.password"))) {
				t.Fatalf("hints %q: want how to connect, without the password", hints)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cl := secureDevClient(t, dir, n.bootstrap)
			adm := kadm.NewClient(cl)
			if _, err := adm.CreateTopic(ctx, int32(nodes), int16(nodes), nil, "secured"); err != nil {
				t.Fatalf("create topic as admin: %v", err)
			}
			for p := range int32(nodes) {
				if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "secured", Partition: p, Value: []byte("v")}).FirstErr(); err != nil {
					t.Fatalf("produce to partition %d: %v", p, err)
				}
			}
			ends, err := adm.ListEndOffsets(ctx, "secured")
			if err != nil {
				t.Fatal(err)
			}
			for p := range int32(nodes) {
				if o, _ := ends.Lookup("secured", p); o.Offset != 1 {
					t.Fatalf("partition %d ends at %d, want 1", p, o.Offset)
				}
			}
			plain := newClient(t, n.bootstrap, kgo.SeedBrokers(strings.Split(n.bootstrap, ",")...), kgo.RequestRetries(0))
			pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
			defer pcancel()
			if err := plain.Ping(pctx); err == nil {
				t.Fatal("a plaintext client without credentials was answered")
			}
			if nodes == 1 {
				pw := mustRead(t, filepath.Join(dir, "certs", "admin.password"))
				cl.Close()
				n.stop(t)
				n, lines = launch(t, nil, args...)
				n.readBootstrap(t, n.firstLine(t, lines))
				if again := mustRead(t, filepath.Join(dir, "certs", "admin.password")); again != pw {
					t.Fatal("a restart changed the admin password")
				}
				cl = secureDevClient(t, dir, n.bootstrap)
				if err := cl.Ping(ctx); err != nil {
					t.Fatalf("after a restart: %v", err)
				}
			}
			n.stop(t)
		})
	}
}

func mustRead(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
