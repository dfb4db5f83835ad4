package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReadmeGoExample runs the README's Go example, as a reader would copy
// it, against a dev node after the README's own `topic create`: it must
// print the record it produced, every time.
func TestReadmeGoExample(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles and runs the README's example")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "```go\n")
	src, _, ok2 := strings.Cut(rest, "\n```")
	if !ok || !ok2 || !strings.Contains(src, `"127.0.0.1:9092"`) {
		t.Fatalf("README.md has no Go example dialling 127.0.0.1:9092")
	}

	n := startNode(t, nil, "dev", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--http-listen", "off")
	cliOK(t, []string{"STRATA_BOOTSTRAP=" + n.bootstrap}, "topic", "create", "greetings", "--partitions", "3")

	// Inside the module, so that the example builds against the module's
	// own franz-go; a leading dot keeps it out of ./... patterns.
	dir, err := os.MkdirTemp(root, ".readme-example-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	src = strings.ReplaceAll(src, `"127.0.0.1:9092"`, `"`+n.bootstrap+`"`)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seen := map[string]bool{}
	line := regexp.MustCompile(`(?m)^(partition \d+ offset \d+): hello from Go$`)
	for run := range 3 {
		cmd := exec.CommandContext(ctx, "go", "run", "./"+filepath.Base(dir))
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("run %d of the README's example: %v\n%s", run, err, out)
		}
		// Each run produces one more record and must print it: a record
		// no earlier run printed.
		fresh := false
		for _, m := range line.FindAllStringSubmatch(string(out), -1) {
			fresh = fresh || !seen[m[1]]
			seen[m[1]] = true
		}
		if !fresh {
			t.Fatalf("run %d of the README's example did not print the record it produced:\n%s", run, out)
		}
	}
	n.stop(t)
}

// TestReadmeListsEveryCommand: the README's paragraph that lists the
// commands names every top-level command the binary has (issue 21, item
// 14: `cluster` was missing), so a new command cannot go unmentioned.
func TestReadmeListsEveryCommand(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "lists the commands:")
	if !ok {
		t.Fatal(`README.md has no paragraph that "lists the commands:"`)
	}
	para, _, _ := strings.Cut(rest, "\n\n")
	root := newRootCmd(nil, io.Discard, io.Discard)
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	n := 0
	for _, c := range root.Commands() {
		// help and completion are cobra's own, the same in every binary.
		if !c.IsAvailableCommand() || c.Name() == "help" || c.Name() == "completion" {
			continue
		}
		n++
		if !strings.Contains(para, "`"+c.Name()+"`") && !strings.Contains(para, "`strata "+c.Name()+" ") {
			t.Errorf("README.md's command list does not name `%s` (%s)", c.Name(), c.Short)
		}
	}
	if n < 10 {
		t.Fatalf("only %d top-level commands found", n)
	}
}
