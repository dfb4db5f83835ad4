package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"strata/internal/certs"
	"strata/internal/loopback"
)

// propagationLimit is the promise of issue 24: a credential or an ACL
// changed through the CLI applies on every node within a second.
const propagationLimit = time.Second

// securedTrio is three `strata serve` processes, each a raft voter with
// its own SASL_SSL listener (SCRAM-SHA-256 and -512), raft over mutual
// TLS, the authorizer on and admin its super user: three machines of a
// secured cluster, on loopback.
type securedTrio struct {
	kafka []string // node i+1's SASL_SSL listener
	ca    string
	tls   *tls.Config // a client's: trusts the cluster CA
}

const (
	trioAdmin   = "admin"
	trioAdminPw = "trio-admin-pw-1"
)

// startSecuredTrio starts the three processes and waits until each has
// printed its bootstrap line, which a voter prints once a quorum elected a
// controller.
func startSecuredTrio(t *testing.T) *securedTrio {
	t.Helper()
	dir := t.TempDir()
	set, err := certs.GenerateDev(filepath.Join(dir, "certs"), nil, 3)
	if err != nil {
		t.Fatal(err)
	}
	addrs := loopback.Addrs(t, 6)
	raft, kafka := addrs[:3], addrs[3:]
	var voters []string
	for i, a := range raft {
		voters = append(voters, fmt.Sprintf("%d@%s", i+1, a))
	}
	s := &securedTrio{kafka: kafka, ca: set.CAFile}
	lines := make([]<-chan string, 3)
	nodes := make([]*node, 3)
	for i := range 3 {
		nodes[i], lines[i] = launch(t, nil, "serve", "--node-id", fmt.Sprint(i+1),
			"--data-dir", filepath.Join(dir, fmt.Sprintf("node-%d", i+1)), "--http-listen", "off",
			"--raft-listen", raft[i], "--voters", strings.Join(voters, ","),
			"--listener", "CLIENTS=SASL_SSL://"+kafka[i],
			"--sasl-mechanisms", "SCRAM-SHA-256,SCRAM-SHA-512",
			"--tls-cert-file", set.Nodes[i].CertFile, "--tls-key-file", set.Nodes[i].KeyFile, "--tls-ca-file", set.CAFile,
			"--sasl-bootstrap-user", trioAdmin+":"+trioAdminPw, "--super-users", "User:"+trioAdmin,
			// A refused attempt is answered at once rather than after
			// Kafka's 100ms, so that the polls below measure how long a
			// change takes to arrive, not the penalty of each refusal.
			"--failed-authentication-delay", "1ms")
	}
	for i := range 3 {
		nodes[i].readBootstrap(t, nodes[i].firstLine(t, lines[i]))
	}
	pem, err := os.ReadFile(set.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("ca.crt holds no certificate")
	}
	s.tls = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return s
}

// cli runs a client verb as admin through node 1.
func (s *securedTrio) cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCLI(t, nil, append(args, "--bootstrap", s.kafka[0], "--tls", "--tls-ca-file", s.ca,
		"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-username", trioAdmin, "--sasl-password", trioAdminPw)...)
}

// client is a client authenticating with m, seeded with node i's
// address only, never retrying: what it sends through SeedBrokers()[0]
// goes to that node and no other, whatever the metadata says.
func (s *securedTrio) client(i int, m sasl.Mechanism) (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(s.kafka[i]), kgo.DialTLSConfig(s.tls.Clone()), kgo.SASL(m),
		kgo.RequestRetries(0), kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
}

// scramAs is user's SCRAM mechanism of the given hash.
func scramAs(mech, user, password string) sasl.Mechanism {
	a := scram.Auth{User: user, Pass: password}
	if mech == "SCRAM-SHA-256" {
		return a.AsSha256Mechanism()
	}
	return a.AsSha512Mechanism()
}

// authenticate opens a new connection to node i as user and sends one
// Metadata request (of no topics) on it: nil when the node authenticated
// the user, kerr.SaslAuthenticationFailed when it refused.
func (s *securedTrio) authenticate(i int, mech, user, password string) error {
	cl, err := s.client(i, scramAs(mech, user, password))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	_, err = req.RequestWith(ctx, cl.SeedBrokers()[0])
	return err
}

