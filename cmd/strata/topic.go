package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
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

	brokernode "strata/broker/node"
	"strata/cmd/internal/config"
)

const defaultBootstrap = "127.0.0.1:9092"

// admin holds what every admin verb needs to reach a cluster.
type admin struct {
	bootstrap string
	timeout   time.Duration
	// opts are more client options, for verbs that need them (cluster
	// restore's extension API versions).
	opts []kgo.Opt
	// security is TLS and SASL (clientsecurity.go).
	security clientSecurity
}

func (a *admin) addFlags(cmd *cobra.Command, environ []string) {
	def := defaultBootstrap
	if v, ok := lookupEnv(environ, config.EnvBootstrap); ok && v != "" {
		def = v
	}
	cmd.PersistentFlags().StringVar(&a.bootstrap, "bootstrap", def, "comma-separated broker addresses (env "+config.EnvBootstrap+")")
	cmd.PersistentFlags().DurationVar(&a.timeout, "timeout", 10*time.Second, "give up after this long")
	a.security.addFlags(cmd.PersistentFlags(), environ)
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
	seeds := a.seeds()
	secOpts, err := a.security.opts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{
		kgo.SeedBrokers(seeds...),
		kgo.ClientID("strata-cli"),
		kgo.DialTimeout(min(a.timeout, 5*time.Second)),
	}, secOpts...), a.opts...)...)
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
	case a.security.authError(err) != err:
		return a.security.authError(err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return &unreachableError{fmt.Sprintf("cannot reach %s: connection refused (is a broker running? see --bootstrap)", a.bootstrap)}
	case errors.Is(err, context.DeadlineExceeded):
		return &unreachableError{fmt.Sprintf("no answer from %s within %s", a.bootstrap, a.timeout)}
	case ctx.Err() != nil:
		return &unreachableError{fmt.Sprintf("no answer from %s within %s: %v", a.bootstrap, a.timeout, err)}
	}
	return err
}

// seeds are the --bootstrap addresses, in the order given: the order of
// the client's SeedBrokers.
func (a *admin) seeds() []string {
	seeds := strings.Split(a.bootstrap, ",")
	for i := range seeds {
		seeds[i] = strings.TrimSpace(seeds[i])
	}
	return seeds
}

// unreachableError says no broker answered, as opposed to a broker that
// answered with an error: the tier verbs then read the bucket alone.
type unreachableError struct{ msg string }

func (e *unreachableError) Error() string { return e.msg }

