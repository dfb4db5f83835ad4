package broker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/broker/acl"
	"strata/broker/node"
	"strata/compactor"
	"strata/meta"
)

// Config configures one broker. Only cmd reads flags, files and the
// environment; everything arrives here already parsed.
type Config struct {
	// NodeID is this broker's id in the cluster (Kafka's node.id).
	NodeID int32
	// DataDir holds the partition logs (DataDir/logs) and the Raft
	// metadata (DataDir/meta).
	DataDir string
	// RaftListen and Voters place the node in the metadata quorum (see
	// meta.Config's RaftAddr and Voters); both empty is a one-node cluster
	// whose raft stays in-process.
	RaftListen string
	Voters     []meta.Voter
	// Listen is the Kafka listener, host:port. Port 0 picks a free port;
	// Addr reports the one chosen.
	Listen string
	// Advertised is the host:port clients are told to connect to. Empty
	// means the listener's actual address.
	//
	// Listen and Advertised are the one-listener form: with Listeners
	// empty, WithDefaults makes them the listener named PLAINTEXT.
	Advertised string
	// Listeners are the named Kafka listeners (Kafka's listeners and
	// advertised.listeners). Each has its own accept loop; a client is
	// told, in Metadata, FindCoordinator and DescribeCluster, every
	// broker's endpoint for the listener it connected on.
	Listeners []Listener
	// InterBrokerListener names the listener other brokers use to reach
	// this one: replica fetchers, forwarded requests and the controller
	// requests dial its advertised address (inter.broker.listener.name).
	// Empty means the first listener.
	InterBrokerListener string
	// TLS is the server side of every SSL and SASL_SSL listener (built by
	// cmd from internal/certs, which reloads its files on change);
	// required when such a listener exists. Its ClientAuth decides
	// whether SSL clients must present a certificate.
	TLS *tls.Config
	// PeerTLS is the client side of TLS to other brokers' inter-broker
	// listener when that listener is SSL or SASL_SSL: the cluster CA as
	// RootCAs and this node's certificate as its client certificate.
	PeerTLS *tls.Config
	// RaftTLS and RaftPeerTLS are the raft port's server and client TLS
	// (meta.Config's TLS and DialTLS): set, only nodes with a
	// certificate of the cluster CA can join the metadata quorum or talk
	// raft to it. Set both or neither.
	RaftTLS, RaftPeerTLS *tls.Config
	// PeerOpts are added to every client this broker opens to another
	// broker (controller.go, peers): the hook through which SASL on the
	// inter-broker listener gives its mechanism (kgo.SASL).
	PeerOpts []kgo.Opt
	// HTTPListen serves /metrics, /healthz and /readyz. Empty disables it.
	HTTPListen string
	// HTTPTLS, when set, serves HTTPListen over TLS (the node's
	// certificate, internal/certs).
	HTTPTLS *tls.Config
	// HTTPBearerToken, when set, is required on /metrics and /readyz as
	// "Authorization: Bearer <token>" (401 otherwise); /healthz stays
	// open, since a liveness probe says nothing worth hiding.
	HTTPBearerToken string
	// HTTPPprof serves net/http/pprof's profiles under /debug/pprof/ on
	// HTTPListen, behind HTTPBearerToken when set: off by default, for a
	// profile is the process's inside (its heap holds what clients sent).
	HTTPPprof bool
	// Rack is advertised in Metadata (client rack awareness).
	Rack string
	// ClusterID names a new cluster: its first controller writes it into
	// the metadata, which is where every broker takes the id it reports
	// in Metadata and DescribeCluster and writes into the bucket. Empty
	// lets that controller pick a random one. A node whose metadata
	// names another cluster refuses to start.
	ClusterID string

	// AutoCreateTopics creates unknown topics on Metadata and Produce
	// (auto.create.topics.enable).
	AutoCreateTopics bool
	// DefaultPartitions is num.partitions, used by auto-creation and by
	// CreateTopics requests that leave the count to the broker.
	DefaultPartitions int32
	// MaxRequestBytes refuses larger frames before allocating them
	// (socket.request.max.bytes).
	MaxRequestBytes int32
	// FetchMaxBytes caps every Fetch response, whatever the client asks
	// for (fetch.max.bytes); the first batch still goes whole (KIP-74).
	FetchMaxBytes int32
	// QueuedMaxRequestBytes bounds the bytes of requests being read or
	// handled across all connections (queued.max.request.bytes): while a
	// request's announced size does not fit, its connection is not read
	// from. Zero means DefaultQueuedMaxRequestBytes.
	QueuedMaxRequestBytes int64
	// ConnectionsMaxIdle closes a connection that has sent and received
	// nothing for this long, within a request or between requests
	// (connections.max.idle.ms). Zero means Kafka's 10 minutes.
	ConnectionsMaxIdle time.Duration
	// TopicDefaults are broker-level defaults for topic configs, keyed by
	// topic config name (e.g. "retention.ms").
	TopicDefaults map[string]string
	// MaintenanceInterval is how often logs are checked for time-based
	// roll and retention.
	MaintenanceInterval time.Duration
	// FlushInterval bounds how long appended data may sit in the page cache
	// before it is fsynced (log.flush.interval.ms). Zero leaves durability
	// to the operating system, as Kafka does by default.
	FlushInterval time.Duration

	// OffsetsPartitions is the partition count of __consumer_offsets
	// (offsets.topic.num.partitions), used when the broker creates it. It
	// decides which partition, and so which coordinator, owns a group.
	OffsetsPartitions int32
	// GroupInitialRebalanceDelay holds the first rebalance of an empty
	// group open for more members (group.initial.rebalance.delay.ms).
	// Zero means Kafka's 3 s; negative means no delay.
	GroupInitialRebalanceDelay time.Duration
	// GroupMinSessionTimeout and GroupMaxSessionTimeout bound members'
	// session timeouts (group.min/max.session.timeout.ms); zero means
	// Kafka's 6 s and 30 min.
	GroupMinSessionTimeout, GroupMaxSessionTimeout time.Duration
	// OffsetsRetention is offsets.retention.minutes; zero means 7 days.
	OffsetsRetention time.Duration

	// TransactionStatePartitions is the partition count of
	// __transaction_state (transaction.state.log.num.partitions), used
	// when the broker creates it. It decides which partition, and so which
	// coordinator, owns a transactional id. Zero means Kafka's 50.
	TransactionStatePartitions int32
	// TransactionMaxTimeout bounds the transaction.timeout.ms a producer
	// may ask for (transaction.max.timeout.ms). Zero means 15 minutes.
	TransactionMaxTimeout time.Duration
	// TransactionalIDExpiration is how long an idle transactional id is
	// kept (transactional.id.expiration.ms). Zero means 7 days.
	TransactionalIDExpiration time.Duration
	// TransactionAbortInterval is how often the coordinator looks for
	// transactions open past their timeout and aborts them
	// (transaction.abort.timed.out.transaction.cleanup.interval.ms). Zero
	// means Kafka's 10 s.
	TransactionAbortInterval time.Duration

	// DefaultReplicationFactor is default.replication.factor: the
	// replication factor of topics created without one (auto-created
	// topics, and CreateTopics asking for -1). Zero means 1.
	DefaultReplicationFactor int16
	// SessionTimeout is broker.session.timeout.ms: a broker whose
	// heartbeats to the controller stop for this long is fenced, and its
	// leaderships move. Zero means DefaultSessionTimeout.
	SessionTimeout time.Duration
	// HeartbeatInterval is broker.heartbeat.interval.ms. Zero means a
	// quarter of SessionTimeout.
	HeartbeatInterval time.Duration
	// ReplicaLagTimeMax is replica.lag.time.max.ms: a follower that has not
	// caught up with the leader's log end for this long leaves the ISR.
	// Zero means DefaultReplicaLagTimeMax.
	ReplicaLagTimeMax time.Duration
	// LeaderRebalanceInterval is how often the controller gives leadership
	// back to preferred replicas that are in sync again
	// (leader.imbalance.check.interval). Zero means meta's default.
	LeaderRebalanceInterval time.Duration

	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the broker's metrics; nil uses a private
	// registry (served on HTTPListen).
	Registerer prometheus.Registerer
	// Gatherer is served on /metrics; nil uses the private registry.
	Gatherer prometheus.Gatherer

	// Restore makes a new cluster restore itself from its bucket
	// (strata serve --restore): the node adopts the cluster id the bucket
	// names, which must agree with ClusterID if that is set, and the
	// controller restores every topic of the bucket's newest metadata
	// checkpoint while the cluster has none of its own
	// (node.RestoreAtStart). The bucket must hold a checkpoint.
	Restore bool
	// Tier configures tiered storage; a nil Tier.Store keeps everything
	// local.
	Tier TierConfig
	// ReadReplica configures read-replica topics (node.ReadReplicaConfig).
	ReadReplica ReadReplicaConfig

	// Compactor configures log compaction (docs/compaction.md). Its
	// Logger, Now and SpoolDir are the broker's.
	Compactor compactor.Config

	// SASL configures authentication on SASL listeners (sasl.go).
	SASL SASLConfig
	// MaxConnectionsPerIP bounds the open connections from one client
	// address (max.connections.per.ip); a connection over it is closed as
	// soon as it is accepted. Zero means no bound, as in Kafka.
	MaxConnectionsPerIP int
	// Authorizer turns ACL authorization on (broker/acl): every request
	// is checked against the ACLs in the metadata, as Kafka's
	// StandardAuthorizer checks it. Off, everything is allowed and the
	// ACL APIs answer SECURITY_DISABLED. Setting SuperUsers turns it on.
	Authorizer bool
	// SuperUsers may do everything (super.users), in Kafka's
	// "Type:name" form, e.g. User:admin.
	SuperUsers []string
	// AllowEveryoneIfNoACLFound allows what no ACL on the resource speaks
	// of (allow.everyone.if.no.acl.found); off by default, as in Kafka.
	AllowEveryoneIfNoACLFound bool
}

