package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// DefaultBootstrap is --bootstrap's default when Options name none.
const DefaultBootstrap = "127.0.0.1:9092"

// Options adapt the command tree to the binary that mounts it. The zero
// value is fine.
type Options struct {
	// Bootstrap replaces DefaultBootstrap as --bootstrap's default: the
	// binary passes what its environment names (STRATA_BOOTSTRAP for
	// strata), so that loadtest finds the broker every other verb finds.
	Bootstrap string
	// BootstrapEnv names that environment variable for --help.
	BootstrapEnv string
	// ClientOpts, when set, gives more options for every client (TLS,
	// SASL), from flags the binary adds to the command; called once a
	// command's flags are parsed.
	ClientOpts func() ([]kgo.Opt, error)
}

// clientOpts calls opts.ClientOpts, if set.
func (opts Options) clientOpts() ([]kgo.Opt, error) {
	if opts.ClientOpts == nil {
		return nil, nil
	}
	return opts.ClientOpts()
}

// Command returns the `loadtest` command with its produce, consume and e2e
// subcommands, for cmd/strata to mount.
//
// Bad flag values are reported through cobra's flag error function, as
// unknown flags and unparsable values are: a binary that sets one on its
// root command (SetFlagErrorFunc) classifies every usage error of loadtest
// the same way, for its exit status and --help hint.
func Command(opts Options) *cobra.Command {
	c := &cobra.Command{
		Use:   "loadtest",
		Short: "Generate load against any Kafka-protocol broker and check what comes back",
		Long: `Generate load against any Kafka-protocol broker, Strata or not, and report
throughput and latency percentiles; with --verify, check that every record
arrives once, byte-identical and in order.

Every run is bounded by --records or --duration. Ctrl-C stops a run early and
prints the figures so far. --json prints the final figures as one JSON object
on stdout; progress goes to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	c.AddCommand(produceCommand(opts), consumeCommand(opts), e2eCommand(opts), kfakeCommand())
	return c
}

// usage reports err, a bad flag value found after parsing, as cobra
// reports the ones it finds itself.
func usage(cmd *cobra.Command, err error) error {
	return cmd.FlagErrorFunc()(cmd, err)
}

// commonFlags are the flags every subcommand has.
type commonFlags struct {
	bootstrap string
	topic     string
	records   int64
	duration  time.Duration
	verify    bool
	seed      int64
	json      bool
}

func (f *commonFlags) register(fs *pflag.FlagSet, opts Options) {
	def, help := opts.Bootstrap, "broker addresses, `HOST:PORT[,...]`"
	if def == "" {
		def = DefaultBootstrap
	}
	if opts.BootstrapEnv != "" {
		help += " (env " + opts.BootstrapEnv + ")"
	}
	fs.StringVar(&f.bootstrap, "bootstrap", def, help)
	fs.StringVar(&f.topic, "topic", "loadtest", "topic")
	fs.Int64Var(&f.records, "records", 0, "stop after this many records")
	fs.DurationVar(&f.duration, "duration", 0, "stop after this long")
	fs.BoolVar(&f.verify, "verify", false, "derive values from --seed and check them on the consumer side")
	fs.Int64Var(&f.seed, "seed", 1, "seed of verified values; producer and consumer must agree")
	fs.BoolVar(&f.json, "json", false, "print the final figures as one JSON object")
}

func (f *commonFlags) bootstraps() []string {
	var out []string
	for b := range strings.SplitSeq(f.bootstrap, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// produceFlags are the flags of produce and e2e.
type produceFlags struct {
	commonFlags
	size          int
	keySpace      int64
	producers     int
	rate          float64
	rateMB        float64
	acks          string
	idempotent    bool
	compression   string
	linger        time.Duration
	batchMaxBytes int32
	create        bool
	partitions    int32
	rf            int16
	topicConfigs  []string
	txnID         string
	txnRecords    int
	txnAbortEvery int
}

func (f *produceFlags) register(fs *pflag.FlagSet, opts Options) {
	f.commonFlags.register(fs, opts)
	fs.IntVar(&f.size, "size", 1024, "value size in bytes")
	fs.Int64Var(&f.keySpace, "key-space", 0, "number of distinct keys (0: no keys)")
	fs.IntVar(&f.producers, "producers", 1, "producer clients")
	fs.Float64Var(&f.rate, "rate", 0, "target records/s over all producers (0: as fast as possible)")
	fs.Float64Var(&f.rateMB, "rate-mb", 0, "target MiB/s of keys and values over all producers")
	fs.StringVar(&f.acks, "acks", "all", "acks: 0, 1 or all")
	// The default depends on --acks, so the flag's own default is false
	// (which --help does not print) and config decides.
	fs.BoolVar(&f.idempotent, "idempotent", false, "idempotent producer; on unless given --acks 0 or 1, which it cannot be used with")
	fs.StringVar(&f.compression, "compression", "none", "none, gzip, snappy, lz4 or zstd")
	fs.DurationVar(&f.linger, "linger", 5*time.Millisecond, "how long a batch waits for more records (Kafka's default linger.ms)")
	fs.Int32Var(&f.batchMaxBytes, "batch-max-bytes", 0, "largest record batch (0: client default, 1 MB)")
	fs.BoolVar(&f.create, "create", false, "create the topic first (an existing one is used as it is)")
	fs.Int32Var(&f.partitions, "partitions", -1, "partitions of a created topic (-1: broker default)")
	fs.Int16Var(&f.rf, "replication-factor", -1, "replication factor of a created topic (-1: broker default)")
	fs.StringArrayVar(&f.topicConfigs, "topic-config", nil, "`KEY=VALUE` config of a created topic, repeatable")
	fs.StringVar(&f.txnID, "transactional-id", "", "produce in transactions, producer i with the transactional id `PREFIX`-i (acks=all)")
	fs.IntVar(&f.txnRecords, "txn-records", defaultTxnRecords, "records per transaction, with --transactional-id")
	fs.IntVar(&f.txnAbortEvery, "txn-abort-every", 0, "abort every Nth transaction on purpose, with --transactional-id (0: none)")
}

func (f *produceFlags) config(fs *pflag.FlagSet) (ProduceConfig, error) {
	cfg := ProduceConfig{
		Bootstrap:         f.bootstraps(),
		Topic:             f.topic,
		Records:           f.records,
		Duration:          f.duration,
		Size:              f.size,
		KeySpace:          f.keySpace,
		Producers:         f.producers,
		Rate:              f.rate,
		RateMB:            f.rateMB,
		Acks:              f.acks,
		Idempotent:        f.idempotent,
		Compression:       f.compression,
		Linger:            f.linger,
		BatchMaxBytes:     f.batchMaxBytes,
		Create:            f.create,
		Partitions:        f.partitions,
		ReplicationFactor: f.rf,
		TransactionalID:   f.txnID,
		TxnAbortEvery:     f.txnAbortEvery,
		Verify:            f.verify,
		Seed:              f.seed,
	}
	if f.producers < 1 {
		return cfg, fmt.Errorf("--producers %d: need at least 1", f.producers)
	}
	if f.txnID == "" {
		for _, name := range []string{"txn-records", "txn-abort-every"} {
			if fs.Changed(name) {
				return cfg, fmt.Errorf("--%s needs --transactional-id", name)
			}
		}
	} else {
		if f.txnRecords < 1 {
			return cfg, fmt.Errorf("--txn-records %d: need at least 1", f.txnRecords)
		}
		if fs.Changed("idempotent") && !f.idempotent {
			return cfg, errors.New("--idempotent=false: a transactional producer is idempotent")
		}
		cfg.TxnRecords = f.txnRecords
	}
	// Idempotence is on by default but only possible with acks=all, so a
	// bare --acks 1 turns it off rather than failing.
	if !fs.Changed("idempotent") {
		acks, err := parseAcks(f.acks)
		cfg.Idempotent = err == nil && acks == -1
	}
	if len(f.topicConfigs) > 0 {
		cfg.TopicConfigs = make(map[string]string, len(f.topicConfigs))
		for _, kv := range f.topicConfigs {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return cfg, fmt.Errorf("--topic-config %q is not KEY=VALUE", kv)
			}
			cfg.TopicConfigs[k] = v
		}
	}
	return cfg, nil
}

func produceCommand(opts Options) *cobra.Command {
	var f produceFlags
	c := &cobra.Command{
		Use:   "produce",
		Short: "Produce records and report throughput and acknowledgement latency",
		Long: `Produce records and report throughput and acknowledgement latency.

With --transactional-id, each producer writes its records in transactions of
--txn-records records and commits each; --txn-abort-every N aborts every Nth
on purpose. Only committed records count, and their latency runs to the
commit, when read_committed consumers can see them. A verifying consumer
knows the aborted records by their header: read_committed, any of them is a
fault.`,
		Example: `  strata loadtest produce --bootstrap 127.0.0.1:9092 --topic t --create --partitions 6 \
    --records 100000 --size 1024 --json
  strata loadtest produce --topic t --records 100000 --transactional-id bench --txn-records 100`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.config(cmd.Flags())
			if err == nil {
				err = cfg.validate()
			}
			if err != nil {
				return usage(cmd, fmt.Errorf("loadtest produce: %w", err))
			}
			if cfg.ClientOpts, err = opts.clientOpts(); err != nil {
				return usage(cmd, fmt.Errorf("loadtest produce: %w", err))
			}
			return runCommand(cmd, "produce", &f.commonFlags,
				func(ctx context.Context, onProgress func(Progress), every time.Duration) (Result, error) {
					cfg.OnProgress, cfg.ProgressEvery = onProgress, every
					return Produce(ctx, cfg)
				})
		},
	}
	f.register(c.Flags(), opts)
	return c
}

func consumeCommand(opts Options) *cobra.Command {
	var (
		f         commonFlags
		from      string
		group     string
		isolation string
	)
	c := &cobra.Command{
		Use:   "consume",
		Short: "Consume records and report throughput, end-to-end latency and, with --verify, faults",
		Long: `Consume records and report throughput and end-to-end latency (meaningful when
the producer runs at the same time on the same host).

With --verify, every record written by "produce --verify" with the same --seed
is checked: missing, duplicated, corrupt and out-of-order records make the
command fail. Records other clients wrote to the topic are skipped and counted
in one line. A verifying consumer stops by itself once it has read up to the
end offsets it saw at start and every producer's end markers; give --duration
as a timeout.

--isolation read_committed reads committed records only, up to the last
stable offset, as transactional pipelines do; verifying, it fails on any
record of a transaction its producer aborted.`,
		Example:      `  strata loadtest consume --bootstrap 127.0.0.1:9092 --topic t --verify --duration 1m`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := ConsumeConfig{
				Bootstrap: f.bootstraps(),
				Topic:     f.topic,
				Records:   f.records,
				Duration:  f.duration,
				From:      from,
				Group:     group,
				Isolation: isolation,
				Verify:    f.verify,
				Seed:      f.seed,
			}
			if err := cfg.validate(); err != nil {
				return usage(cmd, fmt.Errorf("loadtest consume: %w", err))
			}
			var err error
			if cfg.ClientOpts, err = opts.clientOpts(); err != nil {
				return usage(cmd, fmt.Errorf("loadtest consume: %w", err))
			}
			return runCommand(cmd, "consume", &f,
				func(ctx context.Context, onProgress func(Progress), every time.Duration) (Result, error) {
					cfg.OnProgress, cfg.ProgressEvery = onProgress, every
					return Consume(ctx, cfg)
				})
		},
	}
	f.register(c.Flags(), opts)
	c.Flags().StringVar(&from, "from", "earliest", "where to start without a committed offset: earliest, latest or an RFC 3339 time")
	c.Flags().StringVar(&group, "group", "", "consume in this consumer group")
	c.Flags().StringVar(&isolation, "isolation", "read_uncommitted", "read_committed (committed records, up to the last stable offset) or read_uncommitted")
	return c
}

func e2eCommand(opts Options) *cobra.Command {
	var (
		f     produceFlags
		drain time.Duration
	)
	c := &cobra.Command{
		Use:   "e2e",
		Short: "Produce while consuming and report end-to-end latency",
		Example: `  strata loadtest e2e --bootstrap 127.0.0.1:9092 --topic t --create --rate-mb 10 \
    --duration 30s --verify --json`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pcfg, err := f.config(cmd.Flags())
			cfg := E2EConfig{ProduceConfig: pcfg, Drain: drain}
			if err == nil {
				err = cfg.validate()
			}
			if err == nil {
				cfg.ClientOpts, err = opts.clientOpts()
			}
			if err != nil {
				return usage(cmd, fmt.Errorf("loadtest e2e: %w", err))
			}
			return runCommand(cmd, "e2e", &f.commonFlags,
				func(ctx context.Context, onProgress func(Progress), every time.Duration) (Result, error) {
					cfg.OnProgress, cfg.ProgressEvery = onProgress, every
					return E2E(ctx, cfg)
				})
		},
	}
	f.register(c.Flags(), opts)
	c.Flags().DurationVar(&drain, "drain", defaultDrain, "how long to wait for records in flight once producing is done")
	return c
}

// runFunc runs one test, reporting progress to onProgress every interval.
type runFunc func(ctx context.Context, onProgress func(Progress), every time.Duration) (Result, error)

// runCommand runs a test under Ctrl-C handling and a progress display on
// stderr, then prints the figures on stdout.
func runCommand(cmd *cobra.Command, mode string, f *commonFlags, run runFunc) error {
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	ctx, stopSignals := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	disp := newDisplay(cmd.ErrOrStderr(), mode)
	res, err := run(ctx, disp.update, disp.every)
	disp.close(err == nil && ctx.Err() == nil)
	if err != nil {
		return err
	}
	interrupted := ctx.Err() != nil

	out := cmd.OutOrStdout()
	if f.json {
		doc := struct {
			Mode        string `json:"mode"`
			Topic       string `json:"topic"`
			Interrupted bool   `json:"interrupted,omitempty"`
			Result
		}{mode, f.topic, interrupted, res}
		if err := json.NewEncoder(out).Encode(doc); err != nil {
			return fmt.Errorf("loadtest %s: write json: %w", mode, err)
		}
	} else {
		printSummary(out, mode, res)
	}
	if interrupted {
		return fmt.Errorf("loadtest %s: interrupted", mode)
	}
	if err := res.Err(); err != nil {
		return fmt.Errorf("loadtest %s: %w", mode, err)
	}
	return nil
}

func printSummary(w io.Writer, mode string, r Result) {
	fmt.Fprintf(w, "%s: %d records, %.2f MiB in %v: %.1f records/s, %.2f MiB/s\n",
		mode, r.Records, float64(r.Bytes)/MiB, r.Duration.Round(time.Millisecond), r.RecordsPerSec, r.MBPerSec)
	l := r.Latency
	fmt.Fprintf(w, "latency ms: p50 %.3f, p90 %.3f, p99 %.3f, p99.9 %.3f, max %.3f\n", l.P50, l.P90, l.P99, l.P999, l.Max)
	if r.Transactions > 0 || r.AbortedTransactions > 0 {
		fmt.Fprintf(w, "transactions: %d committed, %d aborted on purpose (%d records)\n",
			r.Transactions, r.AbortedTransactions, r.AbortedRecords)
	}
	if r.Errors > 0 {
		fmt.Fprintf(w, "errors: %d, first: %s\n", r.Errors, r.FirstError)
	}
	if v := r.Verify; v != nil {
		fmt.Fprintf(w, "verify: %d missing, %d duplicated, %d corrupt, %d out of order, %d without end marker\n",
			v.Missing, v.Duplicated, v.Corrupt, v.OutOfOrder, v.Unterminated)
		if v.Aborted > 0 || v.AbortedRead > 0 {
			fmt.Fprintf(w, "verify: %d records of aborted transactions read (%d where read_committed forbids it)\n",
				v.Aborted+v.AbortedRead, v.AbortedRead)
		}
		if v.Foreign > 0 {
			fmt.Fprintf(w, "verify: skipped %d records not written by produce --verify\n", v.Foreign)
		}
	}
}

// plainEvery is the period of progress lines when stderr is not a
// terminal, as in kafka-producer-perf-test.
const plainEvery = 5 * time.Second

// display shows progress: a bar on a terminal, plain lines otherwise.
type display struct {
	w     io.Writer
	mode  string
	every time.Duration

	progress *mpb.Progress // nil when not a terminal
	bar      *mpb.Bar

	mu struct {
		sync.Mutex
		last    Progress // latest progress, for the bar's text
		printed Progress // progress at the last plain line
	}
}

func newDisplay(w io.Writer, mode string) *display {
	disp := &display{w: w, mode: mode, every: plainEvery}
	if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		disp.every = 200 * time.Millisecond
		disp.progress = mpb.New(mpb.WithOutput(w), mpb.WithWidth(40), mpb.WithRefreshRate(disp.every))
		// The bar counts permille of whichever bound is nearer.
		disp.bar = disp.progress.AddBar(1000,
			mpb.PrependDecorators(decor.Name(mode, decor.WC{C: decor.DindentRight | decor.DextraSpace})),
			mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
				disp.mu.Lock()
				defer disp.mu.Unlock()
				return rateLine(disp.mu.last, Progress{})
			})),
		)
	}
	return disp
}

func (disp *display) update(p Progress) {
	if disp.bar != nil {
		disp.mu.Lock()
		disp.mu.last = p
		disp.mu.Unlock()
		var frac float64
		if p.TargetRecords > 0 {
			frac = float64(p.Records) / float64(p.TargetRecords)
		}
		if p.TargetDuration > 0 {
			frac = max(frac, float64(p.Elapsed)/float64(p.TargetDuration))
		}
		// Not under mu: the bar renders, and so takes mu, on its own
		// goroutine, which SetCurrent waits for.
		disp.bar.SetCurrent(int64(min(frac, 1) * 999))
		return
	}
	disp.mu.Lock()
	defer disp.mu.Unlock()
	// The final update comes at an arbitrary moment; skip it if a line
	// was printed just before, the summary follows anyway.
	if p.Elapsed-disp.mu.printed.Elapsed >= disp.every*9/10 {
		fmt.Fprintf(disp.w, "%s: %s\n", disp.mode, rateLine(p, disp.mu.printed))
		disp.mu.printed = p
	}
}

// rateLine describes progress p, with rates over the interval since prev.
func rateLine(p, prev Progress) string {
	s := (p.Elapsed - prev.Elapsed).Seconds()
	if s <= 0 {
		return fmt.Sprintf("%v %d records", p.Elapsed.Round(100*time.Millisecond), p.Records)
	}
	line := fmt.Sprintf("%v %d records, %.1f records/s, %.2f MiB/s",
		p.Elapsed.Round(100*time.Millisecond), p.Records,
		float64(p.Records-prev.Records)/s, float64(p.Bytes-prev.Bytes)/MiB/s)
	if p.Errors > 0 {
		line += fmt.Sprintf(", %d errors", p.Errors)
	}
	return line
}

func (disp *display) close(completed bool) {
	if disp.progress == nil {
		return
	}
	if completed {
		disp.bar.SetCurrent(1000)
	} else {
		disp.bar.Abort(false)
	}
	disp.progress.Wait()
}