// topicError is the error cl's node answers a Metadata request for topic
// with (nil when it lists the topic with its partitions).
func topicError(cl *kgo.Client, topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil {
		return err
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("metadata of %d topics", len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return err
	}
	if len(resp.Topics[0].Partitions) == 0 {
		return errors.New("metadata lists the topic without partitions")
	}
	return nil
}

// produceTo sends one record to partition p of topic through cl's node,
// and returns the partition's error.
func produceTo(cl *kgo.Client, topic string, id [16]byte, p int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = 1, 3000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, id
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = p, nowBatch("alice")
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil {
		return err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return fmt.Errorf("produce response of %d topics", len(resp.Topics))
	}
	return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
}

// probe is one thing a user checks on one node after a change; it holds
// when check returns nil.
type probe struct {
	node  int // 0-based
	what  string
	check func() error
}

// pollLimit is how long a probe is polled before it counts as never
// holding: beyond the promise, so that a slow change shows its figure.
const pollLimit = 3 * time.Second

// measure polls every probe, each on its own, every 25ms from t0 (the
// moment the CLI command returned) until it holds, and returns each
// node's worst latency: when its slowest probe first held, counted at
// the end of the check that saw it. A probe that never held within
// pollLimit fails the test with its last answer.
func measure(t *testing.T, change string, t0 time.Time, probes []probe) []time.Duration {
	t.Helper()
	worst := make([]time.Duration, 3)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last error
			for {
				start := time.Now()
				last = p.check()
				now := time.Now()
				if last == nil {
					mu.Lock()
					worst[p.node] = max(worst[p.node], now.Sub(t0))
					mu.Unlock()
					return
				}
				if now.Sub(t0) > pollLimit {
					t.Errorf("%s: node %d: %s did not hold within %s: %v", change, p.node+1, p.what, pollLimit, last)
					mu.Lock()
					worst[p.node] = max(worst[p.node], now.Sub(t0))
					mu.Unlock()
					return
				}
				time.Sleep(max(0, 25*time.Millisecond-now.Sub(start)))
			}
		}()
	}
	wg.Wait()
	var figs []string
	for i, w := range worst {
		figs = append(figs, fmt.Sprintf("node %d %s", i+1, w.Round(time.Millisecond)))
		if w > propagationLimit {
			t.Errorf("%s: node %d applied it after %s, want within %s", change, i+1, w.Round(time.Millisecond), propagationLimit)
		}
	}
	t.Logf("%-44s %s", change+":", strings.Join(figs, ", "))
	return worst
}

// refused is nil when err is the refusal want, and says what came
// instead otherwise.
func refused(err, want error) error {
	if errors.Is(err, want) {
		return nil
	}
	if err == nil {
		return fmt.Errorf("accepted, want %v", want)
	}
	return fmt.Errorf("%v, want %v", err, want)
}

