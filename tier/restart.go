package tier

import (
	"context"
	"fmt"

	"strata/segment"
	"strata/tier/format"
)

// HistoryBelow is what a local log that must start at or above offset
// learns from the bucket, as Kafka's buildRemoteLogAuxState does for a
// follower below its leader's local log start: it starts where the object
// holding offset-1 ends (start, at or above offset), with that object's
// producer snapshot (the state as of start) and leader epochs. Without
// them, a transaction open across start would be forgotten: never
// unstable for read_committed readers, its abort never indexed.
//
// ok is false, with no error, when the bucket holds no object with
// offset-1 (offset 0, an empty bucket, or history retention has dropped).
// An object written before producer snapshots had transactions (version 1)
// gives a history without them.
func (t *Tier) HistoryBelow(ctx context.Context, tp format.TopicPartition, offset int64) (start int64, h segment.History, ok bool, err error) {
	if offset <= 0 {
		return 0, segment.History{}, false, nil
	}
	// The bucket's newest manifest: the one cached here (a follower's) may
	// predate the uploads that let its leader's local log start move.
	m, err := t.Refresh(ctx, tp)
	if err != nil {
		return 0, segment.History{}, false, err
	}
	rs, ok, err := m.Find(ctx, t.pages, offset-1)
	if err != nil || !ok {
		return 0, segment.History{}, false, err
	}
	start = rs.LastOffset + 1
	if rs.ProducerSnapshot.Len > 0 {
		snap, err := t.part(ctx, tp, &rs, rs.ProducerSnapshot, "producer snapshot")
		if err != nil {
			return 0, segment.History{}, false, fmt.Errorf("history of %s-%d below %d: %w", tp.Topic, tp.Partition, start, err)
		}
		if err := segment.CheckSnapshot(snap, start); err != nil {
			err = fmt.Errorf("%w: producer snapshot of %s: %v", segment.ErrCorruptSegment, rs.Key, err)
			t.reportCorrupt(tp, rs.Key, err, false)
			return 0, segment.History{}, false, err
		}
		// The index cache owns what it returns; the log keeps its own.
		h.ProducerSnapshot = append([]byte(nil), snap...)
	}
	for _, e := range rs.LeaderEpochs {
		h.Epochs = append(h.Epochs, segment.EpochStart{Epoch: e.Epoch, StartOffset: e.StartOffset})
	}
	return start, h, true, nil
}
