package broker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/broker/acl"
	"strata/broker/group"
	"strata/broker/node"
	"strata/broker/quota"
	"strata/broker/txn"
	"strata/internal/build"
	"strata/meta"
	"strata/tier"
)

// Broker is one running Strata node. Start it with Start; stop it with
// Close.
type Broker struct {
	cfg     Config
	log     *slog.Logger
	meta    *meta.Store
	metrics *metrics
	logsDir string

	// listeners are the Kafka listeners, in the configured order; set
	// in Start before any accept loop runs and not changed after.
	listeners []*listener
	httpSrv   *http.Server
	httpAddr  net.Addr
	// advHost and advPort are the inter-broker listener's advertised
	// address: what this node registers as its Host and Port, which
	// other brokers dial.
	advHost string
	advPort int32

	// ctx is cancelled by Close; every goroutine the broker starts watches
	// it and is tracked by wg.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// node is what this broker is in the cluster (broker/node): its
	// registration, the partitions it hosts, their tier and compaction.
	// peers are its clients to other brokers (controller.go).
	node  *node.Node
	peers peers
	// nodeReady is node once it is made, for the metrics collectors a
	// scrape runs during start-up, before it is.
	nodeReady atomic.Pointer[node.Node]

	// reqMem bounds the request bytes held across connections (server.go).
	reqMem requestMemory
	// quotas measures clients against their quotas (quotas.go).
	quotas *quota.Manager

	// tier is the node's cold tier, nil when no object store is
	// configured: the handlers that read the bucket's state ask it.
	tier *tier.Tier

	// groups is the group coordinator (groups.go); set in Start before
	// the first connection is accepted.
	groups *group.Coordinator
	// sasl is the mechanisms SASL listeners offer (sasl.go); set in
	// Start before the first connection is accepted.
	sasl *saslServer
	// clientLog holds back repeated lines about one client host's failed
	// authentications and refused frames (loglimit.go).
	clientLog *logLimiter
	// perIP counts connections per client address (connlimit.go).
	perIP connsPerIP
	// authz is the authorizer, nil when Config.Authorizer is off
	// (authorize.go); set in Start before the first connection is
	// accepted.
	authz *acl.Authorizer

	// txns is the transaction coordinator (broker/node's txns.go); set in
	// Start before the first connection is accepted.
	txns *txn.Coordinator

	// mu guards the open connections.
	mu struct {
		sync.Mutex
		conns  map[net.Conn]struct{}
		closed bool
	}
	started bool         // Start succeeded; set before any goroutine reads it
	unlock  func() error // releases the data dir lock; Close calls it last
	// ready is set once Start has succeeded: /readyz, served from the
	// start, reads it (and only then b.meta).
	ready     atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// testHookStarting, when set by a test, runs in Start before the metadata
// store opens (the part of start-up that waits for a raft leader), and
// receives the HTTP listener's address.
var testHookStarting func(httpAddr net.Addr)

// testHookMetaConfig, when set by a test, edits the metadata store's
// configuration before it opens.
var testHookMetaConfig func(*meta.Config)

// Start opens the metadata store and the logs under cfg.DataDir, starts the
// Kafka listener (and the HTTP listener when configured), and returns once
// the broker accepts connections.
func Start(ctx context.Context, cfg Config) (*Broker, error) {
	begun := time.Now()
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// SASL on the inter-broker listener: the peers authenticate as the
	// bootstrap user (sasl.go).
	cfg.PeerOpts = append(slices.Clip(cfg.PeerOpts), cfg.interBrokerSASL()...)
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", cfg.DataDir, err)
	}
	unlock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	b := &Broker{
		cfg:     cfg,
		log:     cfg.Logger,
		logsDir: filepath.Join(cfg.DataDir, "logs"),
		unlock:  unlock,
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	started := false
	defer func() {
		if !started {
			b.Close() // releases whatever was opened, the lock last
		}
	}()
	if err := os.MkdirAll(b.logsDir, 0o755); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", cfg.DataDir, err)
	}
	b.mu.conns = make(map[net.Conn]struct{})

	reg := cfg.Registerer
	gath := cfg.Gatherer
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, gath = r, r
	}
	b.metrics = newMetrics(reg)
	b.clientLog = newLogLimiter(clientLogInterval)
	b.quotas = quota.New(quota.Config{Registerer: reg})
	b.metrics.reg.MustRegister(replicationCollector{b})

	// HTTP first: probes get an answer (/readyz 503) for as long as the
	// rest of start-up takes.
	if cfg.HTTPListen != "" {
		hl, err := net.Listen("tcp", cfg.HTTPListen)
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("http listener %s: %w", cfg.HTTPListen, err)
		}
		b.httpAddr = hl.Addr()
		if cfg.HTTPTLS != nil {
			hl = tls.NewListener(hl, cfg.HTTPTLS)
		}
		b.httpSrv = &http.Server{Handler: b.httpHandler(gath), ReadHeaderTimeout: 10 * time.Second}
		b.goFunc(func() {
			if err := b.httpSrv.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				b.log.Error("http server stopped", "err", err)
			}
		})
	}

	if err := b.openListeners(); err != nil {
		b.closeListeners()
		b.cancel()
		return nil, err
	}

	if testHookStarting != nil {
		testHookStarting(b.httpAddr)
	}
	if cfg.Restore {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		id, err := node.AdoptBucketCluster(actx, cfg.Tier, cfg.ClusterID)
		cancel()
		if err != nil {
			b.closeListeners()
			b.cancel()
			return nil, err
		}
		cfg.ClusterID, b.cfg.ClusterID = id, id
	}
	mcfg := meta.Config{
		NodeID:    cfg.NodeID,
		Dir:       filepath.Join(cfg.DataDir, "meta"),
		RaftAddr:  cfg.RaftListen,
		Voters:    cfg.Voters,
		Bootstrap: true,
		Logger:    b.log.With("component", "meta"),

		SessionTimeout:    cfg.SessionTimeout,
		RebalanceInterval: cfg.LeaderRebalanceInterval,
		ClusterID:         cfg.ClusterID,
	}
	if cfg.RaftListen != "" {
		// A node without a raft port (one node, raft in-process) has no
		// door to lock.
		mcfg.TLS, mcfg.DialTLS = cfg.RaftTLS, cfg.RaftPeerTLS
	}
	if testHookMetaConfig != nil {
		testHookMetaConfig(&mcfg)
	}
	m, err := meta.Open(ctx, mcfg)
	if err != nil {
		b.closeListeners()
		b.cancel()
		if other := (*meta.OtherNodeError)(nil); errors.As(err, &other) {
			return nil, fmt.Errorf("data dir %s holds the data of %s, not of node %d", cfg.DataDir, other.MadeBy(), cfg.NodeID)
		}
		return nil, fmt.Errorf("metadata: %w", err)
	}
	b.meta = m
	b.authz = b.newAuthorizer()
	b.metrics.reg.MustRegister(metaCollector{b})

	b.node = b.newNode(m)
	b.nodeReady.Store(b.node)

	// Registered, with this node's metadata caught up with the
	// registration, before any partition opens; the cluster's id is
	// waited for only briefly (AwaitClusterID waits on), and one known
	// now must be this node's.
	clusterID, err := b.node.Join(ctx)
	if err != nil {
		b.Close()
		return nil, err
	}
	// Early, so that the other nodes, whose inter-broker clients may
	// authenticate as this user, can join soon.
	if b.cfg.SASL.BootstrapUser != "" {
		bctx, cancel := context.WithTimeout(ctx, controlTimeout)
		if err := b.ensureBootstrapUser(bctx); err != nil {
			b.log.Warn("SASL bootstrap user not created yet; retrying in the background", "err", err)
			b.goFunc(b.bootstrapUserLoop)
		}
		cancel()
	}
	if err := b.node.Open(ctx, clusterID); err != nil {
		b.Close()
		return nil, err
	}
	b.tier = b.node.Tier()
	if b.groups, err = b.node.StartGroups(ctx); err != nil {
		b.Close()
		return nil, err
	}
	b.metrics.reg.MustRegister(&groupCollector{b: b})
	if b.txns, err = b.node.StartTxns(ctx); err != nil {
		b.Close()
		return nil, err
	}
	b.metrics.reg.MustRegister(&txnCollector{b: b})
	if err := b.node.Run(); err != nil {
		b.Close()
		return nil, err
	}
	b.goFunc(b.node.HeartbeatLoop)
	if clusterID == "" {
		b.goFunc(b.node.AwaitClusterID)
	}
	if err := b.startSASL(ctx); err != nil {
		b.Close()
		return nil, err
	}
	for _, l := range b.listeners {
		b.goFunc(func() { b.acceptLoop(l) })
	}
	b.started = true
	started = true
	b.ready.Store(true)
	// The one start-up summary; each partition's details are at debug.
	in := build.Current()
	b.log.Info("broker started", "node", cfg.NodeID, "listeners", b.listenerSummary(),
		"partitions", len(b.partitionList()), "took", time.Since(begun).Round(time.Millisecond),
		"version", in.Version, "revision", in.ShortRevision())
	return b, nil
}

