package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"strata/internal/certs"
	"strata/internal/loopback"
)

// A secured cluster (issue 24, "Done when"): TLS and SASL on every door.
// Each node has one SASL_SSL listener (SCRAM-SHA-512), which is also the
// inter-broker listener, so brokers fetch from and forward to each other
// over TLS as the bootstrap user; its certificate is signed by one
// development CA, whose file, given as --tls-ca-file, also puts the raft
// port under mutual TLS; the authorizer is on with the admin user as its
// super user. Every client of the harness connects as admin over TLS.

const secureClusterUser, secureClusterPass = "admin", "cluster-admin-secret"

// clusterSecurity is a secured cluster's development CA and node
// certificates (certs.GenerateDev) under dir.
type clusterSecurity struct {
	dir string
	set certs.DevSet
}

// secureAll makes the cluster's CA and a certificate per node, once, in
// the test's temp dir, and the client options every harness client uses.
func (c *cluster) secureAll() {
	c.t.Helper()
	dir := filepath.Join(c.t.TempDir(), "certs")
	set, err := certs.GenerateDev(dir, nil, len(c.kafka))
	if err != nil {
		c.t.Fatal(err)
	}
	c.security = &clusterSecurity{dir: dir, set: set}
	c.clientOpts = secureClientOpts(c.t, set.CAFile)
}

// secureClientOpts are a client's settings: TLS against caFile, SCRAM-SHA-512 as admin.
func secureClientOpts(t *testing.T, caFile string) []kgo.Opt {
	t.Helper()
	pool, err := certs.ReadPool(caFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	return []kgo.Opt{
		kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: secureClusterUser, Pass: secureClusterPass}.AsSha512Mechanism()),
	}
}

// flags are node id's listener and security flags, its Kafka listener on
// addr.
func (s *clusterSecurity) flags(id int32, addr string) []string {
	return secureNodeFlags(s.set.Nodes[id-1], s.set.CAFile, addr)
}

// secureNodeFlags are the flags of a secured node with the certificate
// cert, trusting caFile, listening on addr.
func secureNodeFlags(cert certs.Files, caFile, addr string) []string {
	return []string{"--listener", "CLIENTS=SASL_SSL://" + addr, "--inter-broker-listener", "CLIENTS",
		"--tls-cert-file", cert.CertFile, "--tls-key-file", cert.KeyFile, "--tls-ca-file", caFile,
		"--sasl-mechanisms", "SCRAM-SHA-512",
		"--sasl-bootstrap-user", secureClusterUser + ":" + secureClusterPass,
		"--super-users", "User:" + secureClusterUser}
}

// TestSecureClusterJepsen (issue 24, "Done when"): the Jepsen scenario of
// TestClusterJepsen — nodes killed with SIGKILL and restarted, or paused
// with SIGSTOP past the session timeout, at random moments, under an
// idempotent acks=all load and a transactional one, with tiering and
// compaction — on three nodes with TLS and SASL everywhere. Acknowledged
// records lost, duplicated or misplaced, committed ones lost, aborted
// ones seen: all must be 0. Four faults (STRATA_FAULT_ROUNDS) keep it
// near a minute and a half on two cores.
func TestSecureClusterJepsen(t *testing.T) {
	if testing.Short() {
		t.Skip("faults on a secured cluster: not under -short")
	}
	rounds := faultRounds(t, 4, 1)
	s := jepsenSettings()
	s.secure = true
	runJepsen(t, s, func(faults int, _ time.Duration) bool { return faults < rounds })
}

