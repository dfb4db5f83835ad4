package partition

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/broker/replica"
	"strata/meta"
)

// lagged leads t-0 over replicas 1, 2 and 3, all in the ISR, with
// replica.lag.time.max lag, and lets more than lag pass; then follower 2
// fetches at the log end and follower 3 never does. The fetch is what
// makes the leader look at its ISR (ReplicaFetched calls MaybeAlterISR
// at the fetch's time, when 2 is caught up and 3 has not been for longer
// than lag): the proposal is [1 2].
//
// The wait is real time: ReplicaFetched and SetRole read the clock
// themselves. It is bounded below only, so the outcome does not depend on
// how long the machine takes.
func lagged(t *testing.T, n *node) *Partition {
	t.Helper()
	const lag = 50 * time.Millisecond
	n.host.ReplicaLagTimeMax = lag
	p := n.open(t, batch("a", "b", "c"), batch("d", "e"))
	p.SetRole(leader(0, []int32{1, 2, 3}, []int32{1, 2, 3}))
	time.Sleep(lag + 10*time.Millisecond)
	return p
}

// A follower that has not caught up for longer than
// replica.lag.time.max leaves the ISR: the leader asks the controller,
// naming each member's broker epoch (KIP-903), counts the shrink for the
// high watermark only once committed, and applies the answer.
func TestLaggingFollowerIsProposedOutOfTheISR(t *testing.T) {
	n := newNode(t)
	p := lagged(t, n)
	release := make(chan struct{})
	n.cluster.setAnswer(func(r meta.AlterPartitionRequest) (meta.Partition, error) {
		<-release
		return meta.Partition{ISR: r.ISR, PartitionEpoch: r.PartitionEpoch + 1, Leader: self, LeaderEpoch: r.LeaderEpoch}, nil
	})
	must(t, p.ReplicaFetched(2, 7, 5))

	eventually(t, "the AlterPartition", func() bool { return len(n.cluster.requests()) == 1 })
	want := meta.AlterPartitionRequest{
		Topic: "t", Partition: 0, BrokerID: self, BrokerEpoch: 42, LeaderEpoch: 0, PartitionEpoch: 1,
		ISR: []int32{1, 2}, ISREpochs: []int64{42, 7},
	}
	if got := n.cluster.requests()[0]; !equalAlter(got, want) {
		t.Fatalf("AlterPartition %+v, want %+v", got, want)
	}
	// In flight: the shrink does not count yet, and is not asked twice.
	if hw := p.HighWatermark(); hw != 0 {
		t.Fatalf("high watermark %d while the shrink is in flight, want 0 (3 still counts)", hw)
	}
	must(t, p.ReplicaFetched(2, 7, 5))
	if r := n.cluster.requests(); len(r) != 1 {
		t.Fatalf("%d AlterPartitions with one in flight, want 1", len(r))
	}

	close(release)
	n.idle()
	if isr, pe, hw := p.ISRSize(), p.PartitionEpoch(), p.HighWatermark(); isr != 2 || pe != 2 || hw != 5 {
		t.Fatalf("after the answer: ISR size %d, partition epoch %d, high watermark %d; want 2, 2, 5", isr, pe, hw)
	}
	if c := n.isrChanged(); len(c) != 1 || !slices.Equal(c[0].from, []int32{1, 2, 3}) || !slices.Equal(c[0].to, []int32{1, 2}) {
		t.Fatalf("ISR changes counted %v, want one, [1 2 3] to [1 2]", c)
	}
	// The metadata then brings what the answer did: nothing new.
	p.SetRole(Role{LeaderEpoch: 0, Leader: self, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}, PartitionEpoch: 2})
	if c := n.isrChanged(); len(c) != 1 {
		t.Fatalf("the metadata repeating the answer counted another ISR change: %v", c)
	}
}

// The metadata may bring the change before the controller's answer does:
// the answer is then no news, and is neither applied again nor counted
// twice.
func TestAlterPartitionAnswerAfterTheMetadataIsNoNews(t *testing.T) {
	n := newNode(t)
	p := lagged(t, n)
	release := make(chan struct{})
	n.cluster.setAnswer(func(r meta.AlterPartitionRequest) (meta.Partition, error) {
		<-release
		return meta.Partition{ISR: r.ISR, PartitionEpoch: r.PartitionEpoch + 1}, nil
	})
	must(t, p.ReplicaFetched(2, 7, 5))
	eventually(t, "the AlterPartition", func() bool { return len(n.cluster.requests()) == 1 })
	p.SetRole(Role{LeaderEpoch: 0, Leader: self, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}, PartitionEpoch: 2})
	if hw := p.HighWatermark(); hw != 5 {
		t.Fatalf("high watermark %d once the metadata shows the shrink, want 5", hw)
	}
	close(release)
	n.idle()
	if c := n.isrChanged(); len(c) != 1 {
		t.Fatalf("ISR changes counted %v, want the metadata's one", c)
	}
	if pe := p.PartitionEpoch(); pe != 2 {
		t.Fatalf("partition epoch %d, want 2", pe)
	}
}

