package broker

import (
	"context"

	"strata/segment"
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
