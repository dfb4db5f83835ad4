package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/replica"
	"strata/meta"
	"strata/segment"
)

// replication is a partition's replica state on this node, as the metadata
// and, for a leader, its followers' fetches decide it
// (docs/replication.md).
type replication struct {
	mu             sync.Mutex
	leader         int32 // from the metadata; -1 when the partition has none
	replicas, isr  []int32
	partitionEpoch int32
	// lead is the leader's view of its followers, nil unless this node
	// leads the partition.
	lead *replica.Leader
}

// highWatermark is where the high watermark of a partition this node leads
// may move to, given the log end leo; -1 on a follower, which learns its
// high watermark from the leader.
func (r *replication) highWatermark(leo int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lead == nil {
		return -1
	}
	return r.lead.HighWatermark(leo)
}

// epochStart is the log end at which this node's leadership of the
// partition began, -1 when it does not lead it.
func (r *replication) epochStart() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lead == nil {
		return -1
	}
	return r.lead.EpochStart()
}

// isrSize is the size of the ISR as last committed.
func (r *replication) isrSize() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.isr)
}

// setRole brings p's replication in line with the metadata: it starts or
// stops leading, starts or stops fetching from the leader, and takes in
// ISR changes. Leadership moves only with a new leader epoch.
func (b *Broker) setRole(p *partition, w wantedPartition) {
	self := b.cfg.NodeID
	leads := w.leader == self
	now := time.Now()

	p.rep.mu.Lock()
	same := p.rep.leader == w.leader && p.leaderEpoch.Load() == w.epoch && (p.rep.lead != nil) == leads
	if same {
		newer := w.partitionEpoch > p.rep.partitionEpoch
		if newer {
			if p.rep.lead != nil {
				// Whoever asked: this leader's AlterPartition, whose answer
				// has not come yet, or the controller fencing a replica.
				b.metrics.countISRChange(p.rep.isr, w.isr)
			}
			p.rep.isr, p.rep.replicas, p.rep.partitionEpoch = w.isr, w.replicas, w.partitionEpoch
			if p.rep.lead != nil {
				p.rep.lead.Committed(w.isr, now)
			}
		}
		p.rep.mu.Unlock()
		if leads && newer {
			p.advanceHighWatermark() // a smaller ISR may let it move
		}
		return
	}
	p.rep.mu.Unlock()

	// A fetcher writes under appendMu: it is stopped before that lock is
	// taken, and started again only after it is released.
	key := replica.Key{Topic: p.topic, Index: p.index}
	b.replicas.Unfollow(key)
	p.appendMu.Lock()
	p.rep.mu.Lock()
	wasLeading := p.rep.lead != nil
	p.leaderEpoch.Store(w.epoch)
	p.rep.leader, p.rep.replicas, p.rep.isr, p.rep.partitionEpoch = w.leader, w.replicas, w.isr, w.partitionEpoch
	leo := p.log.EndOffset()
	// The high watermark is never above the log, whichever role: a
	// new leader counting offsets it has not got as committed would answer
	// acks=all for the records it writes there without any replica.
	p.clampHighWatermark()
	if leads {
		p.rep.lead = replica.NewLeader(self, w.replicas, w.isr, leo, now)
		// The previous leader may have published manifests since this
		// node last read the bucket's.
		p.tier.stale.Store(true)
	} else {
		p.rep.lead = nil
	}
	p.leading.Store(leads)
	p.rep.mu.Unlock()
	p.appendMu.Unlock()

	switch {
	case leads:
		if !wasLeading {
			b.metrics.leaderElections.Inc()
			b.log.Debug("leading partition", "topic", p.topic, "partition", p.index, "epoch", w.epoch, "isr", w.isr)
		}
		p.advanceHighWatermark()
	case w.leader >= 0:
		b.replicas.Follow(w.leader, replica.Partition{
			Topic: p.topic, TopicID: p.topicID, Index: p.index, LeaderEpoch: w.epoch,
			Log: followerLog{p.log, p}, Lock: &p.appendMu,
			Fetched:       func(leaderHW int64) { p.followerFetched(leaderHW) },
			LogStartBound: func() int64 { return b.followerLogStartBound(p) },
			HistoryBelow:  b.historyBelow(p),
		})
	}
	// Fetches and acks=all produces waiting on the partition look again:
	// a deposed leader's waiters must not wait for a high watermark that
	// will not come.
	p.wake()
}

// followerLogStartBound is how far a follower of p may move its log start
// after its leader's: anywhere on a topic that does not tier; on one that
// does, no further than the bucket's current manifest (as this node last
// read it) holds, or reaches by its own log start, so that no record is
// deleted here that the bucket does not have.
func (b *Broker) followerLogStartBound(p *partition) int64 {
	if !b.remoteEnabled(p) {
		return math.MaxInt64
	}
	if !p.remoteKnown.Load() {
		return p.log.StartOffset()
	}
	return p.uploadedEnd.Load()
}

