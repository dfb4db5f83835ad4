package segment

import (
	"errors"
	"testing"
)

// appendCoordinator appends b as a group coordinator writes a transactional
// offset commit.
func appendCoordinator(t testing.TB, l *Log, b []byte) (AppendInfo, error) {
	t.Helper()
	p, err := l.Prepare(b)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	p.FromCoordinator()
	return l.AppendPrepared(p, 0)
}

// Kafka's AppendOrigin.COORDINATOR: the group coordinator writes every
// transactional offset commit of a producer with base sequence 0, so its
// batches get no sequence and no duplicate check; the producer epoch is
// still checked, which is what fences a zombie's TxnOffsetCommit.
func TestCoordinatorAppendSkipsSequences(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()

	first, err := appendCoordinator(t, l, txnBatch(t, clock, 7, 2, 0, 2))
	if err != nil {
		t.Fatalf("first coordinator batch: %v", err)
	}
	// The same sequence range again: a client's retry would be answered
	// as a duplicate with the first one's offsets; the coordinator's is a
	// new commit and must be written.
	second, err := appendCoordinator(t, l, txnBatch(t, clock, 7, 2, 0, 2))
	if err != nil {
		t.Fatalf("second coordinator batch: %v", err)
	}
	if second.Duplicate || second.BaseOffset != first.LastOffset+1 {
		t.Fatalf("second batch %+v after first %+v: want it appended after", second, first)
	}
	// A sequence a client could not send after the last one.
	if _, err := appendCoordinator(t, l, txnBatch(t, clock, 7, 2, 9, 1)); err != nil {
		t.Fatalf("coordinator batch with a sequence gap: %v", err)
	}
	wantUnstable(t, l, first.BaseOffset)

	// An older epoch is fenced, from the coordinator too.
	if _, err := appendCoordinator(t, l, txnBatch(t, clock, 7, 1, 0, 1)); !errors.Is(err, ErrInvalidProducerEpoch) {
		t.Fatalf("coordinator batch of an older epoch: %v, want ErrInvalidProducerEpoch", err)
	}
	mustMarker(t, l, 7, 2, true, 0)
	wantUnstable(t, l, -1)

	// A client batch still gets the sequence check.
	if _, err := l.Append(txnBatch(t, clock, 8, 0, 0, 1), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(txnBatch(t, clock, 8, 0, 5, 1), 0); !errors.Is(err, ErrOutOfOrderSequence) {
		t.Fatalf("client batch with a sequence gap: %v, want ErrOutOfOrderSequence", err)
	}
}
