package replica

import (
	"testing"

	"strata/segment"
)

// stillLog is a follower log that never changes.
type stillLog struct{ end int64 }

func (l stillLog) StartOffset() int64                                   { return 0 }
func (l stillLog) EndOffset() int64                                     { return l.end }
func (l stillLog) LatestEpoch() int32                                   { return 3 }
func (l stillLog) EndOffsetForEpoch(int32) (int64, int32)               { return l.end, 3 }
func (l stillLog) AppendReplica([]byte) (segment.AppendInfo, error)     { return segment.AppendInfo{}, nil }
func (l stillLog) TruncateTo(o int64) (int64, error)                    { return o, nil }
func (l stillLog) TruncateFullyAndStartAt(int64, segment.History) error { return nil }
func (l stillLog) DeleteRecordsBefore(o int64) (int64, error)           { return o, nil }

// KIP-903: the follower names its registration epoch on every fetch, so the
// leader can refuse its previous life's (STALE_BROKER_EPOCH).
func TestFetchNamesTheBrokerEpoch(t *testing.T) {
	epoch := int64(41)
	f := NewFetcher(FetcherConfig{Self: 2, Leader: 1, BrokerEpoch: func() int64 { return epoch }})
	f.Set(Partition{Topic: "t", Index: 0, LeaderEpoch: 3, Log: stillLog{end: 10}})
	for _, want := range []int64{41, 42} {
		epoch = want // re-registered: the next fetch names the new epoch
		req, _ := f.build(t0)
		if req == nil {
			t.Fatal("no fetch built")
		}
		if req.ReplicaState.ID != 2 || req.ReplicaState.Epoch != want || req.ReplicaID != 2 {
			t.Fatalf("fetch names replica %d/%d at epoch %d, want 2 at %d", req.ReplicaID, req.ReplicaState.ID, req.ReplicaState.Epoch, want)
		}
	}
}
