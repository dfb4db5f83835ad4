package segment

import (
	"testing"
)

// Proof: a follower that restarts its log at the leader's local log start
// (TruncateFullyAndStartAt, as broker/replica/fetcher.go does on
// OFFSET_MOVED_TO_TIERED_STORAGE) loses the producer state of a
// transaction open across that point. Promoted to leader, it neither holds
// the LSO at the transaction's first offset nor records the abort in its
// .txnindex when the ABORT marker comes: read_committed consumers of the
// history below (in the bucket) see the aborted records as committed.
func TestRV3RestartedFollowerForgetsOpenTxn(t *testing.T) {
	clock := newClock()
	leader := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer leader.Close()
	mustAppend(t, leader, idemBatch(t, clock, 9, 0, 0, 3), 0) // 0-2
	mustAppend(t, leader, txnBatch(t, clock, 2, 0, 0, 2), 0)  // 3-4: producer 2's transaction opens
	mustAppend(t, leader, idemBatch(t, clock, 9, 0, 3, 5), 0) // 5-9
	const localStart = 5                                      // the leader's local log start once 0-4 went to the bucket
	wantUnstable(t, leader, 3)

	follower := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer follower.Close()
	// The follower is given what the bucket object ending below localStart
	// carries (Kafka's buildRemoteLogAuxState): broker/replica/fetcher.go
	// reads it from the bucket.
	if err := follower.TruncateFullyAndStartAt(localStart, historyAt(t, leader, localStart)); err != nil {
		t.Fatal(err)
	}
	recs, err := leader.Read(nil, localStart, leader.EndOffset(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := follower.AppendReplica(recs); err != nil {
		t.Fatal(err)
	}
	lf, lok := leader.FirstUnstableOffset()
	ff, fok := follower.FirstUnstableOffset()
	t.Logf("first unstable offset: leader %d/%v, restarted follower %d/%v", lf, lok, ff, fok)

	// The follower is promoted and the coordinator's ABORT marker lands.
	abortL, err := leader.AppendMarker(2, 0, false, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := follower.AppendMarker(2, 0, false, 0, 1); err != nil {
		t.Fatal(err)
	}
	la := leader.AbortedTransactions(0, leader.EndOffset())
	fa := follower.AbortedTransactions(0, follower.EndOffset())
	t.Logf("aborted index: leader %+v (marker at %d), promoted follower %+v", la, abortL.BaseOffset, fa)
	if fok != lok || ff != lf {
		t.Errorf("restarted follower does not know producer 2's open transaction: first unstable %d/%v, leader %d/%v", ff, fok, lf, lok)
	}
	if len(fa) != len(la) {
		t.Errorf("promoted follower recorded no abort for producer 2's transaction (leader: %+v, follower: %+v)", la, fa)
	}
}
