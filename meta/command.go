package meta

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// A command is what a proposer puts in the raft log: one kind byte followed
// by the kind's JSON payload. Everything Apply needs is in the command, and
// anything non-deterministic (topic UUIDs) is decided by the proposer, so
// every node that applies the same log reaches the same State.
//
// Kinds are persisted in raft logs and snapshots' history: never renumber
// or reuse one; add new kinds at the end.
type kind uint8

const (
	_                         kind = iota // 0 is never written, so zeroed data fails loudly
	kindBarrier                           // no payload; changes nothing
	kindRegisterBroker                    // registerBrokerCmd
	kindCreateTopic                       // createTopicCmd
	kindDeleteTopic                       // deleteTopicCmd
	kindCreatePartitions                  // createPartitionsCmd
	kindAlterConfigs                      // alterConfigsCmd
	kindAllocateProducerIDs               // allocateProducerIDsCmd
	kindFenceBroker                       // brokerEpochCmd
	kindUnfenceBroker                     // brokerEpochCmd
	kindAlterPartition                    // alterPartitionCmd
	kindControlledShutdown                // brokerEpochCmd
	kindElectLeaders                      // electLeadersCmd
	kindInitCluster                       // initClusterCmd
	kindRestoreTopic                      // restoreTopicCmd (restore.go)
	kindAlterScramCredentials             // alterScramCmd (scram.go)

	kindAlterClientQuotas kind = 18 // alterClientQuotasCmd (quota.go)
)

// Kinds given their numbers explicitly, so that kinds added in parallel
// branches cannot shift them.
const (
	kindCreateACLs kind = 16 // createACLsCmd (acl.go)
	kindDeleteACLs kind = 17 // deleteACLsCmd (acl.go)
)

// registerBrokerCmd admits a broker incarnation. Its Epoch, Fenced and
// ShuttingDown are decided by Apply, not taken from the proposer.
type registerBrokerCmd struct {
	Broker Broker
}

// alterPartitionCmd is an AlterPartitionRequest, checked in Apply.
type alterPartitionCmd AlterPartitionRequest

// electLeadersCmd asks for elections in the listed partitions, or in all
// of them.
type electLeadersCmd struct {
	Unclean    bool
	All        bool
	Partitions []TopicPartition
}

// brokerEpochCmd names one incarnation of a broker: a decision the
// controller took about it does not touch a later incarnation.
type brokerEpochCmd struct {
	ID    int32
	Epoch int64
}

type createTopicCmd struct {
	Name              string
	ID                [16]byte
	Internal          bool
	Partitions        int32
	ReplicationFactor int16
	Configs           map[string]string
	// Assignment, when set, places partition i on Assignment[i] (the
	// first replica the preferred leader) instead of assign's spread.
	Assignment [][]int32 `json:",omitempty"`
}

type deleteTopicCmd struct {
	Name string
}

type createPartitionsCmd struct {
	Name  string
	Count int32
}

type alterConfigsCmd struct {
	Name    string
	Set     map[string]string
	Delete  []string
	Replace bool
}

// initClusterCmd names the cluster, if nothing named it before.
type initClusterCmd struct {
	ID string
	// HistoryID is State.HistoryID; absent from the commands of clusters
	// named before it existed.
	HistoryID string `json:",omitempty"`
}

type allocateProducerIDsCmd struct {
	Count int64
}

// errBadCommand marks a log entry this version cannot decode. It is
// returned, not panicked on: a node must never crash on log contents.
var errBadCommand = errors.New("meta: malformed command")

func encodeCommand(k kind, payload any) ([]byte, error) {
	b := []byte{byte(k)}
	if payload == nil {
		return b, nil
	}
	j, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("meta: encode command %d: %w", k, err)
	}
	return append(b, j...), nil
}

// result is what FSM.Apply returns to the proposer through raft.
type result struct {
	topic   *Topic // the created or deleted topic, if any
	firstID int64  // the first producer id allocated
	epoch   int64  // the broker epoch a registration admitted
	// partition is the partition an AlterPartition left.
	partition Partition
	// elected is ElectLeaders' outcome per partition.
	elected map[TopicPartition]error
	// scram is AlterScramCredentials' outcome per user.
	scram map[string]error
	// acl is CreateAcls' or DeleteAcls' outcome (acl.go).
	acl *aclOutcome
	err error
}

