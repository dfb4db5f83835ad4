package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/partition"
	"strata/broker/txn"
	"strata/meta"
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
// Unknown topics are auto-created when auto.create.topics.enable is on.
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
		if topicErr == nil {
			_, topicErr = b.autoCreate(b.ctx, rt.Topic)
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
	wctx, cancel := context.WithTimeout(b.ctx, time.Duration(max(r.TimeoutMillis, 0))*time.Millisecond)
	defer cancel()
	partition.Produce(wctx, appends, r.Acks == -1)
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
		b.produceLeaderHints(resp)
	}
	b.metrics.produceLatency.Observe(time.Since(start).Seconds())
	if r.Acks == 0 {
		return nil, acksZeroFailure(resp)
	}
	return resp, nil
}

// produceLeaderHints applies KIP-951 to a Produce answer (v10+): each
// partition refused with NOT_LEADER_OR_FOLLOWER names the leader and
// epoch this node's metadata knows, and the response carries those
// leaders' endpoints, so that a client moves its batches at once instead
// of waiting for a metadata refresh (franz-go refreshes at most every 5 s
// by default).
func (b *Broker) produceLeaderHints(resp *kmsg.ProduceResponse) {
	h := leaderHints{st: b.meta.State()}
	for i := range resp.Topics {
		st := &resp.Topics[i]
		for j := range st.Partitions {
			sp := &st.Partitions[j]
			if sp.ErrorCode == kerr.NotLeaderForPartition.Code {
				sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = h.leader(st.Topic, sp.Partition)
			}
		}
	}
	for _, br := range h.endpoints() {
		pb := kmsg.NewProduceResponseBroker()
		pb.NodeID, pb.Host, pb.Port, pb.Rack = br.ID, br.Host, br.Port, rack(br)
		resp.Brokers = append(resp.Brokers, pb)
	}
}

// leaderHints gathers KIP-951's CurrentLeader answers of one response
// and the leaders they name.
type leaderHints struct {
	st  *meta.State
	ids []int32
}

// leader returns the leader and leader epoch of the partition as this
// node's metadata knows them, -1 and -1 when it knows none (an unknown
// partition, an offline one).
func (h *leaderHints) leader(topic string, partition int32) (id, epoch int32) {
	t, ok := h.st.Topics[topic]
	if !ok || partition < 0 || int(partition) >= len(t.Partitions) || t.Partitions[partition].Leader < 0 {
		return -1, -1
	}
	p := &t.Partitions[partition]
	if !slices.Contains(h.ids, p.Leader) {
		h.ids = append(h.ids, p.Leader)
	}
	return p.Leader, p.LeaderEpoch
}

// endpoints returns the registered, unfenced brokers among the leaders
// named, in id order. A fenced one is left out, as in Kafka: a client
// takes a hint only with its leader's endpoint, and must not be sent to a
// broker the controller knows to be gone.
func (h *leaderHints) endpoints() []meta.Broker {
	slices.Sort(h.ids)
	var out []meta.Broker
	for _, id := range h.ids {
		if h.st.Alive(id) {
			out = append(out, h.st.Brokers[id])
		}
	}
	return out
}

func (b *Broker) produceError(topic string, partition int32, sp *kmsg.ProduceResponseTopicPartition, err error) {
	// ErrorMessage is sent from v8 on; kmsg leaves it out before.
	sp.ErrorCode, sp.ErrorMessage = b.answerError(kmsg.Produce, err)
	if sp.ErrorCode == kerr.UnknownServerError.Code || sp.ErrorCode == kerr.KafkaStorageError.Code {
		b.log.Error("produce", "topic", topic, "partition", partition, "err", err)
	}
}

