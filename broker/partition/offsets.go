package partition

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ListOffsets' special timestamps (KIP-734, KIP-1005).
const (
	Latest         = -1 // the high watermark (the last stable offset under read_committed)
	Earliest       = -2 // the log start, in the bucket if it holds older records
	MaxTimestamp   = -3 // the record with the largest timestamp
	EarliestLocal  = -4 // the local log's start
	LatestTiered   = -5 // the highest offset in the bucket
	ListUnanswered = -1 // an offset or timestamp not found
)

// ListOffset answers ListOffsets for ts, a timestamp or one of the special
// ones above, as the partition's leader: the offset and the timestamp
// found, ListUnanswered for either when there is none. committed reads
// up to the last stable offset (read_committed).
func (p *Partition) ListOffset(ts int64, committed bool) (offset, timestamp int64, err error) {
	// hw is the end of what the consumer may read: under read_committed,
	// the last stable offset (Kafka's lastFetchableOffset).
	hw := p.HighWatermark()
	if committed {
		hw = p.LastStableOffset()
	}
	if ts != Latest && ts != EarliestLocal {
		if err := p.CheckRemoteKnown(); err != nil {
			return ListUnanswered, ListUnanswered, err
		}
	}
	switch {
	case ts == Earliest:
		return p.LogStartOffset(), ListUnanswered, nil
	case ts == EarliestLocal:
		return p.log.StartOffset(), ListUnanswered, nil
	case ts == Latest:
		if err := p.offsetAvailable(); err != nil {
			return ListUnanswered, ListUnanswered, err
		}
		if p.endUnknown() {
			return ListUnanswered, ListUnanswered, ErrRemoteUnknown
		}
		return hw, ListUnanswered, nil
	case ts == MaxTimestamp:
		mts, off := p.log.MaxTimestamp()
		// The bucket is asked only when it holds records the local log
		// no longer has.
		if b, name := p.remote(); b != nil && p.LogStartOffset() < p.log.StartOffset() {
			ctx, cancel := context.WithTimeout(p.host.Context, 30*time.Second)
			rts, roff, ok, err := b.MaxTimestamp(ctx, name)
			cancel()
			if err != nil {
				return ListUnanswered, ListUnanswered, fmt.Errorf("max timestamp in the bucket of %s-%d: %w", p.topic, p.index, StorageError(err))
			}
			// On a tie the first record wins, as in Kafka; the bucket's
			// come before the local log's.
			if ok && rts >= mts && roff < hw {
				mts, off = rts, roff
			}
		}
		if off >= 0 && off < hw {
			return off, mts, nil
		}
		return ListUnanswered, ListUnanswered, nil
	case ts == LatestTiered:
		if end := p.RemoteEnd(); end > 0 {
			return end - 1, ListUnanswered, nil // the highest offset in the bucket
		}
		return ListUnanswered, ListUnanswered, nil
	case ts >= 0:
		if b, name := p.remote(); b != nil && p.RemoteEnd() > p.LogStartOffset() {
			ctx, cancel := context.WithTimeout(p.host.Context, 30*time.Second)
			off, found, ok, err := b.OffsetForTimestamp(ctx, name, ts)
			cancel()
			if err != nil {
				return ListUnanswered, ListUnanswered, fmt.Errorf("offset for timestamp %d in the bucket of %s-%d: %w", ts, p.topic, p.index, StorageError(err))
			}
			if ok && off < hw {
				return off, found, nil
			}
		}
		off, found, ok, err := p.log.OffsetForTimestamp(ts)
		if err != nil {
			return ListUnanswered, ListUnanswered, fmt.Errorf("offset for timestamp %d in %s-%d: %w", ts, p.topic, p.index, err)
		}
		if ok && off < hw {
			return off, found, nil
		}
		// Not found below the high watermark: it may be there once the
		// high watermark catches up.
		return ListUnanswered, ListUnanswered, p.offsetAvailable()
	}
	return ListUnanswered, ListUnanswered, fmt.Errorf("%w: timestamp %d", kerr.UnsupportedVersion, ts)
}

// offsetAvailable refuses an answer while this leader's high watermark is
// below the start of its epoch. A new leader learns what its predecessor
// committed only as its followers fetch from it: until then its high
// watermark may be below the offsets the previous leader served, and an
// answer from it could take a consumer backwards (Kafka's
// fetchOffsetForTimestamp).
func (p *Partition) offsetAvailable() error {
	if start := p.EpochStart(); start > p.HighWatermark() {
		return fmt.Errorf("%w: the high watermark %d of %s-%d has not reached the start %d of this leader's epoch yet",
			kerr.OffsetNotAvailable, p.HighWatermark(), p.topic, p.index, start)
	}
	return nil
}

// DeleteRecords moves the log start to offset (DeleteRecords; -1: the
// high watermark) and returns the log start after. The bucket goes first:
// once the local start moves, a reader below it is sent to the bucket,
// which must not serve it either. Its start is published even when it
// holds nothing of the range yet: the segment holding the deleted records
// is uploaded later, and the bucket's log start must already say they are
// gone.
func (p *Partition) DeleteRecords(ctx context.Context, offset int64) (int64, error) {
	if p.source != nil {
		return -1, p.errReadReplica("DeleteRecords (the source's retention moves its log start)")
	}
	if err := p.CheckRemoteKnown(); err != nil {
		return -1, err
	}
	hw := p.HighWatermark()
	switch {
	case offset == -1:
		offset = hw
	case offset < 0 || offset > hw:
		return -1, fmt.Errorf("%w: %d is not within the log's [%d, %d]", kerr.OffsetOutOfRange, offset, p.LogStartOffset(), hw)
	}
	if offset <= p.LogStartOffset() {
		return p.LogStartOffset(), nil
	}
	if p.Tiered() {
		if err := p.advanceRemoteStart(ctx, offset); err != nil {
			return -1, err
		}
	}
	if offset > p.log.StartOffset() {
		if _, err := p.log.DeleteRecordsBefore(min(offset, p.log.EndOffset())); err != nil {
			return -1, fmt.Errorf("delete records of %s-%d before %d: %w", p.topic, p.index, offset, err)
		}
	}
	p.host.Logger.Info("records deleted", "topic", p.topic, "partition", p.index, "logStartOffset", p.LogStartOffset())
	return p.LogStartOffset(), nil
}

// advanceRemoteStart publishes the bucket's new log start. It takes the
// upload lock, so an upload pass cannot put back the manifest it read
// before, and waits for a pass under way within ctx.
func (p *Partition) advanceRemoteStart(ctx context.Context, offset int64) error {
	for !p.tier.mu.TryLock() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: waiting for an upload of %s-%d to finish", kerr.RequestTimedOut, p.topic, p.index)
		case <-time.After(10 * time.Millisecond):
		}
	}
	defer p.tier.mu.Unlock()
	epoch, leads := p.LeaderEpochIfLeading()
	if !leads {
		return ErrNotLeader
	}
	m, err := p.host.Bucket.AdvanceLogStart(ctx, p.BucketName(), offset, epoch)
	if err != nil {
		// A page may have been stored for a root that was not published:
		// the collector looks at the partition again after the grace.
		p.host.Dropped(p.BucketName())
		return StorageError(err)
	}
	p.tier.manifest = m
	p.SetRemote(m)
	p.host.Dropped(p.BucketName())
	return nil
}
