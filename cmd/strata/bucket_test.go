package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tier/archive"
)

// waitUploaded polls `tier status` until the bucket holds every record of
// every partition of topic (no upload lag).
func waitUploaded(t *testing.T, env []string, topic string, flags ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, stdout, _ := runCLI(t, env, append([]string{"tier", "status", topic, "--json"}, flags...)...)
		var rows []partitionStatus
		done := code == 0 && json.Unmarshal([]byte(stdout), &rows) == nil && len(rows) > 0
		for _, r := range rows {
			done = done && r.UploadLag != nil && *r.UploadLag == 0 && r.RemoteEnd != nil && *r.RemoteEnd > 0
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not wholly uploaded within 30s:\n%s", topic, stdout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// consumeCommitted reads every partition of topic from the broker,
// read_committed, and returns the records of each in offset order.
func consumeCommitted(t *testing.T, bootstrap, topic string, partitions int32) map[int32][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := newClient(t, bootstrap, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	out := map[int32][]*kgo.Record{}
	// The last record of each partition tells when it is all read: the
	// producer wrote "end" last everywhere.
	ended := map[int32]bool{}
	for len(ended) < int(partitions) {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume %s: %v", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], r)
			if string(r.Value) == "end" {
				ended[r.Partition] = true
			}
		})
	}
	return out
}

// TestBucketOffline is the offline reader's promise: with the broker
// stopped, `strata bucket cat` of its bucket prints exactly what a
// read_committed consumer got from the broker, in the same order (and,
// where kcat is installed, byte for byte what kcat prints with the same
// format); `--format json` parses to the same records; `ls` shows every
// partition's offsets; an export that stopped partway (and then crashed
// mid-line) resumes to exactly what a fresh full export writes.
func TestBucketOffline(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker and waits for uploads")
	}
	dataDir := t.TempDir()
	n := startNode(t, nil, "dev", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http-listen", "off",
		"--tier-upload-interval", "100ms", "--tier-idle-upload", "300ms")
	env := []string{"STRATA_BOOTSTRAP=" + n.bootstrap}
	const topic, parts = "ledger", 2
	mustCreate(t, n.bootstrap, topic, parts, smallSegments)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	produce := func(cl *kgo.Client, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			r := &kgo.Record{Partition: int32(i % parts), Value: fmt.Appendf(nil, "record %d", i), Key: fmt.Appendf(nil, "k%d", i%7)}
			if i%5 == 0 {
				r.Headers = []kgo.RecordHeader{{Key: "n", Value: []byte(strconv.Itoa(i))}}
			}
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Errorf("produce: %v", err)
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	plain := newClient(t, n.bootstrap, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce(plain, 0, 200)
	waitUploaded(t, env, topic, "--data-dir", dataDir)

	// An export now stops where the bucket ends: the first half of an
	// export that goes on later.
	resumed := t.TempDir()
	cliOK(t, nil, "bucket", "export", topic, "--to", resumed, "--data-dir", dataDir)

	// A committed and an aborted transaction, then more plain records.
	txn := newClient(t, n.bootstrap, kgo.DefaultProduceTopic(topic), kgo.TransactionalID("bucket-test"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	for _, commit := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort} {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(txn, 1000, 1040)
		if err := txn.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	produce(plain, 200, 300)
	for p := range int32(parts) {
		if err := plain.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte("end")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	waitUploaded(t, env, topic, "--data-dir", dataDir)

	got := consumeCommitted(t, n.bootstrap, topic, parts)
	var want bytes.Buffer
	total := 0
	for p := range int32(parts) {
		for _, r := range got[p] {
			fmt.Fprintf(&want, "%d %d %s\n", r.Partition, r.Offset, r.Value)
		}
		total += len(got[p])
	}
	if total != 300+40+parts { // the aborted 40 are not there
		t.Fatalf("the broker gave %d records read_committed, want %d", total, 300+40+parts)
	}
	// Every directive, escapes too.
	const richFormat = `%t [%p] %o %T key %K:%k value %S:%s headers %h%%\t|\n`
	var kcatOut, kcatRich string
	if _, err := exec.LookPath("kcat"); err == nil {
		for p := range parts {
			kcatOut += kcat(t, nil, "-b", n.bootstrap, "-t", topic, "-p", strconv.Itoa(p), "-C", "-e", "-q", "-o", "beginning", "-f", `%p %o %s\n`)
			kcatRich += kcat(t, nil, "-b", n.bootstrap, "-t", topic, "-p", strconv.Itoa(p), "-C", "-e", "-q", "-o", "beginning", "-f", richFormat)
		}
	} else {
		t.Log("kcat is not installed (apt-get install kcat): not comparing with kcat's output")
	}
	n.stop(t)

	// No broker from here on.
	out := cliOK(t, nil, "bucket", "ls", "--data-dir", dataDir)
	if !strings.HasPrefix(out, "bucket: dir ") || !strings.Contains(out, "LAST UPLOAD") {
		t.Fatalf("bucket ls:\n%s", out)
	}
	var rows []lsRow
	if err := json.Unmarshal([]byte(cliOK(t, nil, "bucket", "ls", topic, "--json", "--data-dir", dataDir)), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != parts {
		t.Fatalf("bucket ls --json: %+v", rows)
	}
	for p, r := range rows {
		last := got[int32(p)][len(got[int32(p)])-1].Offset // the "end" record, written last
		if r.Partition != int32(p) || r.LogStart != 0 || r.End != last+1 || r.Bytes <= 0 || r.LastUpload == "" || r.MaxTimestamp < r.FirstTimestamp {
			t.Errorf("bucket ls --json, partition %d: %+v; the broker's last offset is %d", p, r, last)
		}
		if !strings.Contains(out, fmt.Sprintf(" 0..%d ", last)) {
			t.Errorf("bucket ls does not show partition %d's offsets 0..%d:\n%s", p, last, out)
		}
	}

	cat := cliOK(t, nil, "bucket", "cat", topic, "--format", `%p %o %s\n`, "--data-dir", dataDir)
	if cat != want.String() {
		t.Fatalf("bucket cat differs from what the broker served read_committed:\n%s\nwant:\n%s", cat, want.String())
	}
	if kcatOut != "" && cat != kcatOut {
		t.Fatalf("bucket cat differs from kcat's output with the same format:\n%s\nkcat:\n%s", cat, kcatOut)
	}
	if kcatRich != "" {
		if rich := cliOK(t, nil, "bucket", "cat", topic, "--format", richFormat, "--data-dir", dataDir); rich != kcatRich {
			t.Fatalf("bucket cat --format %q differs from kcat's:\n%s\nkcat:\n%s", richFormat, rich, kcatRich)
		}
	}
	uncommitted := cliOK(t, nil, "bucket", "cat", topic, "--isolation", "read_uncommitted", "--format", `%o\n`, "--data-dir", dataDir)
	if n := strings.Count(uncommitted, "\n"); n != total+40 {
		t.Fatalf("read_uncommitted prints %d records, want %d (the aborted 40 too)", n, total+40)
	}
	one := cliOK(t, nil, "bucket", "cat", topic, "-p", "1", "--offset", "10", "--to-offset", "20", "--format", `%p:%o %k|%h\n`, "--data-dir", dataDir)
	if lines := strings.Split(strings.TrimSuffix(one, "\n"), "\n"); len(lines) != 10 || !strings.HasPrefix(lines[0], "1:10 k") {
		t.Fatalf("cat -p 1 --offset 10 --to-offset 20:\n%s", one)
	}

	js := cliOK(t, nil, "bucket", "cat", topic, "--format", "json", "--data-dir", dataDir)
	sc := bufio.NewScanner(strings.NewReader(js))
	i := 0
	for sc.Scan() {
		var r archive.JSONRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %d of --format json: %v\n%s", i, err, sc.Text())
		}
		p := int32(0)
		if i >= len(got[0]) {
			p = 1
		}
		w := got[p][i-int(p)*len(got[0])]
		if r.Topic != topic || r.Partition != w.Partition || r.Offset != w.Offset || r.Value == nil || *r.Value != string(w.Value) ||
			r.Timestamp != w.Timestamp.UnixMilli() || len(r.Headers) != len(w.Headers) {
			t.Fatalf("json line %d: %+v, broker gave %+v", i, r, w)
		}
		i++
	}
	if i != total {
		t.Fatalf("--format json printed %d lines, want %d", i, total)
	}

	// The partial export, crashed mid-line, then resumed, equals a fresh
	// full export.
	for p := range parts {
		f, err := os.OpenFile(filepath.Join(resumed, fmt.Sprintf("%s-%d.jsonl", topic, p)), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(`{"topic":"ledger","parti`)
		f.Close()
	}
	if out := cliOK(t, nil, "bucket", "export", topic, "--to", resumed, "--data-dir", dataDir); !strings.Contains(out, "resumed at offset") {
		t.Fatalf("second export did not resume:\n%s", out)
	}
	full := t.TempDir()
	cliOK(t, nil, "bucket", "export", topic, "--to", full, "--data-dir", dataDir)
	for p := range parts {
		name := fmt.Sprintf("%s-%d.jsonl", topic, p)
		a, _ := os.ReadFile(filepath.Join(resumed, name))
		b, _ := os.ReadFile(filepath.Join(full, name))
		if !bytes.Equal(a, b) || bytes.Count(b, []byte("\n")) != len(got[int32(p)]) {
			t.Fatalf("%s: resumed export (%d lines) differs from a full one (%d lines; the broker gave %d)",
				name, bytes.Count(a, []byte("\n")), bytes.Count(b, []byte("\n")), len(got[int32(p)]))
		}
	}

	// Bad input: one line each, naming the problem.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"bucket", "cat", "nosuch", "--data-dir", dataDir}, 1, "no such topic in the bucket: nosuch"},
		{[]string{"bucket", "ls", "--bucket-dir", filepath.Join(dataDir, "missing")}, 1, "no bucket directory"},
		{[]string{"bucket", "cat", topic, "--from-time", "yesterday", "--data-dir", dataDir}, 2, "--from-time"},
		{[]string{"bucket", "cat", topic, "--format", "%q", "--data-dir", dataDir}, 2, "unknown directive %q"},
		{[]string{"bucket", "cat", topic, "-p", "9", "--data-dir", dataDir}, 1, "no partition 9"},
		{[]string{"bucket", "export", topic, "--data-dir", dataDir}, 2, "--to DIR is required"},
	} {
		code, _, stderr := runCLI(t, nil, c.args...)
		if code != c.code {
			t.Errorf("strata %s: exit %d, want %d (%s)", strings.Join(c.args, " "), code, c.code, stderr)
		}
		assertOneLineError(t, stderr, c.want)
	}
}
