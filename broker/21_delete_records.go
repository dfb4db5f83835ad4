package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// DeleteRecords: v0-2
//
// Moves each partition's log start offset to the given offset (-1: the
// high watermark), across both tiers: the local log stops serving what is
// below it and deletes the segments wholly below it, and the bucket's
// manifest gets the new start, its objects wholly below it deleted by the
// collector after the orphan grace. ListOffsets (-2) and fetches honour
// it at once; LowWatermark is the log start after. Only the leader
// answers; an offset above the high watermark is OFFSET_OUT_OF_RANGE.
// Followers take the new start from their next fetch.
//
// Version notes: v2 flexible.
//
// Differs from Kafka: the answer comes once the leader has moved its own
// log start, not once every replica has (Kafka's low watermark of all
// replicas); followers follow within a fetch.
func init() { register(kmsg.DeleteRecords, 0, 2, (*Broker).handleDeleteRecords) }

func (b *Broker) handleDeleteRecords(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.DeleteRecordsRequest)
	resp := r.ResponseKind().(*kmsg.DeleteRecordsResponse)
	timeout := time.Duration(r.TimeoutMillis) * time.Millisecond
	if timeout <= 0 || timeout > controlTimeout {
		timeout = controlTimeout
	}
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	for _, rt := range r.Topics {
		ot := kmsg.NewDeleteRecordsResponseTopic()
		ot.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			op := kmsg.NewDeleteRecordsResponseTopicPartition()
			op.Partition = rp.Partition
			op.LowWatermark = -1
			low, err := b.deleteRecords(ctx, rt.Topic, rp.Partition, rp.Offset)
			if err != nil {
				op.ErrorCode, _ = b.answerError(kmsg.DeleteRecords, err)
			} else {
				op.LowWatermark = low
			}
			ot.Partitions = append(ot.Partitions, op)
		}
		resp.Topics = append(resp.Topics, ot)
	}
	return resp, nil
}

// deleteRecords moves one partition's log start to offset and returns
// the log start after.
func (b *Broker) deleteRecords(ctx context.Context, topic string, index int32, offset int64) (int64, error) {
	p, err := b.led(topic, index)
	if err != nil {
		return -1, err
	}
	if err := b.checkRemoteKnown(p); err != nil {
		return -1, err
	}
	hw := p.highWatermark()
	switch {
	case offset == -1:
		offset = hw
	case offset < 0 || offset > hw:
		return -1, fmt.Errorf("%w: %d is not within the log's [%d, %d]", kerr.OffsetOutOfRange, offset, p.logStartOffset(), hw)
	}
	if offset <= p.logStartOffset() {
		return p.logStartOffset(), nil
	}
	// The bucket first: once the local start moves, a reader below it is
	// sent to the bucket, which must not serve it either.
	// Published even when the bucket holds nothing of the range yet: the
	// segment holding the deleted records is uploaded later, and the
	// bucket's log start must already say they are gone.
	if b.remoteEnabled(p) {
		if err := b.advanceRemoteStart(ctx, p, offset); err != nil {
			return -1, err
		}
	}
	if offset > p.log.StartOffset() {
		if _, err := p.log.DeleteRecordsBefore(min(offset, p.log.EndOffset())); err != nil {
			return -1, fmt.Errorf("delete records of %s-%d before %d: %w", topic, index, offset, err)
		}
	}
	b.log.Info("records deleted", "topic", topic, "partition", index, "logStartOffset", p.logStartOffset())
	return p.logStartOffset(), nil
}

// advanceRemoteStart publishes the bucket's new log start for p. It takes
// p's upload lock, so an upload pass cannot put back the manifest it read
// before, and waits for a pass under way within ctx.
func (b *Broker) advanceRemoteStart(ctx context.Context, p *partition, offset int64) error {
	for !p.tier.mu.TryLock() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for an upload of %s-%d to finish", kerr.RequestTimedOut, p.topic, p.index)
		case <-time.After(10 * time.Millisecond):
		}
	}
	defer p.tier.mu.Unlock()
	epoch, leads := p.leaderEpochIfLeading()
	if !leads {
		return errNotLeader
	}
	m, err := b.tier.AdvanceLogStart(ctx, p.bucketName(), offset, epoch)
	if err != nil {
		// A page may have been stored for a root that was not published:
		// the collector looks at the partition again after the grace.
		b.collector.dropped(p.bucketName(), b.cfg.Tier.Now())
		return storageError(err)
	}
	p.tier.manifest = m
	p.setRemote(m)
	b.collector.dropped(p.bucketName(), b.cfg.Tier.Now())
	return nil
}
