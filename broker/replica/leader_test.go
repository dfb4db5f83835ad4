package replica

import (
	"errors"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func TestHighWatermarkIsTheSmallestLogEndInTheISR(t *testing.T) {
	l := NewLeader(1, []int32{1, 2, 3}, []int32{1, 2, 3}, 100, t0)
	if hw := l.HighWatermark(120); hw != -1 {
		t.Fatalf("before any follower fetched: high watermark %d, want -1 (unknown)", hw)
	}
	must(t, l.Fetched(2, 1, 110, 120, t0))
	if hw := l.HighWatermark(120); hw != -1 {
		t.Fatalf("one follower fetched: high watermark %d, want -1", hw)
	}
	must(t, l.Fetched(3, 1, 115, 120, t0))
	if hw := l.HighWatermark(120); hw != 110 {
		t.Fatalf("high watermark %d, want 110", hw)
	}
	must(t, l.Fetched(2, 1, 120, 120, t0))
	if hw := l.HighWatermark(120); hw != 115 {
		t.Fatalf("high watermark %d, want 115", hw)
	}
}

func TestSingleReplicaHighWatermarkIsTheLogEnd(t *testing.T) {
	l := NewLeader(1, []int32{1}, []int32{1}, 0, t0)
	if hw := l.HighWatermark(42); hw != 42 {
		t.Fatalf("high watermark %d, want 42", hw)
	}
	if isr := l.Propose(t0.Add(time.Hour), time.Second, 42, nil); isr != nil {
		t.Fatalf("a single replica proposed ISR %v", isr)
	}
}

func TestFetchFromNonReplicaIsRefused(t *testing.T) {
	l := NewLeader(1, []int32{1, 2}, []int32{1, 2}, 0, t0)
	if err := l.Fetched(7, 1, 0, 0, t0); !errors.Is(err, ErrNotReplica) {
		t.Fatalf("fetch from broker 7: %v, want ErrNotReplica", err)
	}
}

func TestLaggingFollowerLeavesTheISR(t *testing.T) {
	lag := 10 * time.Second
	l := NewLeader(1, []int32{1, 2, 3}, []int32{1, 2, 3}, 0, t0)
	// Follower 2 keeps up; follower 3 fetches but never reaches the end.
	for i := range 12 {
		now := t0.Add(time.Duration(i) * time.Second)
		end := int64(100 * (i + 1))
		must(t, l.Fetched(2, 1, end, end, now))
		must(t, l.Fetched(3, 1, 5, end, now))
	}
	if isr := l.Propose(t0.Add(9*time.Second), lag, 0, nil); isr != nil {
		t.Fatalf("within the lag time: proposed %v", isr)
	}
	isr := l.Propose(t0.Add(11*time.Second), lag, 0, nil)
	if !slices.Equal(isr, []int32{1, 2}) {
		t.Fatalf("proposed %v, want [1 2]", isr)
	}
	if again := l.Propose(t0.Add(12*time.Second), lag, 0, nil); again != nil {
		t.Fatalf("proposed %v while a change is in flight", again)
	}
	// Until the shrink commits, the high watermark still waits for 3.
	if hw := l.HighWatermark(1200); hw != 5 {
		t.Fatalf("high watermark %d before the shrink committed, want 5", hw)
	}
	l.Committed([]int32{1, 2}, t0.Add(12*time.Second))
	if hw := l.HighWatermark(1200); hw != 1200 {
		t.Fatalf("high watermark %d after the shrink, want 1200", hw)
	}
}

func TestFollowerThatWasCaughtUpAtItsPreviousFetchStays(t *testing.T) {
	// A steady producer: the follower is always one fetch behind the end,
	// but always past where the end was at its previous fetch.
	l := NewLeader(1, []int32{1, 2}, []int32{1, 2}, 0, t0)
	for i := range 60 {
		now := t0.Add(time.Duration(i) * time.Second)
		must(t, l.Fetched(2, 1, int64(10*i), int64(10*i+10), now))
	}
	if isr := l.Propose(t0.Add(60*time.Second), 10*time.Second, 0, nil); isr != nil {
		t.Fatalf("a follower keeping pace was dropped: proposed %v", isr)
	}
}

func TestCaughtUpFollowerJoinsTheISR(t *testing.T) {
	l := NewLeader(1, []int32{1, 2, 3}, []int32{1, 2}, 50, t0)
	must(t, l.Fetched(2, 1, 80, 80, t0))
	// 3 is behind the high watermark: not yet.
	must(t, l.Fetched(3, 1, 40, 80, t0))
	if isr := l.Propose(t0, time.Minute, 80, nil); isr != nil {
		t.Fatalf("proposed %v for a follower behind the high watermark", isr)
	}
	must(t, l.Fetched(3, 1, 80, 80, t0))
	isr := l.Propose(t0, time.Minute, 80, nil)
	if !slices.Equal(isr, []int32{1, 2, 3}) {
		t.Fatalf("proposed %v, want [1 2 3]", isr)
	}
	// While the expansion is in flight the new member counts for the high
	// watermark, so it never has to move back.
	if hw := l.HighWatermark(90); hw != 80 {
		t.Fatalf("high watermark %d during the expansion, want 80", hw)
	}
	l.Answered(NotApplied)
	if hw := l.HighWatermark(90); hw != 80 {
		t.Fatalf("high watermark %d after a refused expansion, want 80 (follower 2)", hw)
	}
}

func TestFollowerBelowTheEpochStartDoesNotJoin(t *testing.T) {
	// This leadership began at 100; a follower at 90 that matches the
	// high watermark (still 90 from the old leader) must first fetch past
	// the epoch start, so it cannot hold a divergent tail.
	l := NewLeader(1, []int32{1, 2}, []int32{1}, 100, t0)
	must(t, l.Fetched(2, 1, 90, 100, t0))
	if isr := l.Propose(t0, time.Minute, 90, nil); isr != nil {
		t.Fatalf("proposed %v for a follower below the epoch start", isr)
	}
}

func TestLagReportsUnknownFollowers(t *testing.T) {
	l := NewLeader(1, []int32{1, 2, 3}, []int32{1, 2, 3}, 0, t0)
	must(t, l.Fetched(2, 1, 70, 100, t0))
	got := l.Lag(100)
	if got[2] != 30 || got[3] != -1 {
		t.Fatalf("lag %v, want 2:30 3:-1", got)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestIneligibleFollowerDoesNotJoin(t *testing.T) {
	l := NewLeader(1, []int32{1, 2}, []int32{1}, 0, t0)
	must(t, l.Fetched(2, 1, 50, 50, t0))
	fenced := func(id int32, _ int64) bool { return id != 2 }
	if isr := l.Propose(t0, time.Minute, 50, fenced); isr != nil {
		t.Fatalf("proposed %v with a fenced follower", isr)
	}
	if isr := l.Propose(t0, time.Minute, 50, nil); !slices.Equal(isr, []int32{1, 2}) {
		t.Fatalf("proposed %v, want [1 2]", isr)
	}
}

func TestMixedChangeCountsTheJoinerUntilCommitted(t *testing.T) {
	// 3 catches up as 2 falls behind: one proposal swaps them. Until it
	// commits, the high watermark waits for both.
	l := NewLeader(1, []int32{1, 2, 3}, []int32{1, 2}, 0, t0)
	must(t, l.Fetched(2, 1, 100, 100, t0))
	must(t, l.Fetched(3, 1, 100, 100, t0))
	later := t0.Add(20 * time.Second)
	must(t, l.Fetched(3, 1, 150, 150, later))
	isr := l.Propose(later, 10*time.Second, 100, nil)
	if !slices.Equal(isr, []int32{1, 3}) {
		t.Fatalf("proposed %v, want [1 3]", isr)
	}
	must(t, l.Fetched(2, 1, 120, 150, later))
	if hw := l.HighWatermark(200); hw != 120 {
		t.Fatalf("high watermark %d during the swap, want 120 (the leaver still counts)", hw)
	}
	must(t, l.Fetched(2, 1, 200, 200, later))
	if hw := l.HighWatermark(200); hw != 150 {
		t.Fatalf("high watermark %d during the swap, want 150 (the joiner counts too)", hw)
	}
}

// An ISR change stays in the high watermark's maximal ISR until the
// metadata shows its outcome, whatever answer (or none) the leader got,
// unless the controller says it was not applied: Kafka's
// Partition.handleAlterPartitionError. An expansion dropped on a lost or
// stale answer would let acks=all be answered without a replica the
// controller may already hold in the ISR, and elect.
func TestPendingExpansionIsKeptUntilTheOutcomeIsKnown(t *testing.T) {
	type step struct {
		answer    *Outcome // nil: none
		committed []int32  // non-nil: the metadata shows this ISR
		later     time.Duration
		resend    bool // then Propose sends the same change again
	}
	out := func(o Outcome) *Outcome { return &o }
	cases := []struct {
		name        string
		steps       []step
		wantPending bool
		wantHW      int64   // 100 while the joiner 3 counts, 150 once it does not
		wantPropose []int32 // the next Propose, an hour on
	}{
		{name: "committed", steps: []step{{committed: []int32{1, 2, 3}}}, wantHW: 100},
		{name: "INELIGIBLE_REPLICA resets to the committed ISR", steps: []step{{answer: out(NotApplied)}}, wantHW: 150, wantPropose: []int32{1, 2, 3}},
		{name: "INVALID_UPDATE_VERSION waits for the metadata", steps: []step{{answer: out(AwaitMetadata)}}, wantPending: true, wantHW: 100},
		{name: "FENCED_LEADER_EPOCH then the metadata shows the expansion", steps: []step{{answer: out(AwaitMetadata)}, {committed: []int32{1, 2, 3}}}, wantHW: 100},
		{name: "INVALID_UPDATE_VERSION then the metadata shows no expansion", steps: []step{{answer: out(AwaitMetadata)}, {committed: []int32{1, 2}}}, wantHW: 150, wantPropose: []int32{1, 2, 3}},
		{name: "no answer, no time-based expiry", steps: []step{{later: time.Hour}}, wantPending: true, wantHW: 100},
		{name: "lost answer is asked again unchanged", steps: []step{{answer: out(Unknown)}}, wantPending: true, wantHW: 100, wantPropose: []int32{1, 2, 3}},
		{name: "lost answer then INVALID_UPDATE_VERSION (the first attempt committed)", steps: []step{{answer: out(Unknown), resend: true}, {answer: out(AwaitMetadata)}}, wantPending: true, wantHW: 100},
		{name: "answer for no pending change is ignored", steps: []step{{committed: []int32{1, 2}}, {answer: out(Unknown)}}, wantHW: 150, wantPropose: []int32{1, 2, 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := NewLeader(1, []int32{1, 2, 3}, []int32{1, 2}, 0, t0)
			must(t, l.Fetched(2, 1, 100, 100, t0))
			must(t, l.Fetched(3, 1, 100, 100, t0))
			if isr := l.Propose(t0, time.Minute, 100, nil); !slices.Equal(isr, []int32{1, 2, 3}) {
				t.Fatalf("proposed %v, want [1 2 3]", isr)
			}
			now := t0
			must(t, l.Fetched(2, 1, 150, 150, now))
			for _, s := range c.steps {
				now = now.Add(s.later)
				if s.answer != nil {
					l.Answered(*s.answer)
				}
				if s.committed != nil {
					l.Committed(s.committed, now)
				}
				if s.resend {
					if isr := l.Propose(now, time.Hour, 100, nil); !slices.Equal(isr, []int32{1, 2, 3}) {
						t.Fatalf("after a lost answer proposed %v, want the same change [1 2 3]", isr)
					}
				}
			}
			if l.Pending() != c.wantPending {
				t.Fatalf("pending %v, want %v", l.Pending(), c.wantPending)
			}
			if hw := l.HighWatermark(150); hw != c.wantHW {
				t.Fatalf("high watermark %d, want %d", hw, c.wantHW)
			}
			// Follower 3 keeps fetching, so the only reason to propose is
			// a change not yet made.
			now = now.Add(time.Hour)
			must(t, l.Fetched(3, 1, 150, 150, now))
			must(t, l.Fetched(2, 1, 150, 150, now))
			if isr := l.Propose(now, time.Hour, 100, nil); !slices.Equal(isr, c.wantPropose) {
				t.Fatalf("next proposal %v, want %v", isr, c.wantPropose)
			}
		})
	}
}

// KIP-903: a follower joins the ISR only on the word of a fetch from the
// incarnation the controller has registered, not on the position its
// previous life reached.
func TestFollowerJoinsOnlyAtItsRegisteredBrokerEpoch(t *testing.T) {
	registered := int64(7)
	eligible := func(id int32, epoch int64) bool { return epoch == registered }
	l := NewLeader(1, []int32{1, 2}, []int32{1}, 0, t0)
	must(t, l.Fetched(2, 5, 100, 100, t0)) // the previous life, caught up
	if isr := l.Propose(t0, time.Minute, 100, eligible); isr != nil {
		t.Fatalf("proposed %v on a previous incarnation's fetch", isr)
	}
	// The new incarnation is behind: its predecessor's fetches do not
	// vouch for it.
	must(t, l.Fetched(2, 7, 100, 120, t0.Add(time.Second)))
	if isr := l.Propose(t0.Add(time.Second), time.Minute, 120, eligible); isr != nil {
		t.Fatalf("proposed %v for a new incarnation behind the high watermark", isr)
	}
	must(t, l.Fetched(2, 7, 120, 120, t0.Add(2*time.Second)))
	if isr := l.Propose(t0.Add(2*time.Second), time.Minute, 120, eligible); !slices.Equal(isr, []int32{1, 2}) {
		t.Fatalf("proposed %v, want [1 2]", isr)
	}
}
