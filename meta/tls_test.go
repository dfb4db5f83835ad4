package meta

import (
	"context"
	"errors"
	"testing"
	"time"

	"strata/internal/certs"
)

// raftTLSFor gives cfg the raft port's TLS of a node with the given
// certificate files: require and verify peers against the files' CA.
func raftTLSFor(t *testing.T, f certs.Files, cfg *Config) {
	t.Helper()
	src, err := certs.Load(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.TLS, err = src.ServerConfig(certs.ClientAuthRequire); err != nil {
		t.Fatal(err)
	}
	cfg.DialTLS = src.ClientConfig()
}

// TestQuorumOverTLS: voters whose raft ports require certificates of the
// cluster CA form a quorum and replicate; a node with the cluster's
// certificate joins as a non-voter, while one whose certificate another
// CA signed, or one without TLS, cannot join (nor, so, read the
// metadata).
func TestQuorumOverTLS(t *testing.T) {
	cluster, err := certs.GenerateDev(t.TempDir(), nil, 6)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.GenerateDev(t.TempDir(), nil, 6)
	if err != nil {
		t.Fatal(err)
	}
	q := newQuorum(t, 3)
	q.edit = func(id int32, cfg *Config) { raftTLSFor(t, cluster.Nodes[id], cfg) }
	q.open(1, 2, 3)
	leader := q.leader()
	ctx := testCtx(t)
	if _, err := leader.RegisterBroker(ctx, Registration{Incarnation: "i", ID: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.CreateTopic(ctx, TopicSpec{Name: "over-tls", Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	for _, f := range q.followers() {
		waitTopic(t, f, "over-tls")
	}

	nonvoter := func(id int32, edit func(*Config)) (*Store, error) {
		cfg := testConfig(t, t.TempDir())
		cfg.NodeID, cfg.Bootstrap, cfg.Voters = id, false, q.voters
		cfg.RaftAddr = freeAddrs(t, 1)[0]
		if edit != nil {
			edit(&cfg)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return Open(ctx, cfg)
	}
	for _, tc := range []struct {
		name string
		id   int32
		edit func(*Config)
	}{
		{"a certificate of another CA", 4, func(c *Config) { raftTLSFor(t, other.Nodes[4], c) }},
		{"no TLS", 5, nil},
	} {
		s, err := nonvoter(tc.id, tc.edit)
		if err == nil {
			s.Close()
			t.Fatalf("a node with %s joined the quorum", tc.name)
		}
		if !errors.Is(err, ErrStoppedWaiting) {
			t.Errorf("a node with %s: %v", tc.name, err)
		}
		servers, err := leader.Servers()
		if err != nil {
			t.Fatal(err)
		}
		for _, srv := range servers {
			if srv.ID == tc.id {
				t.Fatalf("the controller's configuration holds node %d, which has %s", tc.id, tc.name)
			}
		}
	}

	nv, err := nonvoter(5, func(c *Config) { raftTLSFor(t, cluster.Nodes[5], c) })
	if err != nil {
		t.Fatalf("a node with the cluster's certificate: %v", err)
	}
	defer nv.Close()
	waitTopic(t, nv, "over-tls")
}
