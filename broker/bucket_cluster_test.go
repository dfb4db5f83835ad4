package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/node"
	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// TestClusterIDInTheBucket (issue 21, item 4): the brokers of a cluster
// report one cluster id, the metadata's, and it is the id written into
// their shared bucket; a broker of another cluster started against that
// bucket refuses, naming both clusters, and leaves the bucket as it was.
func TestClusterIDInTheBucket(t *testing.T) {
	store, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := testCluster(t, 3, func(cfg *Config) { cfg.Tier = TierConfig{Store: store, Where: "shared"} })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var id string
	for i, b := range c.nodes {
		// Each node answers for itself: a client seeded with it alone.
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, testClient(t, b))
		if err != nil {
			t.Fatal(err)
		}
		got := kmsg.StringPtr("")
		if resp.ClusterID != nil {
			got = resp.ClusterID
		}
		switch {
		case *got == "":
			t.Fatalf("node %d reports no cluster id", i+1)
		case id == "":
			id = *got
		case *got != id:
			t.Fatalf("node %d reports cluster %q, node 1 %q", i+1, *got, id)
		}
	}
	mark, ok, err := tier.BucketCluster(ctx, store)
	if err != nil || !ok || mark.ClusterID != id {
		t.Fatalf("the bucket's cluster object: %+v (found %v, %v), want cluster %s", mark, ok, err, id)
	}

	_, err = Start(ctx, Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: testLogger(), ClusterID: "another",
		Tier: TierConfig{Store: store, Where: "dir /b"},
	})
	if err == nil || !strings.Contains(err.Error(), "bucket dir /b belongs to cluster "+id+", not to this node's cluster another") {
		t.Fatalf("a broker of another cluster on the bucket: %v", err)
	}
	if mark, _, _ := tier.BucketCluster(ctx, store); mark.ClusterID != id {
		t.Fatalf("the refused broker changed the bucket's cluster to %s", mark.ClusterID)
	}
}

// TestSilentStoreDoesNotHoldTheStart: a store that does not answer the
// claim at start-up holds the start for the claim's bound only; the
// bucket is claimed by the first upload once the store answers, and no
// upload is written before.
func TestSilentStoreDoesNotHoldTheStart(t *testing.T) {
	inner, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hs := &hookStore{Store: inner}
	release := make(chan struct{})
	hs.setHook(func(ctx context.Context, op, key string) error {
		if key != format.ClusterKey {
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	begun := time.Now()
	b := tieredBroker(t, "", hs)
	if took := time.Since(begun); took > node.ClaimTimeout+5*time.Second {
		t.Fatalf("start-up took %s with a silent store", took)
	}
	createTopic(t, testAdmin(t, b), "t", 1, map[string]*string{"segment.bytes": ptr("16384")})
	produceKeyed(t, b, "t", 100, 1000, kgo.ProducerBatchMaxBytes(4096))
	time.Sleep(300 * time.Millisecond) // upload passes run every 20ms
	if _, ok, err := tier.BucketCluster(context.Background(), inner); ok || err != nil {
		t.Fatalf("the bucket was claimed while the store was silent (%v)", err)
	}
	if p := b.partition("t", 0); p.RemoteEnd() > 0 {
		t.Fatalf("uploaded to offset %d before the bucket was claimed", p.RemoteEnd())
	}
	close(release)
	waitUploaded(t, b, "t", 1)
	mark, ok, err := tier.BucketCluster(context.Background(), inner)
	if err != nil || !ok || mark.ClusterID != b.node.ClusterID() {
		t.Fatalf("after the first upload the bucket names %+v (found %v, %v), want cluster %s", mark, ok, err, b.node.ClusterID())
	}
}
