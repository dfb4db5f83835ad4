package broker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

	"strata/broker/group"
	"strata/broker/partition"
	"strata/meta"
	"strata/segment"
)

// offsetsTopic holds committed offsets and group metadata as records.
const offsetsTopic = "__consumer_offsets"

// offsetsTopicConfigs are the offsets topic's own settings. Kafka's:
// compacted (only the latest commit per group and partition matters) with
// 100 MiB segments (offsets.topic.segment.bytes). Strata's: it tiers like
// any other topic, whatever the broker's default for remote.storage.enable,
// so that the bucket alone holds a cluster's group state, and the local log
// keeps two segments and a day, enough for the coordinator to load recent
// history from disk while the rest comes from the bucket.
var offsetsTopicConfigs = map[string]string{
	"cleanup.policy":        "compact",
	"segment.bytes":         "104857600",
	"remote.storage.enable": "true",
	"local.retention.bytes": "209715200",
	"local.retention.ms":    "86400000",
}

// startGroups starts the group coordinator, loads the offsets partitions
// this node leads and keeps that set in step with the metadata. A single
// node creates __consumer_offsets first if it is missing; in a cluster the
// controller creates it in the background once enough brokers have
// registered to replicate it (offsetsTopicLoop), and the coordinator
// answers COORDINATOR_NOT_AVAILABLE until then.
func (b *Broker) startGroups(ctx context.Context) error {
	t, ok := b.node.TopicByName(offsetsTopic)
	partitions := b.cfg.OffsetsPartitions
	switch {
	case ok:
		// The existing topic's partition count wins over the setting, as
		// in Kafka: changing it would move every group.
		partitions = int32(len(t.Partitions))
		if !b.node.Clustered() {
			// Not fatal: the topic works as it is, only without the
			// settings (tiering) this version adds.
			if err := b.upgradeOffsetsTopic(ctx, t); err != nil {
				b.log.Warn("upgrade offsets topic", "err", err)
			}
		} else {
			b.goFunc(b.offsetsTopicLoop)
		}
	case !b.node.Clustered():
		t, err := b.createOffsetsTopic(ctx, 1)
		if err != nil {
			return err
		}
		partitions = int32(len(t.Partitions))
	default:
		b.goFunc(b.offsetsTopicLoop)
	}
	delay := b.cfg.GroupInitialRebalanceDelay
	if delay < 0 {
		delay = 0
	}
	c, err := group.New(group.Config{
		Partitions:            partitions,
		Log:                   offsetsLog{b},
		Logger:                b.log.With("component", "groups"),
		MinSessionTimeout:     b.cfg.GroupMinSessionTimeout,
		MaxSessionTimeout:     b.cfg.GroupMaxSessionTimeout,
		InitialRebalanceDelay: delay,
		OffsetsRetention:      b.cfg.OffsetsRetention,
		PartitionExists: func(topic string, partition int32) bool {
			t, ok := b.node.TopicByName(topic)
			return ok && partition >= 0 && int(partition) < len(t.Partitions)
		},
	})
	if err != nil {
		return err
	}
	b.groups = c
	b.metrics.reg.MustRegister(&groupCollector{b: b})
	b.syncCoordinator(ctx)
	b.goFunc(b.groupsLoop)
	return nil
}

// offsetsReplicationFactor is Kafka's offsets.topic.replication.factor.
const offsetsReplicationFactor = 3

func (b *Broker) createOffsetsTopic(ctx context.Context, rf int16) (*meta.Topic, error) {
	created, err := b.meta.CreateTopic(ctx, meta.TopicSpec{
		Name:              offsetsTopic,
		Partitions:        b.cfg.OffsetsPartitions,
		ReplicationFactor: rf,
		Configs:           maps.Clone(offsetsTopicConfigs),
		Internal:          true,
	})
	if err != nil && !errors.Is(err, meta.ErrTopicExists) {
		return nil, fmt.Errorf("create %s: %w", offsetsTopic, err)
	}
	if err := b.node.Reconcile(); err != nil {
		return nil, err
	}
	t, ok := b.node.TopicByName(offsetsTopic)
	if !ok {
		t = &created
	}
	b.log.Info("created offsets topic", "partitions", len(t.Partitions), "replication_factor", rf)
	return t, nil
}

// missingOffsetsConfigs lists the keys of offsetsTopicConfigs that t does
// not set: an offsets topic an older version created lacks those added
// since (tiering, the local bound).
func missingOffsetsConfigs(t *meta.Topic) map[string]string {
	missing := make(map[string]string)
	for k, v := range offsetsTopicConfigs {
		if _, ok := t.Configs[k]; !ok {
			missing[k] = v
		}
	}
	return missing
}

