package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/localstack"
)

// Tiered storage as an operator drives it: flags and keys in, segments in
// the bucket, and the tier verbs agreeing with what the broker says.

// testSecret stands in for a real secret key: it must never be printed.
const (
	testAccessKey = "AKIASTRATATESTKEY01"
	testSecret    = "sEcReT-9f8e7d6c5b4a-never-print-me"
)

var smallSegments = map[string]*string{
	"segment.bytes":         kmsg.StringPtr("1024"),
	"local.retention.bytes": kmsg.StringPtr("1"), // local copies go once uploaded
}

// waitTiered polls `tier status --json` until every partition of topic has
// segments in the bucket, and returns the last status.
func waitTiered(t *testing.T, env []string, topic string, flags ...string) []partitionStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, stdout, stderr := runCLI(t, env, append([]string{"tier", "status", topic, "--json"}, flags...)...)
		var rows []partitionStatus
		if code == 0 {
			if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
				t.Fatalf("tier status --json: %v\n%s", err, stdout)
			}
			done := len(rows) > 0
			for _, r := range rows {
				done = done && r.Error == "" && r.RemoteEnd != nil && *r.RemoteEnd > 0 && r.Segments > 0
			}
			if done {
				return rows
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no segments of %s in the bucket within 30s: exit %d\n%s%s", topic, code, stdout, stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func cliOK(t *testing.T, env []string, args ...string) string {
	t.Helper()
	code, stdout, stderr := runCLI(t, env, args...)
	if code != 0 {
		t.Fatalf("strata %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout
}

// TestTierDevDefaultStore runs `strata dev` with no tier settings: it tiers
// into <data-dir>/bucket, the verbs show and check what is there, history
// is read back from it, and a flipped byte in an object is found.
func TestTierDevDefaultStore(t *testing.T) {
	dataDir := t.TempDir()
	n := startNode(t, nil, "dev", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http-listen", "off", "--tier-upload-interval", "100ms")
	env := []string{"STRATA_BOOTSTRAP=" + n.bootstrap}
	mustCreate(t, n.bootstrap, "events", 2, smallSegments)
	produceN(t, n.bootstrap, "events", 0, 60)

	rows := waitTiered(t, env, "events", "--data-dir", dataDir)
	if len(rows) != 2 {
		t.Fatalf("status rows: %+v", rows)
	}
	for _, r := range rows {
		// No gap between the bucket and the local log (local retention
		// may still keep uploaded segments for a moment), and the lag is
		// what is not in the bucket yet.
		if *r.RemoteStart != 0 || r.LocalStart == nil || r.UploadLag == nil || *r.LocalStart > *r.RemoteEnd || *r.UploadLag != *r.LocalEnd-*r.RemoteEnd || r.Bytes <= 0 || r.LocalOnly {
			t.Errorf("status of partition %d does not add up: %+v (remote %d-%d)", r.Partition, r, *r.RemoteStart, *r.RemoteEnd)
		}
	}
	if _, err := os.Stat(filepath.Join(dataDir, "bucket")); err != nil {
		t.Fatalf("default bucket directory: %v", err)
	}
	table := cliOK(t, env, "tier", "status", "--data-dir", dataDir)
	if !strings.Contains(table, "REMOTE-END") || !strings.Contains(table, "events") {
		t.Errorf("status table:\n%s", table)
	}

	var ls listedManifest
	if err := json.Unmarshal([]byte(cliOK(t, env, "tier", "ls", "events", "0", "--json", "--data-dir", dataDir)), &ls); err != nil {
		t.Fatal(err)
	}
	if len(ls.Segments) == 0 || ls.Segments[0].BaseOffset != 0 || ls.EndOffset != ls.Segments[len(ls.Segments)-1].LastOffset+1 {
		t.Fatalf("tier ls --json: %+v", ls)
	}
	// Plain records, no transaction markers: a segment holds one record
	// per offset, and the listing says how many (issue 10, broken 4).
	for _, s := range ls.Segments {
		if s.Records != s.LastOffset-s.BaseOffset+1 {
			t.Errorf("segment %d-%d lists %d records", s.BaseOffset, s.LastOffset, s.Records)
		}
	}
	out := cliOK(t, env, "tier", "ls", "events", "0", "--data-dir", dataDir)
	if !strings.Contains(out, "remote log start 0") || !strings.Contains(out, ls.Segments[0].Key) {
		t.Errorf("tier ls:\n%s", out)
	}

	// A partition the topic does not have is not "nothing uploaded yet".
	code, stdout, stderr := runCLI(t, env, "tier", "ls", "events", "7", "--data-dir", dataDir)
	if code != 1 {
		t.Errorf("tier ls of a partition that does not exist: exit %d\n%s", code, stdout)
	}
	assertOneLineError(t, stderr, "tier ls events 7: topic events has no partition 7 (it has 2 partitions)")

	// The consumer reads the uploaded history back from the bucket.
	got := readAll(t, n.bootstrap, "events")
	if total := len(got[0]) + len(got[1]); total != 60 {
		t.Errorf("read back %d records, want 60", total)
	}

	if out := cliOK(t, nil, "tier", "verify", "--data-dir", dataDir); !strings.Contains(out, "all good") {
		t.Errorf("tier verify:\n%s", out)
	}
	n.stop(t)

	// A bucket alone, no broker: the topic id comes from the bucket.
	noBroker := []string{"--bootstrap", "127.0.0.1:1", "--timeout", "2s", "--data-dir", dataDir}
	if out := cliOK(t, nil, append([]string{"tier", "ls", "events", "0"}, noBroker...)...); !strings.Contains(out, ls.Segments[0].Key) {
		t.Errorf("tier ls without a broker:\n%s", out)
	}
	for _, id := range []string{ls.TopicID, ls.TopicIDHex} { // Kafka's base64 and the keys' hex
		if out := cliOK(t, nil, append([]string{"tier", "ls", "events", "0", "--topic-id", id}, noBroker...)...); !strings.Contains(out, ls.Segments[0].Key) || !strings.Contains(out, "topic id "+ls.TopicID) {
			t.Errorf("tier ls --topic-id %s:\n%s", id, out)
		}
	}
	if !strings.Contains(ls.Segments[0].Key, ls.TopicIDHex) {
		t.Errorf("topic_id_hex %s is not the id in the keys (%s)", ls.TopicIDHex, ls.Segments[0].Key)
	}

	// tier status without a broker shows what the bucket holds, as tier
	// ls does, and nothing it cannot know.
	// Both partitions are listed again now the node is stopped: it may have
	// uploaded more after the listing above.
	var ls0, ls1 listedManifest
	for p, dst := range []*listedManifest{&ls0, &ls1} {
		if err := json.Unmarshal([]byte(cliOK(t, nil, append([]string{"tier", "ls", "events", strconv.Itoa(p), "--json"}, noBroker...)...)), dst); err != nil {
			t.Fatal(err)
		}
	}
	var alone []partitionStatus
	if err := json.Unmarshal([]byte(cliOK(t, nil, append([]string{"tier", "status", "--json"}, noBroker...)...)), &alone); err != nil {
		t.Fatal(err)
	}
	if len(alone) != 2 {
		t.Fatalf("tier status without a broker: %+v", alone)
	}
	for i, m := range []listedManifest{ls0, ls1} {
		r := alone[i]
		if r.Topic != "events" || r.Partition != int32(i) || r.TopicID != ls.TopicID || r.RemoteStart == nil || *r.RemoteStart != m.LogStartOffset ||
			r.RemoteEnd == nil || *r.RemoteEnd != m.EndOffset || r.Segments != len(m.Segments) || r.LocalEnd != nil || r.UploadLag != nil {
			t.Errorf("tier status without a broker, partition %d: %+v, tier ls says %+v", i, r, m)
		}
	}

	// Flip one byte of the log part of an uploaded object.
	path := filepath.Join(dataDir, "bucket", filepath.FromSlash(ls.Segments[0].Key))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[20] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(t, nil, "tier", "verify", "events", "--data-dir", dataDir)
	if code != 1 {
		t.Errorf("tier verify of a damaged object: exit %d", code)
	}
	if strings.Count(stdout, "FAIL ") != 1 || !strings.Contains(stdout, "FAIL "+ls.Segments[0].Key+": format: corrupt") || !strings.Contains(stdout, "1 FAILED") {
		t.Errorf("tier verify does not name the damaged object once:\n%s", stdout)
	}
	assertOneLineError(t, stderr, "tier verify: 1 failure")
}

// TestTierCompactedTopicsTier: tier status follows the broker's rule of
// which topics tier. Compacted topics (compact, and compact,delete) tier
// like any other and show their upload lag (issue 13); only a topic with
// remote.storage.enable=false is local-only, its whole log no upload lag.
func TestTierCompactedTopicsTier(t *testing.T) {
	dataDir := t.TempDir()
	n := startNode(t, nil, "dev", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--http-listen", "off", "--tier-upload-interval", "100ms")
	env := []string{"STRATA_BOOTSTRAP=" + n.bootstrap}
	with := func(kv ...string) map[string]*string {
		m := map[string]*string{}
		for k, v := range smallSegments {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kmsg.StringPtr(kv[i+1])
		}
		return m
	}
	mustCreate(t, n.bootstrap, "tiered", 1, smallSegments)
	mustCreate(t, n.bootstrap, "compacted", 1, with("cleanup.policy", "compact"))
	mustCreate(t, n.bootstrap, "both", 1, with("cleanup.policy", "compact,delete"))
	mustCreate(t, n.bootstrap, "kept", 1, with("remote.storage.enable", "false"))
	topics := []string{"tiered", "compacted", "both", "kept"}
	for _, topic := range topics {
		produceN(t, n.bootstrap, topic, 0, 20)
	}
	for _, topic := range topics[:3] {
		waitTiered(t, env, topic, "--data-dir", dataDir)
	}
	var rows []partitionStatus
	if err := json.Unmarshal([]byte(cliOK(t, env, "tier", "status", "--json", "--data-dir", dataDir)), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != len(topics) {
		t.Fatalf("tier status: %+v", rows)
	}
	for _, r := range rows {
		local := r.Topic == "kept"
		if r.LocalOnly != local || (r.UploadLag == nil) != local || r.LocalEnd == nil || *r.LocalEnd != 20 {
			t.Errorf("%s: local_only %v, upload lag %v, local end %v", r.Topic, r.LocalOnly, r.UploadLag, r.LocalEnd)
		}
		if !local && (r.RemoteEnd == nil || *r.RemoteEnd == 0 || r.Segments == 0) {
			t.Errorf("%s: nothing in the bucket: %+v", r.Topic, r)
		}
	}
	table := cliOK(t, env, "tier", "status", "--data-dir", dataDir)
	if !regexp.MustCompile(`(?m)^kept .* local-only$`).MatchString(table) || regexp.MustCompile(`(?m)^(compacted|both) .* local-only$`).MatchString(table) {
		t.Errorf("tier status:\n%s", table)
	}
	n.stop(t)
}

// TestTierVerifyFindsNothing: a bucket without manifests (empty, or the
// wrong prefix) is not "all good".
func TestTierVerifyFindsNothing(t *testing.T) {
	dataDir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dataDir, "bucket"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCLI(t, nil, "tier", "verify", "--data-dir", dataDir)
	if code != 1 || strings.Contains(stdout, "all good") {
		t.Errorf("tier verify of an empty bucket: exit %d\n%s", code, stdout)
	}
	assertOneLineError(t, stderr, "tier verify: the bucket holds no manifest")

	// Without a broker, tier status reads the bucket alone; a topic it
	// does not hold is one error line that gives both reasons.
	code, _, stderr = runCLI(t, nil, "tier", "status", "orders", "--data-dir", dataDir, "--bootstrap", "127.0.0.1:1")
	if code != 1 {
		t.Errorf("tier status of a topic in neither: exit %d", code)
	}
	assertOneLineError(t, stderr, "cannot reach 127.0.0.1:1", "the bucket holds no manifest of topic orders")
}

// TestTierVerifyTimeout: a store that accepts connections and never
// answers; tier verify gives up at --timeout and says so.
func TestTierVerifyTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var conns []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	keys := []string{"STRATA_S3_ACCESS_KEY=" + testAccessKey, "STRATA_S3_SECRET_KEY=" + testSecret}
	code, _, stderr := runCLI(t, keys, "tier", "verify", "--s3-endpoint", "http://"+ln.Addr().String(), "--s3-bucket", "b", "--timeout", "1s")
	if code != 1 {
		t.Errorf("exit %d", code)
	}
	assertOneLineError(t, stderr, "tier verify: not done within --timeout 1s")
}

// TestTierServeS3 runs `strata serve` against a real S3 server: it uploads
// there, counts the requests in /metrics, and never prints the keys.
func TestTierServeS3(t *testing.T) {
	s3 := localstack.TestS3(t)
	prefix := strings.TrimPrefix(s3.Prefix+"/serve", "/")
	keys := []string{"STRATA_S3_ACCESS_KEY=" + testAccessKey, "STRATA_S3_SECRET_KEY=" + testSecret}
	if s3.SecretKey != "strata-dev-secret" { // an external S3 checks the keys
		keys = []string{"STRATA_S3_ACCESS_KEY=" + s3.AccessKey, "STRATA_S3_SECRET_KEY=" + s3.SecretKey}
	}
	s3Flags := []string{"--s3-endpoint", s3.Endpoint, "--s3-bucket", s3.Bucket, "--s3-prefix", prefix, "--s3-region", s3.Region}
	n := startNode(t, keys, append([]string{"serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
		"--http-listen", "127.0.0.1:0", "--log-level", "debug", "--tier-upload-interval", "100ms"}, s3Flags...)...)
	mustCreate(t, n.bootstrap, "s3events", 1, smallSegments)
	produceN(t, n.bootstrap, "s3events", 0, 30)

	env := append([]string{"STRATA_BOOTSTRAP=" + n.bootstrap}, keys...)
	waitTiered(t, env, "s3events", s3Flags...)
	var outputs []string
	outputs = append(outputs, cliOK(t, env, append([]string{"tier", "verify"}, s3Flags...)...))
	outputs = append(outputs, cliOK(t, env, append([]string{"tier", "ls", "s3events", "0"}, s3Flags...)...))
	if !strings.Contains(outputs[0], "all good") {
		t.Errorf("tier verify:\n%s", outputs[0])
	}

	resp, err := http.Get(n.metrics)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(metrics, []byte(`strata_objstore_requests_total{op="put"}`)) {
		t.Errorf("/metrics has no object store request counts")
	}
	n.stop(t)
	outputs = append(outputs, n.stderr.String())
	for _, o := range outputs {
		if strings.Contains(o, testSecret) || strings.Contains(o, s3.SecretKey) && s3.SecretKey != "strata-dev-secret" {
			t.Fatalf("the secret key appears in the output:\n%s", o)
		}
	}
}

// runFailsEnv runs the binary with exactly env, expecting exit status 1,
// and returns how long it took and all it printed.
func runFailsEnv(t *testing.T, env []string, args ...string) (time.Duration, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("want exit status 1, got %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	return took, stdout.String(), stderr.String()
}

// lastLine is the error line: what precedes it may only be log records.
func lastLine(t *testing.T, stderr string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, "time=") {
			t.Errorf("stderr line is neither a log record nor the error: %q", l)
		}
	}
	return lines[len(lines)-1] + "\n"
}

// TestTierBadS3FailsStartup: a wrong endpoint or bucket stops the node at
// start-up with one line that says which, in seconds, keys unprinted.
func TestTierBadS3FailsStartup(t *testing.T) {
	keys := []string{"STRATA_S3_ACCESS_KEY=" + testAccessKey, "STRATA_S3_SECRET_KEY=" + testSecret}
	t.Run("unreachable endpoint", func(t *testing.T) {
		took, stdout, stderr := runFailsEnv(t, keys, "serve", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
			"--http-listen", "off", "--s3-endpoint", "http://127.0.0.1:1", "--s3-bucket", "strata")
		if took > 10*time.Second {
			t.Errorf("took %s to give up", took)
		}
		assertOneLineError(t, lastLine(t, stderr), "endpoint unreachable", `bucket "strata" at http://127.0.0.1:1`)
		if strings.Contains(stdout+stderr, testSecret) {
			t.Errorf("secret printed:\n%s%s", stdout, stderr)
		}
	})
	t.Run("missing bucket", func(t *testing.T) {
		s3, stop, err := localstack.StartS3(context.Background(), "", "present")
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		_, stdout, stderr := runFailsEnv(t, keys, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
			"--http-listen", "off", "--s3-endpoint", s3.Endpoint, "--s3-bucket", "absent")
		assertOneLineError(t, lastLine(t, stderr), `bucket "absent"`, "does not exist")
		if strings.Contains(stdout+stderr, testSecret) {
			t.Errorf("secret printed:\n%s%s", stdout, stderr)
		}
	})
}

func TestTierConfigErrors(t *testing.T) {
	dir := t.TempDir()
	keys := []string{"STRATA_S3_ACCESS_KEY=" + testAccessKey, "STRATA_S3_SECRET_KEY=" + testSecret}
	file := filepath.Join(dir, "strata.yaml")
	if err := os.WriteFile(file, []byte("node:\n  data_dir: "+dir+"\ntier:\n  chunk_size: 1MiB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		code int
		env  []string
		args []string
		want []string
	}{
		{2, nil, []string{"serve", "--data-dir", dir, "--tier-chunk-bytes", "-1"}, []string{"--tier-chunk-bytes", `"-1" is negative`}},
		{2, nil, []string{"dev", "--tier-upload-interval", "0s"}, []string{"--tier-upload-interval", "not a positive duration"}},
		{2, nil, []string{"dev", "--s3-access-key", "x"}, []string{"unknown flag: --s3-access-key"}},
		{2, nil, []string{"dev", "--tier-chunk-bytes", "1MiB", "--tier-cache-bytes", "1MiB"}, []string{"tier.chunk_bytes 1048576 is more than half of tier.cache_bytes 1048576", "strata dev --help"}},
		{1, nil, []string{"serve", "--config", file}, []string{"strata.yaml:4", "unknown key tier.chunk_size"}},
		{1, []string{"STRATA_TIER_LOCAL_DISK_LIMIT=-1"}, []string{"serve", "--data-dir", dir}, []string{"STRATA_TIER_LOCAL_DISK_LIMIT", `"-1" is negative`}},
		{1, []string{"STRATA_S3_ACCESS_KEY=" + testAccessKey}, []string{"dev"}, []string{"STRATA_S3_ACCESS_KEY is set but STRATA_S3_SECRET_KEY is not"}},
		{1, nil, []string{"tier", "status", "--data-dir", filepath.Join(dir, "nope")}, []string{"no bucket directory", "nope"}},
		{1, keys, []string{"tier", "verify", "orders", "--s3-endpoint", "http://127.0.0.1:1", "--s3-bucket", "b"}, []string{"endpoint unreachable"}},
		{2, nil, []string{"tier", "ls", "orders", "zero"}, []string{`partition "zero"`}},
		{2, nil, []string{"tier", "ls", "orders", "0", "--topic-id", "xyz"}, []string{"--topic-id", `"xyz"`}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, tt.env, tt.args...)
			if code != tt.code {
				t.Errorf("exit status %d, want %d", code, tt.code)
			}
			assertOneLineError(t, stderr, tt.want...)
		})
	}
}

// TestLocalstack runs the one developer command: S3 and a broker tiering
// into it; a franz-go client produces and consumes, segments land in the
// S3 server's directory, and SIGTERM stops both with status 0.
func TestLocalstack(t *testing.T) {
	dataDir := t.TempDir()
	n := startNode(t, nil, "localstack", "--data-dir", dataDir, "--listen", "127.0.0.1:0", "--s3-listen", "127.0.0.1:0",
		"--http-listen", "off", "--tier-upload-interval", "100ms")
	mustCreate(t, n.bootstrap, "local", 1, smallSegments)
	produceN(t, n.bootstrap, "local", 0, 30)
	if got := readAll(t, n.bootstrap, "local"); len(got[0]) != 30 {
		t.Fatalf("read back %d records, want 30", len(got[0]))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		segs, _ := filepath.Glob(filepath.Join(dataDir, "s3", "strata", "*", "local-*", "0", "segments", "*.seg"))
		if len(segs) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no segment object in the local S3 server's directory within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.stop(t)
}