// An AlterPartition that was not committed leaves the ISR as it was; what
// happens next depends on what the answer says of the change
// (AlterOutcome, Kafka's Partition.handleAlterPartitionError): refused at
// this partition epoch, the next fetch proposes afresh; the controller
// having moved on, the leader waits for the metadata; no answer, it asks
// again, unchanged.
func TestFailedAlterPartition(t *testing.T) {
	cases := []struct {
		name string
		err  error
		// resend: the next follower fetch sends the change again.
		resend bool
	}{
		{name: "meta.ErrIneligibleReplica", err: fmt.Errorf("%w: broker 2 is fenced", meta.ErrIneligibleReplica), resend: true},
		{name: "INELIGIBLE_REPLICA", err: kerr.IneligibleReplica, resend: true},
		{name: "OPERATION_NOT_ATTEMPTED", err: kerr.OperationNotAttempted, resend: true},
		{name: "meta.ErrInvalidUpdateVersion", err: fmt.Errorf("%w: partition epoch 1, current 2", meta.ErrInvalidUpdateVersion)},
		{name: "INVALID_UPDATE_VERSION", err: kerr.InvalidUpdateVersion},
		{name: "FENCED_LEADER_EPOCH", err: kerr.FencedLeaderEpoch},
		{name: "meta.ErrFencedLeaderEpoch", err: meta.ErrFencedLeaderEpoch},
		{name: "UNKNOWN_TOPIC_OR_PARTITION", err: kerr.UnknownTopicOrPartition},
		{name: "a timeout", err: context.DeadlineExceeded, resend: true},
		{name: "meta.ErrOutcomeUnknown", err: fmt.Errorf("commit: %w", meta.ErrOutcomeUnknown), resend: true},
		{name: "NOT_CONTROLLER", err: kerr.NotController, resend: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			p := lagged(t, n)
			n.cluster.setAnswer(func(meta.AlterPartitionRequest) (meta.Partition, error) {
				return meta.Partition{}, c.err
			})
			must(t, p.ReplicaFetched(2, 7, 5))
			n.idle()
			if isr, pe, hw := p.ISRSize(), p.PartitionEpoch(), p.HighWatermark(); isr != 3 || pe != 1 || hw != 0 {
				t.Fatalf("after %v: ISR size %d, partition epoch %d, high watermark %d; want 3, 1, 0", c.err, isr, pe, hw)
			}
			must(t, p.ReplicaFetched(2, 7, 5))
			n.idle()
			reqs := n.cluster.requests()
			if want := map[bool]int{false: 1, true: 2}[c.resend]; len(reqs) != want {
				t.Fatalf("%d AlterPartitions after %v and another fetch, want %d", len(reqs), c.err, want)
			}
			if c.resend && !equalAlter(reqs[1], reqs[0]) {
				t.Fatalf("asked again for %+v, want the same %+v", reqs[1], reqs[0])
			}
			// Whatever the answer, the metadata ends the change.
			p.SetRole(Role{LeaderEpoch: 0, Leader: self, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2}, PartitionEpoch: 2})
			if hw := p.HighWatermark(); hw != 5 {
				t.Fatalf("high watermark %d once the metadata shows the shrink, want 5", hw)
			}
			before := len(n.cluster.requests())
			must(t, p.ReplicaFetched(2, 7, 5))
			n.idle()
			if r := n.cluster.requests(); len(r) != before {
				t.Fatalf("an AlterPartition %+v once the metadata showed the change", r[len(r)-1])
			}
		})
	}
}

