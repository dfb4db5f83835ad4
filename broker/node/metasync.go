package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Read after write (docs/replication.md): a metadata change that one
// node acknowledged must be visible to the client's next request on any
// node. The controller applies a change before it answers, and so does a
// node that passed the change on to it; every other node applies it when
// raft tells it of the commit, up to a heartbeat later. So a node about to
// serve metadata (Metadata, DescribeConfigs, ListOffsets' topic lookup, an
// admin write's checks) first learns the latest committed index, from the
// controller (its high watermark, by DescribeQuorum) when it is not the
// controller itself, and waits until its own state has applied that far:
// Kafka's way for a read that must not go back in time (the metadata log's
// high watermark, KIP-500), raft's ReadIndex.
//
// The wait is bounded: a node that cannot reach the controller, or that
// the controller's log does not reach, answers from what it has after
// metadataSyncTimeout rather than not at all, and while its last catch-up
// failed less than metadataSyncBackoff ago it does not ask again, so a
// dead controller costs clients one bounded wait, not one per request.
//
// The questions are batched (askBatch), as raft batches ReadIndex: a
// burst of metadata requests costs the controller one DescribeQuorum or
// two, not one each, and every request still waits for an answer to a
// question sent after it arrived.

const (
	// metadataSyncTimeout bounds the whole catch-up: the question to the
	// controller and the wait for this node to apply its answer.
	metadataSyncTimeout = time.Second
	// metadataAskTimeout bounds the question to the controller alone.
	metadataAskTimeout = 300 * time.Millisecond
	// metadataSyncBackoff is how long a failed catch-up stops the next.
	metadataSyncBackoff = time.Second
	// metadataSyncWarnEvery rate-limits the warning that a catch-up
	// failed: a lagging node would otherwise log it for every request.
	metadataSyncWarnEvery = 10 * time.Second
)

// SyncMetadata waits, within metadataSyncTimeout, until this node's
// metadata holds every change committed before the call. It reports
// whether the state changed while it waited. A single node answers at
// once: its changes are applied before they are acknowledged.
func (n *Node) SyncMetadata() bool {
	if !n.Clustered() {
		return false
	}
	before := n.meta.State().Index
	ctx, cancel := context.WithTimeout(n.ctx, metadataSyncTimeout)
	defer cancel()
	target := n.meta.CommitIndex()
	if !n.meta.IsLeader() {
		if last := n.metaSyncFailed.Load(); last == 0 || time.Since(time.Unix(0, last)) > metadataSyncBackoff {
			// The shared question is bounded by its own timeout, not by
			// the context of whichever request happens to send it.
			hwm, err := n.metaAsks.do(ctx, func() (uint64, error) { return n.controllerCommitIndex(n.ctx) })
			if err != nil {
				n.metaSyncFailed.Store(time.Now().UnixNano())
				n.log.Debug("metadata read: the controller's commit index is unknown; answering from this node's", "err", err)
			} else {
				n.metaSyncFailed.Store(0)
				target = max(target, hwm)
			}
		}
	}
	if err := n.meta.WaitApplied(ctx, target); err != nil && n.ctx.Err() == nil {
		// The next requests do not wait again for a while either.
		now := time.Now()
		n.metaSyncFailed.Store(now.UnixNano())
		if last := n.metaSyncWarned.Load(); last == 0 || now.Sub(time.Unix(0, last)) > metadataSyncWarnEvery {
			n.metaSyncWarned.Store(now.UnixNano())
			n.log.Warn("metadata read: this node has not caught up with the controller; answering from what it has", "err", err)
		}
	}
	return n.meta.State().Index != before
}

// SyncMetadataAndReconcile is SyncMetadata for requests that also need
// this node's partitions in step with what it learnt: the partitions of
// a new topic open, a config change in force.
func (n *Node) SyncMetadataAndReconcile() {
	if n.SyncMetadata() {
		if err := n.Reconcile(); err != nil {
			n.log.Error("reconcile partitions after catching up with the metadata", "err", err)
		}
	}
}

// controllerCommitIndex asks the controller for the metadata log's high
// watermark: its raft commit index (DescribeQuorum, through
// Controller.CommitIndex).
func (n *Node) controllerCommitIndex(ctx context.Context) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, metadataAskTimeout)
	defer cancel()
	return n.ctrl.CommitIndex(ctx)
}

// askBatch shares a question whose answer only grows (a commit index)
// among the requests that need it, without ever answering a request with
// a question sent before it arrived: such an answer could predate a write
// acknowledged to the client just before its request, and the read would
// miss it. A request joins the next question, one not yet sent; that
// question is sent once none is in flight, so while one is, every request
// that arrives waits for the next, which all of them share.
type askBatch struct {
	mu       sync.Mutex
	inFlight *askFlight // sent and not yet answered; nil when none
	next     *askFlight // not yet sent, for the requests arriving now; nil when none
	// sent counts the questions sent.
	sent atomic.Int64
}

type askFlight struct {
	done chan struct{} // closed once v and err are set
	v    uint64
	err  error
}

// do returns the answer of ask to a question sent after do was called,
// or ctx's cause if ctx ends first. The ask of one caller answers the
// others that joined its question; it runs in that caller's goroutine and
// must bound itself.
func (a *askBatch) do(ctx context.Context, ask func() (uint64, error)) (uint64, error) {
	a.mu.Lock()
	if a.next == nil {
		a.next = &askFlight{done: make(chan struct{})}
	}
	f := a.next
	// Wait for the question in flight to come back before sending ours;
	// one of the requests that joined ours sends it.
	for a.next == f && a.inFlight != nil {
		cur := a.inFlight
		a.mu.Unlock()
		select {
		case <-cur.done:
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		}
		a.mu.Lock()
	}
	if a.next == f {
		// Nothing in flight and ours not yet sent: send it, closed to
		// anyone arriving from now on.
		a.next, a.inFlight = nil, f
		a.mu.Unlock()
		a.sent.Add(1)
		f.v, f.err = ask()
		a.mu.Lock()
		a.inFlight = nil
		close(f.done)
		a.mu.Unlock()
		return f.v, f.err
	}
	a.mu.Unlock()
	select {
	case <-f.done:
		return f.v, f.err
	case <-ctx.Done():
		return 0, context.Cause(ctx)
	}
}
