package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestReadReplicaProcess: `strata topic create T --read-replica-of
// file:///...` on a second node serves the first node's topic from its
// bucket, record for record, and refuses produce; a source that does not
// hold the topic is one line on stderr and exit 1.
func TestReadReplicaProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two nodes and waits for uploads")
	}
	srcDir := t.TempDir()
	src := startNode(t, nil, "dev", "--data-dir", srcDir, "--listen", "127.0.0.1:0", "--http-listen", "off",
		"--tier-upload-interval", "100ms", "--tier-idle-upload", "200ms")
	rep := startNode(t, nil, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off",
		"--read-replica-poll-interval", "200ms")
	mustCreate(t, src.bootstrap, "orders", 2, map[string]*string{"segment.bytes": kmsg.StringPtr("4096")})
	produceN(t, src.bootstrap, "orders", 0, 80)
	srcEnv := []string{"STRATA_BOOTSTRAP=" + src.bootstrap}
	repEnv := []string{"STRATA_BOOTSTRAP=" + rep.bootstrap}
	uri := "file://" + filepath.Join(srcDir, "bucket")

	// Everything the source holds is in its bucket (idle segments roll
	// and upload within ~300 ms).
	want := readAll(t, src.bootstrap, "orders")
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows := waitTiered(t, srcEnv, "orders", "--data-dir", srcDir)
		done := true
		for _, r := range rows {
			done = done && *r.RemoteEnd == int64(len(want[r.Partition]))
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source did not upload everything: %+v", rows)
		}
		time.Sleep(100 * time.Millisecond)
	}

	out := cliOK(t, repEnv, "topic", "create", "orders", "--read-replica-of", uri)
	if !strings.Contains(out, "created topic orders (2 partitions") {
		t.Fatalf("topic create --read-replica-of: %q", out)
	}
	got := readAll(t, rep.bootstrap, "orders")
	for p := int32(0); p < 2; p++ {
		if len(got[p]) != len(want[p]) || len(want[p]) == 0 {
			t.Fatalf("partition %d: %d records on the replica, %d on the source", p, len(got[p]), len(want[p]))
		}
		for i, w := range want[p] {
			g := got[p][i]
			if g.Offset != w.Offset || !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) || !g.Timestamp.Equal(w.Timestamp) {
				t.Fatalf("partition %d record %d: replica offset %d, source %d, or bytes differ", p, i, g.Offset, w.Offset)
			}
		}
	}

	cl := newClient(t, rep.bootstrap, kgo.DefaultProduceTopic("orders"), kgo.RecordRetries(1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("no")}).FirstErr(); !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("produce to the read replica: %v, want POLICY_VIOLATION", err)
	}

	code, _, stderr := runCLI(t, repEnv, "topic", "create", "absent", "--read-replica-of", uri)
	if code != 1 {
		t.Fatalf("read replica of a topic the bucket does not hold: exit %d", code)
	}
	assertOneLineError(t, stderr, "INVALID_CONFIG", `the bucket holds no topic "absent"`)
}
