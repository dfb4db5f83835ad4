package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strata/compactor"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"strata/broker"
	"strata/cmd/internal/config"
	"strata/internal/logging"
	"strata/meta"
)

// defaultDevDataDir is where strata dev keeps its data, and where the tier
// verbs look for a bucket directory when told nothing else.
const defaultDevDataDir = "./strata-data"

func newDevCmd(environ []string, stdout, stderr io.Writer) *cobra.Command {
	var (
		dev    devNode
		nodes  int
		secure bool
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local node, or a local cluster, with development defaults",
		Long: `Run a single Strata node for development: data in ./strata-data, the Kafka
listener on 127.0.0.1:9092, topics created on first use, closed segments
tiered into the directory store ./strata-data/bucket (or the one named by
--bucket-dir, or the S3 bucket named by --s3-bucket; keys from
STRATA_S3_ACCESS_KEY and STRATA_S3_SECRET_KEY). Once the node accepts
connections it prints one line with the bootstrap address to stdout; logs go
to stderr. Ctrl-C or SIGTERM shuts it down cleanly.

With --nodes N, a cluster of N nodes runs in the one process: node ids 0 to
N-1, every node a voter of the metadata quorum, Kafka (and metrics) ports
consecutive from --listen's (and --http-listen's), data in
<data-dir>/node-<id>, one shared bucket, and a default replication factor of
3 (N when smaller). The bootstrap line then names every node.

With --secure, the node (or every node) serves only SASL_SSL with
SCRAM-SHA-512 on --listen: a development CA and a node certificate are made
under <data-dir>/certs, the raft port takes only that CA's certificates, ACLs
are on, and the user admin is created with a password kept in
<data-dir>/certs/admin.password. After the bootstrap line, strata prints the
kcat, strata and franz-go settings to connect. docs/security.md has more.

Settings come from flags only: STRATA_* setting variables and config files
are for 'strata serve', and each one set is reported as ignored.`,
		Args: args(cobra.NoArgs),
	}
	dev.addFlags(cmd.Flags(), "directory for the logs, the metadata and the bucket directory")
	cmd.Flags().IntVar(&nodes, "nodes", 1, fmt.Sprintf("nodes of the local cluster, 1 to %d", maxDevNodes))
	cmd.Flags().BoolVar(&secure, "secure", false, "SASL_SSL with SCRAM-SHA-512 on --listen, a development CA and certificates under <data-dir>/certs, raft over mutual TLS, ACLs on, and an admin user whose password is kept in <data-dir>/certs/admin.password")
	tierFlags := config.AddFlagsFor(cmd.Flags(), false, "s3", "tier", "read_replica",
		"kafka.listeners", "kafka.advertised_listeners", "kafka.inter_broker_listener", "tls", "http.tls", "http.bearer_token", "http.pprof")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if nodes < 1 || nodes > maxDevNodes {
			return cmd.FlagErrorFunc()(cmd, fmt.Errorf("--nodes %d: a local cluster has 1 to %d nodes", nodes, maxDevNodes))
		}
		c, warnings, err := loadFlagsOnly(cmd, environ, tierFlags)
		if err != nil {
			return err
		}
		addrs := []struct{ flag, addr string }{{"--listen", dev.listen}, {"--http-listen", dev.httpListen}}
		if len(c.Kafka.Listeners) > 0 {
			if cmd.Flags().Changed("listen") {
				return cmd.FlagErrorFunc()(cmd, errors.New("--listen and --listener: give every listener with --listener NAME=PROTO://host:port"))
			}
			addrs = addrs[1:]
			for _, l := range c.BrokerListeners() {
				addrs = append(addrs, struct{ flag, addr string }{"--listener " + l.Name, l.Addr})
			}
		}
		for _, a := range addrs {
			if strings.EqualFold(a.addr, "off") {
				continue
			}
			if _, err := consecutiveAddrs(a.addr, nodes); err != nil {
				return cmd.FlagErrorFunc()(cmd, fmt.Errorf("%s: %w", a.flag, err))
			}
		}
		cfg, err := dev.config(cmd, stderr)
		if err != nil {
			return err
		}
		if len(c.Kafka.Listeners) > 0 {
			cfg.Listen, cfg.Listeners = "", c.BrokerListeners()
		}
		cfg.InterBrokerListener = c.Kafka.InterBrokerListener
		if err := applyTLS(&cfg, c); err != nil {
			return err
		}
		for _, w := range warnings {
			cfg.Logger.Warn(w)
		}
		cfg.ReadReplica.PollInterval = c.ReadReplica.PollInterval
		cfg.ReadReplica.Open = sourceOpener(c.S3, c.ReadReplica.AllowedEndpoints)
		cfg.ReadReplica.Notify = sourceNotifier(c.S3, c.ReadReplica.AllowedEndpoints, c.ReadReplica.Notifications)
		if err := checkDevShape(dev.dataDir, nodes); err != nil {
			return err
		}
		var announce func(io.Writer, string)
		if secure {
			if len(c.Kafka.Listeners) > 0 || c.TLS.CertFile != "" {
				return cmd.FlagErrorFunc()(cmd, errors.New("--secure makes its own listener and certificates: give --listen, not --listener or --tls-* flags"))
			}
			sec, err := setUpSecureDev(&cfg, dev.dataDir, dev.listen)
			if err != nil {
				return err
			}
			announce = sec.printHints
		}
		if nodes > 1 {
			d := &devCluster{base: cfg, n: nodes, s3: c.S3, tier: c.Tier, dataDir: dev.dataDir, announce: announce}
			return d.run(cmd.Context(), stdout)
		}
		return runNode(cmd.Context(), nodeRun{name: "strata dev", cfg: cfg, s3: c.S3, tier: c.Tier, announce: announce}, stdout)
	}
	return cmd
}

