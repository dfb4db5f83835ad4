package broker

import (
	"bytes"
	"crypto/tls"
	"io"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"testing"

	"strata/internal/certs"
)

// countingConn counts the writes made to the socket under TLS.
type countingConn struct {
	net.Conn
	writes atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// A large write through a batched TLS connection reaches the socket in a
// few writes, not one per 16 KiB record, and the peer reads it intact;
// small writes, and the handshake and close, go straight through.
func TestTLSBatchedWrites(t *testing.T) {
	src, dir := devCerts(t)
	srv, err := src.ServerConfig(certs.ClientAuthNone)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	payload := make([]byte, 1<<20)
	for i := range payload {
		payload[i] = byte(rand.IntN(256))
	}
	small := []byte("a response of one record")
	got := make(chan []byte, 1)
	go func() {
		c, err := tls.Dial("tcp", ln.Addr().String(), clientTLS(t, dir, ""))
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingConn{Conn: nc}
	l := &listener{tls: srv, security: SSL}
	c, _, err := l.handshake(t.Context(), counted)
	if err != nil {
		t.Fatal(err)
	}
	before := counted.writes.Load()
	if _, err := c.Write(small); err != nil {
		t.Fatal(err)
	}
	if n := counted.writes.Load() - before; n != 1 {
		t.Errorf("a one-record write took %d socket writes, want 1", n)
	}
	before = counted.writes.Load()
	if _, err := c.Write(payload); err != nil {
		t.Fatal(err)
	}
	writes := counted.writes.Load() - before
	if max := int64(len(payload)/tlsBatchBytes + 2); writes > max {
		t.Errorf("a 1 MiB write took %d socket writes, want at most %d (64 without batching)", writes, max)
	}
	c.Close()
	want := append(append([]byte{}, small...), payload...)
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the peer read %d bytes, not the %d written", len(b), len(want))
	}
	t.Logf("1 MiB of TLS records in %d socket writes", writes)
}
