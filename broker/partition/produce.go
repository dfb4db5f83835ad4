package partition

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/segment"
)

// Append is one partition's part of a produce: what to append and, once
// Produce has returned, the answer.
type Append struct {
	P       *Partition
	Records []byte
	// Tx, unless nil, says whose transactional batches Records holds
	// (AppendTxn).
	Tx *TxnAppend

	// Info is what the append did; Appended says it did append (Err may
	// still be set, by the wait for the ISR that followed).
	Info     segment.AppendInfo
	Appended bool
	Err      error

	epoch int32 // the leader epoch the records went in under
}

// CheckClientWrite refuses a client's produce to an internal topic,
// which only the broker writes to, and to a read replica, which only the
// source cluster writes to (POLICY_VIOLATION, with the source named).
func (p *Partition) CheckClientWrite() error {
	if p.source != nil {
		return p.errReadReplica("produce")
	}
	if p.settings.Load().Internal {
		return fmt.Errorf("%w: %q is internal; only the broker writes to it", kerr.InvalidTopicException, p.topic)
	}
	return nil
}

// CheckISR refuses an acks=all produce while the ISR is smaller than
// min.insync.replicas.
func (p *Partition) CheckISR() error {
	if minISR, isr := p.settings.Load().MinISR, p.ISRSize(); isr < minISR {
		return fmt.Errorf("%w: min.insync.replicas=%d but the ISR has %d replicas", kerr.NotEnoughReplicas, minISR, isr)
	}
	return nil
}

// Produce appends each part's records in turn and, for acks=all, then
// waits, every part against one deadline timeout after the last append
// (or until ctx ends), until the high watermark covers them; a part whose
// ISR shrank below min.insync.replicas meanwhile is
// NOT_ENOUGH_REPLICAS_AFTER_APPEND. Parts that already carry an error are
// left alone.
//
// Every part is validated before any is appended, and the fetches
// waiting on the partitions hear of the appends only once all are made
// (Kafka completes delayed fetches after the whole request, too): a
// follower's held fetch woken by the first append would copy that
// partition alone, and the acks=all answer would wait for another fetch
// round trip for each partition appended after it.
func Produce(ctx context.Context, parts []*Append, acksAll bool, timeout time.Duration) {
	prepared := make([]*segment.Batches, len(parts))
	for i, a := range parts {
		if a.Err != nil {
			continue
		}
		// Validation (decompression included) goes first, outside
		// appendMu, so a costly batch holds up no other producer of the
		// partition.
		b, err := a.P.log.Prepare(a.Records)
		if err != nil {
			a.Err = fmt.Errorf("append to %s-%d: %w", a.P.topic, a.P.index, err)
			continue
		}
		prepared[i] = b
	}
	for i, a := range parts {
		if a.Err != nil {
			continue
		}
		info, epoch, err := a.P.appendPrepared(prepared[i], a.Tx, false)
		if err != nil {
			a.Err = fmt.Errorf("append to %s-%d: %w", a.P.topic, a.P.index, err)
			continue
		}
		a.Info, a.epoch, a.Appended = info, epoch, true
	}
	for _, a := range parts {
		if a.Appended && !a.Info.Duplicate {
			a.P.wakeOnly(true)
		}
	}
	if !acksAll {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, a := range parts {
		if a.Err != nil {
			continue
		}
		err := a.P.WaitCommitted(ctx, a.Info.LastOffset, a.epoch)
		if minISR := a.P.settings.Load().MinISR; err == nil && a.P.ISRSize() < minISR {
			err = fmt.Errorf("%w: the ISR shrank below min.insync.replicas=%d", kerr.NotEnoughReplicasAfterAppend, minISR)
		}
		a.Err = err
	}
}
