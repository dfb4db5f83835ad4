package meta

import (
	"errors"
	"fmt"
	"slices"
)

// The controller's decisions about leaders and ISRs. They are pure
// functions of the State (and of a command's payload), run inside Apply, so
// every node that applies the log decides the same.

// Topic configs the controller reads.
const (
	configUncleanElection = "unclean.leader.election.enable"
	configAutoRebalance   = "auto.leader.rebalance.enable"
)

// uncleanAllowed reports whether t lets an out-of-sync replica lead when
// no in-sync one can: off unless the topic says "true", as in Kafka.
func uncleanAllowed(t *Topic) bool { return t.Configs[configUncleanElection] == "true" }

// rebalanceAllowed reports whether the controller may move t's leaders
// back to their preferred replicas on its own: on unless the topic says
// "false".
func rebalanceAllowed(t *Topic) bool { return t.Configs[configAutoRebalance] != "false" }

// withLeader returns p with the given leader and ISR, and whether that is
// a change. Any change bumps the partition epoch; a change of leader, to or
// from NoLeader too, bumps the leader epoch.
func withLeader(p Partition, leader int32, isr []int32) (Partition, bool) {
	if leader == p.Leader && slices.Equal(isr, p.ISR) {
		return p, false
	}
	np := p
	np.Replicas = slices.Clone(p.Replicas)
	np.ISR = slices.Clone(isr)
	if leader != p.Leader {
		np.Leader = leader
		np.LeaderEpoch++
	}
	np.PartitionEpoch++
	return np, true
}

// electLeader picks a leader for p from isr: the first replica, in Replicas
// order, that is in isr and eligible. If there is none and unclean is
// true, it is the first eligible replica, and the ISR shrinks to it: the
// records only the lost ISR had are gone, and the ISR says so. Otherwise
// it is NoLeader and the ISR stays as given.
func electLeader(s *State, p Partition, isr []int32, unclean bool) (int32, []int32) {
	for _, r := range p.Replicas {
		if slices.Contains(isr, r) && s.eligible(r) {
			return r, isr
		}
	}
	if unclean {
		for _, r := range p.Replicas {
			if s.eligible(r) {
				return r, []int32{r}
			}
		}
	}
	return NoLeader, isr
}

// without returns isr without id, unless id is its only member: the ISR
// never becomes empty, so that the last replica known to hold every
// committed record is remembered until it comes back.
func without(isr []int32, id int32) []int32 {
	if len(isr) == 1 && isr[0] == id {
		return isr
	}
	return slices.DeleteFunc(slices.Clone(isr), func(r int32) bool { return r == id })
}

// rewritePartitions replaces, in next, every partition fn changes. next
// must be a clone, free to modify; topics are copied before changing.
func rewritePartitions(next *State, fn func(t *Topic, p Partition) (Partition, bool)) {
	for _, name := range next.SortedTopicNames() {
		t := next.Topics[name]
		var nt *Topic
		for i, p := range t.Partitions {
			np, ok := fn(t, p)
			if !ok {
				continue
			}
			if nt == nil {
				nt = t.clone()
			}
			nt.Partitions[i] = np
		}
		if nt != nil {
			next.putTopic(nt)
		}
	}
}

// fenceLocked fences broker id in next: it leaves every ISR where it is not
// the last member, and every partition it led gets a new leader from the
// rest of the ISR, or none (see electLeader).
func fenceLocked(next *State, id int32) {
	b := next.Brokers[id]
	b.Fenced = true
	next.Brokers[id] = b
	rewritePartitions(next, func(t *Topic, p Partition) (Partition, bool) {
		if !slices.Contains(p.Replicas, id) {
			return p, false
		}
		isr := without(p.ISR, id)
		leader := p.Leader
		if leader == id {
			leader, isr = electLeader(next, p, isr, uncleanAllowed(t))
		}
		return withLeader(p, leader, isr)
	})
}

// electOfflineLocked gives a leader to every offline partition that broker
// id, just admitted or unfenced, is a replica of. That is how a partition
// whose whole ISR died comes back: its last ISR member returns.
func electOfflineLocked(next *State, id int32) {
	rewritePartitions(next, func(t *Topic, p Partition) (Partition, bool) {
		if p.Leader != NoLeader || !slices.Contains(p.Replicas, id) {
			return p, false
		}
		leader, isr := electLeader(next, p, p.ISR, uncleanAllowed(t))
		if leader == NoLeader {
			return p, false
		}
		return withLeader(p, leader, isr)
	})
}

