package meta

import (
	"errors"
	"slices"
	"testing"
)

// KIP-497 AlterPartition: the partition leader asks, the controller
// checks every condition against the state the request is ordered after
// in the raft log, so that of two racing requests the second is refused.
func TestAlterPartition(t *testing.T) {
	h := newHarness(t)
	e1 := h.register(1, "a")
	e2 := h.register(2, "a")
	h.register(3, "a")
	h.register(4, "a")
	h.must(kindCreateTopic, topicCmd("t", 1, 1, 3)) // replicas [1 2 3], leader 1
	req := func(mod func(r *AlterPartitionRequest)) alterPartitionCmd {
		r := AlterPartitionRequest{Topic: "t", Partition: 0, BrokerID: 1, BrokerEpoch: e1, LeaderEpoch: 0, PartitionEpoch: 0, ISR: []int32{1, 3}}
		if mod != nil {
			mod(&r)
		}
		return alterPartitionCmd(r)
	}
	refusals := []struct {
		name string
		want error
		mod  func(r *AlterPartitionRequest)
	}{
		{"unknown topic", ErrUnknownTopicOrPartition, func(r *AlterPartitionRequest) { r.Topic = "nope" }},
		{"unknown partition", ErrUnknownTopicOrPartition, func(r *AlterPartitionRequest) { r.Partition = 1 }},
		{"negative partition", ErrUnknownTopicOrPartition, func(r *AlterPartitionRequest) { r.Partition = -1 }},
		{"stale broker epoch", ErrStaleBrokerEpoch, func(r *AlterPartitionRequest) { r.BrokerEpoch = e1 - 1 }},
		{"unregistered broker", ErrStaleBrokerEpoch, func(r *AlterPartitionRequest) { r.BrokerID = 9 }},
		{"not the leader", ErrFencedLeaderEpoch, func(r *AlterPartitionRequest) { r.BrokerID, r.BrokerEpoch = 2, e2 }},
		{"old leader epoch", ErrFencedLeaderEpoch, func(r *AlterPartitionRequest) { r.LeaderEpoch = -1 }},
		{"future leader epoch", ErrFencedLeaderEpoch, func(r *AlterPartitionRequest) { r.LeaderEpoch = 1 }},
		{"stale partition epoch", ErrInvalidUpdateVersion, func(r *AlterPartitionRequest) { r.PartitionEpoch = 1 }},
		{"not a replica", ErrIneligibleReplica, func(r *AlterPartitionRequest) { r.ISR = []int32{1, 4} }},
		{"without the leader", ErrIneligibleReplica, func(r *AlterPartitionRequest) { r.ISR = []int32{2, 3} }},
		{"empty", ErrIneligibleReplica, func(r *AlterPartitionRequest) { r.ISR = nil }},
		{"twice", ErrIneligibleReplica, func(r *AlterPartitionRequest) { r.ISR = []int32{1, 3, 1} }},
	}
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			h.t = t
			h.wantErr(c.want, kindAlterPartition, req(c.mod))
		})
	}
	h.t = t

	// Shrink; the ISR is kept in Replicas order.
	res := h.must(kindAlterPartition, req(func(r *AlterPartitionRequest) { r.ISR = []int32{3, 1} }))
	h.wantPart("t", 0, 1, []int32{1, 3}, 0, 1)
	if !slices.Equal(res.partition.ISR, []int32{1, 3}) || res.partition.PartitionEpoch != 1 {
		t.Fatalf("returned partition %+v", res.partition)
	}
	// The same request again is stale: it was decided against epoch 0.
	h.wantErr(ErrInvalidUpdateVersion, kindAlterPartition, req(func(r *AlterPartitionRequest) { r.ISR = []int32{1} }))

	// A fenced broker cannot join; nor can one shutting down, but a member
	// already in the ISR may be kept.
	h.fence(2)
	h.wantErr(ErrIneligibleReplica, kindAlterPartition, req(func(r *AlterPartitionRequest) { r.PartitionEpoch, r.ISR = 1, []int32{1, 2, 3} }))
	h.unfence(2)
	// KIP-903: a joiner whose fetches the leader saw at another broker
	// epoch than its registration is another incarnation: refused.
	h.wantErr(ErrIneligibleReplica, kindAlterPartition, req(func(r *AlterPartitionRequest) {
		r.PartitionEpoch, r.ISR, r.ISREpochs = 1, []int32{1, 2, 3}, []int64{e1, e2 - 1, -1}
	}))
	h.must(kindAlterPartition, req(func(r *AlterPartitionRequest) {
		r.PartitionEpoch, r.ISR, r.ISREpochs = 1, []int32{1, 2, 3}, []int64{e1, e2, -1}
	}))
	h.wantPart("t", 0, 1, []int32{1, 2, 3}, 0, 2)
	st := h.f.state().clone()
	for _, id := range []int32{2, 3} {
		b := st.Brokers[id]
		b.ShuttingDown = true
		st.Brokers[id] = b
	}
	h.f.publish(st)
	h.must(kindAlterPartition, req(func(r *AlterPartitionRequest) { r.PartitionEpoch, r.ISR = 2, []int32{1, 3} }))
	h.wantPart("t", 0, 1, []int32{1, 3}, 0, 3)
	h.wantErr(ErrIneligibleReplica, kindAlterPartition, req(func(r *AlterPartitionRequest) { r.PartitionEpoch, r.ISR = 3, []int32{1, 2, 3} }))

	// No change is no new state and no new epoch.
	before := h.f.state()
	res = h.must(kindAlterPartition, req(func(r *AlterPartitionRequest) { r.PartitionEpoch, r.ISR = 3, []int32{3, 1} }))
	if h.f.state() != before || res.partition.PartitionEpoch != 3 {
		t.Fatalf("unchanged ISR: new state %v, returned %+v", h.f.state() != before, res.partition)
	}
}

// Through a store: two leaders' requests decided from the same partition
// epoch race; raft orders them and the second is told to refresh.
func TestAlterPartitionRacesThroughRaft(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := testCtx(t)
	mustRegister(t, s, 1, "a")
	mustRegister(t, s, 2, "a")
	mustRegister(t, s, 3, "a")
	if _, err := s.CreateTopic(ctx, TopicSpec{Name: "t", Partitions: 1, ReplicationFactor: 3}); err != nil {
		t.Fatal(err)
	}
	p := s.State().Topics["t"].Partitions[0]
	req := AlterPartitionRequest{Topic: "t", BrokerID: p.Leader, BrokerEpoch: s.State().Brokers[p.Leader].Epoch,
		LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch}
	errs := make(chan error, 2)
	for _, isr := range [][]int32{{p.Leader}, p.Replicas[:2]} {
		go func() {
			r := req
			r.ISR = isr
			_, err := s.AlterPartition(ctx, r)
			errs <- err
		}()
	}
	var ok, stale int
	for range 2 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, ErrInvalidUpdateVersion):
			stale++
		default:
			t.Fatalf("racing AlterPartition: %v", err)
		}
	}
	if ok != 1 || stale != 1 {
		t.Fatalf("%d applied, %d refused as stale; want one of each", ok, stale)
	}
	got := s.State().Topics["t"].Partitions[0]
	if got.PartitionEpoch != p.PartitionEpoch+1 || got.LeaderEpoch != p.LeaderEpoch || got.Leader != p.Leader {
		t.Fatalf("after the race: %+v (before %+v)", got, p)
	}
}
