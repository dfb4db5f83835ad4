package node

import (
	"testing"
	"time"
)

// A follower's fetch held at its leader ends when the leader begins to
// lead a partition, and while the follower has not named a partition it
// replicates that the leader began to lead a moment ago, its fetch is
// held only briefly; after newLeadWindow, or once it names it, the
// usual long poll is back.
func TestNewLeadsWakeHeldFollowerFetches(t *testing.T) {
	var l newLeads
	now := time.Now()
	none := func(string, int32) bool { return false }
	names := func(topic string, index int32) bool { return topic == "t" && index == 0 }

	held, missing := l.hold(2, none, now)
	if missing || held.Err() != nil {
		t.Fatalf("before any new leadership: missing %v, woken %v", missing, held.Err())
	}
	l.add(tp{"t", 0}, []int32{1, 2}, now)
	if held.Err() == nil {
		t.Fatal("a fetch held before the new leadership was not woken")
	}

	next, missing := l.hold(2, none, now.Add(time.Millisecond))
	if !missing || next.Err() != nil {
		t.Fatalf("follower 2 not naming t-0 yet: missing %v (want true), woken %v (want not)", missing, next.Err())
	}
	if _, missing := l.hold(2, names, now.Add(time.Millisecond)); missing {
		t.Fatal("follower 2 names t-0, yet its fetch counts as missing it")
	}
	if _, missing := l.hold(3, none, now.Add(time.Millisecond)); missing {
		t.Fatal("node 3 does not replicate t-0, yet its fetch counts as missing it")
	}
	if _, missing := l.hold(2, none, now.Add(newLeadWindow+time.Millisecond)); missing {
		t.Fatal("after the window a fetch is held as long as ever")
	}
}
