package broker

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/node"
	"strata/meta"
)

// This node's requests to other brokers: to the controller, in Kafka's
// inter-broker requests (BrokerRegistration, BrokerHeartbeat,
// AllocateProducerIds, CreateTopics, DescribeQuorum, AlterPartition), and
// to the leaders it follows (replica.Client).
// broker/node decides when to send them; controller translates.

// peers holds one client per other broker's address, for the requests
// this broker sends to the controller and to the leaders it follows. They
// dial the other brokers' inter-broker listener, with TLS when it is SSL
// or SASL_SSL (Config.PeerTLS) and whatever Config.PeerOpts add (SASL).
type peers struct {
	mu      sync.Mutex
	clients map[string]*kgo.Client
}

func (p *peers) client(addr string, opts []kgo.Opt) (*kgo.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[addr]; ok {
		return c, nil
	}
	c, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr)}, opts...)...)
	if err != nil {
		return nil, err
	}
	if p.clients == nil {
		p.clients = map[string]*kgo.Client{}
	}
	p.clients[addr] = c
	return c, nil
}

// peerOpts are the options of every client to another broker.
func (b *Broker) peerOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.ClientID("strata-broker-" + strconv.Itoa(int(b.cfg.NodeID))),
		kgo.DialTimeout(2 * time.Second),
		kgo.MetadataMinAge(time.Second),
	}
	if l := b.listener(b.cfg.InterBrokerListener); l != nil && l.security.TLS() {
		// franz-go sets each dial's ServerName to the host it dials.
		opts = append(opts, kgo.DialTLSConfig(b.cfg.PeerTLS.Clone()))
	}
	return append(opts, b.cfg.PeerOpts...)
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
	// Every broker of a cluster names its inter-broker listener alike;
	// one registered before there were several has only Host and Port.
	host, port := br.Endpoint(b.cfg.InterBrokerListener)
	c, err := b.peers.client(net.JoinHostPort(host, strconv.Itoa(int(port))), b.peerOpts())
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

// controller is the controller on another node as broker/node reaches
// it: each method one Kafka request, through controllerRequest.
type controller struct{ b *Broker }

var _ node.Controller = controller{}

