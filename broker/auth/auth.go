// Package auth owns authenticating a connection's principal with SASL: the
// server side of the mechanisms Strata offers (PLAIN, SCRAM-SHA-256,
// SCRAM-SHA-512, OAUTHBEARER), the SCRAM credential derivation shared by
// the server and by whoever creates credentials, and the validation of
// OAuth bearer tokens. It knows nothing of the Kafka wire: the broker hands
// each client message to an Exchange and frames its answers.
package auth

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Mechanism is one SASL mechanism a server offers. Start may be called
// from any goroutine; each Exchange it returns belongs to one connection.
type Mechanism interface {
	// Name is the mechanism's registered name, e.g. "SCRAM-SHA-512".
	Name() string
	// Start begins one authentication.
	Start() Exchange
}

// Exchange is one authentication in progress. It is used by one goroutine
// at a time.
type Exchange interface {
	// Step takes the client's next message and returns the server's
	// answer. done reports that the client has authenticated (out may
	// still carry a last message, SCRAM's server-final); then Session
	// says who it is. An error fails the authentication: the exchange is
	// over, and the connection should be closed. Step does not keep in.
	Step(ctx context.Context, in []byte) (out []byte, done bool, err error)
	// Session is the authenticated identity, once Step reported done.
	Session() Session
}

// Session is who a connection authenticated as.
type Session struct {
	// User is the authenticated name; the connection's principal is
	// "User:" + User.
	User string
	// Expires is when the credential stops being valid (an OAuth token's
	// exp); zero when it does not expire.
	Expires time.Time
}

// Failure is an authentication failure whose Reason may be sent to the
// client as it is. Failures that are not a Failure must be answered with a
// generic message: their text may say whether a user exists (Kafka's
// SaslServerAuthenticator makes the same distinction).
type Failure struct {
	Reason string
	Err    error // for logs; may be nil
}

func (f *Failure) Error() string {
	if f.Err != nil {
		return f.Reason + ": " + f.Err.Error()
	}
	return f.Reason
}

func (f *Failure) Unwrap() error { return f.Err }

// ErrBadMessage marks a client message that does not parse: a client bug or
// a probe, never a wrong password.
var ErrBadMessage = errors.New("malformed SASL message")

func badMessage(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadMessage, fmt.Sprintf(format, args...))
}

// errStepAfterEnd is what an exchange answers when it is stepped again
// after it succeeded or failed.
var errStepAfterEnd = errors.New("SASL exchange already finished")

// ClientMessage is what a client may be told about err: a Failure's
// reason, or the generic sentence Kafka sends for every other failure.
func ClientMessage(mechanism string, reauth bool, err error) string {
	var f *Failure
	if errors.As(err, &f) {
		return f.Reason
	}
	what := "authentication"
	if reauth {
		what = "re-authentication"
	}
	return fmt.Sprintf("Authentication failed during %s due to invalid credentials with SASL mechanism %s", what, mechanism)
}

// Config chooses the mechanisms a server offers and what they check.
type Config struct {
	// Mechanisms are the names to offer: PLAIN, SCRAM-SHA-256,
	// SCRAM-SHA-512, OAUTHBEARER.
	Mechanisms []string
	// Credentials holds the SCRAM credentials (and PLAIN's users that
	// PlainUsersFile does not name).
	Credentials ScramCredentials
	// PlainUsersFile is PLAIN's users file; may be empty.
	PlainUsersFile string
	// OAuthJWKS is the JWKS file or URL OAUTHBEARER tokens are checked
	// against; OAuthUnsecured accepts Kafka's unsigned development
	// tokens instead. OAUTHBEARER needs exactly one of them.
	OAuthJWKS      string
	OAuthUnsecured bool
}

// New builds the mechanisms cfg names, by name.
func New(ctx context.Context, cfg Config) (map[string]Mechanism, error) {
	out := make(map[string]Mechanism, len(cfg.Mechanisms))
	for _, name := range cfg.Mechanisms {
		var (
			m   Mechanism
			err error
		)
		switch name {
		case ScramSHA256, ScramSHA512:
			m, err = NewScram(name, cfg.Credentials)
		case PlainName:
			m, err = NewPlain(cfg.PlainUsersFile, cfg.Credentials)
		case OAuthBearerName:
			switch {
			case cfg.OAuthJWKS != "" && cfg.OAuthUnsecured:
				err = errors.New("OAUTHBEARER: a JWKS and the unsecured validator are exclusive")
			case cfg.OAuthJWKS != "":
				var v *JWKSValidator
				if v, err = NewJWKSValidator(ctx, cfg.OAuthJWKS); err == nil {
					m = NewOAuthBearer(v)
				}
			case cfg.OAuthUnsecured:
				m = NewOAuthBearer(UnsecuredValidator{})
			default:
				err = errors.New("OAUTHBEARER needs a JWKS (--sasl-oauthbearer-jwks) or the unsecured validator (--sasl-oauthbearer-unsecured)")
			}
		default:
			err = fmt.Errorf("unknown SASL mechanism %q (want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)", name)
		}
		if err != nil {
			return nil, err
		}
		out[name] = m
	}
	return out, nil
}
