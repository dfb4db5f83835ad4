package broker

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/extension"
	"strata/meta"
)

// acceptLoop accepts Kafka connections on one listener until Close.
func (b *Broker) acceptLoop(l *listener) {
	var backoff time.Duration
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if b.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				// Out of file descriptors and the like: back off instead of
				// spinning, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				b.log.Warn("accept", "err", err, "retry_in", backoff)
				select {
				case <-time.After(backoff):
				case <-b.ctx.Done():
					return
				}
				continue
			}
			b.log.Error("kafka listener stopped", "listener", l.name, "err", err)
			return
		}
		backoff = 0
		ip := remoteIP(c)
		if !b.perIP.acquire(ip, b.cfg.MaxConnectionsPerIP) {
			c.Close() // max.connections.per.ip
			b.log.Debug("refused a connection over max.connections.per.ip", "remote", c.RemoteAddr().String())
			continue
		}
		b.mu.Lock()
		if b.mu.closed {
			b.mu.Unlock()
			c.Close()
			b.perIP.release(ip)
			return
		}
		b.mu.conns[c] = struct{}{}
		b.mu.Unlock()
		b.metrics.connections.Inc()
		b.goFunc(func() {
			defer func() {
				b.mu.Lock()
				delete(b.mu.conns, c)
				b.mu.Unlock()
				c.Close()
				b.perIP.release(ip)
				b.metrics.connections.Dec()
			}()
			b.serveConn(c, l)
		})
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// request is one decoded request with its header fields.
type request struct {
	kreq     kmsg.Request
	corr     int32
	clientID string
	conn     *conn
	quota    requestQuota // quotas.go
}

// conn is one client connection. Requests are read, handled and answered
// strictly in order, as the protocol requires; slow requests block only
// their own connection, because every connection has its own goroutine.
type conn struct {
	b      *Broker
	nc     net.Conn
	ic     idleConn // nc with the idle timeout, under r and w
	r      *bufio.Reader
	w      *bufio.Writer
	remote string
	// listener is the listener the connection was accepted on: its name
	// and security protocol (whether it must authenticate with SASL).
	listener *listener
	// principal is who the connection speaks for, in Kafka's
	// "Type:name" form (admit): on an SSL listener, the subject of the
	// client's verified certificate (certs.Principal); otherwise Kafka's
	// User:ANONYMOUS until it authenticates.
	principal string
	// sasl is the connection's authentication state (sasl.go).
	sasl saslConn

	// body is reused across requests while it stays small (retainBody): a
	// connection handles one request at a time, and no handler keeps a
	// reference to it after its response is written.
	body []byte
	// reserved is what the request being handled holds of the broker's
	// request memory (reqMem), released once its response is written;
	// reservedPreAuth says it was reserved before authentication (reqmem.go).
	reserved        int64
	reservedPreAuth bool
	// scratch holds a fetch response's record bytes and out the encoded
	// response, both reused from one request to the next: a consumer's
	// connection fetches over and over, and reusing its buffers spares
	// allocating and zeroing megabytes per fetch. Buffers that grew past
	// retainBytes are dropped after use, so one huge fetch does not pin its
	// memory.
	scratch []byte
	out     []byte
	// zc sends a fetch response's file ranges with sendfile (zerocopy.go);
	// nil on a TLS connection, which must encrypt every byte.
	zc *zeroCopy
}

// retainBytes bounds the buffers a connection keeps between requests: a
// consumer's connection holds about twice its fetch size (fetch.max.bytes
// is 50 MiB by default in Kafka clients, and the partitions' limits sum to
// less for most consumers).
const retainBytes = 128 << 20

// A request body starts at minBodyAlloc bytes and doubles as its bytes
// arrive, never beyond the announced size: a client that announces 100
// MiB and sends 6 bytes costs 64 KiB, not 100 MiB. A body buffer of up to
// retainBody bytes is kept for the connection's next request, which covers
// producers' usual requests; larger ones are let go after use, so an idle
// connection does not pin the memory of its largest request.
const (
	minBodyAlloc = 64 << 10
	retainBody   = 1 << 20
)

