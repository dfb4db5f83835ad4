package meta

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
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
