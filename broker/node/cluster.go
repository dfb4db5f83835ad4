package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/meta"
	"strata/tier"
)

// A broker's life in the cluster (docs/replication.md, steps 1-2): it
// registers with the controller under a fresh incarnation id, and
// heartbeats; a broker whose heartbeats stop is fenced by the controller
// and its leaderships move. On the controller itself the calls go straight
// to the metadata store; other brokers send Kafka's own inter-broker
// requests (BrokerRegistration, BrokerHeartbeat, AlterPartition,
// AllocateProducerIds) to the controller's listener, through Controller.

// clusterState is what the broker keeps of its registration.
type clusterState struct {
	incarnation [16]byte
	// epoch is the broker epoch the controller gave this incarnation.
	epoch struct {
		sync.Mutex
		v int64
	}
	// shutdown is closed once controlled shutdown has begun; heartbeats
	// then ask to shut down.
	wantShutdown     chan struct{}
	wantShutdownOnce sync.Once
	shutdownDone     chan struct{} // closed when the controller said ShouldShutdown
	shutdownDoneOnce sync.Once
	// lastHeartbeat is when the controller last answered a heartbeat
	// (unix nanoseconds).
	lastHeartbeat atomic.Int64
}

func (c *clusterState) brokerEpoch() int64 {
	c.epoch.Lock()
	defer c.epoch.Unlock()
	return c.epoch.v
}

func (c *clusterState) setEpoch(e int64) {
	c.epoch.Lock()
	c.epoch.v = e
	c.epoch.Unlock()
}

func newIncarnation() [16]byte {
	var id [16]byte
	rand.Read(id[:])
	id[6] = id[6]&0x0f | 0x40
	id[8] = id[8]&0x3f | 0x80
	return id
}

// Clustered reports whether the node runs in a multi-node quorum. A
// single node is its own controller and registers in-process.
func (n *Node) Clustered() bool { return len(n.cfg.Voters) > 0 }

// newClusterState starts a broker's life: a fresh incarnation id, kept
// for every registration of this process.
func newClusterState() clusterState {
	return clusterState{incarnation: newIncarnation(), wantShutdown: make(chan struct{}), shutdownDone: make(chan struct{})}
}

// Join makes this node a member of the cluster: it registers this
// incarnation with the controller, waits until its own metadata has
// applied the registration, and waits briefly (briefClusterID) for the
// cluster's id, which it returns, empty when the controller has not named
// the cluster yet; AwaitClusterID then waits on. An id known now must be
// the configured cluster.id, if one is.
//
// The registration fenced this node's previous life, if it had one, and
// moved its leaderships: the partitions may open only once this node's
// metadata has that too, or a restarted leader would take writes at its
// old epoch for a moment.
func (n *Node) Join(ctx context.Context) (clusterID string, err error) {
	if err := n.register(ctx); err != nil {
		return "", err
	}
	if err := n.waitApplied(ctx, uint64(n.cluster.brokerEpoch())); err != nil {
		return "", err
	}
	n.unnamedSince = time.Now()
	id, err := n.briefClusterID(ctx)
	if err != nil {
		return "", err
	}
	if err := n.checkClusterID(id); err != nil {
		return "", err
	}
	return id, nil
}

