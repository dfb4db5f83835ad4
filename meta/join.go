package meta

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// A broker-only node knows the voters' raft addresses (--voters) and
// nothing else, so it asks to join through the raft port itself: the
// voters' stream layer sends a connection whose first byte is joinMagic to
// the join handler instead of to raft (whose own connections start with an
// RPC type, 0 to 4). The request is one JSON line, {"ID":n,"Addr":"h:p"};
// the answer is one JSON line, {"OK":true}, or {"Leader":"h:p"} naming the
// controller's raft address when the node asked is not the controller, or
// {"Err":"..."}.
const joinMagic = 'J'

type joinRequest struct {
	ID   int32
	Addr string
}

type joinReply struct {
	OK     bool   `json:",omitempty"`
	Leader string `json:",omitempty"`
	Err    string `json:",omitempty"`
	// Duplicate says the node id belongs to a live broker at another
	// raft address: a second process started with the same id.
	Duplicate bool `json:",omitempty"`
}

// muxStream is the raft transport's stream layer with the join handler in
// front of it.
type muxStream struct {
	ln     net.Listener
	tls    raftTLS
	adv    net.Addr
	conns  chan net.Conn
	join   func(net.Conn)
	voters func(net.Conn) // answers a votersMagic query (voters.go)
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	logger *slog.Logger
	// lastRefused is when a refused TLS handshake was last logged (unix
	// nanoseconds): a stranger knocking in a loop gets one line per
	// refusedLogEvery, not one per attempt.
	lastRefused atomic.Int64
}

// refusedLogEvery bounds the log lines of refused raft handshakes.
const refusedLogEvery = 10 * time.Second

var _ raft.StreamLayer = (*muxStream)(nil)

// peekTimeout bounds how long an accepted connection may take to send its
// first byte.
const peekTimeout = 10 * time.Second

func newMuxStream(bind string, adv net.Addr, t raftTLS, join, voters func(net.Conn), logger *slog.Logger) (*muxStream, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if adv == nil {
		adv = ln.Addr()
		if tcp, ok := adv.(*net.TCPAddr); ok && tcp.IP.IsUnspecified() {
			ln.Close()
			return nil, fmt.Errorf("raft listener %s: an unspecified address needs an advertised one", bind)
		}
	}
	m := &muxStream{ln: ln, tls: t, adv: adv, conns: make(chan net.Conn), join: join, voters: voters, done: make(chan struct{}), logger: logger}
	m.wg.Add(1)
	go m.acceptLoop()
	return m, nil
}

func (m *muxStream) acceptLoop() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.route(c)
		}()
	}
}

// route completes TLS when the port has it, reads a connection's first
// byte and hands it to the join handler or, with that byte put back, to
// raft. A peer that fails the handshake (no certificate, or one the
// cluster CA did not sign) reaches neither.
func (m *muxStream) route(raw net.Conn) {
	c, err := m.tls.accept(raw)
	if err != nil {
		now, last := time.Now().UnixNano(), m.lastRefused.Load()
		if now-last >= int64(refusedLogEvery) && m.lastRefused.CompareAndSwap(last, now) {
			m.logger.Warn("raft port: refused a connection that failed TLS", "remote", raw.RemoteAddr().String(), "err", err)
		}
		raw.Close()
		return
	}
	c.SetReadDeadline(time.Now().Add(peekTimeout))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return
	}
	switch first[0] {
	case joinMagic:
		br.Discard(1)
		m.join(&bufferedConn{Conn: c, r: br})
		return
	case votersMagic:
		br.Discard(1)
		m.voters(&bufferedConn{Conn: c, r: br})
		return
	}
	select {
	case m.conns <- &bufferedConn{Conn: c, r: br}:
	case <-m.done:
		c.Close()
	}
}

func (m *muxStream) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case <-m.done:
		return nil, net.ErrClosed
	}
}

func (m *muxStream) Close() error {
	var err error
	m.once.Do(func() {
		close(m.done)
		err = m.ln.Close()
	})
	return err
}

func (m *muxStream) Addr() net.Addr { return m.adv }

func (m *muxStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return m.tls.dial(context.Background(), string(address), timeout)
}

