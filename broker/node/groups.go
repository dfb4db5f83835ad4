package node

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/broker/group"
	"strata/broker/partition"
	"strata/meta"
	"strata/segment"
)

// OffsetsTopic holds committed offsets and group metadata as records.
const OffsetsTopic = "__consumer_offsets"

// OffsetsTopicConfigs are the offsets topic's own settings. Kafka's:
// compacted (only the latest commit per group and partition matters) with
// 100 MiB segments (offsets.topic.segment.bytes). Strata's: it tiers like
// any other topic, whatever the broker's default for remote.storage.enable,
// so that the bucket alone holds a cluster's group state, and the local log
// keeps two segments and a day, enough for the coordinator to load recent
// history from disk while the rest comes from the bucket.
var OffsetsTopicConfigs = map[string]string{
	"cleanup.policy":        "compact",
	"segment.bytes":         "104857600",
	"remote.storage.enable": "true",
	"local.retention.bytes": "209715200",
	"local.retention.ms":    "86400000",
}

// StartGroups starts the group coordinator, loads the offsets partitions
// this node leads and keeps that set in step with the metadata. A single
// node creates __consumer_offsets first if it is missing; in a cluster the
// controller creates it in the background once enough brokers have
// registered to replicate it (offsetsTopicLoop), and the coordinator
// answers COORDINATOR_NOT_AVAILABLE until then.
func (n *Node) StartGroups(ctx context.Context) (*group.Coordinator, error) {
	t, ok := n.TopicByName(OffsetsTopic)
	partitions := n.cfg.Groups.Partitions
	switch {
	case ok:
		// The existing topic's partition count wins over the setting, as
		// in Kafka: changing it would move every group.
		partitions = int32(len(t.Partitions))
		if !n.Clustered() {
			// Not fatal: the topic works as it is, only without the
			// settings (tiering) this version adds.
			if err := n.upgradeOffsetsTopic(ctx, t); err != nil {
				n.log.Warn("upgrade offsets topic", "err", err)
			}
		} else {
			n.cfg.Go(n.offsetsTopicLoop)
		}
	case !n.Clustered():
		t, err := n.createOffsetsTopic(ctx, 1)
		if err != nil {
			return nil, err
		}
		partitions = int32(len(t.Partitions))
	default:
		n.cfg.Go(n.offsetsTopicLoop)
	}
	gc := n.cfg.Groups
	gc.Partitions = partitions
	gc.Log = offsetsLog{n}
	gc.Logger = n.log.With("component", "groups")
	gc.InitialRebalanceDelay = max(gc.InitialRebalanceDelay, 0)
	gc.PartitionExists = func(topic string, partition int32) bool {
		t, ok := n.TopicByName(topic)
		return ok && partition >= 0 && int(partition) < len(t.Partitions)
	}
	c, err := group.New(gc)
	if err != nil {
		return nil, err
	}
	n.groups = c
	n.SyncGroups(ctx)
	n.cfg.Go(n.groupsLoop)
	return c, nil
}

// offsetsReplicationFactor is Kafka's offsets.topic.replication.factor.
const offsetsReplicationFactor = 3

func (n *Node) createOffsetsTopic(ctx context.Context, rf int16) (*meta.Topic, error) {
	created, err := n.meta.CreateTopic(ctx, meta.TopicSpec{
		Name:              OffsetsTopic,
		Partitions:        n.cfg.Groups.Partitions,
		ReplicationFactor: rf,
		Configs:           maps.Clone(OffsetsTopicConfigs),
		Internal:          true,
	})
	if err != nil && !errors.Is(err, meta.ErrTopicExists) {
		return nil, fmt.Errorf("create %s: %w", OffsetsTopic, err)
	}
	if err := n.Reconcile(); err != nil {
		return nil, err
	}
	t, ok := n.TopicByName(OffsetsTopic)
	if !ok {
		t = &created
	}
	n.log.Info("created offsets topic", "partitions", len(t.Partitions), "replication_factor", rf)
	return t, nil
}

// MissingOffsetsConfigs lists the keys of OffsetsTopicConfigs that t does
// not set: an offsets topic an older version created lacks those added
// since (tiering, the local bound).
func MissingOffsetsConfigs(t *meta.Topic) map[string]string {
	missing := make(map[string]string)
	for k, v := range OffsetsTopicConfigs {
		if _, ok := t.Configs[k]; !ok {
			missing[k] = v
		}
	}
	return missing
}

// upgradeOffsetsTopic gives an offsets topic an older version created the
// settings of OffsetsTopicConfigs it lacks, leaving every key it sets (an
// operator's choice) as it is, and applies them to the open partitions
// before the coordinator loads them. Only the controller writes metadata.
func (n *Node) upgradeOffsetsTopic(ctx context.Context, t *meta.Topic) error {
	missing := MissingOffsetsConfigs(t)
	if len(missing) == 0 || !n.meta.IsLeader() {
		return nil
	}
	if err := n.meta.AlterConfigs(ctx, OffsetsTopic, missing, nil, false); err != nil {
		return fmt.Errorf("add settings to %s: %w", OffsetsTopic, err)
	}
	n.log.Info("offsets topic given this version's settings", "configs", missing)
	return n.Reconcile()
}

