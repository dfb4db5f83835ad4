// Package config owns how a Strata node is configured from the outside: a
// YAML file, STRATA_* environment variables and command-line flags, merged
// with flags over environment over file over built-in defaults.
//
// Every setting is declared once, in the settings table, with its YAML key,
// its flag and (derived from the flag) its environment variable, so the
// three sources can never drift apart. This package checks the syntax of
// each value and names the source, the key and the value when one is bad;
// what a value means (a partition count of zero, an unknown topic config) is
// checked by the package that owns it, broker.Config.Validate. Only cmd
// reads flags, files and the environment; the rest of Strata receives
// parsed structs.
package config

import (
	"fmt"
	"log/slog"
	"strata/compactor"
	"time"

	"strata/broker"
	"strata/broker/node"
	"strata/meta"
	"strata/tier"
)

// Config is a node's resolved configuration. It has one nested section per
// concern, mirroring the YAML file, so that later concerns (Raft addresses
// and seed voters under Cluster) slot in without renaming what exists.
type Config struct {
	Node      Node
	Cluster   Cluster
	Kafka     Kafka
	HTTP      HTTP
	Topics    Topics
	Storage   Storage
	S3        S3
	Tier      Tier
	Compactor Compactor
	// ReadReplica configures read-replica topics.
	ReadReplica ReadReplica
	// Transactions configures the transaction coordinator.
	Transactions Transactions
	// TLS is the node's certificate, for its TLS listeners, its
	// connections to other nodes and the raft transport.
	TLS     TLS
	Logging Logging
	// SASL configures authentication on SASL listeners (sasl.go).
	SASL SASL
	// Authorizer configures ACL authorization (authorizer.go).
	Authorizer Authorizer
}

// Node identifies this broker and where it keeps its data.
type Node struct {
	ID      int32  // node.id
	DataDir string // node.data_dir: logs/ and meta/ live under it
	Rack    string // node.rack
}

// Cluster holds settings every node of a cluster shares, and this node's
// place in the metadata quorum.
type Cluster struct {
	ID string // cluster.id; empty lets the first controller pick a random one
	// RaftListen is cluster.raft_listen, host:port of this node's raft
	// listener; empty (with no voters) keeps raft in-process.
	RaftListen string
	// Voters is cluster.voters: the metadata quorum's voters. Empty is a
	// one-node cluster whose node is its own only voter.
	Voters []meta.Voter

	SessionTimeout    time.Duration // cluster.broker_session_timeout
	HeartbeatInterval time.Duration // cluster.broker_heartbeat_interval; 0 means a quarter of the session timeout
	ReplicaLagTimeMax time.Duration // cluster.replica_lag_time_max
}

// Kafka is the client-facing Kafka listener.
type Kafka struct {
	Listen          string // kafka.listen, host:port
	AdvertisedAddr  string // kafka.advertised_addr; empty means the listener's address
	MaxRequestBytes int32  // kafka.max_request_bytes

	QueuedMaxRequestBytes int64         // kafka.queued_max_request_bytes: request bytes held across connections
	ConnectionsMaxIdle    time.Duration // kafka.connections_max_idle: close a connection idle this long
	FetchMaxBytes         int32         // kafka.fetch_max_bytes: cap on one Fetch response

	// Listeners is kafka.listeners, NAME: PROTO://HOST:PORT each, in the
	// order given (the first is the bootstrap address strata prints).
	// Set, it replaces Listen and AdvertisedAddr.
	Listeners []broker.Listener
	// AdvertisedListeners is kafka.advertised_listeners: listener name
	// to the host:port its clients are told.
	AdvertisedListeners map[string]string
	// InterBrokerListener is kafka.inter_broker_listener; empty means the
	// first listener.
	InterBrokerListener string
	MaxConnectionsPerIP int // kafka.max_connections_per_ip: 0 is unbounded (max.connections.per.ip)
}

// HTTP is the metrics and health listener.
type HTTP struct {
	Listen string // http.listen; empty turns it off
	// TLS is http.tls: serve over TLS with the node's certificate.
	TLS bool
	// BearerToken is http.bearer_token, resolved (an env: or file:
	// reference is read at load): /metrics and /readyz then answer 401
	// without "Authorization: Bearer <token>". Never logged or printed.
	BearerToken string
	// Pprof is http.pprof: serve Go's profiles under /debug/pprof/.
	Pprof bool
}

