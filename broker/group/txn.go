package group

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// txnOffsets are offsets committed in transactions that have not ended
// yet (TxnOffsetCommit), by producer id. They are invisible to OffsetFetch
// until their transaction commits.
type txnOffsets map[int64]offsetTable

func (t txnOffsets) add(pid int64, topic string, partition int32, o offset) {
	ot := t[pid]
	if ot == nil {
		ot = make(offsetTable)
		t[pid] = ot
	}
	ot.set(topic, partition, o)
}

// complete ends producer pid's transaction. On commit its offsets become
// committed ones, each only where it was written to the log after the
// offset committed there: a plain commit written later wins, whatever the
// order in which the two complete (Kafka's
// GroupMetadata.completePendingTxnOffsetCommit). It returns how many
// offsets it applied.
func (t txnOffsets) complete(pid int64, commit bool, committed offsetTable) int {
	pending := t[pid]
	delete(t, pid)
	if !commit {
		return 0
	}
	n := 0
	for topic, ps := range pending {
		for p, o := range ps {
			if cur, ok := committed[topic][p]; ok && cur.logOffset > o.logOffset {
				continue
			}
			committed.set(topic, p, o)
			n++
		}
	}
	return n
}

// pending reports whether an offset of the partition waits for the end of
// a transaction.
func (t txnOffsets) pending(topic string, partition int32) bool {
	for _, ot := range t {
		if _, ok := ot[topic][partition]; ok {
			return true
		}
	}
	return false
}

// remove drops the partition's pending offsets: a tombstone written after
// them (a deleted group, OffsetDelete) wins over their later commit, as in
// Kafka's OffsetMetadataManager.
func (t txnOffsets) remove(topic string, partition int32) {
	for pid, ot := range t {
		ot.remove(topic, partition)
		if len(ot) == 0 {
			delete(t, pid)
		}
	}
}

// txnEnd is a transaction ended by a marker on an offsets partition.
type txnEnd struct {
	producerID int64
	commit     bool
}

// TxnOffsetCommit handles a TxnOffsetCommit request: the offsets are
// written to the group's partition of __consumer_offsets as one
// transactional batch of the producer, and stay pending until CompleteTxn
// ends the transaction. The caller has verified that the group's offsets
// partition is in the producer's transaction (AddOffsetsToTxn, KIP-890).
func (c *Coordinator) TxnOffsetCommit(ctx context.Context, req *kmsg.TxnOffsetCommitRequest) *kmsg.TxnOffsetCommitResponse {
	resp := req.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
	codes := make([][]int16, len(req.Topics))
	for i, t := range req.Topics {
		codes[i] = make([]int16, len(t.Partitions))
	}
	if e := c.txnCommit(ctx, req, codes); e != nil {
		setUnset(codes, e)
	}
	for i, t := range req.Topics {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for j, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = codes[i][j]
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (c *Coordinator) txnCommit(ctx context.Context, req *kmsg.TxnOffsetCommitRequest, codes [][]int16) *kerr.Error {
	if req.Group == "" {
		return kerr.InvalidGroupID
	}
	if req.ProducerID < 0 || req.ProducerEpoch < 0 {
		return kerr.InvalidProducerIDMapping
	}
	// As in Kafka, a transactional commit may create the group: producers
	// that assign partitions themselves commit without a generation.
	g, e := c.lookup(req.Group, true)
	if e != nil {
		return e
	}
	defer g.mu.Unlock()
	defer g.maybeRemoveLocked()

	// KIP-447, Kafka's ClassicGroup.validateOffsetCommit for a
	// transactional commit: a request that names a generation, member or
	// instance is checked like a heartbeat; one that names none (before
	// v3, or a producer outside the group's membership) is accepted
	// whatever the group's state, and a rebalance does not hold it up.
	named := req.Generation >= 0 || req.MemberID != "" || req.InstanceID != nil
	if named && !(req.Generation < 0 && g.state == StateEmpty) {
		if _, e := g.memberLocked(req.MemberID, req.InstanceID, req.Generation); e != nil {
			return e
		}
	}

	now := c.clock.Now().UnixMilli()
	var recs []record
	var commits []commitAt
	for i, t := range req.Topics {
		for j, p := range t.Partitions {
			epoch := p.LeaderEpoch
			if req.Version < 2 {
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
	// The group is registered as the producer's before the write, while
	// g.mu is held: a marker that lands while the batch commits (a
	// timeout abort, a fence) then finds the group, and its CompleteTxn
	// waits for g.mu, so it ends these offsets instead of missing them
	// and leaving them pending for the producer's next transaction to
	// apply. If the write fails the entry ends nothing.
	c.mu.Lock()
	m := c.mu.producers[req.ProducerID]
	if m == nil {
		m = make(map[string]int32)
		c.mu.producers[req.ProducerID] = m
	}
	m[g.id] = g.partition
	c.mu.Unlock()
	base, err := g.appendLocked(ctx, recs, producer{id: req.ProducerID, epoch: req.ProducerEpoch})
	if err != nil {
		return writeErr(err)
	}
	for _, ca := range commits {
		ca.o.logOffset = base
		g.txns.add(req.ProducerID, ca.topic, ca.partition, ca.o)
	}
	return nil
}

// CompleteTxn ends producerID's transaction on offsets partition once its
// marker is committed there (WriteTxnMarkers): on commit the offsets the
// transaction wrote to the partition's groups become visible, on abort
// they are dropped. A partition still loading applies it when the load is
// done, since the loader may have read the log before the marker was
// written; one this node does not serve ignores it (whoever loads it
// reads the marker).
func (c *Coordinator) CompleteTxn(partition int32, producerID int64, commit bool) {
	c.mu.Lock()
	switch c.mu.partitions[partition] {
	case partitionLoading:
		c.mu.ended[partition] = append(c.mu.ended[partition], txnEnd{producerID: producerID, commit: commit})
		c.mu.Unlock()
		return
	case partitionLoaded:
	default:
		c.mu.Unlock()
		return
	}
	var gs []*group
	for id, p := range c.mu.producers[producerID] {
		if p != partition {
			continue
		}
		delete(c.mu.producers[producerID], id)
		if g := c.mu.groups[id]; g != nil {
			gs = append(gs, g)
		}
	}
	if len(c.mu.producers[producerID]) == 0 {
		delete(c.mu.producers, producerID)
	}
	c.mu.Unlock()
	for _, g := range gs {
		g.mu.Lock()
		if !g.dead && g.partition == partition {
			c.commits.Add(uint64(g.txns.complete(producerID, commit, g.offsets)))
			g.maybeRemoveLocked()
		}
		g.mu.Unlock()
	}
}
