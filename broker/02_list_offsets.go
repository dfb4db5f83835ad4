package broker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/partition"
)

// ListOffsets: v1-9
//
// Timestamps, and the special values that stand for positions:
//   - -2 earliest: the log start offset, in the bucket when the oldest
//     data is only there
//   - -1 latest: the high watermark, or under read_committed the last
//     stable offset
//   - -3 max timestamp (KIP-734, v7+): the first record with the largest
//     timestamp, in the bucket or the local log
//   - -4 earliest local (KIP-405, v8+): the local log start offset
//   - -5 latest tiered (KIP-1005, v9+): the highest offset in the bucket,
//     -1 when nothing is uploaded
//   - t >= 0: the first record whose timestamp is at least t, or -1,
//     looked up in the bucket first when it holds the oldest data
//
// Only committed records (below the high watermark) are ever returned,
// and under read_committed only records below the last stable offset, as
// in Kafka (a record of a transaction still open may yet be aborted).
// A new leader whose high watermark has not yet reached the start of its
// leader epoch answers latest, and a timestamp it finds no record for,
// with OFFSET_NOT_AVAILABLE (retriable), as Kafka does: it does not know
// yet how far its predecessor had committed. A
// special value below the version that introduced it, or any other
// negative value, is UNSUPPORTED_VERSION for that partition; a partition
// listed twice is INVALID_REQUEST for both entries.
//
// Version notes: v2 isolation level; v4 CurrentLeaderEpoch (KIP-320) and
// LeaderEpoch in the response; v6 flexible.
func init() { register(kmsg.ListOffsets, 1, 9, (*Broker).handleListOffsets) }

func (b *Broker) handleListOffsets(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.ListOffsetsRequest)
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)

	seen := make(map[tp]int)
	for _, rt := range r.Topics {
		for _, rp := range rt.Partitions {
			seen[tp{rt.Topic, rp.Partition}]++
		}
	}
	// A partition this node does not know it leads may be one of a topic
	// created a moment ago through another node (metasync.go); one that
	// it knows it leads needs no catching up.
	for _, rt := range r.Topics {
		if slices.ContainsFunc(rt.Partitions, func(rp kmsg.ListOffsetsRequestTopicPartition) bool {
			return !b.node.NamedLeader(rt.Topic, rp.Partition)
		}) {
			b.syncMetadataAndReconcile()
			break
		}
	}
	for _, rt := range r.Topics {
		st := kmsg.NewListOffsetsResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewListOffsetsResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.Timestamp, sp.Offset, sp.LeaderEpoch = -1, -1, -1
			var err error
			if seen[tp{rt.Topic, rp.Partition}] > 1 {
				err = kerr.InvalidRequest
			} else {
				err = b.listOffset(rt.Topic, rp, r.Version, r.IsolationLevel == 1, &sp)
			}
			if err != nil {
				sp.ErrorCode = errorCode(err)
				sp.Timestamp, sp.Offset = -1, -1
				b.metrics.countError(kmsg.ListOffsets, sp.ErrorCode)
			}
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp, nil
}

func (b *Broker) listOffset(topic string, rp kmsg.ListOffsetsRequestTopicPartition, version int16, committed bool, sp *kmsg.ListOffsetsResponseTopicPartition) error {
	p, err := b.led(topic, rp.Partition)
	if err != nil {
		return err
	}
	if err := p.CheckLeaderEpoch(rp.CurrentLeaderEpoch); err != nil {
		return err
	}
	sp.LeaderEpoch = p.LeaderEpoch()
	// hw is the end of what the consumer may read: under read_committed,
	// the last stable offset (Kafka's lastFetchableOffset).
	hw := p.HighWatermark()
	if committed {
		hw = p.LastStableOffset()
	}
	// A new leader learns what its predecessor committed only as its
	// followers fetch from it: until its high watermark reaches the start
	// of its epoch, it may be below the offsets the previous leader
	// served, and an answer from it could take a consumer backwards
	// (Kafka's fetchOffsetForTimestamp).
	notAvailable := func() error {
		if start := p.EpochStart(); start > p.HighWatermark() {
			return fmt.Errorf("%w: the high watermark %d of %s-%d has not reached the start %d of this leader's epoch yet",
				kerr.OffsetNotAvailable, p.HighWatermark(), topic, rp.Partition, start)
		}
		return nil
	}
	if rp.Timestamp != -1 && rp.Timestamp != -4 {
		if err := p.CheckRemoteKnown(); err != nil {
			return err
		}
	}
	switch ts := rp.Timestamp; {
	case ts == -2:
		sp.Offset = p.LogStartOffset()
	case ts == -4 && version >= 8:
		sp.Offset = p.Log().StartOffset()
	case ts == -1:
		if err := notAvailable(); err != nil {
			return err
		}
		sp.Offset = hw
	case ts == -3 && version >= 7:
		mts, off := p.Log().MaxTimestamp()
		// The bucket is asked only when it holds records the local log
		// no longer has.
		if b.tier != nil && p.LogStartOffset() < p.Log().StartOffset() {
			ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
			rts, roff, ok, err := b.tier.MaxTimestamp(ctx, p.BucketName())
			cancel()
			if err != nil {
				return fmt.Errorf("max timestamp in the bucket of %s-%d: %w", topic, rp.Partition, partition.StorageError(err))
			}
			// On a tie the first record wins, as in Kafka; the bucket's
			// come before the local log's.
			if ok && rts >= mts && roff < hw {
				mts, off = rts, roff
			}
		}
		if off >= 0 && off < hw {
			sp.Timestamp, sp.Offset = mts, off
		}
	case ts == -5 && version >= 9:
		if end := p.RemoteEnd(); end > 0 {
			sp.Offset = end - 1 // the highest offset in the bucket
		}
	case ts >= 0:
		if b.tier != nil && p.RemoteEnd() > p.LogStartOffset() {
			ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
			off, found, ok, err := b.tier.OffsetForTimestamp(ctx, p.BucketName(), ts)
			cancel()
			if err != nil {
				return fmt.Errorf("offset for timestamp %d in the bucket of %s-%d: %w", ts, topic, rp.Partition, partition.StorageError(err))
			}
			if ok && off < hw {
				sp.Timestamp, sp.Offset = found, off
				return nil
			}
		}
		off, found, ok, err := p.Log().OffsetForTimestamp(ts)
		if err != nil {
			return fmt.Errorf("offset for timestamp %d in %s-%d: %w", ts, topic, rp.Partition, err)
		}
		if ok && off < hw {
			sp.Timestamp, sp.Offset = found, off
			return nil
		}
		// Not found below the high watermark: it may be there once the
		// high watermark catches up.
		return notAvailable()
	default:
		return fmt.Errorf("%w: timestamp %d at ListOffsets v%d", kerr.UnsupportedVersion, ts, version)
	}
	return nil
}
