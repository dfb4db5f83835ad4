package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// clusterIDOf is the cluster id a broker reports in Metadata.
func clusterIDOf(t *testing.T, bootstrap string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := kadm.NewClient(newClient(t, bootstrap)).BrokerMetadata(ctx)
	if err != nil {
		t.Fatalf("metadata of %s: %v", bootstrap, err)
	}
	if md.Cluster == "" {
		t.Fatalf("%s reports no cluster id", bootstrap)
	}
	return md.Cluster
}

// bucketClusterID reads the cluster id written into a directory bucket.
func bucketClusterID(t *testing.T, bucketDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(bucketDir, "cluster.json"))
	if err != nil {
		t.Fatalf("the bucket's cluster object: %v", err)
	}
	var c struct {
		ClusterID string `json:"cluster_id"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("cluster.json: %v\n%s", err, b)
	}
	return c.ClusterID
}

// TestTierVerbsCheckTheBucketsCluster (issue 21, item 4): a leftover
// ./strata-data of an earlier `strata dev` (cluster B) in the working
// directory, and a tier verb pointed at another cluster (A) without
// bucket flags. The verbs used to read B's bucket as A's, mixing A's
// offsets with whatever B's held; now they refuse, naming both clusters,
// and with A's own bucket they say which bucket they read, and whose.
func TestTierVerbsCheckTheBucketsCluster(t *testing.T) {
	work := t.TempDir()
	leftover := filepath.Join(work, "strata-data")
	nB := startNode(t, nil, "dev", "--data-dir", leftover, "--listen", "127.0.0.1:0", "--http-listen", "off")
	idB := clusterIDOf(t, nB.bootstrap)
	nB.stop(t)
	if got := bucketClusterID(t, filepath.Join(leftover, "bucket")); got != idB {
		t.Fatalf("cluster B's bucket names cluster %q, its broker reported %q", got, idB)
	}

	dirA := t.TempDir()
	nA := startNode(t, nil, "dev", "--data-dir", dirA, "--listen", "127.0.0.1:0", "--http-listen", "off")
	defer nA.stop(t)
	idA := clusterIDOf(t, nA.bootstrap)
	if idA == idB {
		t.Fatalf("two clusters started apart share the id %s", idA)
	}
	mustCreate(t, nA.bootstrap, "orders", 1, nil)
	env := []string{"STRATA_BOOTSTRAP=" + nA.bootstrap}

	t.Chdir(work)
	for _, verb := range [][]string{{"tier", "status", "orders"}, {"tier", "ls", "orders", "0"}, {"tier", "verify"}, {"tier", "status", "--json"}} {
		code, stdout, stderr := runCLI(t, env, verb...)
		if code != 1 || stdout != "" {
			t.Errorf("strata %s with cluster B's leftover bucket: exit %d\n%s", strings.Join(verb, " "), code, stdout)
		}
		assertOneLineError(t, stderr, "strata-data/bucket belongs to cluster "+idB, "is of cluster "+idA)
	}

	// A bucket directory without a cluster object is no cluster's bucket
	// either (brokers write theirs at start).
	bare := t.TempDir()
	if err := os.Mkdir(filepath.Join(bare, "bucket"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCLI(t, env, "tier", "status", "orders", "--data-dir", bare)
	if code != 1 {
		t.Errorf("tier status with a bucket holding no cluster id: exit %d", code)
	}
	assertOneLineError(t, stderr, "holds no cluster id", "cluster "+idA)

	// Cluster A's own bucket: each verb says first which bucket it read.
	if got := bucketClusterID(t, filepath.Join(dirA, "bucket")); got != idA {
		t.Fatalf("cluster A's bucket names cluster %q, its broker reports %q", got, idA)
	}
	want := "bucket: dir " + filepath.Join(dirA, "bucket") + " (cluster " + idA + ")\n"
	for _, verb := range [][]string{{"tier", "status", "orders"}, {"tier", "ls", "orders", "0"}, {"tier", "verify"}} {
		_, stdout, stderr := runCLI(t, env, append(verb, "--data-dir", dirA)...)
		if !strings.HasPrefix(stdout, want) {
			t.Errorf("strata %s does not say first which bucket it read (%q):\n%s%s", strings.Join(verb, " "), want, stdout, stderr)
		}
	}
	// With --json the line goes to stderr, and stdout stays JSON.
	code, stdout, stderr := runCLI(t, env, "tier", "status", "orders", "--json", "--data-dir", dirA)
	var rows []partitionStatus
	if err := json.Unmarshal([]byte(stdout), &rows); code != 0 || err != nil || len(rows) != 1 {
		t.Errorf("tier status --json: exit %d, %v\n%s", code, err, stdout)
	}
	if stderr != want {
		t.Errorf("tier status --json: stderr %q, want %q", stderr, want)
	}
	// Without a broker to ask, the bucket is read alone, and the line says
	// it went unchecked.
	_, stdout, _ = runCLI(t, nil, "tier", "verify", "--data-dir", leftover, "--bootstrap", "127.0.0.1:1", "--timeout", "2s")
	if wantB := "bucket: dir " + filepath.Join(leftover, "bucket") + " (cluster " + idB + "; no broker answered to check it against)\n"; !strings.HasPrefix(stdout, wantB) {
		t.Errorf("tier verify without a broker: want first %q:\n%s", wantB, stdout)
	}
}

// TestNodeRefusesAnotherClustersBucket (issue 21, item 4): a node pointed
// at a bucket another cluster claimed refuses to start, with one line
// naming both clusters, and leaves the bucket as it was.
func TestNodeRefusesAnotherClustersBucket(t *testing.T) {
	dirB := t.TempDir()
	nB := startNode(t, nil, "dev", "--data-dir", dirB, "--listen", "127.0.0.1:0", "--http-listen", "off")
	idB := clusterIDOf(t, nB.bootstrap)
	nB.stop(t)
	bucket := filepath.Join(dirB, "bucket")

	line := runFails(t, "serve", "--node-id", "1", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off",
		"--bucket-dir", bucket, "--cluster-id", "cluster-a")
	assertOneLineError(t, line, "bucket "+bucket+" belongs to cluster "+idB, "not to this node's cluster cluster-a")
	if got := bucketClusterID(t, bucket); got != idB {
		t.Errorf("the refused node changed the bucket's cluster to %q", got)
	}

	// The cluster that owns it starts against it again.
	nB = startNode(t, nil, "dev", "--data-dir", dirB, "--listen", "127.0.0.1:0", "--http-listen", "off")
	if id := clusterIDOf(t, nB.bootstrap); id != idB {
		t.Errorf("restarted, cluster B reports id %q, not %q", id, idB)
	}
	nB.stop(t)
}
