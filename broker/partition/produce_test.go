package partition

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// WaitCommitted answers an acks=all wait once the high watermark passes
// the record, and trusts the high watermark only while this node still
// leads at the epoch the record was appended in.
func TestWaitCommitted(t *testing.T) {
	cases := []struct {
		name string
		// before runs before the wait, then while it waits.
		before, then func(p *Partition, n *node, cancel context.CancelFunc)
		want         error
	}{
		{
			name:   "already committed",
			before: func(p *Partition, _ *node, _ context.CancelFunc) { must(t, p.ReplicaFetched(2, -1, 5)) },
		},
		{
			name: "the high watermark passes the offset",
			then: func(p *Partition, _ *node, _ context.CancelFunc) { must(t, p.ReplicaFetched(2, -1, 5)) },
		},
		{
			name: "the high watermark reaches the last record but does not pass it",
			then: func(p *Partition, _ *node, cancel context.CancelFunc) {
				must(t, p.ReplicaFetched(2, -1, 4))
				// Time for a wait that took 4 for committed to say so.
				time.Sleep(20 * time.Millisecond)
				cancel()
			},
			want: kerr.RequestTimedOut,
		},
		{
			name: "the ISR shrinks to the leader",
			then: func(p *Partition, _ *node, _ context.CancelFunc) {
				p.SetRole(Role{LeaderEpoch: 0, Leader: self, Replicas: []int32{1, 2}, ISR: []int32{1}, PartitionEpoch: 2})
			},
		},
		{
			name: "leadership moves to another node",
			then: func(p *Partition, _ *node, _ context.CancelFunc) { p.SetRole(followerOf(2, 1)) },
			want: kerr.NotLeaderForPartition,
		},
		{
			name: "this node leads again, at a newer epoch",
			then: func(p *Partition, _ *node, _ context.CancelFunc) {
				p.SetRole(leader(1, []int32{1}, []int32{1}))
			},
			want: kerr.NotLeaderForPartition,
		},
		{
			name: "the partition stops",
			then: func(p *Partition, _ *node, _ context.CancelFunc) { p.Stop() },
			want: kerr.NotLeaderForPartition,
		},
		{
			name: "the request's time runs out",
			then: func(_ *Partition, _ *node, cancel context.CancelFunc) { cancel() },
			want: kerr.RequestTimedOut,
		},
		{
			name: "the node closes",
			then: func(_ *Partition, n *node, _ context.CancelFunc) { n.stop() },
			want: ErrClosed,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			p := n.open(t)
			p.SetRole(leader(0, []int32{1, 2}, []int32{1, 2}))
			info, epoch, err := p.Append(batch("a", "b", "c", "d", "e"))
			must(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if c.before != nil {
				c.before(p, n, cancel)
			}
			done := make(chan error, 1)
			go func() { done <- p.WaitCommitted(ctx, info.LastOffset, epoch) }()
			if c.then != nil {
				eventually(t, "the wait", func() bool { return p.Waiters() == 1 })
				c.then(p, n, cancel)
			}
			select {
			case err := <-done:
				if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
					t.Fatalf("WaitCommitted: %v, want %v", err, c.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("WaitCommitted still waiting, want %v", c.want)
			}
			if w := p.Waiters(); w != 0 {
				t.Fatalf("%d waiters left behind", w)
			}
		})
	}
}

// Produce appends, and for acks=all waits for the ISR; a part whose ISR
// shrank below min.insync.replicas meanwhile is told so
// (NOT_ENOUGH_REPLICAS_AFTER_APPEND), though its records are in.
func TestProduce(t *testing.T) {
	cases := []struct {
		name    string
		minISR  int
		role    Role
		acksAll bool
		preErr  error // the part arrives refused already
		// then, if set, runs once the produce waits for the ISR.
		then         func(p *Partition)
		wantErr      error
		wantAppended bool
		wantEnd      int64 // the log end after
	}{
		{
			name: "acks=1 does not wait for the ISR", minISR: 1,
			role:         leader(0, []int32{1, 2}, []int32{1, 2}),
			wantAppended: true, wantEnd: 3,
		},
		{
			name: "acks=all on a lone leader", minISR: 1, acksAll: true,
			role:         leader(0, []int32{1}, []int32{1}),
			wantAppended: true, wantEnd: 3,
		},
		{
			name: "acks=all waits for the follower", minISR: 2, acksAll: true,
			role:         leader(0, []int32{1, 2}, []int32{1, 2}),
			then:         func(p *Partition) { must(t, p.ReplicaFetched(2, -1, 3)) },
			wantAppended: true, wantEnd: 3,
		},
		{
			name: "the ISR shrinks below min.insync.replicas after the append", minISR: 2, acksAll: true,
			role: leader(0, []int32{1, 2}, []int32{1, 2}),
			then: func(p *Partition) {
				p.SetRole(Role{LeaderEpoch: 0, Leader: self, Replicas: []int32{1, 2}, ISR: []int32{1}, PartitionEpoch: 2})
			},
			wantErr: kerr.NotEnoughReplicasAfterAppend, wantAppended: true, wantEnd: 3,
		},
		{
			name: "the leader is deposed before the ISR has the records", minISR: 1, acksAll: true,
			role:    leader(0, []int32{1, 2}, []int32{1, 2}),
			then:    func(p *Partition) { p.SetRole(followerOf(2, 1)) },
			wantErr: kerr.NotLeaderForPartition, wantAppended: true, wantEnd: 3,
		},
		{
			name: "a follower takes no produce", minISR: 1, acksAll: true,
			role:    followerOf(2, 0),
			wantErr: ErrNotLeader,
		},
		{
			name: "a part refused already is left alone", minISR: 1, acksAll: true,
			role:    leader(0, []int32{1}, []int32{1}),
			preErr:  kerr.InvalidTopicException,
			wantErr: kerr.InvalidTopicException,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			p := n.openWith(t, &Settings{MinISR: c.minISR})
			p.SetRole(c.role)
			a := &Append{P: p, Records: batch("a", "b", "c"), Err: c.preErr}
			done := make(chan struct{})
			go func() {
				defer close(done)
				Produce(t.Context(), []*Append{a}, c.acksAll, time.Minute)
			}()
			if c.then != nil {
				eventually(t, "the acks=all wait", func() bool { return p.Waiters() == 1 })
				c.then(p)
			}
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Produce still waiting")
			}
			if c.wantErr == nil && a.Err != nil || c.wantErr != nil && !errors.Is(a.Err, c.wantErr) {
				t.Fatalf("part error %v, want %v", a.Err, c.wantErr)
			}
			if a.Appended != c.wantAppended || p.Log().EndOffset() != c.wantEnd {
				t.Fatalf("appended %v, log end %d; want %v, %d", a.Appended, p.Log().EndOffset(), c.wantAppended, c.wantEnd)
			}
			if a.Appended && (a.Info.BaseOffset != 0 || a.Info.LastOffset != 2) {
				t.Fatalf("append info %+v, want offsets 0 to 2", a.Info)
			}
		})
	}
}

