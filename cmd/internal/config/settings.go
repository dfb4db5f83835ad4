package config

import (
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"strata/internal/certs"
	"strata/meta"
)

// setting is one configurable value, reachable as a YAML key, a flag and an
// environment variable. Exactly one of set and setEntry is non-nil: set for
// scalar settings, setEntry for map-valued ones (topics.defaults), whose
// entries are merged key by key across sources.
type setting struct {
	key   string // dotted YAML path, e.g. "kafka.listen"
	flag  string // flag name without dashes; the env var is derived from it
	typ   string // shown in --help
	usage string

	set func(c *Config, raw string) error
	get func(c *Config) string

	setEntry func(c *Config, k, v string) error
}

// settings is the single declaration of every setting. Order is the order
// of --help and of the documentation.
var settings = []*setting{
	{
		key: "node.id", flag: "node-id", typ: "int", usage: "this broker's id in the cluster (Kafka's node.id)",
		set: int32Setter(func(c *Config) *int32 { return &c.Node.ID }, 0),
		get: func(c *Config) string { return strconv.Itoa(int(c.Node.ID)) },
	},
	{
		key: "node.data_dir", flag: "data-dir", typ: "dir", usage: "directory for the partition logs and the metadata log",
		set: stringSetter(func(c *Config) *string { return &c.Node.DataDir }),
		get: func(c *Config) string { return c.Node.DataDir },
	},
	{
		key: "node.rack", flag: "rack", typ: "string", usage: "rack advertised to clients (rack-aware consumers)",
		set: stringSetter(func(c *Config) *string { return &c.Node.Rack }),
		get: func(c *Config) string { return c.Node.Rack },
	},
	{
		key: "cluster.id", flag: "cluster-id", typ: "string", usage: "cluster id reported to clients and written into the bucket (default: a random id, chosen when the cluster first starts)",
		set: stringSetter(func(c *Config) *string { return &c.Cluster.ID }),
		get: func(c *Config) string { return c.Cluster.ID },
	},
	{
		key: "cluster.raft_listen", flag: "raft-listen", typ: "host:port", usage: "this node's raft listener for the metadata quorum (needed with --voters)",
		set: hostPortSetter(func(c *Config) *string { return &c.Cluster.RaftListen }, true),
		get: func(c *Config) string { return c.Cluster.RaftListen },
	},
	{
		key: "cluster.voters", flag: "voters", typ: "id@host:port,...", usage: "the metadata quorum's voters; a node not listed joins as a non-voter (default: this node alone)",
		set: func(c *Config, raw string) error {
			vs, err := meta.ParseVoters(raw)
			if err != nil {
				return err
			}
			c.Cluster.Voters = vs
			return nil
		},
		get: func(c *Config) string {
			var parts []string
			for _, v := range c.Cluster.Voters {
				parts = append(parts, v.String())
			}
			return strings.Join(parts, ",")
		},
	},
	{
		key: "cluster.broker_session_timeout", flag: "broker-session-timeout", typ: "duration", usage: "a broker whose heartbeats to the controller stop this long is fenced and its leaderships move (broker.session.timeout.ms)",
		set: positiveDurationSetter(func(c *Config) *time.Duration { return &c.Cluster.SessionTimeout }),
		get: func(c *Config) string { return c.Cluster.SessionTimeout.String() },
	},
	{
		key: "cluster.broker_heartbeat_interval", flag: "broker-heartbeat-interval", typ: "duration", usage: "how often a broker heartbeats to the controller; shorter than the session timeout (default: a quarter of it) (broker.heartbeat.interval.ms)",
		set: positiveDurationSetter(func(c *Config) *time.Duration { return &c.Cluster.HeartbeatInterval }),
		get: func(c *Config) string {
			if c.Cluster.HeartbeatInterval == 0 {
				return "" // derived from the session timeout
			}
			return c.Cluster.HeartbeatInterval.String()
		},
	},
	{
		key: "cluster.replica_lag_time_max", flag: "replica-lag-time-max", typ: "duration", usage: "a follower not caught up with the leader for this long leaves the ISR (replica.lag.time.max.ms)",
		set: positiveDurationSetter(func(c *Config) *time.Duration { return &c.Cluster.ReplicaLagTimeMax }),
		get: func(c *Config) string { return c.Cluster.ReplicaLagTimeMax.String() },
	},
	{
		key: "kafka.listen", flag: "listen", typ: "host:port", usage: "Kafka listener address (port 0 picks a free port)",
		set: hostPortSetter(func(c *Config) *string { return &c.Kafka.Listen }, false),
		get: func(c *Config) string { return c.Kafka.Listen },
	},
	{
		key: "kafka.advertised_addr", flag: "advertised-addr", typ: "host:port", usage: "address clients are told to connect to (default: the listener's)",
		set: hostPortSetter(func(c *Config) *string { return &c.Kafka.AdvertisedAddr }, true),
		get: func(c *Config) string { return c.Kafka.AdvertisedAddr },
	},
	{
		key: "kafka.max_request_bytes", flag: "max-request-bytes", typ: "bytes", usage: "largest request accepted (socket.request.max.bytes)",
		set: bytes32Setter(func(c *Config) *int32 { return &c.Kafka.MaxRequestBytes }, 1024),
		get: func(c *Config) string { return strconv.Itoa(int(c.Kafka.MaxRequestBytes)) },
	},
	{
		key: "kafka.queued_max_request_bytes", flag: "queued-max-request-bytes", typ: "bytes", usage: "bytes of requests read or handled at once across all connections; beyond it sockets are not read (queued.max.request.bytes)",
		set: bytesSetter(func(c *Config) *int64 { return &c.Kafka.QueuedMaxRequestBytes }, 1024),
		get: func(c *Config) string { return formatBytes(c.Kafka.QueuedMaxRequestBytes) },
	},
	{
		key: "kafka.connections_max_idle", flag: "connections-max-idle", typ: "duration", usage: "close a connection that sends and receives nothing for this long (connections.max.idle.ms)",
		set: positiveDurationSetter(func(c *Config) *time.Duration { return &c.Kafka.ConnectionsMaxIdle }),
		get: func(c *Config) string { return c.Kafka.ConnectionsMaxIdle.String() },
	},
	{
		key: "kafka.fetch_max_bytes", flag: "fetch-max-bytes", typ: "bytes", usage: "largest Fetch response, whatever the client asks for; the first batch still goes whole (fetch.max.bytes)",
		set: bytes32Setter(func(c *Config) *int32 { return &c.Kafka.FetchMaxBytes }, 1024),
		get: func(c *Config) string { return strconv.Itoa(int(c.Kafka.FetchMaxBytes)) },
	},
	{
		key: "kafka.listeners", flag: "listener", typ: "NAME=PROTO://host:port", usage: "a named Kafka listener, PROTO one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL (repeatable; replaces --listen; the first is the bootstrap address)",
		setEntry: func(c *Config, name, v string) error {
			l, err := parseListener(name, v)
			if err != nil {
				return err
			}
			for i := range c.Kafka.Listeners {
				if c.Kafka.Listeners[i].Name == name {
					c.Kafka.Listeners[i] = l
					return nil
				}
			}
			c.Kafka.Listeners = append(c.Kafka.Listeners, l)
			return nil
		},
	},
	{
		key: "kafka.advertised_listeners", flag: "advertised-listener", typ: "NAME=host:port", usage: "address a listener's clients are told to connect to (repeatable; default: the listener's own)",
		setEntry: func(c *Config, name, v string) error {
			if name == "" {
				return fmt.Errorf("%q: empty listener name", name+"="+v)
			}
			if err := checkHostPort(v); err != nil {
				return fmt.Errorf("advertised listener %s: %w", name, err)
			}
			if c.Kafka.AdvertisedListeners == nil {
				c.Kafka.AdvertisedListeners = make(map[string]string)
			}
			c.Kafka.AdvertisedListeners[name] = v
			return nil
		},
	},
	{
		key: "kafka.inter_broker_listener", flag: "inter-broker-listener", typ: "NAME", usage: "the listener other brokers reach this one on: replica fetches, forwarded and controller requests (default: the first listener)",
		set: stringSetter(func(c *Config) *string { return &c.Kafka.InterBrokerListener }),
		get: func(c *Config) string { return c.Kafka.InterBrokerListener },
	},
	{
		key: "tls.cert_file", flag: "tls-cert-file", typ: "file", usage: "this node's certificate (PEM, leaf first), for SSL and SASL_SSL listeners, TLS to other nodes and the raft transport; reloaded when it changes",
		set: stringSetter(func(c *Config) *string { return &c.TLS.CertFile }),
		get: func(c *Config) string { return c.TLS.CertFile },
	},
	{
		key: "tls.key_file", flag: "tls-key-file", typ: "file", usage: "the private key of --tls-cert-file (PEM)",
		set: stringSetter(func(c *Config) *string { return &c.TLS.KeyFile }),
		get: func(c *Config) string { return c.TLS.KeyFile },
	},
	{
		key: "tls.ca_file", flag: "tls-ca-file", typ: "file", usage: "the cluster CA (PEM): verifies client certificates, other nodes and every raft peer, which then needs a certificate it signed",
		set: stringSetter(func(c *Config) *string { return &c.TLS.CAFile }),
		get: func(c *Config) string { return c.TLS.CAFile },
	},
	{
		key: "tls.client_auth", flag: "tls-client-auth", typ: "none|request|require", usage: "client certificates on SSL and SASL_SSL listeners: none, request (verified when given) or require (ssl.client.auth)",
		set: func(c *Config, raw string) error {
			a, err := certs.ParseClientAuth(strings.ToLower(strings.TrimSpace(raw)))
			if err != nil {
				return err
			}
			c.TLS.ClientAuth = string(a)
			return nil
		},
		get: func(c *Config) string { return c.TLS.ClientAuth },
	},
	{
		key: "http.listen", flag: "http-listen", typ: "host:port", usage: `metrics and health listener ("off" disables it)`,
		set: hostPortSetter(func(c *Config) *string { return &c.HTTP.Listen }, true),
		get: func(c *Config) string { return c.HTTP.Listen },
	},
	{
		key: "http.tls", flag: "http-tls", typ: "bool", usage: "serve /metrics and /readyz over TLS with the node's certificate (--tls-cert-file)",
		set: boolSetter(func(c *Config) *bool { return &c.HTTP.TLS }),
		get: func(c *Config) string { return strconv.FormatBool(c.HTTP.TLS) },
	},
	{
		key: "http.pprof", flag: "http-pprof", typ: "bool", usage: "serve Go's CPU, heap, goroutine and trace profiles under /debug/pprof/ (behind the bearer token when set)",
		set: boolSetter(func(c *Config) *bool { return &c.HTTP.Pprof }),
		get: func(c *Config) string { return strconv.FormatBool(c.HTTP.Pprof) },
	},
	{
		key: "http.bearer_token", flag: "http-bearer-token", typ: "token|env:VAR|file:PATH", usage: "answer 401 on /metrics and /readyz without Authorization: Bearer <token> (/healthz stays open); env: and file: read it from a variable or a file",
		set: func(c *Config, raw string) error {
			tok, err := resolveSecret(raw)
			if err != nil {
				return err
			}
			c.HTTP.BearerToken = tok
			return nil
		},
		// Never shown: --help prints defaults, and a token is a secret.
		get: func(c *Config) string { return "" },
	},
	{
		key: "topics.auto_create", flag: "auto-create-topics", typ: "bool", usage: "create unknown topics on Metadata and Produce (auto.create.topics.enable)",
		set: boolSetter(func(c *Config) *bool { return &c.Topics.AutoCreate }),
		get: func(c *Config) string { return strconv.FormatBool(c.Topics.AutoCreate) },
	},
	{
		key: "topics.default_partitions", flag: "default-partitions", typ: "int", usage: "partitions of auto-created topics and of creates that leave it to the broker (num.partitions)",
		set: int32Setter(func(c *Config) *int32 { return &c.Topics.DefaultPartitions }, 1),
		get: func(c *Config) string { return strconv.Itoa(int(c.Topics.DefaultPartitions)) },
	},
	{
		key: "topics.offsets_partitions", flag: "offsets-partitions", typ: "int", usage: "partitions of __consumer_offsets when the node creates it; fixes which partition owns each group (offsets.topic.num.partitions)",
		set: int32Setter(func(c *Config) *int32 { return &c.Topics.OffsetsPartitions }, 1),
		get: func(c *Config) string { return strconv.Itoa(int(c.Topics.OffsetsPartitions)) },
	},
	{
		key: "topics.default_replication_factor", flag: "default-replication-factor", typ: "int", usage: "replicas of auto-created topics and of creates that leave the factor to the broker (default.replication.factor)",
		set: func(c *Config, raw string) error {
			var n int32
			if err := int32Setter(func(*Config) *int32 { return &n }, 1)(c, raw); err != nil {
				return err
			}
			if n > math.MaxInt16 {
				return fmt.Errorf("%q is more than %d", raw, math.MaxInt16)
			}
			c.Topics.DefaultReplicationFactor = int16(n)
			return nil
		},
		get: func(c *Config) string { return strconv.Itoa(int(c.Topics.DefaultReplicationFactor)) },
	},
	{
		key: "topics.defaults", flag: "topic-default", typ: "key=value", usage: "broker default for a topic config, e.g. retention.ms=86400000 (repeatable)",
		setEntry: func(c *Config, k, v string) error {
			if k == "" {
				return fmt.Errorf("%q: empty topic config name", k+"="+v)
			}
			if c.Topics.Defaults == nil {
				c.Topics.Defaults = make(map[string]string)
			}
			c.Topics.Defaults[k] = v
			return nil
		},
	},
	{
		key: "storage.flush_interval", flag: "flush-interval", typ: "duration", usage: "fsync logs at least this often (0: leave it to the OS, as Kafka does)",
		set: durationSetter(func(c *Config) *time.Duration { return &c.Storage.FlushInterval }),
		get: func(c *Config) string { return c.Storage.FlushInterval.String() },
	},
	{
		key: "s3.endpoint", flag: "s3-endpoint", typ: "url", usage: "S3 endpoint URL, e.g. http://127.0.0.1:9000 for MinIO (default: AWS S3)",
		set: func(c *Config, raw string) error {
			raw = strings.TrimSpace(raw)
			if raw != "" {
				u, err := url.Parse(raw)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return fmt.Errorf("%q is not an http:// or https:// URL", raw)
				}
			}
			c.S3.Endpoint = raw
			return nil
		},
		get: func(c *Config) string { return c.S3.Endpoint },
	},
	{
		key: "s3.bucket", flag: "s3-bucket", typ: "name", usage: "S3 bucket for the cold tier, which must exist (default: the directory store in <data-dir>/bucket)",
		set: stringSetter(func(c *Config) *string { return &c.S3.Bucket }),
		get: func(c *Config) string { return c.S3.Bucket },
	},
	{
		key: "s3.prefix", flag: "s3-prefix", typ: "prefix", usage: "key prefix inside the bucket, so several clusters can share it",
		set: stringSetter(func(c *Config) *string { return &c.S3.Prefix }),
		get: func(c *Config) string { return c.S3.Prefix },
	},
	{
		key: "s3.region", flag: "s3-region", typ: "region", usage: "S3 signing region (default: the AWS chain's, else us-east-1)",
		set: stringSetter(func(c *Config) *string { return &c.S3.Region }),
		get: func(c *Config) string { return c.S3.Region },
	},
	{
		key: "s3.path_style", flag: "s3-path-style", typ: "bool", usage: "address the bucket as endpoint/bucket/key, as MinIO needs",
		set: boolSetter(func(c *Config) *bool { return &c.S3.PathStyle }),
		get: func(c *Config) string { return strconv.FormatBool(c.S3.PathStyle) },
	},
	{
		key: "s3.ca_file", flag: "s3-ca-file", typ: "file", usage: "CA certificates (PEM) an https S3 endpoint is verified against, besides the system's",
		set: stringSetter(func(c *Config) *string { return &c.S3.CAFile }),
		get: func(c *Config) string { return c.S3.CAFile },
	},
	{
		key: "s3.sse", flag: "s3-sse", typ: "AES256|aws:kms", usage: "server-side encryption of every object written: AES256 (SSE-S3) or aws:kms (SSE-KMS)",
		set: func(c *Config, raw string) error {
			switch v := strings.TrimSpace(raw); v {
			case "", "AES256", "aws:kms":
				c.S3.SSE = v
				return nil
			}
			return fmt.Errorf("%q: want AES256 or aws:kms", raw)
		},
		get: func(c *Config) string { return c.S3.SSE },
	},
	{
		key: "s3.sse_kms_key_id", flag: "s3-sse-kms-key-id", typ: "key id", usage: "the KMS key of --s3-sse aws:kms (default: the bucket's)",
		set: stringSetter(func(c *Config) *string { return &c.S3.SSEKMSKeyID }),
		get: func(c *Config) string { return c.S3.SSEKMSKeyID },
	},
	{
		key: "tier.enabled", flag: "tier", typ: "on|off", usage: "tier closed segments to the object store; off keeps every log wholly local",
		set: func(c *Config, raw string) error {
			switch strings.ToLower(strings.TrimSpace(raw)) {
			case "on", "true", "1", "yes":
				c.Tier.Enabled = true
			case "off", "false", "0", "no":
				c.Tier.Enabled = false
			default:
				return fmt.Errorf("%q is not on or off", raw)
			}
			return nil
		},
		get: func(c *Config) string { return map[bool]string{true: "on", false: "off"}[c.Tier.Enabled] },
	},
	{
		key: "tier.bucket_dir", flag: "bucket-dir", typ: "dir", usage: "directory store of the cold tier when no S3 bucket is set; nodes given the same one share a bucket (default <data-dir>/bucket)",
		set: stringSetter(func(c *Config) *string { return &c.Tier.BucketDir }),
		get: func(c *Config) string { return c.Tier.BucketDir },
	},
	{
		key: "tier.chunk_bytes", flag: "tier-chunk-bytes", typ: "bytes", usage: "size of the ranged GETs that remote reads are made of",
		set: bytesSetter(func(c *Config) *int64 { return &c.Tier.ChunkBytes }, 1),
		get: func(c *Config) string { return formatBytes(c.Tier.ChunkBytes) },
	},
	{
		key: "tier.memory_bytes", flag: "tier-memory-bytes", typ: "bytes", usage: "bound of the remote chunks held in memory, where every download lands (at least two chunks)",
		set: bytesSetter(func(c *Config) *int64 { return &c.Tier.MemoryBytes }, 1),
		get: func(c *Config) string { return formatBytes(c.Tier.MemoryBytes) },
	},
	{
		key: "tier.cache_bytes", flag: "tier-cache-bytes", typ: "bytes", usage: "bound of the on-disk cache of remote chunks, which keeps those downloaded twice (at least two chunks)",
		set: bytesSetter(func(c *Config) *int64 { return &c.Tier.CacheBytes }, 1),
		get: func(c *Config) string { return formatBytes(c.Tier.CacheBytes) },
	},
	{
		key: "tier.manifest_cache_bytes", flag: "tier-manifest-cache-bytes", typ: "bytes", usage: "bound of the manifest pages held in memory, all partitions together",
		set: bytesSetter(func(c *Config) *int64 { return &c.Tier.ManifestCacheBytes }, 1),
		get: func(c *Config) string { return formatBytes(c.Tier.ManifestCacheBytes) },
	},
	{
		key: "tier.read_ahead", flag: "tier-read-ahead", typ: "chunks", usage: "chunks fetched ahead of a sequential remote reader (0 disables read-ahead)",
		set: intSetter(func(c *Config) *int { return &c.Tier.ReadAhead }, 0),
		get: func(c *Config) string { return strconv.Itoa(c.Tier.ReadAhead) },
	},
	{
		key: "tier.read_workers", flag: "tier-read-workers", typ: "int", usage: "concurrent GETs of remote reads, read-ahead included",
		set: intSetter(func(c *Config) *int { return &c.Tier.ReadWorkers }, 1),
		get: func(c *Config) string { return strconv.Itoa(c.Tier.ReadWorkers) },
	},
	{
		key: "tier.upload_interval", flag: "tier-upload-interval", typ: "duration", usage: "how often partitions are checked for closed segments to upload",
		set: positiveDurationSetter(func(c *Config) *time.Duration { return &c.Tier.UploadInterval }),
		get: func(c *Config) string { return c.Tier.UploadInterval.String() },
	},
	{
		key: "tier.idle_upload", flag: "tier-idle-upload", typ: "duration", usage: "roll and upload an active segment older than this, so a quiet partition still reaches the bucket",
		set: positiveDurationSetter(func(c *Config) *time.Duration { return &c.Tier.IdleUpload }),
		get: func(c *Config) string { return c.Tier.IdleUpload.String() },
	},
	{
		key: "tier.orphan_grace", flag: "tier-orphan-grace", typ: "duration", usage: "age before an object no manifest references is deleted (at least 10m)",
		set: positiveDurationSetter(func(c *Config) *time.Duration { return &c.Tier.OrphanGrace }),
		get: func(c *Config) string { return c.Tier.OrphanGrace.String() },
	},
	{
		key: "tier.collect_interval", flag: "tier-collect-interval", typ: "duration", usage: "how often orphaned objects are looked for",
		set: positiveDurationSetter(func(c *Config) *time.Duration { return &c.Tier.CollectInterval }),
		get: func(c *Config) string { return c.Tier.CollectInterval.String() },
	},
	{
		key: "read_replica.poll_interval", flag: "read-replica-poll-interval", typ: "duration", usage: "how often read-replica topics read their source's manifests",
		set: positiveDurationSetter(func(c *Config) *time.Duration { return &c.ReadReplica.PollInterval }),
		get: func(c *Config) string { return c.ReadReplica.PollInterval.String() },
	},
	{
		key: "read_replica.notifications", flag: "read-replica-notifications", typ: "bool", usage: "also follow S3 sources that are MinIO by bucket notifications, polling between; other stores are polled alone",
		set: boolSetter(func(c *Config) *bool { return &c.ReadReplica.Notifications }),
		get: func(c *Config) string { return strconv.FormatBool(c.ReadReplica.Notifications) },
	},
	{
		key: "read_replica.allowed_endpoints", flag: "read-replica-allowed-endpoints", typ: "url,...", usage: "S3 endpoints besides the node's own that a read replica's source URI may name with ?endpoint= (default: none)",
		set: func(c *Config, raw string) error {
			var eps []string
			for _, ep := range strings.Split(raw, ",") {
				ep = strings.TrimSpace(ep)
				if ep == "" {
					continue
				}
				if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return fmt.Errorf("%q is not an http:// or https:// URL", ep)
				}
				eps = append(eps, strings.TrimSuffix(ep, "/"))
			}
			c.ReadReplica.AllowedEndpoints = eps
			return nil
		},
		get: func(c *Config) string { return strings.Join(c.ReadReplica.AllowedEndpoints, ",") },
	},
	{
		key: "tier.local_disk_limit", flag: "tier-local-disk-limit", typ: "bytes", usage: "local log bytes above which produce fails with a retriable error while uploads are behind (0: no limit)",
		set: bytesSetter(func(c *Config) *int64 { return &c.Tier.LocalDiskLimit }, 0),
		get: func(c *Config) string { return formatBytes(c.Tier.LocalDiskLimit) },
	},
	{
		key: "tier.metadata_checkpoint_interval", flag: "tier-metadata-checkpoint-interval", typ: "duration", usage: "longest between two metadata checkpoints the controller writes to the bucket when only manifests changed",
		set: positiveDurationSetter(func(c *Config) *time.Duration { return &c.Tier.MetadataCheckpointInterval }),
		get: func(c *Config) string { return c.Tier.MetadataCheckpointInterval.String() },
	},
	{
		key: "tier.metadata_checkpoint_retention", flag: "tier-metadata-checkpoint-retention", typ: "duration", usage: "age after which metadata checkpoints are deleted from the bucket (the newest three are always kept)",
		set: positiveDurationSetter(func(c *Config) *time.Duration { return &c.Tier.MetadataCheckpointRetention }),
		get: func(c *Config) string { return c.Tier.MetadataCheckpointRetention.String() },
	},
	{
		key: "compactor.memory_bytes", flag: "compactor-memory-bytes", typ: "bytes", usage: "memory of the compaction key maps, all workers together (Kafka's log.cleaner.dedupe.buffer.size)",
		set: bytesSetter(func(c *Config) *int64 { return &c.Compactor.MemoryBytes }, 1<<20),
		get: func(c *Config) string { return formatBytes(c.Compactor.MemoryBytes) },
	},
	{
		key: "compactor.workers", flag: "compactor-workers", typ: "int", usage: "partitions compacted at once (Kafka's log.cleaner.threads)",
		set: intSetter(func(c *Config) *int { return &c.Compactor.Workers }, 1),
		get: func(c *Config) string { return strconv.Itoa(c.Compactor.Workers) },
	},
	{
		key: "compactor.io_bytes_per_sec", flag: "compactor-io-bytes-per-sec", typ: "bytes", usage: "bytes per second local compaction may read and write (0: unlimited)",
		set: bytesSetter(func(c *Config) *int64 { return &c.Compactor.IOBytesPerSec }, 0),
		get: func(c *Config) string { return formatBytes(c.Compactor.IOBytesPerSec) },
	},
	{
		key: "compactor.interval", flag: "compactor-interval", typ: "duration", usage: "how often partitions are checked for compaction work",
		set: positiveDurationSetter(func(c *Config) *time.Duration { return &c.Compactor.Interval }),
		get: func(c *Config) string { return c.Compactor.Interval.String() },
	},
	{
		key: "transactions.state_partitions", flag: "transaction-state-partitions", typ: "int", usage: "partitions of __transaction_state when the node creates it; fixes which partition owns each transactional id (transaction.state.log.num.partitions)",
		set: int32Setter(func(c *Config) *int32 { return &c.Transactions.StatePartitions }, 1),
		get: func(c *Config) string { return strconv.Itoa(int(c.Transactions.StatePartitions)) },
	},
	{
		key: "transactions.max_timeout", flag: "transaction-max-timeout", typ: "duration", usage: "longest transaction timeout a producer may ask for (transaction.max.timeout.ms)",
		set: millisSetter(func(c *Config) *time.Duration { return &c.Transactions.MaxTimeout }, math.MaxInt32*time.Millisecond),
		get: func(c *Config) string { return c.Transactions.MaxTimeout.String() },
	},
	{
		key: "transactions.id_expiration", flag: "transactional-id-expiration", typ: "duration", usage: "forget a transactional id that has had no transaction for this long (transactional.id.expiration.ms)",
		set: millisSetter(func(c *Config) *time.Duration { return &c.Transactions.IDExpiration }, 0),
		get: func(c *Config) string { return c.Transactions.IDExpiration.String() },
	},
	{
		key: "transactions.abort_interval", flag: "transaction-abort-interval", typ: "duration", usage: "how often transactions open past their timeout are looked for and aborted (transaction.abort.timed.out.transaction.cleanup.interval.ms)",
		set: millisSetter(func(c *Config) *time.Duration { return &c.Transactions.AbortInterval }, 0),
		get: func(c *Config) string { return c.Transactions.AbortInterval.String() },
	},
	{
		key: "logging.level", flag: "log-level", typ: "level", usage: "debug, info, warn or error",
		set: func(c *Config, raw string) error {
			l, err := ParseLevel(raw)
			if err != nil {
				return err
			}
			c.Logging.Level = l
			return nil
		},
		get: func(c *Config) string { return strings.ToLower(c.Logging.Level.String()) },
	},
	{
		key: "logging.format", flag: "log-format", typ: "format", usage: "text or json",
		set: func(c *Config, raw string) error {
			f := strings.ToLower(strings.TrimSpace(raw))
			if f != "text" && f != "json" {
				return fmt.Errorf("%q is not a log format (text or json)", raw)
			}
			c.Logging.Format = f
			return nil
		},
		get: func(c *Config) string { return c.Logging.Format },
	},
}

