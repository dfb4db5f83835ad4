package meta

import (
	"errors"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"
)

// Controlled shutdown (KIP-631): the broker leaves every ISR it is not the
// last member of, its leaderships move to eligible ISR members, and it
// may stop once it leads nothing another broker could lead.
func TestControlledShutdownMovesLeadership(t *testing.T) {
	h := newHarness(t)
	h.register(1, "a")
	h.register(2, "a")
	h.register(3, "a")
	h.must(kindCreateTopic, topicCmd("t", 1, 3, 2)) // [1 2] [2 3] [3 1]
	h.must(kindCreateTopic, topicCmd("solo", 2, 1, 1))
	if readyToShutdown(h.f.state(), 1) {
		t.Fatal("a broker that did not ask is ready to shut down")
	}
	h.must(kindControlledShutdown, brokerEpochCmd{ID: 1, Epoch: h.f.state().Brokers[1].Epoch})
	st := h.f.state()
	if b := st.Brokers[1]; !b.ShuttingDown || b.Fenced || !st.Alive(1) {
		t.Fatalf("broker 1 = %+v", b)
	}
	h.wantPart("t", 0, 2, []int32{2}, 1, 1)
	h.wantPart("t", 1, 2, []int32{2, 3}, 0, 0)
	h.wantPart("t", 2, 3, []int32{3}, 0, 1)
	h.wantPart("solo", 0, 1, []int32{1}, 0, 0) // nobody else can lead it
	if !readyToShutdown(st, 1) {
		t.Fatal("broker 1 leads only what nobody else can, yet is not ready")
	}
	// A shutting-down broker gets no new leadership, even of what it
	// replicates alone.
	h.must(kindCreateTopic, topicCmd("later", 3, 2, 2))
	for _, p := range h.f.state().Topics["later"].Partitions {
		if slices.Contains(p.Replicas, 1) {
			t.Fatalf("new partition placed on a shutting-down broker: %+v", p)
		}
	}
	// Nor a partition that lost its other replica.
	h.fence(2)
	h.wantPart("t", 0, NoLeader, []int32{2}, 2, 2)
	h.wantErr(ErrStaleBrokerEpoch, kindControlledShutdown, brokerEpochCmd{ID: 1, Epoch: 0})
	// Its next incarnation is a broker like any other.
	h.register(1, "b")
	if b := h.f.state().Brokers[1]; b.ShuttingDown || b.Fenced {
		t.Fatalf("new incarnation = %+v", b)
	}
}

// Through the heartbeat: WantShutdown starts it, ShouldShutdown says when.
func TestHeartbeatControlledShutdown(t *testing.T) {
	s := openClocked(t, t.TempDir(), newFakeClock())
	ctx := testCtx(t)
	mustRegister(t, s, 1, "a")
	e2 := mustRegister(t, s, 2, "a")
	mustRegister(t, s, 3, "a")
	if _, err := s.CreateTopic(ctx, TopicSpec{Name: "t", Partitions: 6, ReplicationFactor: 2}); err != nil {
		t.Fatal(err)
	}
	r, err := s.Heartbeat(ctx, HeartbeatRequest{ID: 2, Epoch: e2})
	if err != nil || r.ShouldShutdown || r.Fenced {
		t.Fatalf("plain heartbeat: %+v, %v", r, err)
	}
	r, err = s.Heartbeat(ctx, HeartbeatRequest{ID: 2, Epoch: e2, WantShutdown: true})
	if err != nil || !r.ShouldShutdown {
		t.Fatalf("shutdown heartbeat: %+v, %v", r, err)
	}
	for _, p := range s.State().Topics["t"].Partitions {
		if p.Leader == 2 || slices.Contains(p.ISR, 2) {
			t.Fatalf("broker 2 still leads or is in the ISR after shutting down: %+v", p)
		}
	}
	if _, err := s.Heartbeat(ctx, HeartbeatRequest{ID: 2, Epoch: e2 + 100, WantShutdown: true}); !errors.Is(err, ErrStaleBrokerEpoch) {
		t.Fatalf("shutdown with a stale epoch: %v", err)
	}
	// The process restarts at once: a broker that shut down is not a
	// duplicate of its next incarnation.
	if _, err := s.RegisterBroker(ctx, Registration{ID: 2, Host: "127.0.0.1", Port: 9002, Incarnation: "b"}); err != nil {
		t.Fatalf("re-register after controlled shutdown: %v", err)
	}
}