// devNode holds the flags of a development node (strata dev and strata
// localstack).
type devNode struct {
	dataDir, listen, httpListen, logLevel string
}

func (d *devNode) addFlags(f *pflag.FlagSet, dataDirUsage string) {
	f.StringVar(&d.dataDir, "data-dir", defaultDevDataDir, dataDirUsage)
	f.StringVar(&d.listen, "listen", config.DefaultListen, "Kafka listener address (port 0 picks a free port)")
	f.StringVar(&d.httpListen, "http-listen", config.DefaultHTTPListen, `metrics and health listener ("off" disables it)`)
	f.StringVar(&d.logLevel, "log-level", "info", "debug, info, warn or error")
}

// config is the broker configuration of a development node logging to
// stderr; a bad --log-level is a usage error of cmd.
func (d *devNode) config(cmd *cobra.Command, stderr io.Writer) (broker.Config, error) {
	level, err := config.ParseLevel(d.logLevel)
	if err != nil {
		return broker.Config{}, &usageError{err: fmt.Errorf("--log-level: %w", err), cmd: cmd.CommandPath()}
	}
	httpListen := d.httpListen
	if strings.EqualFold(httpListen, "off") {
		httpListen = ""
	}
	return broker.Config{
		DataDir:           d.dataDir,
		Listen:            d.listen,
		HTTPListen:        httpListen,
		AutoCreateTopics:  true,
		DefaultPartitions: 1,
		OffsetsPartitions: 3, // a laptop needs no 50 offsets partitions
		Logger:            newLogger(stderr, level, "text"),

		TransactionStatePartitions: 3, // nor 50 transaction state partitions
	}, nil
}

func newServeCmd(environ []string, stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a node configured by flags, a config file and STRATA_* variables",
		Long: `Run a Strata node. Each setting can come from a flag, a STRATA_* environment
variable (the flag's name in upper case, dashes as underscores) or the YAML
file named by --config or STRATA_CONFIG; flags win over the environment, which
wins over the file, which wins over the defaults. The data directory must be
set. See docs/operations.md for the file format.`,
		Args: args(cobra.NoArgs),
	}
	flags := config.AddFlags(cmd.Flags())
	restore := cmd.Flags().Bool("restore", false, "restore the cluster from the bucket's newest metadata checkpoint on first start, adopting the bucket's cluster id (docs/operations.md, Disaster recovery)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := checkFlagsAlone(flags); err != nil {
			return cmd.FlagErrorFunc()(cmd, err)
		}
		c, warnings, err := config.Load(config.Sources{Env: environ, Flags: flags})
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		log := newLogger(stderr, c.Logging.Level, c.Logging.Format)
		for _, w := range warnings {
			log.Warn(w)
		}
		cfg := brokerConfig(c, log)
		cfg.Restore = *restore
		if err := applyTLS(&cfg, c); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		if err := cfg.WithDefaults().Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		return runNode(cmd.Context(), nodeRun{name: "strata serve", cfg: cfg, s3: c.S3, tier: c.Tier}, stdout)
	}
	return cmd
}

// loadFlagsOnly loads the settings of a command that takes them from
// flags only (dev, localstack): a setting refused there is a usage error,
// while one refused only with environ (the S3 keys, read from there) is
// not the command line's fault.
func loadFlagsOnly(cmd *cobra.Command, environ []string, flags *config.Flags) (config.Config, []string, error) {
	if _, _, err := config.Load(config.Sources{Flags: flags, FlagsOnly: true}); err != nil {
		return config.Config{}, nil, cmd.FlagErrorFunc()(cmd, err)
	}
	c, warnings, err := config.Load(config.Sources{Env: environ, Flags: flags, FlagsOnly: true})
	if err != nil {
		return config.Config{}, nil, fmt.Errorf("config: %w", err)
	}
	return c, warnings, nil
}

