package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestElectLeadersOneNode: `strata cluster elect-leaders` asks for
// preferred-leader elections through the ElectLeaders API (KIP-183) and
// prints a result per partition. On one node every partition is already
// led by its preferred (only) replica, which Kafka answers with
// ELECTION_NOT_NEEDED: that is reported per partition and is no failure.
func TestElectLeadersOneNode(t *testing.T) {
	n := startNode(t, nil, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off")
	env := []string{"STRATA_BOOTSTRAP=" + n.bootstrap}
	mustCreate(t, n.bootstrap, "elect", 3, nil)

	code, stdout, stderr := runCLI(t, env, "cluster", "elect-leaders", "--topic", "elect")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
	}
	for p := range 3 {
		if !regexp.MustCompile(`(?m)^elect\s+` + string(rune('0'+p)) + `\s+ELECTION_NOT_NEEDED\b`).MatchString(stdout) {
			t.Errorf("no ELECTION_NOT_NEEDED row for partition %d:\n%s", p, stdout)
		}
	}
	out := cliOK(t, env, "cluster", "elect-leaders", "--topic", "elect", "--partition", "1")
	if strings.Count(out, "ELECTION_NOT_NEEDED") != 1 || !strings.Contains(out, "elect") {
		t.Errorf("one partition:\n%s", out)
	}
	// A partition the topic does not have is a failure naming it.
	code, _, stderr = runCLI(t, env, "cluster", "elect-leaders", "--topic", "elect", "--partition", "7")
	if code != 1 {
		t.Errorf("partition 7: exit %d", code)
	}
	assertOneLineError(t, stderr, "elect-7", "UNKNOWN_TOPIC_OR_PARTITION")
	n.stop(t)
}

// TestElectLeadersUsage: --partition needs --topic; the command line is
// checked before any broker is asked.
func TestElectLeadersUsage(t *testing.T) {
	code, _, stderr := runCLI(t, []string{"STRATA_BOOTSTRAP=127.0.0.1:1"}, "cluster", "elect-leaders", "--partition", "0")
	if code != 2 {
		t.Errorf("exit %d, want 2", code)
	}
	assertOneLineError(t, stderr, "--partition", "--topic", "strata cluster elect-leaders --help")
}

// TestPrintElections: each partition gets a row saying what happened to
// it, ELECTION_NOT_NEEDED included; any other error fails the command,
// naming the partition, while the rows of the others still print.
func TestPrintElections(t *testing.T) {
	rs := kadm.ElectLeadersResults{
		"b": {
			1: {Topic: "b", Partition: 1, Err: kerr.PreferredLeaderNotAvailable, ErrMessage: "replica 2 is not in the ISR"},
			0: {Topic: "b", Partition: 0, Err: kerr.ElectionNotNeeded},
		},
		"a": {0: {Topic: "a", Partition: 0}, 1: {Topic: "a", Partition: 1, How: kadm.ElectLiveReplica}},
	}
	var out strings.Builder
	err := printElections(&out, rs)
	want := regexp.MustCompile(`^TOPIC +PARTITION +RESULT\na +0 +elected\na +1 +elected \(unclean\)\nb +0 +ELECTION_NOT_NEEDED\b.*\n$`)
	if !want.MatchString(out.String()) {
		t.Errorf("rows:\n%s", out.String())
	}
	if err == nil || err.Error() != "cluster elect-leaders b-1: PREFERRED_LEADER_NOT_AVAILABLE: replica 2 is not in the ISR" {
		t.Errorf("error: %v", err)
	}
}

// TestPrintElectionsNone: asked about every partition, the controller
// answers only for those it considered electing (as Kafka's does); an
// empty answer says so rather than printing a bare header.
func TestPrintElectionsNone(t *testing.T) {
	var out strings.Builder
	if err := printElections(&out, kadm.ElectLeadersResults{}); err != nil {
		t.Fatal(err)
	}
	if out.String() != "no partition needed an election\n" {
		t.Errorf("printed %q", out.String())
	}
}
