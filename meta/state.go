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
	// ErrOutcomeUnknown is wrapped with the error of a command that may or
	// may not have been applied: raft's leadership was lost while it was
	// being committed (it may yet commit under the next leader), or the
	// caller stopped waiting. A caller must not take it as "not applied".
	ErrOutcomeUnknown = errors.New("meta: the command may or may not take effect")

	// The controller's refusals; each maps to the Kafka error code of the
	// same name at the protocol edge.
	ErrDuplicateBroker             = errors.New("meta: broker id registered by another live process")
	ErrStaleBrokerEpoch            = errors.New("meta: stale broker epoch")
	ErrFencedLeaderEpoch           = errors.New("meta: not the leader at this leader epoch")
	ErrInvalidUpdateVersion        = errors.New("meta: stale partition epoch")
	ErrIneligibleReplica           = errors.New("meta: ineligible replica")
	ErrUnknownTopicOrPartition     = errors.New("meta: unknown topic or partition")
	ErrElectionNotNeeded           = errors.New("meta: election not needed")
	ErrPreferredLeaderNotAvailable = errors.New("meta: preferred leader not available")
	ErrEligibleLeadersNotAvailable = errors.New("meta: no eligible leader available")
)

// NoLeader is Partition.Leader of a partition nobody may lead: every
// member of its ISR is fenced.
const NoLeader int32 = -1

// Broker is a registered broker, where clients reach it, and what the
// controller thinks of it.
type Broker struct {
	ID int32
	// Host and Port are the broker's inter-broker listener's advertised
	// address: what other brokers dial, and what a client is told when
	// the broker has no endpoint for the client's listener.
	Host string
	Port int32
	// Endpoints are the broker's advertised listeners, one per listener
	// name (empty in metadata written before there were several): a
	// client connected on listener L is told each broker's endpoint
	// named L (Endpoint).
	Endpoints []Endpoint `json:",omitempty"`
	Rack      string
	// Incarnation is a random id the broker process picks at each start;
	// it tells a restarted broker from its previous life.
	Incarnation string
	// Epoch is the raft index of the registration that admitted this
	// incarnation. Heartbeats and AlterPartition carry it, so a request
	// from a previous life is refused.
	Epoch int64
	// Fenced brokers lead nothing, are in no ISR (unless as the last
	// member of an offline partition) and get no new leadership.
	Fenced bool
	// ShuttingDown brokers asked for a controlled shutdown: they lead
	// nothing that someone else could lead and get no new leadership.
	ShuttingDown bool
}

// Endpoint is one advertised listener of a broker.
type Endpoint struct {
	// Name is the listener's name, the same on every broker of a
	// cluster for the same kind of door (e.g. INTERNAL, EXTERNAL).
	Name string
	Host string
	Port int32
	// Security is the listener's protocol in Kafka's names (PLAINTEXT,
	// SSL, SASL_PLAINTEXT, SASL_SSL).
	Security string
}

// Endpoint returns the host and port the broker advertises on the
// listener of that name, or its Host and Port when it has no such
// listener.
func (b Broker) Endpoint(listener string) (host string, port int32) {
	for _, e := range b.Endpoints {
		if e.Name == listener {
			return e.Host, e.Port
		}
	}
	return b.Host, b.Port
}

// Partition is one partition's replica assignment and leadership.
type Partition struct {
	Index    int32
	Replicas []int32 // preferred leader first
	// ISR is never empty: the last in-sync replica stays in it when it is
	// fenced, so that it can come back as leader without losing records.
	ISR    []int32
	Leader int32 // NoLeader: offline
	// LeaderEpoch is bumped on every change of leader, to or from
	// NoLeader included.
	LeaderEpoch int32
	// PartitionEpoch is bumped on every change of leader or ISR;
	// AlterPartition carries it so that a stale change is refused.
	PartitionEpoch int32
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
	// ClusterID names the cluster: chosen once by the first controller
	// (Config.ClusterID, else random) and never changed. It is what
	// Metadata reports and what ties a bucket to its cluster. Empty
	// until that first command is applied.
	ClusterID string
	// HistoryID names this metadata history: 32 random hex digits the
	// first controller picks with the cluster id. A cluster started
	// afresh over the same bucket, even under the same cluster id (a
	// restore after the quorum was lost), has another, which is how its
	// metadata checkpoints are told apart from those of the history it
	// restores (docs/bucket-format.md §12). Empty until picked; a cluster
	// named before history ids existed gets one from its next
	// controller.
	HistoryID string
	// ScramCredentials are the users' SCRAM credentials, by user and
	// then mechanism (scram.go). A user's inner map is replaced, never
	// modified, when its credentials change.
	ScramCredentials map[string]map[string]ScramCredential
	// ACLs are the stored access control lists in compareACLs order,
	// without duplicates (acl.go). The slice is replaced, never modified,
	// when they change, so states share it.
	ACLs []ACL
	// ClientQuotas are the client quotas by entity (quota.go). An
	// entity's map is replaced, never modified, when its quotas change.
	ClientQuotas map[QuotaEntity]map[string]float64

	byID map[[16]byte]*Topic
}

func newState() *State {
	return &State{
		Brokers: map[int32]Broker{},
		Topics:  map[string]*Topic{},
		byID:    map[[16]byte]*Topic{},

		ScramCredentials: map[string]map[string]ScramCredential{},
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

// Alive reports whether broker id is registered and not fenced. A broker
// shutting down is alive: it still serves until it stops.
func (s *State) Alive(id int32) bool {
	b, ok := s.Brokers[id]
	return ok && !b.Fenced
}

// eligible reports whether broker id may be given leadership or be added
// to an ISR.
func (s *State) eligible(id int32) bool {
	b, ok := s.Brokers[id]
	return ok && !b.Fenced && !b.ShuttingDown
}

// OfflineReplicas returns p's replicas that are not alive, in Replicas
// order.
func (s *State) OfflineReplicas(p Partition) []int32 {
	var out []int32
	for _, r := range p.Replicas {
		if !s.Alive(r) {
			out = append(out, r)
		}
	}
	return out
}

// clone returns a copy whose maps may be modified; the topics themselves
// are shared, so a command that changes a topic replaces it with putTopic.
func (s *State) clone() *State {
	return &State{
		Index:          s.Index,
		NextProducerID: s.NextProducerID,
		ClusterID:      s.ClusterID,
		HistoryID:      s.HistoryID,
		Brokers:        maps.Clone(s.Brokers),
		Topics:         maps.Clone(s.Topics),
		byID:           maps.Clone(s.byID),

		ScramCredentials: maps.Clone(s.ScramCredentials),
		ACLs:             s.ACLs,

		ClientQuotas: maps.Clone(s.ClientQuotas),
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
