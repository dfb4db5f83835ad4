package meta

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"strata/meta/internal/badgerstore"
)

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testConfig(t *testing.T, dir string) Config {
	return Config{
		NodeID:    1,
		Dir:       dir,
		Bootstrap: true,
		Logger:    slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		// Tests that are not about sessions register brokers that never
		// heartbeat: none of them must be fenced under the test's feet.
		SessionTimeout: time.Hour,
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(testCtx(t), testConfig(t, dir))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func closeStore(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func TestOpenSingleVoterIsLeaderQuickly(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	s := openStore(t, dir)
	fresh := time.Since(start)
	if !s.IsLeader() || s.ControllerID() != 1 {
		t.Fatalf("IsLeader = %v, ControllerID = %d", s.IsLeader(), s.ControllerID())
	}
	closeStore(t, s)

	start = time.Now()
	s = openStore(t, dir)
	again := time.Since(start)
	t.Logf("Open until leader: fresh %v, reopen %v", fresh, again)
	// Expected well under a second; the bound only catches regressions such
	// as falling back to raft's one-second default timeouts twice over.
	if fresh > 5*time.Second || again > 5*time.Second {
		t.Fatalf("Open took %v / %v", fresh, again)
	}
	if !s.IsLeader() {
		t.Fatal("not leader after reopen")
	}
}

// populate drives every command through raft.
func populate(t *testing.T, s *Store) {
	t.Helper()
	ctx := testCtx(t)
	for _, id := range []int32{1, 2, 3} {
		if _, err := s.RegisterBroker(ctx, Registration{Incarnation: "i", ID: id, Host: "127.0.0.1", Port: 9090 + id}); err != nil {
			t.Fatal(err)
		}
	}
	orders, err := s.CreateTopic(ctx, TopicSpec{Name: "orders", Partitions: 3, ReplicationFactor: 2,
		Configs: map[string]string{"retention.ms": "-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if orders.ID == ([16]byte{}) || orders.ID[6]>>4 != 4 {
		t.Fatalf("generated ID %x is not a v4 UUID", orders.ID)
	}
	given := [16]byte{1, 2, 3, 4, 5, 6, 0x40, 8, 0x80, 15: 1}
	got, err := s.CreateTopic(ctx, TopicSpec{Name: "given", Partitions: 1, ReplicationFactor: 1, ID: given})
	if err != nil || got.ID != given {
		t.Fatalf("CreateTopic with ID: %x, %v", got.ID, err)
	}
	if _, err := s.CreateTopic(ctx, TopicSpec{Name: "doomed", Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreatePartitions(ctx, "orders", 5); err != nil {
		t.Fatal(err)
	}
	if err := s.AlterConfigs(ctx, "orders", map[string]string{"cleanup.policy": "compact"}, []string{"retention.ms"}, false); err != nil {
		t.Fatal(err)
	}
	deleted, err := s.DeleteTopic(ctx, "doomed")
	if err != nil || deleted.Name != "doomed" || deleted.ID == ([16]byte{}) {
		t.Fatalf("DeleteTopic = %+v, %v", deleted, err)
	}
}

func TestReopenRestoresState(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	populate(t, s)
	want := s.State()
	if len(want.Topics) != 2 || len(want.Topics["orders"].Partitions) != 5 {
		t.Fatalf("unexpected state %+v", want.Topics)
	}
	closeStore(t, s)

	// From the raft log alone.
	s = openStore(t, dir)
	if got := s.State(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after log replay:\n got %+v\nwant %+v", got, want)
	}

	// From a snapshot, plus the log after it.
	if err := s.raft.Snapshot().Error(); err != nil {
		t.Fatalf("raft snapshot: %v", err)
	}
	if _, err := s.CreateTopic(testCtx(t), TopicSpec{Name: "after-snapshot", Partitions: 2, ReplicationFactor: 3}); err != nil {
		t.Fatal(err)
	}
	want = s.State()
	closeStore(t, s)
	snaps, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
	if len(snaps) == 0 {
		t.Fatal("no snapshot on disk")
	}

	s = openStore(t, dir)
	if got := s.State(); !reflect.DeepEqual(got, want) {
		t.Fatalf("after snapshot restore:\n got %+v\nwant %+v", got, want)
	}
	// And the restored node keeps working.
	if _, err := s.CreateTopic(testCtx(t), TopicSpec{Name: "orders", Partitions: 1, ReplicationFactor: 1}); !errors.Is(err, ErrTopicExists) {
		t.Fatalf("re-create after restore: %v", err)
	}
}

// The TCP transport is for clustering; a sole voter on it must work, and
// start, the same as on the in-memory one, also when its persisted
// configuration (not Bootstrap) is what says it is alone.
func TestOpenWithTCPTransport(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.RaftAddr = "127.0.0.1:0"
	start := time.Now()
	s, err := Open(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Open with TCP transport until leader: %v", time.Since(start))
	if _, err := s.RegisterBroker(testCtx(t), Registration{Incarnation: "i", ID: 1}); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	cfg.Bootstrap = false
	start = time.Now()
	s, err = Open(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore(t, s)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("reopen with TCP transport took %v", d)
	} else {
		t.Logf("reopen with TCP transport until leader: %v", d)
	}
	if _, ok := s.State().Brokers[1]; !ok {
		t.Fatal("broker lost across restart")
	}
}

func TestCommandErrorsReachTheCaller(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := testCtx(t)
	if _, err := s.CreateTopic(ctx, TopicSpec{Name: "t", Partitions: 1, ReplicationFactor: 1}); !errors.Is(err, ErrInvalidReplicationFactor) {
		t.Fatalf("no brokers: %v", err)
	}
	if _, err := s.RegisterBroker(ctx, Registration{Incarnation: "i", ID: 1, Host: "h", Port: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateTopic(ctx, TopicSpec{Name: "t", Partitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		err  error
		want error
	}{
		{"exists", func() error {
			_, err := s.CreateTopic(ctx, TopicSpec{Name: "t", Partitions: 1, ReplicationFactor: 1})
			return err
		}(), ErrTopicExists},
		{"rf", func() error {
			_, err := s.CreateTopic(ctx, TopicSpec{Name: "u", Partitions: 1, ReplicationFactor: 2})
			return err
		}(), ErrInvalidReplicationFactor},
		{"delete unknown", func() error { _, err := s.DeleteTopic(ctx, "u"); return err }(), ErrUnknownTopic},
		{"shrink", s.CreatePartitions(ctx, "t", 1), ErrInvalidPartitions},
		{"grow unknown", s.CreatePartitions(ctx, "u", 3), ErrUnknownTopic},
		{"alter unknown", s.AlterConfigs(ctx, "u", nil, nil, true), ErrUnknownTopic},
	}
	for _, c := range checks {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, c.err, c.want)
		}
	}
}

func TestChangedFiresOnApply(t *testing.T) {
	s := openStore(t, t.TempDir())
	ch := s.Changed()
	before := s.State()
	if _, err := s.RegisterBroker(testCtx(t), Registration{Incarnation: "i", ID: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("Changed did not fire")
	}
	if s.State() == before || s.State().Index <= before.Index {
		t.Fatal("State did not advance")
	}
	select {
	case <-s.Changed():
		t.Fatal("the next Changed channel is already closed")
	default:
	}
}

func TestProposeHonoursContext(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.RegisterBroker(ctx, Registration{Incarnation: "i", ID: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled ctx: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(testCtx(t), testConfig(t, file))
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("Open on a file: %v", err)
	}
	t.Logf("Open on a file: %v", err)

	dir := t.TempDir()
	openStore(t, dir)
	_, err = Open(testCtx(t), testConfig(t, dir))
	if err == nil {
		t.Fatal("second Open of the same directory succeeded")
	}
	t.Logf("Open on a held directory: %v", err)

	cfg := testConfig(t, t.TempDir())
	cfg.Bootstrap = false
	if _, err := Open(testCtx(t), cfg); err == nil || !strings.Contains(err.Error(), "Bootstrap") {
		t.Fatalf("Open without state or Bootstrap: %v", err)
	}
	if _, err := Open(testCtx(t), Config{}); err == nil {
		t.Fatal("Open with an empty Config succeeded")
	}
}

func TestCloseIsFinal(t *testing.T) {
	before := runtime.NumGoroutine()
	s, err := Open(testCtx(t), testConfig(t, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	populate(t, s)
	closeStore(t, s)
	closeStore(t, s)
	if _, err := s.RegisterBroker(testCtx(t), Registration{Incarnation: "i", ID: 9}); !errors.Is(err, ErrClosed) {
		t.Fatalf("RegisterBroker after Close: %v", err)
	}
	if _, err := s.RegisterBroker(context.Background(), Registration{Incarnation: "i", ID: 9}); !errors.Is(err, ErrClosed) {
		t.Fatalf("RegisterBroker after Close, no deadline: %v", err)
	}
	if s.IsLeader() {
		t.Fatal("closed store claims leadership")
	}

	// Every goroutine raft and Badger started has an owner that Close
	// waited for; allow the runtime a moment to reap them.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before Open, %d after Close:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

func TestRaftErrorMapping(t *testing.T) {
	for _, err := range []error{raft.ErrNotLeader, raft.ErrLeadershipLost, raft.ErrLeadershipTransferInProgress} {
		if got := raftError(err); !errors.Is(got, ErrNotController) || !errors.Is(got, err) {
			t.Errorf("raftError(%v) = %v", err, got)
		}
	}
	// Lost leadership with the entry in the log: the next leader may
	// commit it, so the caller must not take it as refused.
	if got := raftError(raft.ErrLeadershipLost); !errors.Is(got, ErrOutcomeUnknown) {
		t.Errorf("raftError(leadership lost) = %v, want ErrOutcomeUnknown", got)
	}
	// Never the leader: nothing was appended.
	if got := raftError(raft.ErrNotLeader); errors.Is(got, ErrOutcomeUnknown) {
		t.Errorf("raftError(not leader) = %v, want a known outcome", got)
	}
	if got := raftError(raft.ErrRaftShutdown); !errors.Is(got, ErrClosed) {
		t.Errorf("raftError(shutdown) = %v", got)
	}
	if got := raftError(raft.ErrEnqueueTimeout); !errors.Is(got, context.DeadlineExceeded) {
		t.Errorf("raftError(enqueue timeout) = %v", got)
	}
}

func TestNewTopicID(t *testing.T) {
	seen := map[[16]byte]bool{}
	for range 1000 {
		id := newTopicID()
		if id[6]>>4 != 4 || id[8]>>6 != 2 {
			t.Fatalf("%x is not a v4 UUID", id)
		}
		if id[0]>>2 == 62 {
			t.Fatalf("%x encodes with a leading '-'", id)
		}
		if seen[id] {
			t.Fatalf("%x twice", id)
		}
		seen[id] = true
	}
}

func BenchmarkOpen(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		b.StartTimer()
		s, err := Open(context.Background(), Config{NodeID: 1, Dir: dir, Bootstrap: true})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
}

// Producer ids must never be handed out twice: a reused id would make a new
// producer's sequence 0 look out of order against the old one's state.
func TestProducerIDsNeverReused(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	first, err := s.AllocateProducerIDs(testCtx(t), 1000)
	if err != nil || first != 0 {
		t.Fatalf("first block: %d, %v", first, err)
	}
	second, err := s.AllocateProducerIDs(testCtx(t), 1000)
	if err != nil || second != 1000 {
		t.Fatalf("second block: %d, %v", second, err)
	}
	if _, err := s.AllocateProducerIDs(testCtx(t), 0); err == nil {
		t.Fatal("empty block allocated")
	}
	if err := s.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	closeStore(t, s)
	s = openStore(t, dir)
	third, err := s.AllocateProducerIDs(testCtx(t), 10)
	if err != nil || third != 2000 {
		t.Fatalf("block after restart: %d, %v (want 2000)", third, err)
	}
	if got := s.State().NextProducerID; got != 2010 {
		t.Fatalf("next producer id %d, want 2010", got)
	}
}

// TestOpenAsAnotherNode: stored metadata whose membership lacks this node
// is refused at once, naming both ids, rather than waiting forever for a
// leader that this node can never be nor hear from.
func TestOpenAsAnotherNode(t *testing.T) {
	dir := t.TempDir()
	closeStore(t, openStore(t, dir)) // node 1's
	cfg := testConfig(t, dir)
	cfg.NodeID = 0
	ctx := testCtx(t)
	_, err := Open(ctx, cfg)
	var other *OtherNodeError
	if !errors.As(err, &other) || ctx.Err() != nil {
		t.Fatalf("Open as node 0 of node 1's metadata: %v", err)
	}
	if other.MadeBy() != "node 1" || other.Node != 0 || !strings.Contains(err.Error(), dir) {
		t.Errorf("error %q (made by %q)", err, other.MadeBy())
	}
	openStore(t, dir) // still opens as node 1
}

// TestStableWriteAfterCloseIsDropped: a heartbeat the TCP transport
// serves while the store closes may set the current term after the
// database closed; raft panics on a failed stable write, so the write is
// dropped (CI once saw that panic when a test cluster node closed).
func TestStableWriteAfterCloseIsDropped(t *testing.T) {
	st, err := badgerstore.Open(t.TempDir(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	stable := closingStable{st}
	if err := stable.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := stable.SetUint64([]byte("CurrentTerm"), 4); err != nil {
		t.Fatalf("a term update after close: %v, want it dropped", err)
	}
	if err := stable.Set([]byte("LastVoteCand"), []byte("x")); err != nil {
		t.Fatalf("a set after close: %v, want it dropped", err)
	}
}
