package broker

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// saslBroker starts a broker with a PLAINTEXT listener (first, so the
// test helpers use it) and a SASL_PLAINTEXT one named SASL, offering every
// mechanism, with the bootstrap user admin/admin-pw and the PLAIN users
// file user file-user/file-pw.
func saslBroker(t *testing.T, mutate ...func(*Config)) *Broker {
	t.Helper()
	users := filepath.Join(t.TempDir(), "plain-users")
	if err := os.WriteFile(users, []byte("# PLAIN users\nfile-user:file-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return testBroker(t, "", append([]func(*Config){func(c *Config) {
		c.Listen = ""
		c.Listeners = []Listener{
			{Name: "PLAINTEXT", Security: Plaintext, Addr: "127.0.0.1:0"},
			{Name: "SASL", Security: SASLPlaintext, Addr: "127.0.0.1:0"},
		}
		c.SASL = SASLConfig{
			Mechanisms:        []string{"SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"},
			PlainUsersFile:    users,
			OAuthUnsecured:    true,
			BootstrapUser:     "admin",
			BootstrapPassword: "admin-pw",
		}
	}}, mutate...)...)
}

// saslPing connects to the SASL listener with mech and sends Metadata.
func saslPing(t *testing.T, b *Broker, mech sasl.Mechanism) error {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.ListenerAddr("SASL").String()), kgo.SASL(mech), kgo.DialTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	return err
}

func unsecuredJWT(sub string, exp time.Time) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none"}`)) + "." + enc(fmt.Appendf(nil, `{"sub":%q,"exp":%d}`, sub, exp.Unix())) + "."
}

// Every mechanism on a SASL_PLAINTEXT listener: the right secret
// authenticates, a wrong one is SASL_AUTHENTICATION_FAILED; a user created
// through AlterUserScramCredentials authenticates at once.
func TestSASLMechanisms(t *testing.T) {
	b := saslBroker(t)
	ok := map[string]sasl.Mechanism{
		"SCRAM-SHA-256 bootstrap user": scram.Auth{User: "admin", Pass: "admin-pw"}.AsSha256Mechanism(),
		"SCRAM-SHA-512 bootstrap user": scram.Auth{User: "admin", Pass: "admin-pw"}.AsSha512Mechanism(),
		"PLAIN file user":              plain.Auth{User: "file-user", Pass: "file-pw"}.AsMechanism(),
		"PLAIN metadata user":          plain.Auth{User: "admin", Pass: "admin-pw"}.AsMechanism(),
		"OAUTHBEARER unsecured":        oauth.Auth{Token: unsecuredJWT("svc", time.Now().Add(time.Hour))}.AsMechanism(),
	}
	for name, m := range ok {
		if err := saslPing(t, b, m); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := map[string]sasl.Mechanism{
		"SCRAM-SHA-256 wrong password":  scram.Auth{User: "admin", Pass: "nope"}.AsSha256Mechanism(),
		"SCRAM-SHA-512 unknown user":    scram.Auth{User: "nobody", Pass: "admin-pw"}.AsSha512Mechanism(),
		"PLAIN wrong file password":     plain.Auth{User: "file-user", Pass: "nope"}.AsMechanism(),
		"PLAIN wrong metadata password": plain.Auth{User: "admin", Pass: "nope"}.AsMechanism(),
	}
	for name, m := range bad {
		if err := saslPing(t, b, m); !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Errorf("%s: %v, want SASL_AUTHENTICATION_FAILED", name, err)
		}
	}
	err := saslPing(t, b, oauth.Auth{Token: unsecuredJWT("svc", time.Now().Add(-time.Minute))}.AsMechanism())
	if !errors.Is(err, kerr.SaslAuthenticationFailed) || !strings.Contains(err.Error(), "invalid_token") {
		t.Errorf("expired token: %v, want SASL_AUTHENTICATION_FAILED with invalid_token", err)
	}

	// A user created through the API authenticates at once; deleted, it
	// no longer does.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := testAdmin(t, b)
	if _, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: "carol", Mechanism: kadm.ScramSha512, Iterations: 4096, Password: "carol-pw"}}); err != nil {
		t.Fatal(err)
	}
	carol := scram.Auth{User: "carol", Pass: "carol-pw"}.AsSha512Mechanism()
	if err := saslPing(t, b, carol); err != nil {
		t.Fatalf("carol just created: %v", err)
	}
	if _, err := adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: "carol", Mechanism: kadm.ScramSha512}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := saslPing(t, b, carol); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("carol deleted: %v", err)
	}
}

// rawConn is a connection to the SASL listener that sends requests by
// hand.
type rawConn struct {
	t    *testing.T
	c    net.Conn
	corr int32
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c}
}

