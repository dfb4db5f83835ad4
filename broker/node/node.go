package node

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"strata/meta"
)

// Config is what a Node needs of the broker's configuration, and the
// hooks through which it reaches what the broker still owns.
type Config struct {
	// NodeID is this node's id in the cluster (Kafka's node.id).
	NodeID int32
	// Voters are the metadata quorum's voters; none is a one-node
	// cluster, which is its own controller.
	Voters []meta.Voter
	// Host, Port and Rack are what this node registers: its advertised
	// address and its rack.
	Host string
	Port int32
	Rack string
	// ClusterID is the configured cluster.id, empty when not configured;
	// DataDir names the data dir in the error that refuses another
	// cluster's.
	ClusterID string
	DataDir   string
	// SessionTimeout is broker.session.timeout.ms, HeartbeatInterval
	// broker.heartbeat.interval.ms.
	SessionTimeout, HeartbeatInterval time.Duration
	// AutoCreateTopics, DefaultPartitions and DefaultReplicationFactor
	// are auto.create.topics.enable, num.partitions and
	// default.replication.factor.
	AutoCreateTopics         bool
	DefaultPartitions        int32
	DefaultReplicationFactor int16
	// Logger receives the node's messages.
	Logger *slog.Logger

	// The hooks below are required, but Go.
	//
	// Reconcile brings this node's hosted partitions in step with its
	// metadata: it opens the partitions of a topic just created, and
	// puts in force what a catch-up with the controller brought.
	Reconcile func() error
	// ValidateTopicConfig checks one topic config key and value,
	// returning an error that names both.
	ValidateTopicConfig func(key, value string) error
	// TopicConfigValue resolves key for a topic whose own settings are
	// configs: the topic's setting (topicLevel true), else the broker
	// default, else Kafka's.
	TopicConfigValue func(configs map[string]string, key string) (value string, topicLevel bool)
	// Go runs f on a goroutine its caller waits for when it closes; the
	// node runs its reservations of producer ids ahead of need on it. Nil
	// reserves only on demand.
	Go func(f func())
}

// Controller is the cluster's controller as a node that is not the
// controller reaches it: the Kafka edge implements it with the
// inter-broker requests (BrokerRegistration, BrokerHeartbeat,
// AllocateProducerIds, CreateTopics, DescribeQuorum).
//
// Register, Heartbeat, AllocateProducerIDs and CreateTopic follow the
// controller when it moves, retrying a NOT_CONTROLLER answer or an
// unreachable controller until ctx ends, and return meta.ErrNotController
// once this node itself was elected: the caller then goes to its own
// store. An error the controller answered with is a kerr error. Any
// method may be called concurrently.
type Controller interface {
	// Register registers a broker's incarnation (reg.Incarnation, 32 hex
	// digits) and returns the broker epoch the controller gave it.
	Register(ctx context.Context, reg meta.Registration) (brokerEpoch int64, err error)
	// Heartbeat sends one heartbeat and returns the controller's view of
	// the broker.
	Heartbeat(ctx context.Context, hb meta.HeartbeatRequest) (meta.HeartbeatReply, error)
	// AllocateProducerIDs reserves n producer ids for broker brokerID at
	// brokerEpoch and returns the first; fewer than n is an error.
	AllocateProducerIDs(ctx context.Context, brokerID int32, brokerEpoch, n int64) (first int64, err error)
	// CreateTopic asks the controller to create a topic and returns once
	// it answered; a topic that exists is kerr.TopicAlreadyExists. This
	// node's metadata may not have the topic yet.
	CreateTopic(ctx context.Context, spec meta.TopicSpec) error
	// CommitIndex asks the controller once, without following it, for
	// the metadata log's high watermark (its raft commit index). It
	// fails at once when no controller is known.
	CommitIndex(ctx context.Context) (uint64, error)
}

// Node is this node's membership in the cluster. Create it with New once
// the metadata store is open; Join registers it.
type Node struct {
	cfg  Config
	log  *slog.Logger
	meta *meta.Store
	ctrl Controller
	// ctx ends when the broker closes; the node's loops and waits watch
	// it.
	ctx context.Context

	// cluster is this node's registration with the controller
	// (cluster.go).
	cluster clusterState
	// unnamedSince is when Join began to wait for the cluster's id.
	unnamedSince time.Time

	// metaSyncFailed is when this node last failed to catch up with the
	// controller's commit index (unix nanoseconds; 0: it did not fail
	// since the last success), metaSyncWarned when it last said so. See
	// metasync.go.
	metaSyncFailed, metaSyncWarned atomic.Int64
	// metaAsks batches those questions to the controller.
	metaAsks askBatch

	pids producerIDs
}

// New returns the node for the metadata store m, reaching the controller
// on other nodes through ctrl; ctx ends when the broker closes. It keeps
// one fresh incarnation id for every registration of this process.
func New(ctx context.Context, cfg Config, m *meta.Store, ctrl Controller) *Node {
	n := &Node{cfg: cfg, log: cfg.Logger, meta: m, ctrl: ctrl, ctx: ctx, cluster: newClusterState()}
	n.pids.store = controllerIDs{n}
	if cfg.Go != nil {
		n.pids.ahead = func(reserve func(context.Context)) {
			cfg.Go(func() {
				ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
				defer cancel()
				reserve(ctx)
			})
		}
	}
	return n
}

// Incarnation is this process's incarnation id, the one it registers.
func (n *Node) Incarnation() [16]byte { return n.cluster.incarnation }

// BrokerEpoch is the broker epoch the controller gave this incarnation
// at its last registration; 0 before Join.
func (n *Node) BrokerEpoch() int64 { return n.cluster.brokerEpoch() }

// AllocateProducerID returns a producer id unique in the cluster, from a
// block reserved through the metadata log (producerids.go).
func (n *Node) AllocateProducerID(ctx context.Context) (int64, error) {
	return n.pids.allocate(ctx)
}

// CommitIndexAsks is how many times this node has asked the controller
// for its commit index (metasync.go).
func (n *Node) CommitIndexAsks() int64 { return n.metaAsks.sent.Load() }