func (c controller) Register(ctx context.Context, reg meta.Registration) (int64, error) {
	b := c.b
	req := kmsg.NewPtrBrokerRegistrationRequest()
	req.BrokerID = reg.ID
	req.ClusterID = b.cfg.ClusterID
	if id, err := hex.DecodeString(reg.Incarnation); err != nil || len(id) != len(req.IncarnationID) {
		return 0, fmt.Errorf("incarnation id %q is not 16 bytes of hex", reg.Incarnation)
	} else {
		req.IncarnationID = [16]byte(id)
	}
	// The inter-broker listener first: its address is the broker's
	// Host and Port (handleBrokerRegistration).
	l := kmsg.NewBrokerRegistrationRequestListener()
	l.Name, l.Host, l.Port = b.cfg.InterBrokerListener, reg.Host, uint16(reg.Port)
	for _, e := range reg.Endpoints {
		if e.Name == b.cfg.InterBrokerListener {
			l.SecurityProtocol = securityCode(Security(e.Security))
		}
	}
	req.Listeners = append(req.Listeners, l)
	for _, e := range reg.Endpoints {
		if e.Name == b.cfg.InterBrokerListener {
			continue
		}
		l := kmsg.NewBrokerRegistrationRequestListener()
		l.Name, l.Host, l.Port, l.SecurityProtocol = e.Name, e.Host, uint16(e.Port), securityCode(Security(e.Security))
		req.Listeners = append(req.Listeners, l)
	}
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

func (c controller) Heartbeat(ctx context.Context, hb meta.HeartbeatRequest) (meta.HeartbeatReply, error) {
	b := c.b
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

func (c controller) AllocateProducerIDs(ctx context.Context, brokerID int32, brokerEpoch, n int64) (int64, error) {
	req := kmsg.NewPtrAllocateProducerIDsRequest()
	req.BrokerID, req.BrokerEpoch = brokerID, brokerEpoch
	kresp, err := c.b.controllerRequest(ctx, req)
	if err != nil {
		return 0, err
	}
	resp := kresp.(*kmsg.AllocateProducerIDsResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, err
	}
	if int64(resp.ProducerIDLen) < n {
		return 0, fmt.Errorf("controller gave %d producer ids, asked for %d", resp.ProducerIDLen, n)
	}
	return resp.ProducerIDStart, nil
}

func (c controller) CreateTopic(ctx context.Context, spec meta.TopicSpec) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = spec.Name, spec.Partitions, spec.ReplicationFactor
	for i, replicas := range spec.Assignment {
		ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
		ra.Partition, ra.Replicas = int32(i), replicas
		rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	}
	if spec.Assignment != nil {
		rt.NumPartitions, rt.ReplicationFactor = -1, -1
	}
	for k, v := range spec.Configs {
		cfg := kmsg.NewCreateTopicsRequestTopicConfig()
		cfg.Name, cfg.Value = k, kmsg.StringPtr(v)
		rt.Configs = append(rt.Configs, cfg)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = int32(controlTimeout / time.Millisecond)
	kresp, err := c.b.controllerRequest(ctx, req)
	if err != nil {
		return err
	}
	resp := kresp.(*kmsg.CreateTopicsResponse)
	if len(resp.Topics) != 1 {
		return fmt.Errorf("controller answered for %d topics", len(resp.Topics))
	}
	return kerr.ErrorForCode(resp.Topics[0].ErrorCode)
}

func (c controller) CommitIndex(ctx context.Context) (uint64, error) {
	b := c.b
	id := b.meta.ControllerID()
	if id < 0 {
		return 0, errNoController
	}
	req := kmsg.NewPtrDescribeQuorumRequest()
	rt := kmsg.NewDescribeQuorumRequestTopic()
	rt.Topic = metadataTopic
	rp := kmsg.NewDescribeQuorumRequestTopicPartition()
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := b.peerRequest(ctx, id, req)
	if err != nil {
		return 0, fmt.Errorf("asking controller %d for its commit index: %w", id, err)
	}
	resp := kresp.(*kmsg.DescribeQuorumResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, fmt.Errorf("controller %d: %w", id, err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, fmt.Errorf("controller %d answered DescribeQuorum without the metadata log", id)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		return 0, fmt.Errorf("controller %d: %w", id, err)
	}
	if p.HighWatermark < 0 {
		return 0, fmt.Errorf("controller %d knows no commit index", id)
	}
	// Whether or not it still leads, what it knows committed is committed.
	return uint64(p.HighWatermark), nil
}

// AlterPartition sends an AlterPartition request (v3, with each ISR
// member's broker epoch, KIP-903) for one partition.
func (c controller) AlterPartition(ctx context.Context, topicID [16]byte, r meta.AlterPartitionRequest) (meta.Partition, error) {
	var out meta.Partition
	req := kmsg.NewPtrAlterPartitionRequest()
	req.Version = 3
	req.BrokerID, req.BrokerEpoch = r.BrokerID, r.BrokerEpoch
	rt := kmsg.NewAlterPartitionRequestTopic()
	rt.TopicID = topicID
	rp := kmsg.NewAlterPartitionRequestTopicPartition()
	rp.Partition, rp.LeaderEpoch, rp.PartitionEpoch, rp.NewISR = r.Partition, r.LeaderEpoch, r.PartitionEpoch, r.ISR
	// Both forms: the client sends the one the controller's version
	// takes (v2 NewISR, v3 NewEpochISR).
	for i, id := range r.ISR {
		bs := kmsg.NewAlterPartitionRequestTopicPartitionNewEpochISR()
		bs.BrokerID, bs.BrokerEpoch = id, -1
		if i < len(r.ISREpochs) {
			bs.BrokerEpoch = r.ISREpochs[i]
		}
		rp.NewEpochISR = append(rp.NewEpochISR, bs)
	}
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	kresp, err := c.b.controllerRequest(ctx, req)
	if err != nil {
		return out, err
	}
	resp := kresp.(*kmsg.AlterPartitionResponse)
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return out, err
	}
	for _, t := range resp.Topics {
		for _, op := range t.Partitions {
			if op.Partition == r.Partition {
				out = meta.Partition{Index: op.Partition, Leader: op.LeaderID, LeaderEpoch: op.LeaderEpoch, ISR: op.ISR, PartitionEpoch: op.PartitionEpoch}
				return out, kerr.ErrorForCode(op.ErrorCode)
			}
		}
	}
	return out, fmt.Errorf("controller did not answer for %s-%d", r.Topic, r.Partition)
}

// forwarded are the requests that change the metadata and that clients
// may send to any broker: a broker that is not the controller passes them
// on to it and relays its answer (KIP-590). The requests clients send to
// the controller themselves (CreateTopics, DeleteTopics, ...) are answered
// with NOT_CONTROLLER elsewhere, as Kafka did before KIP-590, and the
// client retries on the controller.
var forwarded = map[int16]bool{
	int16(kmsg.AlterConfigs):            true,
	int16(kmsg.IncrementalAlterConfigs): true,
	// 51_alter_user_scram_credentials.go
	int16(kmsg.AlterUserSCRAMCredentials): true,
	int16(kmsg.CreateACLs):                true,
	int16(kmsg.DeleteACLs):                true,
	int16(kmsg.AlterClientQuotas):         true,
}

// forward sends req to the controller and returns its answer, in the
// version the client asked for, once this node has applied what the
// controller committed and its partitions are in step with it: the
// client's next request, here or anywhere, sees the change (broker/node/metasync.go).
func (b *Broker) forward(req *request) (kmsg.Response, error) {
	version := req.kreq.GetVersion()
	ctx, cancel := context.WithTimeout(b.ctx, controlTimeout)
	defer cancel()
	resp, err := b.controllerRequest(ctx, req.kreq)
	req.kreq.SetVersion(version)
	if err != nil {
		return nil, err
	}
	resp.SetVersion(version)
	b.node.SyncMetadata()
	// Unconditionally: the reconcile loop may have seen the change first
	// and still be applying it.
	if err := b.node.Reconcile(); err != nil {
		b.log.Error("apply the metadata change passed on to the controller", "err", err)
	}
	return resp, nil
}