// checkFlagsAlone validates the flags over the defaults, without the file
// and the environment, the way the broker will: the flag parser checks
// each value's syntax, and this its meaning (a topic default the broker
// does not know, or one of the wrong type). What fails here is the command
// line's fault, a usage error; a setting that is only wrong together with
// the file or the environment fails later, as a config error.
func checkFlagsAlone(flags *config.Flags) error {
	c, _, err := config.Load(config.Sources{Flags: flags, FlagsOnly: true, DataDirOptional: true})
	if err != nil {
		return err
	}
	cfg := brokerConfig(c, nil)
	placeholderTLS(&cfg)
	if cfg.DataDir == "" {
		cfg.DataDir = "." // only its presence is checked, and Load checks that
	}
	return cfg.WithDefaults().Validate()
}

// brokerConfig maps the operator-facing configuration onto the broker's.
func brokerConfig(c config.Config, log *slog.Logger) broker.Config {
	return broker.Config{
		ReadReplica: broker.ReadReplicaConfig{PollInterval: c.ReadReplica.PollInterval,
			Open:   sourceOpener(c.S3, c.ReadReplica.AllowedEndpoints),
			Notify: sourceNotifier(c.S3, c.ReadReplica.AllowedEndpoints, c.ReadReplica.Notifications)},
		NodeID:            c.Node.ID,
		DataDir:           c.Node.DataDir,
		Rack:              c.Node.Rack,
		ClusterID:         c.Cluster.ID,
		RaftListen:        c.Cluster.RaftListen,
		Voters:            c.Cluster.Voters,
		Listeners:         c.BrokerListeners(),
		MaxRequestBytes:   c.Kafka.MaxRequestBytes,
		HTTPListen:        c.HTTP.Listen,
		AutoCreateTopics:  c.Topics.AutoCreate,
		DefaultPartitions: c.Topics.DefaultPartitions,
		OffsetsPartitions: c.Topics.OffsetsPartitions,
		TopicDefaults:     c.Topics.Defaults,
		FlushInterval:     c.Storage.FlushInterval,
		Logger:            log,

		QueuedMaxRequestBytes: c.Kafka.QueuedMaxRequestBytes,
		ConnectionsMaxIdle:    c.Kafka.ConnectionsMaxIdle,
		FetchMaxBytes:         c.Kafka.FetchMaxBytes,
		InterBrokerListener:   c.Kafka.InterBrokerListener,
		MaxConnectionsPerIP:   c.Kafka.MaxConnectionsPerIP,

		Authorizer:                c.Authorizer.Enabled,
		SuperUsers:                c.Authorizer.SuperUsers,
		AllowEveryoneIfNoACLFound: c.Authorizer.AllowEveryoneIfNoACLFound,
		SASL: broker.SASLConfig{
			Mechanisms:           c.SASL.Mechanisms,
			PlainUsersFile:       c.SASL.PlainUsersFile,
			OAuthJWKS:            c.SASL.OAuthJWKS,
			OAuthUnsecured:       c.SASL.OAuthUnsecured,
			BootstrapUser:        c.SASL.BootstrapUser,
			BootstrapPassword:    c.SASL.BootstrapPassword,
			ConnectionsMaxReauth: c.SASL.ConnectionsMaxReauth,
			MaxReceiveSize:       c.SASL.MaxReceiveSize,
			FailedDelay:          c.SASL.FailedDelay,
		},

		DefaultReplicationFactor: c.Topics.DefaultReplicationFactor,
		SessionTimeout:           c.Cluster.SessionTimeout,
		HeartbeatInterval:        c.Cluster.HeartbeatInterval,
		ReplicaLagTimeMax:        c.Cluster.ReplicaLagTimeMax,

		TransactionStatePartitions: c.Transactions.StatePartitions,
		TransactionMaxTimeout:      c.Transactions.MaxTimeout,
		TransactionalIDExpiration:  c.Transactions.IDExpiration,
		TransactionAbortInterval:   c.Transactions.AbortInterval,

		Compactor: compactor.Config{
			MemoryBytes:   c.Compactor.MemoryBytes,
			Workers:       c.Compactor.Workers,
			IOBytesPerSec: c.Compactor.IOBytesPerSec,
			Interval:      c.Compactor.Interval,
			TestPauseAt:   c.Compactor.TestPauseAt,
		},
	}
}

// nodeRun is a node for runNode to run.
type nodeRun struct {
	name string        // "strata dev", shown on the bootstrap line
	cfg  broker.Config // everything but the tier, which runNode opens
	s3   config.S3
	tier config.Tier
	// announce, if set, prints more for the user after the bootstrap
	// line (strata localstack: how to reach its S3 endpoint).
	announce func(w io.Writer, bootstrap string)
}

