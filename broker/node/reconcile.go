package node

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"strata/broker/partition"
	"strata/meta"
	"strata/segment"
	"strata/tier/format"
)

// PartitionDir names a partition's log directory. The topic id is part of
// the name so a topic deleted and re-created under the same name never
// opens the old topic's data.
func PartitionDir(topic string, id [16]byte, index int32) string {
	return topic + "-" + strconv.Itoa(int(index)) + "." + hex.EncodeToString(id[:])
}

// parsePartitionDir is PartitionDir's inverse.
func parsePartitionDir(name string) (topic string, id [16]byte, index int32, ok bool) {
	dot := strings.LastIndexByte(name, '.')
	if dot < 0 {
		return "", id, 0, false
	}
	raw, err := hex.DecodeString(name[dot+1:])
	if err != nil || len(raw) != 16 {
		return "", id, 0, false
	}
	copy(id[:], raw)
	rest := name[:dot]
	dash := strings.LastIndexByte(rest, '-')
	if dash < 0 {
		return "", id, 0, false
	}
	n, err := strconv.ParseInt(rest[dash+1:], 10, 32)
	if err != nil || n < 0 {
		return "", id, 0, false
	}
	return rest[:dash], id, int32(n), true
}

type wantedPartition struct {
	id       [16]byte
	role     partition.Role
	configs  map[string]string
	internal bool
}

// reconcileLoop re-runs reconcile whenever the metadata changes. changed
// is the meta store's Changed channel as taken before Start's reconcile;
// each run takes the next one before it reads the state, so no change
// published in between goes unnoticed.
func (n *Node) reconcileLoop(changed <-chan struct{}) {
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-changed:
		}
		changed = n.meta.Changed()
		if err := n.Reconcile(); err != nil {
			n.log.Error("reconcile partitions", "err", err)
		}
		// Coordinators follow the offsets and transaction state
		// partitions reconcile has just opened or closed.
		n.SyncGroups(n.ctx)
		n.SyncTxns(n.ctx)
	}
}

// Reconcile makes the set of open partitions match the metadata: it opens
// the logs of partitions assigned to this node, closes and deletes those of
// deleted topics, and applies config changes. It is called from the
// reconcile loop and, synchronously, by requests that changed the metadata
// and want their effect visible before they answer: so it returns once
// the manifests of the tiered partitions it opened are read (side by side)
// or could not be.
func (n *Node) Reconcile() error { return n.reconcilePartitions(true) }

// ReconcileAtStart is Start's reconcile: it leaves the manifests to load
// in the background, so that the broker serves at once whatever the
// store's state, each partition fully once its own manifest is in.
func (n *Node) ReconcileAtStart() error { return n.reconcilePartitions(false) }

func (n *Node) reconcilePartitions(waitRemote bool) error {
	n.reconcileMu.Lock()
	defer n.reconcileMu.Unlock()

	st := n.meta.State()
	want := n.wanted(st)

	// Drop partitions whose topic is gone or was re-created under a new id.
	var drop []*partition.Partition
	n.mu.Lock()
	for key, p := range n.mu.partitions {
		if w, ok := want[key]; !ok || w.id != p.TopicID() {
			drop = append(drop, p)
			delete(n.mu.partitions, key)
		}
	}
	n.mu.Unlock()
	var errs []error
	for _, p := range drop {
		p.Stop()
		if _, exists := st.TopicByID(p.TopicID()); !exists && n.tier != nil {
			// The topic is gone, not just moved: its history goes too.
			// Queued before the local log goes, so a crash in between
			// still leaves the work recorded.
			n.queueRemoteDelete(p.BucketName())
		}
		if err := p.Log().Delete(); err != nil {
			errs = append(errs, fmt.Errorf("delete %s-%d: %w", p.Topic(), p.Index(), err))
		}
		n.cfg.Metrics.Forget(p.Topic(), p.Index())
		n.forgetReadReplica(p)
		n.log.Info("partition deleted", "topic", p.Topic(), "partition", p.Index())
	}

	// Open new partitions and apply config changes to open ones.
	var opened []*partition.Partition
	for key, w := range want {
		if p := n.Partition(key.topic, key.partition); p != nil {
			// Metadata changes (a producer-id block, another topic) leave
			// most partitions' configs alone; only changed ones are reapplied.
			if !maps.Equal(p.Settings().Configs, w.configs) {
				p.SetSettings(n.settingsFor(w.configs, w.internal))
			}
			wasLeading := p.Leading()
			p.SetRole(w.role)
			if !wasLeading && p.Leading() {
				n.beganLeading(key, w.role.Replicas)
			}
			continue
		}
		s := n.settingsFor(w.configs, w.internal)
		dir := filepath.Join(n.logsDir, PartitionDir(key.topic, w.id, key.partition))
		l, err := segment.Open(dir, s.Log)
		if err != nil {
			errs = append(errs, fmt.Errorf("open %s-%d: %w", key.topic, key.partition, err))
			continue
		}
		p := partition.New(n.ctx, n.partitionHost(), partition.Opening{
			Topic: key.topic, TopicID: w.id, Index: key.partition, LeaderEpoch: w.role.LeaderEpoch,
			Log: l, Settings: s, LogEnd: n.cfg.Metrics.LogEnd(key.topic, key.partition),
			// A topic created while the broker runs starts empty in the
			// bucket too; an empty log found at start-up may be a lost one,
			// and so may one that opens at a leader epoch above 0: its
			// partition had leaders before (a topic restored from the
			// bucket), whose history the bucket may hold.
			EmptyAtStart: (!waitRemote || w.role.LeaderEpoch > 0) && l.StartOffset() == l.EndOffset(),
			ReadReplica:  readReplicaOf(w.configs, key.partition),
		})
		n.mu.Lock()
		if n.mu.closed || n.ctx.Err() != nil {
			n.mu.Unlock()
			l.Close()
			return errors.Join(append(errs, partition.ErrClosed)...)
		}
		n.mu.partitions[key] = p
		n.mu.Unlock()
		p.SetRole(w.role)
		if p.Leading() {
			n.beganLeading(key, w.role.Replicas)
		}
		opened = append(opened, p)
	}
	// Served at once: a tiered partition answers what needs its
	// manifest with a retriable error until the manifest is in.
	loaded := n.loadRemotes(opened)
	if waitRemote {
		select {
		case <-loaded:
		case <-n.ctx.Done():
		}
		// New read replicas are polled by the loop at once, never here:
		// a source that does not answer must not hold up the reconcile.
		// At start-up the loop polls every source anyway.
		n.pollSoon(opened)
	}
	return errors.Join(errs...)
}

