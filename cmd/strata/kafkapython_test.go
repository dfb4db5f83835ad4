package main

import (
	"bytes"
	"context"
	_ "embed"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// kafkaPythonScript produces to a three-partition topic, consumes in a
// group, commits, and resumes from the committed offsets in a second
// consumer (kafka-python's API, as a user writes it). It prints "ok" or a
// line starting "FAIL:".
//
//go:embed testdata/kafka_python_roundtrip.py
var kafkaPythonScript string

// kafkaPython returns a python3 that can import kafka-python, or skips:
// Debian's python3-kafka installs into the system python, which a pyenv or
// virtualenv python3 earlier on PATH does not see, so both are tried.
func kafkaPython(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"python3", "/usr/bin/python3"} {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		out, err := exec.Command(p, "-c", "import kafka; print(kafka.__version__)").Output()
		if err == nil {
			t.Logf("kafka-python %s (%s)", strings.TrimSpace(string(out)), p)
			return p
		}
	}
	t.Skip("kafka-python is not installed (apt-get install python3-kafka); skipping the kafka-python compatibility test")
	return ""
}

// runKafkaPython runs the round trip against bootstrap on topic, which
// must exist with three partitions.
func runKafkaPython(t *testing.T, py, bootstrap, topic string) {
	t.Helper()
	script := filepath.Join(t.TempDir(), "roundtrip.py")
	if err := os.WriteFile(script, []byte(kafkaPythonScript), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script, bootstrap, topic)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("kafka-python took %v:\n%s", time.Since(start).Round(time.Millisecond), stderr.String())
	if err != nil || strings.TrimSpace(stdout.String()) != "ok" {
		t.Fatalf("kafka-python round trip: %v\n%s", err, stdout.String())
	}
}

// TestKafkaPython: kafka-python 2.0.2 (Debian's python3-kafka) produces,
// consumes in a group, commits and resumes from the committed offsets,
// against one node and against three. Its consumer reads every fetch
// answer's record set with len(), so a null one (length -1) crashed it
// (issue 21, item 12).
func TestKafkaPython(t *testing.T) {
	py := kafkaPython(t)
	t.Run("one node", func(t *testing.T) {
		n := startNode(t, nil, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off")
		if code, _, stderr := runCLI(t, nil, "topic", "create", "roundtrip", "--partitions", "3", "--bootstrap", n.bootstrap); code != 0 {
			t.Fatalf("topic create: %s", stderr)
		}
		runKafkaPython(t, py, n.bootstrap, "roundtrip")
		n.stop(t)
	})
	t.Run("three nodes", func(t *testing.T) {
		c := startCluster(t, 3, clusterSettings{})
		c.createTopic("roundtrip", 3, 3, nil)
		runKafkaPython(t, py, c.bootstrap(), "roundtrip")
	})
}
