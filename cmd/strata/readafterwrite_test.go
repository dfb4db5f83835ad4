package main

import (
	"fmt"
	"strings"
	"testing"
)

// Read after write (issue 21, item 1): a change a node acknowledged is
// visible to the client's next request, whichever node of the cluster
// that request reaches. The CLI bootstraps from every node, so each verb
// may talk to another one: `topic create` then `topic describe`, and
// `topic alter-config` then `topic describe`, twenty times in a row, must
// never show the state from before the change.

func TestReadAfterWriteServe(t *testing.T) {
	c := startCluster(t, 3, clusterSettings{})
	checkReadAfterWrite(t, c.bootstrap())
}

func TestReadAfterWriteDevNodes(t *testing.T) {
	n := startNode(t, nil, "dev", "--nodes", "3", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off")
	if strings.Count(n.bootstrap, ",") != 2 {
		t.Fatalf("bootstrap %q does not name three nodes", n.bootstrap)
	}
	checkReadAfterWrite(t, n.bootstrap)
	n.stop(t)
}

func checkReadAfterWrite(t *testing.T, bootstrap string) {
	t.Helper()
	env := []string{"STRATA_BOOTSTRAP=" + bootstrap}
	rounds := 20
	if testing.Short() {
		rounds = 5 // the race pass: the same paths, a quarter of the time
	}
	var stale []string
	for i := range rounds {
		topic := fmt.Sprintf("raw-%d", i)
		cliOK(t, env, "topic", "create", topic, "--partitions", "2", "--replication-factor", "1")
		code, stdout, stderr := runCLI(t, env, "topic", "describe", topic, "--json")
		if code != 0 {
			stale = append(stale, fmt.Sprintf("create %s then describe: exit %d: %s", topic, code, strings.TrimSpace(stderr)))
		} else if !strings.Contains(stdout, `"name": "`+topic+`"`) {
			stale = append(stale, fmt.Sprintf("create %s then describe: %s", topic, stdout))
		}
	}
	for i := range rounds {
		want := fmt.Sprint(3_600_000 + i)
		cliOK(t, env, "topic", "alter-config", "raw-0", "--set", "retention.ms="+want)
		if got := describeOne(t, env, "raw-0").Configs["retention.ms"]; got != want {
			stale = append(stale, fmt.Sprintf("alter-config retention.ms=%s then describe: %q", want, got))
		}
	}
	if len(stale) > 0 {
		t.Errorf("%d of %d reads after a write showed the old state:\n%s", len(stale), 2*rounds, strings.Join(stale, "\n"))
	}
}
