// Package logging holds the slog plumbing shared by the binary and the
// servers it wires up.
package logging

import (
	"context"
	"log/slog"
)

// DedupHandler wraps a handler so that each key appears once per line.
// Loggers are derived in layers (the dev cluster adds node=2, the broker
// adds component=meta, raft's adapter adds component=raft) and a layer
// that does not know what the one above added repeats it: slog's own
// handlers then print both, node=2 node=2, which reads as a bug and
// confuses log pipelines that index by key. Here the innermost value
// wins: an attribute of the record over one added by With, a later With
// over an earlier one, in the position the key first had.
//
// Keys are compared within a group: attributes added after WithGroup are
// handed to the wrapped handler as they are, nested under the group.
type DedupHandler struct {
	inner slog.Handler
	attrs []slog.Attr // added by WithAttrs since the last group, deduplicated
}

var _ slog.Handler = (*DedupHandler)(nil)

// NewDedupHandler wraps h.
func NewDedupHandler(h slog.Handler) *DedupHandler { return &DedupHandler{inner: h} }

func (h *DedupHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h *DedupHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return h
	}
	return &DedupHandler{inner: h.inner, attrs: merge(append([]slog.Attr(nil), h.attrs...), as)}
}

func (h *DedupHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	inner := h.inner
	if len(h.attrs) > 0 {
		inner = inner.WithAttrs(h.attrs)
	}
	return &DedupHandler{inner: inner.WithGroup(name)}
}

func (h *DedupHandler) Handle(ctx context.Context, r slog.Record) error {
	if len(h.attrs) == 0 && r.NumAttrs() < 2 {
		return h.inner.Handle(ctx, r)
	}
	as := make([]slog.Attr, 0, len(h.attrs)+r.NumAttrs())
	as = append(as, h.attrs...)
	rec := make([]slog.Attr, 0, r.NumAttrs())
	r.Attrs(func(a slog.Attr) bool {
		rec = append(rec, a)
		return true
	})
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(merge(as, rec)...)
	return h.inner.Handle(ctx, out)
}

// merge adds each of add to as, replacing the value of a key as already
// holds in place. An empty key (an attribute slog drops) is kept as is.
func merge(as, add []slog.Attr) []slog.Attr {
next:
	for _, a := range add {
		if a.Key != "" {
			for i := range as {
				if as[i].Key == a.Key {
					as[i] = a
					continue next
				}
			}
		}
		as = append(as, a)
	}
	return as
}
