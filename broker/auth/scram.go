package auth

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"hash"
	"strconv"
	"strings"
)

// SCRAM (RFC 5802, RFC 7677), the server side, as Kafka speaks it: no
// channel binding, the authorization id empty or the user's own name, and
// no extension honoured (Kafka's delegation tokens, "tokenauth", are
// refused, since Strata has none).

// SCRAM mechanism names.
const (
	ScramSHA256 = "SCRAM-SHA-256"
	ScramSHA512 = "SCRAM-SHA-512"
)

// Iteration bounds Kafka enforces on stored credentials (ScramMechanism's
// minIterations and ScramControlManager's MAX_ITERATIONS).
const (
	MinScramIterations = 4096
	MaxScramIterations = 16384
)

// ScramCredential is a user's salted credential for one SCRAM mechanism:
// what the server stores instead of the password.
type ScramCredential struct {
	Salt       []byte
	StoredKey  []byte
	ServerKey  []byte
	Iterations int
}

// ScramCredentials finds stored SCRAM credentials. It is called from
// connection goroutines concurrently.
type ScramCredentials interface {
	// ScramCredential returns user's credential for mechanism, false when
	// there is none.
	ScramCredential(user, mechanism string) (ScramCredential, bool)
}

// ScramHash returns the hash of a SCRAM mechanism, false for other names.
func ScramHash(mechanism string) (func() hash.Hash, bool) {
	switch mechanism {
	case ScramSHA256:
		return sha256.New, true
	case ScramSHA512:
		return sha512.New, true
	}
	return nil, false
}

// SaltPassword is SCRAM's SaltedPassword: PBKDF2 with HMAC over the
// mechanism's hash, as long as the hash's output.
func SaltPassword(mechanism, password string, salt []byte, iterations int) ([]byte, error) {
	h, ok := ScramHash(mechanism)
	if !ok {
		return nil, fmt.Errorf("unknown SCRAM mechanism %q", mechanism)
	}
	if iterations < 1 {
		return nil, fmt.Errorf("SCRAM iterations %d: must be positive", iterations)
	}
	return pbkdf2.Key(h, password, salt, iterations, h().Size())
}

// CredentialFromSalted derives the stored credential from a salted
// password (what AlterUserScramCredentials carries, KIP-554).
func CredentialFromSalted(mechanism string, salt, salted []byte, iterations int) (ScramCredential, error) {
	h, ok := ScramHash(mechanism)
	if !ok {
		return ScramCredential{}, fmt.Errorf("unknown SCRAM mechanism %q", mechanism)
	}
	if len(salted) != h().Size() {
		return ScramCredential{}, fmt.Errorf("salted password of %d bytes: %s needs %d", len(salted), mechanism, h().Size())
	}
	clientKey := hmacSum(h, salted, []byte("Client Key"))
	return ScramCredential{
		Salt:       bytes.Clone(salt),
		StoredKey:  hashSum(h, clientKey),
		ServerKey:  hmacSum(h, salted, []byte("Server Key")),
		Iterations: iterations,
	}, nil
}

// NewScramCredential makes a credential for password with a fresh random
// salt.
func NewScramCredential(mechanism, password string, iterations int) (ScramCredential, error) {
	salt := make([]byte, 32)
	rand.Read(salt)
	salted, err := SaltPassword(mechanism, password, salt, iterations)
	if err != nil {
		return ScramCredential{}, err
	}
	return CredentialFromSalted(mechanism, salt, salted, iterations)
}

// CheckPassword reports whether password matches cred, in constant time
// once the password is salted.
func CheckPassword(mechanism string, cred ScramCredential, password string) bool {
	salted, err := SaltPassword(mechanism, password, cred.Salt, cred.Iterations)
	if err != nil {
		return false
	}
	got, err := CredentialFromSalted(mechanism, cred.Salt, salted, cred.Iterations)
	if err != nil {
		return false
	}
	return hmac.Equal(got.StoredKey, cred.StoredKey)
}

func hmacSum(h func() hash.Hash, key, msg []byte) []byte {
	m := hmac.New(h, key)
	m.Write(msg)
	return m.Sum(nil)
}

func hashSum(h func() hash.Hash, b []byte) []byte {
	d := h()
	d.Write(b)
	return d.Sum(nil)
}

