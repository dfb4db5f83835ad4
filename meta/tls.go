package meta

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"
)

// raftTLS is the raft port's TLS (Config.TLS and Config.DialTLS): the
// raft stream, the join handler and the voters query all run inside it,
// so a node without a certificate the cluster CA signed can neither join
// the quorum nor read it. Both nil is plaintext.
type raftTLS struct {
	server, client *tls.Config
}

// dial connects to a node's raft port, through TLS when configured, with
// the handshake done within timeout (or ctx).
func (t raftTLS) dial(ctx context.Context, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil || t.client == nil {
		return c, err
	}
	cfg := t.client
	if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
		// A config that verifies by name needs one: the host dialled.
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(c, cfg)
	hctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("raft tls to %s: %w", addr, err)
	}
	return tc, nil
}

// accept completes the server side of TLS on an accepted raft
// connection within peekTimeout; without TLS it returns c.
func (t raftTLS) accept(c net.Conn) (net.Conn, error) {
	if t.server == nil {
		return c, nil
	}
	tc := tls.Server(c, t.server)
	ctx, cancel := context.WithTimeout(context.Background(), peekTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return tc, nil
}

func (c *Config) validateTLS() error {
	if (c.TLS == nil) != (c.DialTLS == nil) {
		return errors.New("meta: Config.TLS and Config.DialTLS: set both (the raft port's server and client sides) or neither")
	}
	if c.TLS != nil && c.RaftAddr == "" {
		return errors.New("meta: Config.TLS needs a raft listener (RaftAddr)")
	}
	return nil
}