var (
	byKey  = make(map[string]*setting)
	byEnv  = make(map[string]*setting)
	groups = make(map[string]bool) // YAML sections: every proper prefix of a key
)

func init() {
	settings = append(settings, saslSettings...)       // sasl.go
	settings = append(settings, authorizerSettings...) // authorizer.go
	for _, s := range settings {
		byKey[s.key] = s
		byEnv[s.env()] = s
		for i, r := range s.key {
			if r == '.' {
				groups[s.key[:i]] = true
			}
		}
	}
}

// env is the setting's environment variable, STRATA_ and the flag name in
// upper case. Map settings take a comma-separated list of key=value.
func (s *setting) env() string {
	if s.setEntry != nil {
		return envName(s.flag + "s") // STRATA_TOPIC_DEFAULTS
	}
	return envName(s.flag)
}

func envName(flag string) string {
	return "STRATA_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// setFlag applies one flag's value: the value of a scalar setting, one
// key=value entry of a map setting.
func (s *setting) setFlag(c *Config, raw string) error {
	if s.setEntry != nil {
		return s.setPair(c, raw)
	}
	return s.set(c, raw)
}

// setPair applies one "key=value" entry of a map setting.
func (s *setting) setPair(c *Config, pair string) error {
	k, v, ok := strings.Cut(pair, "=")
	if !ok {
		return fmt.Errorf("%q is not key=value", pair)
	}
	return s.setEntry(c, strings.TrimSpace(k), strings.TrimSpace(v))
}

func stringSetter(field func(*Config) *string) func(*Config, string) error {
	return func(c *Config, raw string) error {
		*field(c) = raw
		return nil
	}
}

// int32Setter parses a 32-bit integer of at least min. The bound is checked
// here, not left to the broker, because the broker reads zero as "unset":
// an explicit 0 would otherwise be silently replaced by a default.
func int32Setter(field func(*Config) *int32, min int32) func(*Config, string) error {
	return func(c *Config, raw string) error {
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 32)
		if err != nil {
			if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
				return fmt.Errorf("%q is out of range for a 32-bit integer", raw)
			}
			return fmt.Errorf("%q is not an integer", raw)
		}
		if n < int64(min) {
			return fmt.Errorf("%q is less than %d", raw, min)
		}
		*field(c) = int32(n)
		return nil
	}
}

