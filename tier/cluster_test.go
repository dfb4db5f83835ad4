package tier

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"strata/tier/format"
	"strata/tier/objstore"
)

// TestClaimBucket: a bucket is claimed once, by the first cluster to start
// against it (docs/bucket-format.md §11); the same cluster claims it again
// at every start, and another cluster is refused with both ids named.
func TestClaimBucket(t *testing.T) {
	ctx := context.Background()
	st, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := BucketCluster(ctx, st); err != nil || ok {
		t.Fatalf("empty bucket: cluster object found=%v, err %v", ok, err)
	}
	if err := ClaimBucket(ctx, st, format.Cluster{ClusterID: "alpha", CreatedBy: 1}); err != nil {
		t.Fatalf("claim an empty bucket: %v", err)
	}
	c, ok, err := BucketCluster(ctx, st)
	if err != nil || !ok || c.ClusterID != "alpha" || c.CreatedBy != 1 {
		t.Fatalf("after the claim: %+v, found=%v, err %v", c, ok, err)
	}
	// Another broker of the same cluster, or the same one restarted.
	if err := ClaimBucket(ctx, st, format.Cluster{ClusterID: "alpha", CreatedBy: 2}); err != nil {
		t.Fatalf("claim again by the same cluster: %v", err)
	}
	err = ClaimBucket(ctx, st, format.Cluster{ClusterID: "beta", CreatedBy: 1})
	var foreign *ForeignBucketError
	if !errors.As(err, &foreign) || foreign.Bucket != "alpha" || foreign.Cluster != "beta" {
		t.Fatalf("claim by another cluster: %v, want a ForeignBucketError naming alpha and beta", err)
	}
	if c, _, _ := BucketCluster(ctx, st); c.ClusterID != "alpha" || c.CreatedBy != 1 {
		t.Fatalf("the refused claim changed the cluster object: %+v", c)
	}
}

// TestClaimBucketRace: two clusters starting at once against one empty
// bucket, three brokers each: exactly one cluster gets it, all of its
// brokers pass, and every broker of the other is refused.
func TestClaimBucketRace(t *testing.T) {
	ctx := context.Background()
	for round := range 10 {
		st, err := objstore.NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		errs := make(map[string][]error)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, id := range []string{"alpha", "beta"} {
			for node := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := ClaimBucket(ctx, st, format.Cluster{ClusterID: id, CreatedBy: int32(node)})
					mu.Lock()
					errs[id] = append(errs[id], err)
					mu.Unlock()
				}()
			}
		}
		wg.Wait()
		c, ok, err := BucketCluster(ctx, st)
		if err != nil || !ok {
			t.Fatalf("round %d: no cluster object after the race: %v", round, err)
		}
		for id, es := range errs {
			for _, err := range es {
				var foreign *ForeignBucketError
				switch {
				case id == c.ClusterID && err != nil:
					t.Errorf("round %d: a broker of %s, which owns the bucket, failed: %v", round, id, err)
				case id != c.ClusterID && !errors.As(err, &foreign):
					t.Errorf("round %d: a broker of %s was not refused the bucket of %s: %v", round, id, c.ClusterID, err)
				}
			}
		}
	}
}

