package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// OAUTHBEARER (RFC 7628) as Kafka speaks it: the client's one message is a
// GS2 header and key-value pairs, among them "auth=Bearer <token>"; a valid
// token ends the exchange with an empty answer. A rejected token is
// answered with RFC 7628's error JSON as a server challenge; the client
// replies with a single %x01, and the exchange then fails with that JSON as
// its reason (OAuthBearerSaslServer).

// OAuthBearerName is the mechanism's name.
const OAuthBearerName = "OAUTHBEARER"

// TokenValidator checks a bearer token. It is called from connection
// goroutines concurrently.
type TokenValidator interface {
	// Validate returns the session the token stands for. An error means
	// the token is not acceptable (expired, badly signed, malformed);
	// its text is logged, not sent.
	Validate(ctx context.Context, token string) (Session, error)
}

type oauthMechanism struct{ v TokenValidator }

// NewOAuthBearer returns the server side of OAUTHBEARER over v.
func NewOAuthBearer(v TokenValidator) Mechanism { return oauthMechanism{v: v} }

func (m oauthMechanism) Name() string { return OAuthBearerName }

func (m oauthMechanism) Start() Exchange { return &oauthExchange{v: m.v} }

type oauthExchange struct {
	v       TokenValidator
	session Session
	// rejected is the error JSON sent for a rejected token: the client's
	// next message must be %x01, which fails the exchange with it.
	rejected  string
	rejectErr error
	over      bool
}

func (e *oauthExchange) Session() Session { return e.session }

// invalidToken is RFC 7628's error status for a token that is not valid.
const invalidToken = `{"status":"invalid_token"}`

func (e *oauthExchange) Step(ctx context.Context, in []byte) ([]byte, bool, error) {
	if e.over {
		return nil, false, errStepAfterEnd
	}
	if e.rejected != "" {
		e.over = true
		if len(in) != 1 || in[0] != 0x01 {
			return nil, false, badMessage("OAUTHBEARER: after an error challenge the client must send %%x01")
		}
		return nil, false, &Failure{Reason: e.rejected, Err: e.rejectErr}
	}
	token, authzid, err := parseOAuthInitial(in)
	if err != nil {
		e.over = true
		return nil, false, err
	}
	s, err := e.v.Validate(ctx, token)
	if err != nil {
		e.rejected, e.rejectErr = invalidToken, err
		return []byte(invalidToken), false, nil
	}
	e.over = true
	if authzid != "" && authzid != s.User {
		return nil, false, &Failure{Reason: fmt.Sprintf("Authentication failed: Client requested an authorization id (%s) that is different from the token's principal name (%s)", authzid, s.User)}
	}
	e.session = s
	return []byte{}, true, nil
}

// parseOAuthInitial parses the client's initial response:
//
//	gs2-header %x01 *(key "=" value %x01) %x01
//	gs2-header = ("n" / "y") "," ["a=" saslname] ","
//
// and returns the bearer token and the authorization id.
func parseOAuthInitial(msg []byte) (token, authzid string, err error) {
	s := string(msg)
	cbind, rest, ok := strings.Cut(s, ",")
	if !ok || (cbind != "n" && cbind != "y") {
		return "", "", badMessage("OAUTHBEARER: missing or unsupported GS2 header")
	}
	authzField, rest, ok := strings.Cut(rest, ",")
	if !ok {
		return "", "", badMessage("OAUTHBEARER: GS2 header is not terminated")
	}
	if authzField != "" {
		if !strings.HasPrefix(authzField, "a=") {
			return "", "", badMessage("OAUTHBEARER: %q where an authorization id belongs", authzField)
		}
		if authzid, err = decodeSaslName(authzField[2:]); err != nil {
			return "", "", err
		}
	}
	if !strings.HasPrefix(rest, "\x01") || !strings.HasSuffix(rest, "\x01\x01") || len(rest) < 3 {
		return "", "", badMessage("OAUTHBEARER: key-value pairs must be enclosed in %%x01")
	}
	var auth string
	for _, kv := range strings.Split(rest[1:len(rest)-2], "\x01") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return "", "", badMessage("OAUTHBEARER: key-value pair %q", kv)
		}
		if k == "auth" {
			auth = v
		}
		// Other keys are SASL extensions: accepted and unused, as
		// Kafka's default extension validator accepts them.
	}
	scheme, tok, ok := strings.Cut(auth, " ")
	tok = strings.TrimLeft(tok, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", "", badMessage("OAUTHBEARER: no \"auth=Bearer <token>\"")
	}
	return tok, authzid, nil
}

// UnsecuredValidator is Kafka's default OAUTHBEARER validator
// (OAuthBearerUnsecuredValidatorCallbackHandler): the token is an
// unsigned JWS ({"alg":"none"}) whose claims need a string "sub", the
// principal, and a numeric "exp" in the future; an "iat" must not be in
// the future or after exp. For development only: anyone can write such a
// token for any user.
type UnsecuredValidator struct {
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (v UnsecuredValidator) Validate(_ context.Context, token string) (Session, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return Session{}, errors.New("unsecured JWS must have three parts")
	}
	if parts[2] != "" {
		return Session{}, errors.New("unsecured JWS must have an empty signature")
	}
	var header map[string]any
	if err := decodeJSONPart(parts[0], &header); err != nil {
		return Session{}, fmt.Errorf("JWS header: %w", err)
	}
	if alg, _ := header["alg"].(string); alg != "none" {
		return Session{}, fmt.Errorf("unsecured JWS must have alg none, not %q", header["alg"])
	}
	var claims map[string]any
	if err := decodeJSONPart(parts[1], &claims); err != nil {
		return Session{}, fmt.Errorf("JWS claims: %w", err)
	}
	sub, ok := claims["sub"].(string)
	if !ok || sub == "" {
		return Session{}, errors.New(`the token has no string "sub" claim`)
	}
	expF, ok := claims["exp"].(float64)
	if !ok {
		return Session{}, errors.New(`the token has no numeric "exp" claim`)
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	t := now()
	exp := time.UnixMilli(int64(expF * 1000))
	if !exp.After(t) {
		return Session{}, fmt.Errorf("the token expired at %s", exp.UTC().Format(time.RFC3339))
	}
	if iatF, ok := claims["iat"]; ok {
		f, isNum := iatF.(float64)
		if !isNum {
			return Session{}, errors.New(`the token's "iat" claim is not a number`)
		}
		iat := time.UnixMilli(int64(f * 1000))
		if iat.After(t) {
			return Session{}, errors.New("the token was issued in the future")
		}
		if !exp.After(iat) {
			return Session{}, errors.New("the token expires before it was issued")
		}
	}
	return Session{User: sub, Expires: exp}, nil
}

func decodeJSONPart(part string, v *map[string]any) error {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(part, "="))
	if err != nil {
		return fmt.Errorf("not base64url: %w", err)
	}
	return json.Unmarshal(raw, v)
}
