package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"strata/meta"
	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// Restoring a cluster from its bucket (docs/operations.md, "Disaster
// recovery"): the newest metadata checkpoint names every topic (its id,
// configs, partitions) and, per partition, the manifest version it was
// taken against; the partitions' own manifests, read fresh since the
// bucket may be ahead of the checkpoint, say where each partition's
// history starts and ends. A restored topic is recreated with its id, so
// its partitions find their objects (keys carry the id), and each
// partition starts empty on local disk at the bucket's end, its history
// served from the bucket: the path a leader whose local log was lost
// already takes (partition.startAtBucketEnd). The internal topics come
// back the same way, so the groups' committed offsets and the
// transactions' state are read back by their coordinators.
//
// Planning reads and decides; Restore changes the metadata, one topic at
// a time through the controller, and only when nothing is refused.

// ErrRestore wraps every reason a restore is refused or fails.
var ErrRestore = errors.New("restore")

// RestoreAction is what a restore does with one topic.
type RestoreAction string

const (
	// RestoreCreate: the topic does not exist here; it is created.
	RestoreCreate RestoreAction = "create"
	// RestoreReplace: an internal topic of this cluster, holding no
	// data, is replaced by the bucket's (with the bucket's id).
	RestoreReplace RestoreAction = "replace"
	// RestorePresent: the topic exists here with the bucket's id; there
	// is nothing to do.
	RestorePresent RestoreAction = "present"
	// RestoreRefused: the topic cannot be restored; Reason says why, and
	// the restore as a whole is refused.
	RestoreRefused RestoreAction = "refused"
)

// RestorePlan is what a restore would do, topic by topic.
type RestorePlan struct {
	// History is the metadata history restored from, and Checkpoint the
	// key of its newest checkpoint; ClusterID, Index, WrittenMs and
	// NextProducerID are that checkpoint's.
	History        string
	Checkpoint     string
	ClusterID      string
	Index          uint64
	WrittenMs      int64
	NextProducerID int64
	Topics         []TopicRestore
	// Others are the bucket's other histories (this cluster's own set
	// aside), the most recently written first: a topic only one of them
	// names is restored from it alone, so the operator must hear of it.
	Others []OtherHistory
}

// historiesNaming returns the other histories that name topic, the most
// recently written first.
func (p *RestorePlan) historiesNaming(topic string) []string {
	var out []string
	for _, o := range p.Others {
		if slices.Contains(o.Topics, topic) {
			out = append(out, o.History)
		}
	}
	return out
}

// OtherHistory is a metadata history of the bucket a plan did not
// restore from, as its newest checkpoint describes it.
type OtherHistory struct {
	History    string
	Checkpoint string
	WrittenMs  int64
	// Topics are the names of the topics of users' own its checkpoint
	// names that the plan's checkpoint does not, and that this cluster
	// does not have with the same id, sorted: restoring them takes a
	// restore from this history.
	Topics []string
	// Err says why its checkpoint could not be read, "" when it was.
	Err string
}

// Refused returns the topics the restore refuses.
func (p *RestorePlan) Refused() []TopicRestore {
	var out []TopicRestore
	for _, t := range p.Topics {
		if t.Action == RestoreRefused {
			out = append(out, t)
		}
	}
	return out
}

// TopicRestore is one topic of a plan.
type TopicRestore struct {
	Name              string
	ID                [16]byte
	Internal          bool
	ReplicationFactor int16
	Configs           map[string]string
	Action            RestoreAction
	// Reason says why a topic is refused, or notes something of an
	// accepted one (a topic that does not tier comes back empty).
	Reason     string
	Partitions []PartitionRestore
	// replaceID is the id of the topic of the same name a replace
	// deletes.
	replaceID [16]byte
}

// Bytes is the size of the topic's objects in the bucket.
func (t *TopicRestore) Bytes() int64 {
	var n int64
	for _, p := range t.Partitions {
		n += p.Bytes
	}
	return n
}

