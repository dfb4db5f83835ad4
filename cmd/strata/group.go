package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

func newGroupCmd(environ []string, stdout io.Writer) *cobra.Command {
	a := &admin{}
	cmd := &cobra.Command{
		Use:   "group",
		Short: "List, describe and delete consumer groups, and reset their offsets",
		Long:  "Manage consumer groups through the Kafka protocol, against any broker of the cluster.",
	}
	a.addFlags(cmd, environ)
	cmd.AddCommand(
		newGroupListCmd(a, stdout),
		newGroupDescribeCmd(a, stdout),
		newGroupDeleteCmd(a, stdout),
		newGroupResetCmd(a, stdout),
		newGroupDeleteOffsetsCmd(a, stdout),
	)
	asGroup(cmd)
	return cmd
}

type groupSummary struct {
	Group        string `json:"group"`
	State        string `json:"state"`
	ProtocolType string `json:"protocol_type"`
	Coordinator  int32  `json:"coordinator"`
}

func newGroupListCmd(a *admin, stdout io.Writer) *cobra.Command {
	var (
		asJSON bool
		states []string
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List consumer groups",
		Args:    args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			for i, st := range states {
				canon, ok := groupState(st)
				if !ok {
					return &usageError{err: fmt.Errorf("--state %q: want one of %s", st, strings.Join(groupStates, ", ")), cmd: cmd.CommandPath()}
				}
				states[i] = canon
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				ls, err := adm.ListGroups(ctx, states...)
				if err != nil {
					return fmt.Errorf("group list: %w", err)
				}
				rows := []groupSummary{}
				for _, g := range ls.Sorted() {
					rows = append(rows, groupSummary{Group: g.Group, State: g.State, ProtocolType: g.ProtocolType, Coordinator: g.Coordinator})
				}
				if asJSON {
					return writeJSON(stdout, rows)
				}
				tw := newTable(stdout)
				fmt.Fprintln(tw, "GROUP\tSTATE\tPROTOCOL TYPE\tCOORDINATOR")
				for _, r := range rows {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", r.Group, r.State, r.ProtocolType, r.Coordinator)
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	cmd.Flags().StringSliceVar(&states, "state", nil, "only groups in these states ("+strings.Join(groupStates, ", ")+")")
	return cmd
}

// groupStates are the states ListGroups filters on (KIP-518), as Kafka
// spells them; Assigning and Reconciling belong to KIP-848 groups.
var groupStates = []string{"Empty", "Stable", "PreparingRebalance", "CompletingRebalance", "Dead", "Assigning", "Reconciling"}

// groupState finds s among groupStates, ignoring case as Kafka's tool does.
// A broker given a state it does not know lists nothing, which would pass
// a misspelt state off as "no such groups".
func groupState(s string) (string, bool) {
	for _, st := range groupStates {
		if strings.EqualFold(s, st) {
			return st, true
		}
	}
	return "", false
}

// groupPartition is one row of `group describe`.
type groupPartition struct {
	Topic      string `json:"topic"`
	Partition  int32  `json:"partition"`
	Committed  int64  `json:"committed"` // -1: nothing committed
	End        int64  `json:"end"`
	Lag        *int64 `json:"lag"` // nil: nothing committed, so no lag to speak of
	MemberID   string `json:"member_id,omitempty"`
	InstanceID string `json:"instance_id,omitempty"`
	ClientID   string `json:"client_id,omitempty"`
	Host       string `json:"host,omitempty"`
	Error      string `json:"error,omitempty"`
}

type groupDescription struct {
	Group        string           `json:"group"`
	State        string           `json:"state"`
	ProtocolType string           `json:"protocol_type"`
	Protocol     string           `json:"protocol"`
	Coordinator  int32            `json:"coordinator"`
	Members      int              `json:"members"`
	TotalLag     int64            `json:"total_lag"` // over partitions with a commit
	Partitions   []groupPartition `json:"partitions"`
}

func newGroupDescribeCmd(a *admin, stdout io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "describe GROUP...",
		Short: "Show groups' state, members, assignments, committed offsets and lag",
		Long: `Show each group's state and protocol, and for every partition it is assigned
or has committed: the committed offset, the log end offset, the lag between
them, and the member that consumes it.`,
		Args: args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, groups []string) error {
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				lags, err := adm.Lag(ctx, groups...)
				if err != nil {
					return fmt.Errorf("group describe: %w", err)
				}
				var descs []groupDescription
				failed := eachName("group describe", groups, lags, func(l kadm.DescribedGroupLag) error {
					if err := l.Error(); err != nil {
						return kafkaError(err, "")
					}
					if l.State == "Dead" {
						return kerr.GroupIDNotFound
					}
					return nil
				}, func(g string, l kadm.DescribedGroupLag) {
					d := groupDescription{
						Group: g, State: l.State, ProtocolType: l.ProtocolType, Protocol: l.Protocol,
						Coordinator: l.Coordinator.NodeID, Members: len(l.Members),
						Partitions: []groupPartition{},
					}
					for _, pl := range l.Lag.Sorted() {
						gp := groupPartition{Topic: pl.Topic, Partition: pl.Partition, Committed: pl.Commit.At, End: pl.End.Offset}
						// A partition assigned but never committed has no lag
						// (kadm would count its whole log), as in Kafka's tool and
						// the strata_consumer_group_lag metric.
						if pl.Commit.At >= 0 && pl.Err == nil {
							lag := pl.Lag
							gp.Lag = &lag
							d.TotalLag += lag
						}
						if pl.Member != nil {
							gp.MemberID, gp.ClientID, gp.Host = pl.Member.MemberID, pl.Member.ClientID, pl.Member.ClientHost
							if pl.Member.InstanceID != nil {
								gp.InstanceID = *pl.Member.InstanceID
							}
						}
						if pl.Err != nil {
							gp.Error = kafkaError(pl.Err, "").Error()
						}
						d.Partitions = append(d.Partitions, gp)
					}
					descs = append(descs, d)
				})
				if asJSON {
					if err := writeJSON(stdout, descs); err != nil {
						return err
					}
					return failed
				}
				for i, d := range descs {
					if i > 0 {
						fmt.Fprintln(stdout)
					}
					fmt.Fprintf(stdout, "group %s: %s, protocol %s/%s, %s, coordinator %d, total lag %d\n",
						d.Group, d.State, orDash(d.ProtocolType), orDash(d.Protocol), plural(d.Members, "member"), d.Coordinator, d.TotalLag)
					tw := newTable(stdout)
					fmt.Fprintln(tw, "TOPIC\tPARTITION\tCOMMITTED\tEND\tLAG\tMEMBER\tCLIENT\tHOST")
					for _, p := range d.Partitions {
						committed := strconv.FormatInt(p.Committed, 10)
						if p.Committed < 0 {
							committed = "-"
						}
						fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", p.Topic, p.Partition, committed, p.End, optOffset(p.Lag),
							orDash(memberName(p)), orDash(p.ClientID), orDash(p.Host))
					}
					if err := tw.Flush(); err != nil {
						return err
					}
				}
				return failed
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}

func memberName(p groupPartition) string {
	if p.InstanceID != "" {
		return p.MemberID + " (" + p.InstanceID + ")"
	}
	return p.MemberID
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newGroupDeleteCmd(a *admin, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "delete GROUP...",
		Short: "Delete empty groups and their committed offsets",
		Args:  args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, groups []string) error {
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				rs, err := adm.DeleteGroups(ctx, groups...)
				if err != nil {
					return fmt.Errorf("group delete: %w", err)
				}
				return eachName("group delete", groups, rs,
					func(r kadm.DeleteGroupResponse) error { return kafkaError(r.Err, "") },
					func(g string, _ kadm.DeleteGroupResponse) { fmt.Fprintf(stdout, "deleted group %s\n", g) })
			})
		},
	}
}

