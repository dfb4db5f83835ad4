package txn

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/broker/group"
)

// Clock is the coordinator's source of time: transaction start and update
// times, timeouts and the expiry of idle transactional ids all go through
// it.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// ProducerIDs hands out producer ids.
type ProducerIDs interface {
	// NextProducerID returns a producer id that no node has returned
	// before and never will again (the broker reserves blocks through the
	// metadata log). It is called with the coordinator's lock held and
	// must not call back into the Coordinator. An error is answered with
	// COORDINATOR_NOT_AVAILABLE, which clients retry.
	NextProducerID(ctx context.Context) (int64, error)
}

// Config configures a Coordinator. Zero values take Kafka's defaults.
type Config struct {
	// Partitions is the partition count of __transaction_state
	// (transaction.state.log.num.partitions: 50); it fixes which partition
	// owns a transactional id.
	Partitions int32
	// OffsetsPartitions is the partition count of __consumer_offsets
	// (offsets.topic.num.partitions: 50): AddOffsetsToTxn adds the group's
	// partition to the transaction.
	OffsetsPartitions int32
	// MaxTimeout bounds the transaction.timeout.ms a producer may ask for
	// (transaction.max.timeout.ms: 15 minutes).
	MaxTimeout time.Duration
	// IDExpiration is how long an idle transactional id is kept after its
	// last update (transactional.id.expiration.ms: 7 days).
	IDExpiration time.Duration
	Clock        Clock // nil: SystemClock
	ProducerIDs  ProducerIDs
}

func (c Config) withDefaults() Config {
	if c.Partitions == 0 {
		c.Partitions = 50
	}
	if c.OffsetsPartitions == 0 {
		c.OffsetsPartitions = 50
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = 15 * time.Minute
	}
	if c.IDExpiration == 0 {
		c.IDExpiration = 7 * 24 * time.Hour
	}
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	return c
}

// Validate reports a setting no coordinator can run with.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Partitions < 1:
		return fmt.Errorf("txn: transaction state partitions %d: must be at least 1", c.Partitions)
	case c.OffsetsPartitions < 1:
		return fmt.Errorf("txn: offsets partitions %d: must be at least 1", c.OffsetsPartitions)
	case c.MaxTimeout < time.Millisecond || c.MaxTimeout.Milliseconds() > 1<<31-1:
		return fmt.Errorf("txn: max transaction timeout %s: must be from 1ms to 2^31-1 ms", c.MaxTimeout)
	case c.IDExpiration < time.Millisecond:
		return fmt.Errorf("txn: transactional id expiration %s: must be at least 1ms", c.IDExpiration)
	case c.ProducerIDs == nil:
		return errors.New("txn: no producer id allocator")
	}
	return nil
}

// ErrNotCoordinator is wrapped when a transition or markers belong to a
// __transaction_state partition this coordinator no longer leads, or leads
// under a newer coordinator epoch; the caller answers NOT_COORDINATOR.
var ErrNotCoordinator = errors.New("txn: not the coordinator")

// errStale means a Transition was superseded (abandoned, or the id
// reloaded): completing it would apply a decision made on old state.
var errStale = errors.New("txn: stale transition")

// Coordinator is the transaction coordinator of one node: it decides for
// the transactional ids whose __transaction_state partitions it has loaded.
type Coordinator struct {
	cfg   Config
	clock Clock

	// mu guards everything below; it is held for whole decisions.
	mu struct {
		sync.Mutex
		// partitions maps each loaded partition to its coordinator epoch
		// (the leader epoch of the partition when it was loaded).
		partitions map[int32]int32
		ids        map[string]*entry
	}
}

type entry struct {
	partition int32
	md        Metadata
	// pending is the transition waiting for its record to be written;
	// while it is set, other changes get CONCURRENT_TRANSACTIONS.
	// Nothing of a transition is applied before Complete, so a fence whose
	// write failed is decided again from the same epoch: the retry bumps it
	// once, never twice (what Kafka's hasFailedEpochFence is for).
	pending *Transition
}

// New returns a coordinator that leads no partition yet.
func New(cfg Config) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Coordinator{cfg: cfg, clock: cfg.Clock}
	c.mu.partitions = make(map[int32]int32)
	c.mu.ids = make(map[string]*entry)
	return c, nil
}

