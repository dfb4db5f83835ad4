package node

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

	"strata/broker/partition"
	"strata/tier"
	"strata/tier/format"
)

// collector is the state of the tier's collector goroutine (collectLoop),
// which removes from the bucket what nobody needs any more: the objects
// of deleted topics, and the orphans of hosted partitions (objects no
// current manifest references: superseded manifests, segments dropped by
// retention, uploads whose manifest was never published). It runs apart
// from the upload loop, so a slow or failing store delays collection,
// never uploads.
//
// Collecting a partition costs LISTs and a manifest GET whatever it
// finds, so a partition is collected only when something may be there to
// delete: the upload loop reports every drop (dropped), and a partition is
// due once its oldest drop not yet covered by a collection is older than
// the orphan grace, since nothing younger may be deleted anyway.
type collector struct {
	// wake nudges the loop when a deletion is queued; it holds one signal.
	wake chan struct{}
	// dir holds one empty marker file per partition of a deleted topic
	// whose objects are not all deleted yet, named as its log directory
	// was (PartitionDir): a restart resumes the work.
	dir string
	// interval is tier.collect_interval.
	interval time.Duration

	mu struct {
		sync.Mutex
		// deletes are the partitions whose objects are to be deleted.
		deletes map[format.TopicPartition]bool
		// drops are, per hosted partition seen by the collector, the
		// times of drops no collection has covered yet, oldest first,
		// one per collect interval (the latest drop in it). A partition
		// absent here has not been seen since start-up: anything may be
		// there.
		drops map[format.TopicPartition][]time.Time
	}
}

// uploadPassTimeout bounds one partition's upload pass (its uploads,
// retention step and merges): the longest that an object this node writes
// there is in flight before a manifest names it.
const uploadPassTimeout = 5 * time.Minute

// MinOrphanGrace is the shortest tier.orphan_grace a broker accepts. The
// collector keeps what its own node has in flight whatever its age, but
// not what a deposed leader, unaware yet, is still writing: that is safe
// only while the grace outlasts the longest pass that writes it (an
// upload pass), twice over for the skew between the store's clock, which
// dates objects, and the broker's, which judges their age. A compaction
// pass can last longer; its outputs are checked to exist before its
// manifest change names them (tier.ErrObjectMissing), so a pass that
// outlived a leader change is refused rather than publishing a hole.
const MinOrphanGrace = 2 * uploadPassTimeout

// maxDrops bounds a partition's drop record; beyond it the oldest entry
// is folded into the next (later) one, which only delays its collection.
const maxDrops = 16

// dropped records that something of tp may have become garbage at now.
func (c *collector) dropped(tp format.TopicPartition, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, seen := c.mu.drops[tp]
	if !seen {
		d = unseenDrops(now)
	}
	c.mu.drops[tp] = addDrop(d, now, c.interval)
}

// unseenDrops is the record of a partition the collector has never
// looked at: garbage of any age (due at once), and garbage up to now that
// is not past its grace yet.
func unseenDrops(now time.Time) []time.Time { return []time.Time{{}, now} }

func addDrop(d []time.Time, now time.Time, interval time.Duration) []time.Time {
	if n := len(d); n > 0 && !d[n-1].IsZero() && now.Truncate(interval).Equal(d[n-1].Truncate(interval)) {
		d[n-1] = now
		return d
	}
	if len(d) == maxDrops {
		d = append(d[:0], d[1:]...)
	}
	return append(d, now)
}

// init prepares the collector and queues the deletions left by a previous
// run.
func (c *collector) init(dir string, interval time.Duration) error {
	c.wake = make(chan struct{}, 1)
	c.dir = dir
	c.interval = interval
	c.mu.deletes = make(map[format.TopicPartition]bool)
	c.mu.drops = make(map[format.TopicPartition][]time.Time)
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
	return filepath.Join(c.dir, PartitionDir(tp.Topic, tp.TopicID, tp.Partition))
}

// queueRemoteDelete has the collector delete every object of tp, a
// partition of a deleted topic, retrying until it is done, across
// restarts too.
func (n *Node) queueRemoteDelete(tp format.TopicPartition) {
	c := &n.collector
	if err := writeMarker(c.marker(tp)); err != nil {
		// Still deleted by this run; only a restart before it is done
		// would leave the objects behind.
		n.log.Warn("record a pending deletion from the bucket", "topic", tp.Topic, "partition", tp.Partition, "err", err)
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
//
// Collection works in passes: a pass takes the partitions that are due
// and collects them one at a time, evenly spread over
// tier.collect_interval, so that the store sees a steady trickle of
// requests rather than a burst per interval.
func (n *Node) collectLoop() {
	c := &n.collector
	cfg := n.cfg.Tier
	backoff := cfg.UploadInterval
	retry := time.NewTimer(0) // at once: deletions left by a previous run
	defer retry.Stop()
	next := time.NewTimer(0) // the next collection
	defer next.Stop()
	var pass []*partition.Partition
	var gap time.Duration
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-next.C:
			if len(pass) == 0 {
				if pass = n.dueForCollection(); len(pass) == 0 {
					next.Reset(cfg.CollectInterval)
					continue
				}
				gap = cfg.CollectInterval / time.Duration(len(pass))
			}
			n.collectPartition(pass[0])
			pass = pass[1:]
			next.Reset(gap)
			continue
		case <-c.wake:
		case <-retry.C:
		}
		if n.deletePending() {
			retry.Stop()
			backoff = cfg.UploadInterval
			continue
		}
		retry.Reset(backoff)
		backoff = min(2*backoff, cfg.CollectInterval)
	}
}