// scramMechanism is SCRAM-SHA-256 or SCRAM-SHA-512 over a credential
// store.
type scramMechanism struct {
	name  string
	hash  func() hash.Hash
	creds ScramCredentials
	// fakeKey derives the salt answered for a user that does not exist,
	// so the exchange runs to its end (and fails there) whether or not
	// the user exists, and repeated tries see the same salt.
	fakeKey []byte
	// nonce makes the server's nonce; tests replace it.
	nonce func() string
}

// NewScram returns the server side of SCRAM-SHA-256 or SCRAM-SHA-512.
func NewScram(mechanism string, creds ScramCredentials) (Mechanism, error) {
	h, ok := ScramHash(mechanism)
	if !ok {
		return nil, fmt.Errorf("unknown SCRAM mechanism %q", mechanism)
	}
	key := make([]byte, 32)
	rand.Read(key)
	return &scramMechanism{name: mechanism, hash: h, creds: creds, fakeKey: key, nonce: randomNonce}, nil
}

// randomNonce is 24 random bytes in base64: printable, and free of ','.
func randomNonce() string {
	b := make([]byte, 24)
	rand.Read(b)
	return base64.RawStdEncoding.EncodeToString(b)
}

func (m *scramMechanism) Name() string { return m.name }

func (m *scramMechanism) Start() Exchange { return &scramExchange{m: m} }

type scramStage int

const (
	scramFirst scramStage = iota
	scramFinal
	scramDone
	scramFailed
)

type scramExchange struct {
	m     *scramMechanism
	stage scramStage

	user        string
	known       bool // the user has a credential; otherwise cred is made up
	cred        ScramCredential
	gs2Header   string
	clientBare  string
	serverFirst string
	nonce       string // client's and server's
}

func (e *scramExchange) Session() Session { return Session{User: e.user} }

func (e *scramExchange) Step(_ context.Context, in []byte) ([]byte, bool, error) {
	var (
		out []byte
		err error
	)
	switch e.stage {
	case scramFirst:
		out, err = e.first(string(in))
		if err == nil {
			e.stage = scramFinal
			return out, false, nil
		}
	case scramFinal:
		out, err = e.final(string(in))
		if err == nil {
			e.stage = scramDone
			return out, true, nil
		}
	default:
		err = errStepAfterEnd
	}
	e.stage = scramFailed
	e.cred = ScramCredential{}
	return nil, false, err
}

// first answers client-first-message:
//
//	gs2-header client-first-message-bare
//	gs2-header = ("n" / "y") "," [ "a=" saslname ] ","
//	client-first-message-bare = "n=" saslname ",r=" c-nonce ["," extensions]
func (e *scramExchange) first(msg string) ([]byte, error) {
	cbind, rest, ok := strings.Cut(msg, ",")
	if !ok {
		return nil, badMessage("SCRAM client-first-message has no GS2 header")
	}
	switch {
	case cbind == "n" || cbind == "y":
	case strings.HasPrefix(cbind, "p="):
		return nil, &Failure{Reason: "SCRAM channel binding is not supported"}
	default:
		return nil, badMessage("SCRAM GS2 header: unknown channel binding flag %q", cbind)
	}
	authzField, bare, ok := strings.Cut(rest, ",")
	if !ok {
		return nil, badMessage("SCRAM GS2 header is not terminated")
	}
	var authzid string
	if authzField != "" {
		if !strings.HasPrefix(authzField, "a=") {
			return nil, badMessage("SCRAM GS2 header: %q where an authorization id belongs", authzField)
		}
		var err error
		if authzid, err = decodeSaslName(authzField[2:]); err != nil {
			return nil, err
		}
	}
	e.gs2Header = cbind + "," + authzField + ","
	e.clientBare = bare
	attrs := strings.Split(bare, ",")
	if len(attrs) < 2 {
		return nil, badMessage("SCRAM client-first-message-bare needs a name and a nonce")
	}
	if strings.HasPrefix(attrs[0], "m=") {
		return nil, badMessage("SCRAM mandatory extension %q is not supported", attrs[0])
	}
	if !strings.HasPrefix(attrs[0], "n=") {
		return nil, badMessage("SCRAM client-first-message-bare: %q where the user name belongs", attrs[0])
	}
	user, err := decodeSaslName(attrs[0][2:])
	if err != nil {
		return nil, err
	}
	if user == "" {
		return nil, badMessage("SCRAM user name is empty")
	}
	if !strings.HasPrefix(attrs[1], "r=") || len(attrs[1]) == 2 || !printable(attrs[1][2:]) {
		return nil, badMessage("SCRAM client nonce is missing or not printable")
	}
	for _, ext := range attrs[2:] {
		k, _, _ := strings.Cut(ext, "=")
		if k == "tokenauth" {
			return nil, &Failure{Reason: "SCRAM delegation token authentication (tokenauth) is not supported"}
		}
		// Other extensions are ignored, as Kafka ignores them.
	}
	if authzid != "" && authzid != user {
		return nil, &Failure{Reason: "Authentication failed: Client requested an authorization id that is different from username"}
	}
	e.user = user
	e.cred, e.known = e.m.creds.ScramCredential(user, e.m.name)
	if !e.known || e.cred.Iterations < MinScramIterations {
		// Answer as for a real user, and fail at the proof: whether a
		// user exists is not for an unauthenticated client to learn.
		e.known = false
		e.cred = ScramCredential{Salt: hmacSum(e.m.hash, e.m.fakeKey, []byte(user))[:16], Iterations: MinScramIterations}
	}
	e.nonce = attrs[1][2:] + e.m.nonce()
	e.serverFirst = "r=" + e.nonce + ",s=" + base64.StdEncoding.EncodeToString(e.cred.Salt) + ",i=" + strconv.Itoa(e.cred.Iterations)
	return []byte(e.serverFirst), nil
}