// PartitionRestore is one partition of a planned topic.
type PartitionRestore struct {
	Partition int32
	// Replicas are the checkpoint's; they are kept when every one of them
	// is a live broker here, and otherwise the controller places the
	// partition as for a new topic.
	Replicas []int32
	// LeaderEpoch is the epoch the partition starts at: above the
	// checkpoint's, the newest manifest's, and the replaced topic's.
	LeaderEpoch int32
	// Manifest is the version of the manifest restored from ("" when the
	// bucket has none); LogStart and End are its offsets, Bytes the size
	// of the objects it lists.
	Manifest      string
	LogStart, End int64
	Bytes         int64
}

// PlanRestore reads the newest checkpoint of the bucket's metadata
// history history (its 32 hex digits, or a prefix of at least 8 that
// names one history), or, when history is "", the newest checkpoint of
// the histories other than this cluster's that names a topic of users'
// own (tier.NewestCheckpoint); then the manifests of the named topics
// (every topic of the checkpoint when topics is empty), and decides what
// a restore would do with each. It lists the other histories too, with
// the topics they name that the checkpoint does not. It changes nothing.
// An error (wrapping ErrRestore) means no plan at all: no object store,
// no checkpoint, an unknown history, or a checkpoint this version cannot
// read.
func (n *Node) PlanRestore(ctx context.Context, topics []string, history string) (*RestorePlan, error) {
	store := n.restoreStore()
	if store == nil {
		return nil, fmt.Errorf("%w: no object store is configured on node %d", ErrRestore, n.cfg.NodeID)
	}
	heads, err := tier.HistoryHeads(ctx, store)
	if err != nil {
		return nil, fmt.Errorf("%w: bucket %s: %w", ErrRestore, n.TierWhere(), err)
	}
	if len(heads) == 0 {
		return nil, noCheckpointError{n.TierWhere()}
	}
	own := n.meta.State().HistoryID
	var ck *format.Checkpoint
	var key string
	if history == "" {
		// The cluster's own checkpoints are set aside: its history is
		// not the one to restore (see tier.NewestCheckpoint).
		ck, key, err = tier.NewestOf(ctx, store, heads, own)
	} else {
		var head format.CheckpointKey
		if head, err = n.findHistory(heads, history); err != nil {
			return nil, err
		}
		key = head.String()
		ck, err = tier.ReadCheckpoint(ctx, store, key)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: bucket %s: %w", ErrRestore, n.TierWhere(), err)
	}
	plan := &RestorePlan{History: ck.History, Checkpoint: key, ClusterID: ck.ClusterID, Index: ck.Index, WrittenMs: ck.WrittenMs, NextProducerID: ck.NextProducerID}
	plan.Others = n.otherHistories(ctx, store, heads, ck, own)
	byName := make(map[string]*format.CheckpointTopic, len(ck.Topics))
	for i := range ck.Topics {
		byName[ck.Topics[i].Name] = &ck.Topics[i]
	}
	want := topics
	if len(want) == 0 {
		for _, t := range ck.Topics {
			want = append(want, t.Name)
		}
	}
	st := n.meta.State()
	var reads []manifestRead
	seen := map[string]bool{}
	for _, name := range want {
		if seen[name] {
			continue
		}
		seen[name] = true
		ct, ok := byName[name]
		if !ok {
			reason := fmt.Sprintf("no topic %q in checkpoint %s", name, key)
			if hs := plan.historiesNaming(name); len(hs) > 0 {
				reason += fmt.Sprintf("; metadata history %s names it (restore it with --history %s)", strings.Join(hs, ", "), hs[0])
			}
			plan.Topics = append(plan.Topics, TopicRestore{Name: name, Action: RestoreRefused, Reason: reason})
			continue
		}
		tr := n.decideRestore(ctx, st, ct)
		plan.Topics = append(plan.Topics, tr)
	}
	// The manifests of every partition to restore (or present), read side
	// by side: a thousand partitions are a thousand GETs.
	for i := range plan.Topics {
		t := &plan.Topics[i]
		if t.Action == RestoreRefused {
			continue
		}
		for j := range t.Partitions {
			reads = append(reads, manifestRead{topic: i, part: j})
		}
	}
	n.readRestoreManifests(ctx, store, plan, byName, reads)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: reading the manifests: %w", ErrRestore, context.Cause(ctx))
	}
	return plan, nil
}

