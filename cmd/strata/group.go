package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
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
	cmd.Flags().StringSliceVar(&states, "state", nil, "only groups in these states (Empty, Stable, PreparingRebalance, CompletingRebalance)")
	return cmd
}

// groupPartition is one row of `group describe`.
type groupPartition struct {
	Topic      string `json:"topic"`
	Partition  int32  `json:"partition"`
	Committed  int64  `json:"committed"` // -1: nothing committed
	End        int64  `json:"end"`
	Lag        int64  `json:"lag"`
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
	TotalLag     int64            `json:"total_lag"`
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
						Coordinator: l.Coordinator.NodeID, Members: len(l.Members), TotalLag: l.Lag.Total(),
						Partitions: []groupPartition{},
					}
					for _, pl := range l.Lag.Sorted() {
						gp := groupPartition{Topic: pl.Topic, Partition: pl.Partition, Committed: pl.Commit.At, End: pl.End.Offset, Lag: pl.Lag}
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
						fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%s\t%s\t%s\n", p.Topic, p.Partition, committed, p.End, p.Lag,
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

func newGroupResetCmd(a *admin, stdout io.Writer) *cobra.Command {
	var (
		topics     []string
		toEarliest bool
		toLatest   bool
		toDatetime string
		toOffset   int64
		execute    bool
	)
	cmd := &cobra.Command{
		Use:   "reset-offsets GROUP --topic TOPIC (--to-earliest | --to-latest | --to-datetime TIME | --to-offset N) [--execute]",
		Short: "Move a group's committed offsets (dry run unless --execute)",
		Long: `Compute new committed offsets for every partition of the given topics and,
with --execute, commit them. The group must have no members: stop its
consumers first, as with Kafka's kafka-consumer-groups.sh. Without
--execute nothing changes; the plan is printed.`,
		Example: `  strata group reset-offsets billing --topic orders --to-earliest
  strata group reset-offsets billing --topic orders --to-datetime 2026-01-02T15:04:05Z --execute`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			group := argv[0]
			chosen := 0
			for _, set := range []bool{toEarliest, toLatest, toDatetime != "", cmd.Flags().Changed("to-offset")} {
				if set {
					chosen++
				}
			}
			if chosen != 1 {
				return &usageError{err: errors.New("give exactly one of --to-earliest, --to-latest, --to-datetime, --to-offset"), cmd: cmd.CommandPath()}
			}
			if len(topics) == 0 {
				return &usageError{err: errors.New("--topic: at least one topic is required"), cmd: cmd.CommandPath()}
			}
			var at time.Time
			if toDatetime != "" {
				t, err := time.Parse(time.RFC3339, toDatetime)
				if err != nil {
					return &usageError{err: fmt.Errorf("--to-datetime %q: want RFC 3339, e.g. 2026-01-02T15:04:05Z", toDatetime), cmd: cmd.CommandPath()}
				}
				at = t
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				dgs, err := adm.DescribeGroups(ctx, group)
				if err != nil {
					return fmt.Errorf("group reset-offsets: %w", err)
				}
				if dg, ok := dgs[group]; ok && dg.Err == nil && len(dg.Members) > 0 {
					return fmt.Errorf("group reset-offsets: group %s has %s (state %s); stop its consumers first", group, plural(len(dg.Members), "active member"), dg.State)
				}
				var listed kadm.ListedOffsets
				switch {
				case toEarliest:
					listed, err = adm.ListStartOffsets(ctx, topics...)
				case toDatetime != "":
					listed, err = adm.ListOffsetsAfterMilli(ctx, at.UnixMilli(), topics...)
				default:
					listed, err = adm.ListEndOffsets(ctx, topics...)
				}
				if err != nil {
					return fmt.Errorf("group reset-offsets: list offsets: %w", err)
				}
				if err := listed.Error(); err != nil {
					return fmt.Errorf("group reset-offsets: list offsets: %w", kafkaError(err, ""))
				}
				current, err := adm.FetchOffsets(ctx, group)
				if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
					return fmt.Errorf("group reset-offsets: fetch offsets: %w", err)
				}
				plan := kadm.Offsets{}
				listed.Each(func(lo kadm.ListedOffset) {
					o := lo.Offset
					if cmd.Flags().Changed("to-offset") {
						// Clamp into the partition's range, as Kafka's tool does.
						o = min(toOffset, lo.Offset)
					}
					plan.Add(kadm.Offset{Topic: lo.Topic, Partition: lo.Partition, At: o, LeaderEpoch: -1})
				})
				if cmd.Flags().Changed("to-offset") {
					starts, err := adm.ListStartOffsets(ctx, topics...)
					if err != nil {
						return fmt.Errorf("group reset-offsets: list offsets: %w", err)
					}
					starts.Each(func(lo kadm.ListedOffset) {
						if o, ok := plan.Lookup(lo.Topic, lo.Partition); ok && o.At < lo.Offset {
							o.At = lo.Offset
							plan.Add(o)
						}
					})
				}
				rows := plan.Sorted()
				sort.SliceStable(rows, func(i, j int) bool { return rows[i].Topic < rows[j].Topic })
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
				if !execute {
					fmt.Fprintln(stdout, "dry run: nothing committed (add --execute to commit these offsets)")
					return nil
				}
				rs, err := adm.CommitOffsets(ctx, group, plan)
				if err != nil {
					return fmt.Errorf("group reset-offsets: commit: %w", err)
				}
				if err := rs.Error(); err != nil {
					return fmt.Errorf("group reset-offsets: commit: %w", kafkaError(err, ""))
				}
				fmt.Fprintf(stdout, "committed %s for group %s\n", plural(len(rows), "offset"), group)
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringSliceVarP(&topics, "topic", "t", nil, "topic whose partitions to reset (repeatable)")
	f.BoolVar(&toEarliest, "to-earliest", false, "reset to each partition's log start offset")
	f.BoolVar(&toLatest, "to-latest", false, "reset to each partition's end offset")
	f.StringVar(&toDatetime, "to-datetime", "", "reset to the first offset at or after this RFC 3339 time")
	f.Int64Var(&toOffset, "to-offset", 0, "reset to this offset (clamped into each partition's range)")
	f.BoolVar(&execute, "execute", false, "commit the new offsets (default: print them only)")
	return cmd
}