// intSetter parses an int of at least min.
func intSetter(field func(*Config) *int, min int) func(*Config, string) error {
	return func(c *Config, raw string) error {
		n, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%q is not an integer", raw)
		}
		if n < min {
			return fmt.Errorf("%q is less than %d", raw, min)
		}
		*field(c) = n
		return nil
	}
}

// byteUnits are the size suffixes parseBytes accepts, in lower case: IEC
// binary units and SI decimal ones, so "8MiB" and "8MB" mean what they say.
// A bare letter ("8M") is binary, as in docker, the JVM's -Xmx and most
// operators' habits: sizes here are buffers and caches, counted in powers
// of two.
var byteUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

// parseBytes parses a non-negative size: a number of bytes, or an integer
// followed by a unit (8MiB, 1GiB, 500MB).
func parseBytes(raw string) (int64, error) {
	s := strings.TrimSpace(raw)
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	unit, ok := byteUnits[strings.ToLower(strings.TrimSpace(s[i:]))]
	if err != nil || !ok {
		return 0, fmt.Errorf("%q is not a size (bytes, or a number with K, M, G, KiB, MiB, GiB, KB, MB, GB...)", raw)
	}
	if n < 0 {
		return 0, fmt.Errorf("%q is negative", raw)
	}
	if n > math.MaxInt64/unit {
		return 0, fmt.Errorf("%q is too large", raw)
	}
	return n * unit, nil
}

