package broker

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/internal/certs"
)

// TestClusterInterBrokerOverTLS: three brokers whose inter-broker
// listener is SSL with required client certificates and whose raft ports
// take only the cluster CA's certificates, and whose clients connect on a
// PLAINTEXT listener. Replication, registration and forwarded requests go
// over TLS; each listener's clients are told every broker's endpoint on
// that listener.
func TestClusterInterBrokerOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	dir := filepath.Join(t.TempDir(), "certs")
	set, err := certs.GenerateDev(dir, nil, 4)
	if err != nil {
		t.Fatal(err)
	}
	c := testCluster(t, 3, func(cfg *Config) {
		src, err := certs.Load(set.Nodes[cfg.NodeID], testLogger())
		if err != nil {
			t.Fatal(err)
		}
		if cfg.TLS, err = src.ServerConfig(certs.ClientAuthRequire); err != nil {
			t.Fatal(err)
		}
		cfg.RaftTLS = cfg.TLS
		cfg.PeerTLS, cfg.RaftPeerTLS = src.ClientConfig(), src.ClientConfig()
		cfg.Listeners = []Listener{
			{Name: "EXTERNAL", Security: Plaintext, Addr: "127.0.0.1:0"},
			{Name: "INTERNAL", Security: SSL, Addr: cfg.Listen},
		}
		cfg.Listen, cfg.InterBrokerListener = "", "INTERNAL"
	})
	c.createTopic("tls-replicated", 1, 3, nil)
	cl := c.client(kgo.RequiredAcks(kgo.AllISRAcks()))
	produceN(t, cl, "tls-replicated", 0, "v", 100)
	st := c.partitionState("tls-replicated", 0)
	for _, id := range st.Replicas {
		p := c.node(id).partition("tls-replicated", 0)
		c.waitFor(fmt.Sprintf("replica %d to reach 100 over TLS", id), 10*time.Second, func() bool { return p.Log().EndOffset() == 100 })
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range []struct {
		name string
		opts []kgo.Opt
	}{{"EXTERNAL", nil}, {"INTERNAL", []kgo.Opt{kgo.DialTLSConfig(clientTLS(t, dir, "admin"))}}} {
		want := map[int32]int32{}
		for _, b := range c.nodes {
			want[b.cfg.NodeID] = int32(b.ListenerAddr(l.name).(*net.TCPAddr).Port)
		}
		c.waitFor("every broker registered with its endpoints", 10*time.Second, func() bool {
			m, err := metadataOn(t, c.nodes[0].ListenerAddr(l.name).String(), l.opts...)
			if err != nil || len(m.Brokers) != 3 {
				return false
			}
			for _, b := range m.Brokers {
				if want[b.NodeID] != b.Port {
					return false
				}
			}
			return true
		})
		// A follower forwards CreateTopics to the controller over the
		// inter-broker listener.
		cl := testClient(t, c.nodes[0], append([]kgo.Opt{kgo.SeedBrokers(c.nodes[2].ListenerAddr(l.name).String())}, l.opts...)...)
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "made-on-"+l.name, 1, 3
		req.Topics = append(req.Topics, rt)
		req.TimeoutMillis = 10000
		resp, err := req.RequestWith(ctx, cl)
		if err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
			t.Fatalf("CreateTopics through node 3 on %s: %v %+v", l.name, err, resp)
		}
	}
}
