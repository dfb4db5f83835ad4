package broker

import (
	"context"
	"strings"
	"testing"
	"time"
)

// startErr starts a broker that is expected to refuse to start, and
// returns its error.
func startErr(t *testing.T, cfg Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger()
	}
	b, err := Start(ctx, cfg)
	if err == nil {
		b.Close()
		t.Fatal("broker started")
	}
	if ctx.Err() != nil {
		t.Fatalf("refused only when the start-up deadline passed: %v", err)
	}
	return err
}

// TestDataDirInUse: a second broker on a data dir that a running one holds
// says so in words an operator acts on, not in Badger's.
func TestDataDirInUse(t *testing.T) {
	dir := t.TempDir()
	testBroker(t, dir)
	err := startErr(t, Config{DataDir: dir})
	want := "data dir " + dir + " is in use by another strata process"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
	if strings.Contains(err.Error(), "Badger") {
		t.Errorf("error %q shows Badger's message", err)
	}
}

// TestDataDirOfAnotherNode: a data dir made by node 1 and started as node
// 0 is refused at once, naming both ids (issue 10: it used to hang with
// the Kafka port bound and answering nothing).
func TestDataDirOfAnotherNode(t *testing.T) {
	dir := t.TempDir()
	b := testBroker(t, dir, func(c *Config) { c.NodeID = 1 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	err := startErr(t, Config{DataDir: dir, NodeID: 0})
	for _, want := range []string{dir, "node 1", "node 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// And the data dir still starts as the node that made it.
	testBroker(t, dir, func(c *Config) { c.NodeID = 1 })
}
