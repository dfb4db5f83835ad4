package replica

import (
	"log/slog"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/segment"
)

// startLog is a Log that only tracks its start and end.
type startLog struct{ start, end int64 }

func (l *startLog) StartOffset() int64                     { return l.start }
func (l *startLog) EndOffset() int64                       { return l.end }
func (l *startLog) LatestEpoch() int32                     { return 0 }
func (l *startLog) EndOffsetForEpoch(int32) (int64, int32) { return -1, -1 }
func (l *startLog) AppendReplica([]byte) (segment.AppendInfo, error) {
	return segment.AppendInfo{}, nil
}
func (l *startLog) TruncateTo(o int64) (int64, error) { l.end = o; return o, nil }
func (l *startLog) TruncateFullyAndStartAt(o int64, _ segment.History) error {
	l.start, l.end = o, o
	return nil
}
func (l *startLog) DeleteRecordsBefore(o int64) (int64, error) { l.start = o; return o, nil }

// TestFollowerLogStartBound: a follower follows its leader's log start up,
// within its own log and never past its bound (on a tiered topic, what the
// bucket's current manifest holds: a deposed leader may have moved its
// start on the strength of a manifest that is hidden).
func TestFollowerLogStartBound(t *testing.T) {
	for _, tc := range []struct {
		name        string
		leaderStart int64
		bound       func() int64
		wantStart   int64
	}{
		{"no bound", 80, nil, 80},
		{"past the log end", 150, nil, 100},
		{"bucket holds less", 80, func() int64 { return 50 }, 50},
		{"bucket holds more", 80, func() int64 { return 90 }, 80},
		{"bound below the start", 80, func() int64 { return 5 }, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &startLog{start: 10, end: 100}
			f := &Fetcher{log: slog.New(slog.DiscardHandler)}
			s := &fetchState{Partition: Partition{Topic: "t", Log: l, LogStartBound: tc.bound}}
			rp := kmsg.NewFetchResponseTopicPartition()
			rp.HighWatermark, rp.LogStartOffset = 100, tc.leaderStart
			if err := f.applyPartition(s, 100, &rp); err != nil {
				t.Fatal(err)
			}
			if l.start != tc.wantStart {
				t.Fatalf("follower's log start %d after the leader's %d, want %d", l.start, tc.leaderStart, tc.wantStart)
			}
		})
	}
}