// TLS names the node's certificate files (internal/certs).
type TLS struct {
	CertFile string // tls.cert_file: the node's certificate chain, PEM
	KeyFile  string // tls.key_file: its private key, PEM
	CAFile   string // tls.ca_file: the cluster CA, PEM
	// ClientAuth is tls.client_auth: none, request or require (Kafka's
	// ssl.client.auth).
	ClientAuth string
}

// Topics are the broker-level defaults for topics.
type Topics struct {
	AutoCreate        bool  // topics.auto_create
	DefaultPartitions int32 // topics.default_partitions
	OffsetsPartitions int32 // topics.offsets_partitions: partitions of __consumer_offsets
	// DefaultReplicationFactor is topics.default_replication_factor,
	// Kafka's default.replication.factor.
	DefaultReplicationFactor int16
	Defaults                 map[string]string // topics.defaults: topic config name -> value
}

// Storage tunes the local log.
type Storage struct {
	FlushInterval time.Duration // storage.flush_interval; 0 leaves flushing to the OS
}

// S3 names the bucket of the cold tier. With no Bucket the tier uses the
// local-directory store under the data directory (the embedded default).
//
// The keys have no YAML key and no flag: a flag shows in ps and in shell
// history, and a config file is easily copied around. They come only from
// STRATA_S3_ACCESS_KEY and STRATA_S3_SECRET_KEY; both unset means the
// default AWS credential chain. String and GoString redact them, so a
// Config can be printed without leaking them.
type S3 struct {
	Endpoint  string // s3.endpoint: http(s) URL; empty means AWS S3
	Bucket    string // s3.bucket: must exist
	Prefix    string // s3.prefix: key prefix inside the bucket
	Region    string // s3.region: empty means the AWS chain's, else us-east-1
	PathStyle bool   // s3.path_style: endpoint/bucket/key addressing (MinIO)
	// CAFile is s3.ca_file: PEM CA certificates an https endpoint's
	// certificate is verified against, besides the system's.
	CAFile string
	// SSE is s3.sse: server-side encryption asked for on every object
	// written, AES256 (SSE-S3) or aws:kms (SSE-KMS); empty asks none.
	SSE string
	// SSEKMSKeyID is s3.sse_kms_key_id: the KMS key of aws:kms; empty
	// means the bucket's default key.
	SSEKMSKeyID string

	AccessKey, SecretKey string // from the environment only
}

// String describes s with the keys redacted.
func (s S3) String() string {
	return fmt.Sprintf("{Endpoint:%q Bucket:%q Prefix:%q Region:%q PathStyle:%t CAFile:%q SSE:%q SSEKMSKeyID:%q AccessKey:%s SecretKey:%s}",
		s.Endpoint, s.Bucket, s.Prefix, s.Region, s.PathStyle, s.CAFile, s.SSE, s.SSEKMSKeyID, redact(s.AccessKey), redact(s.SecretKey))
}

// GoString keeps %#v from printing the keys.
func (s S3) GoString() string { return "config.S3" + s.String() }

func redact(s string) string {
	if s == "" {
		return "<unset>"
	}
	return "<redacted>"
}

// Tier configures tiered storage: closed segments go to the object store
// (S3 when a bucket is set, else the local directory store) and are read
// back from it. See broker.TierConfig for what each knob does.
type Tier struct {
	Enabled bool // tier.enabled: false keeps every log wholly local
	// BucketDir is tier.bucket_dir: the directory store's root when no S3
	// bucket is set. Empty means <data-dir>/bucket; nodes given the same
	// directory share one bucket, as they would share an S3 one.
	BucketDir          string
	ChunkBytes         int64         // tier.chunk_bytes: size of remote-read ranged GETs
	MemoryBytes        int64         // tier.memory_bytes: bound of the chunks held in memory
	CacheBytes         int64         // tier.cache_bytes: bound of the on-disk chunk cache
	ManifestCacheBytes int64         // tier.manifest_cache_bytes: bound of the manifest pages held in memory
	ReadAhead          int           // tier.read_ahead: chunks fetched ahead of a sequential reader; 0 disables
	ReadWorkers        int           // tier.read_workers: concurrent GETs of remote reads
	UploadInterval     time.Duration // tier.upload_interval: how often closed segments are looked for
	IdleUpload         time.Duration // tier.idle_upload: roll and upload an active segment older than this
	OrphanGrace        time.Duration // tier.orphan_grace: age before an unreferenced object is deleted
	CollectInterval    time.Duration // tier.collect_interval: how often orphans are looked for
	LocalDiskLimit     int64         // tier.local_disk_limit: produce fails (retriably) above it; 0 means none
	// MetadataCheckpointInterval is tier.metadata_checkpoint_interval: the
	// longest between two readings of the manifests for the controller's
	// metadata checkpoint; MetadataCheckpointRetention is
	// tier.metadata_checkpoint_retention: checkpoints older are deleted
	// (the newest three always kept).
	MetadataCheckpointInterval, MetadataCheckpointRetention time.Duration
	// TestShortOrphanGrace is STRATA_TEST_SHORT_ORPHAN_GRACE, for tests only.
	TestShortOrphanGrace bool
}

