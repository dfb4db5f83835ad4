package partition

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/broker/replica"
	"strata/segment"
)

// A leader that is its ISR's only member commits what it appends: the high
// watermark is the log end right after each append.
func TestLoneLeaderHighWatermarkIsTheLogEnd(t *testing.T) {
	n := newNode(t)
	p := n.open(t)
	p.SetRole(leader(0, []int32{1}, []int32{1}))
	for i, b := range [][]byte{batch("a"), batch("b", "c", "d"), batch("e", "f")} {
		info := mustAppend(t, p, b)
		if hw, leo := p.HighWatermark(), p.Log().EndOffset(); hw != leo || hw != info.LastOffset+1 {
			t.Fatalf("append %d: high watermark %d, log end %d, last offset %d", i, hw, leo, info.LastOffset)
		}
	}
}

// With a follower in the ISR the high watermark is the smallest log end
// among them: an append alone does not move it, the follower's fetch at
// an offset (its word that it has everything below) does, and it never
// moves back.
func TestHighWatermarkWaitsForTheISR(t *testing.T) {
	n := newNode(t)
	p := n.open(t)
	p.SetRole(leader(0, []int32{1, 2}, []int32{1, 2}))
	mustAppend(t, p, batch("a", "b", "c"))
	mustAppend(t, p, batch("d", "e"))
	if hw := p.HighWatermark(); hw != 0 {
		t.Fatalf("after appends no follower has: high watermark %d, want 0", hw)
	}
	steps := []struct {
		fetch  int64 // follower 2's fetch offset
		wantHW int64
	}{
		{fetch: 0, wantHW: 0},
		{fetch: 3, wantHW: 3},
		{fetch: 5, wantHW: 5},
		{fetch: 4, wantHW: 5}, // never back
	}
	for _, s := range steps {
		must(t, p.ReplicaFetched(2, -1, s.fetch))
		if hw := p.HighWatermark(); hw != s.wantHW {
			t.Fatalf("follower fetched at %d: high watermark %d, want %d", s.fetch, hw, s.wantHW)
		}
	}
	if err := p.ReplicaFetched(9, -1, 5); !errors.Is(err, kerr.NotLeaderForPartition) {
		t.Fatalf("fetch from broker 9, not a replica: %v, want NOT_LEADER_OR_FOLLOWER", err)
	}
	p.SetRole(followerOf(2, 1))
	if err := p.ReplicaFetched(2, -1, 5); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("replica fetch from a follower: %v, want ErrNotLeader", err)
	}
}

// A follower takes its leader's high watermark, but never above its own
// log end (the leader may be ahead of what it has copied) nor below its
// own log start.
func TestFollowerFetchedCapsAtTheLocalLogEnd(t *testing.T) {
	cases := []struct {
		name     string
		logStart int64
		leaderHW int64
		want     int64
	}{
		{name: "below the log end", leaderHW: 3, want: 3},
		{name: "at the log end", leaderHW: 5, want: 5},
		{name: "above the log end", leaderHW: 100, want: 5},
		{name: "below the log start", logStart: 3, leaderHW: 1, want: 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			p := n.open(t, batch("a", "b", "c"), batch("d", "e"))
			p.SetRole(followerOf(2, 0))
			if c.logStart > 0 {
				if _, err := p.Log().DeleteRecordsBefore(c.logStart); err != nil {
					t.Fatal(err)
				}
			}
			p.FollowerFetched(c.leaderHW)
			if hw := p.HighWatermark(); hw != c.want {
				t.Fatalf("leader's high watermark %d: follower's %d, want %d", c.leaderHW, hw, c.want)
			}
		})
	}
}

// A follower's truncation takes its high watermark down with its log end
// (Kafka's UnifiedLog.truncateTo), so that the high watermark it takes
// into a later leadership is never above what it holds. The fetcher
// truncates through the Log it was given with Follow.
func TestFollowerTruncationLowersTheHighWatermark(t *testing.T) {
	cases := []struct {
		name            string
		truncate        func(l replica.Log) error
		wantEnd, wantHW int64
	}{
		{
			name: "TruncateTo below the high watermark",
			truncate: func(l replica.Log) error {
				_, err := l.TruncateTo(3)
				return err
			},
			wantEnd: 3, wantHW: 3,
		},
		{
			name: "TruncateTo the log end",
			truncate: func(l replica.Log) error {
				_, err := l.TruncateTo(5)
				return err
			},
			wantEnd: 5, wantHW: 5,
		},
		{
			name: "TruncateFullyAndStartAt below the high watermark",
			truncate: func(l replica.Log) error {
				return l.TruncateFullyAndStartAt(2, segment.History{})
			},
			wantEnd: 2, wantHW: 2,
		},
		{
			name: "TruncateFullyAndStartAt above the log end: the high watermark is the new log start",
			truncate: func(l replica.Log) error {
				return l.TruncateFullyAndStartAt(10, segment.History{})
			},
			wantEnd: 10, wantHW: 10,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := newNode(t)
			p := n.open(t)
			p.SetRole(leader(0, []int32{1}, []int32{1}))
			mustAppend(t, p, batch("a", "b", "c"))
			mustAppend(t, p, batch("d", "e"))
			p.SetRole(followerOf(2, 1))
			follows, _ := n.fetchers.reset()
			if len(follows) != 1 {
				t.Fatalf("%d Follow calls, want 1", len(follows))
			}
			if hw := p.HighWatermark(); hw != 5 {
				t.Fatalf("deposed leader's high watermark %d, want 5", hw)
			}
			log := follows[0].p.Log
			must(t, c.truncate(log))
			if end, hw := p.Log().EndOffset(), p.HighWatermark(); end != c.wantEnd || hw != c.wantHW {
				t.Fatalf("log end %d, high watermark %d; want %d, %d", end, hw, c.wantEnd, c.wantHW)
			}
		})
	}
}
