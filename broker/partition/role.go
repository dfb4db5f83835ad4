package partition

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

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

// EpochStart is the log end at which this node's leadership of the
// partition began, -1 when it does not lead it.
func (p *Partition) EpochStart() int64 {
	p.rep.mu.Lock()
	defer p.rep.mu.Unlock()
	if p.rep.lead == nil {
		return -1
	}
	return p.rep.lead.EpochStart()
}

// ISRSize is the size of the ISR as last committed.
func (p *Partition) ISRSize() int {
	p.rep.mu.Lock()
	defer p.rep.mu.Unlock()
	return len(p.rep.isr)
}

// PartitionEpoch is the partition epoch of the replica state this node
// holds.
func (p *Partition) PartitionEpoch() int32 {
	p.rep.mu.Lock()
	defer p.rep.mu.Unlock()
	return p.rep.partitionEpoch
}

// Replication is a leader's view of the partition's replicas, for metrics.
type Replication struct {
	ISR, Replicas int
	// Lag is how many offsets each follower is behind the log end (-1:
	// not fetched yet).
	Lag map[int32]int64
}

// ReplicationIfLeading returns the leader's view of its replicas, if
// this node leads the partition.
func (p *Partition) ReplicationIfLeading() (Replication, bool) {
	p.rep.mu.Lock()
	defer p.rep.mu.Unlock()
	if p.rep.lead == nil {
		return Replication{}, false
	}
	return Replication{ISR: len(p.rep.isr), Replicas: len(p.rep.replicas), Lag: p.rep.lead.Lag(p.log.EndOffset())}, true
}

// Role is a partition's replica state as the metadata names it.
type Role struct {
	LeaderEpoch    int32
	Leader         int32
	Replicas, ISR  []int32
	PartitionEpoch int32
}

