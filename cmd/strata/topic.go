package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/cmd/internal/config"
)

const defaultBootstrap = "127.0.0.1:9092"

// admin holds what every admin verb needs to reach a cluster.
type admin struct {
	bootstrap string
	timeout   time.Duration
}

func (a *admin) addFlags(cmd *cobra.Command, environ []string) {
	def := defaultBootstrap
	if v, ok := lookupEnv(environ, config.EnvBootstrap); ok && v != "" {
		def = v
	}
	cmd.PersistentFlags().StringVar(&a.bootstrap, "bootstrap", def, "comma-separated broker addresses (env "+config.EnvBootstrap+")")
	cmd.PersistentFlags().DurationVar(&a.timeout, "timeout", 10*time.Second, "give up after this long")
}

// do runs f with an admin client whose every request, retries included,
// ends within the timeout, and turns a failure to reach the cluster into
// one line that says so.
func (a *admin) do(ctx context.Context, f func(context.Context, *kadm.Client) error) error {
	return a.doClient(ctx, func(ctx context.Context, cl *kgo.Client) error {
		return f(ctx, a.adminClient(cl))
	})
}

// adminClient is an admin client on cl whose requests ask the brokers to
// answer within the timeout.
func (a *admin) adminClient(cl *kgo.Client) *kadm.Client {
	adm := kadm.NewClient(cl)
	adm.SetTimeoutMillis(int32(min(a.timeout, time.Hour).Milliseconds()))
	return adm
}

// doClient is do for verbs that also send raw kmsg requests.
func (a *admin) doClient(ctx context.Context, f func(context.Context, *kgo.Client) error) error {
	seeds := strings.Split(a.bootstrap, ",")
	for i := range seeds {
		seeds[i] = strings.TrimSpace(seeds[i])
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(seeds...),
		kgo.ClientID("strata-cli"),
		kgo.DialTimeout(min(a.timeout, 5*time.Second)),
	)
	if err != nil {
		return fmt.Errorf("--bootstrap %q: %w", a.bootstrap, err)
	}
	defer cl.Close()

	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	err = f(ctx, cl)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("cannot reach %s: connection refused (is a broker running? see --bootstrap)", a.bootstrap)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no answer from %s within %s", a.bootstrap, a.timeout)
	case ctx.Err() != nil:
		return fmt.Errorf("no answer from %s within %s: %w", a.bootstrap, a.timeout, err)
	}
	return err
}

func newTopicCmd(environ []string, stdout io.Writer) *cobra.Command {
	a := &admin{}
	cmd := &cobra.Command{
		Use:   "topic",
		Short: "Create, list, describe and delete topics",
		Long:  "Manage topics through the Kafka protocol, against any broker of the cluster.",
	}
	a.addFlags(cmd, environ)
	cmd.AddCommand(
		newTopicCreateCmd(a, stdout),
		newTopicListCmd(a, stdout),
		newTopicDescribeCmd(a, stdout),
		newTopicDeleteCmd(a, stdout),
	)
	asGroup(cmd)
	return cmd
}

func newTopicCreateCmd(a *admin, stdout io.Writer) *cobra.Command {
	var (
		partitions   int32
		replication  int16
		configs      []string
		validateOnly bool
	)
	cmd := &cobra.Command{
		Use:   "create NAME...",
		Short: "Create topics",
		Example: `  strata topic create orders --partitions 6
  strata topic create audit --config retention.ms=-1 --config cleanup.policy=compact`,
		Args: args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, names []string) error {
			cfgs := make(map[string]*string, len(configs))
			for _, kv := range configs {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return &usageError{err: fmt.Errorf("--config %q: want key=value", kv), cmd: cmd.CommandPath()}
				}
				cfgs[k] = kmsg.StringPtr(v)
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				create := adm.CreateTopics
				if validateOnly {
					create = adm.ValidateCreateTopics
				}
				rs, err := create(ctx, partitions, replication, cfgs, names...)
				if err != nil {
					return fmt.Errorf("topic create: %w", err)
				}
				verb := "created topic"
				if validateOnly {
					verb = "would create topic" // the broker checked it and created nothing
				}
				return eachName("topic create", names, rs,
					func(r kadm.CreateTopicResponse) error { return kafkaError(r.Err, r.ErrMessage) },
					func(name string, r kadm.CreateTopicResponse) {
						fmt.Fprintf(stdout, "%s %s%s\n", verb, name, createdDetails(r))
					})
			})
		},
	}
	f := cmd.Flags()
	f.Int32VarP(&partitions, "partitions", "p", -1, "number of partitions (-1: the broker's default)")
	f.Int16VarP(&replication, "replication-factor", "r", -1, "replicas per partition (-1: the broker's default)")
	f.StringArrayVarP(&configs, "config", "c", nil, "topic config key=value (repeatable)")
	f.BoolVar(&validateOnly, "validate-only", false, "ask the broker to check the request without creating anything")
	return cmd
}

