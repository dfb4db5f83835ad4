package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The txn verbs are Kafka's kafka-transactions.sh over the same admin APIs
// (KIP-664): ListTransactions and DescribeTransactions at the coordinators,
// DescribeProducers and WriteTxnMarkers at the partition leaders. They run
// against any broker of the cluster; the client routes each request.

func newTxnCmd(environ []string, stdout io.Writer) *cobra.Command {
	a := &admin{}
	cmd := &cobra.Command{
		Use:   "txn",
		Short: "List and describe transactions, find hanging ones and abort them",
		Long: `Inspect transactions through the Kafka protocol, against any broker of the
cluster: the coordinators' view (list, describe) and the partition leaders'
(find-hanging). A hanging transaction is one left open on a partition with no
coordinator to end it; it holds back every read_committed consumer of the
partition, and abort ends it. See docs/transactions.md.`,
	}
	a.addFlags(cmd, environ)
	cmd.AddCommand(
		newTxnListCmd(a, stdout),
		newTxnDescribeCmd(a, stdout),
		newTxnFindHangingCmd(a, stdout),
		newTxnAbortCmd(a, stdout),
	)
	asGroup(cmd)
	return cmd
}

// txnStates are the coordinator's states as ListTransactions and
// DescribeTransactions spell them (Kafka's TransactionState).
var txnStates = []string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"}

// txnState finds s among txnStates, ignoring case. A coordinator given a
// state it does not know lists nothing, which would pass a misspelt state
// off as "no such transactions".
func txnState(s string) (string, bool) {
	for _, st := range txnStates {
		if strings.EqualFold(s, st) {
			return st, true
		}
	}
	return "", false
}

// txnSummary is one row of `txn list`.
type txnSummary struct {
	TransactionalID string `json:"transactional_id"`
	ProducerID      int64  `json:"producer_id"`
	State           string `json:"state"`
	Coordinator     int32  `json:"coordinator"`
}

func newTxnListCmd(a *admin, stdout io.Writer) *cobra.Command {
	var (
		asJSON      bool
		states      []string
		producerIDs []int64
		minDuration time.Duration
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List transactional ids at every coordinator",
		Long: `List the transactional ids every coordinator of the cluster knows, with their
producer id and state (ListTransactions). --min-duration keeps the
transactions open for longer than it (KIP-994).`,
		Example: `  strata txn list
  strata txn list --state Ongoing --min-duration 10m`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			for i, st := range states {
				canon, ok := txnState(st)
				if !ok {
					return cmd.FlagErrorFunc()(cmd, fmt.Errorf("--state %q: want one of %s", st, strings.Join(txnStates, ", ")))
				}
				states[i] = canon
			}
			if minDuration < 0 {
				return cmd.FlagErrorFunc()(cmd, fmt.Errorf("--min-duration %s: must not be negative", minDuration))
			}
			return a.doClient(cmd.Context(), func(ctx context.Context, cl *kgo.Client) error {
				if err := checkServes(ctx, a.adminClient(cl), kmsg.ListTransactions); err != nil {
					return fmt.Errorf("txn list: %w", err)
				}
				rows, err := listTransactions(ctx, cl, states, producerIDs, minDuration)
				if err != nil && rows == nil {
					return fmt.Errorf("txn list: %w", err)
				}
				if asJSON {
					if werr := writeJSON(stdout, rows); werr != nil {
						return werr
					}
				} else if werr := printTxnList(stdout, rows); werr != nil {
					return werr
				}
				if err != nil {
					return fmt.Errorf("txn list: %w", err)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	f.StringSliceVar(&states, "state", nil, "only transactions in these states ("+strings.Join(txnStates, ", ")+")")
	f.Int64SliceVar(&producerIDs, "producer-id", nil, "only transactions of these producer ids")
	f.DurationVar(&minDuration, "min-duration", 0, "only transactions open for longer than this (0: all)")
	return cmd
}

// listTransactions asks every broker for the transactions it coordinates.
// The request is sent by hand, not through kadm, for its duration filter.
// Rows from the brokers that answered come back even when others failed,
// with an error naming those.
func listTransactions(ctx context.Context, cl *kgo.Client, states []string, producerIDs []int64, minDuration time.Duration) ([]txnSummary, error) {
	req := kmsg.NewPtrListTransactionsRequest()
	req.StateFilters = states
	req.ProducerIDFilters = producerIDs
	req.DurationFilterMillis = -1
	if minDuration > 0 {
		req.DurationFilterMillis = max(minDuration.Milliseconds(), 1) // under 1ms would be "no filter"
	}
	rows := []txnSummary{}
	var failed []string
	var firstErr error
	shards := cl.RequestSharded(ctx, req)
	for _, sh := range shards {
		err := sh.Err
		if err == nil {
			resp := sh.Resp.(*kmsg.ListTransactionsResponse)
			switch {
			case resp.ErrorCode != 0:
				err = kafkaError(kerr.ErrorForCode(resp.ErrorCode), "")
			case minDuration > 0 && resp.Version < 1:
				// The field is not on the wire below v1: the broker
				// would list everything, as if nothing were filtered.
				err = fmt.Errorf("ListTransactions v%d has no duration filter (--min-duration)", resp.Version)
			default:
				for _, t := range resp.TransactionStates {
					rows = append(rows, txnSummary{TransactionalID: t.TransactionalID, ProducerID: t.ProducerID, State: t.TransactionState, Coordinator: sh.Meta.NodeID})
				}
			}
		}
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			failed = append(failed, fmt.Sprintf("broker %d: %v", sh.Meta.NodeID, err))
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].TransactionalID < rows[j].TransactionalID })
	switch {
	case len(failed) == 0:
		return rows, nil
	case len(failed) == len(shards):
		return nil, firstErr
	}
	return rows, fmt.Errorf("%d of %d brokers did not answer, the list lacks their transactions: %s", len(failed), len(shards), strings.Join(failed, "; "))
}

func printTxnList(w io.Writer, rows []txnSummary) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "TRANSACTIONAL ID\tPRODUCER ID\tSTATE\tCOORDINATOR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", r.TransactionalID, r.ProducerID, r.State, r.Coordinator)
	}
	return tw.Flush()
}