// final checks client-final-message:
//
//	"c=" base64(gs2-header) ",r=" nonce ["," extensions] ",p=" base64(proof)
func (e *scramExchange) final(msg string) ([]byte, error) {
	withoutProof, proofField, ok := cutLast(msg, ",p=")
	if !ok {
		return nil, badMessage("SCRAM client-final-message has no proof")
	}
	attrs := strings.Split(withoutProof, ",")
	if len(attrs) < 2 || !strings.HasPrefix(attrs[0], "c=") || !strings.HasPrefix(attrs[1], "r=") {
		return nil, badMessage("SCRAM client-final-message must start with channel binding and nonce")
	}
	cb, err := base64.StdEncoding.DecodeString(attrs[0][2:])
	if err != nil {
		return nil, badMessage("SCRAM channel binding is not base64")
	}
	if string(cb) != e.gs2Header {
		return nil, &Failure{Reason: "Authentication failed: SCRAM channel binding does not match the GS2 header"}
	}
	// Kafka checks that the nonce ends with the server's, not that it
	// equals it: librdkafka sends its own nonce again in front of the
	// combined one (client nonce + server-first's r), and Kafka's
	// ScramSaslServer accepts that with endsWith. The proof covers the
	// message as sent, so nothing is weakened.
	got := attrs[1][2:]
	if len(got) < len(e.nonce) || subtle.ConstantTimeCompare([]byte(got[len(got)-len(e.nonce):]), []byte(e.nonce)) != 1 {
		return nil, &Failure{Reason: "Authentication failed: Invalid client nonce in the final client message."}
	}
	proof, err := base64.StdEncoding.DecodeString(proofField)
	if err != nil {
		return nil, badMessage("SCRAM proof is not base64")
	}
	authMessage := []byte(e.clientBare + "," + e.serverFirst + "," + withoutProof)
	size := e.m.hash().Size()
	if len(proof) != size {
		return nil, badMessage("SCRAM proof of %d bytes, want %d", len(proof), size)
	}
	if !e.known {
		return nil, fmt.Errorf("user %q has no %s credential", e.user, e.m.name)
	}
	clientSig := hmacSum(e.m.hash, e.cred.StoredKey, authMessage)
	clientKey := make([]byte, size)
	subtle.XORBytes(clientKey, proof, clientSig)
	if !hmac.Equal(hashSum(e.m.hash, clientKey), e.cred.StoredKey) {
		return nil, fmt.Errorf("invalid client proof for user %q", e.user)
	}
	serverSig := hmacSum(e.m.hash, e.cred.ServerKey, authMessage)
	e.cred = ScramCredential{}
	return []byte("v=" + base64.StdEncoding.EncodeToString(serverSig)), nil
}

// cutLast cuts s around the last sep.
func cutLast(s, sep string) (before, after string, ok bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// decodeSaslName undoes RFC 5802's escaping: "=2C" is ',' and "=3D" is
// '='; any other '=' is an error.
func decodeSaslName(s string) (string, error) {
	if !strings.Contains(s, "=") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '=' {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case strings.HasPrefix(s[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(s[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", badMessage("SCRAM name %q: '=' must be escaped as =3D", s)
		}
		i += 2
	}
	return b.String(), nil
}

// printable reports whether s holds only printable ASCII other than ','.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e || s[i] == ',' {
			return false
		}
	}
	return true
}