var errFrameTooLarge = errors.New("frame larger than the maximum request size")

// errCloseConn marks a handler error that closes the connection as the
// protocol's answer (a failed acks=0 produce), not because the client sent
// something bad: responses already buffered are sent first, and it is not
// counted as a bad request.
var errCloseConn = errors.New("closing the connection to signal an error")

func (b *Broker) serveConn(nc net.Conn, l *listener) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	remote := nc.RemoteAddr().String()
	nc, principal, err := l.handshake(b.ctx, nc)
	if err != nil {
		if b.ctx.Err() == nil {
			b.log.Info("closing connection", "remote", remote, "listener", l.name, "err", err)
		}
		return
	}
	ic := idleConn{Conn: nc, idle: b.cfg.ConnectionsMaxIdle}
	// A connection that must authenticate first gets small buffers: a
	// thousand unauthenticated connections must not hold 128 KiB each.
	// They grow to connBuf once it has authenticated (growBuffers).
	size := connBuf
	if l.security.SASL() {
		size = preAuthBuf
	}
	c := &conn{
		b:         b,
		nc:        nc,
		ic:        ic,
		r:         bufio.NewReaderSize(ic, size),
		w:         bufio.NewWriterSize(ic, size),
		remote:    remote,
		listener:  l,
		principal: principal,
	}
	c.zc = newZeroCopy(nc)
	defer c.release()
	for {
		c.growBuffers()
		if c.sasl.raw { // after SaslHandshake v0: a bare SASL token
			if err := c.rawSASL(); err != nil {
				b.log.Info("closing connection", "remote", c.remote, "reason", err)
				return
			}
			continue
		}
		req, err := c.readRequest()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
				b.log.Info("closing idle connection", "remote", c.remote, "idle", b.cfg.ConnectionsMaxIdle, "err", err)
				return
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && b.ctx.Err() == nil {
				b.metrics.badRequests.Inc()
				if !c.unauthenticated() {
					b.log.Warn("closing connection", "remote", c.remote, "err", err)
				} else if ok, held := b.clientLog.allow(c.host()); ok {
					b.log.Warn("closing unauthenticated connection", "remote", c.remote, "err", err, "held_back", held)
				}
			}
			return
		}
		resp, err := b.handleWithQuotas(req)
		if errors.Is(err, errCloseConn) {
			if !c.unauthenticated() {
				b.log.Info("closing connection", "remote", c.remote, "client", req.clientID, "correlation_id", req.corr, "reason", err)
			} else if ok, held := b.clientLog.allow(c.host()); ok {
				b.log.Info("closing unauthenticated connection", "remote", c.remote, "client", req.clientID, "correlation_id", req.corr, "reason", err, "held_back", held)
			}
			c.w.Flush()
			return
		}
		if err != nil {
			b.log.Warn("closing connection", "remote", c.remote, "api", apiName(req.kreq.Key()), "version", req.kreq.GetVersion(), "err", err)
			b.metrics.badRequests.Inc()
			return
		}
		if resp != nil { // nil: acks=0 produce, no response at all
			if err := c.writeResponse(req, resp); err != nil {
				return
			}
		}
		if c.sasl.failed { // answered a failed authentication: close
			c.w.Flush()
			return
		}
		// The request is done with: its memory is free for others before
		// the flush, which waits for the client.
		c.release()
		// Flush unless the next request is already here whole, so
		// pipelined requests share one write. This holds after an acks=0
		// produce too: a response buffered before it must not wait for a
		// request the client may never send or has sent only in part.
		if c.w.Buffered() > 0 && !c.frameBuffered() {
			if err := c.w.Flush(); err != nil {
				return
			}
		}
		if !c.mute(req) { // a throttled client's connection (quotas.go)
			return
		}
	}
}