// txnDescription is one transactional id in `txn describe`.
type txnDescription struct {
	TransactionalID string `json:"transactional_id"`
	State           string `json:"state"`
	ProducerID      int64  `json:"producer_id"`
	ProducerEpoch   int16  `json:"producer_epoch"`
	TimeoutMillis   int32  `json:"timeout_ms"`
	// StartTime is when the open transaction began, in Unix
	// milliseconds; -1 when none is open.
	StartTime   int64          `json:"start_time_ms"`
	Coordinator int32          `json:"coordinator"`
	Partitions  []txnPartition `json:"partitions"`
}

type txnPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

func newTxnDescribeCmd(a *admin, stdout io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "describe ID...",
		Short: "Show transactional ids' state, producer, timeout and partitions",
		Long: `Show what the coordinator of each transactional id holds
(DescribeTransactions): its state, producer id and epoch, transaction
timeout, when the open transaction started, and the partitions in it (while
a commit or abort is being written, those still without their marker).`,
		Example: `  strata txn describe payments-1`,
		Args:    args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, ids []string) error {
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				if err := checkServes(ctx, adm, kmsg.DescribeTransactions); err != nil {
					return fmt.Errorf("txn describe: %w", err)
				}
				// Ids whose coordinator could not be asked are missing from
				// ds and reported as such, after the others are printed.
				ds, err := adm.DescribeTransactions(ctx, ids...)
				if err != nil && len(ds) == 0 {
					return fmt.Errorf("txn describe: %w", kafkaError(err, ""))
				}
				var descs []txnDescription
				failed := eachName("txn describe", ids, ds,
					func(d kadm.DescribedTransaction) error { return kafkaError(d.Err, "") },
					func(_ string, d kadm.DescribedTransaction) { descs = append(descs, describedTxn(d)) })
				if asJSON {
					if err := writeJSON(stdout, descs); err != nil {
						return err
					}
				} else if err := printTxnDescriptions(stdout, descs, time.Now()); err != nil {
					return err
				}
				if failed != nil && err != nil {
					return fmt.Errorf("%w (%v)", failed, kafkaError(err, ""))
				}
				return failed
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}

