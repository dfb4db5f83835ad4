package broker

import (
	"context"
	"net"
	"net/http"
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

// TestReadyzDuringStartup: the HTTP listener opens first, so that during a
// slow start-up (a metadata store waiting for a leader, many partitions
// to open) a probe gets an answer: /healthz 200, /readyz 503 until the
// broker serves, then 200.
func TestReadyzDuringStartup(t *testing.T) {
	reached := make(chan net.Addr, 1)
	release := make(chan struct{})
	testHookStarting = func(httpAddr net.Addr) {
		reached <- httpAddr
		<-release
	}
	defer func() { testHookStarting = nil }()

	type started struct {
		b   *Broker
		err error
	}
	done := make(chan started, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		b, err := Start(ctx, Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", HTTPListen: "127.0.0.1:0", Logger: testLogger()})
		done <- started{b, err}
	}()
	var addr net.Addr
	select {
	case addr = <-reached:
	case s := <-done:
		t.Fatalf("Start returned before its slow part: %v", s.err)
	}
	if addr == nil {
		close(release)
		<-done
		t.Fatal("no HTTP listener during start-up")
	}
	get := func(path string) int {
		t.Helper()
		cl := http.Client{Timeout: 5 * time.Second}
		resp, err := cl.Get("http://" + addr.String() + path)
		if err != nil {
			t.Fatalf("GET %s during start-up: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz during start-up: %d", code)
	}
	if code := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz during start-up: %d, want 503", code)
	}
	// Scrapes go on during start-up: no collector may need what is not
	// there yet.
	if code := get("/metrics"); code != http.StatusOK {
		t.Errorf("/metrics during start-up: %d, want 200", code)
	}
	close(release)
	s := <-done
	if s.err != nil {
		t.Fatal(s.err)
	}
	defer s.b.Close()
	if s.b.HTTPAddr().String() != addr.String() {
		t.Errorf("HTTP address %s after start-up, %s during", s.b.HTTPAddr(), addr)
	}
	if code := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz once started: %d", code)
	}
}
