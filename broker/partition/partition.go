package partition

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

	"strata/compactor"
	"strata/segment"
)

// Partition is one partition this node hosts: its log, and the high
// watermark that bounds what consumers may read.
//
// The log end offset (LEO) belongs to the log; the high watermark belongs
// here. On the leader the high watermark is the smallest LEO of the ISR
// (with the ISR this node alone, the LEO right after each append); on a
// follower it is what the leader last said, capped by the local LEO.
type Partition struct {
	host    *Host
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
	// (StartTxnVerification). Guarded by appendMu.
	guards map[int64]*Guard

	// settings are what the topic's configs decide for this partition,
	// derived once per config change rather than on every request.
	settings atomic.Pointer[Settings]

	hw atomic.Int64
	// leading is set while this node leads the partition: only then does
	// it take appends and serve consumers. It changes under appendMu.
	leading atomic.Bool
	// rep is the partition's replication state (role.go).
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
	// the node started: it may have been lost, and then the bucket's end
	// is where its next offset must go (checkAppendable).
	emptyAtStart atomic.Bool
	leaderEpoch  atomic.Int32
	// tier is what the cold tier's passes keep for the partition
	// (bucket.go).
	tier partitionTier
	// source is a read replica's source (readreplica.go), nil for any
	// other partition.
	source *source

	// waitMu guards waiters: long-poll fetches and acks=all produces that
	// want to hear when the high watermark moves (false), and followers'
	// long-poll fetches, which want to hear when the log end does (true).
	waitMu  sync.Mutex
	waiters map[chan struct{}]bool
}

// Settings are a partition's topic configs, resolved.
type Settings struct {
	Configs  map[string]string // as in the metadata, to notice changes
	Log      segment.Config    // Log.Tiered: copied to the cold tier
	MinISR   int               // min.insync.replicas
	Internal bool              // only the broker writes to it
	// Compaction is the topic's compaction settings, nil unless its
	// cleanup.policy compacts.
	Compaction *compactor.Policy
}

// Opening says what a partition starts as (New).
type Opening struct {
	Topic   string
	TopicID [16]byte
	Index   int32
	// LeaderEpoch is the epoch the metadata names; the role comes with
	// SetRole.
	LeaderEpoch int32
	Log         *segment.Log
	Settings    *Settings
	// LogEnd is the partition's log-end-offset gauge.
	LogEnd prometheus.Gauge
	// EmptyAtStart marks a log found empty when the node started: it may
	// have been lost, and takes no appends until the bucket's end is known.
	EmptyAtStart bool
	// ReadReplica, when set, makes the partition a read replica of
	// another cluster's partition (readreplica.go).
	ReadReplica *ReadReplica
}

// New opens a hosted partition on its log. It leads nothing until SetRole
// says so. Its uploads run under ctx; StopUploads ends them.
func New(ctx context.Context, h *Host, o Opening) *Partition {
	p := &Partition{host: h, topic: o.Topic, topicID: o.TopicID, index: o.Index, log: o.Log, logEnd: o.LogEnd, waiters: make(map[chan struct{}]bool)}
	p.settings.Store(o.Settings)
	p.logEnd.Set(float64(o.Log.EndOffset()))
	p.leaderEpoch.Store(o.LeaderEpoch)
	p.remoteStart.Store(-1)
	p.remoteEnd.Store(-1)
	p.emptyAtStart.Store(o.EmptyAtStart)
	p.tier.ctx, p.tier.stop = context.WithCancel(ctx)
	// Until the partition's role is set (SetRole), nothing is known to be
	// committed beyond the log start; a leader's high watermark then moves
	// up as its ISR shows what it holds.
	p.hw.Store(o.Log.StartOffset())
	p.rep.leader = -1
	if o.ReadReplica != nil {
		p.source = &source{ReadReplica: *o.ReadReplica}
	}
	return p
}

// Topic is the partition's topic name.
func (p *Partition) Topic() string { return p.topic }

// TopicID is the id of the partition's topic.
func (p *Partition) TopicID() [16]byte { return p.topicID }

// Index is the partition's index in its topic.
func (p *Partition) Index() int32 { return p.index }

// Log is the partition's local log.
func (p *Partition) Log() *segment.Log { return p.log }

// Settings are the partition's resolved topic configs.
func (p *Partition) Settings() *Settings { return p.settings.Load() }

// SetSettings applies changed topic configs.
func (p *Partition) SetSettings(s *Settings) {
	p.log.SetConfig(s.Log)
	p.settings.Store(s)
}

// Leading reports whether this node leads the partition.
func (p *Partition) Leading() bool { return p.leading.Load() }

