package broker

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/meta"
	"strata/tier"
	"strata/tier/objstore"
)

// TestUnnamedClusterDoesNotHoldTheStart (issue 21, item 4, a rolling
// upgrade): a controller of the version before clusters had ids never
// names the cluster. A broker of this version starts all the same and
// serves produce and fetch; Metadata reports no id, and nothing is written
// to the bucket, until the cluster is named; then the bucket is claimed
// for that id and the uploads follow. The wait is said once, and its end.
// A restart with a cluster.id other than the one now known is refused.
func TestUnnamedClusterDoesNotHoldTheStart(t *testing.T) {
	store, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	testHookMetaConfig = func(c *meta.Config) { c.HoldNaming = hold }
	defer func() { testHookMetaConfig = nil }()
	var logs logBuffer
	dir := t.TempDir()
	begun := time.Now()
	b := tieredBroker(t, dir, store, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	if took := time.Since(begun); took > 5*time.Second {
		t.Fatalf("start-up took %s while the cluster had no id", took)
	}
	testHookMetaConfig = nil

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	metadataID := func() *string {
		t.Helper()
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, testClient(t, b))
		if err != nil {
			t.Fatal(err)
		}
		return resp.ClusterID
	}
	if id := metadataID(); id != nil {
		t.Fatalf("Metadata reports cluster id %q before the controller named the cluster", *id)
	}

	createTopic(t, testAdmin(t, b), "t", 1, map[string]*string{"segment.bytes": ptr("16384")})
	produceKeyed(t, b, "t", 100, 1000, kgo.ProducerBatchMaxBytes(4096))
	consumeExactlyOnce(t, b, "t", 100, 1000)
	time.Sleep(300 * time.Millisecond) // upload passes run every 20ms
	var objects []string
	if err := objstore.ListAfter(ctx, store, "", "", func(a objstore.Attrs) error {
		objects = append(objects, a.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(objects) > 0 {
		t.Fatalf("written to the bucket before the cluster had an id: %v", objects)
	}
	const waiting = "waiting for the controller to name the cluster; uploads to the bucket wait for it"
	waitFor(t, 5*time.Second, "the wait to be logged", func() bool { return strings.Contains(logs.String(), waiting) })

	close(hold) // a controller of this version names the cluster
	waitUploadedWithin(t, b, "t", 1, 30*time.Second)
	if p := b.partition("t", 0); p.RemoteEnd() == 0 {
		t.Fatal("nothing uploaded once the cluster was named")
	}
	id := b.node.ClusterID()
	if id == "" {
		t.Fatal("the cluster has no id after the controller named it")
	}
	mark, ok, err := tier.BucketCluster(ctx, store)
	if err != nil || !ok || mark.ClusterID != id {
		t.Fatalf("the bucket's cluster object: %+v (found %v, %v), want cluster %s", mark, ok, err, id)
	}
	if got := metadataID(); got == nil || *got != id {
		t.Fatalf("Metadata reports cluster %v, want %s", got, id)
	}
	out := logs.String()
	if n := strings.Count(out, waiting); n != 1 {
		t.Errorf("the wait was logged %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "the controller named the cluster"); n != 1 {
		t.Errorf("the end of the wait was logged %d times, want once:\n%s", n, out)
	}
	if strings.Contains(out, "level=WARN msg=\"tier upload\"") {
		t.Errorf("uploads held for the cluster's id were logged as failures:\n%s", out)
	}

	// Known at start, a cluster.id other than the metadata's is refused.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = Start(ctx, Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: testLogger(), ClusterID: "another"})
	if err == nil || !strings.Contains(err.Error(), "cluster.id is another, but the metadata (data dir "+dir+", or the quorum) is of cluster "+id) {
		t.Fatalf("a restart with another cluster.id: %v", err)
	}
}
