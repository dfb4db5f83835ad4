package meta

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// hclogAdapter sends hashicorp/raft's hclog output to slog. Only records at
// or above its level (warn by default) reach slog: raft's info output is a
// running commentary of state transitions that operators do not need.
type hclogAdapter struct {
	l       *slog.Logger
	name    string
	implied []any
	level   *atomic.Int32 // hclog.Level, shared with derived loggers
	// soleVoter, shared with derived loggers, demotes the warnings in
	// soleVoterRoutine to info: they are routine for a node that is its
	// own quorum, and a warning at every start teaches operators to ignore
	// warnings.
	soleVoter *atomic.Bool
	// nonvoter, shared likewise, demotes nonvoterRoutine: a node outside
	// the voters never stands for election, by design.
	nonvoter *atomic.Bool
	// peers, shared likewise, rate-limits raft's complaints about one
	// peer: with a voter down, raft reports every failed heartbeat (several
	// a second) and every failed append, hundreds of identical lines that
	// bury everything else.
	peers *peerLimiter
}

var soleVoterRoutine = map[string]bool{
	"heartbeat timeout reached, starting election": true,
}

var nonvoterRoutine = map[string]bool{
	"no known peers, aborting election":                   true,
	"not part of stable configuration, aborting election": true,
}

var _ hclog.Logger = (*hclogAdapter)(nil)

func newHCLogAdapter(l *slog.Logger) *hclogAdapter {
	a := &hclogAdapter{l: l, name: "raft", level: new(atomic.Int32), soleVoter: new(atomic.Bool), nonvoter: new(atomic.Bool),
		peers: newPeerLimiter(peerLogInterval, time.Now)}
	a.level.Store(int32(hclog.Warn))
	return a
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (a *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if level == hclog.Warn && (a.soleVoter.Load() && soleVoterRoutine[msg] || a.nonvoter.Load() && nonvoterRoutine[msg]) {
		level = hclog.Info
	}
	if level == hclog.Warn && msg == "heartbeat timeout reached, starting election" && noLastLeader(args) {
		// The first election of a quorum, or of a node that restarted
		// before it heard from a leader: routine, not a leader lost.
		level = hclog.Info
	}
	if level == hclog.Warn && msg == "failed to contact" && contactGap(args) < contactJitter {
		// The leader's lease check names a follower it has not heard
		// from for a lease (250 ms in a quorum): on a busy machine that
		// is scheduling jitter, not a peer down. An outage goes past it
		// within a second, and is logged then.
		level = hclog.Debug
	}
	if level >= hclog.Warn && expectedShutdown(args) {
		// The transport's own close ends its connection loops with this
		// error: a clean stop, not a fault.
		level = hclog.Debug
	}
	if level < a.GetLevel() || level == hclog.Off {
		return
	}
	var suppressed int
	if level >= hclog.Warn {
		if peer, ok := peerOf(args); ok {
			var log bool
			if log, suppressed = a.peers.allow(msg, peer); !log {
				return
			}
		}
	}
	attrs := make([]any, 0, 4+len(a.implied)+len(args))
	attrs = append(attrs, "component", a.name)
	attrs = append(attrs, a.implied...)
	attrs = append(attrs, args...)
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	a.l.Log(context.Background(), slogLevel(level), msg, attrs...)
}

func (a *hclogAdapter) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogAdapter) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogAdapter) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogAdapter) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogAdapter) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogAdapter) IsTrace() bool { return a.GetLevel() <= hclog.Trace }
func (a *hclogAdapter) IsDebug() bool { return a.GetLevel() <= hclog.Debug }
func (a *hclogAdapter) IsInfo() bool  { return a.GetLevel() <= hclog.Info }
func (a *hclogAdapter) IsWarn() bool  { return a.GetLevel() <= hclog.Warn }
func (a *hclogAdapter) IsError() bool { return a.GetLevel() <= hclog.Error }

func (a *hclogAdapter) ImpliedArgs() []any { return a.implied }

func (a *hclogAdapter) With(args ...any) hclog.Logger {
	c := *a
	c.implied = append(append([]any(nil), a.implied...), args...)
	return &c
}