// followerLog is a follower's log as its fetcher writes it: a truncation
// takes the high watermark down with the log end, as Kafka's
// UnifiedLog.truncateTo does, so that the high watermark a node takes into
// its next leadership is never above what it holds.
type followerLog struct {
	*segment.Log
	p *partition
}

func (l followerLog) TruncateTo(offset int64) (int64, error) {
	end, err := l.Log.TruncateTo(offset)
	l.p.clampHighWatermark()
	return end, err
}

func (l followerLog) TruncateFullyAndStartAt(offset int64, h segment.History) error {
	err := l.Log.TruncateFullyAndStartAt(offset, h)
	l.p.clampHighWatermark()
	return err
}

// followerFetched takes the leader's high watermark into a follower.
func (p *partition) followerFetched(leaderHW int64) {
	leo := p.log.EndOffset()
	p.hw.Store(max(min(leaderHW, leo), p.log.StartOffset()))
	p.logEnd.Set(float64(leo))
}

// replicaFetched records a follower's fetch at offset on the leader, made
// by the follower's incarnation brokerEpoch (-1 when the fetch named
// none): it may move the high watermark and make the follower eligible
// for the ISR.
func (b *Broker) replicaFetched(p *partition, id int32, brokerEpoch, offset int64) error {
	now := time.Now()
	p.rep.mu.Lock()
	lead := p.rep.lead
	if lead == nil {
		p.rep.mu.Unlock()
		return errNotLeader
	}
	if err := lead.Fetched(id, brokerEpoch, offset, p.log.EndOffset(), now); err != nil {
		p.rep.mu.Unlock()
		return fmt.Errorf("%w: %v", kerr.NotLeaderForPartition, err)
	}
	p.rep.mu.Unlock()
	p.advanceHighWatermark()
	b.maybeAlterISR(p, now)
	return nil
}

// maybeAlterISR asks the controller for the ISR change p's followers call
// for, if any and none is in flight, or again for the one in flight whose
// last answer was lost.
func (b *Broker) maybeAlterISR(p *partition, now time.Time) {
	p.rep.mu.Lock()
	lead := p.rep.lead
	if lead == nil {
		p.rep.mu.Unlock()
		return
	}
	st := b.meta.State()
	isr := lead.Propose(now, b.cfg.ReplicaLagTimeMax, p.hw.Load(), func(id int32, epoch int64) bool {
		br, ok := st.Brokers[id]
		// KIP-903: only the incarnation the metadata registered; a fetch
		// that named no epoch comes from a peer that predates it.
		return ok && !br.Fenced && !br.ShuttingDown && (epoch < 0 || epoch == br.Epoch)
	})
	if isr == nil {
		p.rep.mu.Unlock()
		return
	}
	old := slices.Clone(p.rep.isr)
	req := meta.AlterPartitionRequest{
		Topic: p.topic, Partition: p.index, BrokerID: b.cfg.NodeID, BrokerEpoch: b.node.BrokerEpoch(),
		LeaderEpoch: p.leaderEpoch.Load(), PartitionEpoch: p.rep.partitionEpoch, ISR: isr,
	}
	// The controller checks each joiner's epoch against its registration,
	// which this node's metadata may not have caught up with (KIP-903).
	for _, id := range isr {
		if id == b.cfg.NodeID {
			req.ISREpochs = append(req.ISREpochs, req.BrokerEpoch)
		} else {
			req.ISREpochs = append(req.ISREpochs, lead.BrokerEpoch(id))
		}
	}
	p.rep.mu.Unlock()
	b.goFunc(func() {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		got, err := b.alterPartition(ctx, p.topicID, req)
		p.rep.mu.Lock()
		// Only an answer newer than what the metadata showed is news;
		// one the metadata already brought (setRole) must not end a
		// change proposed since.
		ok := err == nil && p.rep.lead == lead && got.PartitionEpoch > p.rep.partitionEpoch
		// Still the change in flight: the metadata has not moved on.
		current := p.rep.lead == lead && p.rep.partitionEpoch == req.PartitionEpoch
		prev := p.rep.isr
		switch {
		case ok:
			p.rep.isr, p.rep.partitionEpoch = got.ISR, got.PartitionEpoch
			lead.Committed(got.ISR, time.Now())
		case err == nil && current && got.PartitionEpoch == req.PartitionEpoch:
			// The controller already held that ISR: nothing changed, and
			// nothing will come in the metadata to end the change.
			lead.Committed(got.ISR, time.Now())
		case err != nil && current:
			lead.Answered(alterOutcome(err))
		}
		p.rep.mu.Unlock()
		if !ok {
			if err != nil && b.ctx.Err() == nil {
				b.log.Info("ISR change not made; it stays counted until the metadata shows its outcome", "topic", p.topic, "partition", p.index, "isr", req.ISR, "err", err)
			}
			return
		}
		// Counted here when the answer comes before the metadata, which
		// then brings no newer partition epoch; in setRole otherwise.
		b.metrics.countISRChange(prev, got.ISR)
		// A shrink says a replica fell behind, which an operator may need
		// to explain; an expansion is the recovery, one line per
		// partition when a node comes back (strata_isr_expands_total
		// counts them).
		level := slog.LevelDebug
		if len(got.ISR) < len(old) {
			level = slog.LevelInfo
		}
		b.log.Log(b.ctx, level, "ISR changed", "topic", p.topic, "partition", p.index, "from", old, "to", got.ISR)
		p.advanceHighWatermark()
		p.wake()
	})
}

