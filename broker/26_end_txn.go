package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/node"
	"strata/broker/txn"
)

// EndTxn: v0-5
//
// Commits or aborts the producer's transaction. The coordinator records
// PrepareCommit or PrepareAbort in __transaction_state and answers once
// that is committed: the outcome is then decided, and survives the
// coordinator's death. The markers are written afterwards, in the
// background, to the leader of every partition of the transaction (this
// node's own, or another broker's through WriteTxnMarkers); once all are
// written the coordinator records CompleteCommit or CompleteAbort, and
// until then the transactional id answers CONCURRENT_TRANSACTIONS.
//
// Version notes: v1 no change; v2 PRODUCER_FENCED (KIP-588; v0-1 get
// INVALID_PRODUCER_EPOCH); v3 flexible; v4 no wire change; v5 (KIP-890
// part 2): every end bumps the epoch, and the response carries the
// producer id and epoch to continue with.
//
// Authorization (Kafka's): WRITE on the transactional id, else
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
func init() { register(kmsg.EndTxn, 0, 5, (*Broker).handleEndTxn) }

func (b *Broker) handleEndTxn(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.EndTxnRequest)
	resp := r.ResponseKind().(*kmsg.EndTxnResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	err := error(kerr.TransactionalIDAuthorizationFailed)
	if b.authorized(req, acl.Write, acl.TransactionalID, r.TransactionalID) {
		err = b.endTxn(r, resp)
	}
	if err != nil {
		resp.ErrorCode, _ = b.answerError(kmsg.EndTxn, err)
		resp.ProducerID, resp.ProducerEpoch = -1, -1
	}
	return resp, nil
}

func (b *Broker) endTxn(r *kmsg.EndTxnRequest, resp *kmsg.EndTxnResponse) error {
	if b.txns == nil {
		return kerr.CoordinatorNotAvailable
	}
	ctx, cancel := context.WithTimeout(b.ctx, node.TxnWriteTimeout)
	defer cancel()
	res := b.txns.EndTxn(ctx, txn.EndTxnRequest{
		TransactionalID: r.TransactionalID,
		ProducerID:      r.ProducerID,
		ProducerEpoch:   r.ProducerEpoch,
		Commit:          r.Commit,
		Version:         r.Version,
	})
	if res.Err != nil {
		return res.Err
	}
	if res.Transition != nil {
		if err := b.node.FinishTxnTransition(ctx, res.Transition); err != nil {
			return err
		}
	}
	resp.ProducerID, resp.ProducerEpoch = res.ProducerID, res.ProducerEpoch
	return nil
}