// openListeners listens on every configured listener and works out
// what each advertises.
func (b *Broker) openListeners() error {
	for _, lc := range b.cfg.Listeners {
		ln, err := net.Listen("tcp", lc.Addr)
		if err != nil {
			return fmt.Errorf("kafka listener %s %s: %w", lc.Name, lc.Addr, err)
		}
		l := &listener{name: lc.Name, security: lc.Security, ln: ln}
		if lc.Security.TLS() {
			l.tls = b.cfg.TLS
		}
		b.listeners = append(b.listeners, l)
		if l.advHost, l.advPort, err = advertisedEndpoint(lc.Advertised, ln.Addr()); err != nil {
			return fmt.Errorf("listener %s: %w", lc.Name, err)
		}
		if lc.Name == b.cfg.InterBrokerListener {
			b.advHost, b.advPort = l.advHost, l.advPort
		}
	}
	return nil
}

// advertisedEndpoint is the host and port a listener advertises: adv, or
// the listener's own address when adv is empty; port 0 is the listener's
// port, and an unspecified host this machine's name.
func advertisedEndpoint(adv string, actual net.Addr) (string, int32, error) {
	configured := adv != ""
	if !configured {
		adv = actual.String()
	}
	host, port, err := net.SplitHostPort(adv)
	if err != nil {
		return "", 0, fmt.Errorf("advertised address %q: %w", adv, err)
	}
	p, err := strconv.ParseInt(port, 10, 32)
	if err != nil || p <= 0 || p > 65535 {
		if p == 0 && configured {
			// An advertised port of 0 means "the listener's port".
			_, lport, _ := net.SplitHostPort(actual.String())
			p, _ = strconv.ParseInt(lport, 10, 32)
		} else {
			return "", 0, fmt.Errorf("advertised address %q: bad port", adv)
		}
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	return host, int32(p), nil
}

// listenerSummary is the listeners for the start-up log line:
// NAME=PROTO://listen (advertised) each.
func (b *Broker) listenerSummary() []string {
	var out []string
	for _, l := range b.listeners {
		out = append(out, fmt.Sprintf("%s=%s://%s (advertised %s)", l.name, l.security, l.ln.Addr(), l.advertised()))
	}
	return out
}

// Addr is the first Kafka listener's address.
func (b *Broker) Addr() net.Addr { return b.listeners[0].ln.Addr() }

// ListenerAddr is the address of the listener of that name, or nil.
func (b *Broker) ListenerAddr(name string) net.Addr {
	if l := b.listener(name); l != nil {
		return l.ln.Addr()
	}
	return nil
}

// listener is the listener of that name, or nil.
func (b *Broker) listener(name string) *listener {
	for _, l := range b.listeners {
		if l.name == name {
			return l
		}
	}
	return nil
}

// AdvertisedAddr is the host:port the first listener's clients are told
// to use: the bootstrap address cmd prints.
func (b *Broker) AdvertisedAddr() string { return b.listeners[0].advertised() }

// ListenerAdvertisedAddr is the host:port the named listener's clients
// are told to use, or "" when there is no such listener.
func (b *Broker) ListenerAdvertisedAddr(name string) string {
	if l := b.listener(name); l != nil {
		return l.advertised()
	}
	return ""
}

// advertisedListeners is Kafka's advertised.listeners value for this
// broker: NAME://host:port, comma-separated.
func (b *Broker) advertisedListeners() string {
	var parts []string
	for _, l := range b.listeners {
		parts = append(parts, l.name+"://"+l.advertised())
	}
	return strings.Join(parts, ",")
}

// HTTPAddr is the metrics/health listener's address, or nil.
func (b *Broker) HTTPAddr() net.Addr { return b.httpAddr }

// goFunc runs f on a goroutine that Close waits for.
func (b *Broker) goFunc(f func()) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
}

func (b *Broker) closeListeners() {
	for _, l := range b.listeners {
		l.ln.Close()
	}
	if b.httpSrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		b.httpSrv.Shutdown(ctx)
		cancel()
	}
}

// Close stops accepting connections, closes the open ones, waits for every
// goroutine, then flushes and closes the logs and the metadata store. It is
// safe to call more than once.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		b.ready.Store(false)
		b.cancel()
		b.closeListeners()
		b.mu.Lock()
		b.mu.closed = true
		for c := range b.mu.conns {
			c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
		if b.groups != nil {
			b.groups.Close() // before the logs it writes to close
		}
		var errs []error
		if b.node != nil {
			errs = append(errs, b.node.Close()) // the fetchers, the tier, the logs
		}
		b.peers.close()
		if b.meta != nil {
			if err := b.meta.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close metadata: %w", err))
			}
		}
		if err := b.unlock(); err != nil {
			errs = append(errs, fmt.Errorf("unlock data dir: %w", err))
		}
		b.closeErr = errors.Join(errs...)
		if b.started {
			b.log.Info("broker stopped", "node", b.cfg.NodeID)
		}
	})
	return b.closeErr
}