// offsetsTopicLoop creates __consumer_offsets in a cluster, on whichever
// node is the controller, with replication factor 3 once three brokers are
// alive; a cluster of fewer brokers (voters and registered broker-only
// nodes) gets them all after ten seconds, and after a minute the topic is
// created with whatever brokers are alive, so that a cluster missing a
// node still gets its groups. An existing topic that lacks settings of
// OffsetsTopicConfigs gets them from the controller (upgradeOffsetsTopic);
// the loop ends once the topic has them all.
func (n *Node) offsetsTopicLoop() {
	begun := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if t, ok := n.TopicByName(OffsetsTopic); ok {
			if len(MissingOffsetsConfigs(t)) == 0 {
				return
			}
			ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
			err := n.upgradeOffsetsTopic(ctx, t)
			cancel()
			if err != nil && n.ctx.Err() == nil {
				n.log.Warn("upgrade offsets topic", "err", err)
			}
		} else if n.meta.IsLeader() {
			st := n.meta.State()
			alive := 0
			for id := range st.Brokers {
				if st.Alive(id) {
					alive++
				}
			}
			// Three replicas, or as many as there are brokers: the voters,
			// and broker-only nodes that registered. Fewer than three wait
			// a little for more to register.
			want := min(offsetsReplicationFactor, max(len(n.cfg.Voters), len(st.Brokers)))
			settled := alive >= offsetsReplicationFactor || time.Since(begun) > 10*time.Second
			if alive >= want && settled || (alive > 0 && time.Since(begun) > time.Minute) {
				ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
				_, err := n.createOffsetsTopic(ctx, int16(min(alive, offsetsReplicationFactor)))
				cancel()
				if err != nil && n.ctx.Err() == nil {
					n.log.Warn("create offsets topic", "err", err)
				}
			}
		}
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// SyncGroups loads the offsets partitions this node leads and unloads
// those it no longer leads, so coordinators move with leadership. It runs
// on metadata changes and, to retry loads that failed, on the groups
// loop's tick; the two may overlap, so a partition whose leadership moved
// while it loaded is unloaded again.
func (n *Node) SyncGroups(ctx context.Context) {
	t, ok := n.TopicByName(OffsetsTopic)
	if !ok {
		return
	}
	n.followOffsetsTopicID(t)
	for _, p := range t.Partitions {
		leads := n.LeadsOffsets(p.Index)
		switch {
		case leads && !n.groups.Leads(p.Index):
			if err := n.groups.Load(ctx, p.Index); err != nil {
				n.log.Error("load offsets partition", "partition", p.Index, "err", err)
			} else if !n.LeadsOffsets(p.Index) {
				n.groups.Unload(p.Index)
			}
		case !leads && n.groups.Leads(p.Index):
			n.groups.Unload(p.Index)
		}
	}
}

// offsetsTopicID is the id of the __consumer_offsets whose partitions
// the group coordinator loaded.
type offsetsTopicID struct {
	mu sync.Mutex
	id [16]byte
}

// followOffsetsTopicID unloads every offsets partition the coordinator
// holds when __consumer_offsets is no longer the topic it loaded them
// from: a restore replaced it with the bucket's (restore.go). Its groups
// are then loaded again from the new topic by SyncGroups; a load of the
// old one still under way fails, and is retried.
func (n *Node) followOffsetsTopicID(t *meta.Topic) {
	n.offsetsID.mu.Lock()
	defer n.offsetsID.mu.Unlock()
	if n.offsetsID.id == t.ID {
		return
	}
	if n.offsetsID.id != ([16]byte{}) {
		for i := range n.cfg.Groups.Partitions {
			n.groups.Unload(i)
		}
		for i := range int32(len(t.Partitions)) {
			n.groups.Unload(i)
		}
		n.log.Info("offsets topic replaced: its groups are loaded again", "id", hex.EncodeToString(t.ID[:]))
	}
	n.offsetsID.id = t.ID
}

// LeadsOffsets reports whether, by the metadata, this node leads offsets
// partition index and has it open.
func (n *Node) LeadsOffsets(index int32) bool {
	t, ok := n.TopicByName(OffsetsTopic)
	if !ok || int(index) >= len(t.Partitions) {
		return false
	}
	return t.Partitions[index].Leader == n.cfg.NodeID && n.offsetsPartition(index) != nil
}

// offsetsPartition is the open offsets partition index of the
// __consumer_offsets the metadata names, or nil. When a restore replaces
// the topic, the metadata names the new one while the reconcile loop may
// still hold the old one open under the same name: a coordinator that
// loaded from it would find no groups and, having loaded, never look
// again.
func (n *Node) offsetsPartition(index int32) *partition.Partition {
	t, ok := n.TopicByName(OffsetsTopic)
	if !ok {
		return nil
	}
	p := n.Partition(OffsetsTopic, index)
	if p == nil || p.TopicID() != t.ID {
		return nil
	}
	return p
}

// groupsLoop expires offsets, and retries the loads of offsets partitions
// that failed: a load reads the bucket, which may be down for a while,
// and no metadata change may come to retry it. (Coordinators follow
// metadata changes in the reconcile loop, after the partitions they load
// are opened.)
func (n *Node) groupsLoop() {
	tick := time.NewTicker(n.cfg.MaintenanceInterval)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
			n.SyncGroups(n.ctx)
			n.groups.ExpireOffsets(n.ctx)
		}
	}
}

