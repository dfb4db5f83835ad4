package main

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// kcatPath returns kcat's path, or skips: kcat is optional on a developer's
// machine (CI installs it, so there these tests always run).
func kcatPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (apt-get install kcat); skipping the librdkafka compatibility test")
	}
	return p
}

func kcat(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcatPath(t), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// TestKcat drives a dev node with librdkafka's kcat: metadata lists the
// broker and topics, and 10,000 lines produced with -P come back identical,
// in order, with -C -e.
func TestKcat(t *testing.T) {
	kcatPath(t)
	n := startNode(t, nil, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off")
	if code, _, stderr := runCLI(t, nil, "topic", "create", "lines", "--bootstrap", n.bootstrap); code != 0 {
		t.Fatalf("topic create: %s", stderr)
	}

	meta := kcat(t, nil, "-b", n.bootstrap, "-L")
	if !strings.Contains(meta, "1 brokers:") || !strings.Contains(meta, "at "+n.bootstrap) {
		t.Fatalf("kcat -L does not list the broker at %s:\n%s", n.bootstrap, meta)
	}
	if !strings.Contains(meta, `topic "lines" with 1 partitions`) {
		t.Fatalf("kcat -L does not list the topic:\n%s", meta)
	}

	var in bytes.Buffer
	for i := 0; i < 10000; i++ {
		fmt.Fprintf(&in, "line %05d: the quick brown fox jumps over the lazy dog\n", i)
	}
	kcat(t, in.Bytes(), "-b", n.bootstrap, "-t", "lines", "-P", "-X", "acks=all")
	out := kcat(t, nil, "-b", n.bootstrap, "-t", "lines", "-C", "-e", "-o", "beginning", "-q")
	if out != in.String() {
		got := strings.Count(out, "\n")
		t.Fatalf("kcat -C returned %d lines that differ from the 10000 produced", got)
	}
	n.stop(t)
}
