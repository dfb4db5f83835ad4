package broker

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

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
// Not done: v5, where the commit itself adds the group to the transaction
// (KIP-890 part 2: the client still sends AddOffsetsToTxn); v6 (topic
// ids, KIP-1319).
func init() { register(kmsg.TxnOffsetCommit, 0, 4, (*Broker).handleTxnOffsetCommit) }

func (b *Broker) handleTxnOffsetCommit(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.TxnOffsetCommitRequest)
	var resp *kmsg.TxnOffsetCommitResponse
	if e := b.verifyTxnOffsets(r); e != nil {
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
	} else {
		resp = b.groups.TxnOffsetCommit(b.ctx, r)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			b.metrics.countError(kmsg.TxnOffsetCommit, p.ErrorCode)
		}
	}
	return resp, nil
}

// verifyTxnOffsets asks the transaction coordinator whether the group's
// offsets partition is in the producer's ongoing transaction. Requests the
// group coordinator answers by itself (not the coordinator here, a bad
// group or producer id) are left to it. Errors are answered as Kafka's
// coordinator answers them: a fenced producer INVALID_PRODUCER_EPOCH, a
// partition not in the transaction INVALID_TXN_STATE (TRANSACTION_ABORTABLE
// needs v5), and a transaction coordinator that could not answer
// COORDINATOR_NOT_AVAILABLE, so the client retries.
func (b *Broker) verifyTxnOffsets(r *kmsg.TxnOffsetCommitRequest) *kerr.Error {
	if r.Group == "" || r.ProducerID < 0 || r.ProducerEpoch < 0 {
		return nil
	}
	index := b.groups.PartitionFor(r.Group)
	if !b.groups.Leads(index) {
		return nil
	}
	tp := txn.TopicPartition{Topic: offsetsTopic, Partition: index}
	err := b.verifyTxn(b.ctx, r.TransactionalID, r.ProducerID, r.ProducerEpoch, []txn.TopicPartition{tp})[tp]
	if err == nil {
		return nil
	}
	e := txnOffsetsVerifyCode(err)
	if e == kerr.CoordinatorNotAvailable {
		b.log.Debug("transactional offset commit not verified", "group", r.Group, "producer_id", r.ProducerID, "err", err)
	}
	return e
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
