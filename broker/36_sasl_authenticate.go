package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SaslAuthenticate: v0-2
//
// Carries one SASL message of the mechanism a SaslHandshake v1 chose, and
// the server's answer (sasl.go, broker/auth). A failed authentication is
// SASL_AUTHENTICATION_FAILED, answered after
// connection.failed.authentication.delay.ms, and closes the connection.
// The message says why only where that tells nothing about which users
// exist (an expired or invalid OAuth token: RFC 7628's error JSON).
//
// Version notes: v1 adds SessionLifetimeMs (KIP-368): the time until the
// client must re-authenticate, the shorter of connections.max.reauth.ms
// and its credential's remaining life, 0 when neither bounds it; v2
// flexible.
func init() { register(kmsg.SASLAuthenticate, 0, 2, (*Broker).handleSASLAuthenticate) }

func (b *Broker) handleSASLAuthenticate(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.SASLAuthenticateRequest)
	resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	out, lifetime, serr := req.conn.authenticate(b.ctx, r.SASLAuthBytes)
	if serr != nil {
		resp.ErrorCode, resp.ErrorMessage = serr.code, &serr.msg
		b.metrics.countError(kmsg.SASLAuthenticate, serr.code)
		req.conn.saslFailed(serr)
		return resp, nil
	}
	resp.SASLAuthBytes = out
	resp.SessionLifetimeMillis = lifetime.Milliseconds()
	return resp, nil
}
