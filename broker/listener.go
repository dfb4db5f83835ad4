package broker

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"time"

	"strata/internal/certs"
	"strata/meta"
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
	batcher := &tlsBatcher{Conn: nc}
	tc := tls.Server(batcher, l.tls)
	hctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		return nil, "", fmt.Errorf("tls handshake: %w", err)
	}
	principal := anonymous
	if st := tc.ConnectionState(); l.security == SSL && len(st.VerifiedChains) > 0 {
		principal = certs.Principal(st.VerifiedChains[0][0])
	}
	return batchedTLS{Conn: tc, b: batcher}, principal, nil
}

// endpoints are this broker's advertised listeners, as it registers them.
// A broker with only the default listener registers none: its Host and
// Port say it all, as they did before there were several.
func (b *Broker) endpoints() []meta.Endpoint {
	if len(b.listeners) == 1 && b.listeners[0].name == DefaultListenerName {
		return nil
	}
	var out []meta.Endpoint
	for _, l := range b.listeners {
		out = append(out, meta.Endpoint{Name: l.name, Host: l.advHost, Port: l.advPort, Security: string(l.security)})
	}
	return out
}

// endpoint is the host and port of br that a client connected on c's
// listener is told: br's endpoint of the same name, or its inter-broker
// address when it has none (a broker configured otherwise, or registered
// before it had listeners). A request without a connection (an internal
// caller) gets the inter-broker address.
func (c *conn) endpoint(br meta.Broker) (string, int32) {
	if c == nil || c.listener == nil {
		return br.Host, br.Port
	}
	return br.Endpoint(c.listener.name)
}

// securityCode is a protocol's code in BrokerRegistration (Kafka's
// SecurityProtocol ids).
func securityCode(s Security) int16 {
	switch s {
	case SSL:
		return 1
	case SASLPlaintext:
		return 2
	case SASLSSL:
		return 3
	}
	return 0
}

// securityName is the protocol of a BrokerRegistration code.
func securityName(code int16) Security {
	switch code {
	case 1:
		return SSL
	case 2:
		return SASLPlaintext
	case 3:
		return SASLSSL
	}
	return Plaintext
}
