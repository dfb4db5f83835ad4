package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// shortOrphanGrace sets an orphan grace below the bound a broker
// accepts, for a test that watches the collector work within seconds.
func shortOrphanGrace(c *Config, grace time.Duration) {
	c.Tier.OrphanGrace = grace
	c.Tier.TestShortOrphanGrace = true
}

// TestOrphanGraceShorterThanAPassIsRefused: issue 20 item 8. A grace
// shorter than an upload pass lets a collector delete objects a writer it
// does not know of (a deposed leader) is about to publish; the broker
// refuses to start with one, in one line naming the bound.
func TestOrphanGraceShorterThanAPassIsRefused(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), Tier: TierConfig{OrphanGrace: time.Minute}}.WithDefaults()
	err := cfg.Validate()
	if err == nil {
		t.Fatal("an orphan grace of 1m was accepted")
	}
	if msg := err.Error(); !strings.Contains(msg, "orphan grace 1m0s") || !strings.Contains(msg, MinOrphanGrace.String()) || strings.Contains(msg, "\n") {
		t.Fatalf("error %q: want one line naming the grace and the bound %s", msg, MinOrphanGrace)
	}
	cfg.Tier.OrphanGrace = MinOrphanGrace
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the bound itself is refused: %v", err)
	}
	if def := (Config{DataDir: t.TempDir()}).WithDefaults(); def.Validate() != nil {
		t.Fatalf("the default orphan grace %s is refused: %v", def.Tier.OrphanGrace, def.Validate())
	}
}

// TestClusterOnlyTheLeaderCollectsOrphans: issue 20 item 8. The collector
// keeps, whatever their age, only the objects its own node's writers have
// in flight; a follower's collector knows nothing of the leader's (a
// compaction pass's outputs, an upload with a short grace) and would
// delete them. So only the leader lists a partition's objects to collect
// them; the follower, sharing the bucket, never does.
func TestClusterOnlyTheLeaderCollectsOrphans(t *testing.T) {
	shared := tierStores[0].open(t)
	lists := map[int32]*segmentLists{1: {n: map[string]int{}}, 2: {n: map[string]int{}}}
	c := testCluster(t, 2, func(cfg *Config) {
		hs := &hookStore{Store: shared}
		hs.setHook(lists[cfg.NodeID].hook)
		cfg.Tier = TierConfig{Store: hs, UploadInterval: 20 * time.Millisecond, CollectInterval: 20 * time.Millisecond}
		shortOrphanGrace(cfg, 50*time.Millisecond)
	})
	c.createTopic("shared", 1, 2, map[string]*string{"remote.storage.enable": ptr("true"), "segment.bytes": ptr("16384")})
	st := c.partitionState("shared", 0)
	leader := st.Leader
	follower := int32(3) - leader
	produceKeyed(t, c.node(leader), "shared", 200, 1000, kgo.ProducerBatchMaxBytes(4096))
	waitUploaded(t, c.node(leader), "shared", 1)
	c.waitFor("the follower to learn the bucket's manifest", 30*time.Second, func() bool {
		return c.node(follower).partition("shared", 0).RemoteEnd() > 0
	})
	c.waitFor("the leader to collect the partition", 30*time.Second, func() bool { return lists[leader].count("shared") >= 3 })
	// Passes keep coming on both nodes (each upload is a drop on the
	// leader); the follower, which has seen the partition since start-up,
	// would have collected it at once.
	start := lists[leader].count("shared")
	produceKeyed(t, c.node(leader), "shared", 200, 1000, kgo.ProducerBatchMaxBytes(4096))
	c.waitFor("more collections by the leader", 30*time.Second, func() bool { return lists[leader].count("shared") >= start+3 })
	if n := lists[follower].count("shared"); n != 0 {
		t.Fatalf("the follower (node %d) listed the partition's objects to collect them %d times; only the leader (node %d) may", follower, n, leader)
	}
}
