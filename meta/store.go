// Package meta owns the cluster metadata: brokers, topics, their IDs and
// configs, and each partition's replicas, ISR, leader and leader epoch. The
// metadata is a replicated state machine on hashicorp/raft, with the raft
// log and stable store in Badger (meta/internal/badgerstore) and snapshots
// in raft's file snapshot store. A single node is a one-voter quorum, so a
// laptop and a cluster run the same code; the raft leader is the
// controller. With Config.Voters, the voters talk raft over TCP and
// bootstrap themselves (quorum.go); other nodes join as non-voters.
//
// The controller's decisions (admitting brokers, fencing them, electing
// leaders, changing ISRs, placing replicas) are commands like any other,
// decided by pure functions of the State in Apply (election.go); only the
// heartbeat clock lives outside the log, in the leader's memory
// (controller.go).
//
// Consensus decides metadata only. No record ever passes through here: the
// broker reads State and reconciles its partitions when Changed fires.
//
// Layout under Config.Dir:
//
//	raft/        Badger database: raft log entries and stable store
//	snapshots/   raft FileSnapshotStore; JSON state (see snapshotV1)
//	node-id      the node id whose metadata this is, in decimal
package meta

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"strata/meta/internal/badgerstore"
)

// Config configures a Store. Only Dir is required.
type Config struct {
	// NodeID is this node's broker ID, and its raft server ID.
	NodeID int32
	// Dir holds the raft log, stable store and snapshots; created if
	// missing.
	Dir string
	// RaftAddr is the TCP address raft binds to for talking to peers. Empty
	// means an in-memory transport: a single node that can never have
	// peers (only without Voters). Either way, a node that is the only
	// voter of its raft configuration uses short timeouts, since nobody
	// else could lead. A voter's RaftAddr must be its entry's address, or
	// the same port on an unspecified host (0.0.0.0) to listen everywhere.
	RaftAddr string
	// Voters is the quorum's voting set. Empty means a one-node store,
	// as Bootstrap says. Otherwise a node listed here is a voter and,
	// without raft state, bootstraps all of Voters (each voter the same
	// configuration, so no separate bootstrap step); a node not listed
	// starts without bootstrapping and waits for the controller to add it
	// as a non-voter (AddNonvoter). With state, the stored configuration
	// wins and Voters only serves to warn when they differ.
	Voters []Voter
	// Bootstrap makes a node without raft state and without Voters start
	// a cluster of which it is the only voter. It is ignored when state
	// exists, and with Voters.
	Bootstrap bool
	// Logger receives raft's warnings and errors, and Badger's. Nil
	// discards them.
	Logger *slog.Logger

	// SessionTimeout is how long the controller waits for a broker's
	// heartbeat before fencing it (Kafka's broker.session.timeout.ms).
	// Zero means DefaultSessionTimeout.
	SessionTimeout time.Duration
	// RebalanceInterval is how often the controller moves leadership back
	// to preferred replicas. Zero means DefaultRebalanceInterval.
	RebalanceInterval time.Duration
	// Now is the controller's clock, for session timeouts and rebalancing.
	// Nil means time.Now; tests inject their own.
	Now func() time.Time
	// ClusterID is the id this node, as the first controller of a new
	// cluster, names the cluster with (State.ClusterID). Empty picks a
	// random one. A cluster already named keeps its id.
	ClusterID string
	// TLS is the server side of the raft port: set, every connection to
	// it (raft, the join handler, the voters query) must complete a TLS
	// handshake first. It should require and verify client certificates
	// against the cluster CA (certs.ClientAuthRequire), so that only the
	// cluster's nodes join and read the quorum. DialTLS is the client
	// side, this node's certificate and the cluster CA, for reaching the
	// other nodes' raft ports. Set both or neither.
	TLS, DialTLS *tls.Config
	// HoldNaming, when set, keeps this node's controller from naming the
	// cluster until it is closed: for tests of a quorum whose controller
	// is of a version before clusters had ids, which never names it.
	HoldNaming <-chan struct{}
}

const (
	// DefaultSessionTimeout is shorter than Kafka's 9s so that a killed
	// leader stalls producers for less than 3s: fencing it is what moves
	// its leaderships.
	DefaultSessionTimeout = 2 * time.Second
	// DefaultRebalanceInterval is how often the controller looks for
	// leaders to move back to their preferred replica.
	DefaultRebalanceInterval = 10 * time.Second
)