// ReadReplica configures the read-replica topics a node serves
// (docs/operations.md, Read replicas).
type ReadReplica struct {
	PollInterval  time.Duration // read_replica.poll_interval: how often sources' manifests are read
	Notifications bool          // read_replica.notifications: also follow MinIO sources by bucket notifications
	// AllowedEndpoints is read_replica.allowed_endpoints: the S3
	// endpoints other than the node's own that a source URI may name
	// (?endpoint=); the node signs its requests to them with its keys.
	AllowedEndpoints []string
}

// Compactor configures log compaction, local and on the cold tier. See
// compactor.Config for what each knob does.
type Compactor struct {
	MemoryBytes   int64         // compactor.memory_bytes: key-map budget of all workers together
	Workers       int           // compactor.workers: partitions compacted at once
	IOBytesPerSec int64         // compactor.io_bytes_per_sec: local compaction I/O throttle; 0 is unlimited
	Interval      time.Duration // compactor.interval: how often partitions are checked for work
	// TestPauseAt is STRATA_TEST_COMPACTOR_PAUSE, for crash tests only.
	TestPauseAt string
}

// Transactions configures the transaction coordinator (docs/transactions.md).
// See broker.Config for what each knob does; the names in parentheses are
// Kafka's.
type Transactions struct {
	// StatePartitions is transactions.state_partitions: partitions of
	// __transaction_state when the node creates it, which fixes the
	// coordinator of each transactional id
	// (transaction.state.log.num.partitions).
	StatePartitions int32
	MaxTimeout      time.Duration // transactions.max_timeout: the longest transaction.timeout.ms a producer may ask for (transaction.max.timeout.ms)
	IDExpiration    time.Duration // transactions.id_expiration: forget a transactional id idle this long (transactional.id.expiration.ms)
	AbortInterval   time.Duration // transactions.abort_interval: how often timed-out transactions are looked for (transaction.abort.timed.out.transaction.cleanup.interval.ms)
}

// Logging configures the node's log output.
type Logging struct {
	Level  slog.Level // logging.level
	Format string     // logging.format: "text" or "json"
}

// Defaults for a node. DefaultHTTPListen is shared with `strata dev`.
const (
	DefaultListen          = "127.0.0.1:9092"
	DefaultHTTPListen      = "127.0.0.1:9644"
	defaultMaxRequestBytes = 100 << 20 // Kafka's socket.request.max.bytes
)

// Defaults returns the configuration a node starts from before the file,
// the environment and flags are applied. The data directory has no default:
// a production node must be told where its data lives.
func Defaults() Config {
	return Config{
		Kafka: Kafka{
			Listen:          DefaultListen,
			MaxRequestBytes: defaultMaxRequestBytes,

			QueuedMaxRequestBytes: broker.DefaultQueuedMaxRequestBytes,
			ConnectionsMaxIdle:    broker.DefaultConnectionsMaxIdle,
			FetchMaxBytes:         broker.DefaultFetchMaxBytes,
		},
		HTTP: HTTP{Listen: DefaultHTTPListen},
		Cluster: Cluster{
			SessionTimeout:    broker.DefaultSessionTimeout,
			ReplicaLagTimeMax: broker.DefaultReplicaLagTimeMax,
		},
		S3: S3{PathStyle: true},
		Tier: Tier{
			Enabled:            true,
			ChunkBytes:         tier.DefaultChunkBytes,
			MemoryBytes:        tier.DefaultMemoryBytes,
			CacheBytes:         tier.DefaultCacheBytes,
			ManifestCacheBytes: tier.DefaultManifestCacheBytes,
			ReadAhead:          tier.DefaultReadAhead,
			ReadWorkers:        tier.DefaultReadWorkers,
			UploadInterval:     time.Second,
			IdleUpload:         10 * time.Minute,
			OrphanGrace:        time.Hour,
			CollectInterval:    10 * time.Minute,

			MetadataCheckpointInterval:  node.DefaultCheckpointInterval,
			MetadataCheckpointRetention: node.DefaultCheckpointRetention,
		},
		ReadReplica: ReadReplica{PollInterval: node.DefaultReadReplicaPollInterval},
		Compactor: Compactor{
			MemoryBytes: compactor.DefaultMemoryBytes,
			Workers:     compactor.DefaultWorkers,
			Interval:    compactor.DefaultInterval,
		},
		Topics: Topics{
			AutoCreate:        true, // Kafka's auto.create.topics.enable default
			DefaultPartitions: 1,    // Kafka's num.partitions default
			OffsetsPartitions: 50,   // Kafka's offsets.topic.num.partitions default

			DefaultReplicationFactor: 1, // Kafka's default.replication.factor
		},
		Transactions: Transactions{
			StatePartitions: txnDefaults.TransactionStatePartitions,
			MaxTimeout:      txnDefaults.TransactionMaxTimeout,
			IDExpiration:    txnDefaults.TransactionalIDExpiration,
			AbortInterval:   txnDefaults.TransactionAbortInterval,
		},
		Logging: Logging{Level: slog.LevelInfo, Format: "text"},
	}
}

