package broker

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"strata/broker/auth"
	"strata/meta"
)

// SASL on the broker's side of the wire: which mechanisms a SASL listener
// offers, and each connection's authentication state. The mechanisms
// themselves are broker/auth's; the two APIs (17_sasl_handshake.go,
// 36_sasl_authenticate.go) are thin adapters over the conn methods here.
//
// A connection on a SASL listener starts unauthenticated: it may send
// ApiVersions, SaslHandshake and SaslAuthenticate only (admitSASL), each
// frame within SASLConfig.MaxReceiveSize (preAuthLimit). SaslHandshake v1
// is followed by SaslAuthenticate requests; v0 by bare SASL tokens framed
// by a 4-byte length (rawSASL), as clients before KIP-152 send them. A
// failed authentication is answered after SASLConfig.FailedDelay, and the
// connection is then closed (Kafka's connection.failed.authentication.
// delay.ms), which slows a password-guessing client down without holding
// anything but its goroutine. With re-authentication (KIP-368), a session
// ends after ConnectionsMaxReauth or when its credential expires,
// whichever is first; a connection past its end that sends anything but a
// SaslHandshake is closed, and a re-authentication may not change the
// principal or the mechanism.

// SASLConfig configures authentication on the SASL listeners.
type SASLConfig struct {
	// Mechanisms are offered on SASL listeners: PLAIN, SCRAM-SHA-256,
	// SCRAM-SHA-512, OAUTHBEARER. Empty means DefaultSASLMechanisms.
	Mechanisms []string
	// PlainUsersFile holds PLAIN's users, one user:password a line; PLAIN
	// also checks the metadata's SCRAM users the file does not name.
	PlainUsersFile string
	// OAuthJWKS is the JWKS file or URL that OAUTHBEARER tokens are
	// checked against; OAuthUnsecured accepts Kafka's unsigned
	// development tokens instead.
	OAuthJWKS      string
	OAuthUnsecured bool
	// ConnectionsMaxReauth is connections.max.reauth.ms: the longest a
	// session lasts before the client must re-authenticate. Zero means
	// sessions last as long as their credential (forever for passwords).
	ConnectionsMaxReauth time.Duration
	// MaxReceiveSize bounds every frame before authentication
	// (sasl.server.max.receive.size). Zero means 512 KiB, Kafka's.
	MaxReceiveSize int32
	// FailedDelay is connection.failed.authentication.delay.ms. Zero
	// means Kafka's 100 ms; negative means no delay.
	FailedDelay time.Duration
	// BootstrapUser and BootstrapPassword, when set, name a SCRAM user
	// (both mechanisms) created at start when it does not exist, so that
	// the first administrator needs no unauthenticated door.
	BootstrapUser     string
	BootstrapPassword string
}

// Defaults of SASLConfig.
const (
	DefaultSASLMaxReceiveSize = 512 << 10
	DefaultSASLFailedDelay    = 100 * time.Millisecond
)

// DefaultSASLMechanisms are offered when none are configured.
var DefaultSASLMechanisms = []string{auth.ScramSHA256, auth.ScramSHA512}

func (c SASLConfig) withDefaults() SASLConfig {
	if len(c.Mechanisms) == 0 {
		c.Mechanisms = slices.Clone(DefaultSASLMechanisms)
	}
	if c.MaxReceiveSize == 0 {
		c.MaxReceiveSize = DefaultSASLMaxReceiveSize
	}
	if c.FailedDelay == 0 {
		c.FailedDelay = DefaultSASLFailedDelay
	}
	return c
}

func (c SASLConfig) validate() error {
	for _, m := range c.Mechanisms {
		switch m {
		case auth.PlainName, auth.ScramSHA256, auth.ScramSHA512:
		case auth.OAuthBearerName:
			if (c.OAuthJWKS == "") == !c.OAuthUnsecured {
				return errors.New("sasl: OAUTHBEARER needs exactly one of a JWKS and the unsecured validator")
			}
		default:
			return fmt.Errorf("sasl mechanism %q: want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", m)
		}
	}
	if c.MaxReceiveSize < 1024 {
		return fmt.Errorf("sasl max receive size %d: must be at least 1024", c.MaxReceiveSize)
	}
	if c.ConnectionsMaxReauth < 0 {
		return fmt.Errorf("connections max reauth %s: must not be negative", c.ConnectionsMaxReauth)
	}
	if (c.BootstrapUser == "") != (c.BootstrapPassword == "") {
		return errors.New("sasl bootstrap user: needs both a name and a password")
	}
	if strings.ContainsAny(c.BootstrapUser, ",=") {
		return fmt.Errorf("sasl bootstrap user %q: ',' and '=' are not allowed", c.BootstrapUser)
	}
	return nil
}

