package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"strata/broker/group"
	"strata/broker/node"
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

	ln       net.Listener
	httpSrv  *http.Server
	httpAddr net.Addr
	advHost  string
	advPort  int32

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

	// tier is the node's cold tier, nil when no object store is
	// configured: the handlers that read the bucket's state ask it.
	tier *tier.Tier

	// groups is the group coordinator (groups.go); set in Start before
	// the first connection is accepted.
	groups *group.Coordinator
	// sasl is the mechanisms SASL listeners offer (sasl.go); set in
	// Start before the first connection is accepted.
	sasl *saslServer
	// perIP counts connections per client address (connlimit.go).
	perIP connsPerIP
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
		b.httpSrv = &http.Server{Handler: b.httpHandler(gath), ReadHeaderTimeout: 10 * time.Second}
		b.goFunc(func() {
			if err := b.httpSrv.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				b.log.Error("http server stopped", "err", err)
			}
		})
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		b.cancel()
		return nil, fmt.Errorf("kafka listener %s: %w", cfg.Listen, err)
	}
	b.ln = ln
	if err := b.setAdvertised(); err != nil {
		ln.Close()
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
	if b.cfg.SASL.BootstrapUser != "" {
		bctx, cancel := context.WithTimeout(ctx, controlTimeout)
		if err := b.ensureBootstrapUser(bctx); err != nil {
			b.log.Warn("SASL bootstrap user not created yet; retrying in the background", "err", err)
			b.goFunc(b.bootstrapUserLoop)
		}
		cancel()
	}
	b.goFunc(b.acceptLoop)
	b.started = true
	started = true
	b.ready.Store(true)
	// The one start-up summary; each partition's details are at debug.
	in := build.Current()
	b.log.Info("broker started", "node", cfg.NodeID, "listen", b.ln.Addr().String(), "advertised", b.AdvertisedAddr(),
		"partitions", len(b.partitionList()), "took", time.Since(begun).Round(time.Millisecond),
		"version", in.Version, "revision", in.ShortRevision())
	return b, nil
}

func (b *Broker) setAdvertised() error {
	adv := b.cfg.Advertised
	if adv == "" {
		adv = b.ln.Addr().String()
	}
	host, port, err := net.SplitHostPort(adv)
	if err != nil {
		return fmt.Errorf("advertised address %q: %w", adv, err)
	}
	p, err := strconv.ParseInt(port, 10, 32)
	if err != nil || p <= 0 || p > 65535 {
		if p == 0 && b.cfg.Advertised != "" {
			// An advertised port of 0 means "the listener's port".
			_, lport, _ := net.SplitHostPort(b.ln.Addr().String())
			p, _ = strconv.ParseInt(lport, 10, 32)
		} else {
			return fmt.Errorf("advertised address %q: bad port", adv)
		}
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		if h, err := os.Hostname(); err == nil {
			host = h
		}
	}
	b.advHost, b.advPort = host, int32(p)
	return nil
}

// Addr is the Kafka listener's address.
func (b *Broker) Addr() net.Addr { return b.ln.Addr() }

// AdvertisedAddr is the host:port clients are told to use.
func (b *Broker) AdvertisedAddr() string {
	return net.JoinHostPort(b.advHost, strconv.Itoa(int(b.advPort)))
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
	if b.ln != nil {
		b.ln.Close()
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
