package meta

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fence fences broker id's current incarnation, as the controller loop
// does when its session runs out.
func (h *fsmHarness) fence(id int32) {
	h.t.Helper()
	h.must(kindFenceBroker, brokerEpochCmd{ID: id, Epoch: h.f.state().Brokers[id].Epoch})
}

// unfence is what a fenced broker's next heartbeat does.
func (h *fsmHarness) unfence(id int32) {
	h.t.Helper()
	h.must(kindUnfenceBroker, brokerEpochCmd{ID: id, Epoch: h.f.state().Brokers[id].Epoch})
}

func (h *fsmHarness) register(id int32, incarnation string) int64 {
	h.t.Helper()
	return h.must(kindRegisterBroker, registerBrokerCmd{Broker{ID: id, Host: "localhost", Port: 9000 + id, Incarnation: incarnation}}).epoch
}

func (h *fsmHarness) part(topic string, i int32) Partition {
	h.t.Helper()
	return h.f.state().Topics[topic].Partitions[i]
}

// wantPart checks the leader, ISR and both epochs of one partition.
func (h *fsmHarness) wantPart(topic string, i, leader int32, isr []int32, leaderEpoch, partitionEpoch int32) {
	h.t.Helper()
	p := h.part(topic, i)
	if p.Leader != leader || !slices.Equal(p.ISR, isr) || p.LeaderEpoch != leaderEpoch || p.PartitionEpoch != partitionEpoch {
		h.t.Fatalf("%s-%d: leader %d isr %v epochs %d/%d, want leader %d isr %v epochs %d/%d",
			topic, i, p.Leader, p.ISR, p.LeaderEpoch, p.PartitionEpoch, leader, isr, leaderEpoch, partitionEpoch)
	}
}

// KIP-631: the broker epoch is the offset of the registration that
// admitted the incarnation; a retry of the same registration is the same
// registration.
func TestRegistrationEpochs(t *testing.T) {
	h := newHarness(t)
	e1 := h.register(1, "a")
	if e1 != int64(h.index) {
		t.Fatalf("epoch %d, want the command's index %d", e1, h.index)
	}
	before := h.f.state()
	if again := h.register(1, "a"); again != e1 || h.f.state() != before {
		t.Fatalf("retry: epoch %d (want %d), new state %v", again, e1, h.f.state() != before)
	}
	// A new incarnation gets a new epoch; the old epoch is refused.
	e2 := h.register(1, "b")
	if e2 <= e1 || h.f.state().Brokers[1].Incarnation != "b" {
		t.Fatalf("new incarnation: epoch %d after %d, broker %+v", e2, e1, h.f.state().Brokers[1])
	}
	h.wantErr(ErrStaleBrokerEpoch, kindFenceBroker, brokerEpochCmd{ID: 1, Epoch: e1})
	h.wantErr(ErrStaleBrokerEpoch, kindUnfenceBroker, brokerEpochCmd{ID: 1, Epoch: e1})
	h.wantErr(ErrStaleBrokerEpoch, kindFenceBroker, brokerEpochCmd{ID: 9, Epoch: 1})

	// A fenced incarnation that registers again is admitted afresh.
	h.fence(1)
	if b := h.f.state().Brokers[1]; !b.Fenced || h.f.state().Alive(1) {
		t.Fatalf("fenced broker = %+v, alive %v", b, h.f.state().Alive(1))
	}
	e3 := h.register(1, "b")
	if b := h.f.state().Brokers[1]; b.Fenced || e3 <= e2 || b.Epoch != e3 {
		t.Fatalf("re-registered fenced broker = %+v, epoch %d", b, e3)
	}
}

