package broker

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
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
// Version notes: v2 throttle; v3 ProducerID/ProducerEpoch in the request;
// v4 flexible; v5 no change for idempotent producers.
//
// Not done: transactional ids (no transaction coordinator yet): refused
// with INVALID_REQUEST so the client fails fast instead of retrying.
func init() { register(kmsg.InitProducerID, 0, 5, (*Broker).handleInitProducerID) }

func (b *Broker) handleInitProducerID(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.InitProducerIDRequest)
	resp := r.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if r.TransactionalID != nil {
		resp.ErrorCode = kerr.InvalidRequest.Code
		b.metrics.countError(kmsg.InitProducerID, resp.ErrorCode)
		return resp, nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	id, err := b.pids.allocate(ctx)
	if err != nil {
		b.log.Error("allocate producer id", "err", err)
		resp.ErrorCode = kerr.CoordinatorNotAvailable.Code
		b.metrics.countError(kmsg.InitProducerID, resp.ErrorCode)
		return resp, nil
	}
	resp.ProducerID, resp.ProducerEpoch = id, 0
	return resp, nil
}
