package broker

import (
	"crypto/tls"
	"net"
	"sync"
)

// tlsBatchBytes bounds what a TLS connection gathers before writing it:
// large enough that a fetch response goes out in a few writes. The
// buffer is the connection's only while a write is under way
// (tlsBatchBufs), so thousands of idle consumers hold none.
const tlsBatchBytes = 256 << 10

// tlsBatchBufs are the gathering buffers, shared by the connections
// writing at the moment.
var tlsBatchBufs = sync.Pool{New: func() any { b := make([]byte, 0, tlsBatchBytes); return &b }}

// tlsMaxRecord is the most plaintext crypto/tls seals into one record: a
// write of at most this much is one record, nothing to gather.
const tlsMaxRecord = 16 << 10

// tlsBatcher sits under a TLS connection and gathers the records crypto/tls
// writes for one large Write into as few socket writes as tlsBatchBytes
// allows. crypto/tls seals a write into records of at most 16 KiB and
// writes each with its own system call; CPU profiles of SASL_SSL consumers
// put a quarter of what TLS costs the broker there (docs/benchmarks.md,
// "SASL_SSL vs PLAINTEXT"). Only batchedTLS's Write holds records back, and
// it lets them go before it returns, so nothing waits in the buffer for a
// later write: handshakes, alerts and Close go straight through.
type tlsBatcher struct {
	net.Conn // the TCP connection under TLS

	mu   sync.Mutex // Close's alert may come from another goroutine
	hold bool
	buf  []byte
}

func (b *tlsBatcher) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.hold || len(p) > tlsBatchBytes {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
		return b.Conn.Write(p)
	}
	if len(b.buf)+len(p) > tlsBatchBytes {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// flushLocked writes what is gathered. A net.Conn writes all of it or
// fails, and a failed connection is closed: nothing is kept either way.
func (b *tlsBatcher) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.Conn.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}

func (b *tlsBatcher) setHold(hold bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hold = hold
	if hold {
		if b.buf == nil {
			b.buf = *tlsBatchBufs.Get().(*[]byte)
		}
		return nil
	}
	err := b.flushLocked()
	b.putBuf()
	return err
}

// putBuf gives the gathering buffer back to the pool.
func (b *tlsBatcher) putBuf() {
	if b.buf != nil {
		buf := b.buf[:0]
		tlsBatchBufs.Put(&buf)
		b.buf = nil
	}
}

func (b *tlsBatcher) Close() error {
	b.mu.Lock()
	b.flushLocked()
	b.putBuf()
	b.mu.Unlock()
	return b.Conn.Close()
}

// batchedTLS is a TLS connection whose writes of more than one record go
// out through its tlsBatcher in as few socket writes as it allows.
type batchedTLS struct {
	*tls.Conn
	b *tlsBatcher
}

func (c batchedTLS) Write(p []byte) (int, error) {
	if len(p) <= tlsMaxRecord {
		return c.Conn.Write(p)
	}
	c.b.setHold(true)
	n, err := c.Conn.Write(p)
	if ferr := c.b.setHold(false); err == nil {
		err = ferr
	}
	return n, err
}
