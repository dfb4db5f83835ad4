package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// TestClusterReplaceDisk (issue 23, item 5): a voter of a three-node
// tiered cluster under acks=all load loses its disk: SIGKILL, its whole
// data dir deleted, the same node started again with the same node id and
// settings on an empty directory (docs/operations.md, "Replacing a node's
// disk"). It rejoins the metadata quorum from the other voters, rebuilds
// its replicas from the leaders (and, below their local log start, the
// bucket), and is back in every ISR; it then leads its preferred
// partitions again, and every acknowledged record reads back once, at its
// offset, in order.
func TestClusterReplaceDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("a process test of a minute: not under -short")
	}
	start := time.Now()
	c := startCluster(t, 3, clusterSettings{
		sharedBucket: true,
		extra:        []string{"--tier-upload-interval", "200ms"},
	})
	const topic = "disk"
	// Small segments with no local retention beyond the bucket: most of
	// each partition's history is only in the bucket when the disk goes.
	ps := c.createTopic(topic, 3, 3, configs("min.insync.replicas", "2", "segment.bytes", "16384", "local.retention.bytes", "16384"))
	l := startLoad(t, c, topic, 3, 2, 150)
	l.waitAcked(c, 1500, 30*time.Second)

	// The victim: a voter that is not the controller and leads partitions,
	// so that its loss moves leaderships and its return takes them back;
	// the controller's own loss is covered by the failover tests.
	ctrl := c.waitController()
	victim := int32(-1)
	for id := int32(1); id <= 3; id++ {
		if id != ctrl && leaders(ps)[id] > 0 {
			victim = id
			break
		}
	}
	if victim < 0 {
		victim = ctrl%3 + 1
	}
	c.kill(victim)
	dir := c.dirs[victim-1]
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { // the new, empty disk
		t.Fatal(err)
	}
	t.Logf("node %d killed and its data dir %s emptied (controller: node %d)", victim, dir, ctrl)
	l.waitAcked(c, 500, 30*time.Second) // the two others serve on

	restarted := time.Now()
	c.restart(victim)
	after := c.waitISR(topic, time.Minute)
	t.Logf("node %d back in every ISR %s after its restart", victim, time.Since(restarted).Round(time.Millisecond))
	for p, s := range after {
		if !contains(s.isr, victim) {
			t.Errorf("partition %d: ISR %v lacks node %d", p, s.isr, victim)
		}
	}
	// What an operator sees.
	t.Logf("strata topic describe %s:\n%s", topic, cliOK(t, nil, "topic", "describe", topic, "--bootstrap", c.bootstrap()))

	// The rebuilt replicas start where the leaders' local logs did: the
	// history below is in the bucket, not copied back to the disk.
	for p := range 3 {
		t.Logf("partition %d: node %d's local log starts at %d", p, victim, c.localStart(victim, topic, p))
	}
	// It is a voter of the metadata quorum again, alive, and its raft log
	// keeps up with the controller's commit index.
	c.waitFor("the node alive and caught up in the metadata quorum", 15*time.Second, func() bool {
		st := clusterStatusJSON(t, c)
		for _, b := range st.Brokers {
			if b.ID == victim {
				return b.Status == "alive" && b.Voter && b.RaftCommitIndex != nil && *b.RaftCommitIndex+20 >= st.Quorum.CommitIndex
			}
		}
		return false
	}, func() string { return fmt.Sprintf("%+v", clusterStatusJSON(t, c)) })

	// It leads its preferred partitions again (auto.leader.rebalance, or
	// an operator's elect-leaders), and the load goes on through it.
	preferred := func() (bool, string) {
		ps, err := c.partitions(topic)
		if err != nil {
			return false, err.Error()
		}
		var wrong []string
		for p, s := range ps {
			if s.replicas[0] == victim && s.leader != victim {
				wrong = append(wrong, fmt.Sprint(p))
			}
		}
		return len(wrong) == 0, strings.Join(wrong, ",")
	}
	deadline := time.Now().Add(10 * time.Second)
	for ok, _ := preferred(); !ok && time.Now().Before(deadline); ok, _ = preferred() {
		time.Sleep(200 * time.Millisecond)
	}
	if ok, _ := preferred(); !ok {
		cliOK(t, nil, "cluster", "elect-leaders", "--bootstrap", c.bootstrap())
		c.waitFor("node's preferred leaderships back", 15*time.Second, func() bool { ok, _ := preferred(); return ok },
			func() string { _, s := preferred(); return "partitions not led by it: " + s })
	}
	l.waitResumed(c, time.Now(), 30*time.Second)
	l.waitAcked(c, 300, 30*time.Second)

	res := checkLoad(t, c, l, topic)
	if res.acked < 2000 {
		t.Errorf("only %d records acknowledged", res.acked)
	}
	t.Logf("whole scenario: %s", time.Since(start).Round(time.Millisecond))
}

// clusterStatusJSON is `strata cluster status --json` of c.
func clusterStatusJSON(t *testing.T, c *cluster) clusterStatus {
	t.Helper()
	var st clusterStatus
	out := cliOK(t, nil, "cluster", "status", "--json", "--bootstrap", c.bootstrap())
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("strata cluster status --json: %v\n%s", err, out)
	}
	return st
}