// On a fenced leader the controller elects the first replica, in Replicas
// order, that is in the ISR and alive; the fenced broker leaves the ISR.
func TestFenceElectsFromISRInReplicasOrder(t *testing.T) {
	h := newHarness(t)
	h.brokers(1, 2, 3)
	h.must(kindCreateTopic, topicCmd("t", 1, 3, 3)) // replicas [1 2 3], [2 3 1], [3 1 2]
	h.fence(1)
	h.wantPart("t", 0, 2, []int32{2, 3}, 1, 1) // led by 1: 2 comes first
	h.wantPart("t", 1, 2, []int32{2, 3}, 0, 1) // followed by 1: ISR only
	h.wantPart("t", 2, 3, []int32{3, 2}, 0, 1)
	if st := h.f.state(); !slices.Equal(st.OfflineReplicas(h.part("t", 0)), []int32{1}) {
		t.Fatalf("offline replicas %v, want [1]", st.OfflineReplicas(h.part("t", 0)))
	}
	h.fence(3)
	h.wantPart("t", 2, 2, []int32{2}, 1, 2) // replicas [3 1 2]: 1 is fenced, 2 is next
	// Fencing again is nothing new.
	before := h.f.state()
	h.must(kindFenceBroker, brokerEpochCmd{ID: 3, Epoch: before.Brokers[3].Epoch})
	if h.f.state() != before {
		t.Fatal("fencing a fenced broker published a new state")
	}
}

// The ISR never becomes empty: its last member stays in it when fenced, the
// partition goes offline, and it leads again when that member comes back,
// by a new registration or by a heartbeat of the same incarnation.
func TestLastISRMemberComesBackAsLeader(t *testing.T) {
	h := newHarness(t)
	h.register(1, "a")
	h.register(2, "a")
	h.must(kindCreateTopic, topicCmd("t", 1, 1, 2)) // replicas [1 2]
	h.fence(2)
	h.wantPart("t", 0, 1, []int32{1}, 0, 1)
	h.fence(1)
	h.wantPart("t", 0, NoLeader, []int32{1}, 1, 2)
	if got := h.f.state().OfflineReplicas(h.part("t", 0)); !slices.Equal(got, []int32{1, 2}) {
		t.Fatalf("offline replicas %v", got)
	}
	// 2 comes back: it is not in the ISR, so it may not lead (unclean
	// election is off).
	h.unfence(2)
	h.wantPart("t", 0, NoLeader, []int32{1}, 1, 2)
	// 1, the last in-sync replica, comes back and leads.
	h.unfence(1)
	h.wantPart("t", 0, 1, []int32{1}, 2, 3)
	h.fence(1)
	h.wantPart("t", 0, NoLeader, []int32{1}, 3, 4)
	h.register(1, "b")
	h.wantPart("t", 0, 1, []int32{1}, 4, 5)
}

// A new incarnation of a broker nobody fenced (it restarted faster than its
// session ran out) does not inherit its leaderships: the old life is
// fenced first, so leadership moves where another ISR member can take it,
// and the epochs say a new life began.
func TestNewIncarnationFencesTheOldOne(t *testing.T) {
	h := newHarness(t)
	h.register(1, "a")
	h.register(2, "a")
	h.must(kindCreateTopic, topicCmd("solo", 1, 1, 1)) // on 1 alone
	h.must(kindCreateTopic, topicCmd("pair", 2, 1, 2)) // replicas [1 2]
	h.register(1, "b")
	h.wantPart("solo", 0, 1, []int32{1}, 2, 2) // offline, then back
	h.wantPart("pair", 0, 2, []int32{2}, 1, 1) // moved to 2
}

// unclean.leader.election.enable lets the first alive replica lead when no
// ISR member can, with an ISR of just itself.
func TestUncleanElectionFollowsTopicConfig(t *testing.T) {
	for _, unclean := range []bool{false, true} {
		h := newHarness(t)
		h.brokers(1, 2, 3)
		cmd := topicCmd("t", 1, 1, 3)
		if unclean {
			cmd.Configs = map[string]string{configUncleanElection: "true"}
		}
		h.must(kindCreateTopic, cmd)
		h.fence(2)
		h.fence(3)
		h.unfence(3) // alive again, but out of the ISR
		h.wantPart("t", 0, 1, []int32{1}, 0, 2)
		h.fence(1)
		if unclean {
			h.wantPart("t", 0, 3, []int32{3}, 1, 3)
		} else {
			h.wantPart("t", 0, NoLeader, []int32{1}, 1, 3)
			// Allowed while nobody can lead, the election happens when
			// a replica returns.
			h.fence(3)
			h.must(kindAlterConfigs, alterConfigsCmd{Name: "t", Set: map[string]string{configUncleanElection: "true"}})
			h.unfence(2)
			h.wantPart("t", 0, 2, []int32{2}, 2, 4)
		}
	}
}

