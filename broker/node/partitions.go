package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/broker/partition"
	"strata/broker/replica"
	"strata/tier"
	"strata/tier/format"
)

// tp names a partition by topic name and index.
type tp struct {
	topic     string
	partition int32
}

// Partitions lists the partitions this node hosts.
func (n *Node) Partitions() []*partition.Partition {
	n.mu.RLock()
	defer n.mu.RUnlock()
	ps := make([]*partition.Partition, 0, len(n.mu.partitions))
	for _, p := range n.mu.partitions {
		ps = append(ps, p)
	}
	return ps
}

// Partition returns the partition this node hosts, or nil.
func (n *Node) Partition(topic string, index int32) *partition.Partition {
	n.mu.RLock()
	p := n.mu.partitions[tp{topic, index}]
	n.mu.RUnlock()
	return p
}

// Hosted returns the partition this node hosts, or the error a client
// should see: NOT_LEADER_OR_FOLLOWER for a partition that exists elsewhere
// (or is not open yet), UNKNOWN_TOPIC_OR_PARTITION otherwise.
func (n *Node) Hosted(topic string, index int32) (*partition.Partition, error) {
	if p := n.Partition(topic, index); p != nil {
		return p, nil
	}
	if t, ok := n.TopicByName(topic); ok && index >= 0 && int(index) < len(t.Partitions) {
		return nil, kerr.NotLeaderForPartition
	}
	return nil, kerr.UnknownTopicOrPartition
}

// Led returns the partition if this node leads it, or the error a client
// should see.
//
// The metadata may have made this node the leader a moment before the
// reconcile loop opened the partition or took the leadership: then the
// request reconciles itself rather than send the client away from the
// right broker.
func (n *Node) Led(topic string, index int32) (*partition.Partition, error) {
	return n.ledReconciling(topic, index, true)
}

// LedNow is Led without the reconcile: for a follower's fetch, which
// names every partition it copies from this node in one request. A
// reconcile opening a burst of new partitions (a topic with many of them,
// the internal topics at start) takes seconds on a loaded machine; waiting
// for it would hold the fetch for the partitions already served too, and
// their followers would fall out of the ISR. The follower asks again for
// the new partition a moment later.
func (n *Node) LedNow(topic string, index int32) (*partition.Partition, error) {
	return n.ledReconciling(topic, index, false)
}

func (n *Node) ledReconciling(topic string, index int32, reconcile bool) (*partition.Partition, error) {
	p, err := n.Hosted(topic, index)
	if reconcile && (err != nil || !p.Leading()) && n.NamedLeader(topic, index) {
		if rerr := n.Reconcile(); rerr != nil {
			n.log.Warn("reconcile for a request", "err", rerr)
		}
		p, err = n.Hosted(topic, index)
	}
	if err != nil {
		return nil, err
	}
	if !p.Leading() {
		return nil, fmt.Errorf("%w: %s-%d is led by another broker", kerr.NotLeaderForPartition, topic, index)
	}
	return p, nil
}

// NamedLeader reports whether this node's metadata names it the leader of
// the partition.
func (n *Node) NamedLeader(topic string, index int32) bool {
	t, ok := n.TopicByName(topic)
	return ok && index >= 0 && int(index) < len(t.Partitions) && t.Partitions[index].Leader == n.cfg.NodeID
}

// maintenanceLoop rolls idle segments, applies retention and, when
// configured, flushes logs on a timer.
func (n *Node) maintenanceLoop() {
	maint := time.NewTicker(n.cfg.MaintenanceInterval)
	defer maint.Stop()
	var flush <-chan time.Time
	if n.cfg.FlushInterval > 0 {
		t := time.NewTicker(n.cfg.FlushInterval)
		defer t.Stop()
		flush = t.C
	}
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-maint.C:
			for _, p := range n.Partitions() {
				if err := p.Log().Maintain(); err != nil {
					n.log.Error("log maintenance", "topic", p.Topic(), "partition", p.Index(), "err", err)
				}
			}
		case <-flush:
			for _, p := range n.Partitions() {
				if err := p.Log().Sync(); err != nil {
					n.log.Error("log flush", "topic", p.Topic(), "partition", p.Index(), "err", err)
				}
			}
		}
	}
}

// isrLoop asks for the ISR shrinks that followers falling behind call for:
// expansions are asked for as soon as a follower's fetch shows it caught
// up, but a follower that stopped fetching shows nothing.
func (n *Node) isrLoop() {
	every := min(n.cfg.ReplicaLagTimeMax/4, time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		for _, p := range n.Partitions() {
			if p.Leading() {
				p.MaybeAlterISR(now)
			}
		}
	}
}

// Open opens the cold tier, for the cluster named clusterID (empty when
// not named yet), and the partitions this node's metadata assigns it.
// Call it once, after Join; Run then starts the node's loops.
func (n *Node) Open(ctx context.Context, clusterID string) error {
	// The tier comes before the partitions: it decides how their logs
	// retain data.
	if err := n.OpenTier(ctx, clusterID); err != nil {
		return fmt.Errorf("tiered storage: %w", err)
	}
	n.changed = n.meta.Changed() // before the state reconcile reads
	if err := n.ReconcileAtStart(); err != nil {
		return err
	}
	if err := n.RemoveStaleDirs(); err != nil {
		n.log.Warn("remove logs of deleted topics", "err", err)
	}
	return nil
}

// Run starts the node's loops on Config.Go, once the coordinators its
// reconciles keep in step (StartGroups, StartTxns) have started: the reconcile
// loop, from the metadata change Open saw last, the ISR and maintenance
// loops, the tier's, and the compactor.
func (n *Node) Run() error {
	n.cfg.Go(func() { n.reconcileLoop(n.changed) })
	n.cfg.Go(n.isrLoop)
	n.cfg.Go(n.maintenanceLoop)
	if n.tier != nil {
		n.cfg.Go(n.tierLoop)
	}
	n.cfg.Go(n.readReplicaLoop)
	if n.cfg.Restore {
		n.cfg.Go(n.RestoreAtStart)
	}
	return n.startCompactor()
}

// Tier is the cold tier, nil when no object store is configured.
func (n *Node) Tier() *tier.Tier { return n.tier }

// LocalBytes is the size of the hosted logs as of the last upload pass.
func (n *Node) LocalBytes() int64 { return n.localBytes.Load() }

// Dropped tells the collector that objects of tp may have left its
// manifest: it looks at the partition again after the orphan grace.
func (n *Node) Dropped(tp format.TopicPartition) { n.collector.dropped(tp, n.cfg.Tier.Now()) }

// Close stops the fetchers and the tier, and closes the hosted logs. The
// loops must have ended (the context given to New is done, and the
// goroutines Config.Go started have returned), and nothing may write to
// the logs any more.
func (n *Node) Close() error {
	n.replicas.Close() // before the logs its fetchers write to close
	if n.tier != nil {
		n.tier.Close()
	}
	n.closeSources()
	var errs []error
	n.mu.Lock()
	n.mu.closed = true
	for key, p := range n.mu.partitions {
		if err := p.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s-%d: %w", key.topic, key.partition, err))
		}
	}
	n.mu.partitions = map[tp]*partition.Partition{}
	n.mu.Unlock()
	return errors.Join(errs...)
}

// Replicas are the node's replica fetchers.
func (n *Node) Replicas() *replica.Manager { return n.replicas }
