package meta

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// fsm is the raft state machine. raft calls Apply, Snapshot and Restore
// from its single FSM goroutine; readers call state and changed from any
// goroutine. Because a State is immutable, the current one is published
// through an atomic pointer and readers never take a lock.
type fsm struct {
	cur atomic.Pointer[State]
	// applied is the raft index of the last command Apply saw, whether or
	// not it changed the State (a refused command changes nothing, and
	// State.Index stays behind it).
	applied atomic.Uint64

	mu struct {
		sync.Mutex
		// changed is closed, and replaced, each time a new State is
		// published.
		changed chan struct{}
		// appliedCh is closed, and replaced, each time Apply has run.
		appliedCh chan struct{}
	}
}

var _ raft.FSM = (*fsm)(nil)

func newFSM() *fsm {
	f := &fsm{}
	f.cur.Store(newState())
	f.mu.changed = make(chan struct{})
	f.mu.appliedCh = make(chan struct{})
	return f
}

func (f *fsm) state() *State { return f.cur.Load() }

func (f *fsm) changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.changed
}

// raiseApplied records that State reflects every entry up to index; it
// never moves back.
func (f *fsm) raiseApplied(index uint64) {
	for {
		cur := f.applied.Load()
		if cur >= index || f.applied.CompareAndSwap(cur, index) {
			return
		}
	}
}

// appliedChanged returns a channel closed when Apply next runs.
func (f *fsm) appliedChanged() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.appliedCh
}

func (f *fsm) publish(s *State) {
	f.cur.Store(s)
	f.mu.Lock()
	close(f.mu.changed)
	f.mu.changed = make(chan struct{})
	f.mu.Unlock()
}

// Apply applies a committed command and returns a result for the proposer.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return result{}
	}
	return f.apply(l.Index, l.Data)
}

func (f *fsm) apply(index uint64, data []byte) result {
	next, res := applyCommand(f.state(), index, data)
	if next != nil {
		next.Index = index
		f.publish(next)
	}
	// After the publish: whoever sees applied reach index sees its State.
	f.raiseApplied(index)
	f.mu.Lock()
	close(f.mu.appliedCh)
	f.mu.appliedCh = make(chan struct{})
	f.mu.Unlock()
	return res
}

// Snapshot captures the current State; since States are immutable that is
// a pointer copy, and the encoding happens in Persist, off the FSM
// goroutine.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{state: f.state()}, nil
}

// Restore replaces the state with the snapshot's. Nothing of the previous
// state survives.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s, err := decodeSnapshot(bufio.NewReader(rc))
	if err != nil {
		return err
	}
	f.publish(s)
	return nil
}

// snapshotFormat is the version written into every snapshot. A node refuses
// snapshots from a newer format rather than misreading them.
const snapshotFormat = 1

// snapshotV1 is the JSON layout of a snapshot: lists in ascending order of
// ID and name, so equal states encode to equal bytes.
type snapshotV1 struct {
	Format         int
	Index          uint64
	NextProducerID int64
	// ClusterID is absent from snapshots taken before clusters had ids;
	// the next controller then names the cluster.
	ClusterID string `json:",omitempty"`
	// HistoryID is absent from snapshots taken before it existed.
	HistoryID string `json:",omitempty"`
	Brokers   []Broker
	Topics    []*Topic
	// ScramCredentials is State.ScramCredentials; absent when there are
	// none, and from snapshots taken before they existed.
	ScramCredentials map[string]map[string]ScramCredential `json:",omitempty"`
	// ACLs is State.ACLs; absent when there are none, and from snapshots
	// taken before they existed.
	ACLs []ACL `json:",omitempty"`
	// ClientQuotas is State.ClientQuotas in entity order; absent when
	// there are none, and from snapshots taken before they existed.
	ClientQuotas []ClientQuota `json:",omitempty"`
}

type fsmSnapshot struct{ state *State }

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := encodeSnapshot(sink, s.state); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}

