package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Files names the PEM files of a node's TLS identity.
type Files struct {
	// CertFile and KeyFile are the node's certificate (chain, leaf first)
	// and its private key.
	CertFile, KeyFile string
	// CAFile holds the cluster CA's certificates: what client
	// certificates (and, on the client side, servers' certificates) are
	// verified against. Empty means no client verification on the server
	// side and the system roots on the client side.
	CAFile string
}

// ClientAuth is --tls-client-auth: whether a TLS listener asks its
// clients for a certificate (Kafka's ssl.client.auth).
type ClientAuth string

// The client-authentication modes.
const (
	// ClientAuthNone asks for no certificate.
	ClientAuthNone ClientAuth = "none"
	// ClientAuthRequest verifies a certificate against the CA when the
	// client sends one, and admits a client that sends none
	// (tls.VerifyClientCertIfGiven).
	ClientAuthRequest ClientAuth = "request"
	// ClientAuthRequire refuses a client without a certificate the CA
	// signed (tls.RequireAndVerifyClientCert).
	ClientAuthRequire ClientAuth = "require"
)

// ParseClientAuth parses a --tls-client-auth value; empty is none.
func ParseClientAuth(s string) (ClientAuth, error) {
	switch a := ClientAuth(s); a {
	case "":
		return ClientAuthNone, nil
	case ClientAuthNone, ClientAuthRequest, ClientAuthRequire:
		return a, nil
	}
	return "", fmt.Errorf("client auth %q: want none, request or require", s)
}

func (a ClientAuth) tlsMode() tls.ClientAuthType {
	switch a {
	case ClientAuthRequest:
		return tls.VerifyClientCertIfGiven
	case ClientAuthRequire:
		return tls.RequireAndVerifyClientCert
	}
	return tls.NoClientCert
}

// reloadEvery bounds how often the files' modification times are looked
// at: at most one stat of each file per second, however many handshakes.
const reloadEvery = time.Second

// Source is a node's TLS identity loaded from Files, reloaded when a
// file's modification time or size changes (looked at, at most once a
// second, when a handshake needs the identity). A file that fails to load
// keeps the previous identity in use and is logged once per change, so a
// certificate being rewritten in two steps (cert, then key) never breaks
// new connections. Safe for concurrent use.
type Source struct {
	files Files
	log   *slog.Logger
	now   func() time.Time // time.Now; tests move it

	mu struct {
		sync.Mutex
		checked time.Time
		stamps  [3]stamp // cert, key, CA as last loaded or tried
		cur     *identity
	}
}

// identity is one loaded generation of the files; never changed once
// made.
type identity struct {
	cert *tls.Certificate
	pool *x509.CertPool // nil without a CA file
	// servers are this generation's server configurations, by mode,
	// made on first use (serverConfig).
	once    [3]sync.Once
	servers [3]*tls.Config
}

// stamp is what tells a rewritten file: its modification time and size.
type stamp struct {
	mod  time.Time
	size int64
}

// Load reads the files and returns a Source that reloads them on change.
// Errors name the file at fault.
func Load(files Files, log *slog.Logger) (*Source, error) {
	if files.CertFile == "" || files.KeyFile == "" {
		return nil, errors.New("tls: a certificate file and a key file are both needed")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Source{files: files, log: log, now: time.Now}
	stamps, err := s.stat()
	if err != nil {
		return nil, err
	}
	id, err := s.load()
	if err != nil {
		return nil, err
	}
	s.mu.cur, s.mu.stamps, s.mu.checked = id, stamps, s.now()
	return s, nil
}

func (s *Source) stat() ([3]stamp, error) {
	var out [3]stamp
	for i, name := range []string{s.files.CertFile, s.files.KeyFile, s.files.CAFile} {
		if name == "" {
			continue
		}
		fi, err := os.Stat(name)
		if err != nil {
			return out, fmt.Errorf("tls: %w", err)
		}
		out[i] = stamp{fi.ModTime(), fi.Size()}
	}
	return out, nil
}

func (s *Source) load() (*identity, error) {
	cert, err := tls.LoadX509KeyPair(s.files.CertFile, s.files.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s and key %s: %w", s.files.CertFile, s.files.KeyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls: certificate %s: %w", s.files.CertFile, err)
		}
	}
	id := &identity{cert: &cert}
	if s.files.CAFile != "" {
		if id.pool, err = ReadPool(s.files.CAFile, nil); err != nil {
			return nil, fmt.Errorf("tls: CA file: %w", err)
		}
	}
	return id, nil
}