// noCheckpointError is a plan's error when the bucket holds no
// checkpoint: both ErrRestore and tier.ErrNoCheckpoint, so a restore at
// start stops rather than retries, in one line.
type noCheckpointError struct{ where string }

func (e noCheckpointError) Error() string {
	return fmt.Sprintf("%v: bucket %s holds no metadata checkpoint, so there is nothing to restore from", ErrRestore, e.where)
}

func (noCheckpointError) Unwrap() []error { return []error{ErrRestore, tier.ErrNoCheckpoint} }

// findHistory is the head of heads whose history is h, or starts with h
// when h has at least minHistoryPrefix digits; anything else is an error
// naming the histories there are.
func (n *Node) findHistory(heads []format.CheckpointKey, h string) (format.CheckpointKey, error) {
	h = strings.ToLower(h)
	if len(h) < minHistoryPrefix || len(h) > 32 || strings.Trim(h, "0123456789abcdef") != "" {
		return format.CheckpointKey{}, fmt.Errorf("%w: history %q is not a metadata history id (32 hex digits, or a prefix of at least %d)", ErrRestore, h, minHistoryPrefix)
	}
	var match []format.CheckpointKey
	for _, k := range heads {
		if strings.HasPrefix(k.History, h) {
			match = append(match, k)
		}
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return format.CheckpointKey{}, fmt.Errorf("%w: bucket %s has no metadata history %s; it has %s", ErrRestore, n.TierWhere(), h, describeHeads(heads))
	default:
		return format.CheckpointKey{}, fmt.Errorf("%w: %s is the start of %d metadata histories (%s): give more digits", ErrRestore, h, len(match), describeHeads(match))
	}
}

// minHistoryPrefix is the fewest hex digits that may name a history: 32
// bits, so that a prefix does not match two by chance.
const minHistoryPrefix = 8

// describeHeads names the histories of heads, the first few with their
// newest checkpoint's time, for an error.
func describeHeads(heads []format.CheckpointKey) string {
	const most = 10
	var out []string
	for i, k := range heads {
		if i == most {
			out = append(out, fmt.Sprintf("and %d more", len(heads)-most))
			break
		}
		out = append(out, fmt.Sprintf("%s (written %s)", k.History, time.UnixMilli(k.WrittenMs).UTC().Format(time.RFC3339)))
	}
	return strings.Join(out, ", ")
}

// otherHistories reads, side by side, the newest checkpoint of each
// history of heads but ck's and own (this cluster's), and says which
// topics of users' own each names that ck does not and this cluster does
// not have: data a restore from ck alone would leave in the bucket. A
// checkpoint that cannot be read is noted, not an error: the plan stands
// without it.
func (n *Node) otherHistories(ctx context.Context, store objstore.Store, heads []format.CheckpointKey, ck *format.Checkpoint, own string) []OtherHistory {
	var out []OtherHistory
	for _, k := range heads {
		if k.History != ck.History && k.History != own {
			out = append(out, OtherHistory{History: k.History, Checkpoint: k.String(), WrittenMs: k.WrittenMs})
		}
	}
	named := make(map[string]bool, len(ck.Topics))
	for _, t := range ck.Topics {
		named[t.Name] = true
	}
	st := n.meta.State()
	forEachLimited(ctx, len(out), func(i int) {
		o := &out[i]
		c, err := tier.ReadCheckpoint(ctx, store, o.Checkpoint)
		if err != nil {
			o.Err = err.Error()
			return
		}
		for _, t := range c.Topics {
			if t.Internal || named[t.Name] {
				continue
			}
			if have, ok := st.Topics[t.Name]; ok && have.ID == t.TopicID() {
				continue // restored already
			}
			o.Topics = append(o.Topics, t.Name)
		}
		slices.Sort(o.Topics)
	})
	return out
}