// dueForCollection returns the tiered partitions this node leads whose
// oldest uncovered drop is past the orphan grace, and forgets the record
// of partitions no longer hosted.
//
// Only the leader collects: the objects in flight the collector keeps
// whatever their age are those of its own node's writers (uploads,
// merges, compaction passes), and a follower's collector would delete the
// leader's. A follower keeps its record for when it leads.
func (n *Node) dueForCollection() []*partition.Partition {
	c := &n.collector
	now := n.cfg.Tier.Now()
	cutoff := now.Add(-n.cfg.Tier.OrphanGrace)
	ps := n.Partitions()
	hosted := make(map[format.TopicPartition]bool, len(ps))
	var due []*partition.Partition
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range ps {
		if !p.Tiered() {
			continue
		}
		tp := p.BucketName()
		hosted[tp] = true
		if _, leads := p.LeaderEpochIfLeading(); !leads {
			continue
		}
		d, seen := c.mu.drops[tp]
		if !seen {
			d = unseenDrops(now)
			c.mu.drops[tp] = d
		}
		if len(d) > 0 && d[0].Before(cutoff) {
			due = append(due, p)
		}
	}
	for tp := range c.mu.drops {
		if !hosted[tp] {
			delete(c.mu.drops, tp)
		}
	}
	return due
}

// collectPartition deletes p's orphans that are past the grace period, and
// strikes the drops that this covers from p's record.
func (n *Node) collectPartition(p *partition.Partition) {
	if p.Dropped() {
		return // dropped since the pass began
	}
	// At the epoch it leads at: a deposed leader that does not know it
	// yet is fenced by the new leader's manifests.
	epoch, leads := p.LeaderEpochIfLeading()
	if !leads {
		return // the drops stay, for when it leads again
	}
	tp := p.BucketName()
	// Read before the tier reads its own clock: every object dropped
	// before this cutoff is past the tier's cutoff too.
	cutoff := n.cfg.Tier.Now().Add(-n.cfg.Tier.OrphanGrace)
	ctx, cancel := context.WithTimeout(p.UploadContext(), time.Minute)
	// Claimed first, so that a deposed leader's collector is fenced by
	// this one's epoch even on a partition this leader has not written.
	err := n.tier.Claim(ctx, tp, epoch)
	deleted := 0
	if err == nil {
		deleted, err = n.tier.CollectOrphansAt(ctx, tp, epoch, n.cfg.Tier.OrphanGrace)
	}
	cancel()
	n.cfg.Metrics.OrphansDeleted.Add(float64(deleted))
	if err != nil {
		if errors.Is(err, tier.ErrCollectionSkipped) || errors.Is(err, tier.ErrFenced) || errors.Is(err, tier.ErrClusterUnnamed) {
			n.log.Debug("collect orphans", "topic", p.Topic(), "partition", p.Index(), "err", err)
		} else if !p.Dropped() {
			n.log.Warn("collect orphans", "topic", p.Topic(), "partition", p.Index(), "err", err)
		}
		return // the drops stay due: the next pass tries again
	}
	c := &n.collector
	c.mu.Lock()
	defer c.mu.Unlock()
	d, seen := c.mu.drops[tp]
	if !seen {
		return // no longer hosted: a partition hosted again starts unseen
	}
	covered := 0
	for covered < len(d) && d[covered].Before(cutoff) {
		covered++
	}
	c.mu.drops[tp] = append(d[:0], d[covered:]...)
}

// deletePending deletes the objects of the queued partitions and reports
// whether none is left.
func (n *Node) deletePending() bool {
	c := &n.collector
	c.mu.Lock()
	tps := slices.Collect(maps.Keys(c.mu.deletes))
	c.mu.Unlock()
	done := true
	for _, tp := range tps {
		if n.ctx.Err() != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Minute)
		err := n.tier.DeletePartition(ctx, tp)
		cancel()
		if err != nil {
			done = false
			if n.ctx.Err() == nil {
				n.log.Warn("delete partition from the bucket (will retry)", "topic", tp.Topic, "partition", tp.Partition, "err", err)
			}
			continue
		}
		c.mu.Lock()
		delete(c.mu.deletes, tp)
		c.mu.Unlock()
		if err := os.Remove(c.marker(tp)); err != nil && !errors.Is(err, os.ErrNotExist) {
			n.log.Warn("remove a pending deletion's marker", "topic", tp.Topic, "partition", tp.Partition, "err", err)
		}
		n.log.Info("partition deleted from the bucket", "topic", tp.Topic, "partition", tp.Partition)
	}
	return done
}