// roundTrip sends req and reads its response.
func (r *rawConn) roundTrip(req kmsg.Request) kmsg.Response {
	r.t.Helper()
	r.corr++
	writeFrames(r.t, r.c, r.corr, req)
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	frame := readFrame(r.t, r.c)
	resp := req.ResponseKind()
	body := frame[4:]
	if resp.IsFlexible() && req.Key() != int16(kmsg.ApiVersions) {
		body = body[1:]
	}
	if err := resp.ReadFrom(body); err != nil {
		r.t.Fatalf("decode %T: %v", resp, err)
	}
	return resp
}

// closed reports whether the broker closed the connection (within 5 s)
// without sending anything.
func (r *rawConn) closed() bool {
	r.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := r.c.Read(make([]byte, 1))
	return n == 0 && errors.Is(err, io.EOF)
}

func handshake(r *rawConn, version int16, mech string) *kmsg.SASLHandshakeResponse {
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Version, req.Mechanism = version, mech
	return r.roundTrip(req).(*kmsg.SASLHandshakeResponse)
}

func authenticate(r *rawConn, version int16, msg string) *kmsg.SASLAuthenticateResponse {
	req := kmsg.NewPtrSASLAuthenticateRequest()
	req.Version, req.SASLAuthBytes = version, []byte(msg)
	return r.roundTrip(req).(*kmsg.SASLAuthenticateResponse)
}

// What an unauthenticated connection may do: ApiVersions and the SASL
// requests, each in a frame of at most sasl.server.max.receive.size;
// anything else closes it. A failed authentication is answered after the
// failed authentication delay, and closes the connection.
func TestSASLBeforeAuthentication(t *testing.T) {
	b := saslBroker(t, func(c *Config) { c.SASL.FailedDelay = 300 * time.Millisecond })
	addr := b.ListenerAddr("SASL").String()

	r := dialRaw(t, addr)
	if av := r.roundTrip(kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse); av.ErrorCode != 0 {
		t.Fatalf("ApiVersions before authentication: %v", kerr.ErrorForCode(av.ErrorCode))
	}
	writeFrames(t, r.c, 9, kmsg.NewPtrMetadataRequest())
	if !r.closed() {
		t.Fatal("Metadata before authentication did not close the connection")
	}

	// 600 KiB announced: closed on the length alone, the body never sent.
	r = dialRaw(t, addr)
	r.c.Write(binary.BigEndian.AppendUint32(nil, 600<<10))
	if !r.closed() {
		t.Fatal("a 600 KiB frame before authentication did not close the connection")
	}
	// The same frame size on the PLAINTEXT listener is only a request.
	p := dialRaw(t, b.ListenerAddr("PLAINTEXT").String())
	p.c.Write(binary.BigEndian.AppendUint32(nil, 600<<10))
	p.c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := p.c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("plaintext listener: %v, want it waiting for the body", err)
	}

	// A wrong PLAIN password: SASL_AUTHENTICATION_FAILED, late, then EOF.
	r = dialRaw(t, addr)
	if hs := handshake(r, 1, "PLAIN"); hs.ErrorCode != 0 || len(hs.SupportedMechanisms) != 4 {
		t.Fatalf("handshake: %v %v", kerr.ErrorForCode(hs.ErrorCode), hs.SupportedMechanisms)
	}
	start := time.Now()
	au := authenticate(r, 2, "\x00admin\x00wrong")
	if took := time.Since(start); au.ErrorCode != kerr.SaslAuthenticationFailed.Code || took < 250*time.Millisecond {
		t.Fatalf("wrong password: %v after %s", kerr.ErrorForCode(au.ErrorCode), took)
	}
	if !r.closed() {
		t.Fatal("the connection stayed open after a failed authentication")
	}

	// An unknown mechanism is refused with the list, and closes too.
	r = dialRaw(t, addr)
	if hs := handshake(r, 1, "GSSAPI"); hs.ErrorCode != kerr.UnsupportedSaslMechanism.Code || len(hs.SupportedMechanisms) != 4 {
		t.Fatalf("GSSAPI: %v %v", kerr.ErrorForCode(hs.ErrorCode), hs.SupportedMechanisms)
	}
	if !r.closed() {
		t.Fatal("the connection stayed open after an unsupported mechanism")
	}

	// SaslHandshake v0: the token follows as a bare frame, the answer
	// too, and requests follow once authenticated.
	r = dialRaw(t, addr)
	if hs := handshake(r, 0, "PLAIN"); hs.ErrorCode != 0 {
		t.Fatal(kerr.ErrorForCode(hs.ErrorCode))
	}
	tok := []byte("\x00file-user\x00file-pw")
	r.c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(tok))), tok...))
	if answer := readFrame(t, r.c); len(answer) != 0 {
		t.Fatalf("v0 PLAIN answer %q, want empty", answer)
	}
	if md := r.roundTrip(kmsg.NewPtrMetadataRequest()).(*kmsg.MetadataResponse); len(md.Brokers) != 1 {
		t.Fatalf("metadata after v0 authentication: %d brokers", len(md.Brokers))
	}
	// On the PLAINTEXT listener, SASL requests are out of place.
	if hs := handshake(p2(t, b), 1, "PLAIN"); hs.ErrorCode != kerr.IllegalSaslState.Code {
		t.Fatalf("handshake on a plaintext listener: %v", kerr.ErrorForCode(hs.ErrorCode))
	}
}

