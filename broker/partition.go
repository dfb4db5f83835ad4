package broker

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

	"strata/compactor"
	"strata/segment"
)

// partition is one partition this node hosts: its log, and the high
// watermark that bounds what consumers may read.
//
// The log end offset (LEO) belongs to the log; the high watermark belongs
// here. On the leader the high watermark is the smallest LEO of the ISR
// (with the ISR this node alone, the LEO right after each append); on a
// follower it is what the leader last said, capped by the local LEO.
type partition struct {
	topic   string
	topicID [16]byte
	index   int32
	log     *segment.Log
	// logEnd is this partition's strata_log_end_offset series, looked up
	// once rather than by label on every append.
	logEnd prometheus.Gauge

	// appendMu serialises appends with their high-watermark advance, so the
	// high watermark never covers a batch still being written and acks=all
	// waits are answered in order.
	appendMu sync.Mutex
	// guards are the KIP-890 verifications under way, by producer id
	// (startTxnVerification). Guarded by appendMu.
	guards map[int64]*txnGuard

	// settings are what the topic's configs decide for this partition,
	// derived once per config change rather than on every request.
	settings atomic.Pointer[partitionSettings]

	hw atomic.Int64
	// leading is set while this node leads the partition: only then does
	// it take appends and serve consumers. It changes under appendMu.
	leading atomic.Bool
	// rep is the partition's replication state (broker/replication.go).
	rep replication
	// remoteStart and remoteEnd bound what the bucket holds, [start, end);
	// both -1 while nothing is uploaded.
	remoteStart, remoteEnd atomic.Int64
	// uploadedEnd is the bucket manifest's end offset: where uploads have
	// reached, even once retention has emptied the manifest (remoteEnd is
	// then -1). 0 until a manifest is known.
	uploadedEnd atomic.Int64
	// remoteKnown is set once the bucket's manifest has been read; until
	// then a tiered partition cannot say where its log starts.
	remoteKnown atomic.Bool
	// emptyAtStart is set for a partition whose local log was empty when
	// the broker started: it may have been lost, and then the bucket's end
	// is where its next offset must go (checkAppendable).
	emptyAtStart atomic.Bool
	leaderEpoch  atomic.Int32
	// tier is what the cold tier's goroutines keep for the partition
	// (broker/tier.go).
	tier partitionTier

	// waitMu guards waiters: long-poll fetches that want to hear when the
	// high watermark moves.
	waitMu  sync.Mutex
	waiters map[chan struct{}]struct{}
}

// partitionSettings are a partition's topic configs, resolved.
type partitionSettings struct {
	configs  map[string]string // as in the metadata, to notice changes
	log      segment.Config    // log.Tiered: copied to the cold tier
	minISR   int               // min.insync.replicas
	internal bool              // only the broker writes to it
	// compaction is the topic's compaction settings, nil unless its
	// cleanup.policy compacts.
	compaction *compactor.Policy
}

func newPartition(topic string, id [16]byte, index int32, epoch int32, log *segment.Log, s *partitionSettings, logEnd prometheus.Gauge) *partition {
	p := &partition{topic: topic, topicID: id, index: index, log: log, logEnd: logEnd, waiters: make(map[chan struct{}]struct{})}
	p.settings.Store(s)
	logEnd.Set(float64(log.EndOffset()))
	p.leaderEpoch.Store(epoch)
	p.remoteStart.Store(-1)
	p.remoteEnd.Store(-1)
	// Until the partition's role is set (setRole), nothing is known to be
	// committed beyond the log start; a leader's high watermark then moves
	// up as its ISR shows what it holds.
	p.hw.Store(log.StartOffset())
	p.rep.leader = -1
	return p
}

// append writes records to the log and advances the high watermark over
// them. It is the one way in for producers and the group coordinator.
//
// It returns the leader epoch the batches were written under: a wait for
// their commit (waitCommitted) trusts the high watermark only while this
// node still leads at that epoch.
func (p *partition) append(records []byte) (segment.AppendInfo, int32, error) {
	return p.appendTxn(records, nil)
}

// txnAppend is what appendTxn needs of a produce carrying producer pid's
// transactional batches at epoch.
type txnAppend struct {
	pid   int64
	epoch int16
	// guard is the verification started for them (startTxnVerification),
	// nil if the producer's transaction was ongoing then.
	guard *txnGuard
}