// LeaderEpoch is the leader epoch this node knows for the partition.
func (p *Partition) LeaderEpoch() int32 { return p.leaderEpoch.Load() }

// RemoteStart is where the bucket's part of the log starts, as this node
// last read its manifest; -1 while the bucket holds nothing.
func (p *Partition) RemoteStart() int64 { return p.remoteStart.Load() }

// RemoteEnd is where the bucket's part of the log ends (exclusive); -1
// while the bucket holds nothing.
func (p *Partition) RemoteEnd() int64 { return p.remoteEnd.Load() }

// UploadedEnd is the end offset of the bucket's manifest as this node last
// read it, even once retention has emptied it; 0 until one is known.
func (p *Partition) UploadedEnd() int64 { return p.uploadedEnd.Load() }

// RemoteKnown reports whether the bucket's manifest has been read.
func (p *Partition) RemoteKnown() bool { return p.remoteKnown.Load() }

// HoldAppends waits for the append under way, if any, and holds off the
// next ones until release is called.
func (p *Partition) HoldAppends() (release func()) {
	p.appendMu.Lock()
	return p.appendMu.Unlock
}

// Verifications is the number of KIP-890 verifications under way.
func (p *Partition) Verifications() int {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	return len(p.guards)
}

// ErrNotLeader refuses a request that only the partition's leader serves.
var ErrNotLeader = errors.New("this broker does not lead the partition")

// ErrClosed ends the waits of a node that is closing.
var ErrClosed = errors.New("broker closed")

// Append writes records to the log and advances the high watermark over
// them. It is the one way in for producers and the group coordinator.
//
// It returns the leader epoch the batches were written under: a wait for
// their commit (WaitCommitted) trusts the high watermark only while this
// node still leads at that epoch.
func (p *Partition) Append(records []byte) (segment.AppendInfo, int32, error) {
	return p.AppendTxn(records, nil)
}

// TxnAppend is what AppendTxn needs of a produce carrying producer pid's
// transactional batches at epoch.
type TxnAppend struct {
	PID   int64
	Epoch int16
	// Guard is the verification started for them (StartTxnVerification),
	// nil if the producer's transaction was ongoing then.
	Guard *Guard
}

// Guard marks one verification of a producer's transaction on a
// partition with its coordinator (Kafka's VerificationGuard): only the
// append that started it may use its answer, and only while it stands.
// Its identity is what counts: a marker or a leader change between the
// question and the append drops it, and a new verification gets a new
// one, so a stale answer can never let a batch in (the ABA case: verify,
// abort, a new transaction, then the old answer arrives).
type Guard struct {
	epoch       int16
	leaderEpoch int32
}

// StartTxnVerification is called before asking the coordinator whether
// producer pid's transactional batches at epoch belong to a transaction
// that has this partition. It returns nil when the producer has a
// transaction ongoing here at that epoch: the coordinator knew of the
// partition when it began, and its batches just join it. Otherwise it
// returns the guard the append must present (AppendTxn), the one of a
// verification already under way for the producer if there is one, so
// pipelined requests share it.
func (p *Partition) StartTxnVerification(pid int64, epoch int16) (*Guard, error) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if !p.leading.Load() {
		return nil, ErrNotLeader
	}
	if p.log.OngoingTxn(pid, epoch) {
		return nil, nil
	}
	le := p.leaderEpoch.Load()
	if g := p.guards[pid]; g != nil && g.epoch == epoch && g.leaderEpoch == le {
		return g, nil
	}
	if p.guards == nil {
		p.guards = make(map[int64]*Guard)
	}
	g := &Guard{epoch: epoch, leaderEpoch: le}
	p.guards[pid] = g
	return g, nil
}

// DropTxnVerification forgets g, a verification that failed, so that
// guards do not pile up for producers that never append.
func (p *Partition) DropTxnVerification(pid int64, g *Guard) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if p.guards[pid] == g {
		delete(p.guards, pid)
	}
}

// checkTxnLocked refuses tx's batches unless they join a transaction
// ongoing here or their verification still stands.
func (p *Partition) checkTxnLocked(tx *TxnAppend) error {
	if p.log.OngoingTxn(tx.PID, tx.Epoch) {
		return nil
	}
	g := p.guards[tx.PID]
	if g != nil && g.leaderEpoch != p.leaderEpoch.Load() {
		delete(p.guards, tx.PID) // an earlier leadership's
		g = nil
	}
	if tx.Guard == nil || g != tx.Guard {
		return fmt.Errorf("%w: producer %d (epoch %d) has no transaction ongoing in %s-%d and no verification of one that still stands: a transaction marker or a leader change came first", kerr.InvalidTxnState, tx.PID, tx.Epoch, p.topic, p.index)
	}
	return nil
}

