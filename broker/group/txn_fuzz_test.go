package group

import (
	"context"
	"testing"
	"time"
)

// onceLog returns its bytes to the first Read and nothing after.
type onceLog struct {
	b    []byte
	read bool
}

func (l *onceLog) Append(context.Context, int32, []byte) (int64, error) {
	panic("onceLog is read-only")
}

func (l *onceLog) Read(dst []byte, _ int32, _ int64) ([]byte, error) {
	if l.read {
		return dst, nil
	}
	l.read = true
	return append(dst, l.b...), nil
}

// FuzzReplay: whatever __consumer_offsets holds (transactional batches,
// markers, damaged records), loading it fails or succeeds, never panics,
// and a loaded partition answers OffsetFetch.
func FuzzReplay(f *testing.F) {
	commit := record{key: offsetKey(testGroup, "t", 0), value: offsetValue(offset{offset: 5, leaderEpoch: -1})}
	plain := buildBatch([]record{commit}, 1)
	txn := buildBatchFor([]record{commit}, 1, producer{id: 7, epoch: 0})
	f.Add(plain)
	f.Add(append(append([]byte(nil), txn...), markerBatch(7, 0, true)...))
	f.Add(append(append([]byte(nil), txn...), markerBatch(7, 0, false)...))
	f.Add(append(append([]byte(nil), plain...), txn...))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := New(Config{Partitions: 1, Log: &onceLog{b: b}, Clock: &fakeClock{now: time.Unix(1_700_000_000, 0)}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Load(context.Background(), 0); err != nil {
			return
		}
		h := &harness{t: t, c: c}
		h.fetchAt(0, true)
		c.CompleteTxn(0, 7, true)
		h.fetchAt(0, true)
	})
}