// frameBuffered reports whether a whole request frame is already read
// into the connection's buffer, so reading it cannot block.
func (c *conn) frameBuffered() bool {
	n := c.r.Buffered()
	if n < 4 {
		return false
	}
	head, err := c.r.Peek(4)
	if err != nil {
		return false
	}
	size := int64(binary.BigEndian.Uint32(head))
	return int64(n) >= 4+size
}

// Buffer sizes of a connection's reader and writer: connBuf once it may
// send requests, preAuthBuf while it has yet to authenticate on a SASL
// listener.
const (
	connBuf    = 64 << 10
	preAuthBuf = 4 << 10
)

// growBuffers gives an authenticated connection full-size buffers, between
// requests and only when neither holds bytes, so nothing is lost or
// reordered; otherwise it tries again before the next request.
func (c *conn) growBuffers() {
	if c.r.Size() >= connBuf || (c.saslListener() && !c.sasl.authenticated()) {
		return
	}
	if c.r.Buffered() > 0 || c.w.Buffered() > 0 {
		return
	}
	c.r = bufio.NewReaderSize(c.ic, connBuf)
	c.w = bufio.NewWriterSize(c.ic, connBuf)
}

// release gives back the request memory of the request just answered and
// lets its body buffer go when it is large.
func (c *conn) release() {
	if c.reserved > 0 {
		c.b.reqMem.release(c.reserved, c.reservedPreAuth)
		c.reserved = 0
	}
	if cap(c.body) > retainBody {
		c.body = nil
	}
	c.zc.release()
}

// readRequest reads and decodes one frame. A frame above the configured
// maximum is refused before its body is allocated; a frame that does not
// decode closes the connection. The frame's announced size is reserved
// from the broker's request memory before its body is read, and stays
// reserved until release.
func (c *conn) readRequest() (*request, error) {
	var sizeBuf [4]byte
	if _, err := io.ReadFull(c.r, sizeBuf[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("truncated frame length: %w", err)
		}
		return nil, err
	}
	size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
	if size < 0 || size > c.b.cfg.MaxRequestBytes {
		return nil, fmt.Errorf("%w: %d bytes (max %d)", errFrameTooLarge, uint32(size), c.b.cfg.MaxRequestBytes)
	}
	if limit := c.preAuthLimit(); limit > 0 && size > limit {
		return nil, fmt.Errorf("%w: %d bytes before SASL authentication (sasl.server.max.receive.size %d)", errFrameTooLarge, size, limit)
	}
	if size < 8 {
		return nil, fmt.Errorf("frame of %d bytes is shorter than a request header", size)
	}
	if err := c.reserve(int64(size)); err != nil {
		return nil, err
	}
	body, err := c.readBody(int(size))
	if err != nil {
		return nil, err
	}
	c.b.metrics.bytesIn.Add(float64(size) + 4)
	return decodeRequest(body, c)
}