// interBrokerSecurity is the inter-broker listener's protocol.
func (c Config) interBrokerSecurity() Security {
	for _, l := range c.Listeners {
		if l.Name == c.InterBrokerListener {
			return l.Security
		}
	}
	return ""
}

// validateSASL checks the SASL settings against the listeners: a SASL
// inter-broker listener needs the bootstrap user, as which the brokers
// authenticate to each other with SCRAM-SHA-512 (or PeerOpts of the
// embedder's own).
func (c Config) validateSASL() error {
	if err := c.SASL.validate(); err != nil {
		return err
	}
	if !c.interBrokerSecurity().SASL() {
		return nil
	}
	if c.SASL.BootstrapUser == "" && len(c.PeerOpts) == 0 {
		return fmt.Errorf("inter-broker listener %s is %s: brokers authenticate to each other as the SASL bootstrap user, so one must be set", c.InterBrokerListener, c.interBrokerSecurity())
	}
	if c.SASL.BootstrapUser != "" && !slices.Contains(c.SASL.Mechanisms, auth.ScramSHA512) {
		return fmt.Errorf("inter-broker listener %s is %s: brokers authenticate with SCRAM-SHA-512, which the SASL mechanisms must include", c.InterBrokerListener, c.interBrokerSecurity())
	}
	return nil
}

// InterBrokerPrincipal is the principal other brokers authenticate as on a
// SASL inter-broker listener ("User:" and the bootstrap user), which the
// authorizer treats as a super user; empty when brokers do not
// authenticate with SASL.
func (c Config) InterBrokerPrincipal() string {
	if !c.interBrokerSecurity().SASL() || c.SASL.BootstrapUser == "" {
		return ""
	}
	return "User:" + c.SASL.BootstrapUser
}

// interBrokerSASL is the client option with which this broker
// authenticates to the others' inter-broker listener: SCRAM-SHA-512 as the
// bootstrap user, when that listener is SASL.
func (c Config) interBrokerSASL() []kgo.Opt {
	if c.InterBrokerPrincipal() == "" {
		return nil
	}
	return []kgo.Opt{kgo.SASL(scram.Auth{User: c.SASL.BootstrapUser, Pass: c.SASL.BootstrapPassword}.AsSha512Mechanism())}
}

// saslServer is the mechanisms this broker offers.
type saslServer struct {
	mechs map[string]auth.Mechanism
	names []string // in the configured order, as SaslHandshake lists them
}

// metaCredentials finds SCRAM credentials in this node's metadata, which
// every broker applies: a credential the controller committed is usable
// here once this node applied it.
type metaCredentials struct{ b *Broker }

func (m metaCredentials) ScramCredential(user, mechanism string) (auth.ScramCredential, bool) {
	c, ok := m.b.meta.State().ScramCredential(user, mechanism)
	if !ok {
		return auth.ScramCredential{}, false
	}
	return auth.ScramCredential{Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey, Iterations: int(c.Iterations)}, true
}

// startSASL builds the configured mechanisms.
func (b *Broker) startSASL(ctx context.Context) error {
	cfg := b.cfg.SASL
	mechs, err := auth.New(ctx, auth.Config{
		Mechanisms:     cfg.Mechanisms,
		Credentials:    metaCredentials{b},
		PlainUsersFile: cfg.PlainUsersFile,
		OAuthJWKS:      cfg.OAuthJWKS,
		OAuthUnsecured: cfg.OAuthUnsecured,
	})
	if err != nil {
		return fmt.Errorf("sasl: %w", err)
	}
	b.sasl = &saslServer{mechs: mechs, names: slices.Clone(cfg.Mechanisms)}
	return nil
}

