package tier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"strata/tier/format"
	"strata/tier/objstore"
)

// ErrCollectionSkipped is returned by a collection pass that deleted
// nothing because the bucket's listing is behind what this tier knows (a
// lagging LIST): the caller should try again later, not count the pass.
var ErrCollectionSkipped = errors.New("collection skipped: the listing is behind")

// listedManifest is one manifest version found by a listing.
type listedManifest struct {
	objstore.Attrs
	key format.ManifestKey
}

// CollectOrphans deletes tp's objects that no live manifest references
// and that have been out of every manifest for longer than grace. It
// returns the number of objects deleted.
//
// Grace counts from when an object left the manifests, not from its
// upload: a manifest version is live while it is the newest or the version
// after it was published less than grace ago (by the store's clock), and
// every object a live version references stays. So a reader that took a version just before retention or
// compaction replaced it still finds its objects, and a manifest is only
// ever deleted with (in fact before) the objects that only it names.
// Segment objects that no manifest references (an upload whose manifest
// was never published, or one still under way) go once they are older
// than grace. Manifest pages are objects like segments: referenced through
// a live root (directly or through index pages), or garbage.
//
// The collector reads the bucket, not this tier's writers' state, and does
// not wait for them; it only keeps, whatever their age, the objects this
// tier's writers have in flight (written for a manifest not yet current).
// A pass whose listing shows an older newest manifest than this tier
// already knows (a lagging LIST) deletes nothing and returns
// ErrCollectionSkipped.
//
// Only the partition's leader may collect (CollectOrphansAt): the objects
// in flight that it keeps are only those of this tier's writers, and
// another node's tier does not know them. CollectOrphans, with no epoch,
// is for tools and tests.
func (t *Tier) CollectOrphans(ctx context.Context, tp format.TopicPartition, grace time.Duration) (int, error) {
	return t.CollectOrphansAt(ctx, tp, math.MaxInt32, grace)
}

