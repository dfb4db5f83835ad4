package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func newClusterCmd(environ []string, stdout io.Writer) *cobra.Command {
	a := &admin{}
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Show the brokers and the metadata quorum, and move partition leadership",
		Long:  "Inspect and operate a cluster through the Kafka protocol, against any of its brokers.",
	}
	a.addFlags(cmd, environ)
	cmd.AddCommand(
		newClusterStatusCmd(a, stdout),
		newClusterElectLeadersCmd(a, stdout),
		newClusterRestoreCmd(a, stdout),
	)
	asGroup(cmd)
	return cmd
}

// clusterStatus is what `cluster status` prints, and its JSON.
type clusterStatus struct {
	ClusterID    string         `json:"cluster_id"`
	ControllerID int32          `json:"controller_id"`
	Brokers      []brokerStatus `json:"brokers"`
	Quorum       quorumStatus   `json:"quorum"`

	// NoQuorum says that no node answering knows a controller: too few
	// voters are up, or reach each other, to elect one. The brokers and
	// partitions are then what the answering nodes last learned, and
	// PossiblyStale is set: nobody fences a dead broker or shrinks an
	// ISR without a controller.
	NoQuorum      bool `json:"no_quorum"`
	PossiblyStale bool `json:"possibly_stale"`
	// AnsweredBy lists the nodes that answered DescribeQuorum, and
	// UnreachableVoters the voters among the quorum's that did not.
	AnsweredBy        []int32 `json:"answered_by,omitempty"`
	UnreachableVoters []int32 `json:"unreachable_voters,omitempty"`

	Partitions                int      `json:"partitions"`
	UnderReplicated           int      `json:"under_replicated"`
	Offline                   int      `json:"offline"`
	UnderReplicatedPartitions []string `json:"under_replicated_partitions,omitempty"`
	OfflinePartitions         []string `json:"offline_partitions,omitempty"`
}

// brokerStatus is one node: a registered broker, a member of the metadata
// quorum, or both.
type brokerStatus struct {
	ID      int32  `json:"id"`
	Address string `json:"address,omitempty"`
	Rack    string `json:"rack,omitempty"`
	// Status is "alive" (registered and not fenced), "fenced",
	// "unreachable" (registered and not fenced, but it did not answer
	// this command), or "unregistered" (a quorum member with no broker
	// registration).
	Status string `json:"status"`
	Fenced bool   `json:"fenced"`
	// Role is the node's place in the metadata quorum: "voter",
	// "observer" (a raft non-voter), or "-".
	Role  string `json:"role"`
	Voter bool   `json:"voter"`
	// The node's own raft commit index and log end, when it answered.
	RaftCommitIndex *int64 `json:"raft_commit_index,omitempty"`
	RaftLogEnd      *int64 `json:"raft_log_end,omitempty"`
	// Answered says the node answered DescribeQuorum for this command.
	Answered bool `json:"answered"`
}

// quorumStatus is the metadata quorum as its leader (or, if it did not
// answer, any node) describes it.
type quorumStatus struct {
	LeaderID    int32 `json:"leader_id"`
	Epoch       int32 `json:"epoch"`
	CommitIndex int64 `json:"commit_index"`
}

