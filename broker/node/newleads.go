package node

import (
	"context"
	"slices"
	"sync"
	"time"
)

// A new topic is ready before it is announced (issue 25, item 3). At RF
// > 1 a producer's first acks=all write to a partition waits for its
// followers to fetch it; but a follower that already copies other
// partitions from the same leader has a fetch held there, a long poll of
// up to its max wait (500 ms), which does not name the new partition. It
// adds the partition only to its next fetch: the first writes to every
// new topic waited up to half a second, whichever way the client had
// learnt the leader. So the leader answers the held fetches of its
// followers at once when it begins to lead a partition they replicate,
// and, for a short while after, holds a follower's fetch that does not
// name such a partition only briefly: the follower may apply the
// metadata a moment after the leader, and its next fetch then comes soon
// enough to name it.

const (
	// newLeadWindow is how long after it began to lead a partition the
	// leader expects its followers to name it.
	newLeadWindow = 2 * time.Second
	// newLeadPoll bounds the hold of a follower's fetch that does not
	// name such a partition yet.
	newLeadPoll = 20 * time.Millisecond
)

// newLeads are the partitions this node began to lead lately, with
// followers, and the signal that wakes the followers' held fetches.
type newLeads struct {
	mu     sync.Mutex
	wake   context.Context // cancelled when a partition is added
	cancel context.CancelFunc
	recent []newLead
}

type newLead struct {
	key      tp
	replicas []int32
	at       time.Time
}

// add records that this node began to lead key, replicated on replicas,
// and wakes the follower fetches held here.
func (l *newLeads) add(key tp, replicas []int32, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recent = slices.DeleteFunc(l.recent, func(r newLead) bool { return now.Sub(r.at) > newLeadWindow || r.key == key })
	l.recent = append(l.recent, newLead{key: key, replicas: slices.Clone(replicas), at: now})
	if l.cancel != nil {
		l.cancel()
	}
	l.wake, l.cancel = nil, nil
}

// hold returns the context that ends when a partition is added, and
// whether follower has a recent partition that asks does not name.
func (l *newLeads) hold(follower int32, asks func(topic string, index int32) bool, now time.Time) (context.Context, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.wake == nil {
		l.wake, l.cancel = context.WithCancel(context.Background())
	}
	if len(l.recent) > 0 && now.Sub(l.recent[0].at) > newLeadWindow {
		l.recent = slices.DeleteFunc(l.recent, func(r newLead) bool { return now.Sub(r.at) > newLeadWindow })
	}
	missing := false
	for _, r := range l.recent {
		if now.Sub(r.at) <= newLeadWindow && slices.Contains(r.replicas, follower) && !asks(r.key.topic, r.key.partition) {
			missing = true
			break
		}
	}
	return l.wake, missing
}

// beganLeading is told by reconcile that this node now leads key: the
// followers' fetches held here learn of it.
func (n *Node) beganLeading(key tp, replicas []int32) {
	if len(replicas) > 1 {
		n.newLeads.add(key, replicas, time.Now())
	}
}

// HoldReplicaFetch bounds the long poll of a fetch from follower that
// asks for the partitions asks reports and may wait up to wait: it
// returns the context the fetch waits under, which ends with ctx or when
// this node begins to lead a partition with followers, and the wait,
// shortened while follower has yet to name a partition it replicates
// that this node began to lead a moment ago. Call done once the fetch
// has been read.
func (n *Node) HoldReplicaFetch(ctx context.Context, follower int32, wait time.Duration, asks func(topic string, index int32) bool) (held context.Context, d time.Duration, done func()) {
	wake, missing := n.newLeads.hold(follower, asks, time.Now())
	if missing {
		wait = min(wait, newLeadPoll)
	}
	held, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(wake, cancel)
	return held, wait, func() {
		stop()
		cancel()
	}
}
