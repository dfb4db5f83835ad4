package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"strata/cmd/internal/config"
	"strata/internal/certs"
)

// clientSecurity is how a client verb reaches a secured listener: TLS
// (with a CA to trust and a client certificate) and SASL. Every client verb
// has these flags; the SASL settings and the CA may also come from
// STRATA_SASL_USERNAME, STRATA_SASL_PASSWORD, STRATA_SASL_MECHANISM and
// STRATA_TLS_CA_FILE, so that scripts keep the password off the command
// line. A flag wins over its variable.
type clientSecurity struct {
	environ []string

	tls       bool
	caFile    string
	certFile  string
	keyFile   string
	mechanism string
	username  string
	password  string
	fs        *pflag.FlagSet
}

func (s *clientSecurity) addFlags(fs *pflag.FlagSet, environ []string) {
	s.environ, s.fs = environ, fs
	fs.BoolVar(&s.tls, "tls", false, "connect with TLS (implied by the other --tls-* flags)")
	fs.StringVar(&s.caFile, "tls-ca-file", "", "PEM file of the CA to trust instead of the system's (env "+config.EnvTLSCAFile+")")
	fs.StringVar(&s.certFile, "tls-cert-file", "", "PEM client certificate, for listeners that require one")
	fs.StringVar(&s.keyFile, "tls-key-file", "", "PEM key of --tls-cert-file")
	fs.StringVar(&s.mechanism, "sasl-mechanism", "", "SASL mechanism: SCRAM-SHA-512 (the default with a user name), SCRAM-SHA-256, PLAIN or OAUTHBEARER (the token as --sasl-password) (env "+config.EnvSASLMechanism+")")
	fs.StringVar(&s.username, "sasl-username", "", "SASL user name (env "+config.EnvSASLUsername+")")
	fs.StringVar(&s.password, "sasl-password", "", "SASL password; prefer the variable, which stays out of the process list (env "+config.EnvSASLPassword+")")
}

// value is a flag's value when it was given, else its variable's.
func (s *clientSecurity) value(flag, v, env string) string {
	if s.fs != nil && s.fs.Changed(flag) {
		return v
	}
	if e, ok := lookupEnv(s.environ, env); ok {
		return e
	}
	return v
}

// opts are the kgo options for the flags: none for a plaintext,
// unauthenticated listener.
func (s *clientSecurity) opts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	caFile := s.value("tls-ca-file", s.caFile, config.EnvTLSCAFile)
	if s.tls || caFile != "" || s.certFile != "" || s.keyFile != "" {
		cfg, err := clientTLS(caFile, s.certFile, s.keyFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	mech, err := s.saslMechanism()
	if err != nil {
		return nil, err
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := certs.ReadPool(caFile, nil)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca-file: %w", err)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("--tls-cert-file and --tls-key-file go together")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert-file/--tls-key-file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// saslMechanism is the configured SASL mechanism, nil for none.
func (s *clientSecurity) saslMechanism() (sasl.Mechanism, error) {
	mech := strings.ToUpper(s.value("sasl-mechanism", s.mechanism, config.EnvSASLMechanism))
	user := s.value("sasl-username", s.username, config.EnvSASLUsername)
	pass := s.value("sasl-password", s.password, config.EnvSASLPassword)
	if mech == "" && user == "" && pass == "" {
		return nil, nil
	}
	if mech == "" {
		mech = "SCRAM-SHA-512"
	}
	if mech == "OAUTHBEARER" {
		if pass == "" {
			return nil, errors.New("--sasl-mechanism OAUTHBEARER: give the token as --sasl-password (or " + config.EnvSASLPassword + ")")
		}
		return oauth.Auth{Token: pass}.AsMechanism(), nil
	}
	if user == "" || pass == "" {
		return nil, fmt.Errorf("--sasl-mechanism %s needs --sasl-username and --sasl-password (or %s and %s)", mech, config.EnvSASLUsername, config.EnvSASLPassword)
	}
	switch mech {
	case "PLAIN":
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("--sasl-mechanism %q: want SCRAM-SHA-512, SCRAM-SHA-256, PLAIN or OAUTHBEARER", mech)
}

// authError turns a refused authentication into one line; other errors
// come back as they are.
func (s *clientSecurity) authError(err error) error {
	if !errors.Is(err, kerr.SaslAuthenticationFailed) && !errors.Is(err, kerr.UnsupportedSaslMechanism) && !errors.Is(err, kerr.IllegalSaslState) {
		return err
	}
	mech := strings.ToUpper(s.value("sasl-mechanism", s.mechanism, config.EnvSASLMechanism))
	if mech == "" {
		mech = "SCRAM-SHA-512"
	}
	if user := s.value("sasl-username", s.username, config.EnvSASLUsername); user != "" && mech != "OAUTHBEARER" {
		return fmt.Errorf("authentication failed: the broker refused %s for user %q (check --sasl-username, --sasl-password and --sasl-mechanism)", mech, user)
	}
	return fmt.Errorf("authentication failed: the broker refused %s: %v", mech, err)
}
