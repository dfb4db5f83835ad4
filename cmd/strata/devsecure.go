package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"strata/broker"
	"strata/internal/certs"
)

// secureDevUser is the administrator strata dev --secure creates.
const secureDevUser = "admin"

// secureDev is what strata dev --secure made under the data dir: a CA and
// a certificate for the nodes (certs.GenerateDev), and the admin user's
// password, kept across restarts so that clients keep working.
type secureDev struct {
	caFile       string
	passwordFile string
	password     string
}

// setUpSecureDev turns a development node's configuration into a secured
// one: one SASL_SSL listener on addr with SCRAM-SHA-512, TLS with a
// development CA, mutual TLS on the raft port, the authorizer on with the
// admin user as its one super user. Certificates and the password are
// made once under dataDir/certs and reused after.
func setUpSecureDev(cfg *broker.Config, dataDir, addr string) (*secureDev, error) {
	dir := filepath.Join(dataDir, "certs")
	set, err := certs.GenerateDev(dir, nil, 1)
	if err != nil {
		return nil, fmt.Errorf("--secure: certificates in %s: %w", dir, err)
	}
	s := &secureDev{caFile: set.CAFile, passwordFile: filepath.Join(dir, secureDevUser+".password")}
	if s.password, err = devPassword(s.passwordFile); err != nil {
		return nil, fmt.Errorf("--secure: %w", err)
	}
	src, err := certs.Load(certs.Files{CertFile: set.Nodes[0].CertFile, KeyFile: set.Nodes[0].KeyFile, CAFile: set.CAFile},
		cfg.Logger.With("component", "tls"))
	if err != nil {
		return nil, fmt.Errorf("--secure: %w", err)
	}
	if cfg.TLS, err = src.ServerConfig(certs.ClientAuthNone); err != nil {
		return nil, fmt.Errorf("--secure: %w", err)
	}
	if cfg.RaftTLS, err = src.ServerConfig(certs.ClientAuthRequire); err != nil {
		return nil, fmt.Errorf("--secure: %w", err)
	}
	cfg.PeerTLS, cfg.RaftPeerTLS = src.ClientConfig(), src.ClientConfig()
	cfg.Listen = ""
	cfg.Listeners = []broker.Listener{{Name: "SASL_SSL", Security: broker.SASLSSL, Addr: addr}}
	cfg.InterBrokerListener = "SASL_SSL"
	cfg.SASL.Mechanisms = []string{"SCRAM-SHA-512"}
	cfg.SASL.BootstrapUser, cfg.SASL.BootstrapPassword = secureDevUser, s.password
	cfg.Authorizer = true
	cfg.SuperUsers = []string{"User:" + secureDevUser}
	return s, nil
}

// devPassword reads the password kept in file, or makes one and keeps it
// there, readable by its owner only.
func devPassword(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err == nil {
		if p := strings.TrimSpace(string(b)); p != "" {
			return p, nil
		}
		return "", fmt.Errorf("%s is empty: delete it to make a new password", file)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 16)
	rand.Read(raw)
	p := hex.EncodeToString(raw)
	if err := os.WriteFile(file, []byte(p+"\n"), 0o600); err != nil {
		return "", err
	}
	return p, nil
}

// printHints writes how to connect to w: the settings of kcat, of a
// franz-go client and of strata's own client verbs. The password is named
// by its file, so it appears in no terminal or log.
func (s *secureDev) printHints(w io.Writer, bootstrap string) {
	pw := "$(cat " + s.passwordFile + ")"
	fmt.Fprintf(w, `strata dev --secure: SASL_SSL with SCRAM-SHA-512, user %[1]s, password in %[2]s, CA %[3]s
  kcat:     kcat -b %[4]s -X security.protocol=SASL_SSL -X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=%[1]s -X sasl.password="%[5]s" -X ssl.ca.location=%[3]s -L
  strata:   STRATA_SASL_MECHANISM=SCRAM-SHA-512 STRATA_SASL_USERNAME=%[1]s STRATA_SASL_PASSWORD="%[5]s" STRATA_TLS_CA_FILE=%[3]s strata topic list --bootstrap %[4]s --tls
  franz-go: kgo.SeedBrokers(%[6]q), kgo.DialTLSConfig(&tls.Config{RootCAs: pool /* from %[3]s */}),
            kgo.SASL(scram.Auth{User: %[7]q, Pass: password /* from %[2]s */}.AsSha512Mechanism())
`, secureDevUser, s.passwordFile, s.caFile, bootstrap, pw, bootstrap, secureDevUser)
}
