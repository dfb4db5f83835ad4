package partition

import (
	"errors"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/broker/replica"
)

// SetRole brings a partition in line with the metadata
// (docs/replication.md): leadership moves only with a new leader epoch,
// a newer partition epoch at the same leader epoch brings only an ISR
// change, and every change of role wakes the partition's waiters.
func TestSetRoleTransitions(t *testing.T) {
	type want struct {
		leading        bool
		follows        []int32 // the leaders Fetchers.Follow was called with
		unfollows      int
		hw             int64
		isr            int
		partitionEpoch int32
		epochStart     int64
		elections      float64 // LeaderElections counted by the transition
		isrChanges     []isrChange
		woken          bool
	}
	cases := []struct {
		name   string
		before []Role
		// hw, unless 0, is the high watermark the partition holds before
		// next: one above its log end, to show the clamp.
		hw   int64
		next Role
		want want
	}{
		{
			name: "a new partition leads alone: the high watermark is its log end",
			next: leader(0, []int32{1}, []int32{1}),
			want: want{leading: true, unfollows: 1, hw: 5, isr: 1, partitionEpoch: 1, epochStart: 5, elections: 1, woken: true},
		},
		{
			name: "a new leader's high watermark waits for its ISR",
			next: leader(0, []int32{1, 2}, []int32{1, 2}),
			want: want{leading: true, unfollows: 1, hw: 0, isr: 2, partitionEpoch: 1, epochStart: 5, elections: 1, woken: true},
		},
		{
			name:   "a leader becomes a follower: it fetches from the new leader",
			before: []Role{leader(0, []int32{1, 2}, []int32{1, 2})},
			next:   followerOf(2, 1),
			want:   want{follows: []int32{2}, unfollows: 1, hw: 0, isr: 2, partitionEpoch: 1, epochStart: -1, woken: true},
		},
		{
			name:   "a follower becomes the leader: it stops fetching and clamps its high watermark to its log end",
			before: []Role{followerOf(2, 0)},
			hw:     100,
			next:   leader(1, []int32{1, 2}, []int32{1, 2}),
			want:   want{leading: true, unfollows: 1, hw: 5, isr: 2, partitionEpoch: 1, epochStart: 5, elections: 1, woken: true},
		},
		{
			name:   "a follower follows a new leader",
			before: []Role{followerOf(2, 0)},
			next:   followerOf(3, 1),
			want:   want{follows: []int32{3}, unfollows: 1, hw: 0, isr: 2, partitionEpoch: 1, epochStart: -1, woken: true},
		},
		{
			name:   "a partition without a leader is neither led nor followed",
			before: []Role{followerOf(2, 0)},
			next:   Role{LeaderEpoch: 1, Leader: -1, Replicas: []int32{1, 2}, ISR: []int32{1}, PartitionEpoch: 2},
			want:   want{unfollows: 1, hw: 0, isr: 1, partitionEpoch: 2, epochStart: -1, woken: true},
		},
		{
			name:   "a newer partition epoch at the same leader epoch takes in the ISR, and a smaller ISR moves the high watermark",
			before: []Role{leader(0, []int32{1, 2}, []int32{1, 2})},
			next:   Role{LeaderEpoch: 0, Leader: self, Replicas: []int32{1, 2}, ISR: []int32{1}, PartitionEpoch: 2},
			want: want{leading: true, hw: 5, isr: 1, partitionEpoch: 2, epochStart: 5, woken: true,
				isrChanges: []isrChange{{from: []int32{1, 2}, to: []int32{1}}}},
		},
		{
			name:   "the same role again changes nothing",
			before: []Role{leader(0, []int32{1, 2}, []int32{1, 2})},
			next:   leader(0, []int32{1, 2}, []int32{1, 2}),
			want:   want{leading: true, hw: 0, isr: 2, partitionEpoch: 1, epochStart: 5},
		},
		{
			name:   "an older partition epoch is ignored",
			before: []Role{{LeaderEpoch: 0, Leader: self, Replicas: []int32{1, 2}, ISR: []int32{1}, PartitionEpoch: 3}},
			next:   Role{LeaderEpoch: 0, Leader: self, Replicas: []int32{1, 2}, ISR: []int32{1, 2}, PartitionEpoch: 2},
			want:   want{leading: true, hw: 5, isr: 1, partitionEpoch: 3, epochStart: 5},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			p := n.open(t, batch("a", "b", "c"), batch("d", "e"))
			for _, r := range c.before {
				p.SetRole(r)
			}
			if c.hw != 0 {
				p.hw.Store(c.hw)
			}
			n.fetchers.reset()
			elections := n.leaderElections()
			changes := len(n.isrChanged())
			w := make(chan struct{}, 1)
			p.AddWaiter(w)
			defer p.RemoveWaiter(w)

			p.SetRole(c.next)

			follows, unfollows := n.fetchers.reset()
			var leaders []int32
			for _, f := range follows {
				leaders = append(leaders, f.leader)
				if f.p.Topic != "t" || f.p.Index != 0 || f.p.TopicID != p.TopicID() || f.p.LeaderEpoch != c.next.LeaderEpoch {
					t.Errorf("followed %s-%d (topic id %x) at epoch %d, want t-0 (%x) at %d", f.p.Topic, f.p.Index, f.p.TopicID, f.p.LeaderEpoch, p.TopicID(), c.next.LeaderEpoch)
				}
				if f.p.Lock != &p.appendMu || f.p.Log == nil || f.p.Fetched == nil || f.p.LogStartBound == nil {
					t.Errorf("followed without the partition's lock, log, Fetched or LogStartBound: %+v", f.p)
				}
				if f.p.HistoryBelow != nil {
					t.Errorf("followed with a HistoryBelow, without a bucket")
				}
			}
			got := want{
				leading: p.Leading(), follows: leaders, unfollows: len(unfollows), hw: p.HighWatermark(),
				isr: p.ISRSize(), partitionEpoch: p.PartitionEpoch(), epochStart: p.EpochStart(),
				elections: n.leaderElections() - elections, isrChanges: n.isrChanged()[changes:], woken: woken(w),
			}
			if got.leading != c.want.leading || !slices.Equal(got.follows, c.want.follows) || got.unfollows != c.want.unfollows ||
				got.hw != c.want.hw || got.isr != c.want.isr || got.partitionEpoch != c.want.partitionEpoch ||
				got.epochStart != c.want.epochStart || got.elections != c.want.elections || got.woken != c.want.woken ||
				!slices.EqualFunc(got.isrChanges, c.want.isrChanges, func(a, b isrChange) bool {
					return slices.Equal(a.from, b.from) && slices.Equal(a.to, b.to)
				}) {
				t.Errorf("after SetRole(%+v):\n got %+v\nwant %+v", c.next, got, c.want)
			}
			for _, k := range unfollows {
				if k != (replica.Key{Topic: "t", Index: 0}) {
					t.Errorf("unfollowed %+v, want t-0", k)
				}
			}
			if e := p.LeaderEpoch(); e != max(c.next.LeaderEpoch, 0) {
				t.Errorf("leader epoch %d, want %d", e, c.next.LeaderEpoch)
			}
			// Appends go to the leader only.
			_, _, err := p.Append(batch("x"))
			if c.want.leading != (err == nil) || (err != nil && !errors.Is(err, ErrNotLeader)) {
				t.Errorf("append while leading=%v: %v", c.want.leading, err)
			}
		})
	}
}