// SetRole brings the partition's replication in line with the metadata:
// it starts or stops leading, starts or stops fetching from the leader,
// and takes in ISR changes. Leadership moves only with a new leader epoch.
func (p *Partition) SetRole(w Role) {
	h := p.host
	self := h.NodeID
	leads := w.Leader == self
	now := time.Now()

	p.rep.mu.Lock()
	same := p.rep.leader == w.Leader && p.leaderEpoch.Load() == w.LeaderEpoch && (p.rep.lead != nil) == leads
	if same {
		newer := w.PartitionEpoch > p.rep.partitionEpoch
		if newer {
			if p.rep.lead != nil {
				// Whoever asked: this leader's AlterPartition, whose answer
				// has not come yet, or the controller fencing a replica.
				h.Metrics.ISRChanged(p.rep.isr, w.ISR)
			}
			p.rep.isr, p.rep.replicas, p.rep.partitionEpoch = w.ISR, w.Replicas, w.PartitionEpoch
			if p.rep.lead != nil {
				p.rep.lead.Committed(w.ISR, now)
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
	h.Fetchers.Unfollow(key)
	p.appendMu.Lock()
	p.rep.mu.Lock()
	wasLeading := p.rep.lead != nil
	p.leaderEpoch.Store(w.LeaderEpoch)
	p.rep.leader, p.rep.replicas, p.rep.isr, p.rep.partitionEpoch = w.Leader, w.Replicas, w.ISR, w.PartitionEpoch
	leo := p.log.EndOffset()
	// The high watermark is never above the log, whichever role: a
	// new leader counting offsets it has not got as committed would answer
	// acks=all for the records it writes there without any replica.
	p.clampHighWatermark()
	if leads {
		p.rep.lead = replica.NewLeader(self, w.Replicas, w.ISR, leo, now)
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
			h.Metrics.LeaderElections.Inc()
			h.Logger.Debug("leading partition", "topic", p.topic, "partition", p.index, "epoch", w.LeaderEpoch, "isr", w.ISR)
		}
		p.advanceHighWatermark()
	case w.Leader >= 0 && p.source == nil:
		// A read replica's replicas each read the source's bucket
		// (PollSource), so none fetches from its leader.
		h.Fetchers.Follow(w.Leader, replica.Partition{
			Topic: p.topic, TopicID: p.topicID, Index: p.index, LeaderEpoch: w.LeaderEpoch,
			Log: followerLog{p.log, p}, Lock: &p.appendMu,
			Fetched:       p.FollowerFetched,
			LogStartBound: p.followerLogStartBound,
			HistoryBelow:  p.historyBelow(),
		})
	}
	// Fetches and acks=all produces waiting on the partition look again:
	// a deposed leader's waiters must not wait for a high watermark that
	// will not come.
	p.Wake()
}

// Stop ends the partition's role: it stops fetching, takes no more
// appends, and wakes its waiters. Its uploads stop too (StopUploads).
func (p *Partition) Stop() {
	p.host.Fetchers.Unfollow(replica.Key{Topic: p.topic, Index: p.index})
	p.appendMu.Lock()
	p.leading.Store(false)
	p.appendMu.Unlock()
	p.Wake()
	// No upload may run on a log being deleted, nor put objects in the
	// bucket once its deletion has begun.
	p.StopUploads()
}

// followerLogStartBound is how far a follower may move its log start
// after its leader's: anywhere on a topic that does not tier; on one that
// does, no further than the bucket's current manifest (as this node last
// read it) holds, or reaches by its own log start, so that no record is
// deleted here that the bucket does not have.
func (p *Partition) followerLogStartBound() int64 {
	if !p.Tiered() {
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
	p *Partition
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

// FollowerFetched takes the leader's high watermark into a follower.
func (p *Partition) FollowerFetched(leaderHW int64) {
	leo := p.log.EndOffset()
	p.hw.Store(max(min(leaderHW, leo), p.log.StartOffset()))
	p.logEnd.Set(float64(leo))
}

// ReplicaFetched records a follower's fetch at offset on the leader, made
// by the follower's incarnation brokerEpoch (-1 when the fetch named
// none): it may move the high watermark and make the follower eligible
// for the ISR.
func (p *Partition) ReplicaFetched(id int32, brokerEpoch, offset int64) error {
	now := time.Now()
	p.rep.mu.Lock()
	lead := p.rep.lead
	if lead == nil {
		p.rep.mu.Unlock()
		return ErrNotLeader
	}
	if err := lead.Fetched(id, brokerEpoch, offset, p.log.EndOffset(), now); err != nil {
		p.rep.mu.Unlock()
		return fmt.Errorf("%w: %v", kerr.NotLeaderForPartition, err)
	}
	p.rep.mu.Unlock()
	p.advanceHighWatermark()
	p.MaybeAlterISR(now)
	return nil
}

// MaybeAlterISR asks the controller for the ISR change the followers call
// for, if any and none is in flight, or again for the one in flight whose
// last answer was lost.
func (p *Partition) MaybeAlterISR(now time.Time) {
	if p.source != nil {
		// Its replicas read the source, not the leader: none falls
		// behind by not fetching, so the ISR stays whole and any of them
		// can take over.
		return
	}
	h := p.host
	p.rep.mu.Lock()
	lead := p.rep.lead
	if lead == nil {
		p.rep.mu.Unlock()
		return
	}
	isr := lead.Propose(now, h.ReplicaLagTimeMax, p.hw.Load(), h.Cluster.Eligibility())
	if isr == nil {
		p.rep.mu.Unlock()
		return
	}
	old := slices.Clone(p.rep.isr)
	req := meta.AlterPartitionRequest{
		Topic: p.topic, Partition: p.index, BrokerID: h.NodeID, BrokerEpoch: h.Cluster.BrokerEpoch(),
		LeaderEpoch: p.leaderEpoch.Load(), PartitionEpoch: p.rep.partitionEpoch, ISR: isr,
	}
	// The controller checks each joiner's epoch against its registration,
	// which this node's metadata may not have caught up with (KIP-903).
	for _, id := range isr {
		if id == h.NodeID {
			req.ISREpochs = append(req.ISREpochs, req.BrokerEpoch)
		} else {
			req.ISREpochs = append(req.ISREpochs, lead.BrokerEpoch(id))
		}
	}
	p.rep.mu.Unlock()
	h.Go(func(ctx context.Context) {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		got, err := h.Cluster.AlterPartition(actx, p.topicID, req)
		p.rep.mu.Lock()
		// Only an answer newer than what the metadata showed is news;
		// one the metadata already brought (SetRole) must not end a
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
			lead.Answered(AlterOutcome(err))
		}
		p.rep.mu.Unlock()
		if !ok {
			if err != nil && ctx.Err() == nil {
				h.Logger.Info("ISR change not made; it stays counted until the metadata shows its outcome", "topic", p.topic, "partition", p.index, "isr", req.ISR, "err", err)
			}
			return
		}
		// Counted here when the answer comes before the metadata, which
		// then brings no newer partition epoch; in SetRole otherwise.
		h.Metrics.ISRChanged(prev, got.ISR)
		// A shrink says a replica fell behind, which an operator may need
		// to explain; an expansion is the recovery, one line per
		// partition when a node comes back (strata_isr_expands_total
		// counts them).
		level := slog.LevelDebug
		if len(got.ISR) < len(old) {
			level = slog.LevelInfo
		}
		h.Logger.Log(ctx, level, "ISR changed", "topic", p.topic, "partition", p.index, "from", old, "to", got.ISR)
		p.advanceHighWatermark()
		p.Wake()
	})
}

// AlterOutcome says what an AlterPartition that failed with err did, as
// Kafka's Partition.handleAlterPartitionError reads the answer: only
// INELIGIBLE_REPLICA and OPERATION_NOT_ATTEMPTED say the change was not
// applied at the partition epoch the leader holds; a stale epoch means
// the controller has moved on, perhaps by applying an earlier attempt
// whose answer was lost; anything else (a timeout, the controller losing
// its raft leadership mid-commit) leaves the outcome unknown. The
// controller answers with the metadata store's errors in-process and with
// Kafka's codes over the wire: both are read.
func AlterOutcome(err error) replica.Outcome {
	is := func(targets ...error) bool {
		for _, t := range targets {
			if errors.Is(err, t) {
				return true
			}
		}
		return false
	}
	switch {
	case errors.Is(err, meta.ErrOutcomeUnknown):
		return replica.Unknown
	case is(kerr.IneligibleReplica, meta.ErrIneligibleReplica, kerr.OperationNotAttempted):
		return replica.NotApplied
	case is(kerr.FencedLeaderEpoch, meta.ErrFencedLeaderEpoch, kerr.InvalidUpdateVersion, meta.ErrInvalidUpdateVersion,
		kerr.UnknownTopicOrPartition, meta.ErrUnknownTopic, meta.ErrUnknownTopicOrPartition, kerr.UnknownTopicID):
		return replica.AwaitMetadata
	}
	return replica.Unknown
}

// WaitCommitted waits until the high watermark covers offset, which this
// node appended as leader at epoch (an acks=all produce, an offset
// commit). It fails with NOT_LEADER_OR_FOLLOWER as soon as this node
// stops leading at that epoch: a follower's high watermark (or a later
// leadership's) says nothing about a record that may have been truncated
// since, and the producer's retry on the new leader is deduplicated
// there. The high watermark is read between two checks of the role, which
// SetRole changes before a fetcher can move the high watermark.
func (p *Partition) WaitCommitted(ctx context.Context, offset int64, epoch int32) error {
	w := make(chan struct{}, 1)
	p.AddWaiter(w)
	defer p.RemoveWaiter(w)
	leads := func() bool { return p.leading.Load() && p.leaderEpoch.Load() == epoch }
	for {
		if !leads() {
			return fmt.Errorf("%w: leadership of %s-%d moved before the ISR had the records", kerr.NotLeaderForPartition, p.topic, p.index)
		}
		hw := p.HighWatermark()
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
		case <-p.host.Context.Done():
			return ErrClosed
		}
	}
}
