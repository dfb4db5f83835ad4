package meta

import "time"

// RaftStats is this node's own view of the metadata log, for operators
// (DescribeQuorum, strata cluster status, /metrics). Raft does not tell a
// node how far its peers are, so each node reports only itself.
type RaftStats struct {
	// Term is the raft term this node is in: Kafka's quorum "epoch".
	Term uint64
	// LastIndex is the index of the last entry in this node's log,
	// committed or not: Kafka's log end offset of the metadata log.
	LastIndex uint64
	// CommitIndex is the last entry this node knows to be committed: the
	// metadata log's high watermark as this node sees it.
	CommitIndex uint64
	// AppliedIndex is the last entry this node's state machine applied;
	// State() reflects it.
	AppliedIndex uint64
	// SinceContact is how long ago this node last heard from the raft
	// leader: zero on the leader itself, and the time since the store
	// opened on a node that has not heard from one yet.
	SinceContact time.Duration
	// LeaderChanges counts the times this node saw another raft leader
	// elected (itself included) since the store opened.
	LeaderChanges uint64
}

// RaftStats returns this node's raft progress. The fields are read one at
// a time, so they may come from slightly different moments.
func (s *Store) RaftStats() RaftStats {
	st := RaftStats{
		Term:          s.raft.CurrentTerm(),
		LastIndex:     s.raft.LastIndex(),
		CommitIndex:   s.raft.CommitIndex(),
		AppliedIndex:  s.raft.AppliedIndex(),
		LeaderChanges: s.ctl.leaderChanges.Load(),
	}
	if !s.IsLeader() {
		last := s.raft.LastContact()
		if last.IsZero() {
			last = s.ctl.opened
		}
		st.SinceContact = max(time.Since(last), 0)
	}
	return st
}

// OfflinePartitions counts the partitions that have no live leader: none
// elected, or one that is fenced or gone. Produce and consume stop on
// them until a replica of their ISR comes back.
func (s *State) OfflinePartitions() int {
	n := 0
	for _, t := range s.Topics {
		for _, p := range t.Partitions {
			if p.Leader == NoLeader || !s.Alive(p.Leader) {
				n++
			}
		}
	}
	return n
}
