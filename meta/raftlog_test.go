package meta

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

func TestHCLogAdapterPassesWarningsOnly(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := newHCLogAdapter(l)
	a.soleVoter.Store(true)
	const routine = "heartbeat timeout reached, starting election"

	a.Info("chatter")
	a.Debug("more chatter")
	a.Warn(routine)
	a.Named("snapshot").With("id", 7).Warn("disk slow", "ms", 900)
	a.Error("broken")
	a.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Error}).Print("via std log")

	out := buf.String()
	for _, gone := range []string{"chatter", routine} {
		if strings.Contains(out, gone) {
			t.Errorf("%q reached slog:\n%s", gone, out)
		}
	}
	for _, kept := range []string{
		`level=WARN msg="disk slow" component=raft.snapshot id=7 ms=900`,
		`level=ERROR msg=broken component=raft`,
		`level=ERROR msg="via std log"`,
	} {
		if !strings.Contains(out, kept) {
			t.Errorf("missing %q in:\n%s", kept, out)
		}
	}
	if a.IsInfo() || !a.IsWarn() {
		t.Error("level predicates disagree with the warn threshold")
	}
}

// A node outside the voters never stands for election: raft's warnings
// that it did not are routine there, and only there.
func TestHCLogAdapterNonvoterRoutine(t *testing.T) {
	const routine = "not part of stable configuration, aborting election"
	for _, nonvoter := range []bool{false, true} {
		var buf bytes.Buffer
		a := newHCLogAdapter(slog.New(slog.NewTextHandler(&buf, nil)))
		a.nonvoter.Store(nonvoter)
		a.Warn(routine)
		a.Warn("no known peers, aborting election")
		if got := strings.Contains(buf.String(), "aborting election"); got == nonvoter {
			t.Errorf("nonvoter %v: logged %q", nonvoter, buf.String())
		}
	}
}

// A voter that is down makes raft report every failed heartbeat, several
// a second: one line per peer and message gets through per interval, and
// the next says how many were held back. Another peer, or another
// message about the same peer, is not held back by the first.
func TestHCLogAdapterRateLimitsPeerErrors(t *testing.T) {
	var buf bytes.Buffer
	a := newHCLogAdapter(slog.New(slog.NewTextHandler(&buf, nil)))
	now := time.Unix(1000, 0)
	a.peers = newPeerLimiter(30*time.Second, func() time.Time { return now })
	down := raft.ServerAddress("127.0.0.1:19103")
	refused := errors.New("dial tcp 127.0.0.1:19103: connect: connection refused")
	count := func(substr string) int { return strings.Count(buf.String(), substr) }

	// 95 s of a peer down: raft's heartbeat backoff caps at a quarter
	// second, so four failures a second.
	for range 95 * 4 {
		a.Error("failed to heartbeat to", "peer", down, "backoff time", 250*time.Millisecond, "error", refused)
		a.Named("x").Error("failed to appendEntries to", "peer", raft.Server{ID: "3", Address: down}, "error", refused)
		now = now.Add(250 * time.Millisecond)
	}
	a.Error("failed to heartbeat to", "peer", raft.ServerAddress("127.0.0.1:19102"), "error", refused)

	if got, want := count(`msg="failed to heartbeat to"`), 5; got != want {
		// At 0, 30, 60 and 90 s for the peer down, once for the other.
		t.Errorf("%d heartbeat lines, want %d:\n%s", got, want, buf.String())
	}
	if got, want := count(`msg="failed to appendEntries to"`), 4; got != want {
		t.Errorf("%d appendEntries lines, want %d:\n%s", got, want, buf.String())
	}
	// Each line after the first says how many of the 120 lines of an
	// interval it stands for.
	if got := count("suppressed=119"); got != 6 {
		t.Errorf("want 3 lines per message with suppressed=119, got %d:\n%s", got, buf.String())
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "peer=127.0.0.1:19102") || strings.Contains(last, "suppressed") {
		t.Errorf("another peer's first failure: %s", last)
	}
}

// A clean stop closes raft's transport, whose connection loops report it
// as "failed to decode incoming command": not an error an operator should
// see. The same message with another cause still is one.
func TestHCLogAdapterTransportShutdownIsDebug(t *testing.T) {
	var buf bytes.Buffer
	a := newHCLogAdapter(slog.New(slog.NewTextHandler(&buf, nil)))
	a.Error("failed to decode incoming command", "error", raft.ErrTransportShutdown)
	a.Error("failed to accept connection", "error", fmt.Errorf("accept: %w", net.ErrClosed))
	if buf.Len() != 0 {
		t.Errorf("shutdown logged:\n%s", buf.String())
	}
	a.Error("failed to decode incoming command", "error", errors.New("unknown rpc type 9"))
	if !strings.Contains(buf.String(), "level=ERROR") {
		t.Errorf("a real decode failure was not logged: %q", buf.String())
	}
}

// A quorum's first election has no leader to have lost: raft's warning
// that it starts one is routine then, and only then.
func TestHCLogAdapterFirstElectionIsRoutine(t *testing.T) {
	var buf bytes.Buffer
	a := newHCLogAdapter(slog.New(slog.NewTextHandler(&buf, nil)))
	const msg = "heartbeat timeout reached, starting election"
	a.Warn(msg, "last-leader-addr", raft.ServerAddress(""), "last-leader-id", raft.ServerID(""))
	if buf.Len() != 0 {
		t.Errorf("first election logged:\n%s", buf.String())
	}
	a.Warn(msg, "last-leader-addr", raft.ServerAddress("127.0.0.1:19103"), "last-leader-id", raft.ServerID("3"))
	if !strings.Contains(buf.String(), "last-leader-id=3") {
		t.Errorf("a lost leader's election was not logged: %q", buf.String())
	}
}

// The leader's lease check warns of a follower silent for a lease (250 ms
// in a quorum): on a busy machine that is jitter, logged at debug; a
// follower silent for longer is a peer down, logged as a warning.
func TestHCLogAdapterContactJitter(t *testing.T) {
	var buf bytes.Buffer
	a := newHCLogAdapter(slog.New(slog.NewTextHandler(&buf, nil)))
	a.Warn("failed to contact", "server-id", raft.ServerID("2"), "time", 250*time.Millisecond)
	if buf.Len() != 0 {
		t.Errorf("a 250 ms gap logged:\n%s", buf.String())
	}
	a.Warn("failed to contact", "server-id", raft.ServerID("2"), "time", 1500*time.Millisecond)
	if !strings.Contains(buf.String(), "level=WARN") {
		t.Errorf("a 1.5 s gap was not logged: %q", buf.String())
	}
}
