package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"strata/tier/format"
	"strata/tier/objstore"
)

// ForeignBucketError says a bucket belongs to another cluster than the one
// that meant to use it. Two clusters sharing a bucket (or prefix) would
// mix topics whose ids mean nothing to the other, and an inspection tool
// pointed at the wrong bucket would report another cluster's data as this
// one's.
type ForeignBucketError struct {
	// Bucket is the id the bucket's cluster object holds; Cluster is the
	// id of the cluster that meant to use it.
	Bucket, Cluster string
}

func (e *ForeignBucketError) Error() string {
	return fmt.Sprintf("the bucket belongs to cluster %s, not to cluster %s", e.Bucket, e.Cluster)
}

// BucketCluster reads the bucket's cluster object (format.ClusterKey); ok
// is false when the bucket has none: a bucket no broker of this version
// has started against yet, or not a bucket of Strata's at all.
func BucketCluster(ctx context.Context, st objstore.Store) (c format.Cluster, ok bool, err error) {
	rc, err := st.GetRange(ctx, format.ClusterKey, 0, -1)
	if errors.Is(err, objstore.ErrNotFound) {
		return c, false, nil
	}
	if err != nil {
		return c, false, fmt.Errorf("read %s: %w", format.ClusterKey, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<16))
	if err != nil {
		return c, false, fmt.Errorf("read %s: %w", format.ClusterKey, err)
	}
	if c, err = format.ParseCluster(b); err != nil {
		return c, false, fmt.Errorf("%s: %w", format.ClusterKey, err)
	}
	return c, true, nil
}

// ClaimBucket ties the bucket to the cluster c names: it writes the
// cluster object if the bucket has none, with a conditional create so
// that of two clusters starting against one empty bucket only one wins,
// and returns a *ForeignBucketError when the bucket belongs to another
// cluster. Brokers of one cluster racing to claim agree: the losers read
// the winner's object, which names their own cluster.
func ClaimBucket(ctx context.Context, st objstore.Store, c format.Cluster) error {
	have, ok, err := BucketCluster(ctx, st)
	if err != nil {
		return err
	}
	if !ok {
		b, err := c.Encode()
		if err != nil {
			return err
		}
		err = st.Create(ctx, format.ClusterKey, bytes.NewReader(b), int64(len(b)))
		if err == nil {
			return nil
		}
		if !errors.Is(err, objstore.ErrExists) {
			return fmt.Errorf("write %s: %w", format.ClusterKey, err)
		}
		// Someone claimed it meanwhile (or a retry of ours met our own
		// first attempt): whose is it?
		if have, ok, err = BucketCluster(ctx, st); err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("write %s: exists, yet reads as missing", format.ClusterKey)
		}
	}
	if have.ClusterID != c.ClusterID {
		return &ForeignBucketError{Bucket: have.ClusterID, Cluster: c.ClusterID}
	}
	return nil
}