// saslConn is one connection's authentication state. Only its
// connection's goroutine touches it.
type saslConn struct {
	// mechanism is the one of the exchange in progress, or of the
	// session once authenticated.
	mechanism string
	// exchange is the authentication in progress, nil between them.
	exchange auth.Exchange
	// raw: SaslHandshake v0 was answered, so the next frames are bare
	// SASL tokens, not requests.
	raw bool
	// user is who the connection authenticated as; empty until then.
	user string
	// expires ends the session (KIP-368); zero when it does not end.
	expires time.Time
	// failed: the response being written is a failure's, after which
	// the connection closes.
	failed bool
}

func (s *saslConn) authenticated() bool { return s.user != "" }

// clientLogInterval is how often the log tells of one client host's
// failed authentications and refused frames before it authenticates.
const clientLogInterval = 10 * time.Second

// host is the client's address without its port: the key of what is
// held back from the log, for a guesser opens a new port each time.
func (c *conn) host() string {
	if h, _, err := net.SplitHostPort(c.remote); err == nil {
		return h
	}
	return c.remote
}

// unauthenticated reports whether the connection must authenticate and
// has not yet.
func (c *conn) unauthenticated() bool { return c.saslListener() && !c.sasl.authenticated() }

// saslListener reports whether the connection must authenticate.
func (c *conn) saslListener() bool { return c.listener != nil && c.listener.security.SASL() }

// preAuthLimit is the largest frame the connection may send now: the
// SASL receive size before authentication, 0 (no limit of its own) after.
func (c *conn) preAuthLimit() int32 {
	if !c.saslListener() || c.sasl.authenticated() {
		return 0
	}
	return c.b.cfg.SASL.MaxReceiveSize
}

// admitSASL refuses, by closing the connection, a request that the
// connection's authentication state does not allow: anything but
// ApiVersions, SaslHandshake and SaslAuthenticate before authentication,
// and anything but a SaslHandshake (which begins re-authentication) once
// its session has expired.
func (c *conn) admitSASL(key int16) error {
	if !c.saslListener() {
		return nil
	}
	switch kmsg.Key(key) {
	case kmsg.SASLHandshake, kmsg.SASLAuthenticate:
		return nil
	case kmsg.ApiVersions:
		if !c.sasl.authenticated() {
			return nil
		}
	}
	if !c.sasl.authenticated() {
		return fmt.Errorf("%s before SASL authentication", apiName(key))
	}
	if !c.sasl.expires.IsZero() && !time.Now().Before(c.sasl.expires) {
		return fmt.Errorf("%s after the SASL session of %s expired without re-authentication", apiName(key), c.principal)
	}
	return nil
}

// saslError is a SASL request's failure: its code and message for the
// response, and whether the connection closes after it (after the failed
// authentication delay).
type saslError struct {
	code  int16
	msg   string
	close bool
}

func (c *conn) illegalState(format string, args ...any) *saslError {
	return &saslError{code: kerr.IllegalSaslState.Code, msg: fmt.Sprintf(format, args...), close: !c.sasl.authenticated()}
}

// handshake begins an authentication (or a re-authentication) with
// mechanism. v0 makes the next frames bare tokens.
func (c *conn) handshake(mechanism string, version int16) *saslError {
	s := &c.sasl
	b := c.b
	switch {
	case !c.saslListener():
		return &saslError{code: kerr.IllegalSaslState.Code, msg: "this listener does not use SASL"}
	case s.exchange != nil:
		return c.illegalState("a SASL authentication is already in progress")
	case s.authenticated() && s.expires.IsZero():
		return c.illegalState("SaslHandshake after successful authentication: this session does not expire, so there is nothing to re-authenticate")
	case s.authenticated() && version < 1:
		return &saslError{code: kerr.IllegalSaslState.Code, msg: "re-authentication needs SaslHandshake v1", close: true}
	case s.authenticated() && mechanism != s.mechanism:
		return &saslError{code: kerr.IllegalSaslState.Code, close: true,
			msg: fmt.Sprintf("SASL mechanism '%s' requested by client is not supported for re-authentication of mechanism '%s'", mechanism, s.mechanism)}
	}
	m, ok := b.sasl.mechs[mechanism]
	if !ok {
		return &saslError{code: kerr.UnsupportedSaslMechanism.Code, close: true,
			msg: fmt.Sprintf("Unsupported SASL mechanism %s (enabled: %s)", mechanism, strings.Join(b.sasl.names, ", "))}
	}
	s.mechanism = mechanism
	s.exchange = m.Start()
	s.raw = version == 0
	return nil
}