// AppendTxn is append for a produce; tx, unless nil, says whose
// transactional batches records holds (KIP-890 part 1): they are
// appended only if they join the producer's ongoing transaction or their
// verification still stands, checked under appendMu, where markers are
// written too.
func (p *Partition) AppendTxn(records []byte, tx *TxnAppend) (segment.AppendInfo, int32, error) {
	// Validation (decompression included) goes first, outside appendMu, so
	// a costly batch holds up no other producer of the partition.
	batches, err := p.log.Prepare(records)
	if err != nil {
		return segment.AppendInfo{}, -1, err
	}
	return p.AppendPrepared(batches, tx)
}

// AppendPrepared is AppendTxn for batches already prepared: a produce's,
// or the group coordinator's (marked FromCoordinator, tx nil).
func (p *Partition) AppendPrepared(batches *segment.Batches, tx *TxnAppend) (segment.AppendInfo, int32, error) {
	return p.appendPrepared(batches, tx, true)
}

// appendPrepared is AppendPrepared; wake false leaves waking the fetches
// waiting for new data to the caller (Produce), but for a high watermark
// the append itself moved.
func (p *Partition) appendPrepared(batches *segment.Batches, tx *TxnAppend, wake bool) (segment.AppendInfo, int32, error) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if !p.leading.Load() {
		return segment.AppendInfo{}, -1, ErrNotLeader
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
	if tx != nil && (err == nil || p.guards[tx.PID] == tx.Guard) {
		// Appended, the transaction is ongoing now: later batches join it
		// without a guard (Kafka drops it on any transactional append).
		// Refused, the guard goes too, so that none piles up for a
		// producer that never comes back; a retry is verified afresh.
		delete(p.guards, tx.PID)
	}
	if err == nil && !info.Duplicate {
		// Under appendMu, so concurrent appends set the gauge in order. A
		// duplicate appended nothing: the high watermark already covers it.
		p.logEnd.Set(float64(info.LastOffset + 1))
		p.advanceHighWatermark()
		if wake {
			// Followers long-polling for new data hear of it.
			p.wakeOnly(true)
		}
	}
	return info, epoch, err
}

// AppendMarker writes the END_TXN marker of producer pid's transaction on
// this partition (WriteTxnMarkers), as its leader. It returns the marker's
// offset in info and the leader epoch it was appended at, for an acks=all
// wait.
func (p *Partition) AppendMarker(pid int64, producerEpoch int16, commit bool, coordinatorEpoch int32) (segment.AppendInfo, int32, error) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if !p.leading.Load() {
		return segment.AppendInfo{}, -1, ErrNotLeader
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
		p.wakeOnly(true)
	}
	return info, epoch, err
}

// checkAppendable refuses appends to a tiered partition whose log was
// empty at start-up until its bucket's manifest is read: the log may have
// been lost, and until then the next offset may be one the bucket already
// holds (startAtBucketEnd restarts the log at the bucket's end).
// Retriable, like the reads that wait for the manifest. A log with data
// was not lost, and takes appends while the store is down.
func (p *Partition) checkAppendable() error {
	if p.source != nil {
		return p.errReadReplica("appends")
	}
	if p.endUnknown() {
		return ErrRemoteUnknown
	}
	return nil
}

// HistoryKnown makes sure that a reader replaying the partition from its
// log start (a coordinator loading __consumer_offsets or
// __transaction_state) sees the bucket's part of it: a tiered partition
// whose local log starts above 0, or was found empty at start-up (lost,
// or just restored from the bucket: its history is all in the bucket),
// reads its manifest first. ErrRemoteUnknown, retriable, when it cannot
// yet; otherwise the replay would end early, at what the local log
// holds, and the coordinator would serve state without the bucket's.
func (p *Partition) HistoryKnown() error {
	if p.remoteKnown.Load() || !p.Tiered() {
		return nil
	}
	if p.log.StartOffset() == 0 && !p.emptyAtStart.Load() {
		return nil // all of it is local
	}
	p.LoadRemote()
	return p.CheckRemoteKnown()
}

// endUnknown reports whether the partition cannot say yet where its log
// ends: a tiered log found empty at start-up (lost, or just restored from
// the bucket) until its manifest is read, or a read replica until its
// source is. Appends wait for it, and so does ListOffsets' latest: 0
// would send a consumer back to the start, or one reset to the latest
// offset through the whole history, and tell a restore it is done.
func (p *Partition) endUnknown() bool {
	if p.source != nil {
		return !p.source.known.Load()
	}
	return p.emptyAtStart.Load() && p.settings.Load().Log.Tiered && !p.remoteKnown.Load()
}