func newClusterStatusCmd(a *admin, stdout io.Writer) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the brokers, the controller, the metadata quorum and partition health",
		Long: `Show every broker (id, address, rack, alive or fenced, its role in the
metadata quorum and how far its raft log is), the controller, and how many
partitions are under-replicated (fewer in-sync replicas than replicas) or
offline (no leader).

Each node is asked for its own raft progress (DescribeQuorum), through its
registered address or, for a node not registered yet, through the bootstrap
addresses; a node that does not answer shows "-", and a registered broker
that does not answer shows "unreachable" unless the controller fenced it.

Without a quorum (no node answering knows a controller) the command says
so, names the voters that do not answer, and shows the rest as the
answering nodes last knew it, marked as possibly stale: no controller
fences dead brokers or shrinks ISRs then.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.doClient(cmd.Context(), func(ctx context.Context, cl *kgo.Client) error {
				st, err := describeCluster(ctx, cl, a.seeds())
				if err != nil {
					return fmt.Errorf("cluster status: %w", err)
				}
				if asJSON {
					return writeJSON(stdout, st)
				}
				return printClusterStatus(stdout, st)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

// describeCluster gathers the status from Metadata (partitions),
// DescribeCluster (brokers, fencing) and each node's DescribeQuorum. seeds
// are the addresses of cl's seed brokers, in order.
func describeCluster(ctx context.Context, cl *kgo.Client, seeds []string) (*clusterStatus, error) {
	mreq := kmsg.NewPtrMetadataRequest() // no topics named: all of them
	mresp, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	dreq := kmsg.NewPtrDescribeClusterRequest()
	dreq.IncludeFencedBrokers = true // v2 (KIP-1073); older versions ignore it
	dresp, err := dreq.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	if err := kerr.ErrorForCode(dresp.ErrorCode); err != nil {
		return nil, kafkaError(err, deref(dresp.ErrorMessage))
	}

	st := &clusterStatus{ClusterID: dresp.ClusterID, ControllerID: dresp.ControllerID}
	nodes := map[int32]*brokerStatus{}
	node := func(id int32) *brokerStatus {
		if nodes[id] == nil {
			nodes[id] = &brokerStatus{ID: id, Status: "unregistered", Role: "-"}
		}
		return nodes[id]
	}
	for _, b := range dresp.Brokers {
		n := node(b.NodeID)
		n.Address = net.JoinHostPort(b.Host, strconv.Itoa(int(b.Port)))
		n.Rack = deref(b.Rack)
		n.Fenced = b.IsFenced
		n.Status = "alive"
		if b.IsFenced {
			n.Status = "fenced"
		}
	}

	// Ask every registered broker and every bootstrap address: a node
	// not registered yet is reachable only through the latter. Each
	// answer carries the answering node's own log end (the others are
	// -1), which says who answered.
	var (
		targets []*kgo.Broker
		addrs   []string // of each target, where known
	)
	for _, b := range dresp.Brokers {
		targets = append(targets, cl.Broker(int(b.NodeID)))
		addrs = append(addrs, "")
	}
	seedBrokers := cl.SeedBrokers()
	for i, b := range seedBrokers {
		targets = append(targets, b)
		if len(seedBrokers) == len(seeds) {
			addrs = append(addrs, seeds[i])
		} else {
			addrs = append(addrs, "")
		}
	}
	answers := make([]*kmsg.DescribeQuorumResponse, len(targets))
	var wg sync.WaitGroup
	for i, b := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], _ = describeQuorumReq().RequestWith(ctx, b) // a node that does not answer shows "-"
		}()
	}
	wg.Wait()

	var layout *kmsg.DescribeQuorumResponseTopicPartition
	answered := map[int32]bool{}
	for i, resp := range answers {
		p, ok := quorumPartition(resp)
		if !ok {
			continue
		}
		if layout == nil || p.LeaderID == selfOf(p) {
			layout = p // the leader's view of the quorum wins
		}
		self := selfOf(p)
		if self < 0 {
			continue
		}
		n := node(self)
		n.Answered, answered[self] = true, true
		n.RaftCommitIndex, n.RaftLogEnd = ptrTo(p.HighWatermark), ptrTo(logEndOf(p, self))
		if n.Address == "" {
			n.Address = addrs[i]
		}
	}
	if layout != nil {
		st.Quorum = quorumStatus{LeaderID: layout.LeaderID, Epoch: layout.LeaderEpoch, CommitIndex: layout.HighWatermark}
		for _, v := range layout.CurrentVoters {
			n := node(v.ReplicaID)
			n.Role, n.Voter = "voter", true
			if !answered[v.ReplicaID] {
				st.UnreachableVoters = append(st.UnreachableVoters, v.ReplicaID)
			}
		}
		slices.Sort(st.UnreachableVoters)
		st.AnsweredBy = slices.Sorted(maps.Keys(answered))
		st.NoQuorum = layout.LeaderID < 0 && st.ControllerID < 0
		st.PossiblyStale = st.NoQuorum
		for _, n := range nodes {
			// The registration says alive; the node says nothing.
			if n.Status == "alive" && !n.Answered {
				n.Status = "unreachable"
			}
		}
		for _, o := range layout.Observers {
			node(o.ReplicaID).Role = "observer"
		}
	} else {
		st.Quorum.LeaderID = -1
	}
	for _, n := range nodes {
		st.Brokers = append(st.Brokers, *n)
	}
	slices.SortFunc(st.Brokers, func(a, b brokerStatus) int { return cmp.Compare(a.ID, b.ID) })

	h := partitionHealth(mresp)
	st.Partitions, st.UnderReplicated, st.Offline = h.total, len(h.underReplicated), len(h.offline)
	st.UnderReplicatedPartitions, st.OfflinePartitions = h.underReplicated, h.offline
	return st, nil
}

// describeQuorumReq asks for the metadata log, partition 0 of
// __cluster_metadata, as Kafka names it.
func describeQuorumReq() *kmsg.DescribeQuorumRequest {
	req := kmsg.NewPtrDescribeQuorumRequest()
	t := kmsg.NewDescribeQuorumRequestTopic()
	t.Topic = "__cluster_metadata"
	p := kmsg.NewDescribeQuorumRequestTopicPartition()
	t.Partitions = append(t.Partitions, p)
	req.Topics = append(req.Topics, t)
	return req
}

// quorumPartition is the metadata log's partition in a DescribeQuorum
// answer without errors.
func quorumPartition(resp *kmsg.DescribeQuorumResponse) (*kmsg.DescribeQuorumResponseTopicPartition, bool) {
	if resp == nil || resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return nil, false
	}
	p := &resp.Topics[0].Partitions[0]
	return p, p.ErrorCode == 0
}

// selfOf is the node that gave a DescribeQuorum answer: the one member
// whose log end it knows (Strata's brokers know only their own), or -1.
func selfOf(p *kmsg.DescribeQuorumResponseTopicPartition) int32 {
	self := int32(-1)
	for _, r := range slices.Concat(p.CurrentVoters, p.Observers) {
		if r.LogEndOffset >= 0 {
			if self >= 0 {
				return -1 // a leader that tracks its followers: not ours to guess
			}
			self = r.ReplicaID
		}
	}
	return self
}

func logEndOf(p *kmsg.DescribeQuorumResponseTopicPartition, id int32) int64 {
	for _, r := range slices.Concat(p.CurrentVoters, p.Observers) {
		if r.ReplicaID == id {
			return r.LogEndOffset
		}
	}
	return -1
}

func ptrTo[T any](v T) *T { return &v }

// health counts partitions as Kafka's tools do: under-replicated when the
// ISR is smaller than the replica set, offline when there is no leader.
type health struct {
	total                    int
	underReplicated, offline []string // topic-partition, in metadata order
}

func partitionHealth(resp *kmsg.MetadataResponse) health {
	var h health
	topics := slices.Clone(resp.Topics)
	slices.SortFunc(topics, func(a, b kmsg.MetadataResponseTopic) int {
		return cmp.Compare(deref(a.Topic), deref(b.Topic))
	})
	for _, t := range topics {
		if t.ErrorCode != 0 {
			continue
		}
		parts := slices.Clone(t.Partitions)
		slices.SortFunc(parts, func(a, b kmsg.MetadataResponseTopicPartition) int { return cmp.Compare(a.Partition, b.Partition) })
		for _, p := range parts {
			h.total++
			name := deref(t.Topic) + "-" + strconv.Itoa(int(p.Partition))
			if len(p.ISR) < len(p.Replicas) {
				h.underReplicated = append(h.underReplicated, name)
			}
			if p.Leader < 0 {
				h.offline = append(h.offline, name)
			}
		}
	}
	return h
}

func printClusterStatus(w io.Writer, st *clusterStatus) error {
	fmt.Fprintf(w, "Cluster: %s\n", st.ClusterID)
	if st.NoQuorum {
		fmt.Fprintln(w, "Controller: none")
		fmt.Fprintf(w, "NO QUORUM: no node that answered knows a controller; %s\n", quorumLoss(st))
		fmt.Fprintf(w, "Below is what %s last knew, possibly stale: without a controller no broker is fenced and no ISR shrinks.\n\n", nodeList(st.AnsweredBy))
	} else {
		fmt.Fprintf(w, "Controller: %d\n\n", st.ControllerID)
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tADDRESS\tRACK\tSTATUS\tROLE\tRAFT-COMMIT\tRAFT-LOG-END")
	for _, b := range st.Brokers {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", b.ID, orDash(b.Address), orDash(b.Rack), b.Status, b.Role, index(b.RaftCommitIndex), index(b.RaftLogEnd))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	switch {
	case st.NoQuorum:
		fmt.Fprintf(w, "Metadata quorum: no leader; epoch %d, commit index %d as %s knows them\n", st.Quorum.Epoch, st.Quorum.CommitIndex, nodeList(st.AnsweredBy))
	case st.Quorum.LeaderID >= 0:
		fmt.Fprintf(w, "Metadata quorum: leader %d, epoch %d, commit index %d\n", st.Quorum.LeaderID, st.Quorum.Epoch, st.Quorum.CommitIndex)
		if len(st.UnreachableVoters) > 0 {
			fmt.Fprintf(w, "Voters not answering: %s\n", joinIDs(st.UnreachableVoters))
		}
	case len(st.AnsweredBy) > 0:
		fmt.Fprintf(w, "Metadata quorum: %s answered but knows no leader\n", nodeList(st.AnsweredBy))
	default:
		fmt.Fprintln(w, "Metadata quorum: no node answered DescribeQuorum")
	}
	stale := ""
	if st.PossiblyStale {
		stale = " (possibly stale)"
	}
	fmt.Fprintf(w, "Partitions%s: %d, under-replicated: %d, offline: %d\n", stale, st.Partitions, st.UnderReplicated, st.Offline)
	if len(st.UnderReplicatedPartitions) > 0 {
		fmt.Fprintf(w, "Under-replicated: %s\n", strings.Join(st.UnderReplicatedPartitions, ", "))
	}
	if len(st.OfflinePartitions) > 0 {
		fmt.Fprintf(w, "Offline: %s\n", strings.Join(st.OfflinePartitions, ", "))
	}
	return nil
}

// quorumLoss says which voters do not answer and how many a controller
// needs.
func quorumLoss(st *clusterStatus) string {
	voters := 0
	for _, b := range st.Brokers {
		if b.Voter {
			voters++
		}
	}
	need := fmt.Sprintf("electing one needs %d of the %d voters", voters/2+1, voters)
	if len(st.UnreachableVoters) == 0 {
		return need + ", and every voter answered: they may not reach each other"
	}
	if len(st.UnreachableVoters) == 1 {
		return fmt.Sprintf("voter %s does not answer; %s", joinIDs(st.UnreachableVoters), need)
	}
	return fmt.Sprintf("voters %s do not answer; %s", joinIDs(st.UnreachableVoters), need)
}

// nodeList names nodes: "node 1", "nodes 1, 3".
func nodeList(ids []int32) string {
	if len(ids) == 1 {
		return "node " + joinIDs(ids)
	}
	return "nodes " + joinIDs(ids)
}

func joinIDs(ids []int32) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ", ")
}

func index(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(*p, 10)
}

func newClusterElectLeadersCmd(a *admin, stdout io.Writer) *cobra.Command {
	var (
		topic     string
		partition int32
		unclean   bool
	)
	cmd := &cobra.Command{
		Use:   "elect-leaders",
		Short: "Move partition leadership back to the preferred replicas",
		Long: `Ask the controller to elect leaders (the ElectLeaders API, KIP-183): by