// formatBytes prints n in the largest binary unit that divides it.
func formatBytes(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

// bytesSetter parses a size of at least min bytes.
func bytesSetter(field func(*Config) *int64, min int64) func(*Config, string) error {
	return func(c *Config, raw string) error {
		n, err := parseBytes(raw)
		if err != nil {
			return err
		}
		if n < min {
			return fmt.Errorf("%q is less than %d", raw, min)
		}
		*field(c) = n
		return nil
	}
}

// bytes32Setter parses a size of at least min bytes that a Kafka int32
// length field can carry.
func bytes32Setter(field func(*Config) *int32, min int64) func(*Config, string) error {
	return func(c *Config, raw string) error {
		var n int64
		if err := bytesSetter(func(*Config) *int64 { return &n }, min)(c, raw); err != nil {
			return err
		}
		if n > math.MaxInt32 {
			return fmt.Errorf("%q is more than %d bytes", raw, math.MaxInt32)
		}
		*field(c) = int32(n)
		return nil
	}
}

// positiveDurationSetter parses a duration above zero: a zero interval
// would be a busy loop, and the broker reads zero as "default".
func positiveDurationSetter(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, raw string) error {
		d, err := time.ParseDuration(strings.TrimSpace(raw))
		if err != nil || d <= 0 {
			return fmt.Errorf("%q is not a positive duration (e.g. 500ms, 1s, 5m)", raw)
		}
		*field(c) = d
		return nil
	}
}