// upgradeOffsetsTopic gives an offsets topic an older version created the
// settings of offsetsTopicConfigs it lacks, leaving every key it sets (an
// operator's choice) as it is, and applies them to the open partitions
// before the coordinator loads them. Only the controller writes metadata.
func (b *Broker) upgradeOffsetsTopic(ctx context.Context, t *meta.Topic) error {
	missing := missingOffsetsConfigs(t)
	if len(missing) == 0 || !b.meta.IsLeader() {
		return nil
	}
	if err := b.meta.AlterConfigs(ctx, offsetsTopic, missing, nil, false); err != nil {
		return fmt.Errorf("add settings to %s: %w", offsetsTopic, err)
	}
	b.log.Info("offsets topic given this version's settings", "configs", missing)
	return b.node.Reconcile()
}

// offsetsTopicLoop creates __consumer_offsets in a cluster, on whichever
// node is the controller, with replication factor 3 once three brokers are
// alive; a cluster of fewer brokers (voters and registered broker-only
// nodes) gets them all after ten seconds, and after a minute the topic is
// created with whatever brokers are alive, so that a cluster missing a
// node still gets its groups. An existing topic that lacks settings of
// offsetsTopicConfigs gets them from the controller (upgradeOffsetsTopic);
// the loop ends once the topic has them all.
func (b *Broker) offsetsTopicLoop() {
	begun := time.Now()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if t, ok := b.node.TopicByName(offsetsTopic); ok {
			if len(missingOffsetsConfigs(t)) == 0 {
				return
			}
			ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
			err := b.upgradeOffsetsTopic(ctx, t)
			cancel()
			if err != nil && b.ctx.Err() == nil {
				b.log.Warn("upgrade offsets topic", "err", err)
			}
		} else if b.meta.IsLeader() {
			st := b.meta.State()
			alive := 0
			for id := range st.Brokers {
				if st.Alive(id) {
					alive++
				}
			}
			// Three replicas, or as many as there are brokers: the voters,
			// and broker-only nodes that registered. Fewer than three wait
			// a little for more to register.
			want := min(offsetsReplicationFactor, max(len(b.cfg.Voters), len(st.Brokers)))
			settled := alive >= offsetsReplicationFactor || time.Since(begun) > 10*time.Second
			if alive >= want && settled || (alive > 0 && time.Since(begun) > time.Minute) {
				ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
				_, err := b.createOffsetsTopic(ctx, int16(min(alive, offsetsReplicationFactor)))
				cancel()
				if err != nil && b.ctx.Err() == nil {
					b.log.Warn("create offsets topic", "err", err)
				}
			}
		}
		select {
		case <-b.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// syncCoordinator loads the offsets partitions this node leads and unloads
// those it no longer leads, so coordinators move with leadership. It runs
// on metadata changes and, to retry loads that failed, on the groups
// loop's tick; the two may overlap, so a partition whose leadership moved
// while it loaded is unloaded again.
func (b *Broker) syncCoordinator(ctx context.Context) {
	t, ok := b.node.TopicByName(offsetsTopic)
	if !ok {
		return
	}
	for _, p := range t.Partitions {
		leads := b.leadsOffsets(p.Index)
		switch {
		case leads && !b.groups.Leads(p.Index):
			if err := b.groups.Load(ctx, p.Index); err != nil {
				b.log.Error("load offsets partition", "partition", p.Index, "err", err)
			} else if !b.leadsOffsets(p.Index) {
				b.groups.Unload(p.Index)
			}
		case !leads && b.groups.Leads(p.Index):
			b.groups.Unload(p.Index)
		}
	}
}

// leadsOffsets reports whether, by the metadata, this node leads offsets
// partition index and has it open.
func (b *Broker) leadsOffsets(index int32) bool {
	t, ok := b.node.TopicByName(offsetsTopic)
	if !ok || int(index) >= len(t.Partitions) {
		return false
	}
	return t.Partitions[index].Leader == b.cfg.NodeID && b.partition(offsetsTopic, index) != nil
}

// groupsLoop expires offsets, and retries the loads of offsets partitions
// that failed: a load reads the bucket, which may be down for a while,
// and no metadata change may come to retry it. (Coordinators follow
// metadata changes in the reconcile loop, after the partitions they load
// are opened.)
func (b *Broker) groupsLoop() {
	tick := time.NewTicker(b.cfg.MaintenanceInterval)
	defer tick.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-tick.C:
			b.syncCoordinator(b.ctx)
			b.groups.ExpireOffsets(b.ctx)
		}
	}
}

// offsetsLog is the coordinator's view of __consumer_offsets.
type offsetsLog struct{ b *Broker }

var _ group.OffsetLog = offsetsLog{}