// alterOutcome says what an AlterPartition that failed with err did, as
// Kafka's Partition.handleAlterPartitionError reads the answer: only
// INELIGIBLE_REPLICA and OPERATION_NOT_ATTEMPTED say the change was not
// applied at the partition epoch the leader holds; a stale epoch means
// the controller has moved on, perhaps by applying an earlier attempt
// whose answer was lost; anything else (a timeout, the controller losing
// its raft leadership mid-commit) leaves the outcome unknown.
func alterOutcome(err error) replica.Outcome {
	if errors.Is(err, meta.ErrOutcomeUnknown) {
		return replica.Unknown
	}
	switch errorCode(err) {
	case kerr.IneligibleReplica.Code, kerr.OperationNotAttempted.Code:
		return replica.NotApplied
	case kerr.FencedLeaderEpoch.Code, kerr.InvalidUpdateVersion.Code,
		kerr.UnknownTopicOrPartition.Code, kerr.UnknownTopicID.Code:
		return replica.AwaitMetadata
	}
	return replica.Unknown
}

// alterPartition sends an ISR change to the controller.
func (b *Broker) alterPartition(ctx context.Context, topicID [16]byte, r meta.AlterPartitionRequest) (meta.Partition, error) {
	var out meta.Partition
	err := b.atController(ctx, func() (err error) {
		out, err = b.meta.AlterPartition(ctx, r)
		return err
	}, func() error {
		req := kmsg.NewPtrAlterPartitionRequest()
		req.Version = 3
		req.BrokerID, req.BrokerEpoch = r.BrokerID, r.BrokerEpoch
		rt := kmsg.NewAlterPartitionRequestTopic()
		rt.TopicID = topicID
		rp := kmsg.NewAlterPartitionRequestTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.PartitionEpoch, rp.NewISR = r.Partition, r.LeaderEpoch, r.PartitionEpoch, r.ISR
		// Both forms: the client sends the one the controller's version
		// takes (v2 NewISR, v3 NewEpochISR).
		for i, id := range r.ISR {
			bs := kmsg.NewAlterPartitionRequestTopicPartitionNewEpochISR()
			bs.BrokerID, bs.BrokerEpoch = id, -1
			if i < len(r.ISREpochs) {
				bs.BrokerEpoch = r.ISREpochs[i]
			}
			rp.NewEpochISR = append(rp.NewEpochISR, bs)
		}
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		kresp, err := b.controllerRequest(ctx, req)
		if err != nil {
			return err
		}
		resp := kresp.(*kmsg.AlterPartitionResponse)
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		for _, t := range resp.Topics {
			for _, op := range t.Partitions {
				if op.Partition == r.Partition {
					out = meta.Partition{Index: op.Partition, Leader: op.LeaderID, LeaderEpoch: op.LeaderEpoch, ISR: op.ISR, PartitionEpoch: op.PartitionEpoch}
					return kerr.ErrorForCode(op.ErrorCode)
				}
			}
		}
		return fmt.Errorf("controller did not answer for %s-%d", r.Topic, r.Partition)
	})
	return out, err
}

func isNotController(err error) bool {
	return err != nil && (errorCode(err) == kerr.NotController.Code)
}

// isrLoop asks for the ISR shrinks that followers falling behind call for:
// expansions are asked for as soon as a follower's fetch shows it caught
// up, but a follower that stopped fetching shows nothing.
func (b *Broker) isrLoop() {
	every := min(b.cfg.ReplicaLagTimeMax/4, time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		for _, p := range b.partitionList() {
			if p.leading.Load() {
				b.maybeAlterISR(p, now)
			}
		}
	}
}

// led returns the partition if this node leads it, or the error a client
// should see.
//
// The metadata may have made this node the leader a moment before the
// reconcile loop opened the partition or took the leadership: then the
// request reconciles itself rather than send the client away from the
// right broker.
func (b *Broker) led(topic string, index int32) (*partition, error) {
	return b.ledReconciling(topic, index, true)
}

