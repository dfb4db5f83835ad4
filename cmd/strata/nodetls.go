package main

import (
	"crypto/tls"
	"fmt"

	"strata/broker"
	"strata/cmd/internal/config"
	"strata/internal/certs"
)

// applyTLS sets the HTTP port's bearer token and loads the node's
// certificate (tls.*), giving the broker what it serves its TLS listeners
// (and, with http.tls, its HTTP port) with and what it dials other nodes
// with; with a CA file too, the raft port (raft, joins, voters queries)
// runs over mutual TLS against that CA. The files are reloaded when they
// change (internal/certs).
func applyTLS(cfg *broker.Config, c config.Config) error {
	cfg.HTTPBearerToken = c.HTTP.BearerToken
	cfg.HTTPPprof = c.HTTP.Pprof
	t := c.TLS
	if t.CertFile == "" {
		return nil
	}
	src, err := certs.Load(certs.Files{CertFile: t.CertFile, KeyFile: t.KeyFile, CAFile: t.CAFile}, cfg.Logger.With("component", "tls"))
	if err != nil {
		return err
	}
	auth, err := certs.ParseClientAuth(t.ClientAuth)
	if err != nil {
		return fmt.Errorf("tls.client_auth: %w", err)
	}
	if cfg.TLS, err = src.ServerConfig(auth); err != nil {
		return err
	}
	cfg.PeerTLS = src.ClientConfig()
	if c.HTTP.TLS {
		if cfg.HTTPTLS, err = src.ServerConfig(certs.ClientAuthNone); err != nil {
			return err
		}
	}
	if t.CAFile != "" {
		// The raft port admits only the cluster CA's certificates,
		// whatever the Kafka listeners ask of clients.
		if cfg.RaftTLS, err = src.ServerConfig(certs.ClientAuthRequire); err != nil {
			return err
		}
		cfg.RaftPeerTLS = src.ClientConfig()
	}
	return nil
}

// placeholderTLS stands in for the node's certificate when the flags are
// checked alone (checkFlagsAlone): whether the certificate loads is
// checked once every source is applied.
func placeholderTLS(cfg *broker.Config) {
	if cfg.TLS == nil {
		cfg.TLS = &tls.Config{}
	}
	if cfg.PeerTLS == nil {
		cfg.PeerTLS = &tls.Config{}
	}
}
