package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"strata/meta"
	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// Metadata checkpoints (docs/bucket-format.md §12): while this node is
// the controller, it keeps in the bucket a copy of the cluster's metadata
// (topics, ids, configs, assignments, the producer-id high mark), each
// tiered partition naming the manifest version it was taken against, so
// that the bucket alone is enough to serve its history again once every
// broker and the metadata quorum are lost.
//
// When. A metadata change marks the checkpoint dirty, and the loop writes
// at most one per tier.metadata_checkpoint_debounce, so a burst of
// changes (a topic created with its partitions' leaders elected, a
// rolling restart) costs one write. New manifest versions are no
// metadata change: every tier.metadata_checkpoint_interval the loop reads
// every tiered partition's newest manifest again. A round whose
// checkpoint would hold what the last one written holds (the same topics,
// configs, assignments, leader epochs, producer-id mark and manifest
// versions, whatever the raft index: brokers' heartbeats and ISR changes
// move it without changing anything a checkpoint holds) writes nothing,
// so an idle cluster does not fill the bucket with copies; the newest
// checkpoint in the bucket is then still current. A controller newly
// elected writes one at once, since it cannot know what its predecessor
// wrote last.
//
// Cost. A round that only follows a metadata change reads the bucket for
// the partitions it has never seen (a new topic's) and takes the others'
// manifest versions from its last reading, at most an interval old; a
// full round lists each tiered partition's manifests from the newest
// version it knows (a LIST returning nothing when nothing changed) and
// GETs only the roots that are new, manifestLoaders at a time (as at
// start-up: 1,000 partitions take some 60 round trips to the store).

// Defaults of the checkpoint settings (TierConfig).
const (
	DefaultCheckpointInterval  = time.Minute
	DefaultCheckpointRetention = 7 * 24 * time.Hour
	DefaultCheckpointDebounce  = 2 * time.Second
)

// checkpointKeep is how many of the newest checkpoints pruning keeps
// whatever their age: a cluster idle for longer than the retention still
// has its latest state, and the one or two before it should the newest
// turn out unreadable.
const checkpointKeep = 3

// checkpointRoundTimeout bounds one round: its manifest reads, the write
// and the pruning.
const checkpointRoundTimeout = 2 * time.Minute

// checkpointer is the checkpoint loop's state; only the loop touches it.
type checkpointer struct {
	n     *Node
	store objstore.Store
	// manifests is, per tiered partition read, its newest manifest as
	// last read (or that it had none).
	manifests map[format.TopicPartition]manifestSeen
	// last is the body of the last checkpoint this node wrote, with its
	// index and writing fields zeroed (same), nil when there is none since
	// it became the controller.
	last []byte
}

// manifestSeen is a partition's newest manifest version as last read;
// found is false when the bucket held none.
type manifestSeen struct {
	found         bool
	key           format.ManifestKey
	logStart, end int64
}