// PartitionFor returns the __transaction_state partition that owns id:
// Kafka's formula, the same as for group ids.
func (c *Coordinator) PartitionFor(id string) int32 { return group.Partition(id, c.cfg.Partitions) }

// Transition is a decided state change of one transactional id. The caller
// appends Record() to Partition of __transaction_state (acks=all), then
// calls Complete, or Abandon if the append failed.
type Transition struct {
	Partition        int32
	CoordinatorEpoch int32
	From, To         Metadata
}

// Record returns the record to append: To's value, or a tombstone when the
// transactional id expires.
func (t *Transition) Record() Record {
	if t.To.State == Dead {
		return Tombstone(t.To.TransactionalID)
	}
	return Record{Key: EncodeKey(t.To.TransactionalID), Value: EncodeValue(t.To)}
}

// Markers returns the transaction markers to write once the transition is
// complete: for PrepareCommit and PrepareAbort, nil otherwise. Markers with
// no partitions (a KIP-890 abort of an empty transaction) have nothing to
// write, and go straight to CompleteMarkers.
func (t *Transition) Markers() *Markers {
	if t.To.State != PrepareCommit && t.To.State != PrepareAbort {
		return nil
	}
	return markersOf(t.To, t.CoordinatorEpoch)
}

// Markers are the control batches that end a transaction: one per
// partition, written by the partition's leader (WriteTxnMarkers).
type Markers struct {
	TransactionalID  string
	ProducerID       int64
	ProducerEpoch    int16
	CoordinatorEpoch int32
	Commit           bool
	Partitions       []TopicPartition
}

func markersOf(m Metadata, coordinatorEpoch int32) *Markers {
	return &Markers{
		TransactionalID:  m.TransactionalID,
		ProducerID:       m.ProducerID,
		ProducerEpoch:    m.ProducerEpoch,
		CoordinatorEpoch: coordinatorEpoch,
		Commit:           m.State == PrepareCommit,
		Partitions:       slices.Clone(m.Partitions),
	}
}

func (c *Coordinator) nowMs() int64 { return c.clock.Now().UnixMilli() }

// lookupLocked returns the coordinator epoch of id's partition, and the
// entry if there is one; err is NOT_COORDINATOR when the partition is not
// loaded here.
func (c *Coordinator) lookupLocked(id string) (part, epoch int32, e *entry, err *kerr.Error) {
	part = c.PartitionFor(id)
	epoch, ok := c.mu.partitions[part]
	if !ok {
		return part, 0, nil, kerr.NotCoordinator
	}
	return part, epoch, c.mu.ids[id], nil
}

func (c *Coordinator) prepareLocked(e *entry, epoch int32, to Metadata) *Transition {
	// Kafka's PreviousProducerId is the id before each record, not only
	// before a rotation.
	to.LastProducerID = e.md.ProducerID
	t := &Transition{Partition: e.partition, CoordinatorEpoch: epoch, From: e.md.Clone(), To: to}
	e.pending = t
	return t
}

// Complete applies t once its record is committed. It fails, changing
// nothing, if t is stale or the partition moved; the caller then answers
// NOT_COORDINATOR (the new coordinator loads the record from the log).
func (c *Coordinator) Complete(t *Transition) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := t.To.TransactionalID
	if epoch, ok := c.mu.partitions[t.Partition]; !ok || epoch != t.CoordinatorEpoch {
		return fmt.Errorf("%w: %q: partition %d", ErrNotCoordinator, id, t.Partition)
	}
	e := c.mu.ids[id]
	if e == nil || e.pending != t {
		return fmt.Errorf("%w: %q %s → %s", errStale, id, t.From.State, t.To.State)
	}
	e.pending = nil
	if err := checkTransition(e.md, t.To); err != nil {
		return err
	}
	if t.To.State == Dead {
		delete(c.mu.ids, id)
		return nil
	}
	e.md = t.To.Clone()
	return nil
}

