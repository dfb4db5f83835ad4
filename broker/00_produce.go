package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
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
// (KIP-467); v9 flexible; v12 no wire change (KIP-890 marker).
//
// Validation runs before the partition's append lock. Compressed records
// are checked as they decompress, at most recordCount × max.message.bytes
// of them: a batch that inflates further is MESSAGE_TOO_LARGE.
//
// A batch with the LogAppendTime attribute is INVALID_TIMESTAMP: only the
// broker may stamp that, and the topic type is always CreateTime. A record
// without a key is INVALID_RECORD on a topic whose cleanup.policy includes
// compact, as in Kafka: compaction keeps the latest record of each key.
//
// Not done: transactional batches (no transaction coordinator yet: they
// are refused with TRANSACTIONAL_ID_NOT_FOUND), message.timestamp.type=
// LogAppendTime, v13 (topic ids instead of names, KIP-516).
func init() { register(kmsg.Produce, 3, 12, (*Broker).handleProduce) }

// Record batch attribute bits (the low byte of the int16 at byte 21).
const (
	attrTransactional = 0x10
	attrControl       = 0x20
)

func (b *Broker) handleProduce(req *request) (kmsg.Response, error) {
	start := time.Now()
	r := req.kreq.(*kmsg.ProduceRequest)
	resp := r.ResponseKind().(*kmsg.ProduceResponse)

	var topLevel error
	switch {
	case r.Acks != 0 && r.Acks != 1 && r.Acks != -1:
		topLevel = fmt.Errorf("%w: acks=%d", kerr.InvalidRequiredAcks, r.Acks)
	case r.TransactionID != nil:
		topLevel = fmt.Errorf("%w: transactions are not supported yet", kerr.TransactionalIDNotFound)
	}

	// acks=all partitions wait for their high watermark after every
	// partition of the request is appended, all against one deadline.
	type pending struct {
		p      *partition
		last   int64
		epoch  int32
		ti, pi int // where its answer is in resp
	}
	var waits []pending
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
			var p *partition
			var last int64
			var epoch int32
			if err == nil {
				p, last, epoch, err = b.produceTo(rt.Topic, rp, r.Acks, &sp)
			}
			if err != nil {
				b.produceError(rt.Topic, rp.Partition, &sp, err)
			}
			st.Partitions = append(st.Partitions, sp)
			if err == nil && r.Acks == -1 {
				waits = append(waits, pending{p, last, epoch, len(resp.Topics), len(st.Partitions) - 1})
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	wctx, cancel := context.WithTimeout(b.ctx, time.Duration(max(r.TimeoutMillis, 0))*time.Millisecond)
	defer cancel()
	for _, w := range waits {
		err := b.waitCommitted(wctx, w.p, w.last, w.epoch)
		if err == nil && w.p.rep.isrSize() < w.p.settings.Load().minISR {
			err = fmt.Errorf("%w: the ISR shrank below min.insync.replicas=%d", kerr.NotEnoughReplicasAfterAppend, w.p.settings.Load().minISR)
		}
		if err != nil {
			sp := &resp.Topics[w.ti].Partitions[w.pi]
			sp.BaseOffset = -1
			b.produceError(w.p.topic, w.p.index, sp, err)
		}
	}
	b.metrics.produceLatency.Observe(time.Since(start).Seconds())
	if r.Acks == 0 {
		return nil, acksZeroFailure(resp)
	}
	return resp, nil
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

// produceTo appends one partition's batches and fills in sp. It returns
// the partition and the last offset appended, for an acks=all wait.
func (b *Broker) produceTo(topic string, rp *kmsg.ProduceRequestTopicPartition, acks int16, sp *kmsg.ProduceResponseTopicPartition) (*partition, int64, int32, error) {
	p, err := b.led(topic, rp.Partition)
	if err != nil {
		return nil, 0, 0, err
	}
	if err := checkBatchKinds(rp.Records); err != nil {
		return nil, 0, 0, err
	}
	settings := p.settings.Load()
	if settings.internal {
		return nil, 0, 0, fmt.Errorf("%w: %q is internal; only the broker writes to it", kerr.InvalidTopicException, topic)
	}
	if limit := b.cfg.Tier.LocalDiskLimit; limit > 0 && b.localBytes.Load() > limit {
		return nil, 0, 0, errDiskFull
	}
	if acks == -1 {
		if isr := p.rep.isrSize(); isr < settings.minISR {
			return nil, 0, 0, fmt.Errorf("%w: min.insync.replicas=%d but the ISR has %d replicas", kerr.NotEnoughReplicas, settings.minISR, isr)
		}
	}
	info, epoch, err := p.append(rp.Records)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("append to %s-%d: %w", topic, rp.Partition, err)
	}
	sp.BaseOffset = info.BaseOffset
	sp.LogStartOffset = info.LogStartOffset
	if !info.Duplicate {
		b.metrics.recordsIn.Add(float64(info.Records))
	}
	return p, info.LastOffset, epoch, nil
}

// checkBatchKinds refuses batches a client may not write here: control
// batches (markers are the broker's to write) and, until there is a
// transaction coordinator, transactional ones. It reads only the batch
// headers; the segment package validates everything else.
func checkBatchKinds(records []byte) error {
	for len(records) >= 23 {
		switch attrs := records[22]; {
		case attrs&attrControl != 0:
			return fmt.Errorf("%w: clients may not write control batches", kerr.InvalidRecord)
		case attrs&attrTransactional != 0:
			return fmt.Errorf("%w: transactional batches are not supported yet", kerr.TransactionalIDNotFound)
		}
		size := 12 + int64(binary.BigEndian.Uint32(records[8:12]))
		if size > int64(len(records)) {
			break // the segment package reports the bad length
		}
		records = records[size:]
	}
	return nil
}
