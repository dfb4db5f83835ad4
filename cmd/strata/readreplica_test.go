package main

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/localstack"
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

// TestReadReplicaS3Process: a source node tiering to an S3 bucket under a
// prefix, and a replica node whose own tier is a directory, started with
// only the S3 credentials: `--read-replica-of
// 's3://bucket/prefix?endpoint=...&path_style=true'` serves the source's
// records, offset for offset, and new ones as they upload, the endpoint
// from the URI and the keys from the node's settings (a node without keys
// refuses the URI).
func TestReadReplicaS3Process(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two nodes and waits for uploads")
	}
	s3 := localstack.TestS3(t)
	prefix := strings.TrimPrefix(s3.Prefix+"/source", "/")
	keys := []string{"STRATA_S3_ACCESS_KEY=" + testAccessKey, "STRATA_S3_SECRET_KEY=" + testSecret}
	if s3.SecretKey != "strata-dev-secret" { // an external S3 checks the keys
		keys = []string{"STRATA_S3_ACCESS_KEY=" + s3.AccessKey, "STRATA_S3_SECRET_KEY=" + s3.SecretKey}
	}
	s3Flags := []string{"--s3-endpoint", s3.Endpoint, "--s3-bucket", s3.Bucket, "--s3-prefix", prefix, "--s3-region", s3.Region}
	src := startNode(t, keys, append([]string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off",
		"--tier-upload-interval", "100ms", "--tier-idle-upload", "200ms"}, s3Flags...)...)
	rep := startNode(t, keys, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off",
		"--read-replica-poll-interval", "200ms", "--read-replica-allowed-endpoints", s3.Endpoint)
	mustCreate(t, src.bootstrap, "s3orders", 2, map[string]*string{"segment.bytes": kmsg.StringPtr("4096")})
	produceN(t, src.bootstrap, "s3orders", 0, 60)

	want := readAll(t, src.bootstrap, "s3orders")
	srcEnv := append([]string{"STRATA_BOOTSTRAP=" + src.bootstrap}, keys...)
	deadline := time.Now().Add(20 * time.Second)
	for {
		rows := waitTiered(t, srcEnv, "s3orders", s3Flags...)
		done := len(rows) == 2
		for _, r := range rows {
			done = done && r.RemoteEnd != nil && *r.RemoteEnd == int64(len(want[r.Partition]))
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source did not upload everything: %+v", rows)
		}
		time.Sleep(100 * time.Millisecond)
	}

	uri := "s3://" + s3.Bucket + "/" + prefix + "?endpoint=" + url.QueryEscape(s3.Endpoint) + "&path_style=true"
	out := cliOK(t, []string{"STRATA_BOOTSTRAP=" + rep.bootstrap}, "topic", "create", "s3orders", "--read-replica-of", uri)
	if !strings.Contains(out, "created topic s3orders (2 partitions") {
		t.Fatalf("topic create --read-replica-of: %q", out)
	}
	got := readAll(t, rep.bootstrap, "s3orders")
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
	// The keys are the node's: a node with none anywhere refuses the same
	// URI, in one line that says how to give them.
	bare := startNode(t, []string{"HOME=" + t.TempDir(), "AWS_EC2_METADATA_DISABLED=true"}, "dev", "--data-dir", t.TempDir(),
		"--listen", "127.0.0.1:0", "--http-listen", "off", "--read-replica-allowed-endpoints", s3.Endpoint)
	code, _, stderr := runCLI(t, []string{"STRATA_BOOTSTRAP=" + bare.bootstrap}, "topic", "create", "s3orders", "--read-replica-of", uri)
	if code != 1 {
		t.Fatalf("read replica of an S3 source on a node without S3 keys: exit %d", code)
	}
	assertOneLineError(t, stderr, "INVALID_CONFIG", "STRATA_S3_ACCESS_KEY")
	// An endpoint that is neither the node's own nor allowed is refused
	// before the node sends it anything signed with its keys.
	strict := startNode(t, keys, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off")
	code, _, stderr = runCLI(t, []string{"STRATA_BOOTSTRAP=" + strict.bootstrap}, "topic", "create", "s3orders", "--read-replica-of", uri)
	if code != 1 {
		t.Fatalf("read replica of an S3 source at an endpoint not allowed: exit %d", code)
	}
	assertOneLineError(t, stderr, "INVALID_CONFIG", "read_replica.allowed_endpoints")

	// New records follow through the bucket.
	produceN(t, src.bootstrap, "s3orders", 60, 20)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := kadm.NewClient(newClient(t, rep.bootstrap))
	for {
		ends, err := adm.ListEndOffsets(ctx, "s3orders")
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
		if total == 80 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the replica shows %d of 80 records", total)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