// register registers this incarnation with the controller, retrying until
// the controller answers. A live broker already holding the node id makes
// the controller refuse: that is retried for a session timeout and a half,
// long enough for a previous life of this node that was killed to be
// fenced, and then reported as the start-up error.
func (n *Node) register(ctx context.Context) error {
	reg := meta.Registration{ID: n.cfg.NodeID, Host: n.cfg.Host, Port: n.cfg.Port, Endpoints: n.cfg.Endpoints, Rack: n.cfg.Rack, Incarnation: hex.EncodeToString(n.cluster.incarnation[:])}
	var dupSince time.Time
	backoff := 50 * time.Millisecond
	for {
		epoch, err := n.registerOnce(ctx, reg)
		if err == nil {
			n.cluster.setEpoch(epoch)
			return nil
		}
		if errors.Is(err, meta.ErrDuplicateBroker) || errors.Is(err, kerr.DuplicateBrokerRegistration) {
			if dupSince.IsZero() {
				dupSince = time.Now()
			}
			if time.Since(dupSince) > n.cfg.SessionTimeout*3/2 {
				return fmt.Errorf("node id %d is already registered by a live broker; is another process running with --node-id %d?", n.cfg.NodeID, n.cfg.NodeID)
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("register node %d with the controller: %w (last: %v)", n.cfg.NodeID, context.Cause(ctx), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// waitApplied waits until this node's metadata has applied the raft log up
// to index.
//
// It can take a while after a long outage, so a wait of more than a
// second says what it waits for.
func (n *Node) waitApplied(ctx context.Context, index uint64) error {
	start := time.Now()
	tell := time.NewTimer(time.Second)
	defer tell.Stop()
	for {
		changed := n.meta.Changed()
		if n.meta.State().Index >= index {
			if time.Since(start) > time.Second {
				n.log.Info("the metadata log reached this node's registration", "took", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		select {
		case <-changed:
		case <-tell.C:
			n.log.Info("waiting for the controller's metadata log to reach this node's registration",
				"controller", n.meta.ControllerID(), "registered_at", index, "applied", n.meta.State().Index)
		case <-ctx.Done():
			return fmt.Errorf("waiting for the metadata to reach this node's registration: %w", context.Cause(ctx))
		}
	}
}

// checkClusterID refuses to start a node configured with a cluster.id
// other than id, the one its metadata names: this node's data dir, or the
// quorum it joined, belongs to that other cluster. A metadata that names
// no cluster yet passes; awaitClusterID checks the id once it is known.
func (n *Node) checkClusterID(id string) error {
	if id != "" && n.cfg.ClusterID != "" && id != n.cfg.ClusterID {
		return n.otherClusterError(id)
	}
	return nil
}

func (n *Node) otherClusterError(id string) error {
	return fmt.Errorf("cluster.id is %s, but the metadata (data dir %s, or the quorum) is of cluster %s", n.cfg.ClusterID, n.cfg.DataDir, id)
}

// clusterNamedWait is how long a node waits quietly for the controller to
// name the cluster before it says it waits; Start waits as long at most.
const clusterNamedWait = time.Second

// briefClusterID returns the cluster's id, waiting up to clusterNamedWait
// for it, or "" if it is not known by then. A controller of this version
// names the cluster first thing, so the id is normally there at once or
// within a few milliseconds, and waiting for those keeps a bucket of
// another cluster refused at start rather than found out later.
func (n *Node) briefClusterID(ctx context.Context) (string, error) {
	bound := time.NewTimer(clusterNamedWait)
	defer bound.Stop()
	for {
		changed := n.meta.Changed()
		if id := n.ClusterID(); id != "" {
			return id, nil
		}
		select {
		case <-changed:
		case <-bound.C:
			return "", nil
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for the controller to name the cluster: %w", context.Cause(ctx))
		}
	}
}

// AwaitClusterID waits, behind a started broker, for the controller to
// name the cluster, and then gives the bucket the id to be claimed for.
// Start does not wait for it: a controller of a version before clusters
// had ids never names the cluster (its followers cannot even apply the
// name), so during a rolling upgrade the id comes only once a new
// controller is elected. Meanwhile the broker serves, Metadata and
// DescribeCluster report no id, and nothing is written to the bucket
// (tier.ClaimedStore): uploads fail and are retried, as when the store
// is down. It says, once, what it waits for after clusterNamedWait, and
// when the wait is over.
//
// It runs until the cluster is named or the node's context ends, after a
// Join that found no id.
func (n *Node) AwaitClusterID() {
	since := n.unnamedSince
	store, where := n.tierStore, n.TierWhere()
	tell := time.NewTimer(max(clusterNamedWait-time.Since(since), 0))
	defer tell.Stop()
	told := false
	for {
		changed := n.meta.Changed()
		if id := n.ClusterID(); id != "" {
			n.clusterNamed(id, told, since, store, where)
			return
		}
		select {
		case <-changed:
		case <-tell.C:
			told = true
			if store != nil {
				n.log.Info("waiting for the controller to name the cluster; uploads to the bucket wait for it", "controller", n.meta.ControllerID())
			} else {
				n.log.Info("waiting for the controller to name the cluster", "controller", n.meta.ControllerID())
			}
		case <-n.ctx.Done():
			return
		}
	}
}

// clusterNamed hands the cluster's id, now known, to the bucket and
// claims it, so that the bucket names its cluster before the first upload
// needs it; a claim that fails now is made by that upload.
func (n *Node) clusterNamed(id string, told bool, since time.Time, store *tier.ClaimedStore, where string) {
	if n.cfg.ClusterID != "" && id != n.cfg.ClusterID {
		// Too late to refuse the start; the bucket is neither cluster's
		// to claim, so nothing is written to it.
		err := n.otherClusterError(id)
		n.log.Error("this node is of another cluster than the one it was configured for: nothing is written to the bucket; fix cluster.id or the data dir, and restart", "err", err)
		if store != nil {
			store.Refuse(err)
		}
		return
	}
	if told {
		n.log.Info("the controller named the cluster", "cluster_id", id, "waited", time.Since(since).Round(time.Millisecond))
	}
	if store == nil {
		return
	}
	store.Name(id)
	ctx, cancel := context.WithTimeout(n.ctx, ClaimTimeout)
	err := store.Claim(ctx)
	cancel()
	if foreign := (*tier.ForeignBucketError)(nil); errors.As(err, &foreign) {
		n.log.Error("nothing is written to the bucket: it belongs to another cluster; each cluster needs a bucket or prefix of its own",
			"store", where, "bucket_cluster", foreign.Bucket, "cluster", foreign.Cluster)
	}
}

// ClusterID is the id Metadata and DescribeCluster report: the
// metadata's, empty until the controller names the cluster.
func (n *Node) ClusterID() string { return n.meta.State().ClusterID }

func (n *Node) registerOnce(ctx context.Context, reg meta.Registration) (int64, error) {
	if n.meta.IsLeader() {
		return n.meta.RegisterBroker(ctx, reg)
	}
	return n.ctrl.Register(ctx, reg)
}

// HeartbeatLoop heartbeats every HeartbeatInterval until the broker
// closes. A heartbeat the controller refuses as coming from a stale
// incarnation re-registers: the controller fenced this broker (it was
// paused, or cut off, for longer than the session timeout) and has
// forgotten it.
func (n *Node) HeartbeatLoop() {
	tick := time.NewTicker(n.cfg.HeartbeatInterval)
	defer tick.Stop()
	var lastWarn time.Time
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		case <-n.cluster.wantShutdown:
		}
		ctx, cancel := context.WithTimeout(n.ctx, n.cfg.SessionTimeout)
		reply, err := n.heartbeatOnce(ctx)
		cancel()
		if errors.Is(err, meta.ErrStaleBrokerEpoch) || errors.Is(err, kerr.StaleBrokerEpoch) {
			n.log.Warn("controller fenced this broker's registration; registering again", "node", n.cfg.NodeID)
			rctx, cancel := context.WithTimeout(n.ctx, 10*n.cfg.SessionTimeout)
			err = n.register(rctx)
			cancel()
		}
		if err != nil {
			if n.ctx.Err() == nil && time.Since(lastWarn) > 10*time.Second {
				n.log.Warn("heartbeat to the controller failed", "node", n.cfg.NodeID, "err", err)
				lastWarn = time.Now()
			}
			continue
		}
		n.cluster.lastHeartbeat.Store(time.Now().UnixNano())
		if reply.ShouldShutdown {
			n.cluster.shutdownDoneOnce.Do(func() { close(n.cluster.shutdownDone) })
		}
	}
}

func (n *Node) shuttingDown() bool {
	select {
	case <-n.cluster.wantShutdown:
		return true
	default:
		return false
	}
}

func (n *Node) heartbeatOnce(ctx context.Context) (meta.HeartbeatReply, error) {
	hb := meta.HeartbeatRequest{ID: n.cfg.NodeID, Epoch: n.cluster.brokerEpoch(), WantShutdown: n.shuttingDown()}
	if n.meta.IsLeader() {
		return n.meta.Heartbeat(ctx, hb)
	}
	return n.ctrl.Heartbeat(ctx, hb)
}

// ControlledShutdown is the cluster's part of a controlled shutdown
// (broker.Shutdown): the node asks the controller to move its leaderships
// to other in-sync replicas and waits (within ctx) until the controller
// says it leads nothing that could move, and the quorum's leadership, if
// it holds it, is handed over; the broker then closes. A single node, or
// one whose controller cannot be reached for a session timeout (the last
// nodes of a cluster being stopped have no quorum left to move
// anything), returns at once. It must be called only after a successful
// Join, with HeartbeatLoop running.
func (n *Node) ControlledShutdown(ctx context.Context) {
	if n.Clustered() {
		n.cluster.wantShutdownOnce.Do(func() { close(n.cluster.wantShutdown) })
		began := time.Now()
		tick := time.NewTicker(n.cfg.HeartbeatInterval)
		defer tick.Stop()
	wait:
		for {
			select {
			case <-n.cluster.shutdownDone:
				n.log.Info("controlled shutdown: leaderships moved", "node", n.cfg.NodeID)
				n.drainLeaderships(ctx)
				break wait
			case <-ctx.Done():
				n.log.Warn("controlled shutdown: gave up waiting for leaderships to move", "node", n.cfg.NodeID)
				break wait
			case <-n.ctx.Done():
				break wait
			case <-tick.C:
				last := time.Unix(0, max(n.cluster.lastHeartbeat.Load(), began.UnixNano()))
				if time.Since(last) > n.cfg.SessionTimeout {
					n.log.Warn("controlled shutdown: no controller answers; closing without moving leaderships", "node", n.cfg.NodeID)
					break wait
				}
			}
		}
		// The controller hands the quorum to another voter before it
		// goes, rather than leave the others an election timeout of its
		// silence to notice.
		if err := n.meta.Resign(); err != nil {
			n.log.Info("controlled shutdown: the quorum's leadership was not handed over; the other voters elect a controller", "node", n.cfg.NodeID, "err", err)
		}
	}
}

// ShutdownDone is closed once the controller said, after a
// ControlledShutdown began, that this node leads nothing that could move.
func (n *Node) ShutdownDone() <-chan struct{} { return n.cluster.shutdownDone }

// drainLeaderships keeps a broker whose controlled shutdown moved its
// leaderships answering a little longer, as a Kafka broker does until its
// next heartbeat, so that a client's next request gets
// NOT_LEADER_OR_FOLLOWER naming the new leader (KIP-951) and moves at
// once; a closed connection would leave the client to its next metadata
// refresh (franz-go: at most every 5 s by default). The controller's
// ShouldShutdown can arrive before this node has applied the moves, so it
// first waits for its own metadata to show them (within a session
// timeout), then answers for a heartbeat interval.
func (n *Node) drainLeaderships(ctx context.Context) {
	bound := time.NewTimer(n.cfg.SessionTimeout)
	defer bound.Stop()
	for {
		changed := n.meta.Changed()
		if ledNothingMovable(n.meta.State(), n.cfg.NodeID) {
			break
		}
		select {
		case <-changed:
		case <-bound.C:
			return
		case <-ctx.Done():
			return
		case <-n.ctx.Done():
			return
		}
	}
	linger := time.NewTimer(n.cfg.HeartbeatInterval)
	defer linger.Stop()
	select {
	case <-linger.C:
	case <-ctx.Done():
	case <-n.ctx.Done():
	}
}

// ledNothingMovable reports whether st names node id the leader of no
// partition that another live in-sync replica could lead: what the
// controller checks before it answers ShouldShutdown.
func ledNothingMovable(st *meta.State, id int32) bool {
	for _, t := range st.Topics {
		for _, p := range t.Partitions {
			if p.Leader != id {
				continue
			}
			for _, r := range p.ISR {
				if r != id && st.Alive(r) && !st.Brokers[r].ShuttingDown {
					return false
				}
			}
		}
	}
	return true
}

// controllerIDs allocates producer ids through the controller: in-process
// on the controller, by AllocateProducerIds elsewhere.
type controllerIDs struct{ n *Node }

func (c controllerIDs) AllocateProducerIDs(ctx context.Context, count int64) (int64, error) {
	n := c.n
	var first int64
	err := n.AtController(ctx, func() (err error) {
		first, err = n.meta.AllocateProducerIDs(ctx, count)
		return err
	}, func() (err error) {
		first, err = n.ctrl.AllocateProducerIDs(ctx, n.cfg.NodeID, n.cluster.brokerEpoch(), count)
		return err
	})
	return first, err
}

// AtController runs local when this node is the controller (or the only
// node) and remote, a request to the controller, otherwise. Either may
// find the controller moved to the other place (this node was just
// elected, or just deposed): then the other is tried, until ctx ends.
func (n *Node) AtController(ctx context.Context, local, remote func() error) error {
	for {
		if n.meta.IsLeader() || !n.Clustered() {
			err := local()
			if !n.Clustered() || !isNotController(err) {
				return err
			}
		}
		if err := remote(); !isNotController(err) || ctx.Err() != nil {
			return err
		}
	}
}

// isNotController reports whether err says the controller is elsewhere:
// a controller's NOT_CONTROLLER answer, or this node's store refusing a
// write it no longer leads the quorum for.
func isNotController(err error) bool {
	if err == nil {
		return false
	}
	if ke := (*kerr.Error)(nil); errors.As(err, &ke) {
		return ke.Code == kerr.NotController.Code
	}
	return errors.Is(err, meta.ErrNotController)
}
