package tier

import (
	"context"
	"errors"
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
