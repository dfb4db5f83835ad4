package main

import (
	"errors"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestServeConnectionSettings: kafka.connections_max_idle reaches the
// broker: a client connection that sends nothing is closed after the
// configured idle time, not Kafka's 10 minutes.
func TestServeConnectionSettings(t *testing.T) {
	dir := t.TempDir()
	env := []string{"STRATA_DATA_DIR=" + filepath.Join(dir, "data"), "STRATA_HTTP_LISTEN=off", "STRATA_CONNECTIONS_MAX_IDLE=300ms"}
	n := startNode(t, env, "serve", "--listen", "127.0.0.1:0")
	c, err := net.Dial("tcp", n.bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if k, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection: read %d bytes, %v; want it closed (EOF)", k, err)
	}
	n.stop(t)
}
