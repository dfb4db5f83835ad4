package meta

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestWaitAppliedReadsAfterTheLeadersWrite: once a follower has waited for
// the controller's commit index, its State holds every change the
// controller acknowledged before (issue 21, read after write), including
// when the log ends in entries that change nothing (a refused command, a
// barrier, as a new leader's no-op), and an index the log never reaches
// ends with the caller's context.
func TestWaitAppliedReadsAfterTheLeadersWrite(t *testing.T) {
	q := newQuorum(t, 3)
	q.open(1, 2, 3)
	leader := q.leader()
	ctx := testCtx(t)
	if _, err := leader.RegisterBroker(ctx, Registration{Incarnation: "i", ID: leader.ControllerID(), Host: "127.0.0.1", Port: 9092}); err != nil {
		t.Fatal(err)
	}
	wait := func(what string, index uint64) {
		t.Helper()
		for _, f := range q.followers() {
			wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			err := f.WaitApplied(wctx, index)
			cancel()
			if err != nil {
				t.Fatalf("%s: follower %s: WaitApplied(%d): %v", what, f.nodeID, index, err)
			}
		}
	}
	for i := range 5 {
		name := []string{"a", "b", "c", "d", "e"}[i]
		if _, err := leader.CreateTopic(ctx, TopicSpec{Name: name, Partitions: 1, ReplicationFactor: 1}); err != nil {
			t.Fatal(err)
		}
		wait("create "+name, leader.CommitIndex())
		for _, f := range q.followers() {
			if _, ok := f.State().Topics[name]; !ok {
				t.Fatalf("follower %s waited for the commit index after creating %s and does not have it", f.nodeID, name)
			}
		}
		if err := leader.AlterConfigs(ctx, name, map[string]string{"retention.ms": "1000"}, nil, false); err != nil {
			t.Fatal(err)
		}
		wait("alter "+name, leader.CommitIndex())
		for _, f := range q.followers() {
			if got := f.State().Topics[name].Configs["retention.ms"]; got != "1000" {
				t.Fatalf("follower %s waited for the commit index after altering %s and has retention.ms=%q", f.nodeID, name, got)
			}
		}
	}

	// A refused command is applied and changes nothing: State.Index stays
	// behind it, and the wait still ends.
	if _, err := leader.CreateTopic(ctx, TopicSpec{Name: "a", Partitions: 1, ReplicationFactor: 1}); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("creating a again: %v", err)
	}
	wait("a refused command", leader.CommitIndex())
	// A barrier never reaches the state machine.
	if err := leader.raft.Barrier(time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	wait("a barrier", leader.CommitIndex())

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := q.followers()[0].WaitApplied(short, leader.CommitIndex()+100); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitApplied past the end of the log: %v, want the deadline", err)
	}
}

// After a restart on a snapshot that covers the whole log, the state
// machine applies no command until the next one comes, which on an idle
// cluster may be never: the wait looks at the log past the snapshot once,
// not at every entry since the first on every request that waits.
func TestWaitAppliedAfterRestartOnASnapshot(t *testing.T) {
	q := newQuorum(t, 1)
	q.open(1)
	s := q.leader()
	ctx := testCtx(t)
	if _, err := s.RegisterBroker(ctx, Registration{Incarnation: "i", ID: 1, Host: "127.0.0.1", Port: 9092}); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if _, err := s.CreateTopic(ctx, TopicSpec{Name: fmt.Sprintf("t%d", i), Partitions: 1, ReplicationFactor: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	q.close(1)
	q.open(1)
	s = q.leader()
	if len(s.State().Topics) != 30 {
		t.Fatalf("%d topics after the restart, want 30", len(s.State().Topics))
	}
	index := s.CommitIndex()
	wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := s.WaitApplied(wctx, index); err != nil {
		t.Fatal(err)
	}
	if got := s.fsm.applied.Load(); got < index {
		t.Fatalf("after waiting for %d the state machine counts %d applied: every later wait scans the log from there again", index, got)
	}
}