// Abandon drops t after its record could not be written; the state stays
// as it was, and the client's retry decides again.
func (c *Coordinator) Abandon(t *Transition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.mu.ids[t.To.TransactionalID]; e != nil && e.pending == t {
		e.pending = nil
	}
}

// fenced is the error of a producer whose epoch is not the current one.
// Clients before KIP-588 know only INVALID_PRODUCER_EPOCH.
func fenced(oldClient bool) *kerr.Error {
	if oldClient {
		return kerr.InvalidProducerEpoch
	}
	return kerr.ProducerFenced
}

// InitProducerIDRequest is an InitProducerId with a transactional id.
type InitProducerIDRequest struct {
	TransactionalID string
	TimeoutMs       int32
	// ProducerID and ProducerEpoch are the producer's current ones (v3+,
	// KIP-360), both -1 for a new producer.
	ProducerID    int64
	ProducerEpoch int16
	Version       int16
}

// InitProducerIDResult is the answer to InitProducerId. With Err nil, the
// reply (ProducerID, ProducerEpoch) may be sent once Transition is
// complete. With CONCURRENT_TRANSACTIONS and a Transition, the producer's
// open transaction is being aborted to fence its previous holder: the
// caller completes the transition, writes its markers and replies with the
// error at once; the client retries and then gets a new epoch.
type InitProducerIDResult struct {
	Err           *kerr.Error
	ProducerID    int64
	ProducerEpoch int16
	Transition    *Transition
}

// InitProducerID gives a transactional producer its producer id and a new
// epoch, fencing any other producer with the same transactional id.
func (c *Coordinator) InitProducerID(ctx context.Context, req InitProducerIDRequest) InitProducerIDResult {
	fail := func(err *kerr.Error) InitProducerIDResult {
		return InitProducerIDResult{Err: err, ProducerID: NoProducerID, ProducerEpoch: NoProducerEpoch}
	}
	if req.TransactionalID == "" {
		return fail(kerr.InvalidRequest)
	}
	if req.TimeoutMs <= 0 || int64(req.TimeoutMs) > c.cfg.MaxTimeout.Milliseconds() {
		return fail(kerr.InvalidTransactionTimeout)
	}
	expected := req.ProducerID != NoProducerID
	if expected != (req.ProducerEpoch != NoProducerEpoch) {
		return fail(kerr.InvalidRequest)
	}
	oldClient := req.Version < 4

	c.mu.Lock()
	defer c.mu.Unlock()
	part, cepoch, e, kerrv := c.lookupLocked(req.TransactionalID)
	if kerrv != nil {
		return fail(kerrv)
	}
	now := c.nowMs()
	if e == nil {
		id, err := c.cfg.ProducerIDs.NextProducerID(ctx)
		if err != nil {
			return fail(kerr.CoordinatorNotAvailable)
		}
		// Epoch -1 and Empty: the first bump below gives epoch 0.
		e = &entry{partition: part, md: Metadata{
			TransactionalID: req.TransactionalID, ProducerID: id,
			LastProducerID: NoProducerID, NextProducerID: NoProducerID,
			ProducerEpoch: NoProducerEpoch, LastProducerEpoch: NoProducerEpoch,
			TimeoutMs: req.TimeoutMs, State: Empty, StartTime: -1, LastUpdate: now,
		}}
		c.mu.ids[req.TransactionalID] = e
	}
	md := e.md
	if e.pending != nil {
		return fail(kerr.ConcurrentTransactions)
	}
	// KIP-360: a producer that names its id and epoch is fenced unless it
	// is the current holder (its epoch is checked below), the id was just
	// created, or it retries across a producer id rotation it never heard
	// the answer of.
	if expected && md.ProducerEpoch != NoProducerEpoch && req.ProducerID != md.ProducerID &&
		(req.ProducerID != md.LastProducerID || !epochExhausted(req.ProducerEpoch)) {
		return fail(fenced(oldClient))
	}
	switch md.State {
	case PrepareCommit, PrepareAbort:
		// The previous transaction is still writing its markers.
		return fail(kerr.ConcurrentTransactions)
	case Ongoing:
		t, err := c.fenceLocked(e, cepoch, now)
		if err != nil {
			return fail(err)
		}
		r := fail(kerr.ConcurrentTransactions)
		r.Transition = t
		return r
	case Empty, CompleteCommit, CompleteAbort:
	default:
		return fail(kerr.UnknownServerError)
	}

	to := md.Clone()
	to.State, to.Partitions, to.StartTime, to.LastUpdate = Empty, nil, -1, now
	to.TimeoutMs = req.TimeoutMs
	to.LastProducerID, to.NextProducerID = md.ProducerID, NoProducerID
	if epochExhausted(md.ProducerEpoch) && (!expected || req.ProducerEpoch == md.ProducerEpoch) {
		// No epoch is left to fence with: start over with a new id.
		id, err := c.cfg.ProducerIDs.NextProducerID(ctx)
		if err != nil {
			return fail(kerr.CoordinatorNotAvailable)
		}
		to.ProducerID, to.ProducerEpoch, to.LastProducerEpoch = id, 0, NoProducerEpoch
		if expected {
			to.LastProducerEpoch = md.ProducerEpoch
		}
	} else {
		switch {
		case !expected:
			// A new producer: whoever held the epoch is fenced, and
			// cannot pass for a retry.
			to.ProducerEpoch, to.LastProducerEpoch = md.ProducerEpoch+1, NoProducerEpoch
		case md.ProducerEpoch == NoProducerEpoch || req.ProducerEpoch == md.ProducerEpoch:
			// The holder recovers from an error (KIP-360).
			to.ProducerEpoch, to.LastProducerEpoch = md.ProducerEpoch+1, md.ProducerEpoch
		case req.ProducerEpoch == md.LastProducerEpoch:
			// A retry of a bump that succeeded: answer it again.
			to.ProducerEpoch, to.LastProducerEpoch = md.ProducerEpoch, md.LastProducerEpoch
		default:
			return fail(fenced(oldClient))
		}
	}
	t := c.prepareLocked(e, cepoch, to)
	return InitProducerIDResult{ProducerID: to.ProducerID, ProducerEpoch: to.ProducerEpoch, Transition: t}
}