// Append appends like an acks=all produce: it returns once the high
// watermark covers the batch. The batch is the coordinator's own write
// (Kafka's AppendOrigin.COORDINATOR): a transactional offset commit is
// checked for its producer's epoch, not its sequence.
func (l offsetsLog) Append(ctx context.Context, index int32, batch []byte) (int64, error) {
	b := l.b
	p := b.partition(offsetsTopic, index)
	if p == nil {
		return 0, fmt.Errorf("%s-%d: %w", offsetsTopic, index, group.ErrNotLeader)
	}
	batches, err := p.Log().Prepare(batch)
	if err != nil {
		return 0, fmt.Errorf("append to %s-%d: %w", offsetsTopic, index, err)
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
		return 0, fmt.Errorf("append to %s-%d: %w", offsetsTopic, index, err)
	}
	// With followers the high watermark trails the append; wait for it.
	if err := p.WaitCommitted(ctx, info.LastOffset, epoch); err != nil {
		if errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, partition.ErrClosed) {
			err = fmt.Errorf("%w: %v", group.ErrNotLeader, err)
		}
		return 0, fmt.Errorf("%s-%d: %w", offsetsTopic, index, err)
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
	b := l.b
	p := b.partition(offsetsTopic, index)
	if p == nil {
		return dst, fmt.Errorf("%s-%d: %w", offsetsTopic, index, group.ErrNotLeader)
	}
	if offset < p.Log().StartOffset() && p.Tiered() && !p.RemoteKnown() {
		// At start-up the manifests load in the background, and the
		// coordinator loads its partitions before they are all in: the
		// bucket's log start must be known, or the history below the
		// local one would be silently skipped.
		p.LoadRemote()
		if err := p.CheckRemoteKnown(); err != nil {
			return dst, fmt.Errorf("%s-%d: %w", offsetsTopic, index, err)
		}
	}
	// To the log end, not the high watermark, as Kafka's loader does: a
	// new leader's high watermark may trail commits that are already in
	// its log, and that it will commit once its followers fetch them.
	end := p.Log().EndOffset()
	offset = max(offset, p.LogStartOffset())
	out, err := p.ReadAt(dst, offset, end, 1<<20)
	if err != nil {
		return out, fmt.Errorf("%s-%d at %d: %w", offsetsTopic, index, offset, err)
	}
	// Nothing read means "the end" to the loader, and is: the bucket's
	// read goes on across objects compaction emptied, and readAt on into
	// the local log, which reads across its segments up to its end.
	return out, nil
}

// clientHost is what DescribeGroups shows as a member's host, in Kafka's
// "/address" form.
func clientHost(req *request) string {
	if req.conn == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(req.conn.remote)
	if err != nil {
		host = req.conn.remote
	}
	return "/" + host
}

// maxLagSeries bounds the consumer-lag series a scrape returns.
const maxLagSeries = 10000

// groupCollector reports group metrics at scrape time: groups by state,
// the coordinator's counters, and each committed partition's lag against
// the high watermark.
type groupCollector struct{ b *Broker }

var (
	groupsDesc = prometheus.NewDesc("strata_consumer_groups",
		"Consumer groups this node coordinates, by state.", []string{"state"}, nil)
	rebalancesDesc = prometheus.NewDesc("strata_consumer_group_rebalances_total",
		"Rebalances started by this node's group coordinator.", nil, nil)
	commitsDesc = prometheus.NewDesc("strata_consumer_group_offset_commits_total",
		"Partition offsets committed through this node's group coordinator.", nil, nil)
	lagDesc = prometheus.NewDesc("strata_consumer_group_lag",
		"High watermark minus committed offset, per group and partition (at most 10000 series).",
		[]string{"group", "topic", "partition"}, nil)
)

func (gc *groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- groupsDesc
	ch <- rebalancesDesc
	ch <- commitsDesc
	ch <- lagDesc
}

func (gc *groupCollector) Collect(ch chan<- prometheus.Metric) {
	b := gc.b
	st := b.groups.Stats()
	ch <- prometheus.MustNewConstMetric(rebalancesDesc, prometheus.CounterValue, float64(st.Rebalances))
	ch <- prometheus.MustNewConstMetric(commitsDesc, prometheus.CounterValue, float64(st.OffsetCommits))
	states := map[string]int{}
	for _, s := range []group.State{group.StateEmpty, group.StatePreparingRebalance, group.StateCompletingRebalance, group.StateStable} {
		states[s.String()] = 0
	}
	for _, s := range b.groups.Summaries(maxLagSeries) {
		states[s.State]++
		for _, o := range s.Offsets {
			p := b.partition(o.Topic, o.Partition)
			if p == nil {
				continue
			}
			lag := max(p.HighWatermark()-o.Offset, 0)
			ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, float64(lag), s.Group, o.Topic, strconv.Itoa(int(o.Partition)))
		}
	}
	for state, n := range states {
		ch <- prometheus.MustNewConstMetric(groupsDesc, prometheus.GaugeValue, float64(n), state)
	}
}
