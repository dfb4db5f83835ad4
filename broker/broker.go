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
	"github.com/twmb/franz-go/pkg/kerr"

	"strata/broker/group"
	"strata/broker/node"
	"strata/broker/partition"
	"strata/broker/replica"
	"strata/compactor"
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

	// node is this broker's membership in the cluster (broker/node):
	// registration, heartbeats, catching up with the controller's
	// metadata, topic creation, producer ids. peers are its clients to
	// other brokers (controller.go); replicas runs the fetchers of the
	// partitions it follows (replication.go).
	node     *node.Node
	peers    peers
	replicas *replica.Manager

	// reqMem bounds the request bytes held across connections (server.go).
	reqMem requestMemory

	// tier is the cold tier, nil when no object store is configured.
	tier *tier.Tier
	// tierStore is the tier's store, which writes nothing until the
	// bucket is claimed for this cluster (node.AwaitClusterID).
	tierStore *tier.ClaimedStore
	// compactor compacts the compacted topics' logs (broker/compaction.go).
	compactor *compactor.Compactor
	// localBytes is the size of the hosted logs as of the last upload
	// pass; produce reads it for disk backpressure.
	localBytes atomic.Int64
	// collector is the state of the tier's collector goroutine
	// (broker/tier_collect.go).
	collector collector

	// groups is the group coordinator (groups.go); set in Start before
	// the first connection is accepted.
	groups *group.Coordinator
	// txns is the transaction coordinator (txns.go); set in Start before
	// the first connection is accepted.
	txns *txns

	// host is what every hosted partition is given (partitionHost).
	host     *partition.Host
	hostOnce sync.Once

	// reconcileMu serialises reconcile runs.
	reconcileMu sync.Mutex

	// mu guards the partitions this node hosts and the open connections.
	mu struct {
		sync.RWMutex
		partitions map[tp]*partition.Partition
		conns      map[net.Conn]struct{}
		closed     bool
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

// tp names a partition by topic name and index.
type tp struct {
	topic     string
	partition int32
}

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
	b.mu.partitions = make(map[tp]*partition.Partition)
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
	b.replicas = replica.NewManager(b.ctx, cfg.NodeID, func(leader int32) replica.Client { return peerClient{b, leader} },
		b.node.BrokerEpoch, b.log.With("component", "replica"))

	// Registered, with this node's metadata caught up with the
	// registration, before any partition opens; the cluster's id is
	// waited for only briefly (AwaitClusterID waits on), and one known
	// now must be this node's.
	clusterID, err := b.node.Join(ctx)
	if err != nil {
		b.Close()
		return nil, err
	}
	// The tier comes before the partitions: it decides how their logs
	// retain data.
	if err := b.openTier(ctx, clusterID); err != nil {
		b.Close()
		return nil, fmt.Errorf("tiered storage: %w", err)
	}
	changed := b.meta.Changed() // before the state reconcile reads
	if err := b.reconcileAtStart(); err != nil {
		b.Close()
		return nil, err
	}
	if err := b.removeStaleDirs(); err != nil {
		b.log.Warn("remove logs of deleted topics", "err", err)
	}
	if err := b.startGroups(ctx); err != nil {
		b.Close()
		return nil, err
	}
	if err := b.startTxns(ctx); err != nil {
		b.Close()
		return nil, err
	}
	b.goFunc(func() { b.reconcileLoop(changed) })
	b.goFunc(b.node.HeartbeatLoop)
	b.goFunc(b.isrLoop)
	b.goFunc(b.maintenanceLoop)
	if b.tier != nil {
		b.goFunc(b.tierLoop)
	}
	if err := b.startCompactor(); err != nil {
		b.Close()
		return nil, err
	}
	if clusterID == "" {
		b.goFunc(func() { b.node.AwaitClusterID(b.tierStore, b.tierWhere(), claimTimeout) })
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
		if b.replicas != nil {
			b.replicas.Close() // before the logs its fetchers write to close
		}
		b.peers.close()
		if b.tier != nil {
			b.tier.Close()
		}
		if b.groups != nil {
			b.groups.Close() // before the logs it writes to close
		}

		var errs []error
		b.mu.Lock()
		for key, p := range b.mu.partitions {
			if err := p.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close %s-%d: %w", key.topic, key.partition, err))
			}
		}
		b.mu.partitions = map[tp]*partition.Partition{}
		b.mu.Unlock()
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

// maintenanceLoop rolls idle segments, applies retention and, when
// configured, flushes logs on a timer.
func (b *Broker) maintenanceLoop() {
	maint := time.NewTicker(b.cfg.MaintenanceInterval)
	defer maint.Stop()
	var flush <-chan time.Time
	if b.cfg.FlushInterval > 0 {
		t := time.NewTicker(b.cfg.FlushInterval)
		defer t.Stop()
		flush = t.C
	}
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-maint.C:
			for _, p := range b.partitionList() {
				if err := p.Log().Maintain(); err != nil {
					b.log.Error("log maintenance", "topic", p.Topic(), "partition", p.Index(), "err", err)
				}
			}
		case <-flush:
			for _, p := range b.partitionList() {
				if err := p.Log().Sync(); err != nil {
					b.log.Error("log flush", "topic", p.Topic(), "partition", p.Index(), "err", err)
				}
			}
		}
	}
}

func (b *Broker) partitionList() []*partition.Partition {
	b.mu.RLock()
	defer b.mu.RUnlock()
	ps := make([]*partition.Partition, 0, len(b.mu.partitions))
	for _, p := range b.mu.partitions {
		ps = append(ps, p)
	}
	return ps
}

// hosted returns the partition this node hosts, or the error a client
// should see: NOT_LEADER_OR_FOLLOWER for a partition that exists elsewhere
// (or is not open yet), UNKNOWN_TOPIC_OR_PARTITION otherwise.
func (b *Broker) hosted(topic string, index int32) (*partition.Partition, error) {
	if p := b.partition(topic, index); p != nil {
		return p, nil
	}
	if t, ok := b.topicByName(topic); ok && index >= 0 && int(index) < len(t.Partitions) {
		return nil, kerr.NotLeaderForPartition
	}
	return nil, kerr.UnknownTopicOrPartition
}

// partition returns the partition this node hosts, or nil.
func (b *Broker) partition(topic string, index int32) *partition.Partition {
	b.mu.RLock()
	p := b.mu.partitions[tp{topic, index}]
	b.mu.RUnlock()
	return p
}
