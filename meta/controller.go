package meta

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// The controller is the raft leader's side of the metadata: it decides,
// and proposes its decisions as commands. What needs a clock (sessions,
// rebalancing) lives here, in memory on the leader only; what follows from
// the State alone is decided again in Apply, so that racing requests are
// ordered by raft.
//
// A controller that has just been elected knows nothing of when brokers
// last heartbeated: it gives every registered broker a full session from
// the moment it notices it, as Kafka's does.

// Registration is a broker's request to be admitted (Kafka's
// BrokerRegistration).
type Registration struct {
	ID int32
	// Host and Port are the inter-broker listener's advertised address.
	Host string
	Port int32
	// Endpoints are every advertised listener, the inter-broker one
	// included (Broker.Endpoints).
	Endpoints   []Endpoint
	Rack        string
	Incarnation string // NewIncarnation, picked once per process start
}

// NewIncarnation returns a random incarnation id for a broker process.
func NewIncarnation() string {
	var b [16]byte
	rand.Read(b[:]) // never fails since Go 1.24
	return hex.EncodeToString(b[:])
}

// HeartbeatRequest is a broker's periodic sign of life (Kafka's
// BrokerHeartbeat). WantShutdown asks for a controlled shutdown.
type HeartbeatRequest struct {
	ID           int32
	Epoch        int64
	WantShutdown bool
}

// HeartbeatReply says what the controller thinks of the broker after the
// heartbeat: fenced or not, and, once it asked to shut down, whether it
// may stop now.
type HeartbeatReply struct {
	Fenced         bool
	ShouldShutdown bool
}

// controller holds the leader's liveness tracker and settings.
type controller struct {
	self      int32
	session   time.Duration
	rebalance time.Duration
	now       func() time.Time
	log       *slog.Logger
	// clusterID names a cluster the metadata has no id for yet.
	clusterID string
	// holdNaming is Config.HoldNaming.
	holdNaming <-chan struct{}
	// openIndex is the last raft index this node held when it opened.
	// A registration of this node's own id at or below it was made by an
	// earlier process on this data dir, which this process now holds
	// locked: that earlier incarnation is dead, whatever its session says.
	openIndex uint64

	// regMu serializes registrations, so that two incarnations racing for
	// one id cannot both pass the duplicate check. Lock order: regMu, then
	// mu.
	regMu sync.Mutex

	mu struct {
		sync.Mutex
		// last is when each broker last heartbeated, or when this node
		// became controller if it has not heartbeated since.
		last map[int32]time.Time
	}

	// prevLeader is the last other node seen leading raft, -1 if none:
	// the previous controller when this node becomes it.
	prevLeader atomic.Int32
	// leaderChanges counts raft leaders seen elected, and opened is when
	// the store opened: RaftStats.
	leaderChanges atomic.Uint64
	opened        time.Time

	// terms counts the control loops started, and running says one runs;
	// for tests to wait on.
	terms   atomic.Int32
	running atomic.Bool

	// stop and done belong to the supervisor goroutine (startController).
	stop context.CancelFunc
	done chan struct{}
}