func (a *hclogAdapter) Name() string { return a.name }

func (a *hclogAdapter) Named(name string) hclog.Logger {
	c := *a
	c.name = a.name + "." + name
	return &c
}

func (a *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

func (a *hclogAdapter) SetLevel(l hclog.Level) { a.level.Store(int32(l)) }
func (a *hclogAdapter) GetLevel() hclog.Level  { return hclog.Level(a.level.Load()) }

func (a *hclogAdapter) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(a.StandardWriter(opts), "", 0)
}

func (a *hclogAdapter) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return stdWriter{a: a, level: level}
}

type stdWriter struct {
	a     *hclogAdapter
	level hclog.Level
}

func (w stdWriter) Write(p []byte) (int, error) {
	w.a.Log(w.level, strings.TrimSpace(string(p)))
	return len(p), nil
}

// peerLogInterval is how often one complaint about one peer is logged;
// the line after a quiet interval says how many were left out.
const peerLogInterval = 30 * time.Second

// contactJitter is the silence from a follower below which raft's
// "failed to contact" is not worth a warning.
const contactJitter = time.Second

// contactGap returns the "time" argument of raft's "failed to contact":
// how long the follower has been silent (an hour if it is missing, so
// that a message of an unknown shape is logged).
func contactGap(args []any) time.Duration {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "time" {
			if d, ok := args[i+1].(time.Duration); ok {
				return d
			}
		}
	}
	return time.Hour
}

// peerKeys are the arguments by which raft names the peer a message is
// about.
var peerKeys = map[string]bool{"peer": true, "target": true, "server-id": true}

// peerOf returns the peer a raft message is about, if it names one. raft
// names a peer by its raft.Server, its address or its id depending on the
// message; each message names it the same way every time, which is all
// the rate limit needs.
func peerOf(args []any) (string, bool) {
	for i := 0; i+1 < len(args); i += 2 {
		k, ok := args[i].(string)
		if !ok || !peerKeys[k] {
			continue
		}
		switch v := args[i+1].(type) {
		case raft.Server:
			return string(v.ID) + "@" + string(v.Address), true
		default:
			return fmt.Sprint(v), true
		}
	}
	return "", false
}

// noLastLeader reports whether raft's election message says no leader was
// known before it.
func noLastLeader(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k == "last-leader-id" {
			return fmt.Sprint(args[i+1]) == ""
		}
	}
	return false
}

// expectedShutdown reports whether the message's error is the transport
// being closed by this node: raft's connection loops report it as a
// failure to decode the next command.
func expectedShutdown(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if k, _ := args[i].(string); k != "error" {
			continue
		}
		err, _ := args[i+1].(error)
		return err != nil && (errors.Is(err, raft.ErrTransportShutdown) || errors.Is(err, net.ErrClosed))
	}
	return false
}

// peerLimiter lets one line per message and peer through per interval and
// counts the ones it holds back. Its memory is bounded by the peers times
// raft's messages about peers: entries quiet for an interval are dropped
// once the map grows.
type peerLimiter struct {
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	seen map[peerMsg]*peerEntry // guarded by mu
}

type peerMsg struct{ msg, peer string }

type peerEntry struct {
	last       time.Time // when a line was last let through
	suppressed int       // lines held back since then
}

func newPeerLimiter(interval time.Duration, now func() time.Time) *peerLimiter {
	return &peerLimiter{interval: interval, now: now, seen: map[peerMsg]*peerEntry{}}
}

// allow reports whether msg about peer is logged now and, if so, how many
// of its repeats were held back since the last one logged.
func (l *peerLimiter) allow(msg, peer string) (log bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	k := peerMsg{msg, peer}
	e := l.seen[k]
	if e == nil {
		if len(l.seen) >= 256 {
			for k, e := range l.seen {
				if now.Sub(e.last) >= l.interval && e.suppressed == 0 {
					delete(l.seen, k)
				}
			}
		}
		l.seen[k] = &peerEntry{last: now}
		return true, 0
	}
	if now.Sub(e.last) < l.interval {
		e.suppressed++
		return false, 0
	}
	suppressed, e.suppressed, e.last = e.suppressed, 0, now
	return true, suppressed
}