// fenceLocked decides the abort of e's open transaction with the epoch
// bumped, so the producer that opened it can neither add to it nor end
// it (Kafka's PrepareEpochFence followed by PrepareAbort, as one logged
// step).
func (c *Coordinator) fenceLocked(e *entry, cepoch int32, now int64) (*Transition, *kerr.Error) {
	md := e.md
	if md.ProducerEpoch == maxEpoch {
		return nil, kerr.UnknownServerError
	}
	to := md.Clone()
	to.State, to.LastUpdate, to.LastProducerEpoch = PrepareAbort, now, NoProducerEpoch
	// Two, as Kafka's fence followed by its TV2 abort: a KIP-890 part 2
	// client one epoch behind is taken for a retry of its own end, and the
	// producer this abort is for must be fenced instead. At 32766 only one
	// is left; InitProducerId then rotates the id.
	to.ProducerEpoch = int16(min(int(md.ProducerEpoch)+2, maxEpoch))
	return c.prepareLocked(e, cepoch, to), nil
}

// AddPartitionsRequest is an AddPartitionsToTxn for one transactional id
// (v4+ batches several; the caller splits them).
type AddPartitionsRequest struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Partitions      []TopicPartition
	// Version is the request's: v0-1 clients get INVALID_PRODUCER_EPOCH
	// for a fenced epoch, and v5+ (sent by a broker for a KIP-890 part 2
	// client) records the client as TV2.
	Version int16
}

// AddPartitionsResult is the answer to AddPartitionsToTxn, the same for
// every partition of the request. With Err nil and a Transition, the reply
// waits for the transition to complete; with no Transition the partitions
// were already in the transaction.
type AddPartitionsResult struct {
	Err        *kerr.Error
	Transition *Transition
}

// AddPartitions adds partitions to the producer's transaction, starting
// one if none is open.
func (c *Coordinator) AddPartitions(req AddPartitionsRequest) AddPartitionsResult {
	tv := TV0
	if req.Version >= 5 {
		tv = TV2
	}
	parts := slices.Clone(req.Partitions)
	slices.SortFunc(parts, TopicPartition.compare)
	parts = slices.Compact(parts)
	return c.add(req.TransactionalID, req.ProducerID, req.ProducerEpoch, parts, req.Version < 2, &tv)
}