// Every part of an acks=all produce waits against the request's one
// deadline, and each is answered on its own.
func TestProduceAnswersEachPart(t *testing.T) {
	n := newNode(t)
	alone, waiting, following := n.open(t), n.open(t), n.open(t)
	alone.SetRole(leader(0, []int32{1}, []int32{1}))
	waiting.SetRole(leader(0, []int32{1, 2}, []int32{1, 2}))
	following.SetRole(followerOf(2, 0))
	parts := []*Append{{P: waiting, Records: batch("a")}, {P: alone, Records: batch("b")}, {P: following, Records: batch("c")}}
	Produce(t.Context(), parts, true, 50*time.Millisecond)
	for i, want := range []error{kerr.RequestTimedOut, nil, ErrNotLeader} {
		if a := parts[i]; want == nil && a.Err != nil || want != nil && !errors.Is(a.Err, want) {
			t.Errorf("part %d: %v, want %v", i, a.Err, want)
		}
	}
	if !parts[0].Appended || !parts[1].Appended || parts[2].Appended {
		t.Errorf("appended %v %v %v, want true true false", parts[0].Appended, parts[1].Appended, parts[2].Appended)
	}
}

// A produce is checked before it appends: acks=all needs an ISR of at
// least min.insync.replicas, and a client may not write to an internal
// topic.
func TestProduceChecks(t *testing.T) {
	cases := []struct {
		name        string
		settings    Settings
		isr         []int32
		wantISR     error
		wantClientW error
	}{
		{name: "ISR at min.insync.replicas", settings: Settings{MinISR: 2}, isr: []int32{1, 2}},
		{name: "ISR above min.insync.replicas", settings: Settings{MinISR: 1}, isr: []int32{1, 2}},
		{name: "ISR below min.insync.replicas", settings: Settings{MinISR: 2}, isr: []int32{1}, wantISR: kerr.NotEnoughReplicas},
		{name: "internal topic", settings: Settings{MinISR: 1, Internal: true}, isr: []int32{1}, wantClientW: kerr.InvalidTopicException},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			p := n.openWith(t, &c.settings)
			p.SetRole(leader(0, []int32{1, 2}, c.isr))
			if err := p.CheckISR(); c.wantISR == nil && err != nil || c.wantISR != nil && !errors.Is(err, c.wantISR) {
				t.Errorf("CheckISR: %v, want %v", err, c.wantISR)
			}
			if err := p.CheckClientWrite(); c.wantClientW == nil && err != nil || c.wantClientW != nil && !errors.Is(err, c.wantClientW) {
				t.Errorf("CheckClientWrite: %v, want %v", err, c.wantClientW)
			}
		})
	}
}

