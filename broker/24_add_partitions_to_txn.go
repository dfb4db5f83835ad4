package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/node"
	"strata/broker/txn"
)

// AddPartitionsToTxn: v0-5
//
// A transactional producer adds the partitions it is about to write to its
// transaction (v0-3, one transactional id); the first add starts the
// transaction and its timeout. The answer waits until the change is
// committed to __transaction_state. A producer whose previous transaction
// is still writing its markers waits for it to complete (at most 100 ms)
// instead of being answered CONCURRENT_TRANSACTIONS at once, which its
// client would retry only 20 ms later. A partition that does not exist gets
// UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, as
// in Kafka; a coordinator error applies to every partition. So does a
// partition of a read replica, which takes no writes: POLICY_VIOLATION
// (node.CheckTxnWrite), before the coordinator records anything.
//
// From v4 the request batches transactional ids and is sent by brokers: a
// partition leader asks, before appending a transactional batch, whether
// the partition is in the producer's ongoing transaction (VerifyOnly,
// KIP-890 part 1), and gets TRANSACTION_ABORTABLE for one that is not. A
// v4+ add that is not verify-only adds the partitions for the producer; at
// v5 it marks the client as a KIP-890 part 2 one.
//
// Authorization (Kafka's): v4+ comes from brokers and needs CLUSTER_ACTION
// (else the top-level CLUSTER_AUTHORIZATION_FAILED); v0-3 need WRITE on
// the transactional id (else every partition is
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and WRITE on each topic, which
// internal topics never have (else TOPIC_AUTHORIZATION_FAILED, the others
// OPERATION_NOT_ATTEMPTED).
//
// Version notes: v1 no change; v2 PRODUCER_FENCED for fenced epochs
// (KIP-588; v0-1 get INVALID_PRODUCER_EPOCH); v3 flexible; v4 batched,
// top-level error (KIP-890); v5 TV2 adds.
func init() { register(kmsg.AddPartitionsToTxn, 0, 5, (*Broker).handleAddPartitionsToTxn) }

func (b *Broker) handleAddPartitionsToTxn(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.AddPartitionsToTxnRequest)
	resp := r.ResponseKind().(*kmsg.AddPartitionsToTxnResponse)
	if r.Version >= 4 && !b.authorizedCluster(req, acl.ClusterAction) {
		resp.ErrorCode, _ = b.answerError(kmsg.AddPartitionsToTxn, kerr.ClusterAuthorizationFailed)
		return resp, nil
	}
	if r.Version < 4 {
		rt := kmsg.NewAddPartitionsToTxnRequestTransaction()
		rt.TransactionalID, rt.ProducerID, rt.ProducerEpoch = r.TransactionalID, r.ProducerID, r.ProducerEpoch
		for _, t := range r.Topics {
			tt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
			tt.Topic, tt.Partitions = t.Topic, t.Partitions
			rt.Topics = append(rt.Topics, tt)
		}
		writable := b.topicAuth(req, acl.Write).ok
		if !b.authorized(req, acl.Write, acl.TransactionalID, r.TransactionalID) {
			writable = nil // every partition refused
		}
		out := b.addPartitionsToTxn(&rt, r.Version, writable)
		for _, t := range out.Topics {
			ct := kmsg.NewAddPartitionsToTxnResponseTopic()
			ct.Topic = t.Topic
			for _, p := range t.Partitions {
				cp := kmsg.NewAddPartitionsToTxnResponseTopicPartition()
				cp.Partition, cp.ErrorCode = p.Partition, p.ErrorCode
				ct.Partitions = append(ct.Partitions, cp)
			}
			resp.Topics = append(resp.Topics, ct)
		}
		return resp, nil
	}
	for i := range r.Transactions {
		resp.Transactions = append(resp.Transactions, b.addPartitionsToTxn(&r.Transactions[i], r.Version, nil))
	}
	return resp, nil
}

// addPartitionsToTxn answers one transaction of an AddPartitionsToTxn. A
// client's (v0-3) comes with writable, whether it may write to a topic,
// nil when it may not write for the transactional id; a broker's with
// nothing to check.
func (b *Broker) addPartitionsToTxn(rt *kmsg.AddPartitionsToTxnRequestTransaction, version int16, writable func(string) bool) kmsg.AddPartitionsToTxnResponseTransaction {
	out := kmsg.NewAddPartitionsToTxnResponseTransaction()
	out.TransactionalID = rt.TransactionalID
	var parts []txn.TopicPartition
	codes := make(map[txn.TopicPartition]int16)
	refused := false
	client := version < 4
	for _, t := range rt.Topics {
		mt, ok := b.node.TopicByName(t.Topic)
		denied := client && (writable == nil || t.Topic == offsetsTopic || t.Topic == node.TxnStateTopic || !writable(t.Topic))
		for _, p := range t.Partitions {
			tp := txn.TopicPartition{Topic: t.Topic, Partition: p}
			parts = append(parts, tp)
			if client && writable == nil {
				codes[tp] = kerr.TransactionalIDAuthorizationFailed.Code
				refused = true
			} else if denied {
				codes[tp] = kerr.TopicAuthorizationFailed.Code
				refused = true
			} else if !ok || p < 0 || int(p) >= len(mt.Partitions) {
				codes[tp] = kerr.UnknownTopicOrPartition.Code
				refused = true
			} else if err := node.CheckTxnWrite(mt); err != nil {
				codes[tp] = errorCode(err)
				refused = true
			}
		}
	}
	setAll := func(code int16) {
		for _, tp := range parts {
			if _, set := codes[tp]; !set {
				codes[tp] = code
			}
		}
	}
	switch {
	case refused:
		setAll(kerr.OperationNotAttempted.Code)
	case b.txns == nil:
		setAll(kerr.CoordinatorNotAvailable.Code)
	case rt.VerifyOnly:
		res, err := b.txns.VerifyPartitions(rt.TransactionalID, rt.ProducerID, rt.ProducerEpoch, parts)
		if err != nil {
			setAll(err.Code)
			break
		}
		for tp, e := range res {
			if e != nil {
				codes[tp] = e.Code
			}
		}
		setAll(0)
	default:
		res := b.node.RetryWhileCompleting(func() txn.AddPartitionsResult {
			return b.txns.AddPartitions(txn.AddPartitionsRequest{
				TransactionalID: rt.TransactionalID,
				ProducerID:      rt.ProducerID,
				ProducerEpoch:   rt.ProducerEpoch,
				Partitions:      parts,
				Version:         version,
			})
		})
		var err error
		if res.Err != nil {
			err = res.Err
		} else if res.Transition != nil {
			ctx, cancel := context.WithTimeout(b.ctx, node.TxnWriteTimeout)
			err = b.node.WriteTxnTransition(ctx, res.Transition)
			cancel()
		}
		setAll(errorCode(err))
	}
	// The response lists topics in the request's order.
	for _, g := range byTopic(parts) {
		t := kmsg.NewAddPartitionsToTxnResponseTransactionTopic()
		t.Topic = g[0].Topic
		for _, tp := range g {
			p := kmsg.NewAddPartitionsToTxnResponseTransactionTopicPartition()
			p.Partition, p.ErrorCode = tp.Partition, codes[tp]
			if p.ErrorCode != 0 {
				b.metrics.countError(kmsg.AddPartitionsToTxn, p.ErrorCode)
			}
			t.Partitions = append(t.Partitions, p)
		}
		out.Topics = append(out.Topics, t)
	}
	return out
}