// restoreStore is the store a restore reads: the node's, whose reads pass
// through whether or not the bucket is claimed yet.
func (n *Node) restoreStore() objstore.Store {
	if n.tierStore != nil {
		return n.tierStore
	}
	return n.cfg.Tier.Store
}

// decideRestore decides ct's action from this cluster's metadata (and,
// for an internal topic to replace, its data); the manifests come after.
func (n *Node) decideRestore(ctx context.Context, st *meta.State, ct *format.CheckpointTopic) TopicRestore {
	tr := TopicRestore{
		Name: ct.Name, ID: ct.TopicID(), Internal: ct.Internal, ReplicationFactor: ct.ReplicationFactor,
		Configs: maps.Clone(ct.Configs), Action: RestoreCreate,
	}
	if tr.Configs == nil {
		tr.Configs = map[string]string{}
	}
	var replaced *meta.Topic
	refuse := func(format string, args ...any) TopicRestore {
		tr.Action, tr.Reason = RestoreRefused, fmt.Sprintf(format, args...)
		return tr
	}
	if have, ok := st.Topics[ct.Name]; ok {
		switch {
		case have.ID == tr.ID:
			tr.Action = RestorePresent
		case !have.Internal || !ct.Internal:
			return refuse("topic %s exists here with id %s, not the bucket's %s", ct.Name, format.HexID(have.ID), ct.ID)
		default:
			if why := n.internalData(ctx, have); why != "" {
				return refuse("internal topic %s exists here with id %s and %s", ct.Name, format.HexID(have.ID), why)
			}
			tr.Action, tr.replaceID, replaced = RestoreReplace, have.ID, have
		}
	} else if other, ok := st.TopicByID(tr.ID); ok {
		return refuse("the topic id %s belongs to topic %s here", ct.ID, other.Name)
	}
	if want := n.internalPartitions(ct.Name); want > 0 && tr.Action != RestorePresent && int(want) != len(ct.Partitions) {
		return refuse("partition-count mismatch: %s has %d partitions in the bucket, and this cluster's coordinator is configured for %d", ct.Name, len(ct.Partitions), want)
	}
	if replaced != nil && len(replaced.Partitions) != len(ct.Partitions) {
		return refuse("partition-count mismatch: %s has %d partitions here and %d in the bucket", ct.Name, len(replaced.Partitions), len(ct.Partitions))
	}
	if alive := eligibleBrokers(st); tr.Action != RestorePresent && int(ct.ReplicationFactor) > len(alive) {
		return refuse("replication factor %d, but %d broker(s) are alive", ct.ReplicationFactor, len(alive))
	}
	if v, _ := n.TopicConfigValue(tr.Configs, "remote.storage.enable"); v != "true" && tr.Action != RestorePresent {
		tr.Reason = "does not tier: only its metadata comes back, its partitions start empty at offset 0"
	}
	alive := eligibleBrokers(st)
	for _, cp := range ct.Partitions {
		if cp.LeaderEpoch == math.MaxInt32 {
			// Its epoch cannot go above every old one.
			return refuse("partition %d is at leader epoch %d, the largest there is", cp.Partition, cp.LeaderEpoch)
		}
		pr := PartitionRestore{Partition: cp.Partition, LeaderEpoch: cp.LeaderEpoch + 1, Manifest: cp.Manifest, LogStart: cp.LogStart, End: cp.End}
		if len(cp.Replicas) == int(ct.ReplicationFactor) && !slices.ContainsFunc(cp.Replicas, func(id int32) bool { return !slices.Contains(alive, id) }) {
			pr.Replicas = slices.Clone(cp.Replicas)
		}
		if replaced != nil && int(cp.Partition) < len(replaced.Partitions) {
			pr.LeaderEpoch = max(pr.LeaderEpoch, replaced.Partitions[cp.Partition].LeaderEpoch+1)
		}
		tr.Partitions = append(tr.Partitions, pr)
	}
	return tr
}