// CollectOrphansAt is CollectOrphans by the partition's leader at epoch:
// a pass whose listing or tier shows a manifest of a later epoch (a newer
// leader, whose writes in flight this tier does not know) deletes nothing
// and returns ErrFenced.
func (t *Tier) CollectOrphansAt(ctx context.Context, tp format.TopicPartition, epoch int32, grace time.Duration) (int, error) {
	ps := t.state(tp)
	cutoff := t.cfg.Now().Add(-grace)
	// Segments and pages are listed before manifests: an object that a
	// manifest published after the first listings names is then seen in
	// the last.
	var segments []objstore.Attrs
	err := t.store.List(ctx, tp.SegmentsPrefix(), func(a objstore.Attrs) error {
		if _, err := format.ParseSegmentKey(a.Key); err == nil {
			segments = append(segments, a)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("list segments of %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	err = t.store.List(ctx, tp.PagesPrefix(), func(a objstore.Attrs) error {
		if _, err := format.ParsePageKey(a.Key); err == nil {
			segments = append(segments, a)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("list manifest pages of %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	var manifests []listedManifest // in (epoch, seq) order, as keys sort
	err = t.store.List(ctx, tp.ManifestsPrefix(), func(a objstore.Attrs) error {
		if k, err := format.ParseManifestKey(a.Key); err == nil {
			manifests = append(manifests, listedManifest{a, k})
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("list manifests of %s-%d: %w", tp.Topic, tp.Partition, err)
	}

	referenced := make(map[string]bool)
	// Objects in flight are read before the current manifest: one whose
	// writer has let go of it is then in that manifest (a writer lets go
	// only once the manifest naming it is current).
	for _, k := range ps.heldKeys() {
		referenced[k] = true
	}
	cur := ps.cur.Load()
	if cur != nil && cur.LeaderEpoch > epoch {
		return 0, t.fenced(cur, epoch)
	}
	if n := len(manifests); n > 0 {
		newest := manifests[n-1].key
		if newest.LeaderEpoch > epoch {
			return 0, fmt.Errorf("%w: %s-%d has manifest %s, the collector's epoch is %d", ErrFenced, tp.Topic, tp.Partition, manifests[n-1].Key, epoch)
		}
		if cur != nil && (cur.LeaderEpoch > newest.LeaderEpoch || cur.LeaderEpoch == newest.LeaderEpoch && cur.Seq > newest.Seq) {
			return 0, fmt.Errorf("%w: the listing shows %s, this tier knows %s", ErrCollectionSkipped, manifests[n-1].Key, cur.Key())
		}
	} else if cur != nil && cur.Seq > 0 {
		return 0, fmt.Errorf("%w: the listing shows no manifest, this tier knows %s", ErrCollectionSkipped, cur.Key())
	}
	live := make(map[string]bool)
	for i, lm := range manifests {
		if i < len(manifests)-1 && manifests[i+1].LastModified.Before(cutoff) {
			continue
		}
		root, err := t.liveRoot(ctx, ps, lm.Key, i == len(manifests)-1)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // deleted since the listing, by another collector
		}
		if err != nil {
			return 0, err
		}
		live[lm.Key] = true
		if err := t.markReferenced(ctx, root, referenced); err != nil {
			return 0, err
		}
	}
	// What this tier holds or may have published counts too, whatever the
	// listing shows.
	if cur != nil {
		if err := t.markReferenced(ctx, cur, referenced); err != nil {
			return 0, err
		}
	}
	if p := ps.pending.Load(); p != nil {
		if err := t.markReferenced(ctx, p.m, referenced); err != nil {
			return 0, err
		}
	}
	ps.pruneRefs(live)

	// Manifests first: if the pass stops half-way, no manifest is left
	// naming a deleted object.
	var victims []string
	for _, lm := range manifests {
		if !live[lm.Key] && lm.LastModified.Before(cutoff) {
			victims = append(victims, lm.Key)
		}
	}
	for _, a := range segments {
		if !referenced[a.Key] && a.LastModified.Before(cutoff) {
			victims = append(victims, a.Key)
		}
	}
	deleted := 0
	for _, key := range victims {
		if err := t.store.Delete(ctx, key); err != nil {
			return deleted, fmt.Errorf("delete orphan %s: %w", key, err)
		}
		deleted++
		t.log.Info("deleted orphan object", "topic", tp.Topic, "partition", tp.Partition, "key", key)
	}
	return deleted, nil
}

// liveRoot returns the manifest root stored under key, reading it once per
// tier: a version never changes under its key. The newest version read
// also brings the tier's current manifest forward.
func (t *Tier) liveRoot(ctx context.Context, ps *partitionState, key string, newest bool) (*format.Root, error) {
	ps.refs.Lock()
	root, ok := ps.refs.byKey[key]
	ps.refs.Unlock()
	if ok {
		return root, nil // the newest too: it was advanced to when read
	}
	root, err := GetManifest(ctx, t.store, key)
	if err != nil {
		return nil, err
	}
	if newest {
		ps.advance(root)
	}
	ps.refs.Lock()
	if ps.refs.byKey == nil {
		ps.refs.byKey = make(map[string]*format.Root)
	}
	ps.refs.byKey[key] = root
	ps.refs.Unlock()
	return root, nil
}

// markReferenced adds to referenced the keys of every page and segment
// root references. Live roots share most of their pages, and what is
// beneath a page never changes, so a page already marked is not walked
// again: a pass fetches each distinct page once (through the page cache).
func (t *Tier) markReferenced(ctx context.Context, root *format.Root, referenced map[string]bool) error {
	var walk func(refs []format.PageRef) error
	walk = func(refs []format.PageRef) error {
		for _, ref := range refs {
			if referenced[ref.Key] {
				continue
			}
			p, err := t.pages.Page(ctx, ref)
			if err != nil {
				return fmt.Errorf("read manifest %s: %w", root.Key(), err)
			}
			if err := walk(p.Pages); err != nil {
				return err
			}
			for _, s := range p.Segments {
				referenced[s.Key] = true
			}
			// Marked last: a page is marked only once all beneath it is.
			referenced[ref.Key] = true
		}
		return nil
	}
	if err := walk(root.Pages); err != nil {
		return err
	}
	for _, s := range root.Tail {
		referenced[s.Key] = true
	}
	return nil
}

// pruneRefs forgets the referenced keys of versions that are not live.
func (ps *partitionState) pruneRefs(live map[string]bool) {
	ps.refs.Lock()
	defer ps.refs.Unlock()
	for k := range ps.refs.byKey {
		if !live[k] {
			delete(ps.refs.byKey, k)
		}
	}
}

// ErrPartitionDeleted reports a write to a partition whose deletion from
// the bucket has begun (DeletePartition): its topic is gone.
var ErrPartitionDeleted = errors.New("tier: partition deleted")

// deletionFence passes every call to the store, refusing writes (Put,
// Create) to the partitions whose deletion has begun, so that no object
// this tier writes outlives a deletion: a compaction pass, which no
// upload lock stops, would otherwise write its output, pages and root
// after DeletePartition listed the partition, and nothing would ever
// delete them. Deletes and reads go through.
type deletionFence struct {
	objstore.Store

	mu sync.Mutex
	// deleted holds the key prefixes of the partitions being deleted,
	// and deleted: a topic ID is never reused, so they stay.
	deleted map[string]bool
	// writes are the writes under way, each closing done when it ends.
	writes map[*fencedWrite]bool
}

type fencedWrite struct {
	key  string
	done chan struct{}
}

func (f *deletionFence) write(key string, op func() error) error {
	f.mu.Lock()
	for prefix := range f.deleted {
		if strings.HasPrefix(key, prefix) {
			f.mu.Unlock()
			return fmt.Errorf("%w: write of %s refused", ErrPartitionDeleted, key)
		}
	}
	w := &fencedWrite{key: key, done: make(chan struct{})}
	if f.writes == nil {
		f.writes = make(map[*fencedWrite]bool)
	}
	f.writes[w] = true
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.writes, w)
		f.mu.Unlock()
		close(w.done)
	}()
	return op()
}

func (f *deletionFence) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return f.write(key, func() error { return f.Store.Put(ctx, key, r, size) })
}

func (f *deletionFence) Create(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return f.write(key, func() error { return f.Store.Create(ctx, key, r, size) })
}

// ListAfter passes listings from a key on to the store's own
// (objstore.ListAfter).
func (f *deletionFence) ListAfter(ctx context.Context, prefix, startAfter string, fn func(objstore.Attrs) error) error {
	return objstore.ListAfter(ctx, f.Store, prefix, startAfter, fn)
}

func (f *deletionFence) String() string { return fmt.Sprint(f.Store) }

// close refuses every later write under prefix and waits for those under
// way, so that a listing made after it returns sees all this tier wrote
// there.
func (f *deletionFence) close(ctx context.Context, prefix string) error {
	f.mu.Lock()
	if f.deleted == nil {
		f.deleted = make(map[string]bool)
	}
	f.deleted[prefix] = true
	var wait []*fencedWrite
	for w := range f.writes {
		if strings.HasPrefix(w.key, prefix) {
			wait = append(wait, w)
		}
	}
	f.mu.Unlock()
	for _, w := range wait {
		select {
		case <-w.done:
		case <-ctx.Done():
			return fmt.Errorf("wait for the write of %s: %w", w.key, ctx.Err())
		}
	}
	return nil
}

// DeletePartition removes every object of tp from the bucket: the topic
// was deleted. From its call on, this tier writes nothing more of tp
// (ErrPartitionDeleted), and what its writers were writing is waited for
// and deleted too: a compaction pass under way loses its outputs, and
// its manifest change fails.
//
// Segment objects go first and the manifests only once every segment is
// gone: as long as a segment object is left, the manifests that list it
// stay too, so the partition still looks like one to whoever reads the
// bucket, and a later call finds what this one left. A failed DELETE does
// not stop the others; the error counts what is left, and calling again
// resumes (deleting a missing key is no error).
func (t *Tier) DeletePartition(ctx context.Context, tp format.TopicPartition) error {
	if err := t.fence.close(ctx, tp.Prefix()); err != nil {
		return fmt.Errorf("delete %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	t.mu.Lock()
	delete(t.partitions, tp)
	t.mu.Unlock()
	var segments, manifests []string
	if err := t.store.List(ctx, tp.Prefix(), func(a objstore.Attrs) error {
		if _, err := format.ParseManifestKey(a.Key); err == nil {
			manifests = append(manifests, a.Key)
		} else {
			segments = append(segments, a.Key) // and anything else of the partition
		}
		return nil
	}); err != nil {
		return fmt.Errorf("list %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	deleteAll := func(what string, keys []string) error {
		failed := 0
		var first error
		for _, k := range keys {
			if err := t.store.Delete(ctx, k); err != nil {
				if failed++; first == nil {
					first = err
				}
				if ctx.Err() != nil {
					break
				}
			}
		}
		if failed > 0 {
			return fmt.Errorf("delete %s-%d: %d of %d %s not deleted: %w", tp.Topic, tp.Partition, failed, len(keys), what, first)
		}
		return nil
	}
	if err := deleteAll("segment objects", segments); err != nil {
		return fmt.Errorf("%w (manifests kept)", err)
	}
	// Oldest first (List is in key order), so the manifest left by a
	// failure is still the newest one.
	return deleteAll("manifests", manifests)
}
