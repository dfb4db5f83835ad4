package logging

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// The dev cluster's node logger adds node=2 and the broker names its node
// again; the broker's meta logger adds component=meta and raft's adapter
// component=raft. Each key is printed once, with the innermost value.
func TestDedupHandlerRepeatedKeys(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(NewDedupHandler(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	})))
	node := l.With("node", 2)
	node.Info("broker started", "node", 2, "listen", "127.0.0.1:9092")
	node.With("component", "meta").With("component", "raft").Warn("failed to contact", "server-id", 3)
	node.With("component", "meta").WithGroup("req").Info("grouped", "component", "inner")

	want := []string{
		`level=INFO msg="broker started" node=2 listen=127.0.0.1:9092`,
		`level=WARN msg="failed to contact" node=2 component=raft server-id=3`,
		`level=INFO msg=grouped node=2 component=meta req.component=inner`,
	}
	got := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), buf.String())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

// A record's own repeated key is printed once too, the last value.
func TestDedupHandlerWithinRecord(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(NewDedupHandler(slog.NewJSONHandler(&buf, nil)))
	l.Info("m", "k", 1, "k", 2)
	if s := buf.String(); strings.Count(s, `"k"`) != 1 || !strings.Contains(s, `"k":2`) {
		t.Errorf("got %s", s)
	}
}
