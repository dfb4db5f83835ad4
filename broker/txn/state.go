package txn

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// State is a transaction's state, with Kafka's ids: the id is what
// __transaction_state stores, the name what DescribeTransactions and
// ListTransactions report.
type State int8

// The states of Kafka's TransactionState. PrepareEpochFence only ever exists
// as a step inside the coordinator: it is never written to the log.
const (
	// Empty: the producer is initialised and no transaction is open.
	Empty State = iota
	// Ongoing: partitions (or a group's offsets) have been added.
	Ongoing
	// PrepareCommit: the commit is decided and logged; markers are being
	// written.
	PrepareCommit
	// PrepareAbort: the abort is decided and logged; markers are being
	// written.
	PrepareAbort
	// CompleteCommit: every marker of the commit is written.
	CompleteCommit
	// CompleteAbort: every marker of the abort is written.
	CompleteAbort
	// Dead: the transactional id expired; its record is a tombstone.
	Dead
	// PrepareEpochFence: the epoch is being bumped to fence a producer
	// whose transaction is being aborted for it.
	PrepareEpochFence
)

var stateNames = [...]string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"}

func (s State) valid() bool { return s >= Empty && s <= PrepareEpochFence }

// String returns Kafka's name of the state.
func (s State) String() string {
	if !s.valid() {
		return fmt.Sprintf("Unknown(%d)", int8(s))
	}
	return stateNames[s]
}

// ParseState returns the state Kafka calls name (case-sensitive, as the
// ListTransactions filter is).
func ParseState(name string) (State, bool) {
	for i, n := range stateNames {
		if n == name {
			return State(i), true
		}
	}
	return 0, false
}

// validPrevious is Kafka's TransactionState.validPreviousStates. KIP-890
// part 2 lets a client abort when no transaction is open (a producer that
// failed before adding a partition still ends with a fresh epoch), hence
// Empty and Complete* before PrepareAbort.
var validPrevious = [...][]State{
	Empty:             {Empty, CompleteCommit, CompleteAbort},
	Ongoing:           {Ongoing, Empty, CompleteCommit, CompleteAbort},
	PrepareCommit:     {Ongoing},
	PrepareAbort:      {Ongoing, PrepareEpochFence, Empty, CompleteCommit, CompleteAbort},
	CompleteCommit:    {PrepareCommit},
	CompleteAbort:     {PrepareAbort},
	Dead:              {Empty, CompleteCommit, CompleteAbort},
	PrepareEpochFence: {Ongoing},
}

// CanTransition reports whether Kafka allows a transaction in state from to
// move to state to.
func CanTransition(from, to State) bool {
	return from.valid() && to.valid() && slices.Contains(validPrevious[to], from)
}

// idle reports whether no transaction is open: the transactional id may
// expire, and a new transaction may start.
func (s State) idle() bool { return s == Empty || s == CompleteCommit || s == CompleteAbort }

// TopicPartition names a partition of a transaction.
type TopicPartition struct {
	Topic     string
	Partition int32
}

func (a TopicPartition) compare(b TopicPartition) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return int(a.Partition) - int(b.Partition)
}

// Protocol sentinels (Kafka's RecordBatch.NO_PRODUCER_ID/EPOCH) and the
// epoch bound.
const (
	NoProducerID    int64 = -1
	NoProducerEpoch int16 = -1
	// maxEpoch is never given to a client: it is kept so the coordinator
	// can always fence the holder of maxEpoch-1 with one more bump.
	maxEpoch = math.MaxInt16
)

// epochExhausted is Kafka's TransactionMetadata.isEpochExhausted: a
// producer at this epoch gets a new producer id instead of a bump.
func epochExhausted(e int16) bool { return e >= maxEpoch-1 }

// Client transaction versions (Kafka's TransactionVersion), as recorded in
// the state: TV2 is a client of KIP-890 part 2, whose epoch is bumped at the
// end of every transaction.
const (
	TV0 int16 = 0
	TV2 int16 = 2
)

