package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// Loggers are derived in layers: `strata dev --nodes 3` names the node,
// the broker names it again, the broker's meta logger says component=meta
// and raft's adapter component=raft. A line names each key once, the
// innermost value, in both formats.
func TestLoggerNamesEachKeyOnce(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		l := newLogger(&buf, slog.LevelInfo, format).With("node", 2)
		l.Info("broker started", "node", 2)
		l.With("component", "meta").With("component", "raft").Warn("failed to contact")
		out := buf.String()
		for _, key := range []string{"node", "component"} {
			text, json := key+"=", `"`+key+`":`
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if n := strings.Count(line, text) + strings.Count(line, json); n > 1 {
					t.Errorf("%s: %s appears %d times: %s", format, key, n, line)
				}
			}
		}
		if !strings.Contains(out, "component=raft") && !strings.Contains(out, `"component":"raft"`) {
			t.Errorf("%s: the innermost component is not raft:\n%s", format, out)
		}
	}
}

// idleWindow is how long TestClusterIdleIsQuiet watches a settled cluster:
// STRATA_IDLE_DURATION (the ten minutes: STRATA_IDLE_DURATION=10m)
// or a short default that CI affords.
func idleWindow(t *testing.T) time.Duration {
	t.Helper()
	if v := os.Getenv("STRATA_IDLE_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("STRATA_IDLE_DURATION=%q: want a positive duration", v)
		}
		return d
	}
	if testing.Short() {
		return 5 * time.Second
	}
	return 15 * time.Second
}

// A healthy three-node cluster left idle is silent: the bar is
// fewer than 20 lines in all from three nodes over ten minutes, start-up
// included. Once the cluster has settled (a controller, the internal
// topics created and in sync) nothing more is logged at the default
// level, so the short window asserts zero lines after settling and the
// same budget of 20 for the whole run.
func TestClusterIdleIsQuiet(t *testing.T) {
	window := idleWindow(t)
	c := startCluster(t, 3, clusterSettings{replicationFactor: 3})
	for _, topic := range []string{"__consumer_offsets", "__transaction_state"} {
		c.waitISR(topic, 30*time.Second)
	}
	// logs are each node's lines so far, in order.
	logs := func() [][]string {
		var all [][]string
		for _, id := range []int32{1, 2, 3} {
			var lines []string
			for _, line := range strings.Split(c.proc(id).stderr.String(), "\n") {
				if line != "" {
					lines = append(lines, fmt.Sprintf("node %d: %s", id, line))
				}
			}
			all = append(all, lines)
		}
		return all
	}
	count := func(all [][]string) (n int) {
		for _, lines := range all {
			n += len(lines)
		}
		return n
	}
	// Settled: every node has taken up its share of the transaction
	// coordinators (the last thing a starting cluster logs), then no line
	// for three seconds; bounded, so that a node that never stops talking
	// fails below rather than here.
	settled := logs()
	deadline := time.Now().Add(30 * time.Second)
	c.waitFor("every node to load its transaction state partitions", 30*time.Second, func() bool {
		settled = logs()
		for _, lines := range settled {
			if !strings.Contains(strings.Join(lines, "\n"), "loaded transaction state partitions") {
				return false
			}
		}
		return true
	}, func() string { return strings.Join(slices.Concat(settled...), "\n") })
	for quiet := time.Now(); time.Since(quiet) < 3*time.Second && time.Now().Before(deadline); {
		time.Sleep(500 * time.Millisecond)
		if now := logs(); count(now) != count(settled) {
			settled, quiet = now, time.Now()
		}
	}
	t.Logf("settled after %d lines; idle for %s", count(settled), window)
	time.Sleep(window)

	end := logs()
	var idle, all []string
	for i := range end {
		idle = append(idle, end[i][len(settled[i]):]...)
		all = append(all, end[i]...)
	}
	if len(idle) > 0 {
		t.Errorf("%d lines logged by an idle cluster in %s:\n%s", len(idle), window, strings.Join(idle, "\n"))
	}
	if len(all) >= 20 {
		t.Errorf("%d lines logged in all (start-up and %s idle), want fewer than 20:\n%s", len(all), window, strings.Join(all, "\n"))
	}
	t.Logf("%d lines in all:\n%s", len(all), strings.Join(all, "\n"))
}