// applyFunc applies one command's payload, found at index in the raft log,
// to s. It returns the next state, or nil when nothing changed (including
// on error); it must not modify s.
type applyFunc func(s *State, index uint64, payload []byte) (*State, result)

var applyTable = [...]applyFunc{
	kindBarrier:          applyBarrier,
	kindRegisterBroker:   applyRegisterBroker,
	kindCreateTopic:      applyCreateTopic,
	kindDeleteTopic:      applyDeleteTopic,
	kindCreatePartitions: applyCreatePartitions,
	kindAlterConfigs:     applyAlterConfigs,

	kindAllocateProducerIDs: applyAllocateProducerIDs,
	kindFenceBroker:         applyFenceBroker,
	kindUnfenceBroker:       applyUnfenceBroker,
	kindAlterPartition:      applyAlterPartition,
	kindControlledShutdown:  applyControlledShutdown,
	kindElectLeaders:        applyElectLeaders,
	kindInitCluster:         applyInitCluster,
	kindRestoreTopic:        applyRestoreTopic,

	kindAlterScramCredentials: applyAlterScramCredentials,
	kindCreateACLs:            applyCreateACLs,
	kindDeleteACLs:            applyDeleteACLs,
	kindAlterClientQuotas:     applyAlterClientQuotas,
}

// applyCommand decodes data and dispatches it.
func applyCommand(s *State, index uint64, data []byte) (*State, result) {
	if len(data) == 0 {
		return nil, result{err: fmt.Errorf("%w: empty", errBadCommand)}
	}
	k := kind(data[0])
	if int(k) >= len(applyTable) || applyTable[k] == nil {
		return nil, result{err: fmt.Errorf("%w: unknown kind %d", errBadCommand, k)}
	}
	return applyTable[k](s, index, data[1:])
}

func decodePayload(payload []byte, v any) error {
	if err := json.Unmarshal(payload, v); err != nil {
		return fmt.Errorf("%w: %w", errBadCommand, err)
	}
	return nil
}

func applyBarrier(*State, uint64, []byte) (*State, result) { return nil, result{} }

// applyInitCluster sets the cluster id and the history id once: the
// first such command wins, so two controllers of successive terms that
// both proposed one agree on the first. A cluster named before history
// ids existed takes the first one proposed for its cluster id.
func applyInitCluster(s *State, _ uint64, payload []byte) (*State, result) {
	var c initClusterCmd
	if err := decodePayload(payload, &c); err != nil {
		return nil, result{err: err}
	}
	if c.ID == "" {
		return nil, result{err: fmt.Errorf("%w: empty cluster id", errBadCommand)}
	}
	if c.HistoryID != "" && !validHistoryID(c.HistoryID) {
		return nil, result{err: fmt.Errorf("%w: history id %q", errBadCommand, c.HistoryID)}
	}
	if s.ClusterID != "" {
		if s.HistoryID != "" || c.HistoryID == "" || c.ID != s.ClusterID {
			return nil, result{}
		}
		next := s.clone()
		next.HistoryID = c.HistoryID
		return next, result{}
	}
	next := s.clone()
	next.ClusterID, next.HistoryID = c.ID, c.HistoryID
	return next, result{}
}

// applyRegisterBroker admits a broker incarnation under a new epoch, the
// command's index. Whether a new incarnation may replace a live one is the
// proposer's decision (it needs the clock); here an earlier incarnation
// that is still unfenced is fenced first, so what it led moves on and its
// ISR places are dropped: the new process may have lost what the old one
// had not flushed. The same registration again (a retry) changes nothing
// and answers the same epoch.
func applyRegisterBroker(s *State, index uint64, payload []byte) (*State, result) {
	var c registerBrokerCmd
	if err := decodePayload(payload, &c); err != nil {
		return nil, result{err: err}
	}
	b := c.Broker
	old, ok := s.Brokers[b.ID]
	if ok && old.Incarnation == b.Incarnation && !old.Fenced && !old.ShuttingDown &&
		old.Host == b.Host && old.Port == b.Port && old.Rack == b.Rack && slices.Equal(old.Endpoints, b.Endpoints) {
		return nil, result{epoch: old.Epoch}
	}
	next := s.clone()
	if ok && old.Incarnation != b.Incarnation && !old.Fenced {
		fenceLocked(next, b.ID)
	}
	b.Epoch = int64(index)
	b.Fenced, b.ShuttingDown = false, false
	next.Brokers[b.ID] = b
	electOfflineLocked(next, b.ID)
	return next, result{epoch: b.Epoch}
}

