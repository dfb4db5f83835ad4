package tier

import (
	"context"
	"fmt"
	"time"

	"strata/tier/format"
)

// Retention bounds the whole log of a partition, bucket and local disk
// together (retention.bytes and retention.ms); a negative bound is off.
type Retention struct {
	Bytes int64
	Age   time.Duration
	// LocalBytes is the size of the partition's log above what the bucket
	// holds, which counts toward Bytes.
	LocalBytes int64
	// LeaderEpoch is the epoch of the leader applying retention: the
	// manifest it publishes is keyed by it, and a manifest of a higher
	// epoch in the bucket fences it (ErrFenced).
	LeaderEpoch int32
}

// ApplyRetention advances tp's log start offset past the oldest remote
// segments that the bounds no longer keep, and publishes the manifest that
// says so. The objects themselves are deleted later by CollectOrphans,
// after its grace period, so a reader holding the previous manifest never
// finds an object missing. It returns the new log start offset.
func (t *Tier) ApplyRetention(ctx context.Context, tp format.TopicPartition, r Retention) (int64, error) {
	ps := t.state(tp)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	advanced := false
	m, err := t.updateLocked(ctx, tp, ps, r.LeaderEpoch, func(m *format.Root) (*format.Change, error) {
		start, err := t.retainedStart(ctx, m, r)
		if err != nil {
			return nil, err
		}
		advanced = start != m.LogStartOffset
		if !advanced {
			return nil, nil
		}
		return m.WithLogStart(ctx, t.pages, start, r.LeaderEpoch, t.cfg.Paging)
	})
	if err != nil {
		return -1, fmt.Errorf("retention of %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	if !advanced {
		return m.LogStartOffset, nil
	}
	t.log.Info("retention advanced the log start", "topic", tp.Topic, "partition", tp.Partition, "logStartOffset", m.LogStartOffset)
	return m.LogStartOffset, nil
}

// retainedStart returns the log start offset that r allows for m. The
// oldest segments go while the log without them still holds r.Bytes, or
// while they are older than r.Age. Whole pages are judged by their
// summaries and go unread (a page older than the cutoff takes along any
// segment of it without timestamps); only the page where retention stops
// is read.
func (t *Tier) retainedStart(ctx context.Context, m *format.Root, r Retention) (int64, error) {
	total := r.LocalBytes + m.Totals().Bytes
	cutoff := t.cfg.Now().Add(-r.Age).UnixMilli()
	return m.CutPrefix(ctx, t.pages, func(s format.Span) bool {
		bySize := r.Bytes >= 0 && total-s.Bytes >= r.Bytes
		byAge := r.Age >= 0 && s.MaxTimestamp >= 0 && s.MaxTimestamp < cutoff
		if !bySize && !byAge {
			return false
		}
		total -= s.Bytes
		return true
	})
}

// AdvanceLogStart raises tp's log start offset to offset (DeleteRecords),
// even above the manifest's end, and publishes the manifest that says so; as
// with retention, the objects wholly below it are deleted by
// CollectOrphans after its grace. It returns the manifest after.
func (t *Tier) AdvanceLogStart(ctx context.Context, tp format.TopicPartition, offset int64, leaderEpoch int32) (*format.Root, error) {
	ps := t.state(tp)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	m, err := t.updateLocked(ctx, tp, ps, leaderEpoch, func(m *format.Root) (*format.Change, error) {
		// Kept even above the bucket's end: the segment holding the
		// deleted records is uploaded later, whole, and an upload onto an
		// empty root keeps the start where it is (Root.Append), so deleted
		// records never come back.
		if offset <= m.LogStartOffset {
			return nil, nil
		}
		return m.WithLogStart(ctx, t.pages, offset, leaderEpoch, t.cfg.Paging)
	})
	if err != nil {
		return nil, fmt.Errorf("delete records of %s-%d before %d: %w", tp.Topic, tp.Partition, offset, err)
	}
	return m, nil
}
