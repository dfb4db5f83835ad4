package meta

import (
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