// Metadata is the coordinator's state of one transactional id: what one
// __transaction_state record holds, plus the last epoch, which only lives in
// memory (Kafka's record has no field for it).
type Metadata struct {
	TransactionalID string
	ProducerID      int64
	// LastProducerID is the producer id before the latest rotation (Kafka's
	// PreviousProducerId): a KIP-360 retry with it is not fenced.
	LastProducerID int64
	// NextProducerID is the id a KIP-890 end moves to once its markers are
	// written, when the epoch of ProducerID is exhausted; -1 otherwise.
	NextProducerID int64
	ProducerEpoch  int16
	// LastProducerEpoch is the epoch before the latest bump asked by this
	// producer: a retry of that InitProducerId or EndTxn is answered, not
	// fenced. -1 after a bump by another producer (which fences the old one).
	LastProducerEpoch int16
	TimeoutMs         int32
	State             State
	// Partitions are the partitions of the open transaction, sorted.
	Partitions []TopicPartition
	// StartTime and LastUpdate are in Unix milliseconds; StartTime is -1
	// when no transaction has started.
	StartTime, LastUpdate int64
	// ClientTxnVersion is TV0 or TV2, from the last AddPartitionsToTxn or
	// EndTxn.
	ClientTxnVersion int16
}

// Clone returns a copy that shares nothing with m.
func (m Metadata) Clone() Metadata {
	m.Partitions = slices.Clone(m.Partitions)
	return m
}

// HasPartition reports whether p is in the open transaction.
func (m Metadata) HasPartition(p TopicPartition) bool {
	_, ok := slices.BinarySearchFunc(m.Partitions, p, TopicPartition.compare)
	return ok
}

// withPartitions returns the sorted union of m.Partitions and add.
func (m Metadata) withPartitions(add []TopicPartition) []TopicPartition {
	out := slices.Concat(m.Partitions, add)
	slices.SortFunc(out, TopicPartition.compare)
	return slices.Compact(out)
}

func subset(a, b []TopicPartition) bool {
	for _, p := range a {
		if _, ok := slices.BinarySearchFunc(b, p, TopicPartition.compare); !ok {
			return false
		}
	}
	return true
}

var errBadTransition = errors.New("txn: invalid state transition")

// checkTransition is Kafka's completeTransitionTo guard: the state change
// must be in the table, and each kind of change may touch only what it
// owns. A failure means a coordinator bug or a corrupt log, never a client
// error, so it is an error, not a Kafka code.
func checkTransition(from, to Metadata) error {
	fail := func(why string) error {
		return fmt.Errorf("%w: %q %s → %s: %s", errBadTransition, from.TransactionalID, from.State, to.State, why)
	}
	if from.TransactionalID != to.TransactionalID {
		return fail("transactional id changed")
	}
	if !CanTransition(from.State, to.State) {
		return fail("not in the transition table")
	}
	if to.LastUpdate < from.LastUpdate {
		return fail("last update time goes back")
	}
	sameProducer := to.ProducerID == from.ProducerID && to.ProducerEpoch == from.ProducerEpoch
	switch to.State {
	case Empty: // InitProducerId
		bump := to.ProducerEpoch == from.ProducerEpoch+1 || (to.ProducerEpoch == 0 && to.ProducerID != from.ProducerID)
		if to.ProducerEpoch != from.ProducerEpoch && !bump {
			return fail("epoch neither kept nor bumped")
		}
		if len(to.Partitions) > 0 || to.StartTime != -1 {
			return fail("an idle transactional id with a transaction")
		}
	case Ongoing: // AddPartitionsToTxn, AddOffsetsToTxn
		if !sameProducer || !subset(from.Partitions, to.Partitions) || to.TimeoutMs != from.TimeoutMs {
			return fail("producer, partitions or timeout changed")
		}
	case PrepareCommit, PrepareAbort: // EndTxn, timeout, fencing
		// One for a KIP-890 end, two for a fence (see fenceLocked).
		fence := to.State == PrepareAbort && from.State == Ongoing && to.ProducerEpoch == from.ProducerEpoch+2
		bumped := to.ProducerID == from.ProducerID && (to.ProducerEpoch == from.ProducerEpoch+1 || fence)
		if !sameProducer && !bumped {
			return fail("producer changed")
		}
		if !slices.Equal(from.Partitions, to.Partitions) || to.TimeoutMs != from.TimeoutMs {
			return fail("partitions or timeout changed")
		}
		if from.State == Ongoing && to.StartTime != from.StartTime {
			return fail("start time changed")
		}
	case CompleteCommit, CompleteAbort: // markers written
		rotated := from.NextProducerID != NoProducerID && to.ProducerID == from.NextProducerID && to.ProducerEpoch == 0
		if !sameProducer && !rotated {
			return fail("producer changed")
		}
		if to.TimeoutMs != from.TimeoutMs || to.StartTime == -1 || len(to.Partitions) > 0 {
			return fail("timeout, start time or partitions")
		}
	case PrepareEpochFence:
		return fail("an epoch fence is never logged")
	case Dead: // expiry: the record is a tombstone
	}
	return nil
}
