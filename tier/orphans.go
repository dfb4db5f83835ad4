package tier

import (
	"context"
	"fmt"
	"time"

	"strata/tier/format"
	"strata/tier/objstore"
)

// keepManifests is how many of the newest manifests of a partition survive
// collection besides grace: a reader that loaded one of them just before a
// newer one was published still finds the objects it names.
const keepManifests = 3

// CollectOrphans deletes tp's objects that its current manifest does not
// reference and that are older than grace: segment objects whose upload
// finished but whose manifest was never published (a crash between the two
// steps), objects dropped from the manifest by retention or compaction, and
// superseded manifests beyond the newest few. Grace protects uploads in
// progress and readers of a previous manifest. It returns the number of
// objects deleted.
func (t *Tier) CollectOrphans(ctx context.Context, tp format.TopicPartition, grace time.Duration) (int, error) {
	ps := t.state(tp)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	// Re-read the bucket rather than trusting the cache: the collector
	// must never delete what a newer manifest references.
	m, err := t.loadManifest(ctx, tp)
	if err != nil {
		return 0, err
	}
	ps.manifest = m
	referenced := make(map[string]bool, len(m.Segments))
	for _, s := range m.Segments {
		referenced[s.Key] = true
	}
	cutoff := t.cfg.Now().Add(-grace)
	var victims []string
	err = t.store.List(ctx, tp.SegmentsPrefix(), func(a objstore.Attrs) error {
		if !referenced[a.Key] && a.LastModified.Before(cutoff) {
			if _, err := format.ParseSegmentKey(a.Key); err == nil {
				victims = append(victims, a.Key)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("list segments of %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	var manifests []objstore.Attrs
	err = t.store.List(ctx, tp.ManifestsPrefix(), func(a objstore.Attrs) error {
		if _, err := format.ParseManifestKey(a.Key); err == nil {
			manifests = append(manifests, a)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("list manifests of %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	for i, a := range manifests {
		if i < len(manifests)-keepManifests && a.LastModified.Before(cutoff) && a.Key != m.Key() {
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

// DeletePartition removes every object of tp from the bucket: the topic
// was deleted. Later calls for tp start from an empty manifest.
//
// Segment objects go first and the manifests only once every segment is
// gone: as long as a segment object is left, the manifests that list it
// stay too, so the partition still looks like one to whoever reads the
// bucket, and a later call finds what this one left. A failed DELETE does
// not stop the others; the error counts what is left, and calling again
// resumes (deleting a missing key is no error).
func (t *Tier) DeletePartition(ctx context.Context, tp format.TopicPartition) error {
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
