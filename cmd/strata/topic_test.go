package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// TestTopicVerbs drives the topic verbs of issue 10 against one dev node:
// errors that state their cause once, the internal topic that cannot be
// deleted, internal topics on request, configs altered and partitions
// added as a later describe shows, and topic ids printed one way and
// accepted in both.
func TestTopicVerbs(t *testing.T) {
	n := startNode(t, nil, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off")
	env := []string{"STRATA_BOOTSTRAP=" + n.bootstrap}
	fails := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := runCLI(t, env, args...)
		if code != 1 {
			t.Fatalf("strata %s: exit %d, want 1\n%s%s", strings.Join(args, " "), code, stdout, stderr)
		}
		return stderr
	}
	cliOK(t, env, "topic", "create", "orders", "--partitions", "2")

	t.Run("errors state their code once", func(t *testing.T) {
		for _, args := range [][]string{
			{"topic", "create", "orders"},
			{"topic", "create", "bad", "--config", "retention.ms=soon"},
			{"topic", "delete", "missing"},
			{"topic", "describe", "missing"},
			{"topic", "alter-config", "orders", "--set", "retention.ms=soon"},
			{"topic", "add-partitions", "orders", "--partitions", "1"},
		} {
			stderr := fails(args...)
			assertOneLineError(t, stderr)
			for _, code := range []string{"TOPIC_ALREADY_EXISTS", "INVALID_CONFIG", "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_PARTITIONS"} {
				if c := strings.Count(stderr, code); c > 1 {
					t.Errorf("strata %s: %q says %s %d times", strings.Join(args, " "), stderr, code, c)
				}
			}
		}
		assertOneLineError(t, fails("topic", "create", "orders"), `topic create orders: TOPIC_ALREADY_EXISTS: topic "orders" already exists`)
	})

	// A committed offset makes the coordinator create __consumer_offsets.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	commit := kadm.Offsets{}
	commit.Add(kadm.Offset{Topic: "orders", Partition: 0, At: 0, LeaderEpoch: -1})
	if rs, err := kadm.NewClient(newClient(t, n.bootstrap)).CommitOffsets(ctx, "g", commit); err != nil || rs.Error() != nil {
		t.Fatalf("commit: %v %v", err, rs.Error())
	}

	t.Run("internal topics", func(t *testing.T) {
		if out := cliOK(t, env, "topic", "list"); strings.Contains(out, "__consumer_offsets") {
			t.Errorf("topic list shows the internal topic:\n%s", out)
		}
		if out := cliOK(t, env, "topic", "list", "--internal"); !strings.Contains(out, "__consumer_offsets") || !strings.Contains(out, "orders") {
			t.Errorf("topic list --internal:\n%s", out)
		}
		stderr := fails("topic", "delete", "__consumer_offsets")
		if stderr != "strata: topic delete __consumer_offsets: internal topic, cannot be deleted\n" {
			t.Errorf("deleting __consumer_offsets: %q", stderr)
		}
		if out := cliOK(t, env, "topic", "list", "--internal"); !strings.Contains(out, "__consumer_offsets") {
			t.Errorf("__consumer_offsets is gone:\n%s", out)
		}
	})

	t.Run("alter-config", func(t *testing.T) {
		out := cliOK(t, env, "topic", "alter-config", "orders", "--set", "retention.ms=3600000", "--set", "segment.ms=600000")
		if !strings.Contains(out, "altered topic orders") {
			t.Errorf("alter-config printed %q", out)
		}
		if d := describeOne(t, env, "orders"); d.Configs["retention.ms"] != "3600000" || d.Configs["segment.ms"] != "600000" {
			t.Errorf("configs after --set: %v", d.Configs)
		}
		cliOK(t, env, "topic", "alter-config", "orders", "--delete", "retention.ms")
		if d := describeOne(t, env, "orders"); d.Configs["retention.ms"] != "" || d.Configs["segment.ms"] != "600000" {
			t.Errorf("configs after --delete retention.ms: %v", d.Configs)
		}
		code, _, stderr := runCLI(t, env, "topic", "alter-config", "orders")
		if code != 2 {
			t.Errorf("alter-config with nothing to change: exit %d", code)
		}
		assertOneLineError(t, stderr, "--set", "--delete")
	})

	t.Run("add-partitions", func(t *testing.T) {
		if out := cliOK(t, env, "topic", "add-partitions", "orders", "--partitions", "5"); !strings.Contains(out, "orders now has 5 partitions") {
			t.Errorf("add-partitions printed %q", out)
		}
		if d := describeOne(t, env, "orders"); len(d.Partitions) != 5 {
			t.Errorf("orders has %d partitions after add-partitions", len(d.Partitions))
		}
		assertOneLineError(t, fails("topic", "add-partitions", "orders", "--partitions", "3"), "topic add-partitions orders: INVALID_PARTITIONS")
	})

	t.Run("topic ids", func(t *testing.T) {
		d := describeOne(t, env, "orders")
		id, err := parseTopicID(d.ID)
		if err != nil || topicIDHex(id) != d.IDHex || len(d.IDHex) != 32 {
			t.Fatalf("describe --json: id %q, id_hex %q (%v)", d.ID, d.IDHex, err)
		}
		var listed []topicSummary
		if err := json.Unmarshal([]byte(cliOK(t, env, "topic", "list", "--json")), &listed); err != nil {
			t.Fatal(err)
		}
		if len(listed) != 1 || listed[0].ID != d.ID || listed[0].IDHex != d.IDHex {
			t.Errorf("list --json %+v, describe id %s/%s", listed, d.ID, d.IDHex)
		}
		if out := cliOK(t, env, "topic", "list"); !strings.Contains(out, d.ID) || strings.Contains(out, d.IDHex) {
			t.Errorf("topic list does not print the base64 id %s:\n%s", d.ID, out)
		}
		// Either spelling of the id names the topic.
		for _, id := range []string{d.ID, d.IDHex} {
			if byID := describeOne(t, env, id); byID.Name != "orders" || byID.ID != d.ID || len(byID.Partitions) != len(d.Partitions) {
				t.Errorf("topic describe %s: %+v", id, byID)
			}
		}
		assertOneLineError(t, fails("topic", "describe", "AAAAAAAAAAAAAAAAAAAAAA"), "UNKNOWN_TOPIC_OR_PARTITION")
	})
	n.stop(t)
}

func describeOne(t *testing.T, env []string, topic string) topicDescription {
	t.Helper()
	var ds []topicDescription
	if err := json.Unmarshal([]byte(cliOK(t, env, "topic", "describe", topic, "--json")), &ds); err != nil || len(ds) != 1 {
		t.Fatalf("topic describe %s --json: %v %+v", topic, err, ds)
	}
	return ds[0]
}