// A follower's fetch held on two partitions hears of a produce to both
// only once both are appended, and copies both in one answer: woken by
// the first append, it would copy that partition alone, and the acks=all
// answer would wait for a second fetch round trip. The second part is
// large, so its validation takes a while after the first is appended.
func TestProduceWakesFollowersOnce(t *testing.T) {
	n := newNode(t)
	p1, p2 := n.open(t), n.open(t)
	for _, p := range []*Partition{p1, p2} {
		p.SetRole(leader(0, []int32{1, 2}, []int32{1, 2}))
	}
	many := make([]string, 20000)
	for i := range many {
		many[i] = fmt.Sprintf("record %d of a large batch", i)
	}
	for round := range 5 {
		at1, at2 := p1.Log().EndOffset(), p2.Log().EndOffset()
		fp1, fp2 := NewFetchPart(p1, at1, 4<<20, true, false), NewFetchPart(p2, at2, 4<<20, true, false)
		must(t, fp1.FollowerFetch(2, 7, -1))
		must(t, fp2.FollowerFetch(2, 7, -1))
		parts := []*FetchPart{&fp1, &fp2}
		got := make(chan [][]int64, 1)
		go func() { got <- fetch(t, t.Context(), parts, 8<<20, 1, 10*time.Second) }()
		eventually(t, "the held fetch", func() bool { return p2.Waiters() == 1 })
		Produce(t.Context(), []*Append{{P: p1, Records: batch("a")}, {P: p2, Records: batch(many...)}}, false, time.Minute)
		select {
		case g := <-got:
			if len(g[0]) != 1 || len(g[1]) != 1 {
				t.Fatalf("round %d: the held fetch answered with batches %v and %v, want one of each partition", round, g[0], g[1])
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: the held fetch was not answered", round)
		}
	}
}

// An append wakes the followers' held fetches, not the acks=all produces
// or consumers waiting for the high watermark; a high watermark moved by
// a follower's fetch wakes those, not the followers' fetches. Wake, for a
// change of role, wakes all.
func TestWaitersHearWhatTheyWaitFor(t *testing.T) {
	n := newNode(t)
	p := n.open(t)
	p.SetRole(leader(0, []int32{1, 2, 3}, []int32{1, 2, 3}))
	hw, logEnd := make(chan struct{}, 1), make(chan struct{}, 1)
	p.AddWaiter(hw)
	p.AddLogEndWaiter(logEnd)
	defer p.RemoveWaiter(hw)
	defer p.RemoveWaiter(logEnd)
	heard := func(w chan struct{}) bool {
		select {
		case <-w:
			return true
		default:
			return false
		}
	}
	Produce(t.Context(), []*Append{{P: p, Records: batch("a", "b")}}, false, time.Minute)
	if !heard(logEnd) || heard(hw) {
		t.Fatal("an append the ISR does not have yet: want the log-end waiter woken, not the high-watermark one")
	}
	must(t, p.ReplicaFetched(2, -1, 2)) // the high watermark waits for 3 too
	if heard(logEnd) || heard(hw) {
		t.Fatal("a follower's fetch that moved nothing woke a waiter")
	}
	must(t, p.ReplicaFetched(3, -1, 2))
	if p.HighWatermark() != 2 || !heard(hw) || heard(logEnd) {
		t.Fatalf("high watermark %d: want 2, its waiter woken and the log-end one not", p.HighWatermark())
	}
	p.Wake()
	if !heard(hw) || !heard(logEnd) {
		t.Fatal("Wake did not wake both")
	}
}
