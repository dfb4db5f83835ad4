package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/meta"
)

// BrokerHeartbeat: v0-2 (inter-broker, KIP-631)
//
// Keeps a registered broker unfenced; WantShutdown starts its controlled
// shutdown, and ShouldShutdown tells it when its leaderships have moved.
// A heartbeat from an earlier incarnation is STALE_BROKER_EPOCH, after
// which the broker registers again. Answered only by the controller.
//
// Not done: WantFence and the log directory fields are ignored;
// IsCaughtUp is always true (brokers apply the metadata log through raft
// and need no catching up before they may lead).
//
// Authorization (Kafka's): CLUSTER_ACTION on the cluster (brokers only),
// else CLUSTER_AUTHORIZATION_FAILED.
func init() { register(kmsg.BrokerHeartbeat, 0, 2, (*Broker).handleBrokerHeartbeat) }

func (b *Broker) handleBrokerHeartbeat(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.BrokerHeartbeatRequest)
	resp := r.ResponseKind().(*kmsg.BrokerHeartbeatResponse)
	if !b.authorizedCluster(req, acl.ClusterAction) {
		resp.ErrorCode, _ = b.answerError(kmsg.BrokerHeartbeat, kerr.ClusterAuthorizationFailed)
		return resp, nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, controlTimeout)
	defer cancel()
	reply, err := b.meta.Heartbeat(ctx, meta.HeartbeatRequest{ID: r.BrokerID, Epoch: r.BrokerEpoch, WantShutdown: r.WantShutdown})
	if err != nil {
		resp.ErrorCode, _ = b.answerError(kmsg.BrokerHeartbeat, err)
		return resp, nil
	}
	resp.IsCaughtUp = true
	resp.IsFenced = reply.Fenced
	resp.ShouldShutdown = reply.ShouldShutdown
	return resp, nil
}