// internalPartitions is the partition count this node's coordinator of
// an internal topic works with (it hashes group and transactional ids
// over it), or 0 for another topic.
func (n *Node) internalPartitions(name string) int32 {
	switch name {
	case OffsetsTopic:
		if t, ok := n.TopicByName(OffsetsTopic); ok {
			return int32(len(t.Partitions))
		}
		return n.cfg.Groups.Partitions
	case TxnStateTopic:
		if t, ok := n.TopicByName(TxnStateTopic); ok {
			return int32(len(t.Partitions))
		}
		return n.cfg.Txns.Partitions
	}
	return 0
}

// internalData says what data an internal topic of this cluster holds,
// "" for none: a record in a partition hosted here, or anything in the
// bucket. Only such an empty topic may be replaced.
func (n *Node) internalData(ctx context.Context, t *meta.Topic) string {
	for _, mp := range t.Partitions {
		if p := n.Partition(t.Name, mp.Index); p != nil && p.Log().EndOffset() > 0 {
			return fmt.Sprintf("data (partition %d ends at offset %d)", mp.Index, p.Log().EndOffset())
		}
	}
	store := n.restoreStore()
	var mu sync.Mutex
	var why string
	forEachLimited(ctx, len(t.Partitions), func(i int) {
		tp := format.TopicPartition{Topic: t.Name, TopicID: t.ID, Partition: int32(i)}
		m, ok, err := tier.ReadManifest(ctx, store, tp)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case why != "":
		case err != nil:
			why = fmt.Sprintf("its bucket manifests could not be read (%v)", err)
		case ok && m.EndOffset() > 0:
			why = fmt.Sprintf("data in the bucket (partition %d ends at offset %d)", i, m.EndOffset())
		}
	})
	return why
}