// offsetsLog is the coordinator's view of __consumer_offsets.
type offsetsLog struct{ n *Node }

var _ group.OffsetLog = offsetsLog{}

// Append appends like an acks=all produce: it returns once the high
// watermark covers the batch. The batch is the coordinator's own write
// (Kafka's AppendOrigin.COORDINATOR): a transactional offset commit is
// checked for its producer's epoch, not its sequence.
func (l offsetsLog) Append(ctx context.Context, index int32, batch []byte) (int64, error) {
	n := l.n
	p := n.offsetsPartition(index)
	if p == nil {
		return 0, fmt.Errorf("%s-%d: %w", OffsetsTopic, index, group.ErrNotLeader)
	}
	batches, err := p.Log().Prepare(batch)
	if err != nil {
		return 0, fmt.Errorf("append to %s-%d: %w", OffsetsTopic, index, err)
	}
	batches.FromCoordinator()
	// A TxnOffsetCommit's batch presents its verification (KIP-890): it
	// may join the producer's ongoing transaction, or open one only if no
	// marker came since the coordinator said the index is in it.
	tx, _ := ctx.Value(txnAppendKey{}).(*partition.TxnAppend)
	info, epoch, err := p.AppendPrepared(batches, tx)
	if err != nil {
		if errors.Is(err, segment.ErrClosed) || errors.Is(err, partition.ErrNotLeader) {
			err = fmt.Errorf("%w: %v", group.ErrNotLeader, err)
		}
		return 0, fmt.Errorf("append to %s-%d: %w", OffsetsTopic, index, err)
	}
	// With followers the high watermark trails the append; wait for it.
	if err := p.WaitCommitted(ctx, info.LastOffset, epoch); err != nil {
		if errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, partition.ErrClosed) {
			err = fmt.Errorf("%w: %v", group.ErrNotLeader, err)
		}
		return 0, fmt.Errorf("%s-%d: %w", OffsetsTopic, index, err)
	}
	return info.BaseOffset, nil
}

// Read reads the partition's history from the log start, which for a
// tiered offsets topic is in the bucket: what local retention deleted is
// read there, as a consumer's fetch is (readAt). Compaction leaves gaps
// between and inside batches; a read at an offset that no longer exists
// returns the next batch there is, and the loader goes on after its last
// offset.
func (l offsetsLog) Read(dst []byte, index int32, offset int64) ([]byte, error) {
	n := l.n
	p := n.offsetsPartition(index)
	if p == nil {
		return dst, fmt.Errorf("%s-%d: %w", OffsetsTopic, index, group.ErrNotLeader)
	}
	// At start-up (and after a restore) the manifests load in the
	// background, and the coordinator loads its partitions before they
	// are all in: the bucket's part of the history must be known, or it
	// would be silently skipped.
	if err := p.HistoryKnown(); err != nil {
		return dst, fmt.Errorf("%s-%d: %w", OffsetsTopic, index, err)
	}
	// To the log end, not the high watermark, as Kafka's loader does: a
	// new leader's high watermark may trail commits that are already in
	// its log, and that it will commit once its followers fetch them.
	end := p.Log().EndOffset()
	offset = max(offset, p.LogStartOffset())
	out, err := p.ReadAt(dst, offset, end, 1<<20)
	if err != nil {
		return out, fmt.Errorf("%s-%d at %d: %w", OffsetsTopic, index, offset, err)
	}
	// Nothing read means "the end" to the loader, and is: the bucket's
	// read goes on across objects compaction emptied, and readAt on into
	// the local log, which reads across its segments up to its end.
	return out, nil
}

// WithTxnAppend returns ctx carrying tx, a TxnOffsetCommit's verification,
// to the offsets log's Append.
func WithTxnAppend(ctx context.Context, tx *partition.TxnAppend) context.Context {
	return context.WithValue(ctx, txnAppendKey{}, tx)
}

// txnAppendKey carries a TxnOffsetCommit's verification (a *partition.TxnAppend)
// in the context the group coordinator passes to offsetsLog.Append: the
// coordinator's interface knows nothing of partitions and guards.
type txnAppendKey struct{}