func describedTxn(d kadm.DescribedTransaction) txnDescription {
	out := txnDescription{
		TransactionalID: d.TxnID, State: d.State, ProducerID: d.ProducerID, ProducerEpoch: d.ProducerEpoch,
		TimeoutMillis: d.TimeoutMillis, StartTime: d.StartTimestamp, Coordinator: d.Coordinator,
		Partitions: []txnPartition{},
	}
	for _, tp := range d.Topics.Sorted() {
		for _, p := range tp.Partitions {
			out.Partitions = append(out.Partitions, txnPartition{Topic: tp.Topic, Partition: p})
		}
	}
	return out
}

func printTxnDescriptions(w io.Writer, descs []txnDescription, now time.Time) error {
	for i, d := range descs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		started := "no transaction open"
		if d.StartTime >= 0 {
			started = fmt.Sprintf("started %s (%s ago)", timestamp(d.StartTime), age(now, d.StartTime))
		}
		fmt.Fprintf(w, "transactional id %s: %s, producer id %d epoch %d, timeout %s, %s, coordinator %d\n",
			d.TransactionalID, d.State, d.ProducerID, d.ProducerEpoch, time.Duration(d.TimeoutMillis)*time.Millisecond, started, d.Coordinator)
		if len(d.Partitions) == 0 {
			continue
		}
		tw := newTable(w)
		fmt.Fprintln(tw, "TOPIC\tPARTITION")
		for _, p := range d.Partitions {
			fmt.Fprintf(tw, "%s\t%d\n", p.Topic, p.Partition)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// age is how long before now the Unix millisecond ms was, to the second.
func age(now time.Time, ms int64) time.Duration {
	return max(now.Sub(time.UnixMilli(ms)), 0).Round(time.Second)
}

// hangingTxn is one row of `txn find-hanging`: a transaction open on a
// partition, as its leader sees it, and why it is taken for hanging.
type hangingTxn struct {
	Topic            string `json:"topic"`
	Partition        int32  `json:"partition"`
	ProducerID       int64  `json:"producer_id"`
	ProducerEpoch    int16  `json:"producer_epoch"`
	CoordinatorEpoch int32  `json:"coordinator_epoch"` // of the producer's last marker; -1: none yet
	StartOffset      int64  `json:"start_offset"`
	LastTimestamp    int64  `json:"last_timestamp_ms"` // the producer's last write, Unix milliseconds
	TransactionalID  string `json:"transactional_id,omitempty"`
	Reason           string `json:"reason"`
}

func newTxnFindHangingCmd(a *admin, stdout io.Writer) *cobra.Command {
	var (
		asJSON     bool
		topic      string
		partition  int32
		maxTimeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "find-hanging",
		Short: "Find transactions left open on partitions with no coordinator to end them",
		Long: `Find hanging transactions, as Kafka's kafka-transactions.sh find-hanging does:
ask the leader of every partition (or of --topic's, or of one --partition)
which producers have a transaction open there (DescribeProducers), keep
those whose last write is older than --max-transaction-timeout, and ask
their coordinators about them (ListTransactions, DescribeTransactions). A
transaction is hanging when no coordinator has its producer id, or its
coordinator's transaction does not include the partition. One the
coordinator still holds as Ongoing past --max-transaction-timeout is reported
too: no transaction may run that long, so its coordinator has failed to
abort it.

--max-transaction-timeout should be the brokers' transaction.max.timeout.ms
(transactions.max_timeout, 15m by default): no healthy transaction is open
longer. Abort what this finds with 'strata txn abort'.`,
		Example: `  strata txn find-hanging
  strata txn find-hanging --topic payments --partition 3 --max-transaction-timeout 1h`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("partition") && topic == "" {
				return cmd.FlagErrorFunc()(cmd, fmt.Errorf("--partition %d needs --topic", partition))
			}
			if partition < 0 {
				return cmd.FlagErrorFunc()(cmd, fmt.Errorf("--partition %d: not a partition number", partition))
			}
			if maxTimeout <= 0 {
				return cmd.FlagErrorFunc()(cmd, fmt.Errorf("--max-transaction-timeout %s: must be positive", maxTimeout))
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				fail := func(what string, err error) error { return fmt.Errorf("txn find-hanging: %s%w", what, err) }
				if err := checkServes(ctx, adm, kmsg.DescribeProducers); err != nil {
					return fail("", err)
				}
				set, err := partitionsToSearch(ctx, adm, topic, partition, cmd.Flags().Changed("partition"))
				if err != nil {
					return fail("", err)
				}
				dps, err := adm.DescribeProducers(ctx, set)
				if err != nil {
					return fail("describe producers: ", kafkaError(err, ""))
				}
				var partErrs []string
				var producers []kadm.DescribedProducer
				for _, dp := range dps.SortedPartitions() {
					if dp.Err != nil {
						partErrs = append(partErrs, fmt.Sprintf("%s-%d: %v", dp.Topic, dp.Partition, kafkaError(dp.Err, dp.ErrMessage)))
						continue
					}
					producers = append(producers, dp.ActiveProducers.Sorted()...)
				}
				now := time.Now()
				open := openTransactions(now, maxTimeout, producers)
				ids, descs, err := coordinatorView(ctx, adm, open)
				if err != nil {
					return fail("", err)
				}
				hanging := findHanging(now, maxTimeout, open, ids, descs)
				if asJSON {
					if err := writeJSON(stdout, hanging); err != nil {
						return err
					}
				} else if err := printHanging(stdout, hanging, now); err != nil {
					return err
				}
				if len(partErrs) > 0 {
					return fail("", fmt.Errorf("%s not searched: %s", plural(len(partErrs), "partition"), strings.Join(partErrs, "; ")))
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	f.StringVar(&topic, "topic", "", "only this topic's partitions")
	f.Int32Var(&partition, "partition", 0, "only this partition of --topic")
	f.DurationVar(&maxTimeout, "max-transaction-timeout", 15*time.Minute, "the brokers' transaction.max.timeout.ms: transactions whose last write is older are looked at")
	return cmd
}

// partitionsToSearch is every partition of the cluster, internal topics
// included (transactional offset commits open transactions in
// __consumer_offsets), or of topic, or the one partition.
func partitionsToSearch(ctx context.Context, adm *kadm.Client, topic string, partition int32, onePartition bool) (kadm.TopicsSet, error) {
	var topics []string
	if topic != "" {
		topics = []string{topic}
	}
	tds, err := adm.ListTopicsWithInternal(ctx, topics...)
	if err != nil {
		return nil, kafkaError(err, "")
	}
	if topic != "" {
		td, ok := tds[topic]
		switch {
		case !ok:
			return nil, fmt.Errorf("topic %s: %w", topic, kerr.UnknownTopicOrPartition)
		case td.Err != nil:
			return nil, fmt.Errorf("topic %s: %w", topic, kafkaError(td.Err, ""))
		}
		if onePartition {
			if _, ok := td.Partitions[partition]; !ok {
				return nil, fmt.Errorf("topic %s has no partition %d (it has %s)", topic, partition, plural(len(td.Partitions), "partition"))
			}
			set := kadm.TopicsSet{}
			set.Add(topic, partition)
			return set, nil
		}
	}
	set := kadm.TopicsSet{}
	for t, td := range tds {
		if td.Err == nil {
			set.Add(t, td.Partitions.Numbers()...)
		}
	}
	return set, nil
}

// openTransactions keeps the producers with a transaction open on their
// partition whose last write is more than maxTimeout before now: Kafka's
// candidates. A younger one may simply be in progress.
func openTransactions(now time.Time, maxTimeout time.Duration, producers []kadm.DescribedProducer) []kadm.DescribedProducer {
	var open []kadm.DescribedProducer
	for _, p := range producers {
		if p.CurrentTxnStartOffset < 0 {
			continue
		}
		if now.Sub(time.UnixMilli(p.LastTimestamp)) > maxTimeout {
			open = append(open, p)
		}
	}
	return open
}

// coordinatorView asks the coordinators which transactional id each open
// transaction's producer id belongs to, and what they hold for those ids.
// An id its coordinator does not know maps to no description.
func coordinatorView(ctx context.Context, adm *kadm.Client, open []kadm.DescribedProducer) (map[int64]string, map[string]kadm.DescribedTransaction, error) {
	ids := map[int64]string{}
	descs := map[string]kadm.DescribedTransaction{}
	if len(open) == 0 {
		return ids, descs, nil
	}
	want := map[int64]bool{}
	var pids []int64
	for _, p := range open {
		if !want[p.ProducerID] {
			want[p.ProducerID] = true
			pids = append(pids, p.ProducerID)
		}
	}
	listed, err := adm.ListTransactions(ctx, pids, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("list transactions: %w", kafkaError(err, ""))
	}
	var txnIDs []string
	for _, l := range listed.Sorted() {
		// A broker that ignores the filter lists everyone: keep ours.
		if want[l.ProducerID] {
			ids[l.ProducerID] = l.TxnID
			txnIDs = append(txnIDs, l.TxnID)
		}
	}
	if len(txnIDs) == 0 {
		return ids, descs, nil
	}
	ds, err := adm.DescribeTransactions(ctx, txnIDs...)
	if err != nil {
		return nil, nil, fmt.Errorf("describe transactions: %w", kafkaError(err, ""))
	}
	for id, d := range ds {
		switch {
		case errors.Is(d.Err, kerr.TransactionalIDNotFound):
		case d.Err != nil:
			return nil, nil, fmt.Errorf("describe transaction %s: %w", id, kafkaError(d.Err, ""))
		default:
			descs[id] = d
		}
	}
	return ids, descs, nil
}

// findHanging applies Kafka's find-hanging rule to the open transactions:
// one is hanging when no coordinator has its producer id, or the
// coordinator does not know the transactional id, or the coordinator's
// transaction lacks the partition (while it is Ongoing, and while it
// writes markers, it lists every partition still to get one). Beyond
// Kafka, one its coordinator holds Ongoing for longer than maxTimeout is
// hanging too: a coordinator aborts every transaction at its timeout, at
// most maxTimeout, so this one's abort is not happening.
func findHanging(now time.Time, maxTimeout time.Duration, open []kadm.DescribedProducer, ids map[int64]string, descs map[string]kadm.DescribedTransaction) []hangingTxn {
	hanging := []hangingTxn{}
	for _, p := range open {
		h := hangingTxn{
			Topic: p.Topic, Partition: p.Partition, ProducerID: p.ProducerID, ProducerEpoch: p.ProducerEpoch,
			CoordinatorEpoch: p.CoordinatorEpoch, StartOffset: p.CurrentTxnStartOffset, LastTimestamp: p.LastTimestamp,
		}
		id, known := ids[p.ProducerID]
		h.TransactionalID = id
		d, described := descs[id]
		switch {
		case !known:
			h.Reason = "no coordinator has this producer id"
		case !described:
			h.Reason = "its coordinator does not know transactional id " + id
		case d.ProducerID != p.ProducerID:
			h.Reason = fmt.Sprintf("transactional id %s has moved on to producer id %d", id, d.ProducerID)
		case !d.Topics.Lookup(p.Topic, p.Partition):
			h.Reason = fmt.Sprintf("the coordinator's transaction (%s) does not include this partition", d.State)
		case d.State == "Ongoing" && d.StartTimestamp >= 0 && now.Sub(time.UnixMilli(d.StartTimestamp)) > maxTimeout:
			h.Reason = fmt.Sprintf("Ongoing at its coordinator for %s, beyond --max-transaction-timeout %s", age(now, d.StartTimestamp), maxTimeout)
		default:
			continue
		}
		hanging = append(hanging, h)
	}
	return hanging
}

func printHanging(w io.Writer, hanging []hangingTxn, now time.Time) error {
	if len(hanging) == 0 {
		_, err := fmt.Fprintln(w, "no hanging transactions")
		return err
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tSTART OFFSET\tPRODUCER ID\tEPOCH\tCOORDINATOR EPOCH\tLAST WRITE\tTRANSACTIONAL ID\tREASON")
	for _, h := range hanging {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s ago\t%s\t%s\n", h.Topic, h.Partition, h.StartOffset, h.ProducerID, h.ProducerEpoch,
			h.CoordinatorEpoch, age(now, h.LastTimestamp), orDash(h.TransactionalID), h.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	h := hanging[0]
	_, err := fmt.Fprintf(w, "abort one with: strata txn abort --topic %s --partition %d --start-offset %d\n", h.Topic, h.Partition, h.StartOffset)
	return err
}

// abortSpec is the transaction `txn abort` ends, and its result in --json.
type abortSpec struct {
	Topic            string `json:"topic"`
	Partition        int32  `json:"partition"`
	ProducerID       int64  `json:"producer_id"`
	ProducerEpoch    int16  `json:"producer_epoch"`
	CoordinatorEpoch int32  `json:"coordinator_epoch"`
	StartOffset      int64  `json:"start_offset"` // -1: not looked up (given by producer id)
}

func newTxnAbortCmd(a *admin, stdout io.Writer) *cobra.Command {
	var (
		asJSON bool
		spec   abortSpec
	)
	cmd := &cobra.Command{
		Use:   "abort --topic T --partition P (--start-offset N | --producer-id ID --producer-epoch E --coordinator-epoch C)",
		Short: "Abort a hanging transaction on one partition",
		Long: `Write an abort marker for a transaction open on one partition (WriteTxnMarkers
to the partition's leader), as Kafka's kafka-transactions.sh abort does. The
records the transaction wrote there become aborted, and the partition's
last stable offset moves past them so read_committed consumers go on.

Name the transaction by the offset it starts at, as find-hanging prints it
(the producer is then looked up with DescribeProducers), or by its producer
id and epoch and the coordinator epoch of its last marker (a coordinator
epoch below 0, "none yet", is sent as 0).

Only the one partition is touched, and the coordinator is not told: abort
what find-hanging reports, which no coordinator will end. Aborting a
transaction its coordinator still runs breaks its atomicity.`,
		Example: `  strata txn abort --topic payments --partition 3 --start-offset 1200
  strata txn abort --topic payments --partition 3 --producer-id 4001 --producer-epoch 2 --coordinator-epoch 0`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkAbortFlags(cmd, &spec); err != nil {
				return cmd.FlagErrorFunc()(cmd, err)
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				where := fmt.Sprintf("%s-%d", spec.Topic, spec.Partition)
				fail := func(err error) error { return fmt.Errorf("txn abort %s: %w", where, err) }
				if err := checkServes(ctx, adm, kmsg.WriteTxnMarkers); err != nil {
					return fail(err)
				}
				if spec.StartOffset >= 0 {
					if err := lookUpProducer(ctx, adm, &spec); err != nil {
						return fail(err)
					}
				}
				// A producer with no marker yet on the partition shows
				// coordinator epoch -1; 0 is at most any real one, so the
				// leader cannot take the marker for a stale coordinator's.
				spec.CoordinatorEpoch = max(spec.CoordinatorEpoch, 0)
				m := kadm.TxnMarkers{
					ProducerID: spec.ProducerID, ProducerEpoch: spec.ProducerEpoch,
					CoordinatorEpoch: spec.CoordinatorEpoch,
					Topics:           kadm.TopicsSet{},
				}
				m.Topics.Add(spec.Topic, spec.Partition)
				rs, err := adm.WriteTxnMarkers(ctx, m)
				if err != nil {
					return fail(kafkaError(err, ""))
				}
				r, ok := rs[spec.ProducerID].Topics[spec.Topic].Partitions[spec.Partition]
				switch {
				case !ok:
					return fail(errors.New("missing from the broker's response"))
				case r.Err != nil:
					return fail(kafkaError(r.Err, ""))
				}
				if asJSON {
					return writeJSON(stdout, spec)
				}
				from := ""
				if spec.StartOffset >= 0 {
					from = fmt.Sprintf(" started at offset %d", spec.StartOffset)
				}
				_, err = fmt.Fprintf(stdout, "aborted the transaction of producer id %d epoch %d on %s%s\n", spec.ProducerID, spec.ProducerEpoch, where, from)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the aborted transaction as JSON")
	f.StringVar(&spec.Topic, "topic", "", "the partition's topic (required)")
	f.Int32Var(&spec.Partition, "partition", 0, "the partition (required)")
	f.Int64Var(&spec.StartOffset, "start-offset", -1, "the offset the transaction starts at on the partition")
	f.Int64Var(&spec.ProducerID, "producer-id", -1, "the transaction's producer id (with --producer-epoch and --coordinator-epoch)")
	f.Int16Var(&spec.ProducerEpoch, "producer-epoch", -1, "the transaction's producer epoch")
	f.Int32Var(&spec.CoordinatorEpoch, "coordinator-epoch", -1, "the coordinator epoch of the producer's last marker on the partition")
	return cmd
}

// checkAbortFlags checks that abort names one partition and one
// transaction, by its start offset or by its producer.
func checkAbortFlags(cmd *cobra.Command, spec *abortSpec) error {
	changed := cmd.Flags().Changed
	byOffset := changed("start-offset")
	byProducer := changed("producer-id") || changed("producer-epoch") || changed("coordinator-epoch")
	switch {
	case spec.Topic == "" || !changed("partition"):
		return errors.New("--topic and --partition are required")
	case spec.Partition < 0:
		return fmt.Errorf("--partition %d: not a partition number", spec.Partition)
	case byOffset && byProducer:
		return errors.New("--start-offset cannot be combined with --producer-id, --producer-epoch or --coordinator-epoch")
	case !byOffset && !byProducer:
		return errors.New("name the transaction with --start-offset, or with --producer-id, --producer-epoch and --coordinator-epoch")
	case byOffset && spec.StartOffset < 0:
		return fmt.Errorf("--start-offset %d: not an offset", spec.StartOffset)
	case byProducer && !(changed("producer-id") && changed("producer-epoch") && changed("coordinator-epoch")):
		return errors.New("--producer-id, --producer-epoch and --coordinator-epoch go together: give all three")
	case byProducer && (spec.ProducerID < 0 || spec.ProducerEpoch < 0):
		return fmt.Errorf("--producer-id %d --producer-epoch %d: neither may be negative", spec.ProducerID, spec.ProducerEpoch)
	}
	return nil
}

// lookUpProducer finds, with DescribeProducers, the producer whose open
// transaction on the partition starts at spec.StartOffset.
func lookUpProducer(ctx context.Context, adm *kadm.Client, spec *abortSpec) error {
	set := kadm.TopicsSet{}
	set.Add(spec.Topic, spec.Partition)
	dps, err := adm.DescribeProducers(ctx, set)
	if err != nil {
		return fmt.Errorf("describe producers: %w", kafkaError(err, ""))
	}
	dp, ok := dps[spec.Topic].Partitions[spec.Partition]
	switch {
	case !ok:
		return errors.New("describe producers: missing from the broker's response")
	case dp.Err != nil:
		return fmt.Errorf("describe producers: %w", kafkaError(dp.Err, dp.ErrMessage))
	}
	var starts []int64
	for _, p := range dp.ActiveProducers.Sorted() {
		if p.CurrentTxnStartOffset < 0 {
			continue
		}
		if p.CurrentTxnStartOffset == spec.StartOffset {
			spec.ProducerID, spec.ProducerEpoch, spec.CoordinatorEpoch = p.ProducerID, p.ProducerEpoch, p.CoordinatorEpoch
			return nil
		}
		starts = append(starts, p.CurrentTxnStartOffset)
	}
	if len(starts) == 0 {
		return fmt.Errorf("no transaction starting at offset %d is open (none is open there)", spec.StartOffset)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	s := make([]string, len(starts))
	for i, o := range starts {
		s[i] = strconv.FormatInt(o, 10)
	}
	return fmt.Errorf("no transaction starting at offset %d is open (open ones start at %s)", spec.StartOffset, strings.Join(s, ", "))
}
