package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/broker/extension"
)

// restoreDefaultTimeout is cluster restore's --timeout when none is
// given: a restore of many partitions reads a manifest of each.
const restoreDefaultTimeout = time.Hour

func newClusterRestoreCmd(a *admin, stdout io.Writer) *cobra.Command {
	var (
		topics  []string
		dryRun  bool
		history string
	)
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Restore topics and group offsets from the bucket's newest metadata checkpoint",
		Long: `Restore a cluster's topics from its bucket (docs/operations.md, "Disaster
recovery"): the controller reads the bucket's newest metadata checkpoint and
each partition's newest manifest, and recreates the topics with their ids and
configs; their partitions start at the bucket's end, their history served
from the bucket, and the consumer groups' committed offsets come back with
__consumer_offsets. The cluster must run on the bucket, under the cluster id
the bucket names ('strata serve --restore' adopts it).

The plan is printed first, one line per topic: its id, what is done with it
(create; replace, for an empty internal topic of this cluster; present, when
it is here already; refused), its partitions, bytes and offset range. A topic
that exists here with another id or data, a partition-count mismatch, or a
replication factor above the live brokers refuses the whole restore, one line
per refusal, and nothing changes. --dry-run stops after the plan. Progress is
shown on stderr, topic by topic, then until every partition serves.

Every cluster that ran on the bucket left its own metadata history there. By
default the restore reads the newest checkpoint of the most recently written
history that names a topic of users' own (the running cluster's own set
aside); --history H reads history H's newest instead (its 32 hex digits, or a
prefix of at least 8 that names one). After the plan, a line names each other
history holding topics the checkpoint does not, with the --history that
restores them.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f := cmd.Flag("timeout"); f == nil || !f.Changed {
				a.timeout = restoreDefaultTimeout
			}
			a.opts = append(a.opts, kgo.MaxVersions(extension.ClientVersions()))
			return a.doClient(cmd.Context(), func(ctx context.Context, cl *kgo.Client) error {
				return runRestore(ctx, cl, a, restoreArgs{topics: topics, dryRun: dryRun, history: history}, stdout, cmd.ErrOrStderr())
			})
		},
	}
	cmd.Flags().StringArrayVar(&topics, "topic", nil, "restore only this topic (repeatable); default every topic of the checkpoint")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would be restored, and change nothing")
	cmd.Flags().StringVar(&history, "history", "", "restore from this metadata history's newest checkpoint (32 hex digits, or a unique prefix of at least 8); default the newest history naming a topic")
	return cmd
}

// restoreArgs are cluster restore's flags.
type restoreArgs struct {
	topics  []string
	dryRun  bool
	history string
}

func runRestore(ctx context.Context, cl *kgo.Client, a *admin, ra restoreArgs, stdout, stderr io.Writer) error {
	start := time.Now()
	resp, err := sendRestore(ctx, cl, a, ra.topics, ra.history, true)
	if err != nil {
		return err
	}
	if resp.Plan != nil {
		if ra.history != "" && resp.Plan.History == "" {
			// A broker older than --history ignored it: its plan is of
			// another checkpoint, perhaps.
			return errors.New("the controller does not know --history (a broker older than this strata): upgrade it, or restore without --history")
		}
		printRestorePlan(stdout, resp.Plan)
	}
	if resp.ErrorCode != 0 {
		if resp.Plan != nil {
			// One line, as every failure: the table above has a row per
			// refused topic with its reason too.
			var why []string
			for _, t := range resp.Plan.Topics {
				if t.Action == "refused" {
					why = append(why, t.Name+": "+t.Reason)
				}
			}
			if len(why) > 0 {
				return fmt.Errorf("restore refused, nothing changed: %s", strings.Join(why, "; "))
			}
		}
		return restoreError(resp)
	}
	if ra.dryRun {
		return nil
	}
	// The topics come from the history planned, whatever is written
	// meanwhile.
	history := ra.history
	if resp.Plan.History != "" {
		history = resp.Plan.History
	}
	// One topic per request: the plan above was checked whole, and each
	// answer is a step of progress. A topic restored meanwhile by someone
	// else shows as present in its own plan and is done.
	var todo []extension.RestoreTopic
	for _, t := range resp.Plan.Topics {
		if t.Action == "create" || t.Action == "replace" {
			todo = append(todo, t)
		}
	}
	if len(todo) == 0 {
		fmt.Fprintln(stdout, "nothing to restore: every topic is present")
		return nil
	}
	var partitions int
	var bytes int64
	for i, t := range todo {
		began := time.Now()
		fmt.Fprintf(stderr, "restoring %s (%d/%d): %d partitions, %s\n", t.Name, i+1, len(todo), len(t.Partitions), humanBytes(topicBytes(t)))
		r, err := sendRestore(ctx, cl, a, []string{t.Name}, history, false)
		if err != nil {
			return fmt.Errorf("restore %s (%d of %d topics done): %w", t.Name, i, len(todo), err)
		}
		if r.ErrorCode != 0 {
			return fmt.Errorf("restore %s (%d of %d topics done): %w", t.Name, i, len(todo), restoreError(r))
		}
		partitions += len(t.Partitions)
		bytes += topicBytes(t)
		fmt.Fprintf(stderr, "restored %s in %s\n", t.Name, time.Since(began).Round(time.Millisecond))
	}
	if err := waitServing(ctx, cl, todo, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "restored %d topic(s), %d partition(s), %s from %s in %s\n",
		len(todo), partitions, humanBytes(bytes), resp.Plan.Checkpoint, time.Since(start).Round(time.Millisecond))
	return nil
}

// sendRestore sends StrataRestore to the controller, following it while
// it answers NOT_CONTROLLER (it moved, or the client's metadata is stale).
func sendRestore(ctx context.Context, cl *kgo.Client, a *admin, topics []string, history string, dryRun bool) (*extension.RestoreResponse, error) {
	for {
		left := time.Until(deadlineOr(ctx, time.Now().Add(a.timeout)))
		req := &extension.RestoreRequest{Topics: topics, DryRun: dryRun, History: history, TimeoutMillis: int32(min(max(left, time.Second), 24*time.Hour).Milliseconds())}
		kr, err := cl.Request(ctx, req)
		if err != nil {
			return nil, err
		}
		resp := kr.(*extension.RestoreResponse)
		if resp.ErrorCode != kerr.NotController.Code {
			return resp, nil
		}
		cl.ForceMetadataRefresh()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no controller answered: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func deadlineOr(ctx context.Context, d time.Time) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return d
}

// restoreError is a failed answer as one error.
func restoreError(r *extension.RestoreResponse) error {
	msg := r.ErrorMessage
	if msg == "" {
		msg = kerr.ErrorForCode(r.ErrorCode).Error()
	}
	return errors.New(msg)
}

func topicBytes(t extension.RestoreTopic) int64 {
	var n int64
	for _, p := range t.Partitions {
		n += p.Bytes
	}
	return n
}

// printRestorePlan prints the plan, one line per topic.
func printRestorePlan(w io.Writer, p *extension.RestorePlan) {
	fmt.Fprintf(w, "checkpoint %s (cluster %s, metadata index %d, written %s)\n", p.Checkpoint, p.ClusterID, p.Index, timestamp(p.WrittenMs))
	tw := newTable(w)
	fmt.Fprintln(tw, "TOPIC\tID\tACTION\tPARTITIONS\tBYTES\tOFFSETS\tREASON")
	for _, t := range p.Topics {
		offsets, parts, size := "-", "-", "-"
		if len(t.Partitions) > 0 {
			lo, hi := t.Partitions[0].LogStart, t.Partitions[0].End
			for _, pp := range t.Partitions {
				lo, hi = min(lo, pp.LogStart), max(hi, pp.End)
			}
			offsets = strconv.FormatInt(lo, 10) + ".." + strconv.FormatInt(hi, 10)
			parts = strconv.Itoa(len(t.Partitions))
			size = humanBytes(topicBytes(t))
		}
		id := t.ID
		if id == "" {
			id = "-"
		}
		reason := t.Reason
		if reason == "" {
			reason = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, id, t.Action, parts, size, offsets, reason)
	}
	tw.Flush()
	printOtherHistories(w, p)
}

// printOtherHistories prints a line for each other history of the plan
// that names topics its checkpoint does not, or whose checkpoint could
// not be read: data a restore from this checkpoint leaves in the bucket.
func printOtherHistories(w io.Writer, p *extension.RestorePlan) {
	all := []string{p.History}
	for _, o := range p.OtherHistories {
		all = append(all, o.History)
	}
	for _, o := range p.OtherHistories {
		h := shortHistory(o.History, all)
		switch {
		case o.Error != "":
			fmt.Fprintf(w, "history %s (written %s): its newest checkpoint could not be read: %s\n", h, timestamp(o.WrittenMs), o.Error)
		case len(o.Topics) > 0:
			fmt.Fprintf(w, "history %s (written %s) also names topics not in this checkpoint: %s — restore them with --history %s\n",
				h, timestamp(o.WrittenMs), strings.Join(o.Topics, ", "), strings.TrimSuffix(h, "…"))
		}
	}
}

// shortHistory is h's shortest prefix of at least 8 digits that no other
// history of all starts with, marked "…" when it is shorter than h: what
// --history takes.
func shortHistory(h string, all []string) string {
	for n := 8; n < len(h); n++ {
		if !slices.ContainsFunc(all, func(o string) bool { return o != h && strings.HasPrefix(o, h[:n]) }) {
			return h[:n] + "…"
		}
	}
	return h
}

// waitServing waits until every partition of the restored topics answers
// ListOffsets with an end at or past the bucket's: its leader has opened
// it at the bucket's end, and consumers and producers may use it. It
// shows on stderr how many do, every few seconds.
func waitServing(ctx context.Context, cl *kgo.Client, topics []extension.RestoreTopic, stderr io.Writer) error {
	adm := kadm.NewClient(cl)
	want := map[string]map[int32]int64{}
	names := make([]string, 0, len(topics))
	total := 0
	for _, t := range topics {
		names = append(names, t.Name)
		want[t.Name] = map[int32]int64{}
		for _, p := range t.Partitions {
			want[t.Name][p.Partition] = p.End
			total++
		}
	}
	began, told := time.Now(), time.Now()
	for {
		serving := 0
		ends, err := adm.ListEndOffsets(ctx, names...)
		if err == nil {
			ends.Each(func(o kadm.ListedOffset) {
				if end, ok := want[o.Topic][o.Partition]; ok && o.Err == nil && o.Offset >= end {
					serving++
				}
			})
		}
		if serving == total {
			if time.Since(began) > time.Second {
				fmt.Fprintf(stderr, "all %d partitions serve\n", total)
			}
			return nil
		}
		if time.Since(told) > 5*time.Second {
			fmt.Fprintf(stderr, "%d of %d partitions serve\n", serving, total)
			told = time.Now()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("restored, but %d of %d partitions do not serve yet: %w", total-serving, total, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