// AddOffsetsRequest is an AddOffsetsToTxn.
type AddOffsetsRequest struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Group           string
	Version         int16 // v0-1 get INVALID_PRODUCER_EPOCH when fenced
}

// OffsetsTopic is where AddOffsetsToTxn puts a group's transactional
// offset commits.
const OffsetsTopic = "__consumer_offsets"

// AddOffsets adds the group's __consumer_offsets partition to the
// transaction, so the commit's markers make the group's transactional
// offsets visible (or drop them).
func (c *Coordinator) AddOffsets(req AddOffsetsRequest) AddPartitionsResult {
	p := TopicPartition{Topic: OffsetsTopic, Partition: group.Partition(req.Group, c.cfg.OffsetsPartitions)}
	return c.add(req.TransactionalID, req.ProducerID, req.ProducerEpoch, []TopicPartition{p}, req.Version < 2, nil)
}

func (c *Coordinator) add(id string, pid int64, epoch int16, parts []TopicPartition, oldClient bool, tv *int16) AddPartitionsResult {
	if id == "" {
		return AddPartitionsResult{Err: kerr.InvalidRequest}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, cepoch, e, err := c.lookupLocked(id)
	switch {
	case err != nil:
		return AddPartitionsResult{Err: err}
	case e == nil || e.md.ProducerID != pid:
		return AddPartitionsResult{Err: kerr.InvalidProducerIDMapping}
	case e.md.ProducerEpoch != epoch:
		return AddPartitionsResult{Err: fenced(oldClient)}
	case e.pending != nil, e.md.State == PrepareCommit, e.md.State == PrepareAbort:
		return AddPartitionsResult{Err: kerr.ConcurrentTransactions}
	case e.md.State == Ongoing && subset(parts, e.md.Partitions):
		return AddPartitionsResult{}
	case e.md.State != Ongoing && !e.md.State.idle():
		return AddPartitionsResult{Err: kerr.UnknownServerError}
	}
	now := c.nowMs()
	to := e.md.Clone()
	if to.State.idle() {
		to.StartTime = now
	}
	to.State, to.LastUpdate, to.Partitions = Ongoing, now, e.md.withPartitions(parts)
	if tv != nil {
		to.ClientTxnVersion = *tv
	}
	return AddPartitionsResult{Transition: c.prepareLocked(e, cepoch, to)}
}

// VerifyPartitions answers a verification-only AddPartitionsToTxn (v4+,
// KIP-890 part 1), which a partition leader sends before appending a
// transactional batch: is each partition in the ongoing transaction of
// this producer id and epoch? A partition that is not gets
// TRANSACTION_ABORTABLE (Kafka 3.8+; the produce path converts it for
// older clients), so a late retry of a produce cannot open a transaction
// the producer has already ended. Err, when set, applies to
// every partition.
func (c *Coordinator) VerifyPartitions(id string, pid int64, epoch int16, parts []TopicPartition) (map[TopicPartition]*kerr.Error, *kerr.Error) {
	if id == "" {
		return nil, kerr.InvalidRequest
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _, e, err := c.lookupLocked(id)
	switch {
	case err != nil:
		return nil, err
	case e == nil || e.md.ProducerID != pid:
		return nil, kerr.InvalidProducerIDMapping
	case e.md.ProducerEpoch != epoch:
		return nil, kerr.ProducerFenced
	case e.md.State == PrepareCommit, e.md.State == PrepareAbort:
		return nil, kerr.ConcurrentTransactions
	}
	// A pending add is not waited for: the partition joins the transaction
	// when its record is written, and the producer retries its produce
	// after its AddPartitionsToTxn succeeded.
	out := make(map[TopicPartition]*kerr.Error, len(parts))
	for _, p := range parts {
		out[p] = nil
		if e.md.State != Ongoing || !e.md.HasPartition(p) {
			out[p] = kerr.TransactionAbortable
		}
	}
	return out, nil
}

// EndTxnRequest is an EndTxn.
type EndTxnRequest struct {
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	Commit          bool
	// Version is the request's: v0-1 get INVALID_PRODUCER_EPOCH when
	// fenced; v5+ is a KIP-890 part 2 client (TV2), whose epoch is bumped
	// by every end.
	Version int16
}

// EndTxnResult is the answer to EndTxn. With Err nil and a Transition,
// the caller completes it, replies, and writes its Markers. With Err nil
// and no Transition, the request retried an end that is already complete.
// ProducerID and ProducerEpoch are what a v5+ client continues with.
type EndTxnResult struct {
	Err           *kerr.Error
	ProducerID    int64
	ProducerEpoch int16
	Transition    *Transition
}

// EndTxn commits or aborts the producer's transaction.
func (c *Coordinator) EndTxn(ctx context.Context, req EndTxnRequest) EndTxnResult {
	fail := func(err *kerr.Error) EndTxnResult {
		return EndTxnResult{Err: err, ProducerID: NoProducerID, ProducerEpoch: NoProducerEpoch}
	}
	if req.TransactionalID == "" {
		return fail(kerr.InvalidRequest)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, cepoch, e, err := c.lookupLocked(req.TransactionalID)
	if err != nil {
		return fail(err)
	}
	if e == nil {
		return fail(kerr.InvalidProducerIDMapping)
	}
	if req.Version >= 5 {
		return c.endTV2Locked(ctx, e, cepoch, req)
	}
	md := e.md
	switch {
	case md.ProducerID != req.ProducerID:
		return fail(kerr.InvalidProducerIDMapping)
	case md.ProducerEpoch != req.ProducerEpoch:
		return fail(fenced(req.Version < 2))
	case e.pending != nil:
		return fail(kerr.ConcurrentTransactions)
	}
	done := EndTxnResult{ProducerID: md.ProducerID, ProducerEpoch: md.ProducerEpoch}
	switch md.State {
	case Ongoing:
		to := md.Clone()
		to.State, to.LastUpdate, to.ClientTxnVersion = PrepareAbort, c.nowMs(), TV0
		if req.Commit {
			to.State = PrepareCommit
		}
		done.Transition = c.prepareLocked(e, cepoch, to)
		return done
	case CompleteCommit, CompleteAbort:
		// A retry of an end whose answer was lost: the same outcome is
		// answered again, the other one is a client bug.
		if req.Commit == (md.State == CompleteCommit) {
			return done
		}
	case PrepareCommit, PrepareAbort:
		if req.Commit == (md.State == PrepareCommit) {
			return fail(kerr.ConcurrentTransactions)
		}
	}
	return fail(kerr.InvalidTxnState)
}

// endTV2Locked is EndTxn for KIP-890 part 2 clients. Every end bumps the
// epoch, so a produce or EndTxn still in flight from the ended transaction
// carries an old epoch and is fenced instead of joining the next one; the
// client learns its new epoch from the reply. Because the epoch moved, a
// retry is recognised by the client's epoch being one behind (or by the
// old producer id, when the bump exhausted it and the id rotated).
func (c *Coordinator) endTV2Locked(ctx context.Context, e *entry, cepoch int32, req EndTxnRequest) EndTxnResult {
	fail := func(err *kerr.Error) EndTxnResult {
		return EndTxnResult{Err: err, ProducerID: NoProducerID, ProducerEpoch: NoProducerEpoch}
	}
	md := e.md
	retryOnBump := md.ProducerID == req.ProducerID && md.ProducerEpoch == req.ProducerEpoch+1
	retryOnRotation := md.ProducerID != req.ProducerID && md.LastProducerID == req.ProducerID &&
		req.ProducerEpoch == maxEpoch-1 && md.ProducerEpoch == 0
	retry := retryOnBump || retryOnRotation
	if md.ProducerID != req.ProducerID && !retryOnRotation {
		return fail(kerr.InvalidProducerIDMapping)
	}
	var validEpoch bool
	switch md.State {
	case PrepareCommit, PrepareAbort:
		validEpoch = retryOnBump
	case CompleteCommit, CompleteAbort:
		validEpoch = retry || req.ProducerEpoch == md.ProducerEpoch
	default:
		validEpoch = req.ProducerEpoch == md.ProducerEpoch
	}
	if !validEpoch {
		return fail(kerr.ProducerFenced)
	}
	if e.pending != nil {
		return fail(kerr.ConcurrentTransactions)
	}
	end := func(state State, nothingAdded bool) EndTxnResult {
		if md.ProducerEpoch == maxEpoch {
			// Only a fence reaches the last epoch and no client holds it;
			// there is nothing left to bump to, and the producer must
			// start over with InitProducerId, which rotates the id.
			return fail(kerr.ProducerFenced)
		}
		now := c.nowMs()
		to := md.Clone()
		to.State, to.LastUpdate, to.ClientTxnVersion = state, now, TV2
		to.ProducerEpoch, to.LastProducerEpoch, to.NextProducerID = md.ProducerEpoch+1, md.ProducerEpoch, NoProducerID
		if nothingAdded {
			// An abort with no transaction open still needs a start time
			// for its Complete record.
			to.StartTime = now
		}
		r := EndTxnResult{ProducerID: to.ProducerID, ProducerEpoch: to.ProducerEpoch}
		if epochExhausted(md.ProducerEpoch) {
			// The markers take the last epoch; the producer goes on
			// with a new id once they are written.
			id, err := c.cfg.ProducerIDs.NextProducerID(ctx)
			if err != nil {
				return fail(kerr.CoordinatorNotAvailable)
			}
			to.NextProducerID = id
			r.ProducerID, r.ProducerEpoch = id, 0
		}
		r.Transition = c.prepareLocked(e, cepoch, to)
		return r
	}
	current := EndTxnResult{ProducerID: md.ProducerID, ProducerEpoch: md.ProducerEpoch}
	switch md.State {
	case Ongoing:
		if req.Commit {
			return end(PrepareCommit, false)
		}
		return end(PrepareAbort, false)
	case CompleteCommit:
		if req.Commit && retry {
			return current
		}
		if !req.Commit && !retry {
			return end(PrepareAbort, true)
		}
	case CompleteAbort:
		if !req.Commit && retry {
			return current
		}
		if !req.Commit {
			return end(PrepareAbort, true)
		}
	case Empty:
		if !req.Commit {
			return end(PrepareAbort, true)
		}
	case PrepareCommit, PrepareAbort:
		if req.Commit == (md.State == PrepareCommit) {
			return fail(kerr.ConcurrentTransactions)
		}
	}
	return fail(kerr.InvalidTxnState)
}

// CompleteMarkers decides the end of a transaction whose markers m have
// all been written: CompleteCommit or CompleteAbort, and for a KIP-890
// end that exhausted the epoch, the move to the next producer id.
func (c *Coordinator) CompleteMarkers(m *Markers) (*Transition, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := m.TransactionalID
	part, cepoch, e, kerrv := c.lookupLocked(id)
	if kerrv != nil || cepoch != m.CoordinatorEpoch {
		return nil, fmt.Errorf("%w: %q: partition %d", ErrNotCoordinator, id, part)
	}
	if e == nil || e.pending != nil || e.md.ProducerID != m.ProducerID || e.md.ProducerEpoch != m.ProducerEpoch ||
		(e.md.State != PrepareCommit && e.md.State != PrepareAbort) {
		return nil, fmt.Errorf("%w: markers of %q", errStale, id)
	}
	md := e.md
	to := md.Clone()
	to.State, to.Partitions, to.LastUpdate = CompleteAbort, nil, c.nowMs()
	if md.State == PrepareCommit {
		to.State = CompleteCommit
	}
	if md.NextProducerID != NoProducerID {
		to.ProducerID, to.ProducerEpoch = md.NextProducerID, 0
		to.LastProducerID, to.NextProducerID = md.ProducerID, NoProducerID
	}
	return c.prepareLocked(e, cepoch, to), nil
}

// AbortTimedOut decides the abort of every open transaction older than its
// timeout, with the epoch bumped so that its producer is fenced: a producer
// that stalled or died cannot hold back the last stable offset of its
// partitions beyond transaction.timeout.ms. Each transition is handled as
// an EndTxn's: complete it, then write its markers.
func (c *Coordinator) AbortTimedOut() []*Transition {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.nowMs()
	var out []*Transition
	for _, id := range c.sortedIDsLocked() {
		e := c.mu.ids[id]
		md := e.md
		if e.pending != nil || md.State != Ongoing || md.StartTime+int64(md.TimeoutMs) >= now {
			continue
		}
		if t, err := c.fenceLocked(e, c.mu.partitions[e.partition], now); err == nil {
			out = append(out, t)
		}
	}
	return out
}

// ExpireIDs decides the removal of transactional ids idle for longer than
// IDExpiration: their transitions write tombstones.
func (c *Coordinator) ExpireIDs() []*Transition {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.nowMs()
	var out []*Transition
	for _, id := range c.sortedIDsLocked() {
		e := c.mu.ids[id]
		if e.pending != nil || !e.md.State.idle() || e.md.LastUpdate+c.cfg.IDExpiration.Milliseconds() > now {
			continue
		}
		to := e.md.Clone()
		to.State, to.Partitions = Dead, nil
		out = append(out, c.prepareLocked(e, c.mu.partitions[e.partition], to))
	}
	return out
}

func (c *Coordinator) sortedIDsLocked() []string {
	ids := make([]string, 0, len(c.mu.ids))
	for id := range c.mu.ids {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// ListFilter selects transactions for ListTransactions; empty filters
// select all.
type ListFilter struct {
	States      []State
	ProducerIDs []int64
	// MinDuration, when positive, keeps only transactions started at
	// least that long ago (ListTransactions v1, KIP-994).
	MinDuration time.Duration
	// IDPattern, when set, keeps only the transactional ids it matches
	// (ListTransactions v2, KIP-1152).
	IDPattern *regexp.Regexp
}

// Summary is one row of ListTransactions.
type Summary struct {
	TransactionalID string
	ProducerID      int64
	State           State
}

// List returns the transactional ids of the loaded partitions that match
// f, sorted.
func (c *Coordinator) List(f ListFilter) []Summary {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.nowMs()
	var out []Summary
	for _, id := range c.sortedIDsLocked() {
		md := c.mu.ids[id].md
		if md.ProducerEpoch == NoProducerEpoch {
			continue // created by an InitProducerId whose record is not written yet
		}
		if len(f.States) > 0 && !slices.Contains(f.States, md.State) ||
			len(f.ProducerIDs) > 0 && !slices.Contains(f.ProducerIDs, md.ProducerID) ||
			f.MinDuration > 0 && (md.StartTime < 0 || now-md.StartTime < f.MinDuration.Milliseconds()) ||
			f.IDPattern != nil && !f.IDPattern.MatchString(id) {
			continue
		}
		out = append(out, Summary{TransactionalID: id, ProducerID: md.ProducerID, State: md.State})
	}
	return out
}

// Describe returns the state of transactional id id for
// DescribeTransactions: NOT_COORDINATOR if its partition is not loaded
// here, TRANSACTIONAL_ID_NOT_FOUND if it does not exist.
func (c *Coordinator) Describe(id string) (Metadata, *kerr.Error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _, e, err := c.lookupLocked(id)
	if err != nil {
		return Metadata{}, err
	}
	if e == nil || e.md.ProducerEpoch == NoProducerEpoch {
		return Metadata{}, kerr.TransactionalIDNotFound
	}
	return e.md.Clone(), nil
}

// Stats are the coordinator's gauges.
type Stats struct {
	// ByState counts the transactional ids of the loaded partitions.
	ByState map[State]int
	// OldestOngoing is when the longest-running open transaction started;
	// zero when none is open.
	OldestOngoing time.Time
}

// Stats returns the coordinator's gauges.
func (c *Coordinator) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{ByState: make(map[State]int)}
	for _, e := range c.mu.ids {
		md := e.md
		if md.ProducerEpoch == NoProducerEpoch {
			continue
		}
		s.ByState[md.State]++
		if md.State == Ongoing && md.StartTime >= 0 {
			if t := time.UnixMilli(md.StartTime); s.OldestOngoing.IsZero() || t.Before(s.OldestOngoing) {
				s.OldestOngoing = t
			}
		}
	}
	return s
}