// txnDefaults holds the broker's transaction defaults (Kafka's), taken from
// the broker itself so that the two can never disagree.
var txnDefaults = broker.Config{}.WithDefaults()

// checkQuorum checks this node's place in the metadata quorum, once every
// source is applied: the raft listener and the voters may come from
// different ones.
func (c *Config) checkQuorum() error {
	if len(c.Cluster.Voters) > 0 && c.Cluster.RaftListen == "" {
		return fmt.Errorf("cluster.voters is set but node %d has no raft listen address (use --raft-listen, %s or cluster.raft_listen in the config file)",
			c.Node.ID, envName("raft-listen"))
	}
	if err := meta.CheckQuorum(c.Node.ID, c.Cluster.RaftListen, c.Cluster.Voters); err != nil {
		return fmt.Errorf("cluster.voters: %w", err)
	}
	return nil
}

// check reports settings that no source provided but that a node needs,
// and settings that are each valid but do not fit together.
func (c *Config) check(needDataDir bool) error {
	if needDataDir && c.Node.DataDir == "" {
		return fmt.Errorf("node.data_dir is not set (use --data-dir, %s or node.data_dir in the config file)", envName("data-dir"))
	}
	if (c.S3.AccessKey == "") != (c.S3.SecretKey == "") {
		set, unset := EnvS3AccessKey, EnvS3SecretKey
		if c.S3.AccessKey == "" {
			set, unset = unset, set
		}
		return fmt.Errorf("%s is set but %s is not (set both, or neither to use the AWS credential chain)", set, unset)
	}
	// Checked even with the tier off: the operator named two places for
	// one bucket, and turning the tier back on must not pick one silently.
	if err := c.checkSecurity(); err != nil {
		return err
	}
	if c.Tier.BucketDir != "" && c.S3.Bucket != "" {
		return fmt.Errorf("tier.bucket_dir %q and s3.bucket %q are both set: the cold tier is a directory or an S3 bucket, not both", c.Tier.BucketDir, c.S3.Bucket)
	}
	if !c.Tier.Enabled {
		return nil
	}
	if c.S3.Bucket == "" {
		for _, s := range []struct{ key, val string }{{"s3.endpoint", c.S3.Endpoint}, {"s3.prefix", c.S3.Prefix}, {"s3.region", c.S3.Region}} {
			if s.val != "" {
				return fmt.Errorf("%s is %q but s3.bucket is not set (use --s3-bucket, %s or s3.bucket in the config file)", s.key, s.val, envName("s3-bucket"))
			}
		}
	}
	// tier.Open refuses this too, but only once the node is half started.
	if c.Tier.CacheBytes < 2*c.Tier.ChunkBytes {
		return fmt.Errorf("tier.chunk_bytes %d is more than half of tier.cache_bytes %d (the chunk cache must hold two chunks)", c.Tier.ChunkBytes, c.Tier.CacheBytes)
	}
	if c.Tier.MemoryBytes < 2*c.Tier.ChunkBytes {
		return fmt.Errorf("tier.chunk_bytes %d is more than half of tier.memory_bytes %d (chunk memory must hold two chunks)", c.Tier.ChunkBytes, c.Tier.MemoryBytes)
	}
	return nil
}