// partitionSelection is what --topic names: whole topics (nil) or some of
// their partitions ("orders:0,2").
type partitionSelection map[string][]int32

func parseSelection(specs []string) (partitionSelection, error) {
	sel := partitionSelection{}
	for _, spec := range specs {
		topic, ps, hasParts := strings.Cut(spec, ":")
		if topic == "" {
			return nil, fmt.Errorf("--topic %q: want TOPIC or TOPIC:PARTITION,...", spec)
		}
		if !hasParts {
			sel[topic] = nil
			continue
		}
		if cur, ok := sel[topic]; ok && cur == nil {
			continue // the whole topic is selected already
		}
		for _, f := range strings.Split(ps, ",") {
			p, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
			if err != nil || p < 0 {
				return nil, fmt.Errorf("--topic %q: %q is not a partition number", spec, f)
			}
			sel[topic] = append(sel[topic], int32(p))
		}
	}
	return sel, nil
}

// resolve lists the selected partitions, checking every topic and
// partition named exists.
func (sel partitionSelection) resolve(ctx context.Context, adm *kadm.Client) (kadm.TopicsSet, error) {
	topics := make([]string, 0, len(sel))
	for t := range sel {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	tds, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, err
	}
	set := kadm.TopicsSet{}
	for _, t := range topics {
		td, ok := tds[t]
		switch {
		case !ok:
			return nil, fmt.Errorf("topic %s: %w", t, kerr.UnknownTopicOrPartition)
		case td.Err != nil:
			return nil, fmt.Errorf("topic %s: %w", t, kafkaError(td.Err, ""))
		}
		ps := sel[t]
		if ps == nil {
			ps = td.Partitions.Numbers()
		}
		for _, p := range ps {
			if _, ok := td.Partitions[p]; !ok {
				return nil, fmt.Errorf("topic %s has no partition %d (it has %s)", t, p, plural(len(td.Partitions), "partition"))
			}
			set.Add(t, p)
		}
	}
	return set, nil
}

