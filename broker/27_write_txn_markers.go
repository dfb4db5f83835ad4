package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/node"
	"strata/broker/txn"
)

// WriteTxnMarkers: v0-2
//
// A transaction coordinator asks the leader of each partition of an ended
// transaction to append its END_TXN marker (a control batch with the
// producer id and epoch, commit or abort, and the coordinator's epoch).
// The leader answers once the marker is committed (acks=all). A marker
// on a __consumer_offsets partition makes the group coordinator apply or
// drop the producer's pending transactional offsets. An operator aborts a
// hanging transaction the same way (`strata txn abort`,
// kafka-transactions.sh abort). A marker from an older coordinator epoch
// than the producer's last is TRANSACTION_COORDINATOR_FENCED, from an older
// producer epoch INVALID_PRODUCER_EPOCH; a partition this node does not
// lead is NOT_LEADER_OR_FOLLOWER.
//
// Version notes: v1 flexible; v2 TransactionVersion per marker (KIP-1228),
// which changes nothing here.
//
// Authorization (Kafka's): ALTER or CLUSTER_ACTION on the cluster, else
// every partition is CLUSTER_AUTHORIZATION_FAILED.
func init() { register(kmsg.WriteTxnMarkers, 0, 2, (*Broker).handleWriteTxnMarkers) }

func (b *Broker) handleWriteTxnMarkers(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.WriteTxnMarkersRequest)
	resp := r.ResponseKind().(*kmsg.WriteTxnMarkersResponse)
	ctx, cancel := context.WithTimeout(b.ctx, node.TxnWriteTimeout)
	defer cancel()
	allowed := b.allowed(req, acl.Alter, acl.Cluster, acl.ClusterName) || b.authorizedCluster(req, acl.ClusterAction)
	for _, m := range r.Markers {
		var tps []txn.TopicPartition
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				tps = append(tps, txn.TopicPartition{Topic: t.Topic, Partition: p})
			}
		}
		var errs map[txn.TopicPartition]error
		if allowed {
			errs = b.node.WriteMarkersLocal(ctx, m.ProducerID, m.ProducerEpoch, m.Committed, m.CoordinatorEpoch, tps)
		} else {
			errs = map[txn.TopicPartition]error{}
			for _, tp := range tps {
				errs[tp] = kerr.ClusterAuthorizationFailed
			}
		}
		rm := kmsg.NewWriteTxnMarkersResponseMarker()
		rm.ProducerID = m.ProducerID
		for _, t := range m.Topics {
			rt := kmsg.NewWriteTxnMarkersResponseMarkerTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewWriteTxnMarkersResponseMarkerTopicPartition()
				rp.Partition = p
				if err := errs[txn.TopicPartition{Topic: t.Topic, Partition: p}]; err != nil {
					rp.ErrorCode, _ = b.answerError(kmsg.WriteTxnMarkers, err)
				}
				rt.Partitions = append(rt.Partitions, rp)
			}
			rm.Topics = append(rm.Topics, rt)
		}
		resp.Markers = append(resp.Markers, rm)
	}
	return resp, nil
}
