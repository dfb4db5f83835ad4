package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestClusterJepsen (issue 20, "Done when"): for a minute, a random node
// of three is killed with SIGKILL and restarted, or paused with SIGSTOP
// past the session timeout and resumed, every few seconds, one fault at a
// time, under an idempotent acks=all load and a transactional one (a
// transaction in four aborted, a read_committed consumer following), with
// tiering of small segments, local copies deleted as soon as they are in
// the bucket, and compaction running on the transactional topic (which
// removes the aborted records). Once the last fault has healed and the
// load has stopped, the bucket must hold everything up to the high
// watermark and no node a local copy; what is read back, from the bucket
// alone, is counted: acknowledged records lost, duplicated or misplaced,
// committed records lost, aborted records seen (at the end or by the live
// consumer), and upload passes failed after the last fault healed. All
// must be 0.
//
// STRATA_JEPSEN_DURATION lengthens the faults (a Go duration); the
// seed is printed, and STRATA_FAULT_SEED repeats it.
func TestClusterJepsen(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of faults: not under -short")
	}
	faults := time.Minute
	if v := os.Getenv("STRATA_JEPSEN_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("STRATA_JEPSEN_DURATION=%q: want a positive duration", v)
		}
		faults = d
	}
	runJepsen(t, jepsenSettings(), func(_ int, elapsed time.Duration) bool { return elapsed < faults })
}

// jepsenSettings are the cluster settings of the Jepsen scenario: a
// shared bucket, RF 3, a 3 s session timeout, fast uploads and
// compaction.
func jepsenSettings() clusterSettings {
	return clusterSettings{sharedBucket: true, replicationFactor: 3,
		sessionTimeout: 3 * time.Second, heartbeat: 500 * time.Millisecond,
		extra: append([]string{"--compactor-interval", "500ms"}, tierFlags...)}
}

// runJepsen is TestClusterJepsen's scenario on three nodes started with
// s: a fault (a kill or a pause, at random) is injected, one at a time,
// for as long as more(faults injected so far, time since the first
// began) holds, and then everything is checked. Every client uses the
// cluster's client options, so a secured cluster runs it unchanged.
func runJepsen(t *testing.T, s clusterSettings, more func(faults int, elapsed time.Duration) bool) {
	rng := newRand(t)
	c := startCluster(t, 3, s)
	const plain, txn = "jepsen", "jepsen-txn"
	c.createTopic(plain, 3, 3, tieredConfigs(4096, "min.insync.replicas", "2"))
	c.createTopic(txn, 3, 3, tieredConfigs(4096, "min.insync.replicas", "2",
		"cleanup.policy", "compact", "min.cleanable.dirty.ratio", "0.01"))
	b := openBucket(t, c.bucketDir)
	adm := kadm.NewClient(c.client())

	l := startLoad(t, c, plain, 3, 2, 100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ledger, waitTxns := txnLoad(ctx, t, c.kafka, txn, 2, c.clientOpts...)
	watch := watchCommitted(t, c.kafka, txn, c.clientOpts...)
	l.waitAcked(c, 300, 30*time.Second)
	waitCommitted(t, ledger, 10, time.Minute, "before the faults")

	above := watchLocalStarts(t, c, b, map[string]int32{plain: 3, txn: 3})
	start := time.Now()
	var kills, pauses int
	var lastFault time.Time
	for more(kills+pauses, time.Since(start)) {
		time.Sleep(time.Duration(1000+rng.IntN(3000)) * time.Millisecond)
		up := c.up()
		victim := up[rng.IntN(len(up))]
		kill := rng.IntN(2) == 0
		// From the third fault on, a kind not injected yet comes next:
		// a short run has both.
		if n := kills + pauses; n >= 2 && (kills == 0 || pauses == 0) {
			kill = kills == 0
		}
		if kill {
			down := time.Duration(500+rng.IntN(3500)) * time.Millisecond
			c.kill(victim)
			time.Sleep(down)
			c.restart(victim)
			lastFault = time.Now()
			kills++
			t.Logf("%s: node %d killed (SIGKILL), restarted %s later", time.Since(start).Round(time.Second), victim, down.Round(time.Millisecond))
		} else {
			// Past the 3 s session timeout: the node is fenced and its
			// leaderships move while it believes it still leads.
			down := time.Duration(3500+rng.IntN(2500)) * time.Millisecond
			c.pause(victim)
			time.Sleep(down)
			c.resume(victim)
			lastFault = time.Now()
			pauses++
			t.Logf("%s: node %d paused (SIGSTOP) for %s", time.Since(start).Round(time.Second), victim, down.Round(time.Millisecond))
		}
	}
	c.waitISR(plain, 2*time.Minute)
	c.waitISR(txn, 2*time.Minute)
	t.Logf("%d faults (%d kill -9, %d SIGSTOP) in %s; every replica back in sync %s after the last",
		kills+pauses, kills, pauses, lastFault.Sub(start).Round(time.Second), time.Since(lastFault).Round(time.Millisecond))
	mark := c.settle(adm, plain, txn)
	l.waitAcked(c, 300, time.Minute)
	waitCommitted(t, ledger, ledger.committed()+10, time.Minute, "after the last fault")
	cancel()
	waitTxns()
	l.stop()
	waitStable(t, c.client(), txn, 3, time.Minute)

	drainToBucket(t, c, adm, b, plain, 30*time.Second)
	drainToBucket(t, c, adm, b, txn, 30*time.Second)
	res := check(l.historyCopy(), readBack(t, c, plain))
	tres := checkTxns(ledger, readTxnTopic(t, c.kafka, txn, true, c.clientOpts...), watch())
	failed := c.uploadFailuresSince(mark)
	aboveEnd := above()
	t.Logf("jepsen: %d faults (%d kill -9, %d SIGSTOP); idempotent: acked %d, lost %d, duplicated %d, misplaced %d, unexpected %d; transactional: committed %d, aborted %d, unknown %d, records lost %d, duplicated %d, aborted seen %d (live %d), partial %d; failed uploads after the last fault healed: %d; local logs above the bucket's end: %d",
		kills+pauses, kills, pauses, res.acked, res.lost, res.duplicated, res.misplaced, res.unexpected,
		tres.committed, tres.aborted, tres.unknown, tres.lost, tres.duplicated, tres.abortedSeen, tres.liveAbortedSeen, tres.partial, len(failed), len(aboveEnd))
	if !res.ok() {
		t.Errorf("%s: the log read back does not hold what was acknowledged: %s", plain, res)
	}
	if !tres.ok() {
		t.Errorf("%s: %s", txn, tres)
	}
	if len(failed) > 0 {
		t.Errorf("%d upload passes failed after the last fault healed, want none:\n%s", len(failed), sample(failed, 5))
	}
	if len(aboveEnd) > 0 {
		t.Errorf("%d local logs started above the bucket's end: records deleted that the bucket's current manifest does not hold:\n%s", len(aboveEnd), sample(aboveEnd, 5))
	}
	if l.acked() == 0 || tres.committed == 0 {
		t.Errorf("nothing acknowledged (%d) or committed (%d): the run tested nothing", l.acked(), tres.committed)
	}
}