// KIP-460 ElectLeaders, preferred: the first replica leads again if it is
// in the ISR and eligible.
func TestElectPreferredLeaders(t *testing.T) {
	h := newHarness(t)
	h.register(1, "a")
	h.register(2, "a")
	h.register(3, "a")
	h.must(kindCreateTopic, topicCmd("t", 1, 3, 2)) // [1 2] [2 3] [3 1]
	h.fence(1)                                      // t-0 to 2, t-2 ISR [3]
	h.register(1, "b")
	elect := func(unclean bool, parts ...TopicPartition) map[TopicPartition]error {
		t.Helper()
		return h.must(kindElectLeaders, electLeadersCmd{Unclean: unclean, All: parts == nil, Partitions: parts}).elected
	}
	got := elect(false, TopicPartition{"t", 0}, TopicPartition{"t", 1}, TopicPartition{"nope", 0}, TopicPartition{"t", 7})
	want := map[TopicPartition]error{
		{"t", 0}:    ErrPreferredLeaderNotAvailable, // 1 is out of the ISR
		{"t", 1}:    ErrElectionNotNeeded,
		{"nope", 0}: ErrUnknownTopicOrPartition,
		{"t", 7}:    ErrUnknownTopicOrPartition,
	}
	checkElected(t, got, want)

	// 1 catches up and rejoins t-0's ISR: now it can lead again.
	p := h.part("t", 0)
	h.must(kindAlterPartition, alterPartitionCmd{Topic: "t", Partition: 0, BrokerID: 2, BrokerEpoch: h.f.state().Brokers[2].Epoch,
		LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: []int32{1, 2}})
	got = elect(false) // every partition: "not needed" is not reported
	checkElected(t, got, map[TopicPartition]error{{"t", 0}: nil})
	h.wantPart("t", 0, 1, []int32{1, 2}, 2, 3)
}

// ElectLeaders, unclean: an offline partition gets the first alive
// replica, in sync or not.
func TestElectUncleanLeaders(t *testing.T) {
	h := newHarness(t)
	h.register(1, "a")
	h.register(2, "a")
	h.must(kindCreateTopic, topicCmd("t", 1, 1, 2)) // [1 2]
	h.fence(2)
	h.fence(1)
	h.wantPart("t", 0, NoLeader, []int32{1}, 1, 2)
	tp := TopicPartition{"t", 0}
	checkElected(t, h.must(kindElectLeaders, electLeadersCmd{Unclean: true, Partitions: []TopicPartition{tp}}).elected,
		map[TopicPartition]error{tp: ErrEligibleLeadersNotAvailable})
	h.unfence(2)
	checkElected(t, h.must(kindElectLeaders, electLeadersCmd{Unclean: false, Partitions: []TopicPartition{tp}}).elected,
		map[TopicPartition]error{tp: ErrPreferredLeaderNotAvailable})
	checkElected(t, h.must(kindElectLeaders, electLeadersCmd{Unclean: true, Partitions: []TopicPartition{tp}}).elected,
		map[TopicPartition]error{tp: nil})
	h.wantPart("t", 0, 2, []int32{2}, 2, 3)
	checkElected(t, h.must(kindElectLeaders, electLeadersCmd{Unclean: true, Partitions: []TopicPartition{tp}}).elected,
		map[TopicPartition]error{tp: ErrElectionNotNeeded})
}

func checkElected(t *testing.T, got, want map[TopicPartition]error) {
	t.Helper()
	if !slices.Equal(slices.SortedFunc(maps.Keys(got), cmpTP), slices.SortedFunc(maps.Keys(want), cmpTP)) {
		t.Fatalf("results for %v, want %v", got, want)
	}
	for tp, w := range want {
		if g := got[tp]; (w == nil) != (g == nil) || !errors.Is(g, w) {
			t.Errorf("%v: %v, want %v", tp, g, w)
		}
	}
}

func cmpTP(a, b TopicPartition) int {
	if a.Topic != b.Topic {
		if a.Topic < b.Topic {
			return -1
		}
		return 1
	}
	return int(a.Partition - b.Partition)
}

