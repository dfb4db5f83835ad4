package broker

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/acl"
	"strata/broker/partition"
	"strata/broker/txn"
)

// Produce: v3-12
//
// Appends each partition's record batches to its log after the segment
// package has validated them (lengths, magic 2, CRC-32C, record counts,
// timestamps) and, for idempotent producers, checked their sequence: a
// retried batch is answered with the offset it got the first time; a gap,
// or the same batch twice in one request, is OUT_OF_ORDER_SEQUENCE_NUMBER. Batches are stored as sent, compressed
// or not.
//
// acks=0 gets no response, and a failed partition closes the connection
// (as in Kafka); acks=1 is answered once the leader appended; acks=-1 is
// refused with NOT_ENOUGH_REPLICAS when the ISR is smaller than
// min.insync.replicas, and otherwise answered once the high watermark
// covers the batch (NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank
// below min.insync.replicas meanwhile, REQUEST_TIMED_OUT after the
// request's timeout, NOT_LEADER_OR_FOLLOWER if leadership moved first).
// Only the partition's leader takes produces. Errors are per partition.
// A topic this node does not know is first looked for at the controller
// (created through another node a moment ago, it must take its first
// write), then auto-created when auto.create.topics.enable is on.
//
// Version notes: v5 LogStartOffset; v8 RecordErrors and ErrorMessage
// (KIP-467); v9 flexible; v10 CurrentLeader and NodeEndpoints (KIP-951: a
// partition refused with NOT_LEADER_OR_FOLLOWER names the leader, its
// epoch and its address, so the client moves without a metadata round
// trip); v11 TRANSACTION_ABORTABLE; v12 no wire change (KIP-890 marker).
//
// Validation runs before the partition's append lock. max.message.bytes
// applies to the batch as sent (compressed), as in Kafka. Compressed
// records are checked as they stream out of the decompressor, never held
// whole, up to max(recordCount, 16) × max.message.bytes of them (at most
// 256 MiB): a batch that inflates further is MESSAGE_TOO_LARGE.
//
// A batch with the LogAppendTime attribute is INVALID_TIMESTAMP: only the
// broker may stamp that, and the topic type is always CreateTime. A record
// without a key is INVALID_RECORD on a topic whose cleanup.policy includes
// compact, as in Kafka: compaction keeps the latest record of each key.
//
// Transactions (KIP-98, docs/transactions.md): transactional batches need
// a transactional id in the request (else the whole request is
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as in Kafka) and one producer id
// and epoch across the request (else INVALID_PRODUCER_ID_MAPPING); control
// batches are the broker's alone (INVALID_RECORD). KIP-890 part 1: a
// transactional batch that would open a transaction on a partition (the
// producer has none ongoing there at its epoch) is first verified with
// the transaction coordinator, one call for all such partitions of the
// request; a partition the coordinator does not confirm is refused with
// TRANSACTION_ABORTABLE (v11+; INVALID_TXN_STATE before), a fenced
// producer with INVALID_PRODUCER_EPOCH, a coordinator that could not
// answer with NOT_ENOUGH_REPLICAS (retried by every client). A
// verification guard, checked under the partition's append lock, voids
// the answer if a marker for the producer or a leader change lands before
// the append: the batch is then INVALID_TXN_STATE rather than the start of
// a transaction nobody will end. Epochs, sequences and transaction states
// are checked by the segment package as Kafka's ProducerAppendInfo does
// (INVALID_PRODUCER_EPOCH, OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_TXN_STATE
// for a non-transactional batch inside a transaction); an unknown producer
// id starts at any sequence (KIP-360), so UNKNOWN_PRODUCER_ID is never
// sent.
//
// Authorization (Kafka's): transactional batches need WRITE on the
// transactional id (else the whole request is
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED); each topic needs WRITE (else its
// partitions are TOPIC_AUTHORIZATION_FAILED, whether it exists or not);
// auto-creation needs CREATE on the cluster or the topic (else the topic
// is unknown).
//
// Quotas (quotas.go): the request's record bytes count against the
// client's producer_byte_rate once appended; a client over it gets
// throttle_time_ms and its connection reads nothing more meanwhile.
//
// Not done: KIP-890 part 2's implicit AddPartitionsToTxn on produce v12
// (clients rely on it only where the broker finalizes the
// transaction.version 2 feature), message.timestamp.type=LogAppendTime, v13
// (topic ids instead of names, KIP-516).
func init() { register(kmsg.Produce, 3, 12, (*Broker).handleProduce) }

func (b *Broker) handleProduce(req *request) (kmsg.Response, error) {
	start := time.Now()
	r := req.kreq.(*kmsg.ProduceRequest)
	resp := r.ResponseKind().(*kmsg.ProduceResponse)

	topLevel := fmt.Errorf("%w: acks=%d", kerr.InvalidRequiredAcks, r.Acks)
	if r.Acks == 0 || r.Acks == 1 || r.Acks == -1 {
		topLevel = nil
	}
	var producer txnProducer
	if topLevel == nil {
		producer, topLevel = transactionalProducer(r)
	}
	if topLevel == nil && producer.ok && !b.authorized(req, acl.Write, acl.TransactionalID, producer.id) {
		topLevel = kerr.TransactionalIDAuthorizationFailed
	}
	writable := b.topicAuth(req, acl.Write)

	// Every partition is checked, then the ones that would open a
	// transaction are verified with the coordinator in one call, then
	// the rest are appended.
	type work struct {
		a      partition.Append
		ti, pi int // where its answer is in resp
	}
	var todo []*work
	var verify []txn.TopicPartition
	for i := range r.Topics {
		rt := &r.Topics[i]
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		topicErr := topLevel
		if topicErr == nil && !writable.ok(rt.Topic) {
			topicErr = kerr.TopicAuthorizationFailed
		}
		if topicErr == nil {
			_, topicErr = b.autoCreateFor(req, rt.Topic)
		}
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.BaseOffset = -1
			sp.LogAppendTime = -1
			sp.LogStartOffset = -1
			err := topicErr
			var p *partition.Partition
			var txnData bool
			if err == nil {
				p, txnData, err = b.producible(rt.Topic, rp, r.Acks)
			}
			var tx *partition.TxnAppend
			if err == nil && producer.ok && txnData {
				tx = &partition.TxnAppend{PID: producer.pid, Epoch: producer.epoch}
				tx.Guard, err = p.StartTxnVerification(producer.pid, producer.epoch)
				if err == nil && tx.Guard != nil {
					verify = append(verify, txn.TopicPartition{Topic: rt.Topic, Partition: rp.Partition})
				}
			}
			if err != nil {
				b.produceError(rt.Topic, rp.Partition, &sp, err)
			} else {
				todo = append(todo, &work{partition.Append{P: p, Records: rp.Records, Tx: tx}, len(resp.Topics), len(st.Partitions)})
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}

	var failed map[txn.TopicPartition]error
	if len(verify) > 0 {
		failed = b.verifyProduce(r, producer, verify)
	}
	appends := make([]*partition.Append, 0, len(todo))
	for _, w := range todo {
		p := w.a.P
		if err, ok := failed[txn.TopicPartition{Topic: p.Topic(), Partition: p.Index()}]; ok && w.a.Tx != nil {
			p.DropTxnVerification(w.a.Tx.PID, w.a.Tx.Guard)
			w.a.Err = err
		}
		appends = append(appends, &w.a)
	}
	// acks=all partitions wait for their high watermark after every
	// partition of the request is appended, all against one deadline.
	appended := time.Now()
	partition.Produce(b.ctx, appends, r.Acks == -1, time.Duration(max(r.TimeoutMillis, 0))*time.Millisecond)
	if r.Acks == -1 && b.node.Clustered() {
		req.quota.waited = time.Since(appended) // replication, not this client's work (quotas.go)
	}
	b.recordProduce(req, r)
	for _, w := range todo {
		sp := &resp.Topics[w.ti].Partitions[w.pi]
		if w.a.Appended {
			sp.LogStartOffset = w.a.Info.LogStartOffset
			if !w.a.Info.Duplicate {
				b.metrics.recordsIn.Add(float64(w.a.Info.Records))
			}
		}
		if w.a.Err != nil {
			b.produceError(w.a.P.Topic(), w.a.P.Index(), sp, w.a.Err)
			continue
		}
		sp.BaseOffset = w.a.Info.BaseOffset
	}
	if r.Version >= 10 {
		b.produceLeaderHints(req.conn, resp)
	}
	b.metrics.produceLatency.Observe(time.Since(start).Seconds())
	if r.Acks == 0 {
		return nil, acksZeroFailure(resp)
	}
	return resp, nil
}