// TestClaimedStoreClaimsOnFirstWrite: a broker that starts while the
// store is down claims the bucket with its first write once the store is
// back; until then nothing is written. A bucket that proves to be
// another cluster's takes no write at all, and says whose it is.
func TestClaimedStoreClaimsOnFirstWrite(t *testing.T) {
	ctx := context.Background()
	inner, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	down := objstore.WithFaults(inner, objstore.FaultConfig{FailRate: 1})
	st := NewClaimedStore(down, format.Cluster{ClusterID: "alpha"})
	if err := st.Claim(ctx); !errors.Is(err, objstore.ErrInjected) {
		t.Fatalf("claim while the store is down: %v", err)
	}
	if err := st.Put(ctx, "k", bytes.NewReader([]byte("v")), 1); !errors.Is(err, objstore.ErrInjected) || !objstore.IsRetryable(err) {
		t.Fatalf("write while the store is down: %v, want the store's retryable error", err)
	}
	down.SetConfig(objstore.FaultConfig{})
	if err := st.Put(ctx, "k", bytes.NewReader([]byte("v")), 1); err != nil {
		t.Fatalf("write once the store is back: %v", err)
	}
	if c, ok, err := BucketCluster(ctx, inner); err != nil || !ok || c.ClusterID != "alpha" {
		t.Fatalf("the first write did not claim the bucket: %+v, %v, %v", c, ok, err)
	}

	other := NewClaimedStore(inner, format.Cluster{ClusterID: "beta"})
	for _, write := range []func() error{
		func() error { return other.Put(ctx, "k2", bytes.NewReader([]byte("v")), 1) },
		func() error { return other.Create(ctx, "k3", bytes.NewReader([]byte("v")), 1) },
		func() error { return other.Delete(ctx, "k") },
	} {
		var foreign *ForeignBucketError
		if err := write(); !errors.As(err, &foreign) || foreign.Bucket != "alpha" || foreign.Cluster != "beta" {
			t.Fatalf("write by another cluster: %v", err)
		}
	}
	var keys []string
	if err := inner.List(ctx, "", func(a objstore.Attrs) error { keys = append(keys, a.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, " ") != "cluster.json k" {
		t.Fatalf("the bucket holds %v after the other cluster's writes", keys)
	}
}

// TestClaimedStoreWaitsForTheClusterID: a store made before its cluster
// had an id (a broker started under a controller that names no cluster)
// writes nothing, and reads, until Name gives it the id; the next write
// then claims the bucket for it. A store refused by its owner writes
// nothing, for good.
func TestClaimedStoreWaitsForTheClusterID(t *testing.T) {
	ctx := context.Background()
	inner, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := inner.Put(ctx, "old", bytes.NewReader([]byte("v")), 1); err != nil {
		t.Fatal(err)
	}
	st := NewClaimedStore(inner, format.Cluster{CreatedBy: 3})
	for _, write := range []func() error{
		func() error { return st.Put(ctx, "k", bytes.NewReader([]byte("v")), 1) },
		func() error { return st.Create(ctx, "k", bytes.NewReader([]byte("v")), 1) },
		func() error { return st.Delete(ctx, "old") },
	} {
		if err := write(); !errors.Is(err, ErrClusterUnnamed) {
			t.Fatalf("write before the cluster has an id: %v", err)
		}
	}
	rc, err := st.GetRange(ctx, "old", 0, -1)
	if err != nil {
		t.Fatalf("read before the cluster has an id: %v", err)
	}
	rc.Close()
	if _, ok, err := BucketCluster(ctx, inner); ok || err != nil {
		t.Fatalf("the bucket was claimed before the cluster had an id (%v)", err)
	}
	st.Name("alpha")
	st.Name("beta") // the first id stays
	if err := st.Put(ctx, "k", bytes.NewReader([]byte("v")), 1); err != nil {
		t.Fatalf("write once the cluster has an id: %v", err)
	}
	if c, ok, err := BucketCluster(ctx, inner); err != nil || !ok || c.ClusterID != "alpha" || c.CreatedBy != 3 {
		t.Fatalf("the first write after the id did not claim the bucket for it: %+v, %v, %v", c, ok, err)
	}

	refusal := errors.New("not this node's cluster")
	refused := NewClaimedStore(inner, format.Cluster{})
	refused.Refuse(refusal)
	refused.Name("alpha")
	if err := refused.Put(ctx, "k2", bytes.NewReader([]byte("v")), 1); !errors.Is(err, refusal) {
		t.Fatalf("write to a refused store: %v", err)
	}
	if _, err := inner.GetRange(ctx, "k2", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a refused store wrote k2 (%v)", err)
	}
}