func newTopicCmd(environ []string, stdout io.Writer) *cobra.Command {
	a := &admin{}
	cmd := &cobra.Command{
		Use:   "topic",
		Short: "Create, list, describe, alter and delete topics",
		Long:  "Manage topics through the Kafka protocol, against any broker of the cluster.",
	}
	a.addFlags(cmd, environ)
	cmd.AddCommand(
		newTopicCreateCmd(a, stdout),
		newTopicListCmd(a, stdout),
		newTopicDescribeCmd(a, stdout),
		newTopicDeleteCmd(a, stdout),
		newTopicAlterConfigCmd(a, stdout),
		newTopicAddPartitionsCmd(a, stdout),
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
		replicaOf    string
		sourceTopic  string
	)
	cmd := &cobra.Command{
		Use:   "create NAME...",
		Short: "Create topics",
		Example: `  strata topic create orders --partitions 6
  strata topic create audit --config retention.ms=-1 --config cleanup.policy=compact
  strata topic create orders --read-replica-of s3://events-bucket/prod   # serve another cluster's orders, read-only`,
		Args: args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, names []string) error {
			// -1 asks for the broker's default; any other value below 1
			// is a mistake the broker would only report as a comparison
			// with the brokers alive.
			if replication < 1 && replication != -1 {
				return &usageError{err: fmt.Errorf("--replication-factor %d: it must be at least 1 (or -1 for the broker's default)", replication), cmd: cmd.CommandPath()}
			}
			cfgs := make(map[string]*string, len(configs))
			for _, kv := range configs {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return &usageError{err: fmt.Errorf("--config %q: want key=value", kv), cmd: cmd.CommandPath()}
				}
				cfgs[k] = kmsg.StringPtr(v)
			}
			// A read replica is a topic config (docs/operations.md, Read
			// replicas); the flags only spell it.
			if replicaOf != "" {
				cfgs[brokernode.ReadReplicaSourceKey] = kmsg.StringPtr(replicaOf)
			}
			if sourceTopic != "" {
				if replicaOf == "" {
					return &usageError{err: errors.New("--source-topic needs --read-replica-of"), cmd: cmd.CommandPath()}
				}
				cfgs[brokernode.ReadReplicaTopicKey] = kmsg.StringPtr(sourceTopic)
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
	f.StringVar(&replicaOf, "read-replica-of", "", "serve another cluster's topic read-only from its bucket: file:///dir or s3://bucket[/prefix][?endpoint=URL] (partitions: the source's)")
	f.StringVar(&sourceTopic, "source-topic", "", "with --read-replica-of: the topic's name in the source bucket (default: the same name)")
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
	IDHex             string `json:"id_hex"`
	Partitions        int    `json:"partitions"`
	ReplicationFactor int    `json:"replication_factor"`
}

func newTopicListCmd(a *admin, stdout io.Writer) *cobra.Command {
	var asJSON, internal bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List topics",
		Args:    args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				list := adm.ListTopics
				if internal {
					list = adm.ListTopicsWithInternal
				}
				tds, err := list(ctx)
				if err != nil {
					return fmt.Errorf("topic list: %w", err)
				}
				rows := make([]topicSummary, 0, len(tds))
				for _, name := range tds.Names() {
					td := tds[name]
					rows = append(rows, topicSummary{
						Name:              name,
						ID:                topicID(td.ID),
						IDHex:             topicIDHex(td.ID),
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
	cmd.Flags().BoolVar(&internal, "internal", false, "also list internal topics (__consumer_offsets)")
	return cmd
}

// topicDescription is what `topic describe --json` prints per topic.
type topicDescription struct {
	Name              string                 `json:"name"`
	ID                string                 `json:"id"`
	IDHex             string                 `json:"id_hex"`
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
		Use:   "describe NAME|ID...",
		Short: "Show topics' partitions, leaders, replicas, in-sync replicas, ids and configs",
		Long: `Show each topic's id, its partitions with their leader (-1: offline),
leader epoch, replicas, in-sync replicas and offline replicas (on brokers
that are down or fenced), and the configs set on the topic itself
(values inherited from broker defaults are not listed). A topic may be
given by its id, in Kafka's base64 or as the 32 hex digits of bucket keys.`,
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
	if names, err = namesForIDs(ctx, adm, names, tds); err != nil {
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
			IDHex:             topicIDHex(td.ID),
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

// namesForIDs replaces each of names that is no topic's name but reads as
// a topic id, in base64 or hex, with the name of the topic that has that
// id, and adds that topic to tds. A name that exists wins: a 22-character
// base64 id is also a valid topic name.
func namesForIDs(ctx context.Context, adm *kadm.Client, names []string, tds kadm.TopicDetails) ([]string, error) {
	var all kadm.TopicDetails
	out := make([]string, len(names))
	for i, name := range names {
		out[i] = name
		if td, ok := tds[name]; ok && !errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
			continue
		}
		id, err := parseTopicID(name)
		if err != nil {
			continue
		}
		if all == nil {
			if all, err = adm.ListTopicsWithInternal(ctx); err != nil {
				return nil, err
			}
		}
		for n, td := range all {
			if td.Err == nil && td.ID == id {
				out[i] = n
				tds[n] = td
			}
		}
	}
	return out, nil
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
		fmt.Fprint(tw, "PARTITION\tLEADER\tEPOCH\tREPLICAS\tISR\tOFFLINE")
		if withErr {
			fmt.Fprint(tw, "\tERROR")
		}
		fmt.Fprintln(tw)
		for _, p := range d.Partitions {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s", p.Partition, p.Leader, p.LeaderEpoch, ids(p.Replicas), ids(p.ISR), ids(p.OfflineReplicas))
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
				internal := internalTopics(ctx, adm, names, rs)
				return eachName("topic delete", names, rs,
					func(r kadm.DeleteTopicResponse) error {
						if r.Err != nil && internal[r.Topic] {
							// Whatever code the broker chose, the cause is this
							// and the code's description would only mislead.
							return errors.New("internal topic, cannot be deleted")
						}
						return kafkaError(r.Err, r.ErrMessage)
					},
					func(name string, _ kadm.DeleteTopicResponse) { fmt.Fprintf(stdout, "deleted topic %s\n", name) })
			})
		},
	}
}

// internalTopics says which of the topics the broker refused to delete are
// internal ones (__consumer_offsets and the like), as Metadata marks them.
// If Metadata fails, the broker's own error stands.
func internalTopics(ctx context.Context, adm *kadm.Client, names []string, rs kadm.DeleteTopicResponses) map[string]bool {
	var refused []string
	for _, name := range names {
		if r, ok := rs[name]; ok && r.Err != nil {
			refused = append(refused, name)
		}
	}
	internal := make(map[string]bool)
	if len(refused) == 0 {
		return internal
	}
	tds, err := adm.ListTopicsWithInternal(ctx, refused...)
	if err != nil {
		return internal
	}
	for name, td := range tds {
		internal[name] = td.Err == nil && td.IsInternal
	}
	return internal
}

func newTopicAlterConfigCmd(a *admin, stdout io.Writer) *cobra.Command {
	var (
		sets, deletes []string
		validateOnly  bool
	)
	cmd := &cobra.Command{
		Use:   "alter-config NAME... (--set KEY=VALUE | --delete KEY)...",
		Short: "Set or delete configs on topics",
		Long: `Set configs on topics, or delete them so that the broker default applies
again, through IncrementalAlterConfigs: configs not named keep their values.`,
		Example: `  strata topic alter-config orders --set retention.ms=86400000
  strata topic alter-config orders --delete retention.ms`,
		Args: args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, names []string) error {
			var ops []kadm.AlterConfig
			var said []string
			for _, kv := range sets {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return &usageError{err: fmt.Errorf("--set %q: want key=value", kv), cmd: cmd.CommandPath()}
				}
				ops = append(ops, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: kadm.StringPtr(v)})
				said = append(said, "set "+kv)
			}
			for _, k := range deletes {
				if k == "" || strings.Contains(k, "=") {
					return &usageError{err: fmt.Errorf("--delete %q: want a config key", k), cmd: cmd.CommandPath()}
				}
				ops = append(ops, kadm.AlterConfig{Op: kadm.DeleteConfig, Name: k})
				said = append(said, "deleted "+k)
			}
			if len(ops) == 0 {
				return &usageError{err: errors.New("nothing to change: give --set KEY=VALUE or --delete KEY"), cmd: cmd.CommandPath()}
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				alter := adm.AlterTopicConfigs
				verb := "altered"
				if validateOnly {
					alter, verb = adm.ValidateAlterTopicConfigs, "would alter"
				}
				rs, err := alter(ctx, ops, names...)
				if err != nil {
					return fmt.Errorf("topic alter-config: %w", err)
				}
				byName := make(map[string]kadm.AlterConfigsResponse, len(rs))
				for _, r := range rs {
					byName[r.Name] = r
				}
				return eachName("topic alter-config", names, byName,
					func(r kadm.AlterConfigsResponse) error { return kafkaError(r.Err, r.ErrMessage) },
					func(name string, _ kadm.AlterConfigsResponse) {
						fmt.Fprintf(stdout, "%s topic %s: %s\n", verb, name, strings.Join(said, ", "))
					})
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&sets, "set", nil, "config key=value to set (repeatable)")
	f.StringArrayVar(&deletes, "delete", nil, "config key to delete, back to the broker default (repeatable)")
	f.BoolVar(&validateOnly, "validate-only", false, "ask the broker to check the change without making it")
	return cmd
}

func newTopicAddPartitionsCmd(a *admin, stdout io.Writer) *cobra.Command {
	var (
		total        int
		validateOnly bool
	)
	cmd := &cobra.Command{
		Use:   "add-partitions NAME... --partitions N",
		Short: "Raise topics' partition count to N",
		Long: `Raise each topic's partition count to N (CreatePartitions). Partitions can
only be added: records keep their partition, so keys hash differently
from now on.`,
		Example: `  strata topic add-partitions orders --partitions 12`,
		Args:    args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, names []string) error {
			if total < 1 {
				return &usageError{err: errors.New("--partitions: give the new total, at least 1"), cmd: cmd.CommandPath()}
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				update, verb := adm.UpdatePartitions, "topic %s now has %s\n"
				if validateOnly {
					update, verb = adm.ValidateUpdatePartitions, "topic %s would have %s\n"
				}
				rs, err := update(ctx, total, names...)
				if err != nil {
					return fmt.Errorf("topic add-partitions: %w", err)
				}
				return eachName("topic add-partitions", names, rs,
					func(r kadm.CreatePartitionsResponse) error { return kafkaError(r.Err, r.ErrMessage) },
					func(name string, _ kadm.CreatePartitionsResponse) {
						fmt.Fprintf(stdout, verb, name, plural(total, "partition"))
					})
			})
		},
	}
	f := cmd.Flags()
	f.IntVarP(&total, "partitions", "p", 0, "the new total number of partitions")
	f.BoolVar(&validateOnly, "validate-only", false, "ask the broker to check the change without making it")
	return cmd
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
// "TOPIC_ALREADY_EXISTS: topic "orders" already exists". Brokers (Strata's
// among them) often begin their message with the code's own text; it is
// cut so that the line states the cause once.
func kafkaError(err error, brokerMsg string) error {
	var ke *kerr.Error
	if !errors.As(err, &ke) {
		return err
	}
	msg := strings.TrimSpace(brokerMsg)
	for _, said := range []string{ke.Error(), ke.Message, ke.Description} {
		msg = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(msg, said), ":"))
	}
	if msg == "" {
		return err
	}
	return &brokerError{code: ke, msg: msg}
}

// brokerError is a Kafka error code with the broker's explanation.
type brokerError struct {
	code *kerr.Error
	msg  string
}

func (e *brokerError) Error() string { return e.code.Message + ": " + e.msg }
func (e *brokerError) Unwrap() error { return e.code }

// topicID prints a topic id the way Kafka's tools do: URL-safe base64
// without padding. Every verb prints ids this way; bucket keys spell them
// in hex, which --json carries beside (topicIDHex) and every verb taking
// an id accepts (parseTopicID). The zero id (a broker without topic ids)
// prints as "-".
func topicID(id [16]byte) string {
	if id == ([16]byte{}) {
		return "-"
	}
	return base64.RawURLEncoding.EncodeToString(id[:])
}

// topicIDHex is the id as bucket keys spell it: 32 hex digits.
func topicIDHex(id [16]byte) string {
	if id == ([16]byte{}) {
		return "-"
	}
	return hex.EncodeToString(id[:])
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