// fakeClock is a controller clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

const testSession = time.Second

func openClocked(t *testing.T, dir string, clock *fakeClock) *Store {
	t.Helper()
	cfg := testConfig(t, dir)
	cfg.SessionTimeout = testSession
	cfg.Now = clock.Now
	s, err := Open(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	waitLoop(t, s)
	return s
}

// waitLoop waits for s's control loop to have started its term, so that
// the sessions a test sets up are not reset under it.
func waitLoop(t *testing.T, s *Store) {
	t.Helper()
	waitFor(t, "the control loop to start", func() bool { return s.ctl.terms.Load() > 0 })
}

func mustRegister(t *testing.T, s *Store, id int32, incarnation string) int64 {
	t.Helper()
	epoch, err := s.RegisterBroker(testCtx(t), Registration{ID: id, Host: "127.0.0.1", Port: 9000 + id, Incarnation: incarnation})
	if err != nil {
		t.Fatalf("register %d/%s: %v", id, incarnation, err)
	}
	return epoch
}

func waitFenced(t *testing.T, s *Store, id int32) {
	t.Helper()
	waitFor(t, "broker fenced", func() bool { return s.State().Brokers[id].Fenced })
}

// A broker whose heartbeats stop for the session timeout is fenced; one
// that heartbeats is not; the controller's own node never is. A fenced
// broker that heartbeats again with its epoch is unfenced.
func TestSessionExpiryFences(t *testing.T) {
	clock := newFakeClock()
	s := openClocked(t, t.TempDir(), clock)
	ctx := testCtx(t)
	mustRegister(t, s, 1, "self")
	e2 := mustRegister(t, s, 2, "a")
	mustRegister(t, s, 3, "a")
	if _, err := s.CreateTopic(ctx, TopicSpec{Name: "t", Partitions: 3, ReplicationFactor: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(ctx, HeartbeatRequest{ID: 2, Epoch: e2 - 1}); !errors.Is(err, ErrStaleBrokerEpoch) {
		t.Fatalf("heartbeat with a stale epoch: %v", err)
	}
	if _, err := s.Heartbeat(ctx, HeartbeatRequest{ID: 7, Epoch: 1}); !errors.Is(err, ErrStaleBrokerEpoch) {
		t.Fatalf("heartbeat of an unregistered broker: %v", err)
	}

	clock.advance(testSession * 6 / 10)
	if r, err := s.Heartbeat(ctx, HeartbeatRequest{ID: 2, Epoch: e2}); err != nil || r.Fenced {
		t.Fatalf("heartbeat: %+v, %v", r, err)
	}
	clock.advance(testSession * 6 / 10)
	waitFenced(t, s, 3)
	st := s.State()
	if st.Brokers[2].Fenced || st.Brokers[1].Fenced {
		t.Fatalf("fenced with the expired one: %+v", st.Brokers)
	}
	for _, p := range st.Topics["t"].Partitions {
		if p.Leader == 3 || slices.Contains(p.ISR, 3) {
			t.Fatalf("fenced broker 3 still in %+v", p)
		}
	}

	e3 := st.Brokers[3].Epoch
	r, err := s.Heartbeat(ctx, HeartbeatRequest{ID: 3, Epoch: e3})
	if err != nil || r.Fenced || s.State().Brokers[3].Fenced {
		t.Fatalf("heartbeat of a fenced broker: %+v, %v, state %+v", r, err, s.State().Brokers[3])
	}
}

// A second live process claiming a broker id is refused until the first
// one's session runs out; a retry of the same incarnation is not a second
// process.
func TestDuplicateRegistration(t *testing.T) {
	clock := newFakeClock()
	s := openClocked(t, t.TempDir(), clock)
	e := mustRegister(t, s, 2, "first")
	if again := mustRegister(t, s, 2, "first"); again != e {
		t.Fatalf("retry: epoch %d, want %d", again, e)
	}
	_, err := s.RegisterBroker(testCtx(t), Registration{ID: 2, Incarnation: "second"})
	if !errors.Is(err, ErrDuplicateBroker) {
		t.Fatalf("second incarnation while the first is alive: %v", err)
	}
	if got := s.State().Brokers[2]; got.Incarnation != "first" || got.Epoch != e {
		t.Fatalf("refused registration changed the broker: %+v", got)
	}
	clock.advance(testSession)
	if e2 := mustRegister(t, s, 2, "second"); e2 <= e {
		t.Fatalf("epoch %d after %d", e2, e)
	}
	if _, err := s.RegisterBroker(testCtx(t), Registration{ID: 3}); err == nil {
		t.Fatal("registration without an incarnation accepted")
	}
}

// A single node that restarts registers a new incarnation of itself while
// its previous one still looks alive to the new term (every broker gets a
// full session then): it is admitted at once, because the previous process
// on this data dir is certainly gone. Another id gets no such exemption.
func TestControllerOwnRestartIsNotADuplicate(t *testing.T) {
	dir := t.TempDir()
	clock := newFakeClock()
	s := openClocked(t, dir, clock)
	mustRegister(t, s, 1, "before")
	mustRegister(t, s, 2, "before")
	closeStore(t, s)

	s = openClocked(t, dir, clock)
	mustRegister(t, s, 1, "after")
	if _, err := s.RegisterBroker(testCtx(t), Registration{ID: 2, Incarnation: "after"}); !errors.Is(err, ErrDuplicateBroker) {
		t.Fatalf("another broker's new incarnation within its session: %v", err)
	}
}

// The controller's loop runs on the raft leader: when the controller is
// closed, the new one (which never heard a heartbeat) gives each broker a
// full session, then fences the one that stopped heartbeating and keeps
// the one that did not.
func TestNewControllerFencesSilentBroker(t *testing.T) {
	clock := newFakeClock()
	q := newQuorum(t, 3)
	q.session, q.clock = testSession, clock
	q.open(1, 2, 3)
	old := q.leader()
	ctx := testCtx(t)
	e7 := mustRegister(t, old, 7, "a")
	e8 := mustRegister(t, old, 8, "a")
	if _, err := old.CreateTopic(ctx, TopicSpec{Name: "t", Partitions: 2, ReplicationFactor: 2}); err != nil {
		t.Fatal(err)
	}
	q.close(idOf(old))
	leader := q.leader()
	waitLoop(t, leader)
	waitFor(t, "the new controller to start sessions", func() bool {
		leader.ctl.mu.Lock()
		defer leader.ctl.mu.Unlock()
		return len(leader.ctl.mu.last) >= 2
	})
	clock.advance(testSession / 2)
	if _, err := leader.Heartbeat(ctx, HeartbeatRequest{ID: 8, Epoch: e8}); err != nil {
		t.Fatal(err)
	}
	clock.advance(testSession/2 + time.Millisecond)
	waitFenced(t, leader, 7)
	st := leader.State()
	if st.Brokers[8].Fenced || st.Brokers[7].Epoch != e7 {
		t.Fatalf("brokers after fencing: %+v", st.Brokers)
	}
	for _, p := range st.Topics["t"].Partitions {
		if p.Leader != 8 || !slices.Equal(p.ISR, []int32{8}) {
			t.Fatalf("partition after fencing 7: %+v", p)
		}
	}
	for _, f := range q.followers() {
		if _, err := f.Heartbeat(ctx, HeartbeatRequest{ID: 8, Epoch: e8}); !errors.Is(err, ErrNotController) {
			t.Fatalf("heartbeat to a follower: %v", err)
		}
	}
}

// Close stops the control loop and its supervisor with the store.
func TestControllerStopsOnClose(t *testing.T) {
	s := openClocked(t, t.TempDir(), newFakeClock())
	closeStore(t, s)
	select {
	case <-s.ctl.done:
	default:
		t.Fatal("controller supervisor still running after Close")
	}
	if _, err := s.Heartbeat(context.Background(), HeartbeatRequest{ID: 1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("heartbeat after Close: %v", err)
	}
}

// The controller's fields survive a snapshot, and a snapshot written before
// they existed still decodes: its brokers unfenced with epoch 0, its
// partitions at partition epoch 0, its leaders as they were.
func TestSnapshotControllerFields(t *testing.T) {
	h := newHarness(t)
	h.register(1, "a")
	h.register(2, "a")
	h.must(kindCreateTopic, topicCmd("t", 1, 2, 2))
	h.fence(2)
	h.fence(1)
	var buf bytes.Buffer
	if err := encodeSnapshot(&buf, h.f.state()); err != nil {
		t.Fatal(err)
	}
	got, err := decodeSnapshot(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, h.f.state()) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, h.f.state())
	}
	if b := got.Brokers[2]; !b.Fenced || b.Incarnation != "a" || b.Epoch == 0 {
		t.Fatalf("broker 2 after round trip: %+v", b)
	}
	if p := got.Topics["t"].Partitions[0]; p.Leader != NoLeader || p.PartitionEpoch == 0 {
		t.Fatalf("partition after round trip: %+v", p)
	}

	old := `{"Format":1,"Index":7,"NextProducerID":0,` +
		`"Brokers":[{"ID":1,"Host":"h","Port":9092,"Rack":""}],` +
		`"Topics":[{"Name":"t","ID":[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"Internal":false,"Configs":{},` +
		`"Partitions":[{"Index":0,"Replicas":[1],"ISR":[1],"Leader":1,"LeaderEpoch":3},{"Index":1,"Replicas":[1],"Leader":1}]}]}`
	st, err := decodeSnapshot(strings.NewReader(old))
	if err != nil {
		t.Fatal(err)
	}
	if b := st.Brokers[1]; b.Fenced || b.ShuttingDown || b.Epoch != 0 || !st.Alive(1) {
		t.Fatalf("old broker: %+v", b)
	}
	ps := st.Topics["t"].Partitions
	if ps[0].Leader != 1 || ps[0].LeaderEpoch != 3 || ps[0].PartitionEpoch != 0 || ps[1].Leader != 1 {
		t.Fatalf("old partitions: %+v", ps)
	}
	// And the controller works on it: fencing the old broker takes the
	// partition offline with its ISR kept.
	h = newHarness(t)
	h.f.publish(st)
	h.index = st.Index
	h.fence(1)
	h.wantPart("t", 0, NoLeader, []int32{1}, 4, 1)
}

// The control loop runs only on the raft leader: a node that hands
// leadership over stops deciding, and the new leader starts.
func TestControlLoopFollowsLeadership(t *testing.T) {
	q := newQuorum(t, 3)
	q.open(1, 2, 3)
	old := q.leader()
	waitLoop(t, old)
	if err := old.raft.LeadershipTransfer().Error(); err != nil {
		t.Fatal(err)
	}
	leader := q.leader()
	if leader == old {
		t.Fatal("leadership did not move")
	}
	waitLoop(t, leader)
	waitFor(t, "the old controller's loop to stop", func() bool { return !old.ctl.running.Load() })
	for _, f := range q.followers() {
		if f.ctl.running.Load() {
			t.Fatalf("node %d runs a control loop as a follower", idOf(f))
		}
	}
}

// Turning unclean.leader.election.enable on elects a leader for the
// topic's offline partitions at once, as Kafka's controller does.
func TestUncleanConfigElectsOfflinePartitions(t *testing.T) {
	h := newHarness(t)
	h.brokers(1, 2)
	h.must(kindCreateTopic, topicCmd("t", 1, 1, 2)) // [1 2]
	h.fence(2)
	h.fence(1)
	h.unfence(2)
	h.wantPart("t", 0, NoLeader, []int32{1}, 1, 2)
	h.must(kindAlterConfigs, alterConfigsCmd{Name: "t", Set: map[string]string{configUncleanElection: "true"}})
	h.wantPart("t", 0, 2, []int32{2}, 2, 3)
}

func TestControllerSettingsValidated(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.SessionTimeout = -time.Second },
		func(c *Config) { c.RebalanceInterval = -time.Second },
	} {
		cfg := testConfig(t, t.TempDir())
		mod(&cfg)
		if s, err := Open(testCtx(t), cfg); err == nil {
			s.Close()
			t.Fatalf("Open with %+v succeeded", cfg)
		}
	}
	c := newController(Config{})
	if c.session != DefaultSessionTimeout || c.rebalance != DefaultRebalanceInterval || c.now == nil {
		t.Fatalf("defaults: session %v, rebalance %v", c.session, c.rebalance)
	}
}