// Defaults applied by WithDefaults.
const (
	DefaultListen          = "127.0.0.1:9092"
	DefaultMaxRequestBytes = 100 << 20
	// DefaultFetchMaxBytes is Kafka's fetch.max.bytes.
	DefaultFetchMaxBytes = 55 << 20
	// DefaultQueuedMaxRequestBytes holds two requests of the maximum
	// size at once, with room left for everyone else's small ones.
	DefaultQueuedMaxRequestBytes = 256 << 20
	// DefaultConnectionsMaxIdle is Kafka's connections.max.idle.ms.
	DefaultConnectionsMaxIdle = 10 * time.Minute
	// DefaultOffsetsPartitions is Kafka's offsets.topic.num.partitions.
	DefaultOffsetsPartitions = 50
	// DefaultTransactionStatePartitions is Kafka's
	// transaction.state.log.num.partitions.
	DefaultTransactionStatePartitions = 50
	// DefaultSessionTimeout is shorter than Kafka's 9 s so that a killed
	// leader stalls its producers for under 3 s; loopback and LAN
	// heartbeats every 500 ms leave room for a few lost ones.
	DefaultSessionTimeout = 2 * time.Second
	// DefaultReplicaLagTimeMax is shorter than Kafka's 30 s: a stalled
	// follower holds acks=all producers for at most this long.
	DefaultReplicaLagTimeMax = 10 * time.Second
)

