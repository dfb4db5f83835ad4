package node

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/broker/group"
	"strata/broker/partition"
	"strata/broker/replica"
	"strata/broker/txn"
	"strata/compactor"
	"strata/meta"
	"strata/tier"
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
	// Endpoints are every advertised listener this node registers
	// (meta.Broker.Endpoints); Host and Port are the inter-broker one's.
	Endpoints []meta.Endpoint
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

	// TopicDefaults are the broker-level defaults of topic configs.
	TopicDefaults map[string]string
	// ReplicaLagTimeMax is replica.lag.time.max.ms.
	ReplicaLagTimeMax time.Duration
	// MaintenanceInterval is how often logs are checked for time-based
	// rolls and retention; FlushInterval, when positive, how often they
	// are flushed.
	MaintenanceInterval, FlushInterval time.Duration
	// Tier configures tiered storage; a nil Store keeps everything local.
	Tier TierConfig
	// ReadReplica configures the read replicas hosted here (readreplica.go).
	ReadReplica ReadReplicaConfig
	// Restore restores the bucket's newest checkpoint into a cluster that
	// has no topic of its own yet, on the controller (RestoreAtStart).
	Restore bool
	// Groups configures the group coordinator; Partitions is
	// offsets.topic.num.partitions, and the node fills in the rest.
	Groups group.Config
	// Txns configures the transaction coordinator; Partitions is
	// transaction.state.log.num.partitions, and the node fills in the
	// rest. TxnAbortInterval is how often transactions past their
	// timeout are aborted.
	Txns             txn.Config
	TxnAbortInterval time.Duration
	// Compactor configures log compaction.
	Compactor compactor.Config
	// Metrics are the series the node and its partitions update.
	Metrics Metrics

	// The hooks below are required.
	//
	// Peer is the client of the broker with the given id, for the
	// replica fetchers.
	Peer func(id int32) replica.Client
	// WriteMarkers sends WriteTxnMarkers for m's partitions tps to their
	// leader, another broker, and returns each partition's error.
	WriteMarkers func(ctx context.Context, leader int32, m *txn.Markers, tps []txn.TopicPartition) map[txn.TopicPartition]error
	// Go runs f on a goroutine its caller waits for when it closes; every
	// loop of the node runs on it.
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
	// AlterPartition sends an ISR change (AlterPartition v3, KIP-903)
	// and returns the partition as the controller holds it after.
	AlterPartition(ctx context.Context, topicID [16]byte, r meta.AlterPartitionRequest) (meta.Partition, error)
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

	// logsDir holds one directory per hosted partition's log.
	logsDir string
	// replicas runs the fetchers of the partitions this node follows.
	replicas *replica.Manager
	// tier is the cold tier, nil when no object store is configured;
	// tierStore its store, which writes nothing until the bucket is
	// claimed for this cluster (AwaitClusterID).
	tier      *tier.Tier
	tierStore *tier.ClaimedStore
	// collector is the state of the tier's collector goroutine
	// (collect.go).
	collector collector
	// readReplicas are the sources of the read replicas hosted here
	// (readreplica.go).
	readReplicas readReplicas
	// groups is the group coordinator (groups.go), nil before
	// StartGroups; txns the transaction coordinator's state on this node
	// (txns.go), nil before StartTxns.
	groups *group.Coordinator
	txns   *txns
	// offsetsID is the offsets topic the coordinator loaded (groups.go).
	offsetsID offsetsTopicID
	// localBytes is the size of the hosted logs as of the last upload
	// pass; produce reads it for disk backpressure.
	localBytes atomic.Int64
	// host is what every hosted partition is given (partitionHost).
	host     *partition.Host
	hostOnce sync.Once
	// changed is the metadata's change signal as Open's reconcile saw it,
	// for the reconcile loop Run starts.
	changed <-chan struct{}
	// reconcileMu serialises reconcile runs.
	reconcileMu sync.Mutex
	// newLeads wakes the followers' held fetches when this node begins
	// to lead a partition (newleads.go).
	newLeads newLeads
	// mu guards the partitions this node hosts.
	mu struct {
		sync.RWMutex
		partitions map[tp]*partition.Partition
		closed     bool
	}
}

// Metrics are the series the node updates, made by the broker's metrics.
type Metrics struct {
	// Partition are the series every partition updates.
	Partition partition.Metrics
	// LogEnd is a partition's log-end-offset gauge; Forget drops a
	// partition's series.
	LogEnd func(topic string, index int32) prometheus.Gauge
	Forget func(topic string, index int32)
	// UploadErrors counts failed upload passes; UploadLag is a leader's
	// offsets not yet in the bucket.
	UploadErrors prometheus.Counter
	UploadLag    func(topic string, index int32, lag int64)
	// OrphansDeleted counts the objects the collector deleted.
	OrphansDeleted prometheus.Counter
	// CheckpointWrites counts the metadata checkpoints written,
	// CheckpointFailures the rounds that failed (checkpoint.go);
	// CheckpointLastSuccess is when a round last left the bucket's newest
	// checkpoint current (Unix seconds).
	CheckpointWrites, CheckpointFailures prometheus.Counter
	CheckpointLastSuccess                prometheus.Gauge
	// WatchTierCache reports the tier's cache.
	WatchTierCache func(stats func() tier.CacheStats)
	// Registerer takes the compactor's series.
	Registerer prometheus.Registerer
}

// New returns the node for the metadata store m, reaching the controller
// on other nodes through ctrl; ctx ends when the broker closes. It keeps
// one fresh incarnation id for every registration of this process.
func New(ctx context.Context, cfg Config, m *meta.Store, ctrl Controller) *Node {
	cfg.Tier = cfg.Tier.WithDefaults()
	n := &Node{cfg: cfg, log: cfg.Logger, meta: m, ctrl: ctrl, ctx: ctx, cluster: newClusterState(),
		logsDir: filepath.Join(cfg.DataDir, "logs")}
	n.mu.partitions = make(map[tp]*partition.Partition)
	n.pids.store = controllerIDs{n}
	n.pids.ahead = func(reserve func(context.Context)) {
		cfg.Go(func() {
			ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
			defer cancel()
			reserve(ctx)
		})
	}
	n.replicas = replica.NewManager(ctx, cfg.NodeID, cfg.Peer, n.BrokerEpoch, n.log.With("component", "replica"))
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