// resetTarget is the one choice of reset-offsets saying where to move.
type resetTarget struct {
	earliest, latest bool
	datetime         string
	duration         string
	shiftBy          int64
	offset           int64
	shift, toOffset  bool // --shift-by, --to-offset given
}

func newGroupResetCmd(a *admin, stdout io.Writer) *cobra.Command {
	var (
		specs     []string
		allTopics bool
		to        resetTarget
		execute   bool
		dryRun    bool
		export    bool
	)
	cmd := &cobra.Command{
		Use:   "reset-offsets GROUP (--topic TOPIC[:P,...]... | --all-topics) (--to-earliest | --to-latest | --to-datetime TIME | --by-duration D | --shift-by N | --to-offset N) [--execute] [--export]",
		Short: "Move a group's committed offsets (dry run unless --execute)",
		Long: `Compute new committed offsets for the selected partitions and, with
--execute, commit them, with the choices of Kafka's kafka-consumer-groups.sh:

  --to-earliest        each partition's log start offset
  --to-latest          each partition's end offset
  --to-datetime TIME   the first offset at or after TIME (RFC 3339; without a
                       zone, local time), the end offset if there is none
  --by-duration D      as --to-datetime, D before now (ISO 8601 PnDTnHnMnS,
                       or a Go duration such as 36h)
  --shift-by N         the committed offset plus N (negative: back); every
                       selected partition needs a committed offset
  --to-offset N        offset N

A new offset is always clamped into the partition's range (log start to
end). --topic takes a topic, or a topic and some partitions (orders:0,2);
--all-topics takes every partition the group has committed offsets for. The
group must have no members: stop its consumers first. Without --execute
nothing changes; the plan is printed. --export prints the plan as CSV
(topic,partition,offset), the format of Kafka's --export.`,
		Example: `  strata group reset-offsets billing --topic orders --to-earliest
  strata group reset-offsets billing --topic orders:0,1 --shift-by -100 --execute
  strata group reset-offsets billing --all-topics --by-duration P1DT12H --export > plan.csv
  strata group reset-offsets billing --topic orders --to-datetime 2026-01-02T15:04:05Z --execute`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			group := argv[0]
			usage := func(err error) error { return &usageError{err: err, cmd: cmd.CommandPath()} }
			to.shift, to.toOffset = cmd.Flags().Changed("shift-by"), cmd.Flags().Changed("to-offset")
			chosen := 0
			for _, set := range []bool{to.earliest, to.latest, to.datetime != "", to.duration != "", to.shift, to.toOffset} {
				if set {
					chosen++
				}
			}
			if chosen != 1 {
				return usage(errors.New("give exactly one of --to-earliest, --to-latest, --to-datetime, --by-duration, --shift-by, --to-offset"))
			}
			if (len(specs) == 0) == !allTopics {
				return usage(errors.New("give --topic (repeatable) or --all-topics"))
			}
			if execute && dryRun {
				return usage(errors.New("--execute and --dry-run contradict each other"))
			}
			sel, err := parseSelection(specs)
			if err != nil {
				return usage(err)
			}
			var at time.Time
			switch {
			case to.datetime != "":
				if at, err = parseDatetime(to.datetime); err != nil {
					return usage(fmt.Errorf("--to-datetime %q: want RFC 3339, e.g. 2026-01-02T15:04:05Z", to.datetime))
				}
			case to.duration != "":
				d, err := parseDuration(to.duration)
				if err != nil {
					return usage(fmt.Errorf("--by-duration %q: want ISO 8601 (P1DT12H) or a Go duration (36h)", to.duration))
				}
				at = time.Now().Add(-d)
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				fail := func(what string, err error) error {
					return fmt.Errorf("group reset-offsets %s: %s%w", group, what, err)
				}
				dgs, err := adm.DescribeGroups(ctx, group)
				if err != nil {
					return fail("", err)
				}
				if dg, ok := dgs[group]; ok && dg.Err == nil && len(dg.Members) > 0 {
					return fail("", fmt.Errorf("the group has %s (state %s); stop its consumers first", plural(len(dg.Members), "active member"), dg.State))
				}
				current, err := adm.FetchOffsets(ctx, group)
				if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
					return fail("fetch offsets: ", err)
				}
				if allTopics {
					// As in Kafka's tool: the partitions the group has
					// committed, not the whole of their topics.
					current.Each(func(o kadm.OffsetResponse) {
						if o.Err == nil && o.At >= 0 {
							sel[o.Topic] = append(sel[o.Topic], o.Partition)
						}
					})
					if len(sel) == 0 {
						return fail("", errors.New("the group has no committed offsets; name topics with --topic"))
					}
				}
				chosenTPs, err := sel.resolve(ctx, adm)
				if err != nil {
					return fail("", err)
				}
				topics := chosenTPs.Topics()
				starts, err := adm.ListStartOffsets(ctx, topics...)
				if err == nil {
					err = starts.Error()
				}
				if err != nil {
					return fail("list offsets: ", kafkaError(err, ""))
				}
				ends, err := adm.ListEndOffsets(ctx, topics...)
				if err == nil {
					err = ends.Error()
				}
				if err != nil {
					return fail("list offsets: ", kafkaError(err, ""))
				}
				var atTime kadm.ListedOffsets
				if !at.IsZero() {
					if atTime, err = adm.ListOffsetsAfterMilli(ctx, at.UnixMilli(), topics...); err == nil {
						err = atTime.Error()
					}
					if err != nil {
						return fail("list offsets: ", kafkaError(err, ""))
					}
				}
				plan := kadm.Offsets{}
				var noCommit []string
				chosenTPs.Each(func(t string, p int32) {
					start, _ := starts.Lookup(t, p)
					end, _ := ends.Lookup(t, p)
					cur, hasCur := current.Lookup(t, p)
					hasCur = hasCur && cur.Err == nil && cur.At >= 0
					var o int64
					switch {
					case to.earliest:
						o = start.Offset
					case to.latest:
						o = end.Offset
					case !at.IsZero():
						lo, ok := atTime.Lookup(t, p)
						o = end.Offset
						if ok && lo.Offset >= 0 {
							o = lo.Offset
						}
					case to.shift:
						if !hasCur {
							noCommit = append(noCommit, fmt.Sprintf("%s:%d", t, p))
							return
						}
						o = cur.At + to.shiftBy
					case to.toOffset:
						o = to.offset
					}
					o = max(start.Offset, min(o, end.Offset))
					plan.Add(kadm.Offset{Topic: t, Partition: p, At: o, LeaderEpoch: -1})
				})
				if len(noCommit) > 0 {
					sort.Strings(noCommit)
					return fail("--shift-by: ", fmt.Errorf("no committed offset to shift on %s", strings.Join(noCommit, ", ")))
				}
				rows := plan.Sorted()
				if export {
					if err := writePlanCSV(stdout, rows); err != nil {
						return err
					}
				} else {
					tw := newTable(stdout)
					fmt.Fprintln(tw, "TOPIC\tPARTITION\tCURRENT\tNEW")
					for _, o := range rows {
						cur := "-"
						if c, ok := current.Lookup(o.Topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
							cur = strconv.FormatInt(c.At, 10)
						}
						fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", o.Topic, o.Partition, cur, o.At)
					}
					if err := tw.Flush(); err != nil {
						return err
					}
				}
				if !execute {
					if !export {
						fmt.Fprintln(stdout, "dry run: nothing committed (add --execute to commit these offsets)")
					}
					return nil
				}
				rs, err := adm.CommitOffsets(ctx, group, plan)
				if err != nil {
					return fail("commit: ", err)
				}
				if err := rs.Error(); err != nil {
					return fail("commit: ", kafkaError(err, ""))
				}
				if !export {
					fmt.Fprintf(stdout, "committed %s for group %s\n", plural(len(rows), "offset"), group)
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&specs, "topic", "t", nil, "topic, or topic:partition,... to reset (repeatable)")
	f.BoolVar(&allTopics, "all-topics", false, "every partition the group has committed offsets for")
	f.BoolVar(&to.earliest, "to-earliest", false, "reset to each partition's log start offset")
	f.BoolVar(&to.latest, "to-latest", false, "reset to each partition's end offset")
	f.StringVar(&to.datetime, "to-datetime", "", "reset to the first offset at or after this time (RFC 3339)")
	f.StringVar(&to.duration, "by-duration", "", "reset to the first offset at or after this long ago (P1DT12H or 36h)")
	f.Int64Var(&to.shiftBy, "shift-by", 0, "move each committed offset by this many (negative: back)")
	f.Int64Var(&to.offset, "to-offset", 0, "reset to this offset")
	f.BoolVar(&execute, "execute", false, "commit the new offsets (default: print them only)")
	f.BoolVar(&dryRun, "dry-run", false, "print the new offsets only (the default)")
	f.BoolVar(&export, "export", false, "print the plan as CSV lines topic,partition,offset")
	return cmd
}

func writePlanCSV(w io.Writer, rows []kadm.Offset) error {
	cw := csv.NewWriter(w)
	for _, o := range rows {
		if err := cw.Write([]string{o.Topic, strconv.Itoa(int(o.Partition)), strconv.FormatInt(o.At, 10)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// parseDatetime takes RFC 3339 and, as Kafka's tool does, a time without a
// zone in local time, with or without milliseconds.
func parseDatetime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02T15:04:05.000", "2006-01-02T15:04:05"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("not a date and time")
}

var isoDuration = regexp.MustCompile(`^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$`)

// parseDuration takes Kafka's --by-duration format, ISO 8601's PnDTnHnMnS,
// or a Go duration.
func parseDuration(s string) (time.Duration, error) {
	m := isoDuration.FindStringSubmatch(strings.ToUpper(s))
	if m == nil || s == "P" || strings.HasSuffix(strings.ToUpper(s), "T") {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, errors.New("not a duration")
		}
		return d, nil
	}
	var d time.Duration
	for i, unit := range []time.Duration{24 * time.Hour, time.Hour, time.Minute, time.Second} {
		if m[i+1] == "" {
			continue
		}
		v, err := strconv.ParseFloat(m[i+1], 64)
		if err != nil {
			return 0, err
		}
		d += time.Duration(v * float64(unit))
	}
	return d, nil
}

func newGroupDeleteOffsetsCmd(a *admin, stdout io.Writer) *cobra.Command {
	var specs []string
	cmd := &cobra.Command{
		Use:   "delete-offsets GROUP --topic TOPIC[:P,...]...",
		Short: "Delete a group's committed offsets of some topics (OffsetDelete)",
		Long: `Delete the group's committed offsets of the given topics or partitions, so
that lag is no longer reported for topics the group stopped reading. The
broker refuses (GROUP_SUBSCRIBED_TO_TOPIC) for topics the group's live
members are subscribed to.`,
		Example: `  strata group delete-offsets billing --topic old-orders
  strata group delete-offsets billing --topic orders:3,4`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			group := argv[0]
			if len(specs) == 0 {
				return &usageError{err: errors.New("--topic: at least one topic is required"), cmd: cmd.CommandPath()}
			}
			sel, err := parseSelection(specs)
			if err != nil {
				return &usageError{err: err, cmd: cmd.CommandPath()}
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				fail := func(err error) error { return fmt.Errorf("group delete-offsets %s: %w", group, err) }
				set, err := sel.resolve(ctx, adm)
				if err != nil {
					return fail(err)
				}
				rs, err := adm.DeleteOffsets(ctx, group, set)
				if err != nil {
					return fail(kafkaError(err, ""))
				}
				var failed []string
				deleted := 0
				for _, tps := range set.Sorted() {
					for _, p := range tps.Partitions {
						perr, ok := rs[tps.Topic][p]
						switch {
						case !ok:
							failed = append(failed, fmt.Sprintf("%s:%d: missing from the broker's response", tps.Topic, p))
						case perr != nil:
							failed = append(failed, fmt.Sprintf("%s:%d: %v", tps.Topic, p, kafkaError(perr, "")))
						default:
							deleted++
						}
					}
				}
				if deleted > 0 {
					fmt.Fprintf(stdout, "deleted %s of group %s\n", plural(deleted, "committed offset"), group)
				}
				if len(failed) > 0 {
					return fail(errors.New(strings.Join(failed, "; ")))
				}
				return nil
			})
		},
	}
	cmd.Flags().StringArrayVarP(&specs, "topic", "t", nil, "topic, or topic:partition,... (repeatable)")
	return cmd
}
