package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/node"
	"strata/broker/txn"
)

// InitProducerID: v0-5
//
// Gives an idempotent producer a fresh producer id with epoch 0. Ids come
// from blocks reserved through the Raft metadata log, so they are never
// reused, even across restarts. A producer re-initialising with its old id
// and epoch (v3+, KIP-360) gets a new id, as Kafka does for producers
// without a transactional id: sequence state is per id, so a new id starts
// cleanly at sequence 0.
//
// With a transactional id the request goes to the id's transaction
// coordinator (this node must lead the id's __transaction_state
// partition: NOT_COORDINATOR otherwise), which bumps the id's epoch and so
// fences any other producer holding it (broker/txn, docs/transactions.md
// step 2). The answer waits until the change is committed to
// __transaction_state. An id with a transaction open gets that
// transaction aborted first and CONCURRENT_TRANSACTIONS, which the client
// retries.
//
// Authorization (Kafka's): with a transactional id, WRITE on it (else
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED); without, IDEMPOTENT_WRITE on
// the cluster or WRITE on at least one topic (else
// CLUSTER_AUTHORIZATION_FAILED).
//
// Version notes: v2 throttle; v3 ProducerID/ProducerEpoch in the request
// (KIP-360); v4 flexible, and PRODUCER_FENCED instead of
// INVALID_PRODUCER_EPOCH (KIP-588); v5 no wire change (KIP-890).
func init() { register(kmsg.InitProducerID, 0, 5, (*Broker).handleInitProducerID) }

func (b *Broker) handleInitProducerID(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.InitProducerIDRequest)
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.TransactionalID != nil {
		err := error(kerr.TransactionalIDAuthorizationFailed)
		if b.authorized(req, acl.Write, acl.TransactionalID, *r.TransactionalID) {
			err = b.initTransactional(r, resp)
		}
		if err != nil {
			resp.ErrorCode, _ = b.answerError(kmsg.InitProducerID, err)
		}
		return resp, nil
	}
	if !b.mayWriteIdempotently(req) {
		resp.ErrorCode, _ = b.answerError(kmsg.InitProducerID, kerr.ClusterAuthorizationFailed)
		return resp, nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	id, err := b.node.AllocateProducerID(ctx)
	if err != nil {
		b.log.Error("allocate producer id", "err", err)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		b.metrics.countError(kmsg.InitProducerID, resp.ErrorCode)
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp, nil
}

// initTransactional answers an InitProducerId with a transactional id.
func (b *Broker) initTransactional(r *kmsg.InitProducerIDRequest, resp *kmsg.InitProducerIDResponse) error {
	if b.txns == nil {
		return kerr.CoordinatorNotAvailable
	}
	// A client that skipped FindCoordinator (this node is the only one)
	// finds the coordinator ready all the same.
	if err := b.node.EnsureTxnTopic(b.ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(b.ctx, node.TxnWriteTimeout)
	defer cancel()
	res := b.txns.InitProducerID(ctx, txn.InitProducerIDRequest{
		TransactionalID: *r.TransactionalID,
		TimeoutMs:       r.TransactionTimeoutMillis,
		ProducerID:      r.ProducerID,
		ProducerEpoch:   r.ProducerEpoch,
		Version:         r.Version,
	})
	if res.Transition != nil {
		// For CONCURRENT_TRANSACTIONS this is the abort of the id's open
		// transaction; the client's retry gets the new epoch once it is
		// complete.
		if err := b.node.FinishTxnTransition(ctx, res.Transition); err != nil {
			return err
		}
	}
	if res.Err != nil {
		return res.Err
	}
	resp.ProducerID, resp.ProducerEpoch = res.ProducerID, res.ProducerEpoch
	return nil
}
