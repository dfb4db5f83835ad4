package broker

import (
	"context"
	"fmt"

	"strata/segment"
	"strata/tier/format"
)

// historyBelow is what a follower of p below its leader's local log start
// learns from the bucket (replica.Partition.HistoryBelow); nil without a
// tier.
func (b *Broker) historyBelow(p *partition) func(ctx context.Context, offset int64) (int64, segment.History, bool, error) {
	if b.tier == nil {
		return nil
	}
	return func(ctx context.Context, offset int64) (int64, segment.History, bool, error) {
		if !b.remoteEnabled(p) {
			return 0, segment.History{}, false, nil
		}
		return b.tier.HistoryBelow(ctx, p.bucketName(), offset)
	}
}

// startAtBucketEnd restarts the local log of p, which this node leads, at
// the end of m, the bucket's manifest, when the log ends below it: the
// node's logs/ directory was lost (a replaced disk, an operator's mistake)
// or cut short, while the metadata and the bucket survived. Appending at
// the local end would assign offsets the bucket already holds, shadowing
// its records and, after local retention, losing the new ones. The log
// starts with the producer state and leader epochs the last object
// carries, as a follower restarted at its leader's local start does, so
// that an idempotent producer's retry is still recognised and a
// transaction open there is not forgotten. The caller holds p.tier.mu.
func (b *Broker) startAtBucketEnd(ctx context.Context, p *partition, m *format.Root) error {
	end := m.EndOffset()
	if !p.leading.Load() || p.log.EndOffset() >= end {
		return nil
	}
	start, h, ok, err := b.tier.HistoryBelow(ctx, p.bucketName(), end)
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
	b.log.Warn("local log ends below the bucket's end: restarted it there so that no offset the bucket holds is assigned again",
		"topic", p.topic, "partition", p.index, "localStart", localStart, "localEnd", localEnd, "bucketEnd", start)
	return nil
}