// checkpointLoop writes the metadata checkpoints while this node is the
// controller; it runs on every node with a tier, and does nothing on the
// others but watch for the leadership.
func (n *Node) checkpointLoop() {
	cfg := n.cfg.Tier
	c := &checkpointer{n: n, store: n.tierStore, manifests: map[format.TopicPartition]manifestSeen{}}
	tick := time.NewTicker(cfg.CheckpointDebounce)
	defer tick.Stop()
	changed := n.meta.Changed()
	dirty := true
	var refreshed time.Time // when a round last read every manifest
	var retryAt time.Time   // no round before this after a failure
	backoff := cfg.CheckpointDebounce
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-changed:
			changed = n.meta.Changed()
			dirty = true
			continue
		case <-tick.C:
		}
		if !n.meta.IsLeader() {
			// Another controller writes; when this node leads again its
			// first round writes, whatever it wrote before.
			c.last, dirty, refreshed = nil, true, time.Time{}
			clear(c.manifests)
			continue
		}
		now := time.Now()
		full := now.Sub(refreshed) >= cfg.CheckpointInterval
		if !dirty && !full || now.Before(retryAt) {
			continue
		}
		err := c.round(full)
		switch {
		case err == nil:
			dirty, backoff, retryAt = false, cfg.CheckpointDebounce, time.Time{}
			if full {
				refreshed = now
			}
			n.cfg.Metrics.CheckpointLastSuccess.Set(float64(time.Now().UnixMilli()) / 1e3)
		case n.ctx.Err() != nil:
			return
		case errors.Is(err, tier.ErrClusterUnnamed):
			// Nothing is written to the bucket before the cluster is
			// named (AwaitClusterID); the next tick tries again.
			n.log.Debug("metadata checkpoint waits for the cluster's id")
		default:
			// Retried with a growing pause, up to an interval: a store
			// that is down is not asked 1,000 LISTs every tick.
			n.cfg.Metrics.CheckpointFailures.Inc()
			n.log.Warn("metadata checkpoint failed; retrying", "in", backoff, "err", err)
			retryAt = now.Add(backoff)
			backoff = min(2*backoff, cfg.CheckpointInterval)
		}
	}
}

// round takes one checkpoint of the metadata as it is now and writes it
// unless it holds what the last one written holds; full reads every
// tiered partition's manifest again, else only those never read.
func (c *checkpointer) round(full bool) (err error) {
	n := c.n
	ctx, cancel := context.WithTimeout(n.ctx, checkpointRoundTimeout)
	defer cancel()
	st := n.meta.State()
	if st.ClusterID == "" || st.HistoryID == "" {
		// A cluster named before history ids existed gets one from
		// its controller at once (meta.State.HistoryID).
		return tier.ErrClusterUnnamed
	}
	var unread *unreadError
	if rerr := c.readManifests(ctx, st, full); errors.As(rerr, &unread) && ctx.Err() == nil {
		// Written all the same, and the round counted as failed so that
		// the next comes soon and reads them again.
		defer func() {
			if err == nil {
				err = unread
			}
		}()
	} else if rerr != nil {
		return rerr
	}
	cp := c.checkpoint(st)
	same, err := sameCheckpoint(cp)
	if err != nil {
		return err
	}
	if c.last != nil && string(same) == string(c.last) {
		return nil
	}
	key, err := tier.WriteCheckpoint(ctx, c.store, cp)
	if err != nil {
		return err
	}
	c.last = same
	n.cfg.Metrics.CheckpointWrites.Inc()
	n.log.Debug("metadata checkpoint written", "key", key, "topics", len(cp.Topics))
	cutoff := time.Now().Add(-n.cfg.Tier.CheckpointRetention)
	if _, err := tier.PruneCheckpoints(ctx, c.store, cutoff, checkpointKeep); err != nil {
		return fmt.Errorf("prune metadata checkpoints: %w", err)
	}
	return nil
}

// checkpoint is the checkpoint of st with the manifests last read.
func (c *checkpointer) checkpoint(st *meta.State) *format.Checkpoint {
	n := c.n
	cp := &format.Checkpoint{
		ClusterID:      st.ClusterID,
		History:        st.HistoryID,
		Index:          st.Index,
		WrittenMs:      time.Now().UnixMilli(),
		WrittenBy:      n.cfg.NodeID,
		NextProducerID: st.NextProducerID,
		Topics:         make([]format.CheckpointTopic, 0, len(st.Topics)),
	}
	for _, name := range st.SortedTopicNames() {
		t := st.Topics[name]
		if len(t.Partitions) == 0 {
			continue // no topic has none; a checkpoint may not hold one
		}
		ct := format.CheckpointTopic{
			Name:              t.Name,
			ID:                format.HexID(t.ID),
			Internal:          t.Internal,
			ReplicationFactor: int16(max(ReplicationFactor(t), 1)),
			Configs:           t.Configs,
			Partitions:        make([]format.CheckpointPartition, len(t.Partitions)),
		}
		for i, p := range t.Partitions {
			cpp := format.CheckpointPartition{Partition: int32(i), Replicas: p.Replicas, LeaderEpoch: p.LeaderEpoch}
			if m := c.manifests[format.TopicPartition{Topic: t.Name, TopicID: t.ID, Partition: int32(i)}]; m.found {
				cpp.Manifest = format.ManifestVersionOf(m.key)
				cpp.LogStart, cpp.End = m.logStart, m.end
			}
			ct.Partitions[i] = cpp
		}
		cp.Topics = append(cp.Topics, ct)
	}
	return cp
}