// authenticate takes the client's next SASL message of a SaslAuthenticate
// request and returns the server's answer and, once authenticated, the
// session's lifetime.
func (c *conn) authenticate(ctx context.Context, in []byte) (out []byte, lifetime time.Duration, serr *saslError) {
	if !c.saslListener() || c.sasl.exchange == nil || c.sasl.raw {
		return nil, 0, c.illegalState("SaslAuthenticate without a SaslHandshake v1 before it")
	}
	return c.saslStep(ctx, in)
}

// saslStep steps the exchange in progress.
func (c *conn) saslStep(ctx context.Context, in []byte) (out []byte, lifetime time.Duration, serr *saslError) {
	s := &c.sasl
	reauth := s.authenticated()
	out, done, err := s.exchange.Step(ctx, in)
	if err == nil && done {
		sess := s.exchange.Session()
		if reauth && sess.User != s.user {
			err = &auth.Failure{Reason: fmt.Sprintf("Cannot change principals during re-authentication from User:%s: User:%s", s.user, sess.User)}
		} else {
			lifetime = c.startSession(sess)
		}
	}
	if err != nil {
		s.exchange = nil
		c.b.metrics.authentications.WithLabelValues(s.mechanism, "failure", strconv.FormatBool(reauth)).Inc()
		if ok, held := c.b.clientLog.allow(c.host()); ok {
			c.b.log.Info("SASL authentication failed", "remote", c.remote, "mechanism", s.mechanism, "reauthentication", reauth, "err", err,
				"held_back", held)
		}
		return nil, 0, &saslError{code: kerr.SaslAuthenticationFailed.Code, msg: auth.ClientMessage(s.mechanism, reauth, err), close: true}
	}
	if done {
		c.b.metrics.authentications.WithLabelValues(s.mechanism, "success", strconv.FormatBool(reauth)).Inc()
	}
	if out == nil {
		out = []byte{}
	}
	return out, lifetime, nil
}

// startSession records a successful authentication and returns the
// session's lifetime: the shorter of connections.max.reauth.ms and the
// time left to the credential's expiry, zero when neither bounds it
// (Kafka's calcCompletionTimesAndReturnSessionLifetimeMs).
func (c *conn) startSession(sess auth.Session) time.Duration {
	s := &c.sasl
	now := time.Now()
	var lifetime time.Duration
	maxReauth := c.b.cfg.SASL.ConnectionsMaxReauth
	switch {
	case !sess.Expires.IsZero() && maxReauth > 0:
		lifetime = min(sess.Expires.Sub(now), maxReauth)
	case !sess.Expires.IsZero():
		lifetime = sess.Expires.Sub(now)
	default:
		lifetime = maxReauth
	}
	s.expires = time.Time{}
	if !sess.Expires.IsZero() || maxReauth > 0 {
		lifetime = max(lifetime, 0)
		s.expires = now.Add(lifetime)
	}
	s.exchange = nil
	s.user = sess.User
	c.principal = "User:" + sess.User
	return lifetime
}

// failDelay waits connection.failed.authentication.delay.ms before a
// failure is answered, or until the broker closes.
func (c *conn) failDelay() {
	d := c.b.cfg.SASL.FailedDelay
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.b.ctx.Done():
	}
}

// rawSASL handles one bare SASL token after SaslHandshake v0: a 4-byte
// length, at most the pre-authentication frame size, then the token; the
// answer goes back framed the same way. A failure closes the connection
// after the failed authentication delay, with nothing written: the raw
// protocol has no way to say why.
func (c *conn) rawSASL() error {
	var sizeBuf [4]byte
	if _, err := io.ReadFull(c.r, sizeBuf[:]); err != nil {
		return fmt.Errorf("reading a SASL token: %w", err)
	}
	size := int32(binary.BigEndian.Uint32(sizeBuf[:]))
	limit := c.b.cfg.SASL.MaxReceiveSize
	if size < 0 || size > limit {
		return fmt.Errorf("%w: SASL token of %d bytes (sasl.server.max.receive.size %d)", errFrameTooLarge, uint32(size), limit)
	}
	if err := c.reserve(int64(size)); err != nil {
		return err
	}
	defer c.release()
	token, err := c.readBody(int(size))
	if err != nil {
		return err
	}
	out, _, serr := c.saslStep(c.b.ctx, token)
	if serr != nil {
		c.failDelay()
		return errors.New(serr.msg)
	}
	if c.sasl.exchange == nil { // authenticated: requests follow
		c.sasl.raw = false
	}
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(out)))
	if _, err := c.w.Write(append(frame, out...)); err != nil {
		return err
	}
	return c.w.Flush()
}