func newController(cfg Config) *controller {
	c := &controller{
		self:      cfg.NodeID,
		session:   cfg.SessionTimeout,
		rebalance: cfg.RebalanceInterval,
		now:       cfg.Now,
		log:       cfg.Logger,
		clusterID: cfg.ClusterID,

		holdNaming: cfg.HoldNaming,
	}
	c.prevLeader.Store(-1)
	c.opened = time.Now()
	if c.session == 0 {
		c.session = DefaultSessionTimeout
	}
	if c.rebalance == 0 {
		c.rebalance = DefaultRebalanceInterval
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.mu.last = map[int32]time.Time{}
	return c
}

// resetSessions starts a controller's term: every broker gets a full
// session from now, except the previous controller's, which gets half a
// session. That broker heartbeated in-process to a controller that has
// just lost its leadership, most likely because its process died; if it
// is alive it finds the new controller within a heartbeat or two. Without
// this, a dead controller's partitions would wait for the election and a
// whole session before moving.
func (c *controller) resetSessions(prev int32) {
	c.mu.Lock()
	c.mu.last = map[int32]time.Time{}
	if prev >= 0 && prev != c.self {
		c.mu.last[prev] = c.now().Add(-c.session / 2)
	}
	c.mu.Unlock()
}

func (c *controller) touch(id int32) {
	now := c.now()
	c.mu.Lock()
	c.mu.last[id] = now
	c.mu.Unlock()
}

// expired reports whether broker id's session has run out at now. A broker
// not heard of in this term starts its session now.
func (c *controller) expired(id int32, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	last, ok := c.mu.last[id]
	if !ok {
		c.mu.last[id] = now
		return false
	}
	return now.Sub(last) >= c.session
}

// tickEvery is how often the loop looks at sessions: often enough that a
// broker is fenced soon after its session ends, rarely enough to cost
// nothing.
func (c *controller) tickEvery() time.Duration {
	return min(max(c.session/8, 10*time.Millisecond), 250*time.Millisecond)
}

// startController starts the supervisor goroutine: it runs the control
// loop while this node is the raft leader, and stops it when it is not.
func (s *Store) startController() {
	ctx, cancel := context.WithCancel(context.Background())
	s.ctl.stop = cancel
	s.ctl.done = make(chan struct{})
	leaderCh := s.raft.LeaderCh()
	// Leader observations tell who controlled before this node, for
	// resetSessions.
	obs := make(chan raft.Observation, 16)
	observer := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	s.raft.RegisterObserver(observer)
	go func() {
		defer close(s.ctl.done)
		defer s.raft.DeregisterObserver(observer)
		type running struct {
			stop context.CancelFunc
			done chan struct{}
		}
		var cur *running
		halt := func() {
			if cur != nil {
				cur.stop()
				<-cur.done
				cur = nil
			}
		}
		defer halt()
		for {
			select {
			case <-ctx.Done():
				return
			case o := <-obs:
				lo := o.Data.(raft.LeaderObservation)
				if lo.LeaderID != "" {
					s.ctl.leaderChanges.Add(1)
				}
				if id, err := strconv.ParseInt(string(lo.LeaderID), 10, 32); err == nil && int32(id) != s.ctl.self {
					s.ctl.prevLeader.Store(int32(id))
				}
			case leader := <-leaderCh:
				halt()
				if !leader {
					continue
				}
				lctx, stop := context.WithCancel(ctx)
				cur = &running{stop: stop, done: make(chan struct{})}
				go func(done chan struct{}) {
					defer close(done)
					s.controlLoop(lctx)
				}(cur.done)
			}
		}
	}()
}

// stopController stops the supervisor and the loop, and waits for both.
func (s *Store) stopController() {
	if s.ctl == nil || s.ctl.stop == nil {
		return
	}
	s.ctl.stop()
	<-s.ctl.done
}

// controlLoop fences brokers whose session ran out and, every
// RebalanceInterval, moves leaders back to preferred replicas, until ctx
// ends (leadership lost, or Close).
func (s *Store) controlLoop(ctx context.Context) {
	s.ctl.resetSessions(s.ctl.prevLeader.Load())
	s.ctl.running.Store(true)
	defer s.ctl.running.Store(false)
	s.ctl.terms.Add(1)
	tick := time.NewTicker(s.ctl.tickEvery())
	defer tick.Stop()
	nextRebalance := s.ctl.now().Add(s.ctl.rebalance)
	s.nameCluster(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.nameCluster(ctx)
		s.fenceExpired(ctx)
		if now := s.ctl.now(); !now.Before(nextRebalance) {
			nextRebalance = now.Add(s.ctl.rebalance)
			s.rebalance(ctx)
		}
	}
}

// nameCluster gives a cluster whose metadata holds no id yet (a new one,
// or one made before clusters had ids) its id, once. Brokers wait for it
// before they touch the bucket (see State.ClusterID).
func (s *Store) nameCluster(ctx context.Context) {
	if st := s.State(); st.ClusterID != "" {
		if st.HistoryID == "" {
			s.pickHistoryID(ctx, st.ClusterID)
		}
		return
	}
	if s.ctl.holdNaming != nil {
		select {
		case <-s.ctl.holdNaming:
		default:
			return
		}
	}
	id := s.ctl.clusterID
	if id == "" {
		id = NewClusterID()
	}
	if _, err := s.propose(ctx, kindInitCluster, initClusterCmd{ID: id, HistoryID: NewIncarnation()}); err != nil {
		if ctx.Err() == nil {
			s.ctl.log.Warn("name the cluster", "err", err)
		}
		return
	}
	// A controller whose state lagged its log may have proposed in vain:
	// the first id stays, and is not news.
	if s.State().ClusterID == id {
		s.ctl.log.Info("cluster named", "cluster_id", id)
	}
}

// pickHistoryID gives a cluster named before history ids existed its
// own (State.HistoryID).
func (s *Store) pickHistoryID(ctx context.Context, clusterID string) {
	if _, err := s.propose(ctx, kindInitCluster, initClusterCmd{ID: clusterID, HistoryID: NewIncarnation()}); err != nil && ctx.Err() == nil {
		s.ctl.log.Warn("pick the metadata history id", "err", err)
	}
}

// validHistoryID reports whether s is 32 lowercase hex digits.
func validHistoryID(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// NewClusterID returns a random cluster id spelled as Kafka spells its
// own (kafka-storage random-uuid): a version 4 UUID in 22 characters of
// unpadded base64url, never starting with '-'.
func NewClusterID() string {
	id := newTopicID()
	return base64.RawURLEncoding.EncodeToString(id[:])
}

// fenceExpired fences every unfenced broker whose session has run out. The
// controller's own node is never fenced: its broker runs in this process,
// which is alive since it is deciding.
func (s *Store) fenceExpired(ctx context.Context) {
	st := s.State()
	now := s.ctl.now()
	for _, id := range st.sortedBrokerIDs() {
		b := st.Brokers[id]
		if b.Fenced || id == s.ctl.self || !s.ctl.expired(id, now) {
			continue
		}
		_, err := s.propose(ctx, kindFenceBroker, brokerEpochCmd{ID: id, Epoch: b.Epoch})
		switch {
		case err == nil:
			s.ctl.log.Info("fenced broker: session expired", "broker", id, "epoch", b.Epoch, "session", s.ctl.session)
		case errors.Is(err, ErrStaleBrokerEpoch):
			// It registered again meanwhile: nothing to fence.
		case ctx.Err() == nil:
			s.ctl.log.Warn("fence broker", "broker", id, "err", err)
		}
	}
}

// rebalance moves leadership back to preferred replicas that can take it
// (auto.leader.rebalance.enable). Unlike Kafka, it does not wait for a
// broker's share of non-preferred leaders to pass a ratio: every
// partition goes back, which is what keeps load even after a rolling
// restart.
func (s *Store) rebalance(ctx context.Context) {
	parts := unbalanced(s.State())
	if len(parts) == 0 {
		return
	}
	res, err := s.propose(ctx, kindElectLeaders, electLeadersCmd{Partitions: parts})
	if err != nil {
		if ctx.Err() == nil {
			s.ctl.log.Warn("rebalance leaders", "err", err)
		}
		return
	}
	n := 0
	for _, err := range res.elected {
		if err == nil {
			n++
		}
	}
	s.ctl.log.Info("moved leaders back to preferred replicas", "partitions", n)
}

// checkController fails unless this node is the controller.
func (s *Store) checkController(what string) error {
	s.mu.Lock()
	closed := s.mu.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if !s.IsLeader() {
		return fmt.Errorf("%w: %s", ErrNotController, what)
	}
	return nil
}

// RegisterBroker admits a broker incarnation and returns its broker epoch.
// A retry of the same incarnation is admitted again (and, if nothing
// changed, answered the same epoch). A different incarnation of an id
// whose current one is unfenced, not shutting down and heartbeating within
// SessionTimeout is ErrDuplicateBroker: two live processes claim the id.
// The exception is the controller's own id registered by an earlier
// process on this node (see controller.openIndex): that one is dead.
func (s *Store) RegisterBroker(ctx context.Context, r Registration) (int64, error) {
	if err := s.checkController(fmt.Sprintf("registering broker %d", r.ID)); err != nil {
		return -1, err
	}
	if r.ID < 0 {
		return -1, fmt.Errorf("meta: broker id %d is negative", r.ID)
	}
	if r.Incarnation == "" {
		return -1, fmt.Errorf("meta: broker %d registers without an incarnation id", r.ID)
	}
	s.ctl.regMu.Lock()
	defer s.ctl.regMu.Unlock()
	old, ok := s.State().Brokers[r.ID]
	if ok && old.Incarnation != r.Incarnation && !old.Fenced && !old.ShuttingDown &&
		!(r.ID == s.ctl.self && uint64(old.Epoch) <= s.ctl.openIndex) &&
		!s.ctl.expired(r.ID, s.ctl.now()) {
		return -1, fmt.Errorf("%w: broker %d (epoch %d) heartbeated within %v", ErrDuplicateBroker, r.ID, old.Epoch, s.ctl.session)
	}
	res, err := s.propose(ctx, kindRegisterBroker, registerBrokerCmd{Broker: Broker{
		ID: r.ID, Host: r.Host, Port: r.Port, Endpoints: r.Endpoints, Rack: r.Rack, Incarnation: r.Incarnation,
	}})
	if err != nil {
		return -1, err
	}
	s.ctl.touch(r.ID)
	return res.epoch, nil
}

// Heartbeat records that the broker incarnation r.Epoch is alive. A
// heartbeat from another incarnation than the registered one is
// ErrStaleBrokerEpoch: that process must register again. A fenced broker
// that heartbeats again (it was paused, or cut off, past its session) is
// unfenced. WantShutdown starts, or continues, a controlled shutdown (see
// applyControlledShutdown); the reply's ShouldShutdown says the broker
// may stop: it leads nothing another broker could lead.
func (s *Store) Heartbeat(ctx context.Context, r HeartbeatRequest) (HeartbeatReply, error) {
	if err := s.checkController(fmt.Sprintf("heartbeat of broker %d", r.ID)); err != nil {
		return HeartbeatReply{}, err
	}
	b, ok := s.State().Brokers[r.ID]
	if !ok || b.Epoch != r.Epoch {
		return HeartbeatReply{}, fmt.Errorf("%w: broker %d epoch %d", ErrStaleBrokerEpoch, r.ID, r.Epoch)
	}
	s.ctl.touch(r.ID)
	if b.Fenced {
		if _, err := s.propose(ctx, kindUnfenceBroker, brokerEpochCmd{ID: r.ID, Epoch: r.Epoch}); err != nil {
			return HeartbeatReply{}, err
		}
	}
	if r.WantShutdown && !(b.ShuttingDown && readyToShutdown(s.State(), r.ID)) {
		if _, err := s.propose(ctx, kindControlledShutdown, brokerEpochCmd{ID: r.ID, Epoch: r.Epoch}); err != nil {
			return HeartbeatReply{}, err
		}
	}
	st := s.State()
	b, ok = st.Brokers[r.ID]
	if !ok || b.Epoch != r.Epoch {
		return HeartbeatReply{}, fmt.Errorf("%w: broker %d epoch %d", ErrStaleBrokerEpoch, r.ID, r.Epoch)
	}
	return HeartbeatReply{Fenced: b.Fenced, ShouldShutdown: readyToShutdown(st, r.ID)}, nil
}

// AlterPartitionRequest is a partition leader's request to change the
// partition's ISR (Kafka's AlterPartition, KIP-497): it names the
// leadership it acts under (BrokerEpoch, LeaderEpoch) and the state it
// decided from (PartitionEpoch).
type AlterPartitionRequest struct {
	Topic          string
	Partition      int32
	BrokerID       int32
	BrokerEpoch    int64
	LeaderEpoch    int32
	PartitionEpoch int32
	ISR            []int32
	// ISREpochs, when set, is the broker epoch of each ISR member (same
	// order) as the leader saw it on that member's fetches, -1 where it
	// cannot tell (AlterPartition v3, KIP-903): a joiner whose registration
	// is at another epoch caught up in a previous life, and is refused.
	ISREpochs []int64 `json:",omitempty"`
}

// AlterPartition changes a partition's ISR for its leader and returns the
// partition as it is then. It is refused with ErrUnknownTopicOrPartition,
// ErrStaleBrokerEpoch (the broker's registration is newer than the
// request), ErrFencedLeaderEpoch (not the leader, or not at this leader
// epoch), ErrInvalidUpdateVersion (the partition changed since the leader
// read it; refresh and decide again) or ErrIneligibleReplica (an ISR with
// a non-replica, a fenced or shutting-down newcomer, a newcomer at another
// broker epoch than its registration, or without the leader). All checks run in the FSM, so of two racing requests decided
// from the same partition epoch only the first is applied.
func (s *Store) AlterPartition(ctx context.Context, r AlterPartitionRequest) (Partition, error) {
	if err := s.checkController(fmt.Sprintf("AlterPartition of %s-%d", r.Topic, r.Partition)); err != nil {
		return Partition{}, err
	}
	res, err := s.propose(ctx, kindAlterPartition, alterPartitionCmd(r))
	if err != nil {
		return Partition{}, err
	}
	return res.partition, nil
}

// ElectLeaders runs leader elections (Kafka's ElectLeaders, KIP-460).
// Preferred (unclean false): each partition's first replica leads if it is
// in the ISR, alive and not shutting down. Unclean: each offline
// partition gets its first alive replica, in sync or not. parts nil means
// every partition; then partitions that needed no election are left out of
// the result. A nil error in the result means elected; otherwise
// ErrElectionNotNeeded, ErrPreferredLeaderNotAvailable,
// ErrEligibleLeadersNotAvailable or ErrUnknownTopicOrPartition.
func (s *Store) ElectLeaders(ctx context.Context, unclean bool, parts []TopicPartition) (map[TopicPartition]error, error) {
	if err := s.checkController("ElectLeaders"); err != nil {
		return nil, err
	}
	res, err := s.propose(ctx, kindElectLeaders, electLeadersCmd{Unclean: unclean, All: parts == nil, Partitions: parts})
	if err != nil {
		return nil, err
	}
	return res.elected, nil
}