// bufferedConn is a connection whose first bytes were read ahead.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// handleJoin answers one join request: the controller adds the node as a
// non-voter; any other voter names the controller.
func (s *Store) handleJoin(c net.Conn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	var req joinRequest
	line, err := bufio.NewReader(io.LimitReader(c, 4096)).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &req)
	}
	var reply joinReply
	started := false
	select {
	case <-s.raftReady:
		started = true
	case <-time.After(10 * time.Second):
	}
	switch {
	case err != nil:
		reply.Err = fmt.Sprintf("bad join request: %v", err)
	case !started:
		reply.Err = "this voter is still starting"
	case !s.IsLeader():
		addr, _ := s.raft.LeaderWithID()
		reply.Leader = string(addr)
		if reply.Leader == "" {
			reply.Err = "no controller elected yet"
		}
	case s.liveElsewhere(req.ID, req.Addr):
		reply.Err = fmt.Sprintf("node id %d is registered by a live broker at another address", req.ID)
		reply.Duplicate = true
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := s.AddNonvoter(ctx, req.ID, req.Addr)
		cancel()
		if err != nil {
			reply.Err = err.Error()
		} else {
			reply.OK = true
		}
	}
	b, _ := json.Marshal(reply)
	c.Write(append(b, '\n'))
}

// liveElsewhere reports whether node id is a broker the controller holds
// alive whose raft address is not addr: a second process claiming the id.
// The same address is a restart of the same node, which registration
// tells apart by its incarnation.
func (s *Store) liveElsewhere(id int32, addr string) bool {
	b, ok := s.State().Brokers[id]
	if !ok || b.Fenced || b.ShuttingDown || s.ctl.expired(id, s.ctl.now()) {
		return false
	}
	f := s.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	for _, srv := range f.Configuration().Servers {
		if srv.ID == serverID(id) {
			return srv.Address != raft.ServerAddress(addr)
		}
	}
	return false
}

// join asks the voters, in turn, to add this broker-only node as a
// non-voter, until one has or ctx ends. A node already in the
// configuration asks too: the controller moves it if its address changed,
// and otherwise does nothing. A live broker holding the node id refuses
// the join; that is retried for one and a half session timeouts (a killed
// previous life of this node is fenced by then) and then returned as
// ErrDuplicateBroker.
func join(ctx context.Context, t raftTLS, self Voter, voters []Voter, session time.Duration, logger *slog.Logger) error {
	backoff := 100 * time.Millisecond
	var lastWarn, dupSince time.Time
	for {
		for _, v := range voters {
			addr := v.Addr
			for hops := 0; addr != "" && hops < 3; hops++ {
				r, err := askJoin(ctx, t, addr, self)
				if r.Duplicate {
					if dupSince.IsZero() {
						dupSince = time.Now()
					}
					if time.Since(dupSince) > session*3/2 {
						return fmt.Errorf("%w: node id %d is registered by a live broker at another address", ErrDuplicateBroker, self.ID)
					}
					break
				}
				if err != nil {
					if time.Since(lastWarn) > 10*time.Second {
						logger.Info("asking to join the metadata quorum", "voter", addr, "err", err)
						lastWarn = time.Now()
					}
					break
				}
				if r.OK {
					logger.Info("joined the metadata quorum as a non-voter", "via", addr)
					return nil
				}
				addr = r.Leader
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (joining it): %w", ErrStoppedWaiting, context.Cause(ctx))
		case <-t.C:
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

func askJoin(ctx context.Context, t raftTLS, addr string, self Voter) (joinReply, error) {
	c, err := t.dial(ctx, addr, 2*time.Second)
	if err != nil {
		return joinReply{}, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(25 * time.Second))
	b, _ := json.Marshal(joinRequest{ID: self.ID, Addr: self.Addr})
	if _, err := c.Write(append([]byte{joinMagic}, append(b, '\n')...)); err != nil {
		return joinReply{}, err
	}
	line, err := bufio.NewReader(io.LimitReader(c, 4096)).ReadBytes('\n')
	if err != nil {
		if t.client == nil && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)) {
			// A voter whose raft port runs over TLS hangs up on a
			// plaintext join without a word: say what is likely wrong.
			err = fmt.Errorf("%w (the voter hung up: if the cluster's raft port runs over TLS, this node needs --tls-cert-file, --tls-key-file and --tls-ca-file of the cluster's CA)", err)
		}
		return joinReply{}, err
	}
	var r joinReply
	if err := json.Unmarshal(line, &r); err != nil {
		return joinReply{}, fmt.Errorf("join answer from %s: %w", addr, err)
	}
	if r.Err != "" {
		return r, fmt.Errorf("%s: %s", addr, r.Err)
	}
	return r, nil
}