// txnGuard marks one verification of a producer's transaction on a
// partition with its coordinator (Kafka's VerificationGuard): only the
// append that started it may use its answer, and only while it stands.
// Its identity is what counts: a marker or a leader change between the
// question and the append drops it, and a new verification gets a new
// one, so a stale answer can never let a batch in (the ABA case: verify,
// abort, a new transaction, then the old answer arrives).
type txnGuard struct {
	epoch       int16
	leaderEpoch int32
}

// startTxnVerification is called before asking the coordinator whether
// producer pid's transactional batches at epoch belong to a transaction
// that has this partition. It returns nil when the producer has a
// transaction ongoing here at that epoch: the coordinator knew of the
// partition when it began, and its batches just join it. Otherwise it
// returns the guard the append must present (appendTxn), the one of a
// verification already under way for the producer if there is one, so
// pipelined requests share it.
func (p *partition) startTxnVerification(pid int64, epoch int16) (*txnGuard, error) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if !p.leading.Load() {
		return nil, errNotLeader
	}
	if p.log.OngoingTxn(pid, epoch) {
		return nil, nil
	}
	le := p.leaderEpoch.Load()
	if g := p.guards[pid]; g != nil && g.epoch == epoch && g.leaderEpoch == le {
		return g, nil
	}
	if p.guards == nil {
		p.guards = make(map[int64]*txnGuard)
	}
	g := &txnGuard{epoch: epoch, leaderEpoch: le}
	p.guards[pid] = g
	return g, nil
}

// dropTxnVerification forgets g, a verification that failed, so that
// guards do not pile up for producers that never append.
func (p *partition) dropTxnVerification(pid int64, g *txnGuard) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if p.guards[pid] == g {
		delete(p.guards, pid)
	}
}

// checkTxnLocked refuses tx's batches unless they join a transaction
// ongoing here or their verification still stands.
func (p *partition) checkTxnLocked(tx *txnAppend) error {
	if p.log.OngoingTxn(tx.pid, tx.epoch) {
		return nil
	}
	g := p.guards[tx.pid]
	if g != nil && g.leaderEpoch != p.leaderEpoch.Load() {
		delete(p.guards, tx.pid) // an earlier leadership's
		g = nil
	}
	if tx.guard == nil || g != tx.guard {
		return fmt.Errorf("%w: producer %d (epoch %d) has no transaction ongoing in %s-%d and no verification of one that still stands: a transaction marker or a leader change came first", kerr.InvalidTxnState, tx.pid, tx.epoch, p.topic, p.index)
	}
	return nil
}

// appendTxn is append for a produce; tx, unless nil, says whose
// transactional batches records holds (KIP-890 part 1): they are
// appended only if they join the producer's ongoing transaction or their
// verification still stands, checked under appendMu, where markers are
// written too.
func (p *partition) appendTxn(records []byte, tx *txnAppend) (segment.AppendInfo, int32, error) {
	// Validation (decompression included) goes first, outside appendMu, so
	// a costly batch holds up no other producer of the partition.
	batches, err := p.log.Prepare(records)
	if err != nil {
		return segment.AppendInfo{}, -1, err
	}
	return p.appendPrepared(batches, tx)
}

// appendPrepared is appendTxn for batches already prepared: a produce's,
// or the group coordinator's (marked FromCoordinator, tx nil).
func (p *partition) appendPrepared(batches *segment.Batches, tx *txnAppend) (segment.AppendInfo, int32, error) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if !p.leading.Load() {
		return segment.AppendInfo{}, -1, errNotLeader
	}
	if err := p.checkAppendable(); err != nil {
		return segment.AppendInfo{}, -1, err
	}
	if tx != nil {
		if err := p.checkTxnLocked(tx); err != nil {
			return segment.AppendInfo{}, -1, err
		}
	}
	epoch := p.leaderEpoch.Load()
	info, err := p.log.AppendPrepared(batches, epoch)
	if tx != nil && (err == nil || p.guards[tx.pid] == tx.guard) {
		// Appended, the transaction is ongoing now: later batches join it
		// without a guard (Kafka drops it on any transactional append).
		// Refused, the guard goes too, so that none piles up for a
		// producer that never comes back; a retry is verified afresh.
		delete(p.guards, tx.pid)
	}
	if err == nil && !info.Duplicate {
		// Under appendMu, so concurrent appends set the gauge in order. A
		// duplicate appended nothing: the high watermark already covers it.
		p.logEnd.Set(float64(info.LastOffset + 1))
		p.advanceHighWatermark()
		// Followers long-polling for new data hear of it.
		p.wake()
	}
	return info, epoch, err
}

