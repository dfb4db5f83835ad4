package replica

import (
	"fmt"
	"slices"
	"time"
)

// Leader is what a partition's leader knows of its followers: how far each
// has fetched and when each was last caught up. It decides the high
// watermark and which ISR change to ask the controller for. It has no
// clock and no network: the caller passes the time and sends the requests,
// so every decision is a function of its inputs.
//
// Leader is not safe for concurrent use; the partition serialises calls.
type Leader struct {
	self     int32
	replicas []int32
	isr      []int32 // as the controller last committed it
	// pending is the ISR of an AlterPartition in flight, nil when none.
	// While an expansion is in flight the high watermark already counts
	// the added replica (the "maximal ISR" of KIP-841), so that it never
	// has to move back when the change commits; a shrink counts only once
	// committed, so an acks=all producer is never answered on the word of
	// a replica that may still be in the ISR the controller holds.
	//
	// A change stays pending until the metadata shows its outcome
	// (Committed) or the controller says it was not applied and never will
	// be (Answered NotApplied); never on a timer: a change whose answer
	// was lost may be in the controller's ISR, and dropping the joiner
	// from the high watermark then acknowledges writes without a replica
	// the controller may elect (Kafka's Partition.handleAlterPartitionError).
	pending []int32
	// resend is set when the outcome of the pending change's last attempt
	// is unknown: Propose asks for the same change again.
	resend bool
	// epochStart is the offset at which this leader's epoch began: a
	// follower joins the ISR only once it has everything before it, so it
	// can never have been elected holding a divergent tail.
	epochStart int64
	followers  map[int32]*follower
}

type follower struct {
	// brokerEpoch is the registration epoch the follower's last fetch
	// named (KIP-903), -1 when it named none: a follower joins the ISR
	// only on the word of a fetch from the incarnation the metadata holds,
	// never on a position its previous life reached.
	brokerEpoch int64
	// leo is the follower's log end offset as its last fetch offset told
	// it; -1 until it fetches under this leadership.
	leo int64
	// lastCaughtUp is the last time the follower had everything the
	// leader had (Kafka's lastCaughtUpTimeMs).
	lastCaughtUp time.Time
	// prevFetch and prevLeaderEnd are the time and the leader's log end
	// of the follower's previous fetch: a fetch at or past that end shows
	// the follower was caught up then.
	prevFetch     time.Time
	prevLeaderEnd int64
}

// NewLeader starts the leadership of self over a partition with the given
// replicas and ISR, at log end epochStart. ISR members count as caught up
// now: they were in sync under the previous leader, and get
// replica.lag.time.max to show it again.
func NewLeader(self int32, replicas, isr []int32, epochStart int64, now time.Time) *Leader {
	l := &Leader{
		self:       self,
		replicas:   slices.Clone(replicas),
		isr:        slices.Clone(isr),
		epochStart: epochStart,
		followers:  make(map[int32]*follower, len(replicas)),
	}
	for _, id := range replicas {
		if id == self {
			continue
		}
		f := &follower{brokerEpoch: -1, leo: -1, prevLeaderEnd: -1}
		if slices.Contains(isr, id) {
			f.lastCaughtUp = now
		}
		l.followers[id] = f
	}
	return l
}

// ErrNotReplica is returned for a fetch from a broker that is not one of
// the partition's replicas.
var ErrNotReplica = fmt.Errorf("replica: not a replica of the partition")

// Fetched records a follower's fetch at fetchOffset, made when the leader's
// log ended at leaderEnd, by the follower's incarnation brokerEpoch (-1
// when the fetch named none). A fetch at an offset is the follower's word
// that it has everything below it. The caller has refused a fetch whose
// broker epoch is older than the follower's registration.
func (l *Leader) Fetched(id int32, brokerEpoch, fetchOffset, leaderEnd int64, now time.Time) error {
	f, ok := l.followers[id]
	if !ok {
		return fmt.Errorf("%w: broker %d", ErrNotReplica, id)
	}
	if brokerEpoch != f.brokerEpoch {
		// A new incarnation: where the previous one was says nothing
		// about what this one holds.
		f.prevFetch, f.prevLeaderEnd = time.Time{}, -1
		f.brokerEpoch = brokerEpoch
	}
	switch {
	case fetchOffset >= leaderEnd:
		f.lastCaughtUp = now
	case f.prevLeaderEnd >= 0 && fetchOffset >= f.prevLeaderEnd && f.prevFetch.After(f.lastCaughtUp):
		// Not at the end now, but past where the end was at its previous
		// fetch: it was caught up then.
		f.lastCaughtUp = f.prevFetch
	}
	f.leo = fetchOffset
	f.prevFetch, f.prevLeaderEnd = now, leaderEnd
	return nil
}

// HighWatermark returns the smallest log end among the leader (leaderEnd)
// and the followers of the maximal ISR. A member that has not fetched yet
// under this leadership holds it at -1: the caller keeps its high
// watermark where it was, since the high watermark never moves back.
func (l *Leader) HighWatermark(leaderEnd int64) int64 {
	hw := leaderEnd
	for _, id := range l.maximalISR() {
		if id == l.self {
			continue
		}
		f, ok := l.followers[id]
		if !ok {
			continue // not a replica any more: the controller will drop it
		}
		hw = min(hw, f.leo)
	}
	return hw
}