func p2(t *testing.T, b *Broker) *rawConn { return dialRaw(t, b.ListenerAddr("PLAINTEXT").String()) }

// KIP-368: with connections.max.reauth.ms, SaslAuthenticate v1+ gives the
// session's lifetime; past it, a request other than SaslHandshake closes
// the connection; re-authenticating keeps it, but not as someone else.
// franz-go re-authenticates by itself.
func TestSASLReauthentication(t *testing.T) {
	b := saslBroker(t, func(c *Config) { c.SASL.ConnectionsMaxReauth = 1500 * time.Millisecond })
	addr := b.ListenerAddr("SASL").String()

	r := dialRaw(t, addr)
	handshake(r, 1, "PLAIN")
	if au := authenticate(r, 1, "\x00admin\x00admin-pw"); au.ErrorCode != 0 || au.SessionLifetimeMillis != 1500 {
		t.Fatalf("authenticate: %v, lifetime %d", kerr.ErrorForCode(au.ErrorCode), au.SessionLifetimeMillis)
	}
	// Re-authenticating as another user fails.
	if hs := handshake(r, 1, "PLAIN"); hs.ErrorCode != 0 {
		t.Fatalf("re-authentication handshake: %v", kerr.ErrorForCode(hs.ErrorCode))
	}
	if au := authenticate(r, 1, "\x00file-user\x00file-pw"); au.ErrorCode != kerr.SaslAuthenticationFailed.Code || !strings.Contains(*au.ErrorMessage, "Cannot change principals") {
		t.Fatalf("re-authentication as another user: %v", kerr.ErrorForCode(au.ErrorCode))
	}

	// A session past its end is closed on its next request; one
	// re-authenticated in time goes on.
	expired := dialRaw(t, addr)
	renewed := dialRaw(t, addr)
	for _, c := range []*rawConn{expired, renewed} {
		handshake(c, 1, "SCRAM-SHA-256")
		cl, first, _ := scram.Auth{User: "admin", Pass: "admin-pw"}.AsSha256Mechanism().Authenticate(context.Background(), addr)
		au := authenticate(c, 2, string(first))
		_, final, err := cl.Challenge(au.SASLAuthBytes)
		if err != nil {
			t.Fatal(err)
		}
		if au = authenticate(c, 2, string(final)); au.ErrorCode != 0 || au.SessionLifetimeMillis != 1500 {
			t.Fatalf("SCRAM: %v, lifetime %d", kerr.ErrorForCode(au.ErrorCode), au.SessionLifetimeMillis)
		}
	}
	time.Sleep(800 * time.Millisecond)
	handshake(renewed, 1, "PLAIN") // the mechanism may not change
	if !renewed.closed() {
		t.Fatal("a re-authentication with another mechanism kept the connection")
	}
	time.Sleep(900 * time.Millisecond)
	writeFrames(t, expired.c, 99, kmsg.NewPtrMetadataRequest())
	if !expired.closed() {
		t.Fatal("an expired session's Metadata did not close the connection")
	}

	// franz-go re-authenticates before the end of each session.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(scram.Auth{User: "admin", Pass: "admin-pw"}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 4 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
		cancel()
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		time.Sleep(700 * time.Millisecond)
	}
}

