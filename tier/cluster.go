package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

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

// ClaimedStore is a store whose writes (Put, Create, Delete) happen only
// once the bucket is claimed for its cluster (ClaimBucket). A broker
// claims at start; when the store is down then, it starts anyway, as it
// does for any outage, and the claim is made by the first write after:
// until then writes fail like the store they could not reach, and the
// writers retry them as they retry any failed upload. A broker whose
// cluster has no id yet (its controller is of a version before clusters
// had ids) starts too, with a store that refuses writes the same way
// until Name gives it the id. A bucket found to be another cluster's
// refuses every write. Reads pass through: they change nothing, and
// topic ids are the cluster's own.
type ClaimedStore struct {
	objstore.Store

	mu struct {
		sync.Mutex
		// cluster is what the claim writes; its id is empty until the
		// cluster is named.
		cluster format.Cluster
		// done says the claim held; foreign, that the bucket is another
		// cluster's; refused, that the owner will never claim it. All are
		// final.
		done    bool
		foreign *ForeignBucketError
		refused error
	}
}

var (
	_ objstore.Store  = (*ClaimedStore)(nil)
	_ objstore.Lister = (*ClaimedStore)(nil)
)

// ErrClusterUnnamed is what a ClaimedStore's writes fail with while its
// cluster has no id to claim the bucket for.
var ErrClusterUnnamed = errors.New("the cluster has no id yet")

// NewClaimedStore returns st with its writes held until the bucket is
// claimed for c's cluster. c's id may be empty, for a cluster not named
// yet: writes then wait for Name too.
func NewClaimedStore(st objstore.Store, c format.Cluster) *ClaimedStore {
	s := &ClaimedStore{Store: st}
	s.mu.cluster = c
	return s
}

// Name gives a store made before its cluster had an id that id; the next
// Claim, or write, claims the bucket for it. A store that has an id keeps
// it.
func (s *ClaimedStore) Name(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.cluster.ClusterID == "" {
		s.mu.cluster.ClusterID = id
	}
}

// Refuse makes every later write fail with err, for good: the owner found
// that the bucket is not its to claim (its cluster's id is not the one it
// was configured with).
func (s *ClaimedStore) Refuse(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.mu.done && s.mu.foreign == nil {
		s.mu.refused = err
	}
}

// Claim claims the bucket if that is not done yet: nil once it is (now or
// before), a *ForeignBucketError, every time, once the bucket proved to be
// another cluster's, ErrClusterUnnamed while the cluster has no id, else
// the store's error, and a later call tries again. Concurrent callers
// wait for one claim.
func (s *ClaimedStore) Claim(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.mu.done:
		return nil
	case s.mu.foreign != nil:
		return s.mu.foreign
	case s.mu.refused != nil:
		return s.mu.refused
	case s.mu.cluster.ClusterID == "":
		return ErrClusterUnnamed
	}
	err := ClaimBucket(ctx, s.Store, s.mu.cluster)
	var foreign *ForeignBucketError
	switch {
	case err == nil:
		s.mu.done = true
	case errors.As(err, &foreign):
		s.mu.foreign = foreign
	}
	return err
}

func (s *ClaimedStore) claimed(ctx context.Context) error {
	if err := s.Claim(ctx); err != nil {
		if errors.Is(err, ErrClusterUnnamed) {
			return fmt.Errorf("bucket not claimed, nothing written: %w", err)
		}
		s.mu.Lock()
		id := s.mu.cluster.ClusterID
		s.mu.Unlock()
		return fmt.Errorf("bucket not claimed for cluster %s, nothing written: %w", id, err)
	}
	return nil
}

func (s *ClaimedStore) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	if err := s.claimed(ctx); err != nil {
		return err
	}
	return s.Store.Put(ctx, key, r, size)
}

func (s *ClaimedStore) Create(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	if err := s.claimed(ctx); err != nil {
		return err
	}
	return s.Store.Create(ctx, key, r, size)
}

func (s *ClaimedStore) Delete(ctx context.Context, key string) error {
	if err := s.claimed(ctx); err != nil {
		return err
	}
	return s.Store.Delete(ctx, key)
}

// ListAfter keeps the inner store's listing from a key, which embedding
// alone would hide.
func (s *ClaimedStore) ListAfter(ctx context.Context, prefix, startAfter string, fn func(objstore.Attrs) error) error {
	return objstore.ListAfter(ctx, s.Store, prefix, startAfter, fn)
}

func (s *ClaimedStore) String() string { return fmt.Sprint(s.Store) }