// maximalISR is the committed ISR plus every member of a change in
// flight: the change may commit any moment (or may have, with its answer
// lost), and a joiner must not be short of what the high watermark
// already acknowledged.
func (l *Leader) maximalISR() []int32 {
	if l.pending == nil {
		return l.isr
	}
	out := slices.Clone(l.isr)
	for _, id := range l.pending {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// EpochStart returns the log end at which this leadership began: the high
// watermark is known to cover everything committed before it only once it
// has reached it.
func (l *Leader) EpochStart() int64 { return l.epochStart }

// BrokerEpoch returns the broker epoch follower id's fetches named, -1
// when unknown (it has not fetched under this leadership, or named none).
func (l *Leader) BrokerEpoch(id int32) int64 {
	if f, ok := l.followers[id]; ok {
		return f.brokerEpoch
	}
	return -1
}

// ISR returns the ISR as last committed.
func (l *Leader) ISR() []int32 { return l.isr }

// Pending reports whether an ISR change is in flight.
func (l *Leader) Pending() bool { return l.pending != nil }

// Committed installs the ISR the controller committed (from an
// AlterPartition answer or the metadata) and ends any change in flight.
func (l *Leader) Committed(isr []int32, now time.Time) {
	for _, id := range isr {
		if f, ok := l.followers[id]; ok && !slices.Contains(l.isr, id) && f.lastCaughtUp.IsZero() {
			f.lastCaughtUp = now
		}
	}
	l.isr = slices.Clone(isr)
	l.pending, l.resend = nil, false
}

// Outcome is what an answer to an AlterPartition that was not a commit
// says of the change, following Kafka's Partition.handleAlterPartitionError.
type Outcome int

const (
	// NotApplied: the controller refused the change at the partition
	// epoch this leader holds, so no controller, past or future, applied
	// it (INELIGIBLE_REPLICA, OPERATION_NOT_ATTEMPTED). The committed ISR
	// stands and the next Propose decides afresh.
	NotApplied Outcome = iota
	// AwaitMetadata: the controller holds newer metadata than this leader
	// (FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, an unknown topic). An
	// earlier attempt whose answer was lost may be what moved it on, so the
	// change stays pending, counted for the high watermark, until the
	// metadata reaches this node (Committed, or a new Leader).
	AwaitMetadata
	// Unknown: no answer (a timeout, a lost connection, the controller
	// losing its raft leadership while committing): the change may or may
	// not have been applied. It stays pending and Propose asks for it
	// again, unchanged; if it was applied the controller answers
	// INVALID_UPDATE_VERSION and the metadata brings the outcome.
	Unknown
)

// Answered records the outcome of the pending change's attempt that was
// not committed.
func (l *Leader) Answered(o Outcome) {
	if l.pending == nil {
		return
	}
	switch o {
	case NotApplied:
		l.pending, l.resend = nil, false
	case AwaitMetadata:
		l.resend = false
	case Unknown:
		l.resend = true
	}
}

// Propose returns the ISR to ask the controller for, or nil when the ISR is
// right or a change is already in flight. Followers that have not been
// caught up within lagMax leave; followers out of the ISR that have
// everything below the high watermark, and at least up to the start of
// this leader's epoch, join, if eligible says the controller would take
// them at the broker epoch their fetches named (a fenced or
// shutting-down broker, or another incarnation, it would refuse). Both in
// one request, as Kafka does; the returned ISR lists the replicas in
// assignment order. A pending change whose last attempt's outcome is
// unknown is returned again, unchanged. The caller sends it and reports
// the outcome with Committed or Answered.
func (l *Leader) Propose(now time.Time, lagMax time.Duration, hw int64, eligible func(id int32, brokerEpoch int64) bool) []int32 {
	if l.pending != nil {
		if !l.resend {
			return nil
		}
		l.resend = false
		return slices.Clone(l.pending)
	}
	var next []int32
	changed := false
	for _, id := range l.replicas {
		in := slices.Contains(l.isr, id)
		if id == l.self {
			next = append(next, id)
			changed = changed || !in
			continue
		}
		f := l.followers[id]
		switch {
		case in && now.Sub(f.lastCaughtUp) > lagMax:
			changed = true // leaves
		case in:
			next = append(next, id)
		case f.leo >= 0 && f.leo >= hw && f.leo >= l.epochStart && (eligible == nil || eligible(id, f.brokerEpoch)):
			next = append(next, id)
			changed = true // joins
		}
	}
	if !changed {
		return nil
	}
	l.pending = next
	return slices.Clone(next)
}

// Lag returns each follower's distance behind leaderEnd, -1 for one that
// has not fetched yet.
func (l *Leader) Lag(leaderEnd int64) map[int32]int64 {
	out := make(map[int32]int64, len(l.followers))
	for id, f := range l.followers {
		if f.leo < 0 {
			out[id] = -1
		} else {
			out[id] = max(leaderEnd-f.leo, 0)
		}
	}
	return out
}