// applyAlterPartition checks an ISR change against the state it is
// ordered after, in Kafka's order of checks, and applies it. The leader
// and its epoch stay; the ISR is stored in Replicas order.
func applyAlterPartition(s *State, _ uint64, payload []byte) (*State, result) {
	var c alterPartitionCmd
	if err := decodePayload(payload, &c); err != nil {
		return nil, result{err: err}
	}
	t, ok := s.Topics[c.Topic]
	if !ok || c.Partition < 0 || int(c.Partition) >= len(t.Partitions) {
		return nil, result{err: fmt.Errorf("%w: %s-%d", ErrUnknownTopicOrPartition, c.Topic, c.Partition)}
	}
	p := t.Partitions[c.Partition]
	if b, ok := s.Brokers[c.BrokerID]; !ok || b.Epoch != c.BrokerEpoch {
		return nil, result{err: fmt.Errorf("%w: broker %d epoch %d", ErrStaleBrokerEpoch, c.BrokerID, c.BrokerEpoch)}
	}
	if p.Leader != c.BrokerID || p.LeaderEpoch != c.LeaderEpoch {
		return nil, result{err: fmt.Errorf("%w: %s-%d is led by %d at epoch %d, not by %d at %d",
			ErrFencedLeaderEpoch, c.Topic, c.Partition, p.Leader, p.LeaderEpoch, c.BrokerID, c.LeaderEpoch)}
	}
	if p.PartitionEpoch != c.PartitionEpoch {
		return nil, result{err: fmt.Errorf("%w: %s-%d is at partition epoch %d, not %d",
			ErrInvalidUpdateVersion, c.Topic, c.Partition, p.PartitionEpoch, c.PartitionEpoch)}
	}
	if err := checkNewISR(s, p, c.ISR, c.ISREpochs); err != nil {
		return nil, result{err: fmt.Errorf("%w: %s-%d ISR %v: %s", ErrIneligibleReplica, c.Topic, c.Partition, c.ISR, err)}
	}
	var isr []int32
	for _, r := range p.Replicas {
		if slices.Contains(c.ISR, r) {
			isr = append(isr, r)
		}
	}
	np, changed := withLeader(p, p.Leader, isr)
	if !changed {
		return nil, result{partition: p}
	}
	nt := t.clone()
	nt.Partitions[c.Partition] = np
	next := s.clone()
	next.putTopic(nt)
	return next, result{topic: nt, partition: np}
}

// checkNewISR says why isr may not be p's ISR: every member must be a
// replica, once, and the leader must be one. A member joining must be
// eligible; a member staying may be shutting down, since it is in sync.
func checkNewISR(s *State, p Partition, isr []int32, epochs []int64) error {
	if !slices.Contains(isr, p.Leader) {
		return fmt.Errorf("leader %d missing", p.Leader)
	}
	for i, r := range isr {
		switch {
		case !slices.Contains(p.Replicas, r):
			return fmt.Errorf("%d is not a replica", r)
		case slices.Contains(isr[:i], r):
			return fmt.Errorf("%d twice", r)
		case !slices.Contains(p.ISR, r) && !s.eligible(r):
			return fmt.Errorf("%d is fenced or shutting down", r)
		case !slices.Contains(p.ISR, r) && i < len(epochs) && epochs[i] >= 0 && epochs[i] != s.Brokers[r].Epoch:
			// A member already in is left to fencing, which takes a
			// re-registered broker out of every ISR.
			return fmt.Errorf("%d is registered at broker epoch %d, not %d", r, s.Brokers[r].Epoch, epochs[i])
		}
	}
	return nil
}

// TopicPartition names a partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// applyControlledShutdown marks the incarnation as shutting down: it
// leaves every ISR where it is not the last member, and each partition it
// leads moves to the first eligible member of the rest of the ISR, in
// Replicas order. A partition nobody else can lead stays with it (and in
// its ISR) until it stops: it keeps serving what it alone can serve.
// Asked again (a broker heartbeats WantShutdown until told to stop), it
// moves what has become movable since.
func applyControlledShutdown(s *State, _ uint64, payload []byte) (*State, result) {
	b, err := brokerAtEpoch(s, payload)
	if err != nil {
		return nil, result{err: err}
	}
	if b.ShuttingDown && readyToShutdown(s, b.ID) {
		return nil, result{epoch: b.Epoch}
	}
	next := s.clone()
	b.ShuttingDown = true
	next.Brokers[b.ID] = b
	rewritePartitions(next, func(t *Topic, p Partition) (Partition, bool) {
		if !slices.Contains(p.Replicas, b.ID) {
			return p, false
		}
		if p.Leader != b.ID {
			return withLeader(p, p.Leader, without(p.ISR, b.ID))
		}
		isr := without(p.ISR, b.ID)
		leader, _ := electLeader(next, p, isr, false)
		if leader == NoLeader {
			return p, false
		}
		return withLeader(p, leader, isr)
	})
	return next, result{epoch: b.Epoch}
}

