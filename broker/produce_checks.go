package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/partition"
	"strata/broker/txn"
)

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
	if limit := b.cfg.Tier.LocalDiskLimit; limit > 0 && b.node.LocalBytes() > limit {
		return nil, false, errDiskFull
	}
	if acks == -1 {
		if err := p.CheckISR(); err != nil {
			return nil, false, err
		}
	}
	return p, txnData, nil
}

// errDiskFull is returned to producers while uploads are behind and the
// local disk bound is crossed. KAFKA_STORAGE_ERROR is retriable: clients
// back off and try again, and nothing is lost.
var errDiskFull = fmt.Errorf("%w: local log bytes above the configured limit while uploads to the object store are behind", kerr.KafkaStorageError)
