package group

import (
	"context"
	"testing"
	"time"
)

// TestTraceRebalance follows the classic protocol's life cycle: KIP-394's
// MEMBER_ID_REQUIRED, the join barrier waiting for every member, the
// leader's sync releasing the followers, a session timeout starting a
// rebalance, the rebalance timeout removing a member that does not rejoin,
// and a leave emptying the group.
func TestTraceRebalance(t *testing.T) {
	h := newHarness(t, Config{})
	h.logf("two members join")
	h.join("a", "", "consumer", "range")
	h.join("a", "", "consumer", "range")()
	h.join("b", "", "consumer", "range", "roundrobin")
	waitB := h.join("b", "", "consumer", "range", "roundrobin")
	h.state()
	h.logf("a rejoins: the barrier completes")
	waitA := h.join("a", "", "consumer", "range")
	waitA()
	waitB()
	h.state()
	h.logf("b syncs first and waits for the leader")
	waitSyncB := h.sync("b", nil)
	h.sync("a", map[string]string{"a": "A", "b": "B"})()
	waitSyncB()
	h.state()
	h.logf("b stops heartbeating; a keeps going")
	for range 4 {
		h.advance(3 * time.Second)
		h.heartbeat("a")
	}
	h.state()
	h.logf("a rejoins alone")
	h.join("a", "", "consumer", "range")()
	h.sync("a", map[string]string{"a": "AB"})()
	h.heartbeat("b")
	h.logf("c joins; a does not rejoin within the rebalance timeout")
	h.join("c", "", "consumer", "range")
	waitC := h.join("c", "", "consumer", "range")
	for range 4 {
		h.heartbeat("a") // alive, but never rejoins
		h.advance(8 * time.Second)
	}
	waitC()
	h.state()
	h.sync("c", map[string]string{"c": "C"})()
	h.heartbeat("a")
	h.logf("c leaves")
	h.leave("c")
	h.state()
	h.check("rebalance")
}

// TestTraceStaticMembership follows KIP-345: a static member rejoining with
// its instance id gets a new member id without a rebalance, and its old id
// is fenced.
func TestTraceStaticMembership(t *testing.T) {
	h := newHarness(t, Config{})
	waitS := h.join("s", "inst-1", "consumer", "range")
	waitS()
	h.sync("s", map[string]string{"s": "S"})()
	h.state()
	h.logf("the instance restarts (new client, no member id)")
	old := h.ids["s"]
	delete(h.ids, "s")
	h.join("s2", "inst-1", "consumer", "range")()
	h.sync("s2", nil)()
	h.state()
	h.logf("the old incarnation is fenced")
	h.ids["s-old"], h.gens["s-old"], h.instances["s-old"] = old, h.gens["s2"], "inst-1"
	h.names[old] = "s-old"
	h.heartbeat("s-old")
	h.heartbeat("s2")
	h.check("static")
}

// TestTraceOffsets: commits are refused to stale generations, stored as
// records, replayed by a new coordinator, and expire offsets.retention
// after the group empties.
func TestTraceOffsets(t *testing.T) {
	h := newHarness(t, Config{OffsetsRetention: time.Hour})
	h.join("a", "", "consumer", "range")
	h.join("a", "", "consumer", "range")()
	h.commit("a", 10)
	h.sync("a", map[string]string{"a": "A"})()
	h.commit("a", 10)
	h.gens["a"]--
	h.commit("a", 5)
	h.gens["a"]++
	h.fetch()
	h.logf("a new coordinator replays the log")
	h.c.Close()
	h.start(Config{OffsetsRetention: time.Hour})
	h.fetch()
	h.state()
	h.heartbeat("a")
	h.logf("a leaves; an admin rewinds with generation -1")
	h.leave("a")
	h.commit("", 3)
	h.fetch()
	h.logf("retention runs out")
	h.advance(59 * time.Minute)
	h.c.ExpireOffsets(context.Background())
	h.fetch()
	h.advance(2 * time.Minute)
	h.c.ExpireOffsets(context.Background())
	h.fetch()
	h.state()
	h.logf("the deletion is replayed too")
	h.c.Close()
	h.start(Config{})
	h.state()
	h.check("offsets")
}

// TestTraceInitialDelay: group.initial.rebalance.delay.ms holds an empty
// group's first rebalance open, extended while members keep arriving.
func TestTraceInitialDelay(t *testing.T) {
	h := newHarness(t, Config{InitialRebalanceDelay: 3 * time.Second})
	h.join("a", "", "consumer", "range")
	waitA := h.join("a", "", "consumer", "range")
	h.advance(2 * time.Second)
	h.join("b", "", "consumer", "range")
	waitB := h.join("b", "", "consumer", "range")
	h.advance(2 * time.Second)
	h.state()
	h.advance(2 * time.Second)
	waitA()
	waitB()
	h.state()
	h.check("initial_delay")
}

// TestPartitionFormula pins Kafka's group-to-partition formula:
// abs(String.hashCode) mod N, with Utils.abs mapping MIN_VALUE to 0.
func TestPartitionFormula(t *testing.T) {
	for _, tc := range []struct {
		group string
		n     int32
		want  int32
	}{
		{"", 50, 0},
		{"a", 50, 97 % 50},
		{"abc", 50, 96354 % 50},
		{"polygenelubricants", 50, 0},     // hashCode is Integer.MIN_VALUE
		{"my-group", 50, 1906497762 % 50}, // hashCode -1906497762
		{"é", 7, 233 % 7},
		{"\U0001F600", 50, 1772899 % 50}, // the surrogate pair D83D DE00
	} {
		if got := Partition(tc.group, tc.n); got != tc.want {
			t.Errorf("Partition(%q, %d) = %d, want %d", tc.group, tc.n, got, tc.want)
		}
	}
}

// TestJoinUnknownMemberLeavesNoGroup: a JoinGroup refused for an unknown
// member id does not leave behind the empty group made to look it up.
func TestJoinUnknownMemberLeavesNoGroup(t *testing.T) {
	h := newHarness(t, Config{})
	h.ids["ghost"] = "ghost-id"
	h.join("ghost", "", "consumer", "range")
	h.state()
	if got, want := h.trace.String(), "  join ghost -> UNKNOWN_MEMBER_ID gen=-1 protocol=\"\" leader=\"\" members=[] skip=false\n  state (no group)\n"; got != want {
		t.Fatalf("trace:\n%swant:\n%s", got, want)
	}
}