// LeaderEpochIfLeading returns the leader epoch, if this node leads p.
// The two are read together under appendMu, where setRole changes them.
func (p *Partition) LeaderEpochIfLeading() (int32, bool) {
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	return p.leaderEpoch.Load(), p.leading.Load()
}

// LeadsAt reports whether this node still leads p at epoch.
func (p *Partition) LeadsAt(epoch int32) bool {
	e, ok := p.LeaderEpochIfLeading()
	return ok && e == epoch
}

// HighWatermark is the offset below which records are committed and
// visible to consumers.
func (p *Partition) HighWatermark() int64 { return p.hw.Load() }

// advanceHighWatermark moves the high watermark of a partition this node
// leads to the smallest log end offset in the ISR (with a single replica,
// the local LEO). It never moves it back.
func (p *Partition) advanceHighWatermark() {
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
	p.wakeOnly(false)
}

// clampHighWatermark keeps the high watermark within the log, between its
// start and its end: after a truncation, and when a node takes a
// leadership, the high watermark it held may be above its log end.
func (p *Partition) clampHighWatermark() {
	for {
		cur := p.hw.Load()
		next := max(min(cur, p.log.EndOffset()), p.log.StartOffset())
		if next == cur || p.hw.CompareAndSwap(cur, next) {
			return
		}
	}
}

// Wake tells every waiter that the partition changed: its high
// watermark, its log end, its role. Waiter channels have room for one
// signal, so a slow fetch never blocks this.
func (p *Partition) Wake() {
	p.waitMu.Lock()
	for w := range p.waiters {
		notify(w)
	}
	p.waitMu.Unlock()
}

// wakeOnly tells only the waiters for the log end (logEnd true) or only
// those for the high watermark that it moved. Each signal wakes a
// goroutine that reads every partition it waits on again, and on two
// shared cores the wake-ups nothing came of delayed those that had
// something to do: an append wakes no acks=all produce (which waits for
// the high watermark), and a high watermark moved by a follower's fetch
// no other follower's held fetch (which waits for new records), as in
// Kafka's purgatories.
func (p *Partition) wakeOnly(logEnd bool) {
	p.waitMu.Lock()
	for w, forLogEnd := range p.waiters {
		if forLogEnd == logEnd {
			notify(w)
		}
	}
	p.waitMu.Unlock()
}

func notify(w chan struct{}) {
	select {
	case w <- struct{}{}:
	default:
	}
}

// Waiters is the number of fetches and acks=all produces waiting for the
// partition to change.
func (p *Partition) Waiters() int {
	p.waitMu.Lock()
	defer p.waitMu.Unlock()
	return len(p.waiters)
}

// AddWaiter registers w to hear, by a non-blocking send, when the high
// watermark moves (and of any change Wake announces); RemoveWaiter ends
// that.
func (p *Partition) AddWaiter(w chan struct{}) {
	p.waitMu.Lock()
	p.waiters[w] = false
	p.waitMu.Unlock()
}

// AddLogEndWaiter registers a follower's fetch, w, to hear when the log
// end moves (and of any change Wake announces), not the high watermark;
// RemoveWaiter ends that.
func (p *Partition) AddLogEndWaiter(w chan struct{}) {
	p.waitMu.Lock()
	p.waiters[w] = true
	p.waitMu.Unlock()
}

// RemoveWaiter: see AddWaiter.
func (p *Partition) RemoveWaiter(w chan struct{}) {
	p.waitMu.Lock()
	delete(p.waiters, w)
	p.waitMu.Unlock()
}

// Close wakes every waiter and closes the log.
func (p *Partition) Close() error {
	p.Wake()
	return p.log.Close()
}

// LastStableOffset is the offset a read_committed consumer reads up to
// (KIP-98): the first offset of the earliest transaction still open, or
// whose marker the high watermark has not passed yet (a marker not yet
// replicated completes nothing for consumers: a new leader may not have
// it), or the high watermark when that is lower. Followers replicate
// producer state, so theirs is right too.
//
// The high watermark is read first: a transaction that opens after it
// starts at or above the log end of that moment, never below it, so the
// pair read in this order can only understate the offset.
func (p *Partition) LastStableOffset() int64 {
	hw := p.HighWatermark()
	if first, ok := p.log.FirstUnstableOffsetBelow(hw); ok && first < hw {
		return first
	}
	return hw
}