// saslFailed prepares the connection for a failure's response: when the
// failure closes the connection, the response waits for the failed
// authentication delay and the connection closes once it is written.
func (c *conn) saslFailed(serr *saslError) {
	if serr.close {
		c.sasl.exchange = nil
		c.sasl.failed = true
		c.failDelay()
	}
}

// bootstrapIterations is the iteration count of the bootstrap user's
// credentials.
const bootstrapIterations = 8192

// ensureBootstrapUser creates SASLConfig.BootstrapUser's SCRAM credentials,
// for each mechanism it has none for, through the controller. A user that
// exists is left alone: its password may have been changed since.
func (b *Broker) ensureBootstrapUser(ctx context.Context) error {
	user, password := b.cfg.SASL.BootstrapUser, b.cfg.SASL.BootstrapPassword
	if user == "" {
		return nil
	}
	var missing []string
	for _, mech := range []string{auth.ScramSHA256, auth.ScramSHA512} {
		if _, ok := b.meta.State().ScramCredential(user, mech); !ok {
			missing = append(missing, mech)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	req := kmsg.NewPtrAlterUserSCRAMCredentialsRequest()
	var ups []meta.ScramUpsertion
	for _, mech := range missing {
		salt := make([]byte, 32)
		rand.Read(salt)
		salted, err := auth.SaltPassword(mech, password, salt, bootstrapIterations)
		if err != nil {
			return err
		}
		c, err := auth.CredentialFromSalted(mech, salt, salted, bootstrapIterations)
		if err != nil {
			return err
		}
		ups = append(ups, meta.ScramUpsertion{User: user, Mechanism: mech,
			Credential: meta.ScramCredential{Salt: c.Salt, StoredKey: c.StoredKey, ServerKey: c.ServerKey, Iterations: bootstrapIterations}})
		u := kmsg.NewAlterUserSCRAMCredentialsRequestUpsertion()
		u.Name, u.Iterations, u.Salt, u.SaltedPassword = user, bootstrapIterations, salt, salted
		for t, name := range scramMechanismTypes {
			if name == mech {
				u.Mechanism = t
			}
		}
		req.Upsertions = append(req.Upsertions, u)
	}
	err := b.node.AtController(ctx, func() error {
		outcome, err := b.meta.AlterScramCredentials(ctx, nil, ups)
		if err != nil {
			return err
		}
		return outcome[user]
	}, func() error {
		kresp, err := b.controllerRequest(ctx, req)
		if err != nil {
			return err
		}
		for _, r := range kresp.(*kmsg.AlterUserSCRAMCredentialsResponse).Results {
			if r.User == user {
				return kerr.ErrorForCode(r.ErrorCode)
			}
		}
		return fmt.Errorf("the controller did not answer for user %q", user)
	})
	if err != nil {
		return fmt.Errorf("creating the SASL bootstrap user %q: %w", user, err)
	}
	b.log.Info("created the SASL bootstrap user", "user", user, "mechanisms", strings.Join(missing, ","))
	return nil
}

// bootstrapUserLoop retries ensureBootstrapUser until it succeeds or the
// broker closes: a node that is not the controller may not reach it
// before the user exists (its inter-broker client authenticates as that
// user), and the controller's node creates it meanwhile.
func (b *Broker) bootstrapUserLoop() {
	for {
		ctx, cancel := context.WithTimeout(b.ctx, controlTimeout)
		err := b.ensureBootstrapUser(ctx)
		cancel()
		if err == nil {
			return
		}
		b.log.Warn("SASL bootstrap user not created yet; retrying", "err", err)
		select {
		case <-b.ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}
