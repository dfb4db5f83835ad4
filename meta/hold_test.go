package meta

import (
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestHoldingTransportLetsGo: a replication RPC to a peer that is down is
// held, not failed back to raft, only while this node leads in the
// request's term and the store is open; a heartbeat is never held (the
// leader's lease depends on its failures).
func TestHoldingTransportLetsGo(t *testing.T) {
	down := freeAddrs(t, 1)[0] // nobody listens there
	nt, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var leading atomic.Bool
	leading.Store(true)
	h := newHoldingTransport(nt, func(uint64) bool { return leading.Load() },
		func(raft.ServerID) (raft.ServerAddress, bool) { return raft.ServerAddress(down), true })
	defer h.Close()

	call := func(req *raft.AppendEntriesRequest) (error, time.Duration) {
		start := time.Now()
		err := h.AppendEntries("2", raft.ServerAddress(down), req, &raft.AppendEntriesResponse{})
		return err, time.Since(start)
	}
	replication := &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 7, PrevLogTerm: 3, LeaderCommitIndex: 7}

	if err, took := call(&raft.AppendEntriesRequest{Term: 3}); err == nil || took > 500*time.Millisecond {
		t.Errorf("heartbeat to a dead peer: %v after %s, want a fast failure", err, took)
	}
	go func() { time.Sleep(300 * time.Millisecond); leading.Store(false) }()
	if err, took := call(replication); err == nil || took < 250*time.Millisecond || took > 300*time.Millisecond+2*holdRetryMax {
		t.Errorf("replication while leading for 300ms: %v after %s, want held until leadership ends", err, took)
	}
	leading.Store(true)
	go func() { time.Sleep(300 * time.Millisecond); h.release() }()
	if err, took := call(replication); err == nil || took < 250*time.Millisecond || took > 300*time.Millisecond+time.Second {
		t.Errorf("replication until the store closes: %v after %s, want held until released", err, took)
	}
}

// TestHoldingTransportFollowsThePeer: a held replication RPC gives up as
// soon as its peer is no longer at the address it was sent to, moved or
// removed from the configuration, so that raft rebuilds it for the peer's
// new address (or drops it) instead of it knocking at the old one for as
// long as this node leads.
func TestHoldingTransportFollowsThePeer(t *testing.T) {
	down := raft.ServerAddress(freeAddrs(t, 1)[0]) // nobody listens there
	nt, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	addr, member := down, true
	set := func(a raft.ServerAddress, in bool) {
		mu.Lock()
		defer mu.Unlock()
		addr, member = a, in
	}
	// Leading for 3 s only, so that a hold that ignores the peer's moves
	// fails the test rather than hanging it.
	until := time.Now().Add(3 * time.Second)
	h := newHoldingTransport(nt, func(uint64) bool { return time.Now().Before(until) }, func(id raft.ServerID) (raft.ServerAddress, bool) {
		mu.Lock()
		defer mu.Unlock()
		if id != "2" || !member {
			return "", false
		}
		return addr, true
	})
	defer h.Close()
	replication := &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 7, PrevLogTerm: 3, LeaderCommitIndex: 7}
	call := func() (error, time.Duration) {
		start := time.Now()
		err := h.AppendEntries("2", down, replication, &raft.AppendEntriesResponse{})
		return err, time.Since(start)
	}

	go func() { time.Sleep(300 * time.Millisecond); set("127.0.0.1:1", true) }()
	if err, took := call(); err == nil || took < 250*time.Millisecond || took > 300*time.Millisecond+2*holdRetryMax {
		t.Errorf("replication to a peer that moved after 300ms: %v after %s, want held until it moved", err, took)
	}
	set(down, true)
	go func() { time.Sleep(300 * time.Millisecond); set("", false) }()
	if err, took := call(); err == nil || took < 250*time.Millisecond || took > 300*time.Millisecond+2*holdRetryMax {
		t.Errorf("replication to a peer removed after 300ms: %v after %s, want held until it was removed", err, took)
	}
}

// TestHoldNonvoterRejoinsAtANewAddress: a non-voter that comes back under
// its id at a new address receives the log at once, though the leader was
// holding a replication RPC to its old address when it came back.
func TestHoldNonvoterRejoinsAtANewAddress(t *testing.T) {
	q := newQuorum(t, 1)
	q.open(1)
	leader := q.leader()
	ctx := testCtx(t)

	addrs := freeAddrs(t, 2)
	cfg := testConfig(t, t.TempDir())
	cfg.NodeID = 4
	cfg.Bootstrap = false
	cfg.Voters = q.voters
	cfg.RaftAddr = addrs[0]
	nv, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.AllocateProducerIDs(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	want := leader.State().NextProducerID
	waitFor(t, "the non-voter to apply the log", func() bool { return nv.State().NextProducerID == want })
	closeStore(t, nv)

	// Written while it is down: the leader's replication RPC to the old
	// address fails and is held.
	if _, err := leader.AllocateProducerIDs(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)

	cfg.RaftAddr = addrs[1]
	nv, err = Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nv.Close()
	back := time.Now()
	if _, err := leader.AllocateProducerIDs(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	want = leader.State().NextProducerID
	deadline := back.Add(2 * time.Second)
	for nv.State().NextProducerID != want {
		if time.Now().After(deadline) {
			t.Fatalf("non-voter back at %s (was %s) has not applied the log after %s: next producer id %d, want %d",
				addrs[1], addrs[0], time.Since(back).Round(time.Millisecond), nv.State().NextProducerID, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("non-voter back at a new address applied the log %s after it came back", time.Since(back).Round(time.Millisecond))
}