func (c *Config) validate() error {
	if c.Dir == "" {
		return errors.New("meta: Config.Dir is empty")
	}
	if c.SessionTimeout < 0 {
		return fmt.Errorf("meta: Config.SessionTimeout %v is negative", c.SessionTimeout)
	}
	if c.RebalanceInterval < 0 {
		return fmt.Errorf("meta: Config.RebalanceInterval %v is negative", c.RebalanceInterval)
	}
	if c.NodeID < 0 {
		return fmt.Errorf("meta: Config.NodeID %d is negative", c.NodeID)
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	if err := CheckQuorum(c.NodeID, c.RaftAddr, c.Voters); err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	return nil
}

const (
	// Metadata entries are small and few, so snapshots are cheap: take one
	// every snapshotThreshold entries (checked every snapshotInterval) and
	// keep trailingLogs behind it, enough for a briefly lagging follower to
	// catch up from the log instead of a snapshot.
	snapshotThreshold = 1024
	snapshotInterval  = 30 * time.Second
	trailingLogs      = 1024
	retainSnapshots   = 2

	// soleVoterTimeout is the heartbeat, election and lease timeout of a
	// node that is the only voter: its first election is won the moment the
	// heartbeat timer fires, so this is how long Open waits for leadership.
	// Nobody else could lead, so a short timeout costs nothing.
	soleVoterTimeout = 100 * time.Millisecond
	// quorumTimeout is the heartbeat and election timeout of a quorum of
	// several voters (raft's default is 1 s).
	quorumTimeout = 500 * time.Millisecond

	tcpMaxPool = 3
	tcpTimeout = 10 * time.Second
)

// Store is this node's view of the cluster metadata and, while it is the
// raft leader, the controller that changes it. Methods are safe for
// concurrent use.
type Store struct {
	nodeID raft.ServerID
	fsm    *fsm
	logs   *badgerstore.Store
	trans  interface {
		raft.Transport
		io.Closer
	}
	raft *raft.Raft
	ctl  *controller
	// hold is trans on TCP, nil in memory: its held replication RPCs are
	// released before raft shuts down (hold.go).
	hold *holdingTransport
	// raftReady is closed once raft is set: join requests that arrive
	// while the node starts wait for it.
	raftReady chan struct{}
	// storedConf is the raft configuration found in Dir at start, for
	// voters queries answered before raft runs; nil until read, or none.
	storedConf atomic.Pointer[raft.Configuration]
	// tls is the raft port's TLS, none when Config.TLS is nil.
	tls raftTLS

	mu struct {
		sync.Mutex
		closed bool // guarded by mu, so that wg.Add never races wg.Wait
	}
	// wg counts goroutines waiting on raft futures for a caller whose ctx
	// may end first; raft's shutdown answers every future, so they exit.
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Open opens the metadata store in cfg.Dir, creating and bootstrapping it
// if asked, and returns once a raft leader is known and, on the leader,
// the state reflects every committed entry. It fails when ctx ends first.
//
// A node outside Config.Voters does not wait for a leader: until the
// controller adds it, it knows none and its State stays as stored.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	inmem := cfg.RaftAddr == ""
	selfVoter, isVoter := cfg.selfVoter()
	nonvoter := len(cfg.Voters) > 0 && !isVoter
	hl := newHCLogAdapter(logger)
	hl.nonvoter.Store(nonvoter)

	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("meta: data directory: %w", err)
	}
	s := &Store{
		nodeID:    raft.ServerID(strconv.Itoa(int(cfg.NodeID))),
		fsm:       newFSM(),
		raftReady: make(chan struct{}),
		tls:       raftTLS{server: cfg.TLS, client: cfg.DialTLS},
	}
	s.ctl = newController(cfg)
	opened := false
	defer func() {
		if !opened {
			s.Close()
		}
	}()

	var err error
	s.logs, err = badgerstore.Open(filepath.Join(cfg.Dir, "raft"), logger)
	if err != nil {
		return nil, fmt.Errorf("meta: raft log: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.Dir, retainSnapshots, hl)
	if err != nil {
		return nil, fmt.Errorf("meta: snapshot store: %w", err)
	}
	if inmem {
		// A fixed address, because the bootstrap configuration persists it.
		_, s.trans = raft.NewInmemTransport(raft.ServerAddress("inmem:" + string(s.nodeID)))
	} else {
		// A voter advertises its entry, which lets it listen on 0.0.0.0.
		var adv net.Addr
		if isVoter {
			if adv, err = net.ResolveTCPAddr("tcp", selfVoter.Addr); err != nil {
				return nil, fmt.Errorf("meta: voter entry %s: %w", selfVoter, err)
			}
		}
		stream, err := newMuxStream(cfg.RaftAddr, adv, s.tls, s.handleJoin, s.handleVoters, logger)
		if err != nil {
			return nil, fmt.Errorf("meta: raft transport on %s: %w", cfg.RaftAddr, err)
		}
		s.hold = newHoldingTransport(raft.NewNetworkTransportWithLogger(stream, tcpMaxPool, tcpTimeout, hl), s.leadingIn, s.peerAddr)
		s.trans = s.hold
	}

	rc := raft.DefaultConfig()
	rc.LocalID = s.nodeID
	rc.Logger = hl
	rc.NoLegacyTelemetry = true
	rc.SnapshotThreshold = snapshotThreshold
	rc.SnapshotInterval = snapshotInterval
	rc.TrailingLogs = trailingLogs

	exists, err := raft.HasExistingState(s.logs, s.logs, snaps)
	if err != nil {
		return nil, fmt.Errorf("meta: inspect raft state in %s: %w", cfg.Dir, err)
	}
	boot, bootstrap := cfg.bootstrapConfiguration(s.trans.LocalAddr())
	sole := inmem || (!exists && bootstrap && isSoleVoter(boot, s.nodeID))
	if exists {
		// Read the persisted membership without starting raft (on a copy:
		// GetConfiguration marks the config it is given).
		probe := *rc
		conf, err := raft.GetConfiguration(&probe, newFSM(), s.logs, s.logs, snaps, s.trans)
		if err != nil {
			return nil, fmt.Errorf("meta: read raft configuration in %s: %w", cfg.Dir, err)
		}
		// A node outside its own stored membership can never be elected
		// nor hear from a leader: raft would wait forever. That is a data
		// dir started under another node id.
		if err := checkMember(conf, cfg); err != nil {
			return nil, err
		}
		sole = sole || isSoleVoter(conf, s.nodeID)
		if len(cfg.Voters) > 0 && !sameVoters(conf, cfg.Voters) {
			// Changing the voters of a running quorum takes membership
			// changes, which are not built: running on the stored set
			// while told another would leave the quorum's membership to
			// whichever node leads.
			return nil, &VotersMismatchError{Setting: cfg.Voters, Quorum: confVoters(conf), From: "stored in " + cfg.Dir}
		}
		s.storedConf.Store(&conf)
	}
	if isVoter && len(cfg.Voters) > 1 {
		// Without state this node would bootstrap the setting's voters;
		// with state, the stored set matches the setting but may still
		// not be the quorum's (a node bootstrapped alone on a wrong
		// setting). The other voters say which set the quorum runs.
		if err := checkPeerVoters(ctx, s.tls, cfg.NodeID, cfg.Voters); err != nil {
			return nil, err
		}
	}
	if err := writeNodeID(cfg, exists); err != nil {
		return nil, err
	}
	if sole {
		rc.HeartbeatTimeout = soleVoterTimeout
		rc.ElectionTimeout = soleVoterTimeout
		rc.LeaderLeaseTimeout = soleVoterTimeout
		hl.soleVoter.Store(true)
	} else {
		// A dead controller costs its election time on top of the broker
		// session before its partitions move: raft's 1 s defaults would
		// make a controller's death stall producers twice as long as any
		// other broker's. Half of it still leaves a LAN (and a loaded
		// loopback) several heartbeats of slack.
		rc.HeartbeatTimeout = quorumTimeout
		rc.ElectionTimeout = quorumTimeout
		rc.LeaderLeaseTimeout = quorumTimeout / 2
	}
	if !exists {
		switch {
		case bootstrap:
			if err := raft.BootstrapCluster(rc, s.logs, s.logs, snaps, s.trans, boot); err != nil {
				return nil, fmt.Errorf("meta: bootstrap raft in %s: %w", cfg.Dir, err)
			}
		case inmem:
			// Nothing could ever make this node a member.
			return nil, fmt.Errorf("meta: no raft state in %s and Bootstrap not set", cfg.Dir)
		}
	}
	s.raft, err = raft.NewRaft(rc, s.fsm, s.logs, closingStable{s.logs}, snaps, s.trans)
	if err != nil {
		return nil, fmt.Errorf("meta: start raft: %w", err)
	}
	// Everything in the log before this point is from before this process
	// started: see controller.openIndex.
	s.ctl.openIndex = s.raft.LastIndex()
	close(s.raftReady)
	s.startController()
	if nonvoter {
		// A broker-only node asks the voters to add it; until one has,
		// it knows no metadata and no controller.
		self := Voter{ID: cfg.NodeID, Addr: string(s.trans.LocalAddr())}
		if err := join(ctx, s.tls, self, cfg.Voters, s.ctl.session, logger); err != nil {
			return nil, err
		}
	}
	if !nonvoter {
		if err := s.waitReady(ctx, logger, cfg.Voters); err != nil {
			return nil, err
		}
	}
	opened = true
	return s, nil
}

// OtherNodeError is returned by Open for stored metadata that is not
// Config.NodeID's: a data dir made by another node (or started earlier
// under another node id). Its raft membership lacks the node, or its
// node-id file names another.
type OtherNodeError struct {
	Dir     string   // Config.Dir
	Members []string // node ids of the stored membership
	Node    int32    // Config.NodeID
	// Owner is the node whose metadata it is, from the node-id file;
	// -1 when the file is missing (a data dir older than the file).
	Owner int32
}

func (e *OtherNodeError) Error() string {
	return fmt.Sprintf("meta: %s holds the metadata of %s, not of node %d", e.Dir, e.MadeBy(), e.Node)
}

// MadeBy names the node whose metadata it is or, when that is not
// recorded and the membership has several nodes, the quorum it belongs to
// (every voter's data dir holds the same membership, so the membership
// alone does not say whose it is).
func (e *OtherNodeError) MadeBy() string {
	switch {
	case e.Owner >= 0:
		return "node " + strconv.Itoa(int(e.Owner))
	case len(e.Members) == 1:
		return "node " + e.Members[0]
	}
	return "a member of the metadata quorum of nodes " + strings.Join(e.Members, ", ")
}

// nodeIDFile, in Config.Dir, records the node whose metadata it is.
const nodeIDFile = "node-id"

// storedNodeID reads dir's node-id file: -1 if there is none.
func storedNodeID(dir string) (int32, error) {
	b, err := os.ReadFile(filepath.Join(dir, nodeIDFile))
	if errors.Is(err, os.ErrNotExist) {
		return -1, nil
	}
	if err != nil {
		return -1, fmt.Errorf("meta: %w", err)
	}
	id, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 32)
	if err != nil || id < 0 {
		return -1, fmt.Errorf("meta: %s does not hold a node id: %q", filepath.Join(dir, nodeIDFile), b)
	}
	return int32(id), nil
}

// writeNodeID records cfg.NodeID in cfg.Dir's node-id file. With raft
// state (exists), a file already there is left alone: checkMember has
// compared it. Without, the dir becomes this node's whatever a file left
// from a wiped log says.
func writeNodeID(cfg Config, exists bool) error {
	if exists {
		if id, err := storedNodeID(cfg.Dir); err != nil || id >= 0 {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(cfg.Dir, nodeIDFile), []byte(strconv.Itoa(int(cfg.NodeID))+"\n"), 0o644); err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	return nil
}

// checkMember fails unless cfg.NodeID is a server of conf and, where the
// node-id file says whose metadata it is, that node.
func checkMember(conf raft.Configuration, cfg Config) error {
	owner, err := storedNodeID(cfg.Dir)
	if err != nil {
		return err
	}
	id := raft.ServerID(strconv.Itoa(int(cfg.NodeID)))
	e := &OtherNodeError{Dir: cfg.Dir, Node: cfg.NodeID, Owner: owner}
	member := false
	for _, srv := range conf.Servers {
		member = member || srv.ID == id
		e.Members = append(e.Members, string(srv.ID))
	}
	if member && (owner < 0 || owner == cfg.NodeID) {
		return nil
	}
	return e
}

// isSoleVoter reports whether id is the only voter in conf.
func isSoleVoter(conf raft.Configuration, id raft.ServerID) bool {
	voters := 0
	self := false
	for _, srv := range conf.Servers {
		if srv.Suffrage == raft.Voter {
			voters++
			self = self || srv.ID == id
		}
	}
	return voters == 1 && self
}

// ErrStoppedWaiting is wrapped by Open's error when ctx ended while the
// node waited for a quorum: to hear from a controller, for a majority of
// the voters to elect one, or (a broker-only node) to be let in.
var ErrStoppedWaiting = errors.New("meta: stopped while waiting for a quorum")

// waitReady waits for a leader to be known and, if it is this node, for the
// FSM to have applied the log it inherited, so State is current on return.
func (s *Store) waitReady(ctx context.Context, logger *slog.Logger, voters []Voter) error {
	ch := make(chan raft.Observation, 1)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	s.raft.RegisterObserver(obs)
	defer s.raft.DeregisterObserver(obs)
	// The channel only wakes us; the leader is read back after registering,
	// so an election that finished before registration is not missed.
	var since time.Time
	said := false
	for {
		if addr, id := s.raft.LeaderWithID(); addr != "" {
			if said {
				logger.Info("found the controller", "controller", id, "waited", time.Since(since).Round(time.Millisecond))
			}
			break
		}
		if since.IsZero() {
			since = time.Now()
			if len(voters) > 1 {
				// Otherwise a voter started before its peers says
				// nothing. A restarted voter waits here too until the
				// controller's first heartbeat reaches it.
				logger.Info("waiting to hear from the controller, or for a majority of the voters to elect one", "voters", voters)
				said = true
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrStoppedWaiting, context.Cause(ctx))
		}
	}
	if s.raft.State() != raft.Leader {
		return nil
	}
	if err := s.wait(ctx, s.raft.Barrier(timeoutOf(ctx))); err != nil {
		return fmt.Errorf("meta: catching up with the raft log: %w", err)
	}
	return nil
}

// Close stops raft and closes the log store. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.mu.closed = true
		s.mu.Unlock()
		// The controller goes first: its loop proposes through raft.
		s.stopController()
		if s.hold != nil {
			s.hold.release() // raft's shutdown waits for held RPCs
		}
		var errs []error
		if s.raft != nil {
			if err := s.raft.Shutdown().Error(); err != nil {
				errs = append(errs, fmt.Errorf("meta: raft shutdown: %w", err))
			}
		}
		s.wg.Wait()
		// Closing the TCP transport only stops its listener: the
		// connections it pooled to peers stay open, and so do the peers'
		// goroutines serving them, until someone closes them.
		if cs, ok := s.trans.(interface{ CloseStreams() }); ok {
			cs.CloseStreams()
		}
		if s.trans != nil {
			if err := s.trans.Close(); err != nil {
				errs = append(errs, fmt.Errorf("meta: raft transport: %w", err))
			}
		}
		if s.logs != nil {
			if err := s.logs.Close(); err != nil {
				errs = append(errs, fmt.Errorf("meta: raft log: %w", err))
			}
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// State returns the current metadata. It is immutable: hold it as long as
// needed, never modify it.
func (s *Store) State() *State { return s.fsm.state() }

// Changed returns a channel closed when the next State is published. To
// miss nothing, call Changed before State:
//
//	for {
//		ch := s.Changed()
//		reconcile(s.State())
//		<-ch
//	}
func (s *Store) Changed() <-chan struct{} { return s.fsm.changed() }

// leadingIn reports whether this node is the raft leader in term.
func (s *Store) leadingIn(term uint64) bool {
	select {
	case <-s.raftReady:
	default:
		return false
	}
	return s.raft.State() == raft.Leader && s.raft.CurrentTerm() == term
}

// peerAddr returns the address of server id in raft's latest
// configuration (the one replication follows), or false when id is not in
// it. raft's GetConfiguration reads a copy kept aside (hashicorp/raft
// v1.8 api.go), so it never waits on raft's main loop, which may itself be
// waiting on the held RPC that asks.
func (s *Store) peerAddr(id raft.ServerID) (raft.ServerAddress, bool) {
	select {
	case <-s.raftReady:
	default:
		return "", false
	}
	for _, srv := range s.raft.GetConfiguration().Configuration().Servers {
		if srv.ID == id {
			return srv.Address, true
		}
	}
	return "", false
}

// IsLeader reports whether this node is the raft leader, and so the
// controller.
func (s *Store) IsLeader() bool { return s.raft.State() == raft.Leader }

// Resign hands the quorum's leadership to another voter if this node
// holds it and there is another voter to take it. A controller stopped on
// purpose then costs the quorum one round trip, not an election timeout
// of silence before the others notice it is gone, with every voter
// complaining of it meanwhile; Kafka's controllers resign on shutdown the
// same way. raft bounds the hand-over by an election timeout.
func (s *Store) Resign() error {
	select {
	case <-s.raftReady:
	default:
		return nil
	}
	if s.raft.State() != raft.Leader {
		return nil
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("meta: resign: %w", err)
	}
	others := 0
	for _, srv := range f.Configuration().Servers {
		if srv.Suffrage == raft.Voter && srv.ID != s.nodeID {
			others++
		}
	}
	if others == 0 {
		return nil
	}
	if err := s.raft.LeadershipTransfer().Error(); err != nil {
		return fmt.Errorf("meta: resign the quorum's leadership: %w", err)
	}
	return nil
}

// ControllerID returns the node ID of the raft leader, or -1 if none is
// known.
func (s *Store) ControllerID() int32 {
	_, id := s.raft.LeaderWithID()
	n, err := strconv.ParseInt(string(id), 10, 32)
	if err != nil {
		return -1
	}
	return int32(n)
}

// TopicSpec describes a topic to create. Names, configs and defaults (such
// as a replication factor of -1) are the caller's to validate and resolve.
type TopicSpec struct {
	Name              string
	Partitions        int32
	ReplicationFactor int16
	Configs           map[string]string
	Internal          bool
	// ID is the topic's UUID; zero means generate a random (v4) one.
	ID [16]byte
	// Assignment, when set, is each partition's replica list, preferred
	// leader first; Partitions and ReplicationFactor must agree with it.
	Assignment [][]int32
}

// CreateTopic creates a topic, assigning its partitions round-robin over
// the registered brokers. It returns ErrTopicExists, ErrInvalidPartitions or
// ErrInvalidReplicationFactor (more replicas than brokers) on bad requests.
func (s *Store) CreateTopic(ctx context.Context, spec TopicSpec) (Topic, error) {
	id := spec.ID
	if id == ([16]byte{}) {
		id = newTopicID()
	}
	res, err := s.propose(ctx, kindCreateTopic, createTopicCmd{
		Name:              spec.Name,
		ID:                id,
		Internal:          spec.Internal,
		Partitions:        spec.Partitions,
		ReplicationFactor: spec.ReplicationFactor,
		Configs:           spec.Configs,
		Assignment:        spec.Assignment,
	})
	if err != nil {
		return Topic{}, err
	}
	// The other nodes learn that the topic is committed from the next
	// entry raft sends them, which without one comes up to its commit
	// timeout (50 ms) later: the new topic's leaders and followers would
	// open its partitions only then, while the client, told it exists,
	// is already writing to it. An empty entry tells them now; nothing
	// waits for it.
	s.raft.Barrier(0)
	return *res.topic.clone(), nil
}

// DeleteTopic deletes the named topic and returns it as it was, so the
// caller can find its data by ID. It returns ErrUnknownTopic if there is no
// such topic.
func (s *Store) DeleteTopic(ctx context.Context, name string) (Topic, error) {
	res, err := s.propose(ctx, kindDeleteTopic, deleteTopicCmd{Name: name})
	if err != nil {
		return Topic{}, err
	}
	return *res.topic.clone(), nil
}

// CreatePartitions grows the named topic to count partitions, keeping its
// replication factor. Shrinking or staying put is ErrInvalidPartitions.
func (s *Store) CreatePartitions(ctx context.Context, name string, count int32) error {
	_, err := s.propose(ctx, kindCreatePartitions, createPartitionsCmd{Name: name, Count: count})
	return err
}

// AlterConfigs changes the named topic's configs. With replace, the configs
// become exactly set (Kafka's AlterConfigs); otherwise set's keys are set and
// then del's keys removed (IncrementalAlterConfigs).
func (s *Store) AlterConfigs(ctx context.Context, name string, set map[string]string, del []string, replace bool) error {
	_, err := s.propose(ctx, kindAlterConfigs, alterConfigsCmd{Name: name, Set: set, Delete: del, Replace: replace})
	return err
}

// AllocateProducerIDs durably reserves n idempotent-producer ids and
// returns the first; no id is ever handed out twice, across restarts and
// (with clustering) across brokers.
func (s *Store) AllocateProducerIDs(ctx context.Context, n int64) (int64, error) {
	res, err := s.propose(ctx, kindAllocateProducerIDs, allocateProducerIDsCmd{Count: n})
	if err != nil {
		return -1, err
	}
	return res.firstID, nil
}

// propose commits a command through raft and returns what the FSM said.
func (s *Store) propose(ctx context.Context, k kind, payload any) (result, error) {
	data, err := encodeCommand(k, payload)
	if err != nil {
		return result{}, err
	}
	if err := ctx.Err(); err != nil {
		return result{}, fmt.Errorf("meta: %w", err)
	}
	f := s.raft.Apply(data, timeoutOf(ctx))
	if err := s.wait(ctx, f); err != nil {
		return result{}, err
	}
	res, _ := f.Response().(result)
	return res, res.err
}

// timeoutOf turns ctx's deadline into raft's enqueue timeout; 0 means none.
func timeoutOf(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	// A deadline already past must not become "no timeout".
	return max(time.Until(dl), time.Nanosecond)
}

// wait waits for f or ctx. When ctx ends first the command is left to raft
// and may still be applied, as with any timed-out request to a quorum.
func (s *Store) wait(ctx context.Context, f raft.Future) error {
	if ctx.Done() == nil {
		return raftError(f.Error())
	}
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		defer s.wg.Done()
		done <- f.Error()
	}()
	select {
	case err := <-done:
		return raftError(err)
	case <-ctx.Done():
		return fmt.Errorf("meta: %w: %w", ErrOutcomeUnknown, context.Cause(ctx))
	}
}

func raftError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrLeadershipLost):
		// The entry was in the log when leadership went: the next
		// leader may commit it.
		return fmt.Errorf("%w: %w: %w", ErrNotController, ErrOutcomeUnknown, err)
	case errors.Is(err, raft.ErrNotLeader),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return fmt.Errorf("%w: %w", ErrNotController, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("meta: %w: %w", context.DeadlineExceeded, err)
	}
	return fmt.Errorf("meta: raft: %w", err)
}