// TestSecureClusterRefusesStrangers (issue 24, "Done when"): a secured
// cluster of three; a broker-only node started with a certificate of
// another CA, and one started without TLS at all, ask the voters to let
// them in. Neither gets in: neither announces itself, each keeps saying
// it is asking to join, the voters log the refused TLS handshakes, and
// Metadata and DescribeQuorum name the three alone, which keep serving.
// A node with a certificate of the cluster's CA, started the same way,
// joins: it is the certificate that keeps the others out.
func TestSecureClusterRefusesStrangers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four secured nodes: not under -short")
	}
	c := startCluster(t, 3, clusterSettings{secure: true, replicationFactor: 3})

	other, err := certs.GenerateDev(filepath.Join(t.TempDir(), "other-ca"), nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Node 4 has a certificate of another CA but trusts the cluster's,
	// whose certificate is no secret; node 5 has no TLS; node 6 is of
	// another cluster altogether.
	stranger := func(id int32, flags func(addr string) []string) (*node, <-chan string) {
		addrs := loopback.Addrs(t, 2)
		args := append([]string{"serve", "--node-id", fmt.Sprint(id), "--data-dir", t.TempDir(),
			"--http-listen", "off", "--raft-listen", addrs[0], "--voters", c.voters}, flags(addrs[1])...)
		n, lines := launch(t, nil, args...)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("---- node %d (pid %d), stderr follows", id, n.cmd.Process.Pid)
			}
		})
		return n, lines
	}
	forged, forgedLines := stranger(4, func(addr string) []string {
		return secureNodeFlags(other.Nodes[0], c.security.set.CAFile, addr)
	})
	plain, plainLines := stranger(5, func(addr string) []string { return []string{"--listen", addr} })
	foreign, foreignLines := stranger(6, func(addr string) []string {
		return secureNodeFlags(other.Nodes[0], other.CAFile, addr)
	})

	// The join is retried with a backoff of at most 2 s: several tries.
	time.Sleep(8 * time.Second)
	// What each says: the voters refused node 4's certificate; node 6
	// refused theirs. Node 5, which speaks plaintext to a TLS port, sees
	// the connection closed, and is told what is likely wrong.
	for _, s := range []struct {
		id    int32
		n     *node
		lines <-chan string
		why   string
	}{
		{4, forged, forgedLines, "tls: unknown certificate authority"},
		{5, plain, plainLines, "this node needs --tls-cert-file, --tls-key-file and --tls-ca-file of the cluster's CA"},
		{6, foreign, foreignLines, "x509: certificate signed by unknown authority"},
	} {
		select {
		case line := <-s.lines:
			t.Errorf("node %d, a stranger, announced itself: %q", s.id, line)
		case <-s.n.exited:
			t.Errorf("node %d exited (%v); want it still asking to join", s.id, s.n.waitErr)
		default:
		}
		if log := s.n.stderr.String(); !strings.Contains(log, "asking to join the metadata quorum") || !strings.Contains(log, s.why) {
			t.Errorf("node %d does not say it is asking to join, refused with %q; its log:\n%s", s.id, s.why, log)
		}
	}
	refused := 0
	for _, id := range c.up() {
		if strings.Contains(c.proc(id).stderr.String(), "raft port: refused a connection that failed TLS") {
			refused++
		}
	}
	if refused == 0 {
		t.Error("no voter logged a refused raft connection")
	}
	for _, id := range c.up() {
		if got := c.brokers(id); !slices.Equal(got, []int32{1, 2, 3}) {
			t.Errorf("node %d's Metadata names brokers %v, want [1 2 3]", id, got)
		}
		if got := c.quorumMembers(id); !slices.Equal(got, []int32{1, 2, 3}) {
			t.Errorf("node %d's DescribeQuorum names members %v, want [1 2 3]", id, got)
		}
	}

	// The three serve: an RF 3 topic takes acks=all records and gives
	// them back.
	c.createTopic("secured", 3, 3, configs("min.insync.replicas", "2"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.client(kgo.DefaultProduceTopic("secured"), kgo.RequiredAcks(kgo.AllISRAcks()))
	for i := range 30 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatalf("produce with strangers knocking: %v", err)
		}
	}
	n := 0
	for _, recs := range readAll(t, c.kafka[0], "secured", c.clientOpts...) {
		n += len(recs)
	}
	if n != 30 {
		t.Errorf("read back %d records, want 30", n)
	}

	// The control: a certificate of the cluster's CA gets in.
	set, err := certs.GenerateDev(c.security.dir, nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	friend, lines := stranger(7, func(addr string) []string { return secureNodeFlags(set.Nodes[3], set.CAFile, addr) })
	friend.readBootstrap(t, friend.firstLine(t, lines))
	c.waitFor("node 7 in Metadata's brokers", 30*time.Second, func() bool {
		return slices.Contains(c.brokers(1), 7)
	}, func() string { return fmt.Sprint(c.brokers(1)) })
	c.waitFor("node 7 in DescribeQuorum's members", 10*time.Second, func() bool {
		return slices.Equal(c.quorumMembers(1), []int32{1, 2, 3, 7})
	}, func() string { return fmt.Sprint(c.quorumMembers(1)) })
}

// brokers are the broker ids node id's Metadata names, sorted (nil when
// it does not answer).
func (c *cluster) brokers(id int32) []int32 {
	resp, err := c.tryMetadata(id)
	if err != nil {
		c.t.Logf("metadata of node %d: %v", id, err)
		return nil
	}
	var ids []int32
	for _, b := range resp.Brokers {
		ids = append(ids, b.NodeID)
	}
	slices.Sort(ids)
	return ids
}

// quorumMembers are the voters and observers of the metadata quorum as
// node id's DescribeQuorum names them, sorted.
func (c *cluster) quorumMembers(id int32) []int32 {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.addr(id)), kgo.RequestRetries(0)}, c.clientOpts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := describeQuorumReq().RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil {
		c.t.Logf("DescribeQuorum of node %d: %v", id, err)
		return nil
	}
	p, ok := quorumPartition(resp)
	if !ok {
		c.t.Logf("DescribeQuorum of node %d: an error: %+v", id, resp)
		return nil
	}
	var ids []int32
	for _, r := range slices.Concat(p.CurrentVoters, p.Observers) {
		ids = append(ids, r.ReplicaID)
	}
	slices.Sort(ids)
	return ids
}