// brokerAtEpoch decodes a brokerEpochCmd and returns the broker it names,
// or ErrStaleBrokerEpoch when that incarnation is not the registered one.
func brokerAtEpoch(s *State, payload []byte) (Broker, error) {
	var c brokerEpochCmd
	if err := decodePayload(payload, &c); err != nil {
		return Broker{}, err
	}
	b, ok := s.Brokers[c.ID]
	if !ok || b.Epoch != c.Epoch {
		return Broker{}, fmt.Errorf("%w: broker %d epoch %d", ErrStaleBrokerEpoch, c.ID, c.Epoch)
	}
	return b, nil
}

// applyFenceBroker fences the named incarnation; see fenceLocked.
func applyFenceBroker(s *State, _ uint64, payload []byte) (*State, result) {
	b, err := brokerAtEpoch(s, payload)
	if err != nil {
		return nil, result{err: err}
	}
	if b.Fenced {
		return nil, result{epoch: b.Epoch}
	}
	next := s.clone()
	fenceLocked(next, b.ID)
	return next, result{epoch: b.Epoch}
}

// applyUnfenceBroker lets a fenced incarnation that heartbeats again lead
// and join ISRs; it takes back the offline partitions it can lead.
func applyUnfenceBroker(s *State, _ uint64, payload []byte) (*State, result) {
	b, err := brokerAtEpoch(s, payload)
	if err != nil {
		return nil, result{err: err}
	}
	if !b.Fenced {
		return nil, result{epoch: b.Epoch}
	}
	next := s.clone()
	b.Fenced = false
	next.Brokers[b.ID] = b
	electOfflineLocked(next, b.ID)
	return next, result{epoch: b.Epoch}
}

func applyCreateTopic(s *State, _ uint64, payload []byte) (*State, result) {
	var c createTopicCmd
	if err := decodePayload(payload, &c); err != nil {
		return nil, result{err: err}
	}
	if _, ok := s.Topics[c.Name]; ok {
		return nil, result{err: fmt.Errorf("%w: %q", ErrTopicExists, c.Name)}
	}
	if c.ID == ([16]byte{}) {
		return nil, result{err: fmt.Errorf("%w: topic %q has no id", errBadCommand, c.Name)}
	}
	if other, ok := s.byID[c.ID]; ok {
		return nil, result{err: fmt.Errorf("%w: id %x belongs to %q", ErrTopicExists, c.ID, other.Name)}
	}
	t, err := s.newTopic(c)
	if err != nil {
		return nil, result{err: err}
	}
	next := s.clone()
	next.putTopic(t)
	return next, result{topic: t}
}

// newTopic builds the topic c creates: its partitions placed by c's
// assignment, or spread over the brokers that may take replicas.
func (s *State) newTopic(c createTopicCmd) (*Topic, error) {
	if c.Partitions <= 0 {
		return nil, fmt.Errorf("%w: %d", ErrInvalidPartitions, c.Partitions)
	}
	var parts []Partition
	if len(c.Assignment) > 0 {
		var err error
		if parts, err = s.assigned(c.Assignment, c.Partitions); err != nil {
			return nil, err
		}
	} else {
		brokers := s.placementBrokers()
		if c.ReplicationFactor <= 0 || int(c.ReplicationFactor) > len(brokers) {
			return nil, fmt.Errorf("%w: %d with %d brokers", ErrInvalidReplicationFactor, c.ReplicationFactor, len(brokers))
		}
		parts = assign(brokers, s.rackOf, c.ID, 0, c.Partitions, int(c.ReplicationFactor))
	}
	t := &Topic{
		Name:       c.Name,
		ID:         c.ID,
		Internal:   c.Internal,
		Configs:    maps.Clone(c.Configs),
		Partitions: parts,
	}
	if t.Configs == nil {
		t.Configs = map[string]string{}
	}
	return t, nil
}