// WithDefaults returns c with unset fields filled in.
func (c Config) WithDefaults() Config {
	c.Tier = c.Tier.WithDefaults()
	if len(c.Listeners) == 0 {
		if c.Listen == "" {
			c.Listen = DefaultListen
		}
		c.Listeners = []Listener{{Name: DefaultListenerName, Security: Plaintext, Addr: c.Listen, Advertised: c.Advertised}}
	} else {
		c.Listeners = slices.Clone(c.Listeners)
		for i := range c.Listeners {
			// Kafka's listener.security.protocol.map defaults a listener
			// named after a protocol to that protocol.
			if l := &c.Listeners[i]; l.Security == "" && Security(l.Name).known() {
				l.Security = Security(l.Name)
			}
		}
	}
	if c.InterBrokerListener == "" {
		c.InterBrokerListener = c.Listeners[0].Name
	}
	if c.DefaultPartitions == 0 {
		c.DefaultPartitions = 1
	}
	if c.MaxRequestBytes == 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.FetchMaxBytes == 0 {
		c.FetchMaxBytes = DefaultFetchMaxBytes
	}
	if c.QueuedMaxRequestBytes == 0 {
		c.QueuedMaxRequestBytes = DefaultQueuedMaxRequestBytes
	}
	if c.ConnectionsMaxIdle == 0 {
		c.ConnectionsMaxIdle = DefaultConnectionsMaxIdle
	}
	if c.MaintenanceInterval == 0 {
		c.MaintenanceInterval = 10 * time.Second
	}
	if c.OffsetsPartitions == 0 {
		c.OffsetsPartitions = DefaultOffsetsPartitions
	}
	if c.GroupInitialRebalanceDelay == 0 {
		c.GroupInitialRebalanceDelay = 3 * time.Second
	}
	if c.TransactionStatePartitions == 0 {
		c.TransactionStatePartitions = DefaultTransactionStatePartitions
	}
	if c.TransactionMaxTimeout == 0 {
		c.TransactionMaxTimeout = 15 * time.Minute
	}
	if c.TransactionalIDExpiration == 0 {
		c.TransactionalIDExpiration = 7 * 24 * time.Hour
	}
	if c.TransactionAbortInterval == 0 {
		c.TransactionAbortInterval = 10 * time.Second
	}
	if c.DefaultReplicationFactor == 0 {
		c.DefaultReplicationFactor = 1
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.SessionTimeout / 4
	}
	if c.ReplicaLagTimeMax == 0 {
		c.ReplicaLagTimeMax = DefaultReplicaLagTimeMax
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.SASL = c.SASL.withDefaults()
	if len(c.SuperUsers) > 0 {
		c.Authorizer = true
	}
	return c
}

// Validate reports the first problem with c, naming the setting.
func (c Config) Validate() error {
	if c.NodeID < 0 {
		return fmt.Errorf("node id %d: must not be negative", c.NodeID)
	}
	if c.DataDir == "" {
		return errors.New("data dir: must be set")
	}
	if err := c.validateListeners(); err != nil {
		return err
	}
	if err := (acl.Config{SuperUsers: c.SuperUsers}).Validate(); err != nil {
		return err
	}
	if c.HTTPListen != "" {
		if _, _, err := net.SplitHostPort(c.HTTPListen); err != nil {
			return fmt.Errorf("http listen address %q: %v", c.HTTPListen, err)
		}
	}
	if c.Tier.OrphanGrace < MinOrphanGrace && !c.Tier.TestShortOrphanGrace {
		return fmt.Errorf("tier orphan grace %s: must be at least %s, twice the longest upload pass, or objects still being written are deleted (docs/tiered-storage.md)", c.Tier.OrphanGrace, MinOrphanGrace)
	}
	if c.DefaultPartitions < 1 {
		return fmt.Errorf("default partitions %d: must be at least 1", c.DefaultPartitions)
	}
	if c.MaxRequestBytes < 1024 {
		return fmt.Errorf("max request bytes %d: must be at least 1024", c.MaxRequestBytes)
	}
	if c.FetchMaxBytes < 1024 {
		return fmt.Errorf("fetch max bytes %d: must be at least 1024", c.FetchMaxBytes)
	}
	if c.QueuedMaxRequestBytes < 1024 {
		return fmt.Errorf("queued max request bytes %d: must be at least 1024", c.QueuedMaxRequestBytes)
	}
	// A request above the bound could only go when nothing else is in
	// flight, which a busy broker may never be (Kafka refuses this too).
	if c.QueuedMaxRequestBytes < int64(c.MaxRequestBytes) {
		return fmt.Errorf("queued max request bytes %d: must be at least the max request bytes, %d", c.QueuedMaxRequestBytes, c.MaxRequestBytes)
	}
	if c.ConnectionsMaxIdle < 0 {
		return fmt.Errorf("connections max idle %s: must not be negative", c.ConnectionsMaxIdle)
	}
	if c.MaintenanceInterval < 0 || c.FlushInterval < 0 {
		return errors.New("maintenance and flush intervals must not be negative")
	}
	if c.DefaultReplicationFactor < 1 {
		return fmt.Errorf("default replication factor %d: must be at least 1", c.DefaultReplicationFactor)
	}
	if c.SessionTimeout < 0 || c.HeartbeatInterval < 0 || c.ReplicaLagTimeMax < 0 || c.LeaderRebalanceInterval < 0 {
		return errors.New("session timeout, heartbeat interval, replica lag time and leader rebalance interval must not be negative")
	}
	if c.HeartbeatInterval >= c.SessionTimeout {
		return fmt.Errorf("heartbeat interval %s: must be shorter than the session timeout %s", c.HeartbeatInterval, c.SessionTimeout)
	}
	if c.OffsetsPartitions < 1 {
		return fmt.Errorf("offsets partitions %d: must be at least 1", c.OffsetsPartitions)
	}
	if c.GroupMinSessionTimeout < 0 || c.GroupMaxSessionTimeout < 0 || c.OffsetsRetention < 0 {
		return errors.New("group session timeouts and offsets retention must not be negative")
	}
	if c.GroupMaxSessionTimeout > 0 && c.GroupMinSessionTimeout > c.GroupMaxSessionTimeout {
		return fmt.Errorf("group min session timeout %s is above the max %s", c.GroupMinSessionTimeout, c.GroupMaxSessionTimeout)
	}
	if c.TransactionStatePartitions < 1 {
		return fmt.Errorf("transaction state partitions %d: must be at least 1", c.TransactionStatePartitions)
	}
	if c.TransactionMaxTimeout < time.Millisecond || c.TransactionMaxTimeout.Milliseconds() > 1<<31-1 {
		return fmt.Errorf("transaction max timeout %s: must be from 1ms to 2^31-1 ms", c.TransactionMaxTimeout)
	}
	if c.TransactionalIDExpiration < time.Millisecond || c.TransactionAbortInterval < time.Millisecond {
		return fmt.Errorf("transactional id expiration %s and transaction abort interval %s: must be at least 1ms", c.TransactionalIDExpiration, c.TransactionAbortInterval)
	}
	if t := c.Tier; t.ChunkBytes < 0 || t.MemoryBytes < 0 || t.CacheBytes < 0 || t.ManifestCacheBytes < 0 || t.LocalDiskLimit < 0 || t.ReadAhead < 0 || t.ReadWorkers < 0 {
		return errors.New("tier: sizes and counts must not be negative")
	}
	if t := c.Tier; t.ChunkBytes > 0 && t.CacheBytes > 0 && t.CacheBytes < 2*t.ChunkBytes {
		return fmt.Errorf("tier: cache of %d bytes cannot hold two %d-byte chunks", t.CacheBytes, t.ChunkBytes)
	}
	if t := c.Tier; t.ChunkBytes > 0 && t.MemoryBytes > 0 && t.MemoryBytes < 2*t.ChunkBytes {
		return fmt.Errorf("tier: chunk memory of %d bytes cannot hold two %d-byte chunks", t.MemoryBytes, t.ChunkBytes)
	}
	for k, v := range c.TopicDefaults {
		if err := node.ValidateTopicConfig(k, v); err != nil {
			return fmt.Errorf("topic default: %w", err)
		}
	}
	if err := c.validateSASL(); err != nil {
		return err
	}
	if c.MaxConnectionsPerIP < 0 {
		return fmt.Errorf("max connections per ip %d: must not be negative", c.MaxConnectionsPerIP)
	}
	return nil
}

// TierConfig configures tiered storage (node.TierConfig).
type TierConfig = node.TierConfig

// ReadReplicaConfig configures read-replica topics (node.ReadReplicaConfig).
type ReadReplicaConfig = node.ReadReplicaConfig

// MinOrphanGrace is the shortest tier.orphan_grace a broker accepts
// (node.MinOrphanGrace).
const MinOrphanGrace = node.MinOrphanGrace

// DefaultListenerName names the listener that Listen and Advertised make.
const DefaultListenerName = "PLAINTEXT"

// Security is a listener's security protocol, in Kafka's names
// (security.protocol).
type Security string

// The security protocols a listener may speak.
const (
	Plaintext     Security = "PLAINTEXT"
	SSL           Security = "SSL"
	SASLPlaintext Security = "SASL_PLAINTEXT"
	SASLSSL       Security = "SASL_SSL"
)

// TLS reports whether the protocol runs over TLS.
func (s Security) TLS() bool { return s == SSL || s == SASLSSL }

// SASL reports whether connections must authenticate with SASL before
// anything but ApiVersions and the SASL requests.
func (s Security) SASL() bool { return s == SASLPlaintext || s == SASLSSL }

func (s Security) known() bool {
	switch s {
	case Plaintext, SSL, SASLPlaintext, SASLSSL:
		return true
	}
	return false
}

// ParseSecurity parses a protocol name, case-insensitively.
func ParseSecurity(s string) (Security, error) {
	if p := Security(strings.ToUpper(s)); p.known() {
		return p, nil
	}
	return "", fmt.Errorf("unknown security protocol %q (want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)", s)
}

// Listener is one named Kafka listener.
type Listener struct {
	// Name is the listener's name (Kafka's listener name), unique within
	// the broker; clients never see it, but other brokers' listeners of
	// the same name are what Metadata answers a client on this one with.
	Name string
	// Security is its protocol; empty means the protocol its Name is, if
	// it is one.
	Security Security
	// Addr is host:port to listen on; port 0 picks a free port.
	Addr string
	// Advertised is the host:port clients of this listener are told to
	// connect to. Empty means the listener's actual address; port 0
	// means the actual port.
	Advertised string
}

func (c Config) validateListeners() error {
	if len(c.Listeners) == 0 {
		return errors.New("listeners: none configured")
	}
	if c.Listen != "" && len(c.Listeners) > 0 && (c.Listeners[0].Name != DefaultListenerName || c.Listeners[0].Addr != c.Listen) {
		return errors.New("listen address and listeners: set one or the other")
	}
	seen := make(map[string]bool, len(c.Listeners))
	for _, l := range c.Listeners {
		if l.Name == "" {
			return fmt.Errorf("listener for %q: must have a name", l.Addr)
		}
		if seen[l.Name] {
			return fmt.Errorf("listener %s: named twice", l.Name)
		}
		seen[l.Name] = true
		if !l.Security.known() {
			return fmt.Errorf("listener %s: unknown security protocol %q (want PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)", l.Name, l.Security)
		}
		if _, _, err := net.SplitHostPort(l.Addr); err != nil {
			return fmt.Errorf("listener %s: address %q: %v", l.Name, l.Addr, err)
		}
		if l.Advertised != "" {
			if _, _, err := net.SplitHostPort(l.Advertised); err != nil {
				return fmt.Errorf("listener %s: advertised address %q: %v", l.Name, l.Advertised, err)
			}
		}
		if l.Security.TLS() && c.TLS == nil {
			return fmt.Errorf("listener %s: %s needs a TLS certificate and key", l.Name, l.Security)
		}
	}
	if !seen[c.InterBrokerListener] {
		return fmt.Errorf("inter-broker listener %q: no listener of that name", c.InterBrokerListener)
	}
	for _, l := range c.Listeners {
		if l.Name == c.InterBrokerListener && l.Security.TLS() && c.PeerTLS == nil {
			return fmt.Errorf("inter-broker listener %s: %s needs the cluster CA and this node's certificate to dial other brokers (peer TLS)", l.Name, l.Security)
		}
	}
	return nil
}
