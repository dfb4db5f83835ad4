package meta

import (
	"errors"
	"maps"
	"slices"
)

// Errors a command can return. They travel from the FSM back to the
// proposer, so errors.Is works on what Store methods return.
var (
	ErrTopicExists              = errors.New("meta: topic already exists")
	ErrUnknownTopic             = errors.New("meta: unknown topic")
	ErrInvalidPartitions        = errors.New("meta: invalid partition count")
	ErrInvalidReplicationFactor = errors.New("meta: invalid replication factor")
	// ErrNotController means this node is not the raft leader, or stopped
	// being it while the command was in flight; in the latter case the
	// command may still have been applied.
	ErrNotController = errors.New("meta: not the controller")
	ErrClosed        = errors.New("meta: store closed")
)

// Broker is a registered broker and where clients reach it.
type Broker struct {
	ID   int32
	Host string
	Port int32
	Rack string
}

// Partition is one partition's replica assignment and leadership.
type Partition struct {
	Index       int32
	Replicas    []int32 // preferred leader first
	ISR         []int32
	Leader      int32
	LeaderEpoch int32
}

// Topic is a topic and its partitions. Partitions[i].Index == i.
type Topic struct {
	Name string
	// ID is the topic's UUID (KIP-516); a topic re-created under the same
	// name gets a new one, which is what keeps its data apart.
	ID         [16]byte
	Internal   bool
	Configs    map[string]string // never nil
	Partitions []Partition
}

// State is the metadata at one point of the raft log. A State is immutable
// once published: applying a command builds a new one that shares the
// unchanged topics with its predecessor. Callers must not modify it.
type State struct {
	// Index is the raft log index of the command that produced this state
	// (0 for the empty state); states with equal Index are equal.
	Index   uint64
	Brokers map[int32]Broker
	Topics  map[string]*Topic
	// NextProducerID is the first idempotent-producer id not yet handed
	// out; ids below it are never reused.
	NextProducerID int64

	byID map[[16]byte]*Topic
}

func newState() *State {
	return &State{
		Brokers: map[int32]Broker{},
		Topics:  map[string]*Topic{},
		byID:    map[[16]byte]*Topic{},
	}
}

// TopicByID returns the topic with the given ID.
func (s *State) TopicByID(id [16]byte) (*Topic, bool) {
	t, ok := s.byID[id]
	return t, ok
}

// SortedTopicNames returns the topic names in ascending order.
func (s *State) SortedTopicNames() []string {
	return slices.Sorted(maps.Keys(s.Topics))
}

func (s *State) sortedBrokerIDs() []int32 {
	return slices.Sorted(maps.Keys(s.Brokers))
}

// clone returns a copy whose maps may be modified; the topics themselves
// are shared, so a command that changes a topic replaces it with putTopic.
func (s *State) clone() *State {
	return &State{
		Index:          s.Index,
		NextProducerID: s.NextProducerID,
		Brokers:        maps.Clone(s.Brokers),
		Topics:         maps.Clone(s.Topics),
		byID:           maps.Clone(s.byID),
	}
}

func (s *State) putTopic(t *Topic) {
	s.Topics[t.Name] = t
	s.byID[t.ID] = t
}

func (s *State) deleteTopic(t *Topic) {
	delete(s.Topics, t.Name)
	delete(s.byID, t.ID)
}

// clone returns a deep copy of t.
func (t *Topic) clone() *Topic {
	c := *t
	c.Configs = maps.Clone(t.Configs)
	if c.Configs == nil {
		c.Configs = map[string]string{}
	}
	c.Partitions = make([]Partition, len(t.Partitions))
	for i, p := range t.Partitions {
		p.Replicas = slices.Clone(p.Replicas)
		p.ISR = slices.Clone(p.ISR)
		c.Partitions[i] = p
	}
	return &c
}