// Automatic rebalancing: every RebalanceInterval the controller moves
// leadership back to preferred replicas that are in sync, except for
// topics with auto.leader.rebalance.enable=false.
func TestAutoRebalance(t *testing.T) {
	clock := newFakeClock()
	cfg := testConfig(t, t.TempDir())
	cfg.Now = clock.Now
	cfg.RebalanceInterval = time.Minute
	s, err := Open(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	waitLoop(t, s)
	ctx := testCtx(t)
	mustRegister(t, s, 1, "a")
	mustRegister(t, s, 2, "a")
	for _, name := range []string{"auto", "manual"} {
		spec := TopicSpec{Name: name, Partitions: 2, ReplicationFactor: 2}
		if name == "manual" {
			spec.Configs = map[string]string{configAutoRebalance: "false"}
		}
		if _, err := s.CreateTopic(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	// Broker 2 restarts: what it led moves to 1; it then catches up.
	if _, err := s.Heartbeat(ctx, HeartbeatRequest{ID: 2, Epoch: s.State().Brokers[2].Epoch, WantShutdown: true}); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, s, 2, "b")
	st := s.State()
	for _, name := range []string{"auto", "manual"} {
		for _, p := range st.Topics[name].Partitions {
			if p.Leader != 1 {
				t.Fatalf("%s-%d led by %d after 2 restarted", name, p.Index, p.Leader)
			}
			_, err := s.AlterPartition(ctx, AlterPartitionRequest{Topic: name, Partition: p.Index, BrokerID: 1,
				BrokerEpoch: st.Brokers[1].Epoch, LeaderEpoch: p.LeaderEpoch, PartitionEpoch: p.PartitionEpoch, ISR: []int32{1, 2}})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	clock.advance(time.Minute)
	waitFor(t, "preferred leaders back", func() bool {
		for _, p := range s.State().Topics["auto"].Partitions {
			if p.Leader != p.Replicas[0] {
				return false
			}
		}
		return true
	})
	for _, p := range s.State().Topics["manual"].Partitions {
		if p.Replicas[0] == 2 && p.Leader != 1 {
			t.Fatalf("manual-%d rebalanced: %+v", p.Index, p)
		}
	}
	got, err := s.ElectLeaders(ctx, false, nil)
	if err != nil || len(got) != 1 {
		t.Fatalf("ElectLeaders on demand: %v, %v", got, err)
	}
	for tp, err := range got {
		if tp.Topic != "manual" || err != nil {
			t.Fatalf("ElectLeaders: %v: %v", tp, err)
		}
	}
}

// Placement (KIP-36): with racks, the rf replicas of a partition land on
// distinct racks when there are as many racks; only alive brokers that
// are not shutting down get replicas.
func TestRackAwarePlacement(t *testing.T) {
	h := newHarness(t)
	racks := map[int32]string{1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c", 7: "c"}
	for id, rack := range racks {
		h.must(kindRegisterBroker, registerBrokerCmd{Broker{ID: id, Rack: rack, Incarnation: "x"}})
	}
	h.must(kindCreateTopic, topicCmd("t", 1, 12, 3))
	leaders := map[int32]int{}
	for _, p := range h.part2("t") {
		seen := map[string]bool{}
		for _, r := range p.Replicas {
			seen[racks[r]] = true
		}
		if len(seen) != 3 {
			t.Fatalf("partition %d replicas %v on racks %v", p.Index, p.Replicas, seen)
		}
		leaders[p.Leader]++
	}
	if len(leaders) != len(racks) {
		t.Fatalf("leaders spread over %v", leaders)
	}
	// Two racks for three replicas: both racks used, no broker twice.
	h.must(kindCreatePartitions, createPartitionsCmd{Name: "t", Count: 14})
	h.fence(5)
	h.fence(6)
	h.fence(7)
	h.must(kindCreateTopic, topicCmd("u", 2, 4, 3))
	for _, p := range h.part2("u") {
		seen := map[string]bool{}
		for _, r := range p.Replicas {
			seen[racks[r]] = true
		}
		if len(seen) != 2 || len(slices.Compact(slices.Sorted(slices.Values(p.Replicas)))) != 3 {
			t.Fatalf("u-%d replicas %v", p.Index, p.Replicas)
		}
	}
	h.wantErr(ErrInvalidReplicationFactor, kindCreateTopic, topicCmd("v", 3, 1, 5))
	h.fence(3)
	h.fence(4)
	h.wantErr(ErrInvalidReplicationFactor, kindCreatePartitions, createPartitionsCmd{Name: "u", Count: 5})
	// Without racks, the placement is the plain round robin it always was.
	plain := newHarness(t)
	plain.brokers(1, 2, 3)
	plain.must(kindCreateTopic, topicCmd("t", 1, 3, 2))
	var got [][]int32
	for _, p := range plain.part2("t") {
		got = append(got, p.Replicas)
	}
	if want := [][]int32{{1, 2}, {2, 3}, {3, 1}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("plain placement %v, want %v", got, want)
	}
}

func (h *fsmHarness) part2(topic string) []Partition { return h.f.state().Topics[topic].Partitions }
