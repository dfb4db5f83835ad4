package meta

// RaftStats is this node's own view of the metadata log, for operators
// (DescribeQuorum, strata cluster status). Raft does not tell a node how
// far its peers are, so each node reports only itself.
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
}

// RaftStats returns this node's raft progress. The fields are read one at
// a time, so they may come from slightly different moments.
func (s *Store) RaftStats() RaftStats {
	return RaftStats{
		Term:         s.raft.CurrentTerm(),
		LastIndex:    s.raft.LastIndex(),
		CommitIndex:  s.raft.CommitIndex(),
		AppliedIndex: s.raft.AppliedIndex(),
	}
}
