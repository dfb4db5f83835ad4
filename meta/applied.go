package meta

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
)

// Read after write. A change is acknowledged once it is committed and
// applied on the node that answers, but the other nodes apply it when
// they hear of the commit, a heartbeat later. A node that serves
// metadata to clients first learns the latest committed index (its own,
// or the controller's: the broker asks it) and waits for WaitApplied, so
// a client that saw a change acknowledged never reads the state from
// before it on another node.

// appliedPoll bounds how long WaitApplied sleeps between looks when the
// entries it waits for are ones the state machine never sees (a new
// leader's no-op, barriers, configuration changes): raft tells nobody
// when it has passed those.
const appliedPoll = 5 * time.Millisecond

// CommitIndex is the raft index of the last entry this node knows to be
// committed. On the controller it is the metadata log's high watermark;
// elsewhere it may lag the controller's by a heartbeat.
func (s *Store) CommitIndex() uint64 { return s.raft.CommitIndex() }

// WaitApplied waits until State reflects every committed entry up to the
// raft log index, or ctx ends (then the error wraps ctx's cause). An index
// beyond what this node will ever learn is committed only times out.
func (s *Store) WaitApplied(ctx context.Context, index uint64) error {
	var tick *time.Ticker
	for {
		ch := s.fsm.appliedChanged()
		if s.appliedThrough(index) {
			return nil
		}
		if tick == nil {
			tick = time.NewTicker(appliedPoll)
			defer tick.Stop()
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("meta: waiting to apply the metadata log up to %d (applied %d): %w", index, s.fsm.applied.Load(), context.Cause(ctx))
		}
	}
}

// appliedThrough reports whether State reflects every entry up to index.
func (s *Store) appliedThrough(index uint64) bool {
	done := s.fsm.applied.Load()
	if done >= index {
		return true
	}
	// raft counts an entry applied once it has queued it for the state
	// machine, so its own count says nothing of State; but until it has
	// queued index, State cannot have it.
	if s.raft.AppliedIndex() < index {
		return false
	}
	// Every entry up to index is with the state machine. A snapshot it
	// took or restored is reflected whole: after a restart it has applied
	// no command yet, and the entries the snapshot covers need no look.
	// Past that, entries that are no commands never reach Apply and do
	// not count; a command not applied yet does.
	done = max(done, s.lastSnapshotIndex())
	for i := done + 1; i <= index; i++ {
		var l raft.Log
		err := s.logs.GetLog(i, &l)
		if errors.Is(err, raft.ErrLogNotFound) {
			continue // compacted: in a snapshot, which State reflects
		}
		if err != nil || l.Type != raft.LogCommand {
			continue
		}
		return false
	}
	// State reflects everything up to index: the next look starts there,
	// rather than scan the same entries again for every request.
	s.fsm.raiseApplied(index)
	return true
}

// lastSnapshotIndex is the raft index of the latest snapshot this node
// took or installed; State reflects every entry up to it.
func (s *Store) lastSnapshotIndex() uint64 {
	n, _ := strconv.ParseUint(s.raft.Stats()["last_snapshot_index"], 10, 64)
	return n
}