// OAUTHBEARER against a JWKS file with a key generated here: a token it
// signed authenticates, with the token's exp bounding the session; one
// signed by another key does not.
func TestSASLOAuthBearerJWKS(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pub, _ := key.PublicKey.Bytes()
	enc := base64.RawURLEncoding.EncodeToString
	set, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "EC", "kid": "k1", "crv": "P-256", "x": enc(pub[1:33]), "y": enc(pub[33:])}}})
	jwks := filepath.Join(t.TempDir(), "jwks.json")
	os.WriteFile(jwks, set, 0o600)
	b := saslBroker(t, func(c *Config) {
		c.SASL.OAuthUnsecured, c.SASL.OAuthJWKS = false, jwks
	})
	sign := func(k *ecdsa.PrivateKey, exp time.Time) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"sub": "svc", "exp": exp.Unix()})
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := saslPing(t, b, oauth.Auth{Token: sign(key, time.Now().Add(time.Hour))}.AsMechanism()); err != nil {
		t.Fatalf("signed token: %v", err)
	}
	if err := saslPing(t, b, oauth.Auth{Token: sign(other, time.Now().Add(time.Hour))}.AsMechanism()); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("token of another key: %v", err)
	}
	if err := saslPing(t, b, oauth.Auth{Token: unsecuredJWT("svc", time.Now().Add(time.Hour))}.AsMechanism()); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Fatalf("unsigned token against a JWKS: %v", err)
	}
	r := dialRaw(t, b.ListenerAddr("SASL").String())
	handshake(r, 1, "OAUTHBEARER")
	au := authenticate(r, 1, "n,,\x01auth=Bearer "+sign(key, time.Now().Add(20*time.Second))+"\x01\x01")
	if au.ErrorCode != 0 || au.SessionLifetimeMillis <= 0 || au.SessionLifetimeMillis > 20000 {
		t.Fatalf("session lifetime %d ms for a token expiring in 20 s (err %v)", au.SessionLifetimeMillis, kerr.ErrorForCode(au.ErrorCode))
	}
}

// max.connections.per.ip: connections over the bound are closed at once,
// and a closed one makes room.
func TestMaxConnectionsPerIP(t *testing.T) {
	b := testBroker(t, "", func(c *Config) { c.MaxConnectionsPerIP = 2 })
	addr := b.Addr().String()
	first, second := dialRaw(t, addr), dialRaw(t, addr)
	for _, c := range []*rawConn{first, second} {
		c.roundTrip(kmsg.NewPtrApiVersionsRequest())
	}
	if !dialRaw(t, addr).closed() {
		t.Fatal("a third connection from one address stayed open")
	}
	first.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := dialRaw(t, addr)
		writeFrames(t, c.c, 1, kmsg.NewPtrApiVersionsRequest())
		c.c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := c.c.Read(make([]byte, 4)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no room after a connection closed")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lockedBuffer is a log destination for a broker's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Failed authentications are counted, every one, in
// strata_sasl_authentications_total, but a host failing in a loop is
// logged once per clientLogInterval, the next line saying how many were
// held back; so is one sending frames it may not send before it
// authenticates. Successes are counted too.
func TestSASLFailuresCountedLogHeldBack(t *testing.T) {
	reg := prometheus.NewRegistry()
	var logs lockedBuffer
	b := saslBroker(t, func(c *Config) {
		c.SASL.FailedDelay = time.Millisecond
		c.Registerer = reg
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	addr := b.ListenerAddr("SASL").String()
	const failures = 20
	for range failures {
		r := dialRaw(t, addr)
		if h := handshake(r, 1, "PLAIN"); h.ErrorCode != 0 {
			t.Fatalf("handshake: %v", kerr.ErrorForCode(h.ErrorCode))
		}
		if a := authenticate(r, 1, "\x00admin\x00wrong-pw"); a.ErrorCode != kerr.SaslAuthenticationFailed.Code {
			t.Fatalf("wrong password: %v, want SASL_AUTHENTICATION_FAILED", kerr.ErrorForCode(a.ErrorCode))
		}
		if !r.closed() {
			t.Fatal("the connection stayed open after a failed authentication")
		}
	}
	for range failures {
		r := dialRaw(t, addr)
		writeFrames(t, r.c, 1, kmsg.NewPtrMetadataRequest())
		if !r.closed() {
			t.Fatal("Metadata before authentication did not close the connection")
		}
	}
	if err := saslPing(t, b, plain.Auth{User: "admin", Pass: "admin-pw"}.AsMechanism()); err != nil {
		t.Fatalf("right password: %v", err)
	}

	failed := counterValue(t, reg, "strata_sasl_authentications_total", map[string]string{"mechanism": "PLAIN", "result": "failure"})
	succeeded := counterValue(t, reg, "strata_sasl_authentications_total", map[string]string{"mechanism": "PLAIN", "result": "success"})
	if failed != failures || succeeded != 1 {
		t.Errorf("strata_sasl_authentications_total: %v failures and %v successes, want %d and 1", failed, succeeded, failures)
	}
	out := logs.String()
	if n := strings.Count(out, "SASL authentication failed"); n != 1 {
		t.Errorf("%d failed authentications logged %d lines, want 1 per %s:\n%s", failures, n, clientLogInterval, out)
	}
	if n := strings.Count(out, "closing unauthenticated connection"); n > 1 {
		t.Errorf("%d refused unauthenticated requests logged %d lines, want at most 1 per %s", failures, n, clientLogInterval)
	}
	if strings.Contains(out, "wrong-pw") {
		t.Error("the log holds the password tried")
	}
}