func encodeSnapshot(w io.Writer, s *State) error {
	snap := snapshotV1{Format: snapshotFormat, Index: s.Index, NextProducerID: s.NextProducerID, ClusterID: s.ClusterID, HistoryID: s.HistoryID}
	for _, id := range s.sortedBrokerIDs() {
		snap.Brokers = append(snap.Brokers, s.Brokers[id])
	}
	for _, name := range s.SortedTopicNames() {
		snap.Topics = append(snap.Topics, s.Topics[name])
	}
	if len(s.ScramCredentials) > 0 {
		snap.ScramCredentials = s.ScramCredentials
	}
	snap.ACLs = s.ACLs
	snap.ClientQuotas = clientQuotasSnapshot(s)
	bw := bufio.NewWriter(w)
	if err := json.NewEncoder(bw).Encode(&snap); err != nil {
		return fmt.Errorf("meta: encode snapshot: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("meta: write snapshot: %w", err)
	}
	return nil
}

// decodeSnapshot builds a fresh State from r and checks the invariants the
// commands rely on, so a damaged snapshot is an error here rather than a
// panic in a later Apply.
func decodeSnapshot(r io.Reader) (*State, error) {
	var snap snapshotV1
	if err := json.NewDecoder(r).Decode(&snap); err != nil {
		return nil, fmt.Errorf("meta: decode snapshot: %w", err)
	}
	if snap.Format != snapshotFormat {
		return nil, fmt.Errorf("meta: snapshot format %d, want %d", snap.Format, snapshotFormat)
	}
	s := newState()
	s.Index = snap.Index
	if snap.NextProducerID < 0 {
		return nil, fmt.Errorf("meta: snapshot: next producer id %d", snap.NextProducerID)
	}
	s.NextProducerID = snap.NextProducerID
	s.ClusterID = snap.ClusterID
	if snap.HistoryID != "" && !validHistoryID(snap.HistoryID) {
		return nil, fmt.Errorf("meta: snapshot: history id %q", snap.HistoryID)
	}
	s.HistoryID = snap.HistoryID
	for _, b := range snap.Brokers {
		if _, dup := s.Brokers[b.ID]; dup {
			return nil, fmt.Errorf("meta: snapshot: broker %d twice", b.ID)
		}
		s.Brokers[b.ID] = b
	}
	for _, t := range snap.Topics {
		if err := checkTopic(t); err != nil {
			return nil, fmt.Errorf("meta: snapshot: %w", err)
		}
		if _, dup := s.Topics[t.Name]; dup {
			return nil, fmt.Errorf("meta: snapshot: topic %q twice", t.Name)
		}
		if _, dup := s.byID[t.ID]; dup {
			return nil, fmt.Errorf("meta: snapshot: topic id %x twice", t.ID)
		}
		if t.Configs == nil {
			t.Configs = map[string]string{}
		}
		s.putTopic(t)
	}
	if err := checkScramState(snap.ScramCredentials); err != nil {
		return nil, fmt.Errorf("meta: snapshot: %w", err)
	}
	if snap.ScramCredentials != nil {
		s.ScramCredentials = snap.ScramCredentials
	}
	acls, err := checkACLs(snap.ACLs)
	if err != nil {
		return nil, fmt.Errorf("meta: snapshot: %w", err)
	}
	s.ACLs = acls
	if err := restoreClientQuotas(s, snap.ClientQuotas); err != nil {
		return nil, fmt.Errorf("meta: snapshot: %w", err)
	}
	return s, nil
}

func checkTopic(t *Topic) error {
	if t == nil {
		return fmt.Errorf("null topic")
	}
	if t.ID == ([16]byte{}) {
		return fmt.Errorf("topic %q has no id", t.Name)
	}
	if len(t.Partitions) == 0 {
		return fmt.Errorf("topic %q has no partitions", t.Name)
	}
	for i, p := range t.Partitions {
		if p.Index != int32(i) {
			return fmt.Errorf("topic %q: partition %d at position %d", t.Name, p.Index, i)
		}
		if len(p.Replicas) == 0 {
			return fmt.Errorf("topic %q partition %d has no replicas", t.Name, i)
		}
	}
	return nil
}
