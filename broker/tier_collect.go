package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"strata/tier/format"
)

// collector is the state of the tier's collector goroutine (collectLoop),
// which removes from the bucket what nobody needs any more: the objects
// of deleted topics. It runs apart from the upload loop, so a slow or
// failing store delays deletions, never uploads.
type collector struct {
	// wake nudges the loop when a deletion is queued; it holds one signal.
	wake chan struct{}
	// dir holds one empty marker file per partition of a deleted topic
	// whose objects are not all deleted yet, named as its log directory
	// was (partitionDir): a restart resumes the work.
	dir string

	mu struct {
		sync.Mutex
		// deletes are the partitions whose objects are to be deleted.
		deletes map[format.TopicPartition]bool
	}
}

// init prepares the collector and queues the deletions left by a previous
// run.
func (c *collector) init(dir string) error {
	c.wake = make(chan struct{}, 1)
	c.dir = dir
	c.mu.deletes = make(map[format.TopicPartition]bool)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("tier deletions: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("tier deletions: %w", err)
	}
	for _, e := range entries {
		if topic, id, index, ok := parsePartitionDir(e.Name()); ok {
			c.mu.deletes[format.TopicPartition{Topic: topic, TopicID: id, Partition: index}] = true
		}
	}
	return nil
}

func (c *collector) marker(tp format.TopicPartition) string {
	return filepath.Join(c.dir, partitionDir(tp.Topic, tp.TopicID, tp.Partition))
}

// queueRemoteDelete has the collector delete every object of tp, a
// partition of a deleted topic, retrying until it is done, across
// restarts too.
func (b *Broker) queueRemoteDelete(tp format.TopicPartition) {
	c := &b.collector
	if err := writeMarker(c.marker(tp)); err != nil {
		// Still deleted by this run; only a restart before it is done
		// would leave the objects behind.
		b.log.Warn("record a pending deletion from the bucket", "topic", tp.Topic, "partition", tp.Partition, "err", err)
	}
	c.mu.Lock()
	c.mu.deletes[tp] = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// writeMarker creates an empty file at path and makes it durable.
func writeMarker(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = errors.Join(f.Sync(), f.Close())
	if err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// collectLoop runs the collector until the broker closes. Deletions run as
// soon as they are queued; those that fail are tried again with a backoff
// from tier.upload_interval up to tier.collect_interval, each attempt
// resuming where the last one stopped.
func (b *Broker) collectLoop() {
	c := &b.collector
	cfg := b.cfg.Tier
	backoff := cfg.UploadInterval
	retry := time.NewTimer(0) // at once: deletions left by a previous run
	defer retry.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-c.wake:
		case <-retry.C:
		}
		if b.deletePending() {
			retry.Stop()
			backoff = cfg.UploadInterval
			continue
		}
		retry.Reset(backoff)
		backoff = min(2*backoff, cfg.CollectInterval)
	}
}

// deletePending deletes the objects of the queued partitions and reports
// whether none is left.
func (b *Broker) deletePending() bool {
	c := &b.collector
	c.mu.Lock()
	tps := slices.Collect(maps.Keys(c.mu.deletes))
	c.mu.Unlock()
	done := true
	for _, tp := range tps {
		if b.ctx.Err() != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Minute)
		err := b.tier.DeletePartition(ctx, tp)
		cancel()
		if err != nil {
			done = false
			if b.ctx.Err() == nil {
				b.log.Warn("delete partition from the bucket (will retry)", "topic", tp.Topic, "partition", tp.Partition, "err", err)
			}
			continue
		}
		c.mu.Lock()
		delete(c.mu.deletes, tp)
		c.mu.Unlock()
		if err := os.Remove(c.marker(tp)); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.log.Warn("remove a pending deletion's marker", "topic", tp.Topic, "partition", tp.Partition, "err", err)
		}
		b.log.Info("partition deleted from the bucket", "topic", tp.Topic, "partition", tp.Partition)
	}
	return done
}