// ledNow is led without the reconcile: for a follower's fetch, which
// names every partition it copies from this node in one request. A
// reconcile opening a burst of new partitions (a topic with many of them,
// the internal topics at start) takes seconds on a loaded machine; waiting
// for it would hold the fetch for the partitions already served too, and
// their followers would fall out of the ISR. The follower asks again for
// the new partition a moment later.
func (b *Broker) ledNow(topic string, index int32) (*partition, error) {
	return b.ledReconciling(topic, index, false)
}

func (b *Broker) ledReconciling(topic string, index int32, reconcile bool) (*partition, error) {
	p, err := b.hosted(topic, index)
	if reconcile && (err != nil || !p.leading.Load()) && b.namedLeader(topic, index) {
		if rerr := b.reconcile(); rerr != nil {
			b.log.Warn("reconcile for a request", "err", rerr)
		}
		p, err = b.hosted(topic, index)
	}
	if err != nil {
		return nil, err
	}
	if !p.leading.Load() {
		return nil, fmt.Errorf("%w: %s-%d is led by another broker", kerr.NotLeaderForPartition, topic, index)
	}
	return p, nil
}

// namedLeader reports whether this node's metadata names it the leader of
// the partition.
func (b *Broker) namedLeader(topic string, index int32) bool {
	t, ok := b.topicByName(topic)
	return ok && index >= 0 && int(index) < len(t.Partitions) && t.Partitions[index].Leader == b.cfg.NodeID
}

// waitCommitted waits until p's high watermark covers offset, which this
// node appended as leader at epoch (an acks=all produce, an offset
// commit). It fails with NOT_LEADER_OR_FOLLOWER as soon as this node
// stops leading at that epoch: a follower's high watermark (or a later
// leadership's) says nothing about a record that may have been truncated
// since, and the producer's retry on the new leader is deduplicated
// there. The high watermark is read between two checks of the role, which
// setRole changes before a fetcher can move the high watermark.
func (b *Broker) waitCommitted(ctx context.Context, p *partition, offset int64, epoch int32) error {
	w := make(chan struct{}, 1)
	p.addWaiter(w)
	defer p.removeWaiter(w)
	leads := func() bool { return p.leading.Load() && p.leaderEpoch.Load() == epoch }
	for {
		if !leads() {
			return fmt.Errorf("%w: leadership of %s-%d moved before the ISR had the records", kerr.NotLeaderForPartition, p.topic, p.index)
		}
		hw := p.highWatermark()
		if !leads() {
			continue
		}
		if hw > offset {
			return nil
		}
		select {
		case <-w:
		case <-ctx.Done():
			return fmt.Errorf("%w: the ISR did not replicate the records in time", kerr.RequestTimedOut)
		case <-b.ctx.Done():
			return errClosed
		}
	}
}

// replicationCollector reports, for the partitions this broker leads, how
// many are under-replicated and how far each follower lags.
type replicationCollector struct{ b *Broker }

var (
	underReplicatedDesc = prometheus.NewDesc("strata_under_replicated_partitions",
		"Partitions this broker leads whose ISR is smaller than their replica set.", nil, nil)
	isrSizeDesc = prometheus.NewDesc("strata_partition_isr_size",
		"Replicas in the ISR of each partition this broker leads.", []string{"topic", "partition"}, nil)
	replicaLagDesc = prometheus.NewDesc("strata_replica_fetch_lag_offsets",
		"Offsets a follower is behind the leader's log end, per partition this broker leads and follower (-1: not fetched yet).",
		[]string{"topic", "partition", "replica"}, nil)
)

func (c replicationCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- underReplicatedDesc
	ch <- isrSizeDesc
	ch <- replicaLagDesc
}

func (c replicationCollector) Collect(ch chan<- prometheus.Metric) {
	under := 0
	for _, p := range c.b.partitionList() {
		p.rep.mu.Lock()
		lead, isr, replicas := p.rep.lead, len(p.rep.isr), len(p.rep.replicas)
		var lag map[int32]int64
		if lead != nil {
			lag = lead.Lag(p.log.EndOffset())
		}
		p.rep.mu.Unlock()
		if lead == nil {
			continue
		}
		if isr < replicas {
			under++
		}
		part := strconv.Itoa(int(p.index))
		ch <- prometheus.MustNewConstMetric(isrSizeDesc, prometheus.GaugeValue, float64(isr), p.topic, part)
		for id, n := range lag {
			ch <- prometheus.MustNewConstMetric(replicaLagDesc, prometheus.GaugeValue, float64(n), p.topic, part, strconv.Itoa(int(id)))
		}
	}
	ch <- prometheus.MustNewConstMetric(underReplicatedDesc, prometheus.GaugeValue, float64(under))
}
