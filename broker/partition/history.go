package partition

import (
	"context"
	"fmt"

	"strata/segment"
	"strata/tier/format"
)

// historyBelow is what a follower below its leader's local log start
// learns from the bucket (replica.Partition.HistoryBelow); nil without a
// tier.
func (p *Partition) historyBelow() func(ctx context.Context, offset int64) (int64, segment.History, bool, error) {
	if p.host.Bucket == nil {
		return nil
	}
	return func(ctx context.Context, offset int64) (int64, segment.History, bool, error) {
		if !p.Tiered() {
			return 0, segment.History{}, false, nil
		}
		return p.host.Bucket.HistoryBelow(ctx, p.BucketName(), offset)
	}
}

// startAtBucketEnd restarts the local log of a partition this node leads
// at the end of m, the bucket's manifest, when the log ends below it: the
// node's logs/ directory was lost (a replaced disk, an operator's mistake)
// or cut short, while the metadata and the bucket survived. Appending at
// the local end would assign offsets the bucket already holds, shadowing
// its records and, after local retention, losing the new ones. The log
// starts with the producer state and leader epochs the last object
// carries, as a follower restarted at its leader's local start does, so
// that an idempotent producer's retry is still recognised and a
// transaction open there is not forgotten. The caller holds p.tier.mu.
func (p *Partition) startAtBucketEnd(ctx context.Context, m *format.Root) error {
	end := m.EndOffset()
	if !p.leading.Load() || p.log.EndOffset() >= end {
		return nil
	}
	start, h, ok, err := p.host.Bucket.HistoryBelow(ctx, p.BucketName(), end)
	if err != nil {
		return err
	}
	if !ok {
		// Retention emptied the bucket: nothing below its end is left to
		// carry state from.
		start, h = end, segment.History{}
	}
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	localStart, localEnd := p.log.StartOffset(), p.log.EndOffset()
	if !p.leading.Load() || localEnd >= start {
		return nil
	}
	if err := p.log.TruncateFullyAndStartAt(start, h); err != nil {
		return fmt.Errorf("restart at %d: %w", start, err)
	}
	p.logEnd.Set(float64(start))
	p.advanceHighWatermark()
	p.host.Logger.Warn("local log ends below the bucket's end: restarted it there so that no offset the bucket holds is assigned again",
		"topic", p.topic, "partition", p.index, "localStart", localStart, "localEnd", localEnd, "bucketEnd", start)
	return nil
}
