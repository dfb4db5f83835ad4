package main

import (
	"context"
	"encoding/json"
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
	for _, want := range []string{"group live: Stable", "consumer/", "1 member", "live-client", "/127.0.0.1"} {
		if !strings.Contains(desc, want) {
			t.Fatalf("describe lacks %q:\n%s", want, desc)
		}
	}
	// 150 records committed over the three partitions; the lag is what
	// is left after each commit, and a partition without one has none.
	var live []groupDescription
	if err := json.Unmarshal([]byte(cli("group", "describe", "live", "--json")), &live); err != nil || len(live) != 1 || len(live[0].Partitions) != 3 {
		t.Fatalf("describe --json: %v %+v", err, live)
	}
	var sumCommitted, sumLag int64
	for _, p := range live[0].Partitions {
		switch {
		case p.Committed < 0 && p.Lag != nil:
			t.Errorf("partition %d: lag %d with nothing committed", p.Partition, *p.Lag)
		case p.Committed >= 0 && (p.Lag == nil || *p.Lag != p.End-p.Committed):
			t.Errorf("partition %d: lag %v, committed %d, end %d", p.Partition, p.Lag, p.Committed, p.End)
		case p.Committed >= 0:
			sumCommitted += p.Committed
			sumLag += *p.Lag
		}
	}
	if sumCommitted != 150 || live[0].TotalLag != sumLag || !strings.Contains(desc, fmt.Sprintf("total lag %d", sumLag)) {
		t.Errorf("committed %d (want 150), total lag %d (partitions add up to %d):\n%s", sumCommitted, live[0].TotalLag, sumLag, desc)
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
	if d := cli("group", "describe", "live"); !strings.Contains(d, fmt.Sprintf("total lag %d", sumLag)) {
		t.Fatalf("the dry run changed offsets:\n%s\nbefore:\n%s", d, desc)
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

// TestGroupOffsetVerbs: list filters on known states only; describe gives
// no lag to a partition nothing was committed on; reset-offsets moves to
// each of Kafka's choices over a topic, some of its partitions or every
// partition the group committed, and exports its plan as CSV; delete-offsets
// forgets a partition's commit.
func TestGroupOffsetVerbs(t *testing.T) {
	n := startNode(t, nil, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off")
	env := []string{"STRATA_BOOTSTRAP=" + n.bootstrap}
	mustCreate(t, n.bootstrap, "events", 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Partition 0: offsets 0-49 two days old, 50-99 an hour old.
	// Partition 1: offsets 0-99 an hour old.
	prod := newClient(t, n.bootstrap, kgo.DefaultProduceTopic("events"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	now := time.Now()
	var recs []*kgo.Record
	for i := range 200 {
		r := &kgo.Record{Partition: int32(i / 100), Value: fmt.Appendf(nil, "event %d", i), Timestamp: now.Add(-time.Hour)}
		if i < 50 {
			r.Timestamp = now.Add(-48 * time.Hour)
		}
		recs = append(recs, r)
	}
	for _, r := range recs { // one at a time: each batch keeps its own timestamps
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("list states", func(t *testing.T) {
		code, stdout, stderr := runCLI(t, env, "group", "list", "--state", "Bogus")
		if code != 2 || stdout != "" {
			t.Errorf("--state Bogus: exit %d, stdout %q", code, stdout)
		}
		assertOneLineError(t, stderr, `--state "Bogus"`, "Stable")
	})

	t.Run("no commit, no lag", func(t *testing.T) {
		cons := newClient(t, n.bootstrap, kgo.ConsumerGroup("half"), kgo.ConsumeTopics("events"),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
		var p0 []*kgo.Record
		for len(p0) == 0 {
			fs := cons.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatal(err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if r.Partition == 0 && r.Offset < 40 {
					p0 = append(p0, r)
				}
			})
		}
		if err := cons.CommitRecords(ctx, p0...); err != nil {
			t.Fatal(err)
		}
		committed := p0[len(p0)-1].Offset + 1
		var ds []groupDescription
		if err := json.Unmarshal([]byte(cliOK(t, env, "group", "describe", "half", "--json")), &ds); err != nil || len(ds) != 1 {
			t.Fatalf("describe --json: %v %+v", err, ds)
		}
		d := ds[0]
		if len(d.Partitions) != 2 || d.Partitions[1].Committed != -1 || d.Partitions[1].Lag != nil {
			t.Fatalf("the uncommitted partition has a lag: %+v", d.Partitions)
		}
		if d.Partitions[0].Lag == nil || *d.Partitions[0].Lag != 100-committed || d.TotalLag != 100-committed {
			t.Errorf("lag of partition 0 %v, total %d; want %d", d.Partitions[0].Lag, d.TotalLag, 100-committed)
		}
		if out := cliOK(t, env, "group", "list", "--state", "stable"); !strings.Contains(out, "half") {
			t.Errorf("group list --state stable:\n%s", out)
		}
		cons.Close()
	})

	committed := func(group string) map[int32]int64 {
		t.Helper()
		var ds []groupDescription
		if err := json.Unmarshal([]byte(cliOK(t, env, "group", "describe", group, "--json")), &ds); err != nil || len(ds) != 1 {
			t.Fatalf("describe --json: %v %+v", err, ds)
		}
		out := map[int32]int64{}
		for _, p := range ds[0].Partitions {
			if p.Committed >= 0 {
				out[p.Partition] = p.Committed
			}
		}
		return out
	}
	reset := func(args ...string) string {
		t.Helper()
		return cliOK(t, env, append([]string{"group", "reset-offsets", "replay"}, args...)...)
	}
	same := func(got, want map[int32]int64) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("committed %v, want %v", got, want)
		}
	}

	t.Run("reset-offsets", func(t *testing.T) {
		reset("--topic", "events:1", "--to-offset", "30", "--execute")
		same(committed("replay"), map[int32]int64{1: 30})
		reset("--all-topics", "--shift-by", "-10", "--execute") // events:1, the only partition with a commit
		same(committed("replay"), map[int32]int64{1: 20})
		reset("--topic", "events:1", "--shift-by", "-1000", "--execute")
		same(committed("replay"), map[int32]int64{1: 0})
		reset("--topic", "events:0", "--to-offset", "0", "--execute")
		same(committed("replay"), map[int32]int64{0: 0, 1: 0})
		reset("--topic", "events:0", "--by-duration", "PT2H", "--execute")
		same(committed("replay"), map[int32]int64{0: 50, 1: 0})
		reset("--topic", "events", "--to-latest", "--execute")
		same(committed("replay"), map[int32]int64{0: 100, 1: 100})
		reset("--topic", "events", "--to-datetime", now.Add(-24*time.Hour).UTC().Format(time.RFC3339), "--execute")
		same(committed("replay"), map[int32]int64{0: 50, 1: 0})
		reset("--topic", "events:1", "--to-offset", "1000", "--execute") // clamped to the end
		same(committed("replay"), map[int32]int64{0: 50, 1: 100})

		if csv := reset("--all-topics", "--by-duration", "72h", "--export"); csv != "events,0,0\nevents,1,0\n" {
			t.Errorf("--export printed %q", csv)
		}
		same(committed("replay"), map[int32]int64{0: 50, 1: 100}) // a dry run

		code, _, stderr := runCLI(t, env, "group", "reset-offsets", "fresh", "--topic", "events", "--shift-by", "1")
		if code != 1 {
			t.Errorf("--shift-by with nothing committed: exit %d", code)
		}
		assertOneLineError(t, stderr, "no committed offset to shift on events:0, events:1")
		code, _, stderr = runCLI(t, env, "group", "reset-offsets", "replay", "--topic", "events:7", "--to-earliest")
		if code != 1 {
			t.Errorf("a partition that does not exist: exit %d", code)
		}
		assertOneLineError(t, stderr, "topic events has no partition 7")
		for _, args := range [][]string{
			{"--topic", "events"},
			{"--to-earliest"},
			{"--topic", "events", "--all-topics", "--to-earliest"},
			{"--topic", "events:x", "--to-earliest"},
			{"--topic", "events", "--by-duration", "yesterday"},
		} {
			if code, _, _ := runCLI(t, env, append([]string{"group", "reset-offsets", "replay"}, args...)...); code != 2 {
				t.Errorf("reset-offsets %s: exit %d, want 2", strings.Join(args, " "), code)
			}
		}
	})

	t.Run("delete-offsets", func(t *testing.T) {
		if out := cliOK(t, env, "group", "delete-offsets", "replay", "--topic", "events:1"); !strings.Contains(out, "deleted 1 committed offset of group replay") {
			t.Errorf("delete-offsets printed %q", out)
		}
		same(committed("replay"), map[int32]int64{0: 50})
	})
	n.stop(t)
}