// wanted lists the partitions of st that this node hosts.
func (n *Node) wanted(st *meta.State) map[tp]wantedPartition {
	want := make(map[tp]wantedPartition)
	for _, t := range st.Topics {
		for _, p := range t.Partitions {
			if slices.Contains(p.Replicas, n.cfg.NodeID) {
				want[tp{t.Name, p.Index}] = wantedPartition{
					id: t.ID, configs: t.Configs, internal: t.Internal,
					role: partition.Role{LeaderEpoch: p.LeaderEpoch, Leader: p.Leader, Replicas: p.Replicas, ISR: p.ISR, PartitionEpoch: p.PartitionEpoch},
				}
			}
		}
	}
	return want
}

// RemoveStaleDirs deletes log directories that no open partition owns: a
// topic deleted while this node was down, or an older incarnation of a
// re-created topic. It runs once at start-up, after reconcile opened every
// partition the metadata assigns to this node; while the broker runs,
// reconcile deletes the logs of partitions it drops itself.
func (n *Node) RemoveStaleDirs() error {
	entries, err := os.ReadDir(n.logsDir)
	if err != nil {
		return fmt.Errorf("scan %s: %w", n.logsDir, err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		topic, id, index, ok := parsePartitionDir(e.Name())
		if !ok {
			continue // not ours; leave it alone
		}
		if p := n.Partition(topic, index); p != nil && p.TopicID() == id {
			continue
		}
		if err := os.RemoveAll(filepath.Join(n.logsDir, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		n.log.Info("removed log of deleted topic", "dir", e.Name())
	}
	return errors.Join(errs...)
}

// partitionHost is what every partition of this node is given: made once,
// when the first partition opens (the tier is open by then).
func (n *Node) partitionHost() *partition.Host {
	n.hostOnce.Do(func() {
		h := &partition.Host{
			NodeID:            n.cfg.NodeID,
			Logger:            n.log,
			Fetchers:          n.replicas,
			Cluster:           partitionCluster{n},
			ReplicaLagTimeMax: n.cfg.ReplicaLagTimeMax,
			IdleUpload:        n.cfg.Tier.IdleUpload,
			Dropped:           func(tp format.TopicPartition) { n.collector.dropped(tp, n.cfg.Tier.Now()) },
			Metrics:           n.cfg.Metrics.Partition,
			Go:                func(f func(context.Context)) { n.cfg.Go(func() { f(n.ctx) }) },
			Context:           n.ctx,
		}
		if n.tier != nil {
			h.Bucket = n.tier
		}
		n.host = h
	})
	return n.host
}

// HoldReconcile waits for the reconcile under way, if any, and holds off
// the next ones until release is called.
func (n *Node) HoldReconcile() (release func()) {
	n.reconcileMu.Lock()
	return n.reconcileMu.Unlock
}