// millisSetter parses a duration of at least a millisecond, the unit
// Kafka counts these settings in (below it the broker would round to zero),
// and at most max when max is not zero.
func millisSetter(field func(*Config) *time.Duration, max time.Duration) func(*Config, string) error {
	return func(c *Config, raw string) error {
		d, err := time.ParseDuration(strings.TrimSpace(raw))
		switch {
		case max > 0 && (err != nil || d < time.Millisecond || d > max):
			return fmt.Errorf("%q is not a duration from 1ms to %s", raw, max)
		case err != nil || d < time.Millisecond:
			return fmt.Errorf("%q is not a duration of at least 1ms (e.g. 10s, 15m, 24h)", raw)
		}
		*field(c) = d
		return nil
	}
}

func boolSetter(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, raw string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%q is not a boolean (true or false)", raw)
		}
		*field(c) = b
		return nil
	}
}

func durationSetter(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, raw string) error {
		raw = strings.TrimSpace(raw)
		if raw == "0" {
			*field(c) = 0
			return nil
		}
		d, err := time.ParseDuration(raw)
		if err != nil || d < 0 {
			return fmt.Errorf("%q is not a duration (e.g. 500ms, 1s, 5m)", raw)
		}
		*field(c) = d
		return nil
	}
}

// hostPortSetter accepts host:port (an empty host means every interface).
// When optional, "" and "off" clear the address.
func hostPortSetter(field func(*Config) *string, optional bool) func(*Config, string) error {
	return func(c *Config, raw string) error {
		raw = strings.TrimSpace(raw)
		if optional && (raw == "" || strings.EqualFold(raw, "off")) {
			*field(c) = ""
			return nil
		}
		_, port, err := net.SplitHostPort(raw)
		if err != nil {
			return fmt.Errorf("%q is not host:port", raw)
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("%q does not have a port number", raw)
		}
		*field(c) = raw
		return nil
	}
}

// ParseLevel parses a log level name: debug, info, warn (or warning) or error.
func ParseLevel(raw string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(raw)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%q is not a log level (debug, info, warn or error)", raw)
}