// current returns the identity in use, reloading the files first when
// they changed and the last look is over a second old.
func (s *Source) current() *identity {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if now.Sub(s.mu.checked) < reloadEvery {
		return s.mu.cur
	}
	s.mu.checked = now
	stamps, err := s.stat()
	if err != nil || stamps == s.mu.stamps {
		if err != nil && stamps != s.mu.stamps {
			s.log.Warn("tls: cannot read the certificate files; keeping the loaded certificate", "err", err)
		}
		s.mu.stamps = stamps
		return s.mu.cur
	}
	s.mu.stamps = stamps
	id, err := s.load()
	if err != nil {
		s.log.Warn("tls: changed certificate files do not load; keeping the loaded certificate", "err", err)
		return s.mu.cur
	}
	s.log.Info("tls: certificate reloaded", "cert", s.files.CertFile, "subject", id.cert.Leaf.Subject.String(), "not_after", id.cert.Leaf.NotAfter)
	s.mu.cur = id
	return id
}

// Certificate is the node's certificate as loaded now.
func (s *Source) Certificate() *tls.Certificate { return s.current().cert }

// ServerConfig is the server side of a TLS listener: TLS 1.2 at least,
// the current certificate, and client certificates asked for as auth says
// and verified against the current CA. A mode that verifies client
// certificates needs a CA file.
func (s *Source) ServerConfig(auth ClientAuth) (*tls.Config, error) {
	if _, err := ParseClientAuth(string(auth)); err != nil {
		return nil, err
	}
	if auth != ClientAuthNone && s.files.CAFile == "" {
		return nil, fmt.Errorf("tls client auth %s: needs a CA file to verify client certificates against", auth)
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		},
		// Per handshake, the configuration of the current generation:
		// its certificate and, for client verification, its CA pool.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.current().serverConfig(auth), nil
		},
	}
	return cfg, nil
}

func (id *identity) serverConfig(auth ClientAuth) *tls.Config {
	var i int
	switch auth {
	case ClientAuthRequest:
		i = 1
	case ClientAuthRequire:
		i = 2
	}
	id.once[i].Do(func() {
		id.servers[i] = &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{*id.cert},
			ClientAuth:   auth.tlsMode(),
			ClientCAs:    id.pool,
		}
	})
	return id.servers[i]
}

// ClientConfig is the client side of the node's connections to other
// nodes (inter-broker Kafka connections, raft): TLS 1.2 at least, the
// current certificate as the client certificate, and the server's
// certificate verified against the current CA (the system roots without
// a CA file).
//
// The server's name is checked when the config's ServerName is set (the
// Kafka clients set it to the host they dial); with ServerName empty only
// the chain is, so that raft peers known by IP address are admitted by
// the cluster CA alone.
func (s *Source) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.current().cert, nil
		},
		// Verification is ours (VerifyConnection) so that it uses the CA
		// as reloaded, not the one loaded when the config was made.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyServer(cs, s.current().pool)
		},
	}
}

// verifyServer verifies a server's certificate chain against roots (nil:
// the system's), and its name when the client named the server.
func verifyServer(cs tls.ConnectionState, roots *x509.CertPool) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server sent no certificate")
	}
	opts := x509.VerifyOptions{
		Roots:         roots,
		DNSName:       cs.ServerName,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	_, err := cs.PeerCertificates[0].Verify(opts)
	return err
}
