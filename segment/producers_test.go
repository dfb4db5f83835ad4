package segment

import (
	"slices"
	"testing"
	"time"
)

// What DescribeProducers shows (Kafka's kafka-transactions.sh
// find-hanging reads it): each producer's epoch, last sequence, last write
// and the start offset of its ongoing transaction; and OngoingTxn, which
// decides whether a transactional produce needs verifying (KIP-890).
func TestProducersAndOngoingTxn(t *testing.T) {
	clock := newClock()
	dir := t.TempDir()
	l := mustOpen(t, dir, Config{Now: clock.Now})
	defer func() { l.Close() }()

	if got := l.Producers(); len(got) != 0 {
		t.Fatalf("producers of an empty log: %+v", got)
	}
	mustAppend(t, l, idemBatch(t, clock, 9, 2, 0, 3), 0) // 0-2, idempotent
	mustAppend(t, l, txnBatch(t, clock, 4, 1, 0, 2), 0)  // 3-4, txn of 4 opens at 3
	clock.Advance(time.Second)
	mustAppend(t, l, txnBatch(t, clock, 4, 1, 2, 1), 0) // 5
	mustAppend(t, l, txnBatch(t, clock, 6, 0, 0, 1), 0) // 6, txn of 6 opens at 6
	mustMarker(t, l, 6, 0, true, 3)                     // 7

	want := []ProducerState{
		{ProducerID: 4, Epoch: 1, LastSequence: 2, LastTimestamp: clock.Millis(), CoordinatorEpoch: 0, TxnStartOffset: 3},
		{ProducerID: 6, Epoch: 0, LastSequence: 0, LastTimestamp: clock.Millis(), CoordinatorEpoch: 3, TxnStartOffset: -1},
		{ProducerID: 9, Epoch: 2, LastSequence: 2, LastTimestamp: clock.Millis() - 1000, CoordinatorEpoch: 0, TxnStartOffset: -1},
	}
	if got := l.Producers(); !slices.Equal(got, want) {
		t.Fatalf("producers\n got %+v\nwant %+v", got, want)
	}
	for _, c := range []struct {
		pid   int64
		epoch int16
		want  bool
	}{
		{4, 1, true},
		{4, 2, false}, // a newer epoch is a new transaction
		{4, 0, false},
		{6, 0, false}, // committed
		{9, 2, false}, // not transactional
		{5, 0, false}, // unknown
	} {
		if got := l.OngoingTxn(c.pid, c.epoch); got != c.want {
			t.Errorf("OngoingTxn(%d, %d) = %v, want %v", c.pid, c.epoch, got, c.want)
		}
	}

	// The state comes back after a restart, from the snapshot.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = mustOpen(t, dir, Config{Now: clock.Now})
	if got := l.Producers(); !slices.Equal(got, want) {
		t.Fatalf("producers after a restart\n got %+v\nwant %+v", got, want)
	}
	if !l.OngoingTxn(4, 1) {
		t.Fatal("the open transaction of producer 4 was lost in a restart")
	}
}