// assigned builds the partitions of an explicit replica assignment: every
// list as long as the first, of distinct registered brokers. All replicas
// start in the ISR (the logs are empty, so all are in sync), and the first
// that may lead does.
func (s *State) assigned(lists [][]int32, n int32) ([]Partition, error) {
	if int32(len(lists)) != n {
		return nil, fmt.Errorf("%w: %d replica lists for %d partitions", ErrInvalidPartitions, len(lists), n)
	}
	parts := make([]Partition, 0, n)
	for i, replicas := range lists {
		if len(replicas) == 0 || len(replicas) != len(lists[0]) {
			return nil, fmt.Errorf("%w: partition %d has %d replicas, partition 0 has %d", ErrInvalidReplicationFactor, i, len(replicas), len(lists[0]))
		}
		leader := NoLeader
		for j, id := range replicas {
			if _, ok := s.Brokers[id]; !ok {
				return nil, fmt.Errorf("%w: partition %d: broker %d is not registered", ErrInvalidReplicationFactor, i, id)
			}
			if slices.Contains(replicas[:j], id) {
				return nil, fmt.Errorf("%w: partition %d names broker %d twice", ErrInvalidReplicationFactor, i, id)
			}
			if b := s.Brokers[id]; leader == NoLeader && !b.Fenced && !b.ShuttingDown {
				leader = id
			}
		}
		parts = append(parts, Partition{Index: int32(i), Replicas: slices.Clone(replicas), ISR: slices.Clone(replicas), Leader: leader})
	}
	return parts, nil
}

func applyDeleteTopic(s *State, _ uint64, payload []byte) (*State, result) {
	var c deleteTopicCmd
	if err := decodePayload(payload, &c); err != nil {
		return nil, result{err: err}
	}
	t, ok := s.Topics[c.Name]
	if !ok {
		return nil, result{err: fmt.Errorf("%w: %q", ErrUnknownTopic, c.Name)}
	}
	next := s.clone()
	next.deleteTopic(t)
	return next, result{topic: t}
}

func applyCreatePartitions(s *State, _ uint64, payload []byte) (*State, result) {
	var c createPartitionsCmd
	if err := decodePayload(payload, &c); err != nil {
		return nil, result{err: err}
	}
	t, ok := s.Topics[c.Name]
	if !ok {
		return nil, result{err: fmt.Errorf("%w: %q", ErrUnknownTopic, c.Name)}
	}
	have := int32(len(t.Partitions))
	if c.Count <= have {
		return nil, result{err: fmt.Errorf("%w: %q has %d partitions, asked for %d", ErrInvalidPartitions, c.Name, have, c.Count)}
	}
	// New partitions keep the topic's replication factor.
	rf := 0
	if have > 0 {
		rf = len(t.Partitions[0].Replicas)
	}
	if rf == 0 {
		return nil, result{err: fmt.Errorf("%w: %q has no replicas to copy", ErrInvalidReplicationFactor, c.Name)}
	}
	brokers := s.placementBrokers()
	if rf > len(brokers) {
		return nil, result{err: fmt.Errorf("%w: %d with %d brokers", ErrInvalidReplicationFactor, rf, len(brokers))}
	}
	nt := t.clone()
	nt.Partitions = append(nt.Partitions, assign(brokers, s.rackOf, t.ID, have, c.Count, rf)...)
	next := s.clone()
	next.putTopic(nt)
	return next, result{topic: nt}
}