// newTopicID returns a random version 4 UUID that Kafka accepts as a topic
// ID: never the zero or metadata-topic UUIDs (the version bits rule both
// out), and never one whose base64 form starts with '-', which Kafka's
// Uuid.randomUuid also avoids so that IDs never look like command-line
// flags.
func newTopicID() [16]byte {
	var id [16]byte
	for {
		rand.Read(id[:]) // never fails since Go 1.24
		id[6] = id[6]&0x0f | 0x40
		id[8] = id[8]&0x3f | 0x80
		if id[0]>>2 != 62 { // 62 is '-' in base64url
			return id
		}
	}
}

// closingStable is the raft stable store. The TCP transport serves
// heartbeats on its own goroutines, outside the ones raft.Shutdown waits
// for: one that passed raft's shutdown check just before Close may update
// the current term after the store closed, and raft panics on a failed
// write. Such a write is dropped instead. Nothing is lost that matters: a
// shut-down raft grants no vote (votes go through its main loop, stopped
// first), and a term learnt from a heartbeat is learnt again from the
// leader's next one after a restart.
type closingStable struct{ *badgerstore.Store }

func (c closingStable) Set(key, val []byte) error {
	if err := c.Store.Set(key, val); err != nil && !errors.Is(err, badgerstore.ErrClosed) {
		return err
	}
	return nil
}

func (c closingStable) SetUint64(key []byte, val uint64) error {
	if err := c.Store.SetUint64(key, val); err != nil && !errors.Is(err, badgerstore.ErrClosed) {
		return err
	}
	return nil
}