// reserve takes size bytes of the broker's request memory for the request
// about to be read. While they are not available the connection reads
// nothing, so what the client sends waits in the kernel's buffers and then
// in the client, not in the broker. A connection that cannot get them
// within the idle timeout is closed like an idle one.
//
// Before authentication, a frame of at most preAuthBuf bytes reserves
// nothing: its body is the one first chunk of at most preAuthBuf that
// readBody allocates, which counts with the connection's buffers, and so
// SASL messages keep flowing however much of the memory larger frames
// hold. Larger frames reserve from the unauthenticated half (reqmem.go).
func (c *conn) reserve(size int64) error {
	preAuth := c.preAuthLimit() > 0
	if preAuth && size <= preAuthBuf {
		return nil
	}
	limit := c.b.cfg.QueuedMaxRequestBytes
	c.reservedPreAuth = preAuth
	if c.b.reqMem.tryAcquire(size, limit, preAuth) {
		c.reserved = size
		return nil
	}
	// The responses already handled must not wait behind this wait.
	if c.w.Buffered() > 0 {
		if err := c.w.Flush(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(c.b.ctx, c.b.cfg.ConnectionsMaxIdle)
	defer cancel()
	if err := c.b.reqMem.acquire(ctx, size, limit, preAuth); err != nil {
		return fmt.Errorf("waiting for %d bytes of request memory: %w", size, err)
	}
	c.reserved = size
	return nil
}

// readBody reads a body of size bytes into a buffer that grows as the
// bytes arrive.
func (c *conn) readBody(size int) ([]byte, error) {
	body := c.body[:0]
	for len(body) < size {
		var err error
		if len(body) == cap(body) {
			// Grow once there are bytes to fill the room, so a client
			// that stalls at a power of two is not given twice what it
			// sent.
			if _, err = c.r.Peek(1); err == nil {
				// Before authentication the body starts at preAuthBuf:
				// it is at most sasl.server.max.receive.size anyway.
				first := minBodyAlloc
				if c.preAuthLimit() > 0 {
					first = preAuthBuf
				}
				grown := make([]byte, len(body), min(size, max(2*cap(body), first)))
				copy(grown, body)
				body = grown
				c.body = body
			}
		}
		if err == nil {
			var n int
			n, err = c.r.Read(body[len(body):min(cap(body), size)])
			body = body[:len(body)+n]
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("truncated frame: %d of %d bytes: %w", len(body), size, err)
		}
	}
	return body, nil
}

// idleConn puts a deadline of the idle timeout on every read and write,
// so a connection that makes no progress for that long, between requests
// or within one, is closed (connections.max.idle.ms). Handling a request
// is not idleness: no read or write is pending meanwhile.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c idleConn) Read(p []byte) (int, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	return c.Conn.Read(p)
}

func (c idleConn) Write(p []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	return c.Conn.Write(p)
}

// decodeRequest parses a request header and body. It is separate from the
// connection so fuzz tests can drive it with arbitrary bytes.
func decodeRequest(body []byte, c *conn) (*request, error) {
	rd := kbin.Reader{Src: body}
	key := rd.Int16()
	version := rd.Int16()
	corr := rd.Int32()
	clientID := rd.NullableString()
	if err := rd.Complete(); err != nil {
		return nil, fmt.Errorf("request header: %w", err)
	}
	kreq := kmsg.RequestForKey(key)
	if kreq == nil {
		kreq = extension.RequestForKey(key) // Strata's own APIs
	}
	if kreq == nil {
		return nil, fmt.Errorf("unknown api key %d", key)
	}
	if version < 0 {
		return nil, fmt.Errorf("%s: negative version %d", apiName(key), version)
	}
	kreq.SetVersion(version)
	req := &request{kreq: kreq, corr: corr, conn: c}
	if clientID != nil {
		req.clientID = *clientID
	}
	// A version above what we serve is answered with UNSUPPORTED_VERSION
	// (ApiVersions, KIP-511) or closes the connection; either way its body
	// is not decoded, since we may not know its layout.
	if !supported(key, version) {
		return req, nil
	}
	if kreq.IsFlexible() {
		kmsg.SkipTags(&rd)
		if err := rd.Complete(); err != nil {
			return nil, fmt.Errorf("request header tags: %w", err)
		}
	}
	if err := kreq.ReadFrom(rd.Src); err != nil {
		return nil, fmt.Errorf("decode %s v%d: %w", apiName(key), version, err)
	}
	return req, nil
}

// writeResponse frames and buffers one response. ApiVersions responses
// always use header v0 (KIP-511), so a client that sent a version we do not
// know can still read the answer.
func (c *conn) writeResponse(req *request, resp kmsg.Response) error {
	// A fetch response is its record bytes plus a little framing: size
	// the buffer once instead of growing it while encoding.
	out := slices.Grow(c.out[:0], len(c.scratch)+16<<10)
	out = append(out, 0, 0, 0, 0)
	out = binary.BigEndian.AppendUint32(out, uint32(req.corr))
	if resp.IsFlexible() && resp.Key() != int16(kmsg.ApiVersions) {
		out = append(out, 0) // empty tagged fields
	}
	out = resp.AppendTo(out)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	c.out = out
	if cap(c.out) > retainBytes {
		c.out = nil
	}
	c.scratch = c.scratch[:0]
	if cap(c.scratch) > retainBytes {
		c.scratch = nil
	}
	if c.zc.pending() { // records to send from files (zerocopy.go)
		return c.zc.write(c, out, resp.IsFlexible())
	}
	c.b.metrics.bytesOut.Add(float64(len(out)))
	_, err := c.w.Write(out)
	return err
}

// handlerFunc answers one request. A nil response with a nil error means
// "send nothing" (acks=0). An error closes the connection.
type handlerFunc func(b *Broker, req *request) (kmsg.Response, error)

// api is one supported API key.
type api struct {
	min, max int16
	handle   handlerFunc
}

// apis is filled by register before main runs and only read after.
var apis = make(map[int16]api)

// register is called from each API file's init.
func register(key kmsg.Key, min, max int16, h handlerFunc) {
	apis[int16(key)] = api{min: min, max: max, handle: h}
}

// apiName names an API key in logs, errors and metrics: Kafka's name, or
// that of one of Strata's extensions (broker/extension).
func apiName(key int16) string {
	if name := extension.NameForKey(key); name != "" {
		return name
	}
	return kmsg.NameForKey(key)
}

func (a api) serves(version int16) bool { return version >= a.min && version <= a.max }

func supported(key, version int16) bool {
	a, ok := apis[key]
	return ok && a.serves(version)
}

func (b *Broker) handle(req *request) (resp kmsg.Response, err error) {
	key := req.kreq.Key()
	version := req.kreq.GetVersion()
	a, ok := apis[key]
	if !ok {
		return nil, fmt.Errorf("unsupported api %s (key %d)", apiName(key), key)
	}
	if !a.serves(version) && key != int16(kmsg.ApiVersions) {
		return nil, fmt.Errorf("unsupported version %d of %s (we serve %d-%d)", version, apiName(key), a.min, a.max)
	}
	start := time.Now()
	defer func() {
		// A bug in one handler must not take down the broker: answer by
		// closing the connection and keep serving everyone else.
		if r := recover(); r != nil {
			b.log.Error("handler panic", "api", apiName(key), "version", version, "panic", r)
			resp, err = nil, fmt.Errorf("internal error handling %s", apiName(key))
		}
		b.metrics.observeRequest(key, time.Since(start))
	}()
	if err := b.admit(req); err != nil {
		return nil, err
	}
	// Authorized here, before forwarding: the controller sees the
	// forwarding broker, not the client (authorize.go).
	refuse, answer := b.gate(req)
	if answer != nil {
		return answer, nil
	}
	if refuse != nil {
		defer func() {
			if resp != nil && err == nil {
				refuse(resp)
			}
		}()
	}
	if forwarded[key] && b.node.Clustered() && !b.meta.IsLeader() {
		if resp, err := b.forward(req); !errors.Is(err, meta.ErrNotController) {
			return resp, err
		}
		// This node became the controller meanwhile: it answers.
	}
	return a.handle(b, req)
}

// anonymous is the principal of an unauthenticated connection.
const anonymous = "User:ANONYMOUS"

// admit is the one place where a request's principal (req.conn.principal)
// is checked before its handler runs: whether the connection has
// authenticated as its listener requires, and whether the principal may
// use the API at all. Checks that need the request's contents (ACLs on
// the topics and groups it names, Metadata filtering) are the handlers',
// against the same principal (authorize.go, with broker/acl's decisions),
// or, for the requests this broker may forward to the controller, its
// gate, which runs right after admit in handle.
func (b *Broker) admit(req *request) error {
	return req.conn.admitSASL(req.kreq.Key())
}
