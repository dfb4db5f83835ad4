package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/tier"
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
