package meta

import (
	"io"
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
	h := newHoldingTransport(nt, func(uint64) bool { return leading.Load() })
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