// readyToShutdown reports whether broker id, shutting down, leads no
// partition that another broker could lead: it may stop now without
// making a partition unavailable that need not be.
func readyToShutdown(s *State, id int32) bool {
	b, ok := s.Brokers[id]
	if !ok || !b.ShuttingDown {
		return false
	}
	for _, t := range s.Topics {
		for _, p := range t.Partitions {
			if p.Leader != id {
				continue
			}
			for _, r := range p.ISR {
				if r != id && s.eligible(r) {
					return false
				}
			}
		}
	}
	return true
}

// applyElectLeaders runs ElectLeaders (KIP-460) on the listed partitions,
// or on all. Each partition has its own outcome; the command fails only
// if it cannot be decoded. Over all partitions, as in Kafka, those that
// needed no election are not reported.
func applyElectLeaders(s *State, _ uint64, payload []byte) (*State, result) {
	var c electLeadersCmd
	if err := decodePayload(payload, &c); err != nil {
		return nil, result{err: err}
	}
	parts := c.Partitions
	if c.All {
		parts = nil
		for _, name := range s.SortedTopicNames() {
			for _, p := range s.Topics[name].Partitions {
				parts = append(parts, TopicPartition{name, p.Index})
			}
		}
	}
	out := make(map[TopicPartition]error, len(parts))
	var next *State
	for _, tp := range parts {
		cur := s
		if next != nil {
			cur = next
		}
		np, err := electOne(cur, tp, c.Unclean)
		if c.All && errors.Is(err, ErrElectionNotNeeded) {
			continue
		}
		out[tp] = err
		if err != nil {
			continue
		}
		if next == nil {
			next = s.clone()
		}
		nt := next.Topics[tp.Topic].clone()
		nt.Partitions[tp.Partition] = np
		next.putTopic(nt)
	}
	return next, result{elected: out}
}

// electOne decides one partition's election: preferred, where the first
// replica leads if it is in the ISR and eligible; or unclean, where an
// offline partition gets the first eligible replica, in sync or not.
func electOne(s *State, tp TopicPartition, unclean bool) (Partition, error) {
	t, ok := s.Topics[tp.Topic]
	if !ok || tp.Partition < 0 || int(tp.Partition) >= len(t.Partitions) {
		return Partition{}, fmt.Errorf("%w: %s-%d", ErrUnknownTopicOrPartition, tp.Topic, tp.Partition)
	}
	p := t.Partitions[tp.Partition]
	if unclean {
		if p.Leader != NoLeader {
			return Partition{}, fmt.Errorf("%w: %s-%d is led by %d", ErrElectionNotNeeded, tp.Topic, tp.Partition, p.Leader)
		}
		leader, isr := electLeader(s, p, p.ISR, true)
		if leader == NoLeader {
			return Partition{}, fmt.Errorf("%w: %s-%d: no replica alive", ErrEligibleLeadersNotAvailable, tp.Topic, tp.Partition)
		}
		np, _ := withLeader(p, leader, isr)
		return np, nil
	}
	pref := p.Replicas[0]
	if p.Leader == pref {
		return Partition{}, fmt.Errorf("%w: %s-%d is led by its preferred replica %d", ErrElectionNotNeeded, tp.Topic, tp.Partition, pref)
	}
	if !slices.Contains(p.ISR, pref) || !s.eligible(pref) {
		return Partition{}, fmt.Errorf("%w: %s-%d: replica %d is out of the ISR, fenced or shutting down",
			ErrPreferredLeaderNotAvailable, tp.Topic, tp.Partition, pref)
	}
	np, _ := withLeader(p, pref, p.ISR)
	return np, nil
}

// unbalanced lists the partitions whose preferred replica could lead but
// does not, in topics that allow automatic rebalancing.
func unbalanced(s *State) []TopicPartition {
	var out []TopicPartition
	for _, name := range s.SortedTopicNames() {
		t := s.Topics[name]
		if !rebalanceAllowed(t) {
			continue
		}
		for _, p := range t.Partitions {
			pref := p.Replicas[0]
			if p.Leader != pref && slices.Contains(p.ISR, pref) && s.eligible(pref) {
				out = append(out, TopicPartition{name, p.Index})
			}
		}
	}
	return out
}
