package broker

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"time"

	"strata/internal/certs"
)

// listener is one of the broker's named Kafka listeners (Config.Listeners):
// what a connection accepted on it needs to know of it.
type listener struct {
	name     string
	security Security
	// tls is the server TLS configuration of an SSL or SASL_SSL
	// listener, nil on a plaintext one.
	tls *tls.Config
	ln  net.Listener
	// advHost and advPort are what Metadata, FindCoordinator and
	// DescribeCluster tell this listener's clients about this broker.
	advHost string
	advPort int32
}

func (l *listener) advertised() string {
	return net.JoinHostPort(l.advHost, strconv.Itoa(int(l.advPort)))
}

// tlsHandshakeTimeout bounds a TLS handshake: a client that connects and
// says nothing, or says it slowly, is closed before it gets a chance to
// send a request (which the idle timeout would otherwise allow for
// minutes).
const tlsHandshakeTimeout = 10 * time.Second

// handshake wraps a connection accepted on a TLS listener and completes
// the handshake within tlsHandshakeTimeout, and returns the connection to
// read requests from and the principal its client certificate gives: on
// an SSL listener, a verified client certificate's subject (certs.Principal);
// otherwise anonymous, until SASL says otherwise.
func (l *listener) handshake(ctx context.Context, nc net.Conn) (net.Conn, string, error) {
	if l.tls == nil {
		return nc, anonymous, nil
	}
	tc := tls.Server(nc, l.tls)
	hctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		return nil, "", fmt.Errorf("tls handshake: %w", err)
	}
	principal := anonymous
	if st := tc.ConnectionState(); l.security == SSL && len(st.VerifiedChains) > 0 {
		principal = certs.Principal(st.VerifiedChains[0][0])
	}
	return tc, principal, nil
}