// AlterOutcome reads the controller's answer in both of its forms: the
// metadata store's errors in-process, Kafka's codes over the wire.
func TestAlterOutcome(t *testing.T) {
	cases := []struct {
		err  error
		want replica.Outcome
	}{
		{kerr.IneligibleReplica, replica.NotApplied},
		{meta.ErrIneligibleReplica, replica.NotApplied},
		{fmt.Errorf("%w: broker 3 is shutting down", meta.ErrIneligibleReplica), replica.NotApplied},
		{kerr.OperationNotAttempted, replica.NotApplied},
		{kerr.FencedLeaderEpoch, replica.AwaitMetadata},
		{meta.ErrFencedLeaderEpoch, replica.AwaitMetadata},
		{kerr.InvalidUpdateVersion, replica.AwaitMetadata},
		{meta.ErrInvalidUpdateVersion, replica.AwaitMetadata},
		{fmt.Errorf("t-0: %w", meta.ErrInvalidUpdateVersion), replica.AwaitMetadata},
		{kerr.UnknownTopicOrPartition, replica.AwaitMetadata},
		{meta.ErrUnknownTopic, replica.AwaitMetadata},
		{meta.ErrUnknownTopicOrPartition, replica.AwaitMetadata},
		{kerr.UnknownTopicID, replica.AwaitMetadata},
		{meta.ErrOutcomeUnknown, replica.Unknown},
		// The controller losing its raft leadership mid-commit: whatever
		// else the error says, the change may have been applied.
		{fmt.Errorf("%w: %w", meta.ErrOutcomeUnknown, meta.ErrFencedLeaderEpoch), replica.Unknown},
		{fmt.Errorf("%w: %w", meta.ErrOutcomeUnknown, kerr.IneligibleReplica), replica.Unknown},
		{context.DeadlineExceeded, replica.Unknown},
		{context.Canceled, replica.Unknown},
		{kerr.NotController, replica.Unknown},
		{kerr.RequestTimedOut, replica.Unknown},
		{errors.New("connection reset"), replica.Unknown},
	}
	for _, c := range cases {
		if got := AlterOutcome(c.err); got != c.want {
			t.Errorf("AlterOutcome(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// A follower out of the ISR that has everything below the high watermark
// joins it, on the word of the incarnation its fetches named, if the
// metadata says the controller would take it (KIP-903). While the
// expansion is in flight the joiner already counts for the high
// watermark (the maximal ISR of KIP-841), so that it never moves back.
func TestCaughtUpFollowerJoinsTheISR(t *testing.T) {
	cases := []struct {
		name     string
		eligible func(id int32, epoch int64) bool
		want     []int32 // the ISR proposed, nil for none
	}{
		{name: "eligible", eligible: func(int32, int64) bool { return true }, want: []int32{1, 2, 3}},
		{name: "fenced", eligible: func(id int32, _ int64) bool { return id != 3 }},
		{name: "another incarnation", eligible: func(id int32, epoch int64) bool { return id != 3 || epoch == 10 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			n.cluster.eligible = c.eligible
			release := make(chan struct{})
			n.cluster.setAnswer(func(r meta.AlterPartitionRequest) (meta.Partition, error) {
				<-release
				return meta.Partition{ISR: r.ISR, PartitionEpoch: r.PartitionEpoch + 1}, nil
			})
			defer close(release)
			p := n.open(t, batch("a", "b", "c"), batch("d", "e"))
			p.SetRole(leader(0, []int32{1, 2, 3}, []int32{1, 2}))
			must(t, p.ReplicaFetched(2, 7, 5))
			if hw := p.HighWatermark(); hw != 5 {
				t.Fatalf("high watermark %d, want 5", hw)
			}
			must(t, p.ReplicaFetched(3, 9, 5))
			if c.want == nil {
				n.idle()
				if r := n.cluster.requests(); len(r) != 0 {
					t.Fatalf("proposed %+v, want nothing", r)
				}
				return
			}
			eventually(t, "the AlterPartition", func() bool { return len(n.cluster.requests()) == 1 })
			want := meta.AlterPartitionRequest{
				Topic: "t", Partition: 0, BrokerID: self, BrokerEpoch: 42, LeaderEpoch: 0, PartitionEpoch: 1,
				ISR: c.want, ISREpochs: []int64{42, 7, 9},
			}
			if got := n.cluster.requests()[0]; !equalAlter(got, want) {
				t.Fatalf("AlterPartition %+v, want %+v", got, want)
			}
			mustAppend(t, p, batch("f", "g"))
			must(t, p.ReplicaFetched(2, 7, 7))
			if hw := p.HighWatermark(); hw != 5 {
				t.Fatalf("high watermark %d with the joiner at 5 in flight, want 5", hw)
			}
		})
	}
}

func equalAlter(a, b meta.AlterPartitionRequest) bool {
	return a.Topic == b.Topic && a.Partition == b.Partition && a.BrokerID == b.BrokerID && a.BrokerEpoch == b.BrokerEpoch &&
		a.LeaderEpoch == b.LeaderEpoch && a.PartitionEpoch == b.PartitionEpoch &&
		slices.Equal(a.ISR, b.ISR) && slices.Equal(a.ISREpochs, b.ISREpochs)
}
