package meta

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// holdingTransport is raft's TCP transport with one change: a log
// replication RPC (AppendEntries other than a heartbeat) that fails is
// retried here, at a bounded interval, for as long as this node leads in
// the request's term, instead of failing back to raft.
//
// Why: raft's replication loop backs off after each failed RPC to a
// follower, exponentially up to 10.24 s (hashicorp/raft replication.go,
// failureWait 10 ms doubled up to maxFailureScale; not configurable), and
// resets only on a success. A follower down for more than about 10 s is
// at that cap, so when it comes back the leader sends it nothing for up to
// another 10 s: it hears heartbeats (their backoff is capped at half the
// heartbeat timeout) and so knows the controller, but receives no log,
// and its broker waits that long for its own registration to reach it
// (issue 21: a rejoin after a 95 s outage took 10 s). Retrying here keeps
// raft's failure count at zero, so a follower back after any outage is
// sent the log within retryMax, as after a short one.
//
// What stays raft's: heartbeats fail fast (the leader's lease and its
// failed-heartbeat observations depend on them), as do votes, snapshots
// and the pipeline. A held RPC gives up when this node stops leading or
// its term moves on (a reply from a later term would make raft step down
// for nothing), when the peer is no longer at the address it was sent to
// (removed from the configuration, or a non-voter back at a new address:
// raft moves its replication to the new address, but only once this call
// returns, and heartbeats, which re-read it, keep any election away, so a
// call held on the old address would starve the peer of the log for as
// long as this node leads), and when the store closes, before raft's
// shutdown waits for its replication goroutines.
type holdingTransport struct {
	*raft.NetworkTransport
	// leading reports whether this node is still the leader in term.
	leading func(term uint64) bool
	// addrOf returns the address of server id in the latest configuration,
	// or false when id is not in it. It must not block on raft's main loop.
	addrOf func(id raft.ServerID) (raft.ServerAddress, bool)

	retryMin, retryMax time.Duration

	done      chan struct{}
	closeOnce sync.Once
}

const (
	holdRetryMin = 50 * time.Millisecond
	holdRetryMax = 500 * time.Millisecond
)

func newHoldingTransport(nt *raft.NetworkTransport, leading func(term uint64) bool, addrOf func(raft.ServerID) (raft.ServerAddress, bool)) *holdingTransport {
	return &holdingTransport{NetworkTransport: nt, leading: leading, addrOf: addrOf,
		retryMin: holdRetryMin, retryMax: holdRetryMax, done: make(chan struct{})}
}

// isHeartbeat is raft's own test for a heartbeat (net_transport.go).
func isHeartbeat(a *raft.AppendEntriesRequest) bool {
	return a.Term != 0 && a.PrevLogEntry == 0 && a.PrevLogTerm == 0 && len(a.Entries) == 0 && a.LeaderCommitIndex == 0
}

func (h *holdingTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := h.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil || isHeartbeat(args) {
		return err
	}
	wait := h.retryMin
	for {
		t := time.NewTimer(wait)
		select {
		case <-h.done:
			t.Stop()
			return err
		case <-t.C:
		}
		if !h.leading(args.Term) {
			return err
		}
		// Raft rebuilds the request for the peer's new address (or drops
		// the peer) once this returns, after its own short backoff.
		if addr, ok := h.addrOf(id); !ok || addr != target {
			return err
		}
		*resp = raft.AppendEntriesResponse{}
		if err = h.NetworkTransport.AppendEntries(id, target, args, resp); err == nil {
			return nil
		}
		wait = min(2*wait, h.retryMax)
	}
}

// release ends every held RPC; they return their last error.
func (h *holdingTransport) release() { h.closeOnce.Do(func() { close(h.done) }) }

// Close releases held RPCs and closes the transport.
func (h *holdingTransport) Close() error {
	h.release()
	return h.NetworkTransport.Close()
}