func eligibleBrokers(st *meta.State) []int32 {
	var ids []int32
	for id, b := range st.Brokers {
		if !b.Fenced && !b.ShuttingDown {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

type manifestRead struct{ topic, part int }

// readRestoreManifests reads, manifestLoaders at a time, the newest
// manifest of each partition in reads at or after the version the
// checkpoint names, and fills in its offsets, size and epoch. A partition
// whose manifest cannot be read refuses its topic.
func (n *Node) readRestoreManifests(ctx context.Context, store objstore.Store, plan *RestorePlan, byName map[string]*format.CheckpointTopic, reads []manifestRead) {
	var mu sync.Mutex
	forEachLimited(ctx, len(reads), func(i int) {
		r := reads[i]
		t := &plan.Topics[r.topic]
		cp := byName[t.Name].Partitions[r.part]
		tp := format.TopicPartition{Topic: t.Name, TopicID: t.ID, Partition: cp.Partition}
		m, err := restoredManifest(ctx, store, tp, cp)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if t.Action != RestoreRefused {
				t.Action, t.Reason = RestoreRefused, err.Error()
			}
			return
		}
		if m == nil {
			return // nothing tiered: the checkpoint's zeros stand
		}
		if m.LeaderEpoch == math.MaxInt32 {
			t.Action, t.Reason = RestoreRefused, fmt.Sprintf("partition %d's manifest is at leader epoch %d, the largest there is", cp.Partition, m.LeaderEpoch)
			return
		}
		p := &t.Partitions[r.part]
		p.Manifest = format.ManifestVersionOf(format.ManifestKey{TopicPartition: tp, LeaderEpoch: m.LeaderEpoch, Seq: m.Seq})
		p.LogStart, p.End, p.Bytes = m.LogStartOffset, m.EndOffset(), m.Totals().Bytes
		p.LeaderEpoch = max(p.LeaderEpoch, m.LeaderEpoch+1)
	})
}

// restoredManifest reads tp's newest manifest at or after the version cp
// names: listing only the keys above it, since the manifests the orphan
// grace keeps may be many. nil, with no error, when neither the
// checkpoint nor the bucket knows one.
func restoredManifest(ctx context.Context, store objstore.Store, tp format.TopicPartition, cp format.CheckpointPartition) (*format.Root, error) {
	named := ""
	if epoch, seq, ok := cp.ManifestVersion(); ok {
		named = format.ManifestKey{TopicPartition: tp, LeaderEpoch: epoch, Seq: seq}.String()
	}
	m, _, ok, err := tier.ReadManifestAfter(ctx, store, tp, named)
	if err != nil || ok || named == "" {
		return m, err // a newer one, an error, or none at all
	}
	m, err = tier.GetManifest(ctx, store, named)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, fmt.Errorf("manifest %s of %s-%d, which the checkpoint names, is gone and no newer one is there", cp.Manifest, tp.Topic, tp.Partition)
	}
	if err != nil {
		return nil, err
	}
	if m.TopicPartition != tp {
		return nil, fmt.Errorf("manifest %s describes %s-%d", named, m.Topic, m.Partition)
	}
	return m, nil
}

// forEachLimited runs f(0..n-1), manifestLoaders at a time, and returns
// once all have returned or ctx ended (those started still finish).
func forEachLimited(ctx context.Context, n int, f func(i int)) {
	sem := make(chan struct{}, manifestLoaders)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
}

// RestoreProgress is told of each topic a restore has applied.
type RestoreProgress func(t *TopicRestore, took time.Duration)

// Restore applies plan through this node, which must be the controller:
// each topic to create or replace is restored in the metadata (one
// command per topic, each atomic), and the partitions this node hosts are
// opened, at the bucket's end, before it returns. A plan with a refused
// topic is refused as a whole, before anything changes. A restore cut
// short (the controller lost its place) leaves the topics done so far:
// planning again shows them present, and the rest is restored by running
// it again.
func (n *Node) Restore(ctx context.Context, plan *RestorePlan, progress RestoreProgress) error {
	if refused := plan.Refused(); len(refused) > 0 {
		why := make([]string, len(refused))
		for i, t := range refused {
			why[i] = t.Name + ": " + t.Reason
		}
		return fmt.Errorf("%w refused, nothing changed: %s", ErrRestore, strings.Join(why, "; "))
	}
	if !n.meta.IsLeader() {
		return fmt.Errorf("%w: %w", ErrRestore, meta.ErrNotController)
	}
	done := 0
	for i := range plan.Topics {
		t := &plan.Topics[i]
		if t.Action != RestoreCreate && t.Action != RestoreReplace {
			continue
		}
		start := time.Now()
		_, err := n.meta.RestoreTopic(ctx, n.restoreSpec(plan, t))
		if errors.Is(err, meta.ErrTopicExists) && t.Action == RestoreCreate && n.replan(ctx, t) {
			// The cluster made the topic itself since the plan (the
			// controller creates the internal topics as it starts): an
			// empty one is replaced, as if planned so.
			_, err = n.meta.RestoreTopic(ctx, n.restoreSpec(plan, t))
		}
		if err != nil {
			return fmt.Errorf("%w: topic %s (%d of %d topics done): %w", ErrRestore, t.Name, done, len(plan.Topics), err)
		}
		// Its partitions here open at the bucket's end before the next
		// topic: a long restore shows its progress topic by topic.
		if err := n.Reconcile(); err != nil {
			n.log.Error("open restored partitions", "topic", t.Name, "err", err)
		}
		done++
		n.log.Info("topic restored from the bucket", "topic", t.Name, "id", format.HexID(t.ID), "action", string(t.Action),
			"partitions", len(t.Partitions), "bytes", t.Bytes(), "took", time.Since(start).Round(time.Millisecond))
		if progress != nil {
			progress(t, time.Since(start))
		}
	}
	if done > 0 && n.groups != nil {
		// The coordinators read the restored offsets and transaction
		// state back now rather than at the reconcile loop's next turn.
		n.SyncGroups(ctx)
		n.SyncTxns(ctx)
	}
	return nil
}

// restoreSpec is the metadata command of t, a topic of plan.
func (n *Node) restoreSpec(plan *RestorePlan, t *TopicRestore) meta.RestoreSpec {
	spec := meta.RestoreSpec{
		Topic: meta.TopicSpec{
			Name: t.Name, ID: t.ID, Internal: t.Internal, Partitions: int32(len(t.Partitions)),
			ReplicationFactor: t.ReplicationFactor, Configs: maps.Clone(t.Configs),
		},
		MinProducerID: plan.NextProducerID,
		Replace:       t.Action == RestoreReplace,
		ReplaceID:     t.replaceID,
	}
	keep := true
	for _, p := range t.Partitions {
		spec.LeaderEpochs = append(spec.LeaderEpochs, p.LeaderEpoch)
		spec.Topic.Assignment = append(spec.Topic.Assignment, p.Replicas)
		keep = keep && p.Replicas != nil
	}
	if !keep {
		spec.Topic.Assignment = nil
	}
	return spec
}

// replan turns t, planned as a create, into the replacement of the
// internal topic of its name this cluster made since the plan, when that
// one is empty and as many partitions; it reports whether it did.
func (n *Node) replan(ctx context.Context, t *TopicRestore) bool {
	have, ok := n.meta.State().Topics[t.Name]
	if !ok || !have.Internal || !t.Internal || have.ID == t.ID || len(have.Partitions) != len(t.Partitions) {
		return false
	}
	if why := n.internalData(ctx, have); why != "" {
		return false
	}
	t.Action, t.replaceID = RestoreReplace, have.ID
	for i := range t.Partitions {
		t.Partitions[i].LeaderEpoch = max(t.Partitions[i].LeaderEpoch, have.Partitions[i].LeaderEpoch+1)
	}
	return true
}

// AdoptBucketCluster is the cluster id a node started to restore from its
// bucket (serve --restore) takes: the one the bucket's cluster object
// names, else its newest checkpoint's, so that the restored cluster may
// write to the bucket (which refuses another cluster's writes). configured
// is cluster.id, "" when not set; one that differs is refused. The bucket
// must hold a checkpoint: without one there is nothing to restore.
func AdoptBucketCluster(ctx context.Context, tc TierConfig, configured string) (string, error) {
	if tc.Store == nil {
		return "", fmt.Errorf("%w: no object store is configured to restore from", ErrRestore)
	}
	where := tc.Where
	if where == "" {
		where = "the object store"
	}
	ck, _, err := tier.LatestCheckpoint(ctx, tc.Store)
	if errors.Is(err, tier.ErrNoCheckpoint) {
		return "", fmt.Errorf("%w: bucket %s holds no metadata checkpoint, so there is nothing to restore from", ErrRestore, where)
	}
	if err != nil {
		return "", fmt.Errorf("%w: bucket %s: %w", ErrRestore, where, err)
	}
	id := ck.ClusterID
	bc, ok, err := tier.BucketCluster(ctx, tc.Store)
	if err != nil {
		return "", fmt.Errorf("%w: bucket %s: %w", ErrRestore, where, err)
	}
	if ok {
		id = bc.ClusterID
	}
	if configured != "" && configured != id {
		return "", fmt.Errorf("%w: cluster.id is %s, but bucket %s belongs to cluster %s, which a restore adopts: drop cluster.id or set it to %s", ErrRestore, configured, where, id, id)
	}
	return id, nil
}

// RestoreAtStart restores, on the controller, every topic of the bucket's
// newest checkpoint into a cluster that has no topic of its own yet (serve
// --restore): a fresh cluster restores once, on its first start, and a
// later start (or a node that is not the controller) finds the topics
// there and does nothing. It waits, up to restoreAtStartWait, for as many
// brokers to register as the checkpoint's replication factors need. It
// runs until the restore is done or refused, or the node closes.
func (n *Node) RestoreAtStart() {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	begun := time.Now()
	var retryAt time.Time
	backoff := time.Second
	for {
		if hasOwnTopics(n.meta.State()) {
			return
		}
		if n.meta.IsLeader() && !time.Now().Before(retryAt) {
			done, failed := n.restoreAtStartOnce(time.Since(begun) > restoreAtStartWait)
			if done {
				return
			}
			if failed {
				// The store may be down for a while: ask it less often.
				retryAt = time.Now().Add(backoff)
				backoff = min(2*backoff, 30*time.Second)
			}
		}
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// restoreAtStartWait bounds how long a restore at start waits for brokers
// to register before it plans with those there are (and a topic whose
// replication factor they cannot meet is refused).
const restoreAtStartWait = time.Minute

// restoreAtStartOnce plans and applies the restore; done is false when it
// should be tried again: too few brokers yet, or a failure that may pass
// (failed: a store that did not answer, a restore cut short).
func (n *Node) restoreAtStartOnce(waited bool) (done, failed bool) {
	ctx, cancel := context.WithTimeout(n.ctx, time.Hour)
	defer cancel()
	if store := n.restoreStore(); store != nil {
		// A cluster that has had topics of its own and deleted them all
		// is not a fresh one: --restore left on in its start-up must not
		// bring an old history's topics back over its own.
		own, _, err := tier.HistoryCheckpoint(ctx, store, n.meta.State().HistoryID)
		if err == nil && own.NamesUserTopic() {
			n.log.Info("restore at start: this cluster has had topics of its own; nothing restored", "history", own.History)
			return true, false
		}
	}
	plan, err := n.PlanRestore(ctx, nil, "")
	if err != nil {
		if n.ctx.Err() != nil {
			return true, false
		}
		if errors.Is(err, tier.ErrNoCheckpoint) || errors.Is(err, format.ErrCheckpoint) {
			n.log.Error("restore at start: nothing restored", "err", err)
			return true, false
		}
		n.log.Warn("restore at start: the bucket could not be read; trying again", "err", err)
		return false, true
	}
	if refused := plan.Refused(); len(refused) > 0 {
		if !waited && slices.ContainsFunc(refused, func(t TopicRestore) bool { return strings.HasPrefix(t.Reason, "replication factor") }) {
			return false, false // brokers may still be registering
		}
		for _, t := range refused {
			n.log.Error("restore at start refused: nothing restored", "checkpoint", plan.Checkpoint, "topic", t.Name, "reason", t.Reason)
		}
		return true, false
	}
	start := time.Now()
	n.log.Info("restoring the cluster from the bucket", "checkpoint", plan.Checkpoint, "topics", len(plan.Topics))
	if err := n.Restore(ctx, plan, nil); err != nil {
		n.log.Error("restore at start failed; trying again", "err", err)
		return false, true
	}
	n.log.Info("cluster restored from the bucket", "checkpoint", plan.Checkpoint, "topics", len(plan.Topics), "took", time.Since(start).Round(time.Millisecond))
	for _, o := range plan.Others {
		if len(o.Topics) > 0 {
			n.log.Warn("restore at start: another metadata history of the bucket names topics not restored; restore them with strata cluster restore --history",
				"history", o.History, "written", time.UnixMilli(o.WrittenMs).UTC().Format(time.RFC3339), "topics", strings.Join(o.Topics, ","))
		}
	}
	return true, false
}

// hasOwnTopics reports whether st has a topic that is not internal.
func hasOwnTopics(st *meta.State) bool {
	for _, t := range st.Topics {
		if !t.Internal {
			return true
		}
	}
	return false
}