// A verification of a producer's transaction (KIP-890 part 1) stands only
// within the leadership that started it: the answer a deposed leader's
// question gets says nothing of a transaction the new leadership may
// already have seen ended. A marker, too, voids the verifications that
// came before it.
func TestTxnVerificationGuards(t *testing.T) {
	const pid, pepoch = int64(7), int16(0)
	cases := []struct {
		name string
		// between runs after StartTxnVerification, before the append.
		between func(t *testing.T, p *Partition, g *Guard)
		guard   bool // the append presents the guard (else none)
		wantErr error
	}{
		{name: "the guard that was started lets the first batch in", guard: true},
		{name: "no guard and no ongoing transaction", wantErr: kerr.InvalidTxnState},
		{
			name:    "a leader epoch bump voids the guard",
			between: func(t *testing.T, p *Partition, _ *Guard) { p.SetRole(leader(1, []int32{1}, []int32{1})) },
			guard:   true, wantErr: kerr.InvalidTxnState,
		},
		{
			name: "a marker voids the guard",
			between: func(t *testing.T, p *Partition, _ *Guard) {
				if _, _, err := p.AppendMarker(pid, pepoch, false, 0); err != nil {
					t.Fatal(err)
				}
			},
			guard: true, wantErr: kerr.InvalidTxnState,
		},
		{
			name:    "a dropped verification's guard is void",
			between: func(t *testing.T, p *Partition, g *Guard) { p.DropTxnVerification(pid, g) },
			guard:   true, wantErr: kerr.InvalidTxnState,
		},
		{
			name: "the new leadership's own verification is a new guard",
			between: func(t *testing.T, p *Partition, g *Guard) {
				p.SetRole(leader(1, []int32{1}, []int32{1}))
				g2, err := p.StartTxnVerification(pid, pepoch)
				if err != nil || g2 == nil || g2 == g {
					t.Fatalf("verification after the epoch bump: guard %p (old %p), %v; want a new one", g2, g, err)
				}
			},
			guard: true, wantErr: kerr.InvalidTxnState,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			p := n.open(t)
			p.SetRole(leader(0, []int32{1}, []int32{1}))
			g, err := p.StartTxnVerification(pid, pepoch)
			if err != nil || g == nil {
				t.Fatalf("StartTxnVerification: guard %v, %v; want a guard", g, err)
			}
			if again, _ := p.StartTxnVerification(pid, pepoch); again != g {
				t.Fatalf("a second verification under way got another guard: pipelined requests must share one")
			}
			if c.between != nil {
				c.between(t, p, g)
			}
			tx := &TxnAppend{PID: pid, Epoch: pepoch}
			if c.guard {
				tx.Guard = g
			}
			_, _, err = p.AppendTxn(txnBatch(pid, pepoch, 0, "v"), tx)
			if c.wantErr == nil && err != nil || c.wantErr != nil && !errors.Is(err, c.wantErr) {
				t.Fatalf("AppendTxn: %v, want %v", err, c.wantErr)
			}
			if err == nil {
				// Ongoing now: later batches join without a guard.
				if g, err := p.StartTxnVerification(pid, pepoch); g != nil || err != nil {
					t.Fatalf("verification of an ongoing transaction: guard %v, %v; want none", g, err)
				}
				if _, _, err := p.AppendTxn(txnBatch(pid, pepoch, 1, "w"), &TxnAppend{PID: pid, Epoch: pepoch}); err != nil {
					t.Fatalf("second batch of the ongoing transaction: %v", err)
				}
			}
			if v := p.Verifications(); v > 1 {
				t.Fatalf("%d verifications under way, want at most 1", v)
			}
		})
	}
}

func TestTxnVerificationOnAFollowerIsNotLeader(t *testing.T) {
	n := newNode(t)
	p := n.open(t)
	p.SetRole(followerOf(2, 0))
	if _, err := p.StartTxnVerification(7, 0); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("StartTxnVerification on a follower: %v, want ErrNotLeader", err)
	}
}
