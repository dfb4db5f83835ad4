package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// JWKSValidator checks signed JWTs (RS*, PS*, ES*) against the public keys
// of a JSON Web Key Set (RFC 7517) read from a file or fetched from a URL.
// The principal is the "sub" claim; "exp" is required. A token signed by a
// key id the set does not hold makes a URL set be fetched again, at most
// once per refetch interval, so a rotated issuer key is picked up without a
// restart; a file set is read again when it changes.
type JWKSValidator struct {
	source string
	isURL  bool
	client *http.Client
	now    func() time.Time

	mu struct {
		sync.Mutex
		keys    map[string]any // kid -> *rsa.PublicKey or *ecdsa.PublicKey
		fetched time.Time      // last fetch of a URL set
		mod     time.Time      // file's modification time when read
	}
}

// jwksRefetch bounds how often a URL set is fetched for an unknown kid.
const jwksRefetch = 30 * time.Second

// NewJWKSValidator loads the key set at source, a file path or an http(s)
// URL, and fails when it cannot be read or holds no usable key.
func NewJWKSValidator(ctx context.Context, source string) (*JWKSValidator, error) {
	v := &JWKSValidator{
		source: source,
		isURL:  strings.HasPrefix(source, "https://") || strings.HasPrefix(source, "http://"),
		client: &http.Client{Timeout: 10 * time.Second},
		now:    time.Now,
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.loadLocked(ctx); err != nil {
		return nil, err
	}
	return v, nil
}

// loadLocked reads the set again.
func (v *JWKSValidator) loadLocked(ctx context.Context) error {
	var raw []byte
	if v.isURL {
		v.mu.fetched = v.now()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.source, nil)
		if err != nil {
			return fmt.Errorf("JWKS %s: %w", v.source, err)
		}
		resp, err := v.client.Do(req)
		if err != nil {
			return fmt.Errorf("JWKS: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("JWKS %s: HTTP %s", v.source, resp.Status)
		}
		if raw, err = io.ReadAll(io.LimitReader(resp.Body, 1<<20)); err != nil {
			return fmt.Errorf("JWKS %s: %w", v.source, err)
		}
	} else {
		st, err := os.Stat(v.source)
		if err != nil {
			return fmt.Errorf("JWKS file: %w", err)
		}
		if raw, err = os.ReadFile(v.source); err != nil {
			return fmt.Errorf("JWKS file: %w", err)
		}
		v.mu.mod = st.ModTime()
	}
	keys, err := ParseJWKS(raw)
	if err != nil {
		return fmt.Errorf("JWKS %s: %w", v.source, err)
	}
	v.mu.keys = keys
	return nil
}

// key finds the key for kid, reading the set again when it may have
// changed: a URL set when kid is unknown and the last fetch is old enough,
// a file set when its modification time moved.
func (v *JWKSValidator) key(ctx context.Context, kid string) (any, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.isURL {
		if st, err := os.Stat(v.source); err == nil && !st.ModTime().Equal(v.mu.mod) {
			if err := v.loadLocked(ctx); err != nil {
				return nil, err
			}
		}
	}
	if k, ok := v.lookupLocked(kid); ok {
		return k, nil
	}
	if v.isURL && v.now().Sub(v.mu.fetched) >= jwksRefetch {
		if err := v.loadLocked(ctx); err != nil {
			return nil, err
		}
		if k, ok := v.lookupLocked(kid); ok {
			return k, nil
		}
	}
	return nil, fmt.Errorf("no key with id %q in the JWKS", kid)
}

// lookupLocked finds kid; a token without a kid may use a set's only key.
func (v *JWKSValidator) lookupLocked(kid string) (any, bool) {
	if kid == "" && len(v.mu.keys) == 1 {
		for _, k := range v.mu.keys {
			return k, true
		}
	}
	k, ok := v.mu.keys[kid]
	return k, ok
}

var jwtMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512"}

func (v *JWKSValidator) Validate(ctx context.Context, token string) (Session, error) {
	var claims jwt.RegisteredClaims
	_, err := jwt.ParseWithClaims(token, &claims, func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		return v.key(ctx, kid)
	}, jwt.WithValidMethods(jwtMethods), jwt.WithExpirationRequired(), jwt.WithTimeFunc(v.now))
	if err != nil {
		return Session{}, err
	}
	if claims.Subject == "" {
		return Session{}, errors.New(`the token has no "sub" claim`)
	}
	return Session{User: claims.Subject, Expires: claims.ExpiresAt.Time}, nil
}

// ParseJWKS returns the RSA and EC public keys of a JSON Web Key Set by key
// id. Keys of other types, or meant for encryption ("use":"enc"), are
// skipped; a set with no usable key is an error.
func ParseJWKS(raw []byte) (map[string]any, error) {
	var set struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			Use string `json:"use"`
			N   string `json:"n"`
			E   string `json:"e"`
			Crv string `json:"crv"`
			X   string `json:"x"`
			Y   string `json:"y"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("not a JSON Web Key Set: %w", err)
	}
	keys := map[string]any{}
	for i, k := range set.Keys {
		if k.Use == "enc" {
			continue
		}
		var (
			pub any
			err error
		)
		switch k.Kty {
		case "RSA":
			pub, err = rsaKey(k.N, k.E)
		case "EC":
			pub, err = ecKey(k.Crv, k.X, k.Y)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("key %d (kid %q): %w", i, k.Kid, err)
		}
		keys[k.Kid] = pub
	}
	if len(keys) == 0 {
		return nil, errors.New("no RSA or EC signing key in the set")
	}
	return keys, nil
}

func b64url(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

func rsaKey(n, e string) (*rsa.PublicKey, error) {
	nb, err := b64url(n)
	if err != nil || len(nb) == 0 {
		return nil, errors.New("RSA modulus n is missing or not base64url")
	}
	eb, err := b64url(e)
	if err != nil || len(eb) == 0 || len(eb) > 4 {
		return nil, errors.New("RSA exponent e is missing or not base64url")
	}
	exp := 0
	for _, b := range eb {
		exp = exp<<8 | int(b)
	}
	if exp < 3 || exp%2 == 0 {
		return nil, fmt.Errorf("RSA exponent %d is not valid", exp)
	}
	return &rsa.PublicKey{N: new(big.Int).SetBytes(nb), E: exp}, nil
}

func ecKey(crv, x, y string) (*ecdsa.PublicKey, error) {
	var curve elliptic.Curve
	switch crv {
	case "P-256":
		curve = elliptic.P256()
	case "P-384":
		curve = elliptic.P384()
	case "P-521":
		curve = elliptic.P521()
	default:
		return nil, fmt.Errorf("EC curve %q is not supported", crv)
	}
	xb, err1 := b64url(x)
	yb, err2 := b64url(y)
	size := (curve.Params().BitSize + 7) / 8
	if err1 != nil || err2 != nil || len(xb) != size || len(yb) != size {
		return nil, errors.New("EC coordinates x and y are missing or of the wrong size")
	}
	point := append(append([]byte{4}, xb...), yb...)
	return ecdsa.ParseUncompressedPublicKey(curve, point)
}
