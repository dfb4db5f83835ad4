package broker

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/node"
	"strata/broker/partition"
	"strata/broker/txn"
)

// TxnOffsetCommit: v0-4
//
// Writes a transaction's offsets for a group to the group's
// __consumer_offsets partition as one transactional batch of the producer
// (no sequence check, the epoch fences zombies) and answers once it is
// committed (acks=all). The offsets stay invisible to OffsetFetch until
// the transaction's marker on that partition commits them, and are dropped
// if it aborts. Before writing, the transaction coordinator is asked
// whether the partition is in the producer's transaction (KIP-890 part 1,
// as Kafka 3.6+ does), so a late retry cannot open a transaction on it
// that nobody will end.
//
// Version notes: v2 leader epoch per partition; v3 flexible, generation,
// member id and group.instance.id (KIP-447): a member of an older
// generation is refused as by OffsetCommit, and a request without them is
// accepted whatever the group's state.
//
// Authorization (Kafka's): WRITE on the transactional id, else every
// partition is TRANSACTIONAL_ID_AUTHORIZATION_FAILED; READ on the group,
// else GROUP_AUTHORIZATION_FAILED; READ on each topic, else its
// partitions are TOPIC_AUTHORIZATION_FAILED.
//
// Not done: v5, where the commit itself adds the group to the transaction
// (KIP-890 part 2: the client still sends AddOffsetsToTxn); v6 (topic
// ids, KIP-1319).
func init() { register(kmsg.TxnOffsetCommit, 0, 4, (*Broker).handleTxnOffsetCommit) }

func (b *Broker) handleTxnOffsetCommit(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.TxnOffsetCommitRequest)
	var resp *kmsg.TxnOffsetCommitResponse
	var refused []kmsg.TxnOffsetCommitRequestTopic
	var p *partition.Partition
	var tx *partition.TxnAppend
	var e *kerr.Error
	switch {
	case !b.authorized(req, acl.Write, acl.TransactionalID, r.TransactionalID):
		e = kerr.TransactionalIDAuthorizationFailed
	case !b.authorized(req, acl.Read, acl.Group, r.Group):
		e = kerr.GroupAuthorizationFailed
	default:
		refused = splitTopics(&r.Topics, func(t *kmsg.TxnOffsetCommitRequestTopic) string { return t.Topic }, b.topicAuth(req, acl.Read).ok)
		if len(r.Topics) == 0 && len(refused) > 0 {
			resp = r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
			break
		}
		p, tx, e = b.verifyTxnOffsets(r)
	}
	switch {
	case resp != nil:
	case e != nil:
		resp = r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, t := range r.Topics {
			rt := kmsg.NewTxnOffsetCommitResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, e.Code
				rt.Partitions = append(rt.Partitions, rp)
			}
			resp.Topics = append(resp.Topics, rt)
		}
	default:
		ctx := b.ctx
		if tx != nil {
			ctx = node.WithTxnAppend(ctx, tx)
		}
		resp = b.groups.TxnOffsetCommit(ctx, r)
		if tx != nil && tx.Guard != nil && !anyCommitted(resp) {
			// Refused before its append (a stale member, an unknown
			// partition): nothing will use the verification.
			p.DropTxnVerification(tx.PID, tx.Guard)
		}
	}
	for _, t := range refused {
		rt := kmsg.NewTxnOffsetCommitResponseTopic()
		rt.Topic = t.Topic
		for _, p := range t.Partitions {
			rp := kmsg.NewTxnOffsetCommitResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, kerr.TopicAuthorizationFailed.Code
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			b.metrics.countError(kmsg.TxnOffsetCommit, p.ErrorCode)
		}
	}
	return resp, nil
}

func anyCommitted(resp *kmsg.TxnOffsetCommitResponse) bool {
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.ErrorCode == 0 {
				return true
			}
		}
	}
	return false
}

// verifyTxnOffsets asks the transaction coordinator whether the group's
// offsets partition is in the producer's ongoing transaction (KIP-890
// part 1), as a produce's transactional batch is verified: not at all if
// the producer's transaction is already ongoing on the partition, else
// with a guard (startTxnVerification) that a marker written meanwhile
// voids, so that the append that follows is refused rather than open a
// transaction nobody will end. It returns the offsets partition and what
// the append must present. Requests the group coordinator answers by
// itself (not the coordinator here, a bad group or producer id) are left
// to it.
func (b *Broker) verifyTxnOffsets(r *kmsg.TxnOffsetCommitRequest) (*partition.Partition, *partition.TxnAppend, *kerr.Error) {
	if r.Group == "" || r.ProducerID < 0 || r.ProducerEpoch < 0 {
		return nil, nil, nil
	}
	index := b.groups.PartitionFor(r.Group)
	p := b.partition(offsetsTopic, index)
	// Never written unverified: a partition this node does not lead, or
	// has not loaded yet, is answered as the group coordinator would, and
	// the client retries.
	switch {
	case p == nil || !b.node.LeadsOffsets(index):
		return nil, nil, kerr.NotCoordinator
	case !b.groups.Leads(index):
		return nil, nil, kerr.CoordinatorLoadInProgress
	}
	tx := &partition.TxnAppend{PID: r.ProducerID, Epoch: r.ProducerEpoch}
	var err error
	if tx.Guard, err = p.StartTxnVerification(tx.PID, tx.Epoch); err != nil {
		return nil, nil, nil // no longer the leader: the coordinator's append says so
	}
	if tx.Guard == nil {
		return p, tx, nil
	}
	tp := txn.TopicPartition{Topic: offsetsTopic, Partition: index}
	if err := b.verifyTxn(b.ctx, r.TransactionalID, r.ProducerID, r.ProducerEpoch, []txn.TopicPartition{tp})[tp]; err != nil {
		p.DropTxnVerification(tx.PID, tx.Guard)
		e := txnOffsetsVerifyCode(err)
		if e == kerr.CoordinatorNotAvailable {
			b.log.Debug("transactional offset commit not verified", "group", r.Group, "producer_id", r.ProducerID, "err", err)
		}
		return nil, nil, e
	}
	return p, tx, nil
}

// txnOffsetsVerifyCode is the answer to a TxnOffsetCommit that verifyTxn
// refused with err.
func txnOffsetsVerifyCode(err error) *kerr.Error {
	var ke *kerr.Error
	errors.As(err, &ke)
	switch ke {
	case kerr.ProducerFenced, kerr.InvalidProducerEpoch:
		return kerr.InvalidProducerEpoch
	case kerr.TransactionAbortable, kerr.InvalidTxnState:
		return kerr.InvalidTxnState
	case kerr.InvalidProducerIDMapping:
		return kerr.InvalidProducerIDMapping
	}
	return kerr.CoordinatorNotAvailable
}