// acksZeroFailure names the partitions of an acks=0 produce that failed.
// Such a producer reads no response, so, as in Kafka, a failure closes the
// connection: the producer sees it drop and refreshes its metadata instead
// of writing on, unaware, to a partition this broker does not lead.
func acksZeroFailure(resp *kmsg.ProduceResponse) error {
	var failed []string
	for _, st := range resp.Topics {
		for _, sp := range st.Partitions {
			if sp.ErrorCode != 0 {
				failed = append(failed, fmt.Sprintf("%s-%d: %s", st.Topic, sp.Partition, kerr.ErrorForCode(sp.ErrorCode)))
			}
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%w: acks=0 produce failed (%s)", errCloseConn, strings.Join(failed, ", "))
}

// producible returns the partition rp is for, if a client may append
// these records to it now, and whether they hold transactional data.
func (b *Broker) producible(topic string, rp *kmsg.ProduceRequestTopicPartition, acks int16) (*partition.Partition, bool, error) {
	p, err := b.led(topic, rp.Partition)
	if err != nil {
		return nil, false, err
	}
	txnData, err := batchKinds(rp.Records)
	if err != nil {
		return nil, false, err
	}
	if err := p.CheckClientWrite(); err != nil {
		return nil, false, err
	}
	if limit := b.cfg.Tier.LocalDiskLimit; limit > 0 && b.localBytes.Load() > limit {
		return nil, false, errDiskFull
	}
	if acks == -1 {
		if err := p.CheckISR(); err != nil {
			return nil, false, err
		}
	}
	return p, txnData, nil
}

// Record batch header fields read here (the segment package validates
// the whole batch later).
const (
	batchAttrsByte     = 22 // low byte of the attributes
	batchProducerID    = 43
	batchProducerEpoch = 51
	batchHeaderSize    = 61
)

// eachBatchHeader calls fn with the header of each batch in records, as
// far as whole headers go.
func eachBatchHeader(records []byte, fn func(h []byte)) {
	for len(records) >= batchHeaderSize {
		fn(records[:batchHeaderSize])
		size := 12 + int64(binary.BigEndian.Uint32(records[8:12]))
		if size > int64(len(records)) {
			return // the segment package reports the bad length
		}
		records = records[size:]
	}
}

// batchKinds reads the batch headers of records once: control batches
// are refused (they are the broker's to write: transaction markers), and
// txnData says whether a transactional data batch is among them.
func batchKinds(records []byte) (txnData bool, err error) {
	eachBatchHeader(records, func(h []byte) {
		switch attrs := h[batchAttrsByte]; {
		case attrs&partition.AttrControl != 0:
			err = fmt.Errorf("%w: clients may not write control batches", kerr.InvalidRecord)
		case attrs&partition.AttrTransactional != 0:
			txnData = true
		}
	})
	return txnData, err
}

// txnProducer is the producer whose transactional batches a request
// carries, if it carries any (ok).
type txnProducer struct {
	ok    bool
	id    string
	pid   int64
	epoch int16
}

// transactionalProducer finds the producer of a request's transactional
// batches, refusing the request as Kafka does: transactional batches need
// a transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED: the request
// may not write for a transaction it does not name) and may come from one
// producer id and epoch only (INVALID_PRODUCER_ID_MAPPING).
func transactionalProducer(r *kmsg.ProduceRequest) (txnProducer, error) {
	var tp txnProducer
	var err error
	for i := range r.Topics {
		for j := range r.Topics[i].Partitions {
			eachBatchHeader(r.Topics[i].Partitions[j].Records, func(h []byte) {
				if h[batchAttrsByte]&partition.AttrTransactional == 0 || err != nil {
					return
				}
				if r.TransactionID == nil {
					err = fmt.Errorf("%w: transactional batches in a request without a transactional id", kerr.TransactionalIDAuthorizationFailed)
					return
				}
				if h[batchAttrsByte]&partition.AttrControl != 0 {
					return // refused per partition (batchKinds)
				}
				pid := int64(binary.BigEndian.Uint64(h[batchProducerID:]))
				epoch := int16(binary.BigEndian.Uint16(h[batchProducerEpoch:]))
				if pid < 0 {
					return // INVALID_RECORD from the segment package's checks
				}
				if tp.ok && (pid != tp.pid || epoch != tp.epoch) {
					err = fmt.Errorf("%w: transactional batches of producers %d (epoch %d) and %d (epoch %d) in one request", kerr.InvalidProducerIDMapping, tp.pid, tp.epoch, pid, epoch)
					return
				}
				tp = txnProducer{ok: true, id: *r.TransactionID, pid: pid, epoch: epoch}
			})
		}
	}
	if err != nil {
		return txnProducer{}, err
	}
	return tp, nil
}

// verifyProduce asks the coordinator whether parts are in the producer's
// ongoing transaction (KIP-890 part 1) and returns the ones that are not,
// each with the error the request's version knows, as Kafka's
// ReplicaManager and AddPartitionsToTxnManager translate them.
func (b *Broker) verifyProduce(r *kmsg.ProduceRequest, tp txnProducer, parts []txn.TopicPartition) map[txn.TopicPartition]error {
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	failed := make(map[txn.TopicPartition]error)
	answers := b.verifyTxn(ctx, tp.id, tp.pid, tp.epoch, parts)
	for _, part := range parts {
		err, ok := answers[part]
		if !ok {
			err = fmt.Errorf("%w: the coordinator did not answer for %s-%d", kerr.CoordinatorNotAvailable, part.Topic, part.Partition)
		}
		if err != nil {
			failed[part] = verificationError(r.Version, err)
		}
	}
	return failed
}

// verificationError is the error a produce at version gets for a failed
// verification, err.
func verificationError(version int16, err error) error {
	switch {
	case errors.Is(err, kerr.TransactionAbortable):
		// Produce v11 (KIP-890) brought the code; older clients know the
		// partition is not in the transaction as INVALID_TXN_STATE.
		if version >= 11 {
			return err
		}
		return fmt.Errorf("%w: the partition is not in the transaction (%v)", kerr.InvalidTxnState, err)
	case errors.Is(err, kerr.ProducerFenced):
		// Producers expect a fenced epoch on produce as
		// INVALID_PRODUCER_EPOCH, which lets them abort and go on.
		return fmt.Errorf("%w: %v", kerr.InvalidProducerEpoch, err)
	case errors.Is(err, kerr.ConcurrentTransactions), errors.Is(err, kerr.NetworkException),
		errors.Is(err, kerr.CoordinatorLoadInProgress), errors.Is(err, kerr.CoordinatorNotAvailable),
		errors.Is(err, kerr.NotCoordinator):
		// Retriable, but not all clients retry these on a produce: every
		// client retries NOT_ENOUGH_REPLICAS, and without a metadata
		// refresh the partition's leadership does not call for.
		return fmt.Errorf("%w: the transaction coordinator could not verify the partition: %v", kerr.NotEnoughReplicas, err)
	}
	return err
}