func createdDetails(r kadm.CreateTopicResponse) string {
	var parts []string
	if r.NumPartitions > 0 {
		parts = append(parts, plural(int(r.NumPartitions), "partition"))
	}
	if r.ReplicationFactor > 0 {
		parts = append(parts, "replication factor "+strconv.Itoa(int(r.ReplicationFactor)))
	}
	if r.ID != (kadm.TopicID{}) {
		parts = append(parts, "id "+topicID(r.ID))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// topicSummary is one row of `topic list` and the JSON it prints.
type topicSummary struct {
	Name              string `json:"name"`
	ID                string `json:"id"`
	Partitions        int    `json:"partitions"`
	ReplicationFactor int    `json:"replication_factor"`
}

func newTopicListCmd(a *admin, stdout io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List topics",
		Args:    args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				tds, err := adm.ListTopics(ctx)
				if err != nil {
					return fmt.Errorf("topic list: %w", err)
				}
				rows := make([]topicSummary, 0, len(tds))
				for _, name := range tds.Names() {
					td := tds[name]
					rows = append(rows, topicSummary{
						Name:              name,
						ID:                topicID(td.ID),
						Partitions:        len(td.Partitions),
						ReplicationFactor: replicationFactor(td),
					})
				}
				if asJSON {
					return writeJSON(stdout, rows)
				}
				tw := newTable(stdout)
				fmt.Fprintln(tw, "NAME\tPARTITIONS\tREPLICATION\tID")
				for _, r := range rows {
					fmt.Fprintf(tw, "%s\t%d\t%d\t%s\n", r.Name, r.Partitions, r.ReplicationFactor, r.ID)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

// topicDescription is what `topic describe --json` prints per topic.
type topicDescription struct {
	Name              string                 `json:"name"`
	ID                string                 `json:"id"`
	ReplicationFactor int                    `json:"replication_factor"`
	Configs           map[string]string      `json:"configs"` // set on the topic, not inherited
	Partitions        []partitionDescription `json:"partitions"`
}

type partitionDescription struct {
	Partition       int32   `json:"partition"`
	Leader          int32   `json:"leader"`
	LeaderEpoch     int32   `json:"leader_epoch"`
	Replicas        []int32 `json:"replicas"`
	ISR             []int32 `json:"isr"`
	OfflineReplicas []int32 `json:"offline_replicas,omitempty"`
	Error           string  `json:"error,omitempty"`
}

func newTopicDescribeCmd(a *admin, stdout io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "describe NAME...",
		Short: "Show topics' partitions, leaders, replicas, in-sync replicas, ids and configs",
		Long: `Show each topic's id, its partitions with their leader, leader epoch,
replicas and in-sync replicas, and the configs set on the topic itself
(values inherited from broker defaults are not listed).`,
		Args: args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, names []string) error {
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				descs, fails, err := describeTopics(ctx, adm, names)
				if err != nil {
					return err
				}
				if asJSON {
					if err := writeJSON(stdout, descs); err != nil {
						return err
					}
				} else if err := printDescriptions(stdout, descs); err != nil {
					return err
				}
				return fails.err()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}

func describeTopics(ctx context.Context, adm *kadm.Client, names []string) ([]topicDescription, failures, error) {
	fails := failures{verb: "topic describe"}
	// Metadata for named topics never creates them: kgo leaves
	// AllowAutoTopicCreation off unless asked.
	tds, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return nil, fails, fmt.Errorf("topic describe: %w", err)
	}
	var found []string
	for _, name := range names {
		td, ok := tds[name]
		switch {
		case !ok:
			fails.add(name, kerr.UnknownTopicOrPartition)
		case td.Err != nil:
			fails.add(name, kafkaError(td.Err, ""))
		default:
			found = append(found, name)
		}
	}
	if len(found) == 0 {
		return nil, fails, nil
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, found...)
	if err != nil {
		return nil, fails, fmt.Errorf("topic describe: configs: %w", err)
	}
	descs := make([]topicDescription, 0, len(found))
	for _, name := range found {
		td := tds[name]
		d := topicDescription{
			Name:              name,
			ID:                topicID(td.ID),
			ReplicationFactor: replicationFactor(td),
			Configs:           map[string]string{},
		}
		for _, p := range td.Partitions.Sorted() {
			pd := partitionDescription{
				Partition:       p.Partition,
				Leader:          p.Leader,
				LeaderEpoch:     p.LeaderEpoch,
				Replicas:        orEmpty(p.Replicas),
				ISR:             orEmpty(p.ISR),
				OfflineReplicas: p.OfflineReplicas,
			}
			if p.Err != nil {
				pd.Error = kafkaError(p.Err, "").Error()
			}
			d.Partitions = append(d.Partitions, pd)
		}
		rc, err := rcs.On(name, nil)
		switch {
		case err != nil:
			fails.add(name, fmt.Errorf("configs: %w", kafkaError(err, "")))
			continue
		case rc.Err != nil:
			fails.add(name, fmt.Errorf("configs: %w", kafkaError(rc.Err, rc.ErrMessage)))
			continue
		}
		for _, c := range rc.Configs {
			if c.Source != kmsg.ConfigSourceDynamicTopicConfig {
				continue
			}
			v := c.MaybeValue()
			if c.Sensitive {
				v = "(sensitive)"
			}
			d.Configs[c.Key] = v
		}
		descs = append(descs, d)
	}
	return descs, fails, nil
}

func printDescriptions(w io.Writer, descs []topicDescription) error {
	for i, d := range descs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "Topic: %s  ID: %s  Partitions: %d  Replication factor: %d\n",
			d.Name, d.ID, len(d.Partitions), d.ReplicationFactor)
		keys := make([]string, 0, len(d.Configs))
		for k := range d.Configs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if len(keys) == 0 {
			fmt.Fprintln(w, "Configs: (broker defaults)")
		} else {
			kvs := make([]string, len(keys))
			for j, k := range keys {
				kvs[j] = k + "=" + d.Configs[k]
			}
			fmt.Fprintf(w, "Configs: %s\n", strings.Join(kvs, ", "))
		}
		// The ERROR column appears only when a partition has one.
		withErr := false
		for _, p := range d.Partitions {
			withErr = withErr || p.Error != ""
		}
		tw := newTable(w)
		fmt.Fprint(tw, "PARTITION\tLEADER\tEPOCH\tREPLICAS\tISR")
		if withErr {
			fmt.Fprint(tw, "\tERROR")
		}
		fmt.Fprintln(tw)
		for _, p := range d.Partitions {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s", p.Partition, p.Leader, p.LeaderEpoch, ids(p.Replicas), ids(p.ISR))
			if withErr {
				fmt.Fprintf(tw, "\t%s", p.Error)
			}
			fmt.Fprintln(tw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func newTopicDeleteCmd(a *admin, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME...",
		Aliases: []string{"rm"},
		Short:   "Delete topics and their data",
		Args:    args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, names []string) error {
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				rs, err := adm.DeleteTopics(ctx, names...)
				if err != nil {
					return fmt.Errorf("topic delete: %w", err)
				}
				return eachName("topic delete", names, rs,
					func(r kadm.DeleteTopicResponse) error { return kafkaError(r.Err, r.ErrMessage) },
					func(name string, _ kadm.DeleteTopicResponse) { fmt.Fprintf(stdout, "deleted topic %s\n", name) })
			})
		},
	}
}

// failures collects per-topic errors of a command acting on several topics,
// so that one bad name does not hide what happened to the others.
type failures struct {
	verb  string
	names []string
	errs  []error
}

func (f *failures) add(name string, err error) {
	f.names = append(f.names, name)
	f.errs = append(f.errs, err)
}

// eachName reports on every name a verb acted on: a name missing from the
// broker's response rs, or whose response errOf finds an error in, is a
// failure; ok prints the others.
func eachName[R any](verb string, names []string, rs map[string]R, errOf func(R) error, ok func(name string, r R)) error {
	fails := failures{verb: verb}
	for _, name := range names {
		r, found := rs[name]
		if !found {
			fails.add(name, errors.New("missing from the broker's response"))
		} else if err := errOf(r); err != nil {
			fails.add(name, err)
		} else {
			ok(name, r)
		}
	}
	return fails.err()
}

func (f *failures) err() error {
	switch len(f.errs) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%s %s: %w", f.verb, f.names[0], f.errs[0])
	}
	msgs := make([]string, len(f.errs))
	for i := range f.errs {
		msgs[i] = f.names[i] + ": " + f.errs[i].Error()
	}
	return fmt.Errorf("%s: %d topics failed: %s", f.verb, len(f.errs), strings.Join(msgs, "; "))
}

// kafkaError renders a Kafka error code as its protocol name followed by
// the broker's own message when it sent one, else the code's description:
// "TOPIC_ALREADY_EXISTS: Topic 'orders' already exists."
func kafkaError(err error, brokerMsg string) error {
	var ke *kerr.Error
	if errors.As(err, &ke) && brokerMsg != "" {
		return fmt.Errorf("%s: %s", ke.Message, brokerMsg)
	}
	return err
}

// topicID prints a topic id the way Kafka's tools do: URL-safe base64
// without padding. The zero id (a broker without topic ids) prints as "-".
func topicID(id kadm.TopicID) string {
	if id == (kadm.TopicID{}) {
		return "-"
	}
	return base64.RawURLEncoding.EncodeToString(id[:])
}

func replicationFactor(td kadm.TopicDetail) int {
	rf := 0
	for _, p := range td.Partitions {
		rf = max(rf, len(p.Replicas))
	}
	return rf
}

func ids(ns []int32) string {
	if len(ns) == 0 {
		return "-"
	}
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(int(n))
	}
	return strings.Join(s, ",")
}

func orEmpty(ns []int32) []int32 {
	if ns == nil {
		return []int32{}
	}
	return ns
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
