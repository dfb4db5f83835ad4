package broker

import (
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SaslHandshake: v0-1
//
// Chooses the SASL mechanism of the authentication that follows, on a SASL
// listener (sasl.go): the response lists the mechanisms offered. After v1
// the client sends SaslAuthenticate requests; after v0 (clients before
// KIP-152) it sends bare SASL tokens framed by a 4-byte length. On an
// authenticated connection whose session expires (KIP-368) it begins a
// re-authentication with the same mechanism.
//
// An unknown mechanism is UNSUPPORTED_SASL_MECHANISM and closes the
// connection, after the failed authentication delay, as Kafka does; a
// handshake out of turn is ILLEGAL_SASL_STATE. On a listener without SASL
// it is ILLEGAL_SASL_STATE too.
//
// Not done: GSSAPI (Kerberos) and the raw GSSAPI tokens sent without a
// handshake (removed in Kafka 4.0, KIP-896).
func init() { register(kmsg.SASLHandshake, 0, 1, (*Broker).handleSASLHandshake) }

func (b *Broker) handleSASLHandshake(req *request) (kmsg.Response, error) {
	r := req.kreq.(*kmsg.SASLHandshakeRequest)
	resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
	if b.sasl != nil {
		resp.SupportedMechanisms = b.sasl.names
	}
	if serr := req.conn.handshake(r.Mechanism, r.Version); serr != nil {
		resp.ErrorCode = serr.code
		b.metrics.countError(kmsg.SASLHandshake, serr.code)
		req.conn.saslFailed(serr)
	}
	return resp, nil
}