// appendMarker writes the END_TXN marker of producer pid's transaction on
// this partition (WriteTxnMarkers), as its leader. It returns the marker's
// offset in info and the leader epoch it was appended at, for an acks=all
// wait.
func (p *partition) appendMarker(pid int64, producerEpoch int16, commit bool, coordinatorEpoch int32) (segment.AppendInfo, int32, error) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if !p.leading.Load() {
		return segment.AppendInfo{}, -1, errNotLeader
	}
	if err := p.checkAppendable(); err != nil {
		return segment.AppendInfo{}, -1, err
	}
	epoch := p.leaderEpoch.Load()
	info, err := p.log.AppendMarker(pid, producerEpoch, commit, coordinatorEpoch, epoch)
	if err == nil {
		// A verification that started before the marker was about the
		// transaction it just ended: a batch waiting on it would open a
		// transaction the coordinator never hears of.
		delete(p.guards, pid)
		p.logEnd.Set(float64(info.LastOffset + 1))
		p.advanceHighWatermark()
		p.wake()
	}
	return info, epoch, err
}

// checkAppendable refuses appends to a tiered partition whose log was
// empty at start-up until its bucket's manifest is read: the log may have
// been lost, and until then the next offset may be one the bucket already
// holds (startAtBucketEnd restarts the log at the bucket's end).
// Retriable, like the reads that wait for the manifest. A log with data
// was not lost, and takes appends while the store is down.
func (p *partition) checkAppendable() error {
	if p.emptyAtStart.Load() && p.settings.Load().log.Tiered && !p.remoteKnown.Load() {
		return errRemoteUnknown
	}
	return nil
}

// leaderEpochIfLeading returns the leader epoch, if this node leads p.
// The two are read together under appendMu, where setRole changes them.
func (p *partition) leaderEpochIfLeading() (int32, bool) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	return p.leaderEpoch.Load(), p.leading.Load()
}

// leadsAt reports whether this node still leads p at epoch.
func (p *partition) leadsAt(epoch int32) bool {
	e, ok := p.leaderEpochIfLeading()
	return ok && e == epoch
}

// highWatermark is the offset below which records are committed and
// visible to consumers.
func (p *partition) highWatermark() int64 { return p.hw.Load() }

// advanceHighWatermark moves the high watermark of a partition this node
// leads to the smallest log end offset in the ISR (with a single replica,
// the local LEO). It never moves it back.
func (p *partition) advanceHighWatermark() {
	leo := p.rep.highWatermark(p.log.EndOffset())
	for {
		cur := p.hw.Load()
		if leo <= cur {
			return
		}
		if p.hw.CompareAndSwap(cur, leo) {
			break
		}
	}
	p.wake()
}

// clampHighWatermark keeps the high watermark within the log, between its
// start and its end: after a truncation, and when a node takes a
// leadership, the high watermark it held may be above its log end.
func (p *partition) clampHighWatermark() {
	for {
		cur := p.hw.Load()
		next := max(min(cur, p.log.EndOffset()), p.log.StartOffset())
		if next == cur || p.hw.CompareAndSwap(cur, next) {
			return
		}
	}
}

// wake tells every waiting fetch that the high watermark moved. Waiter
// channels have room for one signal, so a slow fetch never blocks this.
func (p *partition) wake() {
	p.waitMu.Lock()
	for w := range p.waiters {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	p.waitMu.Unlock()
}

func (p *partition) addWaiter(w chan struct{}) {
	p.waitMu.Lock()
	p.waiters[w] = struct{}{}
	p.waitMu.Unlock()
}

func (p *partition) removeWaiter(w chan struct{}) {
	p.waitMu.Lock()
	delete(p.waiters, w)
	p.waitMu.Unlock()
}

func (p *partition) close() error {
	p.wake()
	return p.log.Close()
}

// lastStableOffset is the offset a read_committed consumer reads up to
// (KIP-98): the first offset of the earliest transaction still open, or
// whose marker the high watermark has not passed yet (a marker not yet
// replicated completes nothing for consumers: a new leader may not have
// it), or the high watermark when that is lower. Followers replicate
// producer state, so theirs is right too.
//
// The high watermark is read first: a transaction that opens after it
// starts at or above the log end of that moment, never below it, so the
// pair read in this order can only understate the offset.
func (p *partition) lastStableOffset() int64 {
	hw := p.highWatermark()
	if first, ok := p.log.FirstUnstableOffsetBelow(hw); ok && first < hw {
		return first
	}
	return hw
}
