package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/meta"
	"strata/tier"
)

// A broker's life in the cluster (docs/replication.md, steps 1-2): it
// registers with the controller under a fresh incarnation id, and
// heartbeats; a broker whose heartbeats stop is fenced by the controller
// and its leaderships move. On the controller itself the calls go straight
// to the metadata store; other brokers send Kafka's own inter-broker
// requests (BrokerRegistration, BrokerHeartbeat, AlterPartition,
// AllocateProducerIds) to the controller's listener.

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

// clustered reports whether the node runs in a multi-node quorum. A
// single node is its own controller and registers in-process.
func (b *Broker) clustered() bool { return len(b.cfg.Voters) > 0 }

// newClusterState starts a broker's life: a fresh incarnation id, kept
// for every registration of this process.
func newClusterState() clusterState {
	return clusterState{incarnation: newIncarnation(), wantShutdown: make(chan struct{}), shutdownDone: make(chan struct{})}
}

// register registers this incarnation with the controller, retrying until
// the controller answers. A live broker already holding the node id makes
// the controller refuse: that is retried for a session timeout and a half,
// long enough for a previous life of this node that was killed to be
// fenced, and then reported as the start-up error.
func (b *Broker) register(ctx context.Context) error {
	reg := meta.Registration{ID: b.cfg.NodeID, Host: b.advHost, Port: b.advPort, Rack: b.cfg.Rack, Incarnation: hex.EncodeToString(b.cluster.incarnation[:])}
	var dupSince time.Time
	backoff := 50 * time.Millisecond
	for {
		epoch, err := b.registerOnce(ctx, reg)
		if err == nil {
			b.cluster.setEpoch(epoch)
			return nil
		}
		if errors.Is(err, meta.ErrDuplicateBroker) || errors.Is(err, kerr.DuplicateBrokerRegistration) {
			if dupSince.IsZero() {
				dupSince = time.Now()
			}
			if time.Since(dupSince) > b.cfg.SessionTimeout*3/2 {
				return fmt.Errorf("node id %d is already registered by a live broker; is another process running with --node-id %d?", b.cfg.NodeID, b.cfg.NodeID)
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("register node %d with the controller: %w (last: %v)", b.cfg.NodeID, context.Cause(ctx), err)
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
func (b *Broker) waitApplied(ctx context.Context, index uint64) error {
	start := time.Now()
	tell := time.NewTimer(time.Second)
	defer tell.Stop()
	for {
		changed := b.meta.Changed()
		if b.meta.State().Index >= index {
			if time.Since(start) > time.Second {
				b.log.Info("the metadata log reached this node's registration", "took", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		select {
		case <-changed:
		case <-tell.C:
			b.log.Info("waiting for the controller's metadata log to reach this node's registration",
				"controller", b.meta.ControllerID(), "registered_at", index, "applied", b.meta.State().Index)
		case <-ctx.Done():
			return fmt.Errorf("waiting for the metadata to reach this node's registration: %w", context.Cause(ctx))
		}
	}
}

// checkClusterID refuses to start a node configured with a cluster.id
// other than id, the one its metadata names: this node's data dir, or the
// quorum it joined, belongs to that other cluster. A metadata that names
// no cluster yet passes; awaitClusterID checks the id once it is known.
func (b *Broker) checkClusterID(id string) error {
	if id != "" && b.cfg.ClusterID != "" && id != b.cfg.ClusterID {
		return b.otherClusterError(id)
	}
	return nil
}

func (b *Broker) otherClusterError(id string) error {
	return fmt.Errorf("cluster.id is %s, but the metadata (data dir %s, or the quorum) is of cluster %s", b.cfg.ClusterID, b.cfg.DataDir, id)
}

// clusterNamedWait is how long a node waits quietly for the controller to
// name the cluster before it says it waits; Start waits as long at most.
const clusterNamedWait = time.Second

// briefClusterID returns the cluster's id, waiting up to clusterNamedWait
// for it, or "" if it is not known by then. A controller of this version
// names the cluster first thing, so the id is normally there at once or
// within a few milliseconds, and waiting for those keeps a bucket of
// another cluster refused at start rather than found out later.
func (b *Broker) briefClusterID(ctx context.Context) (string, error) {
	bound := time.NewTimer(clusterNamedWait)
	defer bound.Stop()
	for {
		changed := b.meta.Changed()
		if id := b.clusterID(); id != "" {
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

// awaitClusterID waits, behind a started broker, for the controller to
// name the cluster, and then gives the bucket the id to be claimed for.
// Start does not wait for it: a controller of a version before clusters
// had ids never names the cluster (its followers cannot even apply the
// name), so during a rolling upgrade the id comes only once a new
// controller is elected. Meanwhile the broker serves, Metadata and
// DescribeCluster report no id, and nothing is written to the bucket
// (tier.ClaimedStore): uploads fail and are retried, as when the store
// is down. It says, once, what it waits for after clusterNamedWait, and
// when the wait is over.
func (b *Broker) awaitClusterID(since time.Time) {
	tell := time.NewTimer(max(clusterNamedWait-time.Since(since), 0))
	defer tell.Stop()
	told := false
	for {
		changed := b.meta.Changed()
		if id := b.clusterID(); id != "" {
			b.clusterNamed(id, told, since)
			return
		}
		select {
		case <-changed:
		case <-tell.C:
			told = true
			if b.tierStore != nil {
				b.log.Info("waiting for the controller to name the cluster; uploads to the bucket wait for it", "controller", b.meta.ControllerID())
			} else {
				b.log.Info("waiting for the controller to name the cluster", "controller", b.meta.ControllerID())
			}
		case <-b.ctx.Done():
			return
		}
	}
}

// clusterNamed hands the cluster's id, now known, to the bucket and
// claims it, so that the bucket names its cluster before the first upload
// needs it; a claim that fails now is made by that upload.
func (b *Broker) clusterNamed(id string, told bool, since time.Time) {
	if b.cfg.ClusterID != "" && id != b.cfg.ClusterID {
		// Too late to refuse the start; the bucket is neither cluster's
		// to claim, so nothing is written to it.
		err := b.otherClusterError(id)
		b.log.Error("this node is of another cluster than the one it was configured for: nothing is written to the bucket; fix cluster.id or the data dir, and restart", "err", err)
		if b.tierStore != nil {
			b.tierStore.Refuse(err)
		}
		return
	}
	if told {
		b.log.Info("the controller named the cluster", "cluster_id", id, "waited", time.Since(since).Round(time.Millisecond))
	}
	if b.tierStore == nil {
		return
	}
	b.tierStore.Name(id)
	ctx, cancel := context.WithTimeout(b.ctx, claimTimeout)
	err := b.tierStore.Claim(ctx)
	cancel()
	if foreign := (*tier.ForeignBucketError)(nil); errors.As(err, &foreign) {
		b.log.Error("nothing is written to the bucket: it belongs to another cluster; each cluster needs a bucket or prefix of its own",
			"store", b.tierWhere(), "bucket_cluster", foreign.Bucket, "cluster", foreign.Cluster)
	}
}

// clusterID is the id Metadata and DescribeCluster report: the
// metadata's, empty until the controller names the cluster.
func (b *Broker) clusterID() string { return b.meta.State().ClusterID }

func (b *Broker) registerOnce(ctx context.Context, reg meta.Registration) (int64, error) {
	if b.meta.IsLeader() {
		return b.meta.RegisterBroker(ctx, reg)
	}
	req := kmsg.NewPtrBrokerRegistrationRequest()
	req.BrokerID = reg.ID
	req.ClusterID = b.cfg.ClusterID
	req.IncarnationID = b.cluster.incarnation
	l := kmsg.NewBrokerRegistrationRequestListener()
	l.Name, l.Host, l.Port = "PLAINTEXT", reg.Host, uint16(reg.Port)
	req.Listeners = append(req.Listeners, l)
	if reg.Rack != "" {
		req.Rack = &reg.Rack
	}
	req.PreviousBrokerEpoch = -1
	kresp, err := b.controllerRequest(ctx, req)
	if err != nil {
		return 0, err
	}
	resp := kresp.(*kmsg.BrokerRegistrationResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, err
	}
	return resp.BrokerEpoch, nil
}

// heartbeatLoop heartbeats every HeartbeatInterval until the broker
// closes. A heartbeat the controller refuses as coming from a stale
// incarnation re-registers: the controller fenced this broker (it was
// paused, or cut off, for longer than the session timeout) and has
// forgotten it.
func (b *Broker) heartbeatLoop() {
	tick := time.NewTicker(b.cfg.HeartbeatInterval)
	defer tick.Stop()
	var lastWarn time.Time
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-tick.C:
		case <-b.cluster.wantShutdown:
		}
		ctx, cancel := context.WithTimeout(b.ctx, b.cfg.SessionTimeout)
		reply, err := b.heartbeatOnce(ctx)
		cancel()
		if errors.Is(err, meta.ErrStaleBrokerEpoch) || errors.Is(err, kerr.StaleBrokerEpoch) {
			b.log.Warn("controller fenced this broker's registration; registering again", "node", b.cfg.NodeID)
			rctx, cancel := context.WithTimeout(b.ctx, 10*b.cfg.SessionTimeout)
			err = b.register(rctx)
			cancel()
		}
		if err != nil {
			if b.ctx.Err() == nil && time.Since(lastWarn) > 10*time.Second {
				b.log.Warn("heartbeat to the controller failed", "node", b.cfg.NodeID, "err", err)
				lastWarn = time.Now()
			}
			continue
		}
		b.cluster.lastHeartbeat.Store(time.Now().UnixNano())
		if reply.ShouldShutdown {
			b.cluster.shutdownDoneOnce.Do(func() { close(b.cluster.shutdownDone) })
		}
	}
}

func (b *Broker) shuttingDown() bool {
	select {
	case <-b.cluster.wantShutdown:
		return true
	default:
		return false
	}
}

func (b *Broker) heartbeatOnce(ctx context.Context) (meta.HeartbeatReply, error) {
	hb := meta.HeartbeatRequest{ID: b.cfg.NodeID, Epoch: b.cluster.brokerEpoch(), WantShutdown: b.shuttingDown()}
	if b.meta.IsLeader() {
		return b.meta.Heartbeat(ctx, hb)
	}
	req := kmsg.NewPtrBrokerHeartbeatRequest()
	req.BrokerID, req.BrokerEpoch, req.WantShutdown = hb.ID, hb.Epoch, hb.WantShutdown
	req.CurrentMetadataOffset = int64(b.meta.State().Index)
	kresp, err := b.controllerRequest(ctx, req)
	if err != nil {
		return meta.HeartbeatReply{}, err
	}
	resp := kresp.(*kmsg.BrokerHeartbeatResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return meta.HeartbeatReply{}, err
	}
	return meta.HeartbeatReply{Fenced: resp.IsFenced, ShouldShutdown: resp.ShouldShutdown}, nil
}

// Shutdown is a controlled shutdown, what SIGTERM does: the broker asks the
// controller to move its leaderships to other in-sync replicas, waits
// (within ctx) until the controller says it leads nothing that could move,
// and closes. Clients meanwhile get only retriable errors and follow the
// new leaders. A single node, or a broker whose controller cannot be
// reached for a session timeout (the last nodes of a cluster being
// stopped have no quorum left to move anything), just closes.
func (b *Broker) Shutdown(ctx context.Context) error {
	if b.started && b.clustered() {
		b.cluster.wantShutdownOnce.Do(func() { close(b.cluster.wantShutdown) })
		began := time.Now()
		tick := time.NewTicker(b.cfg.HeartbeatInterval)
		defer tick.Stop()
	wait:
		for {
			select {
			case <-b.cluster.shutdownDone:
				b.log.Info("controlled shutdown: leaderships moved", "node", b.cfg.NodeID)
				b.drainLeaderships(ctx)
				break wait
			case <-ctx.Done():
				b.log.Warn("controlled shutdown: gave up waiting for leaderships to move", "node", b.cfg.NodeID)
				break wait
			case <-b.ctx.Done():
				break wait
			case <-tick.C:
				last := time.Unix(0, max(b.cluster.lastHeartbeat.Load(), began.UnixNano()))
				if time.Since(last) > b.cfg.SessionTimeout {
					b.log.Warn("controlled shutdown: no controller answers; closing without moving leaderships", "node", b.cfg.NodeID)
					break wait
				}
			}
		}
		// The controller hands the quorum to another voter before it
		// goes, rather than leave the others an election timeout of its
		// silence to notice.
		if err := b.meta.Resign(); err != nil {
			b.log.Info("controlled shutdown: the quorum's leadership was not handed over; the other voters elect a controller", "node", b.cfg.NodeID, "err", err)
		}
	}
	return b.Close()
}

// drainLeaderships keeps a broker whose controlled shutdown moved its
// leaderships answering a little longer, as a Kafka broker does until its
// next heartbeat, so that a client's next request gets
// NOT_LEADER_OR_FOLLOWER naming the new leader (KIP-951) and moves at
// once; a closed connection would leave the client to its next metadata
// refresh (franz-go: at most every 5 s by default). The controller's
// ShouldShutdown can arrive before this node has applied the moves, so it
// first waits for its own metadata to show them (within a session
// timeout), then answers for a heartbeat interval.
func (b *Broker) drainLeaderships(ctx context.Context) {
	bound := time.NewTimer(b.cfg.SessionTimeout)
	defer bound.Stop()
	for {
		changed := b.meta.Changed()
		if ledNothingMovable(b.meta.State(), b.cfg.NodeID) {
			break
		}
		select {
		case <-changed:
		case <-bound.C:
			return
		case <-ctx.Done():
			return
		case <-b.ctx.Done():
			return
		}
	}
	linger := time.NewTimer(b.cfg.HeartbeatInterval)
	defer linger.Stop()
	select {
	case <-linger.C:
	case <-ctx.Done():
	case <-b.ctx.Done():
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

// peers holds one client per other broker's address, for the requests
// this broker sends to the controller and to the leaders it follows.
type peers struct {
	mu      sync.Mutex
	clients map[string]*kgo.Client
}

func (p *peers) client(addr string, self int32) (*kgo.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[addr]; ok {
		return c, nil
	}
	c, err := kgo.NewClient(
		kgo.SeedBrokers(addr),
		kgo.ClientID("strata-broker-"+strconv.Itoa(int(self))),
		kgo.DialTimeout(2*time.Second),
		kgo.MetadataMinAge(time.Second),
	)
	if err != nil {
		return nil, err
	}
	if p.clients == nil {
		p.clients = map[string]*kgo.Client{}
	}
	p.clients[addr] = c
	return c, nil
}

func (p *peers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, c := range p.clients {
		c.Close()
		delete(p.clients, addr)
	}
}

var errNoController = errors.New("no controller known yet")

// peerRequest sends req to broker id, at the address the metadata gives.
func (b *Broker) peerRequest(ctx context.Context, id int32, req kmsg.Request) (kmsg.Response, error) {
	br, ok := b.meta.State().Brokers[id]
	if !ok {
		return nil, fmt.Errorf("broker %d is not registered", id)
	}
	c, err := b.peers.client(net.JoinHostPort(br.Host, strconv.Itoa(int(br.Port))), b.cfg.NodeID)
	if err != nil {
		return nil, err
	}
	seeds := c.SeedBrokers()
	if len(seeds) == 0 {
		return nil, fmt.Errorf("no client for broker %d", id)
	}
	return seeds[0].Request(ctx, req)
}

// peerClient is a replica.Client for the leader with a given id.
type peerClient struct {
	b  *Broker
	id int32
}

func (c peerClient) Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	return c.b.peerRequest(ctx, c.id, req)
}

// controllerRequest sends req to the controller, following it when it
// moves: a NOT_CONTROLLER answer or an unreachable controller is retried
// within ctx.
func (b *Broker) controllerRequest(ctx context.Context, req kmsg.Request) (kmsg.Response, error) {
	backoff := 50 * time.Millisecond
	for {
		var resp kmsg.Response
		err := errNoController
		if id := b.meta.ControllerID(); id >= 0 && id != b.cfg.NodeID {
			resp, err = b.peerRequest(ctx, id, req)
			if err == nil && topErrorCode(resp) == kerr.NotController.Code {
				err = kerr.NotController
			}
		} else if id == b.cfg.NodeID {
			// Raft elected this node while the request was being built: the
			// caller goes straight to the store on its next try.
			return nil, meta.ErrNotController
		}
		if err == nil {
			return resp, nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w (last: %v)", context.Cause(ctx), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// topErrorCode returns a response's top-level error code for the requests
// the controller answers.
func topErrorCode(resp kmsg.Response) int16 {
	switch r := resp.(type) {
	case *kmsg.BrokerRegistrationResponse:
		return r.ErrorCode
	case *kmsg.BrokerHeartbeatResponse:
		return r.ErrorCode
	case *kmsg.AlterPartitionResponse:
		return r.ErrorCode
	case *kmsg.AllocateProducerIDsResponse:
		return r.ErrorCode
	}
	return 0
}

// controllerIDs allocates producer ids through the controller: in-process
// on the controller, by AllocateProducerIds elsewhere.
type controllerIDs struct{ b *Broker }

func (c controllerIDs) AllocateProducerIDs(ctx context.Context, n int64) (int64, error) {
	b := c.b
	var first int64
	err := b.atController(ctx, func() (err error) {
		first, err = b.meta.AllocateProducerIDs(ctx, n)
		return err
	}, func() error {
		req := kmsg.NewPtrAllocateProducerIDsRequest()
		req.BrokerID, req.BrokerEpoch = b.cfg.NodeID, b.cluster.brokerEpoch()
		kresp, err := b.controllerRequest(ctx, req)
		if err != nil {
			return err
		}
		resp := kresp.(*kmsg.AllocateProducerIDsResponse)
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			return err
		}
		if int64(resp.ProducerIDLen) < n {
			return fmt.Errorf("controller gave %d producer ids, asked for %d", resp.ProducerIDLen, n)
		}
		first = resp.ProducerIDStart
		return nil
	})
	return first, err
}

// atController runs local when this node is the controller (or the only
// node) and remote, a request to the controller, otherwise. Either may
// find the controller moved to the other place (this node was just
// elected, or just deposed): then the other is tried, until ctx ends.
func (b *Broker) atController(ctx context.Context, local, remote func() error) error {
	for {
		if b.meta.IsLeader() || !b.clustered() {
			err := local()
			if !b.clustered() || !isNotController(err) {
				return err
			}
		}
		if err := remote(); !isNotController(err) || ctx.Err() != nil {
			return err
		}
	}
}