default the preferred replica, the first of each partition's replicas, where
it is in the ISR; with --unclean, any live replica of a partition that has
no leader, at the risk of losing what only the old leader had (KIP-460).
Without --topic every partition is considered.

Each partition's result is printed: ELECTION_NOT_NEEDED means its preferred
replica already leads, and is no failure; any other error is reported and
makes the command fail.`,
		Example: `  strata cluster elect-leaders
  strata cluster elect-leaders --topic orders --partition 3
  strata cluster elect-leaders --topic orders --unclean`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("partition") && topic == "" {
				return cmd.FlagErrorFunc()(cmd, fmt.Errorf("--partition %d needs --topic", partition))
			}
			how := kadm.ElectPreferredReplica
			if unclean {
				how = kadm.ElectLiveReplica
			}
			return a.do(cmd.Context(), func(ctx context.Context, adm *kadm.Client) error {
				if err := checkServes(ctx, adm, kmsg.ElectLeaders); err != nil {
					return fmt.Errorf("cluster elect-leaders: %w", err)
				}
				var set kadm.TopicsSet
				switch {
				case cmd.Flags().Changed("partition"):
					set.Add(topic, partition)
				case topic != "":
					tds, err := adm.ListTopics(ctx, topic)
					if err != nil {
						return fmt.Errorf("cluster elect-leaders: %w", err)
					}
					td, ok := tds[topic]
					if !ok {
						return fmt.Errorf("cluster elect-leaders %s: %w", topic, kerr.UnknownTopicOrPartition)
					}
					if td.Err != nil {
						return fmt.Errorf("cluster elect-leaders %s: %w", topic, kafkaError(td.Err, ""))
					}
					set.Add(topic, td.Partitions.Numbers()...)
				}
				rs, err := adm.ElectLeaders(ctx, how, set)
				if err != nil {
					return fmt.Errorf("cluster elect-leaders: %w", err)
				}
				return printElections(stdout, rs)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&topic, "topic", "", "only this topic's partitions")
	f.Int32Var(&partition, "partition", 0, "only this partition of --topic")
	f.BoolVar(&unclean, "unclean", false, "elect any live replica for partitions without a leader, even outside the ISR (may lose records)")
	return cmd
}

// printElections prints one row per partition that was elected or needed
// no election, and returns the others' errors. Asked about all partitions,
// a controller answers only for those it tried to elect, so an empty
// answer means every partition already had its preferred leader.
func printElections(w io.Writer, rs kadm.ElectLeadersResults) error {
	if len(rs) == 0 {
		_, err := fmt.Fprintln(w, "no partition needed an election")
		return err
	}
	fails := failures{verb: "cluster elect-leaders"}
	tw := newTable(w)
	fmt.Fprintln(tw, "TOPIC\tPARTITION\tRESULT")
	for _, t := range slices.Sorted(maps.Keys(rs)) {
		for _, p := range slices.Sorted(maps.Keys(rs[t])) {
			r := rs[t][p]
			switch {
			case r.Err == nil:
				result := "elected"
				if r.How == kadm.ElectLiveReplica {
					result = "elected (unclean)"
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\n", t, p, result)
			case errors.Is(r.Err, kerr.ElectionNotNeeded):
				fmt.Fprintf(tw, "%s\t%d\t%s\n", t, p, kafkaError(r.Err, r.ErrMessage))
			default:
				fails.add(t+"-"+strconv.Itoa(int(p)), kafkaError(r.Err, r.ErrMessage))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return fails.err()
}

// checkServes fails when no broker serves the API key: the client would
// otherwise say only that "the broker is too old".
func checkServes(ctx context.Context, adm *kadm.Client, key kmsg.Key) error {
	vs, err := adm.ApiVersions(ctx)
	if err != nil {
		return err
	}
	for _, v := range vs {
		if _, ok := v.KeyMaxVersion(int16(key)); ok && v.Err == nil {
			return nil
		}
	}
	return fmt.Errorf("the brokers do not serve %s (Kafka API %d)", key.Name(), key)
}

// deref is a nullable protocol string's value, "" for null.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
