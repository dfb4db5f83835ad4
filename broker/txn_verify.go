package broker

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/txn"
)

// verifyTxnFunc is Broker.verifyTxn's signature.
type verifyTxnFunc func(b *Broker, ctx context.Context, txnID string, pid int64, epoch int16, parts []txn.TopicPartition) map[txn.TopicPartition]error

// testVerifyTxn, when a test sets it, answers in place of the transaction
// coordinator: tests of the partition and group sides write transactional
// data without running a transaction through the coordinator.
var testVerifyTxn atomic.Pointer[verifyTxnFunc]

// verifyTxn asks the transaction coordinator of txnID (on this node, or on
// another broker with a verification-only AddPartitionsToTxn, v4+) whether
// each of parts is in producer pid's ongoing transaction at epoch: KIP-890
// part 1, before a partition leader appends a transactional batch that
// would open a transaction on it. The answer has an entry for every
// partition of parts: nil when verified, else an error wrapping the Kafka
// code (TRANSACTION_ABORTABLE for a partition not in the transaction,
// PRODUCER_FENCED, INVALID_PRODUCER_ID_MAPPING, NOT_COORDINATOR or
// COORDINATOR_NOT_AVAILABLE when the coordinator could not answer).
func (b *Broker) verifyTxn(ctx context.Context, txnID string, pid int64, epoch int16, parts []txn.TopicPartition) map[txn.TopicPartition]error {
	if f := testVerifyTxn.Load(); f != nil {
		return (*f)(b, ctx, txnID, pid, epoch, parts)
	}
	out := make(map[txn.TopicPartition]error, len(parts))
	all := func(err error) map[txn.TopicPartition]error {
		for _, p := range parts {
			out[p] = err
		}
		return out
	}
	if b.txns == nil {
		return all(kerr.CoordinatorNotAvailable)
	}
	var coord kmsg.FindCoordinatorResponseCoordinator
	if err := b.findCoordinator(txnID, 1, &coord); err != nil {
		return all(err)
	}
	if coord.NodeID == b.cfg.NodeID {
		res, err := b.txns.VerifyPartitions(txnID, pid, epoch, parts)
		if err != nil {
			return all(err)
		}
		for _, p := range parts {
			if e := res[p]; e != nil {
				out[p] = e
			} else {
				out[p] = nil
			}
		}
		return out
	}
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.Version = 4
	rt := kmsg.NewAddPartitionsToTxnRequestTransaction()
	rt.TransactionalID, rt.ProducerID, rt.ProducerEpoch, rt.VerifyOnly = txnID, pid, epoch, true
	for _, g := range byTopic(parts) {
		t := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
		t.Topic = g[0].Topic
		for _, tp := range g {
			t.Partitions = append(t.Partitions, tp.Partition)
		}
		rt.Topics = append(rt.Topics, t)
	}
	req.Transactions = append(req.Transactions, rt)
	kresp, err := b.peerRequest(ctx, coord.NodeID, req)
	if err != nil {
		return all(fmt.Errorf("%w: verify with the coordinator at broker %d: %v", kerr.CoordinatorNotAvailable, coord.NodeID, err))
	}
	resp := kresp.(*kmsg.AddPartitionsToTxnResponse)
	if e := kerr.ErrorForCode(resp.ErrorCode); e != nil {
		return all(e)
	}
	all(fmt.Errorf("%w: the coordinator did not answer for the partition", kerr.UnknownServerError))
	for _, tr := range resp.Transactions {
		for _, t := range tr.Topics {
			for _, p := range t.Partitions {
				tp := txn.TopicPartition{Topic: t.Topic, Partition: p.Partition}
				if _, asked := out[tp]; asked {
					out[tp] = kerr.ErrorForCode(p.ErrorCode)
				}
			}
		}
	}
	return out
}