// runNode opens the node's object store, starts a broker, announces its
// bootstrap address on out once it accepts connections, and closes it on
// SIGINT or SIGTERM. A second signal ends the process without waiting for
// the clean shutdown to finish, and says so.
func runNode(ctx context.Context, r nodeRun, out io.Writer) error {
	ctx, forced, stopSignals := notifySignals(ctx)
	defer stopSignals()

	cfg, where, err := withStore(ctx, r.cfg, r.s3, r.tier)
	if err != nil {
		return err
	}
	procs := broker.RaiseProcs()
	cfg.Logger.Debug("scheduler", "gomaxprocs", procs, "cpus", runtime.NumCPU())
	b, err := broker.Start(ctx, cfg)
	if err != nil {
		return stoppedStarting(ctx, cfg.Logger, err)
	}
	line := fmt.Sprintf("%s: bootstrap %s (data in %s", r.name, b.AdvertisedAddr(), cfg.DataDir)
	if where != "" {
		line += ", bucket " + where
	}
	if a := b.HTTPAddr(); a != nil {
		scheme := "http"
		if cfg.HTTPTLS != nil {
			scheme = "https"
		}
		line += fmt.Sprintf(", metrics %s://%s/metrics", scheme, a)
	}
	fmt.Fprintln(out, line+")")
	if r.announce != nil {
		r.announce(out, b.AdvertisedAddr())
	}

	<-ctx.Done()
	// A controlled shutdown: in a cluster the node first hands its
	// leaderships to other in-sync replicas, so clients see only
	// retriable errors (a single node just closes).
	return shutdown(cfg.Logger, forced, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), controlledShutdownTimeout)
		defer cancel()
		return b.Shutdown(ctx)
	})
}

// stoppedStarting is what a node's start-up that failed with err comes
// to: a signal (ctx ended) while it waited is a clean stop, status 0, said
// in a log line, not a failure reading "context canceled".
func stoppedStarting(ctx context.Context, log *slog.Logger, err error) error {
	if ctx.Err() == nil || !errors.Is(err, context.Canceled) {
		return err
	}
	if errors.Is(err, meta.ErrStoppedWaiting) {
		log.Info("stopped while waiting for a quorum")
	} else {
		log.Info("stopped while starting")
	}
	return nil
}

// controlledShutdownTimeout bounds how long a node waits for the
// controller to move its leaderships before it closes anyway.
const controlledShutdownTimeout = 30 * time.Second

// shutdown runs closeAll once the node has been told to stop, unless a
// second signal on forced comes first.
func shutdown(log *slog.Logger, forced <-chan os.Signal, closeAll func() error) error {
	start := time.Now()
	log.Info("shutting down")
	// Close runs on its own goroutine so that a second signal can end the
	// process; when one does, nobody waits for Close: the process exits,
	// which is as safe as a crash (the next start-up re-validates).
	closed := make(chan error, 1)
	go func() { closed <- closeAll() }()
	select {
	case err := <-closed:
		if err != nil {
			return fmt.Errorf("shutdown: %w", err)
		}
	case sig := <-forced:
		log.Error("second signal: exiting before the clean shutdown finished", "signal", sig.String(), "after", time.Since(start).Round(time.Millisecond))
		return fmt.Errorf("second signal (%s) during shutdown: exited before it finished; the next start-up re-validates the logs", sig)
	}
	log.Info("shut down", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// notifySignals returns a context cancelled by the first SIGINT or SIGTERM
// and a channel that receives the second. Unlike signal.NotifyContext,
// whose channel holds one signal and then drops the rest, it sees a second
// signal arriving during shutdown (as from `timeout`, which signals the
// process and then its group). stop releases the signals and waits for the
// goroutine that watches them.
func notifySignals(parent context.Context) (ctx context.Context, forced <-chan os.Signal, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	second := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		first := true
		for {
			select {
			case sig := <-sigs:
				if first {
					first = false
					cancel()
					continue
				}
				second <- sig
				return
			case <-done:
				return
			}
		}
	}()
	return ctx, second, func() {
		signal.Stop(sigs)
		close(done)
		wg.Wait()
		cancel()
	}
}

// newLogger writes slog records to w; format is "text" or "json". Each key
// appears once per line (logging.DedupHandler): loggers are derived in
// layers that do not know what the others added.
func newLogger(w io.Writer, level slog.Level, format string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		opts.ReplaceAttr = durationsAsText
		return slog.New(logging.NewDedupHandler(slog.NewJSONHandler(w, opts)))
	}
	return slog.New(logging.NewDedupHandler(slog.NewTextHandler(w, opts)))
}

// durationsAsText prints durations as the text handler does ("1.5s"):
// the JSON handler's integer nanoseconds read as nonsense to people and
// carry no unit for machines, while "1.5s" parses with Go's
// time.ParseDuration and most log pipelines' duration filters.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