func applyAlterConfigs(s *State, _ uint64, payload []byte) (*State, result) {
	var c alterConfigsCmd
	if err := decodePayload(payload, &c); err != nil {
		return nil, result{err: err}
	}
	t, ok := s.Topics[c.Name]
	if !ok {
		return nil, result{err: fmt.Errorf("%w: %q", ErrUnknownTopic, c.Name)}
	}
	nt := t.clone()
	if c.Replace {
		nt.Configs = map[string]string{}
	}
	maps.Copy(nt.Configs, c.Set)
	for _, k := range c.Delete {
		delete(nt.Configs, k)
	}
	if maps.Equal(nt.Configs, t.Configs) {
		return nil, result{topic: t}
	}
	if uncleanAllowed(nt) {
		// Allowing unclean election is asking for it where it is needed
		// now: the topic's offline partitions.
		for i, p := range nt.Partitions {
			if p.Leader != NoLeader {
				continue
			}
			leader, isr := electLeader(s, p, p.ISR, true)
			nt.Partitions[i], _ = withLeader(p, leader, isr)
		}
	}
	next := s.clone()
	next.putTopic(nt)
	return next, result{topic: nt}
}

// placementBrokers lists the brokers new replicas may go to: alive and
// not shutting down. Sorted by id; with racks, reordered so that racks
// alternate (Kafka's rack-alternated list: the first broker of each rack,
// then the second of each, ...), so consecutive brokers sit on different
// racks as far as the racks allow.
func (s *State) placementBrokers() []int32 {
	var ids []int32
	racks := map[string][]int32{}
	for _, id := range s.sortedBrokerIDs() {
		if s.eligible(id) {
			ids = append(ids, id)
			r := s.Brokers[id].Rack
			racks[r] = append(racks[r], id)
		}
	}
	if len(racks) <= 1 {
		return ids
	}
	names := slices.Sorted(maps.Keys(racks))
	out := make([]int32, 0, len(ids))
	for i := 0; len(out) < len(ids); i++ {
		for _, r := range names {
			if i < len(racks[r]) {
				out = append(out, racks[r][i])
			}
		}
	}
	return out
}

func (s *State) rackOf(id int32) string { return s.Brokers[id].Rack }

// assign places partitions [from, to) of a topic on rf of the brokers (in
// placementBrokers order). Partition p's leader is the broker at
// (start+p) mod n, and its followers the brokers after it, skipping any
// whose rack already has a replica of p until every rack has one; its ISR
// is all of them. Without racks that is rf consecutive brokers. start
// comes from the topic ID, so leaders of different topics spread over the
// brokers rather than all starting on the same one, while staying a pure
// function of the command and the state.
func assign(brokers []int32, rackOf func(int32) string, id [16]byte, from, to int32, rf int) []Partition {
	n := len(brokers)
	start := int(binary.BigEndian.Uint32(id[:4]) % uint32(n))
	racks := map[string]bool{}
	for _, b := range brokers {
		racks[rackOf(b)] = true
	}
	parts := make([]Partition, 0, to-from)
	for p := from; p < to; p++ {
		first := (start + int(p)) % n
		replicas := []int32{brokers[first]}
		used := map[string]bool{rackOf(brokers[first]): true}
		for _, sameRackOK := range []bool{false, true} {
			for k := 1; k < n && len(replicas) < rf; k++ {
				b := brokers[(first+k)%n]
				if slices.Contains(replicas, b) {
					continue
				}
				if r := rackOf(b); sameRackOK || !used[r] || len(used) == len(racks) {
					replicas = append(replicas, b)
					used[r] = true
				}
			}
		}
		parts = append(parts, Partition{
			Index:    p,
			Replicas: replicas,
			ISR:      slices.Clone(replicas),
			Leader:   replicas[0],
		})
	}
	return parts
}

// maxProducerIDBlock bounds one allocation, so a bad request cannot
// exhaust the id space.
const maxProducerIDBlock = 1 << 20

func applyAllocateProducerIDs(s *State, _ uint64, payload []byte) (*State, result) {
	var c allocateProducerIDsCmd
	if err := decodePayload(payload, &c); err != nil {
		return nil, result{err: err}
	}
	if c.Count <= 0 || c.Count > maxProducerIDBlock {
		return nil, result{err: fmt.Errorf("%w: producer id block of %d", errBadCommand, c.Count)}
	}
	next := s.clone()
	first := s.NextProducerID
	next.NextProducerID = first + c.Count
	return next, result{firstID: first}
}
