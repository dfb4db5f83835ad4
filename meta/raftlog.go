package meta

import (
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
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
	a := &hclogAdapter{l: l, name: "raft", level: new(atomic.Int32), soleVoter: new(atomic.Bool), nonvoter: new(atomic.Bool)}
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
	if level < a.GetLevel() || level == hclog.Off {
		return
	}
	attrs := make([]any, 0, 2+len(a.implied)+len(args))
	attrs = append(attrs, "component", a.name)
	attrs = append(attrs, a.implied...)
	attrs = append(attrs, args...)
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