// sameCheckpoint is what two checkpoints holding the same state share:
// cp without its index and its writer's fields.
func sameCheckpoint(cp *format.Checkpoint) ([]byte, error) {
	v := *cp
	v.Index, v.WrittenMs, v.WrittenBy = 0, 0, 0
	b, err := json.Marshal(&v)
	if err != nil {
		return nil, fmt.Errorf("metadata checkpoint: %w", err)
	}
	return b, nil
}

// readManifests brings c.manifests up to date for st's tiered
// partitions: all of them when full, else those never read. A partition
// whose manifest cannot be read fails the round: a checkpoint that left
// it out, or named an older version than its predecessor, would say less
// than the bucket holds.
func (c *checkpointer) readManifests(ctx context.Context, st *meta.State, full bool) error {
	live := make(map[format.TopicPartition]bool)
	var todo []format.TopicPartition
	for _, t := range st.Topics {
		if !c.n.tiers(t.Configs) {
			continue
		}
		for i := range t.Partitions {
			tp := format.TopicPartition{Topic: t.Name, TopicID: t.ID, Partition: int32(i)}
			live[tp] = true
			if _, seen := c.manifests[tp]; full || !seen {
				todo = append(todo, tp)
			}
		}
	}
	for tp := range c.manifests {
		if !live[tp] {
			delete(c.manifests, tp)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	// Stable order, so that a failing store fails on the same partition.
	slices.SortFunc(todo, func(a, b format.TopicPartition) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition - b.Partition)
	})
	var (
		mu   sync.Mutex
		errs []error
	)
	forEachLimited(ctx, len(todo), func(i int) {
		tp := todo[i]
		mu.Lock()
		prev := c.manifests[tp]
		mu.Unlock()
		m, err := newestManifest(ctx, c.store, tp, prev)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
		} else {
			c.manifests[tp] = m
		}
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(errs) > 0 {
		return &unreadError{unread: len(errs), of: len(todo), err: errs[0]}
	}
	return nil
}

// unreadError says some manifests of a round could not be read: their
// partitions keep the versions last read (or none), which a restore takes
// as where to start looking for the newest (restoredManifest), so the
// checkpoint is still written. One partition whose manifest cannot be
// read (a corrupt object, a prefix the credentials may not list) must not
// keep every new topic and config out of the bucket.
type unreadError struct {
	unread, of int
	err        error
}

func (e *unreadError) Error() string {
	return fmt.Sprintf("%d of %d manifests unread, their last known versions kept: %v", e.unread, e.of, e.err)
}

func (e *unreadError) Unwrap() error { return e.err }

// newestManifest reads tp's newest manifest version. Versions sort as
// their keys do, so it lists from prev's key on when prev found one: a
// partition with no new version costs a LIST that returns nothing, and no
// GET.
func newestManifest(ctx context.Context, st objstore.Store, tp format.TopicPartition, prev manifestSeen) (manifestSeen, error) {
	after := ""
	if prev.found {
		after = prev.key.String()
	}
	m, key, ok, err := tier.ReadManifestAfter(ctx, st, tp, after)
	if err != nil || !ok {
		return prev, err // nothing newer; or still none
	}
	k, _ := format.ParseManifestKey(key)
	return manifestSeen{found: true, key: k, logStart: m.LogStartOffset, end: m.EndOffset()}, nil
}
