package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestGroupVerbs: kcat -G joins a group, consumes and commits (librdkafka's
// balanced consumer against our coordinator); `strata group describe`
// shows a live franz-go member with its assignment and lag; list, the
// reset-offsets dry run and --execute, and delete work on the result.
func TestGroupVerbs(t *testing.T) {
	n := startNode(t, nil, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off")
	b := n.bootstrap
	cli := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := runCLI(t, nil, append(args, "--bootstrap", b)...)
		if code != 0 {
			t.Fatalf("strata %s: exit %d: %s", strings.Join(args, " "), code, stderr)
		}
		return stdout
	}
	cli("topic", "create", "events", "--partitions", "3")
	prod := newClient(t, b, kgo.DefaultProduceTopic("events"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for i := range 300 {
		recs = append(recs, &kgo.Record{Value: fmt.Appendf(nil, "event %d", i)})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	if _, err := exec.LookPath("kcat"); err == nil {
		out := kcat(t, nil, "-b", b, "-G", "kcat-group", "events", "-e", "-q", "-X", "auto.offset.reset=earliest")
		if got := strings.Count(out, "\n"); got != 300 {
			t.Fatalf("kcat -G consumed %d records, want 300", got)
		}
		desc := cli("group", "describe", "kcat-group")
		for _, want := range []string{"group kcat-group: Empty", "events  0", "total lag 0"} {
			if !strings.Contains(desc, want) {
				t.Fatalf("describe after kcat -G lacks %q:\n%s", want, desc)
			}
		}
		for p := range 3 {
			if !strings.Contains(desc, fmt.Sprintf("events  %d          100        100  0", p)) {
				t.Fatalf("kcat did not commit 100 on partition %d:\n%s", p, desc)
			}
		}
	} else {
		t.Log("kcat is not installed (apt-get install kcat); skipping the kcat -G part")
	}

	// A live member that has consumed half: describe shows it, its
	// partitions and the lag.
	cons := newClient(t, b, kgo.ConsumerGroup("live"), kgo.ConsumeTopics("events"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.ClientID("live-client"), kgo.DisableAutoCommit())
	got := 0
	for got < 150 {
		fs := cons.PollRecords(ctx, 150-got)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		if err := cons.CommitRecords(ctx, fs.Records()...); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
	}
	desc := cli("group", "describe", "live")
	for _, want := range []string{"group live: Stable", "consumer/", "1 member", "total lag 150", "live-client", "/127.0.0.1"} {
		if !strings.Contains(desc, want) {
			t.Fatalf("describe lacks %q:\n%s", want, desc)
		}
	}
	if list := cli("group", "list"); !strings.Contains(list, "live") || !strings.Contains(list, "Stable") {
		t.Fatalf("group list:\n%s", list)
	}
	if code, _, stderr := runCLI(t, nil, "group", "delete", "live", "--bootstrap", b); code == 0 || !strings.Contains(stderr, "NON_EMPTY_GROUP") {
		t.Fatalf("deleting a group with a member: exit %d, %s", code, stderr)
	}
	cons.Close()

	dry := cli("group", "reset-offsets", "live", "--topic", "events", "--to-earliest")
	if !strings.Contains(dry, "dry run") {
		t.Fatalf("reset without --execute:\n%s", dry)
	}
	if d := cli("group", "describe", "live"); !strings.Contains(d, "total lag 150") {
		t.Fatalf("the dry run changed offsets:\n%s", d)
	}
	cli("group", "reset-offsets", "live", "--topic", "events", "--to-offset", "10", "--execute")
	if d := cli("group", "describe", "live"); !strings.Contains(d, "total lag 270") {
		t.Fatalf("after reset to offset 10:\n%s", d)
	}
	cli("group", "reset-offsets", "live", "--topic", "events", "--to-latest", "--execute")
	if d := cli("group", "describe", "live"); !strings.Contains(d, "total lag 0") {
		t.Fatalf("after reset to latest:\n%s", d)
	}
	if out := cli("group", "delete", "live"); !strings.Contains(out, "deleted group live") {
		t.Fatalf("delete: %s", out)
	}
	if code, _, stderr := runCLI(t, nil, "group", "describe", "live", "--bootstrap", b); code == 0 || !strings.Contains(stderr, "GROUP_ID_NOT_FOUND") {
		t.Fatalf("describe of a deleted group: exit %d, %s", code, stderr)
	}
	n.stop(t)
}