// TestSecureChangesApplyEverywhere (issue 24, "Done when"): credentials
// and ACLs changed through the CLI apply on every node of a secured
// three-node cluster within a second, without restarts. Each change goes
// through node 1; from the moment the command returns, every node is
// polled on its own listener (a client seeded with that address only,
// each request sent to that seed) until it answers as the change says,
// and each node's worst latency is logged and held to a second.
func TestSecureChangesApplyEverywhere(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three secured strata serve processes: not under -short")
	}
	began := time.Now()
	s := startSecuredTrio(t)
	mechs := []string{"SCRAM-SHA-256", "SCRAM-SHA-512"}
	const topic, pw1, pw2 = "propagated", "alice-pw-1", "alice-pw-2"

	// The topic, one partition per node, before any change is timed. The
	// bootstrap user is created by the nodes as they start: the first
	// attempts may come before it is.
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _, errOut := s.cli(t, "topic", "create", topic, "--partitions", "3", "--replication-factor", "3")
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic create: %s", errOut)
		}
		time.Sleep(200 * time.Millisecond)
	}
	topicID, leaders, controller := s.awaitTopic(t, topic, deadline)
	t.Logf("cluster up and topic %s created in %s; controller node %d, partition leaders %v", topic, time.Since(began).Round(time.Millisecond), controller, leaders)

	// A user that does not exist yet is refused everywhere.
	for i := range 3 {
		if err := refused(s.authenticate(i, "SCRAM-SHA-512", "alice", pw1), kerr.SaslAuthenticationFailed); err != nil {
			t.Fatalf("node %d, before alice exists: %v", i+1, err)
		}
	}
	authProbes := func(password string, want error) []probe {
		var ps []probe
		for i := range 3 {
			for _, m := range mechs {
				what := fmt.Sprintf("%s with password %q accepted", m, password)
				check := func() error { return s.authenticate(i, m, "alice", password) }
				if want != nil {
					what = fmt.Sprintf("%s with password %q refused", m, password)
					check = func() error { return refused(s.authenticate(i, m, "alice", password), want) }
				}
				ps = append(ps, probe{node: i, what: what, check: check})
			}
		}
		return ps
	}
	run := func(args ...string) time.Time {
		t.Helper()
		if code, out, errOut := s.cli(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %q %q", args, code, out, errOut)
		}
		return time.Now()
	}

	t0 := run("user", "create", "alice", "--password", pw1, "--mechanism", strings.Join(mechs, ","), "--iterations", "4096")
	measure(t, "user create alice", t0, authProbes(pw1, nil))

	// ACLs: alice's clients, one per node, stay connected across the
	// changes; the authorizer decides each request afresh.
	alice := make([]*kgo.Client, 3)
	for i := range alice {
		cl, err := s.client(i, scramAs("SCRAM-SHA-512", "alice", pw1))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		alice[i] = cl
	}
	aclProbes := func(want error) []probe {
		check := func(err error) error {
			if want == nil {
				return err
			}
			return refused(err, want)
		}
		verb := "accepted"
		if want != nil {
			verb = "refused"
		}
		var ps []probe
		for i := range 3 {
			ps = append(ps, probe{node: i, what: "Metadata of " + topic + " " + verb, check: func() error { return check(topicError(alice[i], topic)) }})
			for p, l := range leaders {
				if l != int32(i+1) {
					continue
				}
				ps = append(ps, probe{node: i, what: fmt.Sprintf("produce to partition %d %s", p, verb),
					check: func() error { return check(produceTo(alice[i], topic, topicID, p)) }})
			}
		}
		return ps
	}
	// Before the ACL, every one of those is TOPIC_AUTHORIZATION_FAILED.
	for _, p := range aclProbes(kerr.TopicAuthorizationFailed) {
		if err := p.check(); err != nil {
			t.Fatalf("node %d before the ACL: %s: %v", p.node+1, p.what, err)
		}
	}
	acl := []string{"--allow", "User:alice", "--operation", "WRITE", "--topic", topic}
	t0 = run(append([]string{"acl", "add"}, acl...)...)
	measure(t, "acl add WRITE (implies DESCRIBE)", t0, aclProbes(nil))
	t0 = run(append([]string{"acl", "delete"}, acl...)...)
	measure(t, "acl delete WRITE", t0, aclProbes(kerr.TopicAuthorizationFailed))

	t0 = run("user", "create", "alice", "--password", pw2, "--mechanism", strings.Join(mechs, ","), "--iterations", "4096")
	measure(t, "password change", t0, append(authProbes(pw2, nil), authProbes(pw1, kerr.SaslAuthenticationFailed)...))

	t0 = run("user", "delete", "alice")
	measure(t, "user delete alice", t0, authProbes(pw2, kerr.SaslAuthenticationFailed))
	t.Logf("whole test %s", time.Since(began).Round(time.Millisecond))
}

// awaitTopic waits until every node's metadata, as admin sees it through
// that node, shows topic with a leader for each partition, the same on
// all, and returns its id, the leaders by partition and the controller.
func (s *securedTrio) awaitTopic(t *testing.T, topic string, deadline time.Time) (id [16]byte, leaders map[int32]int32, controller int32) {
	t.Helper()
	admins := make([]*kgo.Client, 3)
	for i := range admins {
		cl, err := s.client(i, scramAs("SCRAM-SHA-512", trioAdmin, trioAdminPw))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		admins[i] = cl
	}
	var last string
	for time.Now().Before(deadline) {
		var seen []map[int32]int32
		for i, cl := range admins {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			req := kmsg.NewPtrMetadataRequest()
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(topic)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
			cancel()
			if err == nil && len(resp.Topics) == 1 {
				err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
			}
			if err != nil {
				last = fmt.Sprintf("node %d: %v", i+1, err)
				break
			}
			id, controller = resp.Topics[0].TopicID, resp.ControllerID
			ls := map[int32]int32{}
			for _, p := range resp.Topics[0].Partitions {
				if p.Leader >= 0 && p.ErrorCode == 0 {
					ls[p.Partition] = p.Leader
				}
			}
			seen = append(seen, ls)
		}
		if len(seen) == 3 && len(seen[0]) == 3 && slices.IndexFunc(seen[1:], func(m map[int32]int32) bool { return fmt.Sprint(m) != fmt.Sprint(seen[0]) }) < 0 {
			return id, seen[0], controller
		}
		if len(seen) == 3 {
			last = fmt.Sprint(seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("topic %s has no leader for every partition on every node: %s", topic, last)
	return id, nil, -1
}
