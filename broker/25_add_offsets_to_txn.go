package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/node"
	"strata/broker/txn"
)

// AddOffsetsToTxn: v0-4
//
// Adds the group's __consumer_offsets partition to the producer's
// transaction, so that the offsets it then commits with TxnOffsetCommit
// are made visible (or dropped) by the transaction's markers. The answer
// waits until the change is committed to __transaction_state.
//
// Version notes: v1 no change; v2 PRODUCER_FENCED (KIP-588; v0-1 get
// INVALID_PRODUCER_EPOCH); v3 flexible; v4 no wire change (KIP-890).
//
// Authorization (Kafka's): WRITE on the transactional id (else
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group (else
// GROUP_AUTHORIZATION_FAILED).
func init() { register(kmsg.AddOffsetsToTxn, 0, 4, (*Broker).handleAddOffsetsToTxn) }

func (b *Broker) handleAddOffsetsToTxn(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.AddOffsetsToTxnRequest)
	resp := r.ResponseKind().(*kmsg.AddOffsetsToTxnResponse)
	err := error(kerr.TransactionalIDAuthorizationFailed)
	if b.authorized(req, acl.Write, acl.TransactionalID, r.TransactionalID) {
		err = kerr.GroupAuthorizationFailed
		if b.authorized(req, acl.Read, acl.Group, r.Group) {
			err = b.addOffsetsToTxn(r)
		}
	}
	if err != nil {
		resp.ErrorCode, _ = b.answerError(kmsg.AddOffsetsToTxn, err)
	}
	return resp, nil
}

func (b *Broker) addOffsetsToTxn(r *kmsg.AddOffsetsToTxnRequest) error {
	if b.txns == nil {
		return kerr.CoordinatorNotAvailable
	}
	if r.Group == "" {
		return kerr.InvalidGroupID
	}
	res := b.node.RetryWhileCompleting(func() txn.AddPartitionsResult {
		return b.txns.AddOffsets(txn.AddOffsetsRequest{
			TransactionalID: r.TransactionalID,
			ProducerID:      r.ProducerID,
			ProducerEpoch:   r.ProducerEpoch,
			Group:           r.Group,
			Version:         r.Version,
		})
	})
	if res.Err != nil {
		return res.Err
	}
	if res.Transition == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, node.TxnWriteTimeout)
	defer cancel()
	return b.node.WriteTxnTransition(ctx, res.Transition)
}
