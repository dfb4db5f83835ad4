package broker

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/node"
	"strata/meta"
)

// AllocateProducerIds: v0 (inter-broker, KIP-730)
//
// Reserves a block of idempotent-producer ids in the metadata log for a
// broker that is not the controller. Answered only by the controller.
//
// Authorization (Kafka's): CLUSTER_ACTION on the cluster (brokers only),
// else CLUSTER_AUTHORIZATION_FAILED.
func init() { register(kmsg.AllocateProducerIDs, 0, 0, (*Broker).handleAllocateProducerIDs) }

func (b *Broker) handleAllocateProducerIDs(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.AllocateProducerIDsRequest)
	resp := r.ResponseKind().(*kmsg.AllocateProducerIDsResponse)
	if !b.authorizedCluster(req, acl.ClusterAction) {
		resp.ErrorCode, _ = b.answerError(kmsg.AllocateProducerIDs, kerr.ClusterAuthorizationFailed)
		return resp, nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, controlTimeout)
	defer cancel()
	if br, ok := b.meta.State().Brokers[r.BrokerID]; !ok || br.Epoch != r.BrokerEpoch {
		resp.ErrorCode, _ = b.answerError(kmsg.AllocateProducerIDs, fmt.Errorf("%w: broker %d epoch %d", meta.ErrStaleBrokerEpoch, r.BrokerID, r.BrokerEpoch))
		return resp, nil
	}
	first, err := b.meta.AllocateProducerIDs(ctx, node.ProducerIDBlock)
	if err != nil {
		resp.ErrorCode, _ = b.answerError(kmsg.AllocateProducerIDs, err)
		return resp, nil
	}
	resp.ProducerIDStart, resp.ProducerIDLen = first, node.ProducerIDBlock
	return resp, nil
}
