package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// credMap is a ScramCredentials over a map keyed by mechanism then user.
type credMap map[string]map[string]ScramCredential

func (m credMap) ScramCredential(user, mech string) (ScramCredential, bool) {
	c, ok := m[mech][user]
	return c, ok
}

func mustCred(t *testing.T, mech, password string) ScramCredential {
	t.Helper()
	c, err := NewScramCredential(mech, password, 4096)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// converse drives a franz-go client session against a server exchange,
// as the broker would over SaslAuthenticate, and returns the server's
// final error.
func converse(t *testing.T, client sasl.Mechanism, server Exchange) (Session, error) {
	t.Helper()
	ctx := context.Background()
	sess, msg, err := client.Authenticate(ctx, "127.0.0.1:9092")
	if err != nil {
		t.Fatalf("client start: %v", err)
	}
	for range 5 {
		out, done, err := server.Step(ctx, msg)
		if err != nil {
			return Session{}, err
		}
		cdone, next, cerr := sess.Challenge(out)
		if cerr != nil {
			return Session{}, fmt.Errorf("client: %w", cerr)
		}
		if done {
			if !cdone {
				t.Fatalf("server done but client is not")
			}
			return server.Session(), nil
		}
		msg = next
	}
	t.Fatal("exchange did not finish in 5 steps")
	return Session{}, nil
}

// franz-go's SCRAM client against our server, both mechanisms: the right
// password authenticates (and the client verifies the server's
// signature), a wrong one and an unknown user fail.
func TestScramAgainstFranzGoClient(t *testing.T) {
	for _, mech := range []string{ScramSHA256, ScramSHA512} {
		t.Run(mech, func(t *testing.T) {
			creds := credMap{mech: {"alice": mustCred(t, mech, "s3cret"), "a,b=c": mustCred(t, mech, "x")}}
			m, err := NewScram(mech, creds)
			if err != nil {
				t.Fatal(err)
			}
			client := func(user, pass string) sasl.Mechanism {
				a := scram.Auth{User: user, Pass: pass}
				if mech == ScramSHA512 {
					return a.AsSha512Mechanism()
				}
				return a.AsSha256Mechanism()
			}
			s, err := converse(t, client("alice", "s3cret"), m.Start())
			if err != nil || s.User != "alice" {
				t.Fatalf("right password: session %+v, err %v", s, err)
			}
			if s, err := converse(t, client("a,b=c", "x"), m.Start()); err != nil || s.User != "a,b=c" {
				t.Fatalf("escaped name: session %+v, err %v", s, err)
			}
			if _, err := converse(t, client("alice", "wrong"), m.Start()); err == nil {
				t.Fatal("wrong password authenticated")
			}
			if _, err := converse(t, client("bob", "s3cret"), m.Start()); err == nil {
				t.Fatal("unknown user authenticated")
			}
		})
	}
}

// RFC 7677 section 3's example exchange, byte for byte.
func TestScramRFC7677Vector(t *testing.T) {
	salt, _ := base64.StdEncoding.DecodeString("W22ZaJ0SNY7soEsUEjb6gQ==")
	salted, err := SaltPassword(ScramSHA256, "pencil", salt, 4096)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := CredentialFromSalted(ScramSHA256, salt, salted, 4096)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := NewScram(ScramSHA256, credMap{ScramSHA256: {"user": cred}})
	m.(*scramMechanism).nonce = func() string { return "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0" }
	e := m.Start()
	ctx := context.Background()
	out, done, err := e.Step(ctx, []byte("n,,n=user,r=rOprNGfwEbeRWgbNEkqO"))
	if err != nil || done {
		t.Fatalf("first: %v %v", done, err)
	}
	if want := "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"; string(out) != want {
		t.Fatalf("server-first %q, want %q", out, want)
	}
	out, done, err = e.Step(ctx, []byte("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="))
	if err != nil || !done {
		t.Fatalf("final: %v %v", done, err)
	}
	if want := "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="; string(out) != want {
		t.Fatalf("server-final %q, want %q", out, want)
	}
	if _, _, err := e.Step(ctx, []byte("x")); err == nil {
		t.Fatal("a step after the end was accepted")
	}
}

// Malformed and refused SCRAM messages fail with an error, never a panic,
// and the exchange is over afterwards.
func TestScramRejectsMalformed(t *testing.T) {
	m, _ := NewScram(ScramSHA256, credMap{ScramSHA256: {"u": mustCred(t, ScramSHA256, "p")}})
	for _, first := range []string{
		"", "n", "n,", "n,,", "x,,n=u,r=abc", "p=tls-unique,,n=u,r=abc", "n,,m=ext,n=u,r=abc",
		"n,,n=u", "n,,n=,r=abc", "n,,n=u=x,r=abc", "n,,n=u,r=", "n,,n=u,r=abc,tokenauth=true",
		"n,a=other,n=u,r=abc", "n,b=x,n=u,r=abc",
	} {
		e := m.Start()
		if _, _, err := e.Step(context.Background(), []byte(first)); err == nil {
			t.Errorf("client-first %q accepted", first)
		}
		if _, _, err := e.Step(context.Background(), []byte("c=biws,r=abc,p=AA==")); err == nil {
			t.Errorf("after refusing %q, a second step was accepted", first)
		}
	}
	var f *Failure
	_, _, err := m.Start().Step(context.Background(), []byte("n,,n=u,r=abc,tokenauth=true"))
	if !errors.As(err, &f) || !strings.Contains(f.Reason, "tokenauth") {
		t.Errorf("tokenauth: %v, want a Failure naming it", err)
	}
	for _, final := range []string{"", "c=biws", "c=biws,r=abc,p=", "c=Ymx1Yg==,r=abcX,p=AA==", "c=biws,r=wrong,p=AA==", "c=biws,r=abcX,p=!!", "r=abcX,c=biws,p=AA=="} {
		e := m.Start()
		out, _, err := e.Step(context.Background(), []byte("n,,n=u,r=abc"))
		if err != nil {
			t.Fatal(err)
		}
		_ = out
		if _, done, err := e.Step(context.Background(), []byte(final)); err == nil || done {
			t.Errorf("client-final %q accepted", final)
		}
	}
}

func TestPlainFileAndMetadata(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "users")
	if err := os.WriteFile(path, []byte("# admins\nalice:wonder\n\nbob : x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := credMap{ScramSHA512: {"carol": mustCred(t, ScramSHA512, "c-pass")}, ScramSHA256: {"dave": mustCred(t, ScramSHA256, "d-pass")}}
	m, err := NewPlain(path, creds)
	if err != nil {
		t.Fatal(err)
	}
	try := func(user, pass string) error {
		_, err := converse(t, plain.Auth{User: user, Pass: pass}.AsMechanism(), m.Start())
		return err
	}
	for _, ok := range [][2]string{{"alice", "wonder"}, {"carol", "c-pass"}, {"dave", "d-pass"}} {
		if err := try(ok[0], ok[1]); err != nil {
			t.Errorf("%s: %v", ok[0], err)
		}
	}
	for _, bad := range [][2]string{{"alice", "wrong"}, {"carol", "wrong"}, {"nobody", "x"}} {
		if err := try(bad[0], bad[1]); err == nil {
			t.Errorf("%s with %q authenticated", bad[0], bad[1])
		}
	}
	// The file is read again once it changes.
	later := time.Now().Add(2 * time.Second)
	if err := os.WriteFile(path, []byte("alice:new\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(path, later, later)
	if err := try("alice", "wonder"); err == nil {
		t.Error("old password still works after the file changed")
	}
	if err := try("alice", "new"); err != nil {
		t.Errorf("new password: %v", err)
	}
	// Malformed messages and an authorization id for someone else.
	for _, msg := range []string{"", "alice", "\x00alice", "x\x00alice\x00new", "\x00\x00"} {
		if _, _, err := m.Start().Step(context.Background(), []byte(msg)); err == nil {
			t.Errorf("PLAIN message %q accepted", msg)
		}
	}
	if _, err := NewPlain(filepath.Join(dir, "missing"), nil); err == nil {
		t.Error("a missing users file was accepted")
	}
	os.WriteFile(path, []byte("no-colon\n"), 0o600)
	if _, err := NewPlain(path, nil); err == nil || strings.Contains(err.Error(), "no-colon") {
		t.Errorf("bad users file: %v (must fail without echoing the line)", err)
	}
}

func unsecuredToken(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none"}`)) + "." + enc([]byte(claims)) + "."
}

// The unsecured validator through franz-go's OAUTHBEARER client: a good
// token authenticates with its exp as the session's end; a rejected one is
// answered with the RFC 7628 error JSON and then fails with it, which is
// what franz-go's TestOAuthAuth looks for.
func TestOAuthBearerUnsecured(t *testing.T) {
	m := NewOAuthBearer(UnsecuredValidator{})
	exp := time.Now().Add(time.Hour).Unix()
	s, err := converse(t, oauth.Auth{Token: unsecuredToken(fmt.Sprintf(`{"sub":"admin","exp":%d}`, exp))}.AsMechanism(), m.Start())
	if err != nil || s.User != "admin" || s.Expires.Unix() != exp {
		t.Fatalf("good token: %+v %v", s, err)
	}
	for _, claims := range []string{
		fmt.Sprintf(`{"sub":"admin","exp":%d}`, time.Now().Add(-time.Minute).Unix()),
		fmt.Sprintf(`{"exp":%d}`, exp),
		`{"sub":"admin"}`,
		fmt.Sprintf(`{"sub":"admin","exp":%d,"iat":%d}`, exp, exp+10),
	} {
		e := m.Start()
		msg := []byte("n,,\x01auth=Bearer " + unsecuredToken(claims) + "\x01\x01")
		out, done, err := e.Step(context.Background(), msg)
		if err != nil || done || string(out) != `{"status":"invalid_token"}` {
			t.Fatalf("claims %s: out %q done %v err %v", claims, out, done, err)
		}
		_, _, err = e.Step(context.Background(), []byte{1})
		var f *Failure
		if !errors.As(err, &f) || !strings.Contains(f.Reason, "invalid_token") {
			t.Fatalf("claims %s: final %v", claims, err)
		}
	}
	// A signed token is not an unsecured one.
	signed := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256"}`)) + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"a","exp":9999999999}`)) + ".c2ln"
	if _, err := (UnsecuredValidator{}).Validate(context.Background(), signed); err == nil {
		t.Error("a signed token passed the unsecured validator")
	}
	for _, msg := range []string{"", "n,,", "n,,\x01\x01", "n,,\x01auth=Basic x\x01\x01", "p=x,,\x01auth=Bearer a.b.\x01\x01", "n,,auth=Bearer a.b.\x01\x01"} {
		if _, _, err := m.Start().Step(context.Background(), []byte(msg)); err == nil {
			t.Errorf("OAUTHBEARER message %q accepted", msg)
		}
	}
}

func jwk(kid string, pub any) map[string]string {
	enc := base64.RawURLEncoding.EncodeToString
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return map[string]string{"kty": "RSA", "kid": kid, "n": enc(k.N.Bytes()), "e": enc(big.NewInt(int64(k.E)).Bytes())}
	case *ecdsa.PublicKey:
		b, _ := k.Bytes()
		n := (len(b) - 1) / 2
		return map[string]string{"kty": "EC", "kid": kid, "crv": k.Curve.Params().Name, "x": enc(b[1 : 1+n]), "y": enc(b[1+n:])}
	}
	panic("key type")
}

func jwksJSON(keys ...map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

// JWTs signed with RSA and EC keys of a JWKS file validate; a wrong key,
// an unknown kid, an expired token and alg none do not. A URL set is
// fetched again for a new kid, but not more than once per interval.
func TestJWKSValidator(t *testing.T) {
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	otherKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	dir := t.TempDir()
	path := filepath.Join(dir, "jwks.json")
	os.WriteFile(path, jwksJSON(jwk("r1", &rsaKey.PublicKey), jwk("e1", &ecKey.PublicKey)), 0o600)
	v, err := NewJWKSValidator(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(method jwt.SigningMethod, kid string, key any, exp time.Time) string {
		tok := jwt.NewWithClaims(method, jwt.MapClaims{"sub": "svc", "exp": exp.Unix()})
		if kid != "" {
			tok.Header["kid"] = kid
		}
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	hour := time.Now().Add(time.Hour)
	for name, tok := range map[string]string{
		"RS256": sign(jwt.SigningMethodRS256, "r1", rsaKey, hour),
		"ES256": sign(jwt.SigningMethodES256, "e1", ecKey, hour),
	} {
		s, err := v.Validate(context.Background(), tok)
		if err != nil || s.User != "svc" || s.Expires.Unix() != hour.Unix() {
			t.Errorf("%s: %+v %v", name, s, err)
		}
	}
	for name, tok := range map[string]string{
		"wrong key":   sign(jwt.SigningMethodES256, "e1", otherKey, hour),
		"unknown kid": sign(jwt.SigningMethodES256, "zz", otherKey, hour),
		"expired":     sign(jwt.SigningMethodRS256, "r1", rsaKey, time.Now().Add(-time.Minute)),
		"alg none":    unsecuredToken(fmt.Sprintf(`{"sub":"svc","exp":%d}`, hour.Unix())),
	} {
		if _, err := v.Validate(context.Background(), tok); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}

	// A URL set, rotated: the new kid is fetched once, and a second
	// unknown kid right after does not fetch again.
	var fetches atomic.Int32
	var body atomic.Value
	body.Store(jwksJSON(jwk("e1", &ecKey.PublicKey)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Write(body.Load().([]byte))
	}))
	defer srv.Close()
	uv, err := NewJWKSValidator(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	uv.now = func() time.Time { return now }
	body.Store(jwksJSON(jwk("e1", &ecKey.PublicKey), jwk("e2", &otherKey.PublicKey)))
	if _, err := uv.Validate(context.Background(), sign(jwt.SigningMethodES256, "e2", otherKey, hour)); err == nil {
		t.Error("a kid was fetched again before the refetch interval")
	}
	now = now.Add(jwksRefetch)
	if _, err := uv.Validate(context.Background(), sign(jwt.SigningMethodES256, "e2", otherKey, hour)); err != nil {
		t.Errorf("rotated key: %v", err)
	}
	uv.Validate(context.Background(), sign(jwt.SigningMethodES256, "e3", otherKey, hour))
	if n := fetches.Load(); n != 2 {
		t.Errorf("%d fetches, want 2 (start, one refetch)", n)
	}

	for _, bad := range []string{`{}`, `{"keys":[{"kty":"oct","k":"AAAA"}]}`, `{"keys":[{"kty":"RSA","n":"","e":"AQAB"}]}`, `{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}]}`, `nope`} {
		if _, err := ParseJWKS([]byte(bad)); err == nil {
			t.Errorf("JWKS %s accepted", bad)
		}
	}
}

func TestNewMechanisms(t *testing.T) {
	ms, err := New(context.Background(), Config{Mechanisms: []string{ScramSHA256, ScramSHA512, PlainName, OAuthBearerName}, Credentials: credMap{}, OAuthUnsecured: true})
	if err != nil || len(ms) != 4 {
		t.Fatalf("%d mechanisms, %v", len(ms), err)
	}
	for _, cfg := range []Config{
		{Mechanisms: []string{"GSSAPI"}},
		{Mechanisms: []string{OAuthBearerName}},
		{Mechanisms: []string{OAuthBearerName}, OAuthUnsecured: true, OAuthJWKS: "x"},
	} {
		if _, err := New(context.Background(), cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}
