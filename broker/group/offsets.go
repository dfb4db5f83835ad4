package group

import (
	"context"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OffsetCommit handles an OffsetCommit request. Offsets are answered only
// once their records are committed to the log.
func (c *Coordinator) OffsetCommit(ctx context.Context, req *kmsg.OffsetCommitRequest) *kmsg.OffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
	codes := make([][]int16, len(req.Topics))
	for i, t := range req.Topics {
		codes[i] = make([]int16, len(t.Partitions))
	}
	if e := c.commit(ctx, req, codes); e != nil {
		setUnset(codes, e)
	}
	for i, t := range req.Topics {
		rt := kmsg.NewOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = codes[i][j]
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (c *Coordinator) commit(ctx context.Context, req *kmsg.OffsetCommitRequest, codes [][]int16) *kerr.Error {
	if req.Group == "" {
		return kerr.InvalidGroupID
	}
	// A commit without a generation comes from a consumer that assigns
	// partitions itself, or from an admin tool: it may create the group.
	simple := req.Generation < 0 && req.MemberID == ""
	g, e := c.lookup(req.Group, simple)
	if e != nil {
		return e
	}
	if g == nil {
		// An older generation of a group that no longer exists.
		return kerr.IllegalGeneration
	}
	defer g.mu.Unlock()
	defer g.maybeRemoveLocked()

	var m *member
	switch {
	case req.InstanceID != nil && g.statics[*req.InstanceID] != "" && g.statics[*req.InstanceID] != req.MemberID:
		return kerr.FencedInstanceID
	case req.Generation < 0 && g.state == StateEmpty:
	case g.state == StateCompletingRebalance:
		return kerr.RebalanceInProgress
	default:
		var ok bool
		if m, ok = g.members[req.MemberID]; !ok {
			return kerr.UnknownMemberID
		}
		if req.Generation != g.generation {
			return kerr.IllegalGeneration
		}
	}

	now := c.clock.Now().UnixMilli()
	var recs []record
	var commits []commitAt
	for i, t := range req.Topics {
		for j, p := range t.Partitions {
			epoch := p.LeaderEpoch
			if req.Version < 6 {
				epoch = -1
			}
			rec, ca, e := c.offsetRecord(g.id, t.Topic, p.Partition, p.Offset, epoch, p.Metadata, now)
			if e != nil {
				codes[i][j] = e.Code
				continue
			}
			recs = append(recs, rec)
			commits = append(commits, ca)
		}
	}
	if len(recs) == 0 {
		return nil
	}
	base, err := g.appendLocked(ctx, recs, noProducer)
	if err != nil {
		return writeErr(err)
	}
	for _, ca := range commits {
		ca.o.logOffset = base
		g.offsets.set(ca.topic, ca.partition, ca.o)
	}
	c.commits.Add(uint64(len(commits)))
	if m != nil && m.join == nil {
		g.heartbeatLocked(m)
	}
	return nil
}

// setUnset gives e to every partition of a commit answer that has no
// error of its own.
func setUnset(codes [][]int16, e *kerr.Error) {
	for i := range codes {
		for j := range codes[i] {
			if codes[i][j] == 0 {
				codes[i][j] = e.Code
			}
		}
	}
}

// commitAt is an offset to commit to a partition.
type commitAt struct {
	topicPartition
	o offset
}

// offsetRecord checks one partition's offset of a commit and returns its
// record, or the partition's error.
func (c *Coordinator) offsetRecord(groupID, topic string, partition int32, at int64, leaderEpoch int32, metadata *string, now int64) (record, commitAt, *kerr.Error) {
	meta := ""
	if metadata != nil {
		meta = *metadata
	}
	switch {
	case len(meta) > c.cfg.OffsetMetadataMaxBytes:
		return record{}, commitAt{}, kerr.OffsetMetadataTooLarge
	case !c.cfg.PartitionExists(topic, partition):
		return record{}, commitAt{}, kerr.UnknownTopicOrPartition
	}
	o := offset{offset: at, leaderEpoch: leaderEpoch, metadata: meta, commitTime: now}
	return record{key: offsetKey(groupID, topic, partition), value: offsetValue(o)}, commitAt{topicPartition{topic, partition}, o}, nil
}

// fetchedTopic is one topic of an OffsetFetch answer, in either of the
// response's layouts.
type fetchedTopic struct {
	topic string
	parts []fetchedPartition
}

type fetchedPartition struct {
	partition int32
	o         offset // noOffset where none is committed
	code      int16  // UNSTABLE_OFFSET_COMMIT, or 0
}

var noOffset = offset{offset: -1, leaderEpoch: -1}

// fetch returns a group's committed offsets for the requested topics, a
// topic named twice answered once, or for all of them when topics is nil.
// With an error, the requested partitions are returned with noOffset. With
// requireStable (KIP-447), a partition with an offset pending in a
// transaction is UNSTABLE_OFFSET_COMMIT: the consumer retries rather than
// start from an offset that its commit may replace.
func (c *Coordinator) fetch(groupID string, topics []kmsg.OffsetFetchRequestGroupTopic, requireStable bool) ([]fetchedTopic, *kerr.Error) {
	g, e := c.lookup(groupID, false)
	if g != nil {
		defer g.mu.Unlock()
	}
	var out []fetchedTopic
	unstable := func(topic string, partition int32) bool {
		return requireStable && g.txns.pending(topic, partition)
	}
	if topics == nil {
		if g == nil {
			return nil, e
		}
		names := make([]string, 0, len(g.offsets))
		for t := range g.offsets {
			names = append(names, t)
		}
		sort.Strings(names)
		for _, t := range names {
			ft := fetchedTopic{topic: t}
			for p, o := range g.offsets[t] {
				fp := fetchedPartition{partition: p, o: o}
				if unstable(t, p) {
					fp.o, fp.code = noOffset, kerr.UnstableOffsetCommit.Code
				}
				ft.parts = append(ft.parts, fp)
			}
			slices.SortFunc(ft.parts, func(a, b fetchedPartition) int { return int(a.partition - b.partition) })
			out = append(out, ft)
		}
		return out, nil
	}
	at := make(map[string]int, len(topics))
	for _, t := range topics {
		i, ok := at[t.Topic]
		if !ok {
			i = len(out)
			at[t.Topic] = i
			out = append(out, fetchedTopic{topic: t.Topic})
		}
		for _, p := range t.Partitions {
			fp := fetchedPartition{partition: p, o: noOffset}
			if g != nil {
				if o, ok := g.offsets[t.Topic][p]; unstable(t.Topic, p) {
					fp.code = kerr.UnstableOffsetCommit.Code
				} else if ok {
					fp.o = o
				}
			}
			out[i].parts = append(out[i].parts, fp)
		}
	}
	return out, e
}

// OffsetFetch handles an OffsetFetch request: one group before v8, a batch
// from v8 (KIP-709). RequireStable (v7+, KIP-447) is answered per
// partition, as Kafka does in every version.
func (c *Coordinator) OffsetFetch(req *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	if req.Version < 8 {
		var topics []kmsg.OffsetFetchRequestGroupTopic
		if req.Topics != nil {
			topics = make([]kmsg.OffsetFetchRequestGroupTopic, 0, len(req.Topics))
			for _, t := range req.Topics {
				topics = append(topics, kmsg.OffsetFetchRequestGroupTopic{Topic: t.Topic, Partitions: t.Partitions})
			}
		}
		fts, e := c.fetch(req.Group, topics, req.RequireStable)
		var code int16
		if e != nil {
			if req.Version >= 2 {
				resp.ErrorCode = e.Code
				return resp
			}
			// v1 has no top-level error: every partition carries it.
			code = e.Code
		}
		for _, ft := range fts {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = ft.topic
			for _, fp := range ft.parts {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode = fp.partition, fp.code
				if code != 0 {
					rp.ErrorCode = code
				}
				rp.Offset, rp.LeaderEpoch, rp.Metadata = fp.o.offset, fp.o.leaderEpoch, kmsg.StringPtr(fp.o.metadata)
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
		return resp
	}
	for _, rg := range req.Groups {
		out := kmsg.NewOffsetFetchResponseGroup()
		out.Group = rg.Group
		fts, e := c.fetch(rg.Group, rg.Topics, req.RequireStable)
		if e != nil {
			out.ErrorCode = e.Code
			fts = nil
		}
		for _, ft := range fts {
			rt := kmsg.NewOffsetFetchResponseGroupTopic()
			rt.Topic = ft.topic
			for _, fp := range ft.parts {
				rp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				rp.Partition, rp.ErrorCode = fp.partition, fp.code
				rp.Offset, rp.LeaderEpoch, rp.Metadata = fp.o.offset, fp.o.leaderEpoch, kmsg.StringPtr(fp.o.metadata)
				rt.Partitions = append(rt.Partitions, rp)
			}
			out.Topics = append(out.Topics, rt)
		}
		resp.Groups = append(resp.Groups, out)
	}
	return resp
}

// OffsetDelete handles an OffsetDelete request (KIP-496): committed
// offsets of partitions the group does not consume are deleted with
// tombstones.
func (c *Coordinator) OffsetDelete(ctx context.Context, req *kmsg.OffsetDeleteRequest) *kmsg.OffsetDeleteResponse {
	resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
	g, e := c.lookup(req.Group, false)
	if e == nil && g == nil {
		e = kerr.GroupIDNotFound
	}
	if e != nil {
		resp.ErrorCode = e.Code
		return resp
	}
	defer g.mu.Unlock()
	subscribed := map[string]bool{}
	if len(g.members) > 0 {
		if g.protocolType != "consumer" {
			resp.ErrorCode = kerr.NonEmptyGroup.Code
			return resp
		}
		for _, m := range g.members {
			var meta kmsg.ConsumerMemberMetadata
			if err := meta.ReadFrom(m.metadataFor(g.protocol)); err == nil {
				for _, t := range meta.Topics {
					subscribed[t] = true
				}
			}
		}
	}
	var recs []record
	var dels []topicPartition
	for _, t := range req.Topics {
		rt := kmsg.NewOffsetDeleteResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewOffsetDeleteResponseTopicPartition()
			rp.Partition = p.Partition
			switch _, ok := g.offsets[t.Topic][p.Partition]; {
			case subscribed[t.Topic]:
				rp.ErrorCode = kerr.GroupSubscribedToTopic.Code
			case ok || g.txns.pending(t.Topic, p.Partition):
				recs = append(recs, record{key: offsetKey(g.id, t.Topic, p.Partition)})
				dels = append(dels, topicPartition{t.Topic, p.Partition})
			}
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	if len(recs) > 0 {
		if _, err := g.appendLocked(ctx, recs, noProducer); err != nil {
			resp.ErrorCode = writeErr(err).Code
			return resp
		}
		for _, d := range dels {
			g.offsets.remove(d.topic, d.partition)
			g.txns.remove(d.topic, d.partition)
		}
	}
	return resp
}

// ExpireOffsets applies offsets.retention.minutes: the offsets of a group
// that has been empty for the retention period are deleted, as are, in a
// group that never had members, offsets committed longer ago than that.
// An offset pending in a transaction is kept, with the committed one of
// its partition, until the transaction ends: as in Kafka, whatever may
// still be committed is not expired. An empty group left without offsets
// is deleted. Call it periodically.
func (c *Coordinator) ExpireOffsets(ctx context.Context) {
	cutoff := c.clock.Now().Add(-c.cfg.OffsetsRetention)
	for _, g := range c.groups() {
		g.mu.Lock()
		if g.dead || g.state != StateEmpty || len(g.pending) > 0 {
			g.mu.Unlock()
			continue
		}
		var recs []record
		var dels []topicPartition
		emptyExpired := !g.stateSince.After(cutoff)
		for t, ps := range g.offsets {
			for p, o := range ps {
				expired := emptyExpired
				if g.protocolType == "" {
					expired = o.commitTime <= cutoff.UnixMilli()
				}
				expired = expired && !g.txns.pending(t, p)
				if expired {
					recs = append(recs, record{key: offsetKey(g.id, t, p)})
					dels = append(dels, topicPartition{t, p})
				}
			}
		}
		groupGone := g.offsets.count() == len(dels) && len(g.txns) == 0
		if groupGone {
			recs = append(recs, record{key: groupKey(g.id)})
		}
		if len(recs) > 0 {
			if _, err := g.appendLocked(ctx, recs, noProducer); err != nil {
				g.mu.Unlock()
				continue
			}
			for _, d := range dels {
				g.offsets.remove(d.topic, d.partition)
			}
			c.log.Info("expired offsets", "group", g.id, "offsets", len(dels), "group_deleted", groupGone)
		}
		if groupGone {
			c.removeGroupLocked(g)
		}
		g.mu.Unlock()
	}
}

type topicPartition struct {
	topic     string
	partition int32
}

// offsetTable holds committed offsets by topic and partition.
type offsetTable map[string]map[int32]offset

func (t offsetTable) set(topic string, partition int32, o offset) {
	ps := t[topic]
	if ps == nil {
		ps = make(map[int32]offset)
		t[topic] = ps
	}
	ps[partition] = o
}

// remove deletes an offset, and its topic with its last offset.
func (t offsetTable) remove(topic string, partition int32) {
	if ps := t[topic]; ps != nil {
		delete(ps, partition)
		if len(ps) == 0 {
			delete(t, topic)
		}
	}
}

func (t offsetTable) count() int {
	n := 0
	for _, ps := range t {
		n += len(ps)
	}
	return n
}
