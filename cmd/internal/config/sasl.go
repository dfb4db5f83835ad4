package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SASL configures authentication on the node's SASL listeners. See
// broker.SASLConfig for what each knob does.
type SASL struct {
	Mechanisms     []string // sasl.mechanisms; empty means SCRAM-SHA-256,SCRAM-SHA-512
	PlainUsersFile string   // sasl.plain_users_file
	OAuthJWKS      string   // sasl.oauthbearer_jwks: a file or an http(s) URL
	OAuthUnsecured bool     // sasl.oauthbearer_unsecured
	// BootstrapUser and BootstrapPassword come from sasl.bootstrap_user,
	// NAME:PASSWORD, where PASSWORD may be env:VAR or file:PATH. The
	// password is never printed (String).
	BootstrapUser     string
	BootstrapPassword string
	// ConnectionsMaxReauth is sasl.connections_max_reauth
	// (connections.max.reauth.ms); 0 turns re-authentication off.
	ConnectionsMaxReauth time.Duration
	MaxReceiveSize       int32         // sasl.max_receive_size (sasl.server.max.receive.size)
	FailedDelay          time.Duration // sasl.failed_authentication_delay (connection.failed.authentication.delay.ms)
}

// String describes s with the bootstrap password redacted.
func (s SASL) String() string {
	return fmt.Sprintf("{Mechanisms:%q PlainUsersFile:%q OAuthJWKS:%q OAuthUnsecured:%t BootstrapUser:%q BootstrapPassword:%s ConnectionsMaxReauth:%s MaxReceiveSize:%d FailedDelay:%s}",
		s.Mechanisms, s.PlainUsersFile, s.OAuthJWKS, s.OAuthUnsecured, s.BootstrapUser, redact(s.BootstrapPassword), s.ConnectionsMaxReauth, s.MaxReceiveSize, s.FailedDelay)
}

// GoString is String, so %#v does not leak the password either.
func (s SASL) GoString() string { return s.String() }

// saslSettings are the SASL settings and max.connections.per.ip, appended
// to the settings table by settings.go's init.
var saslSettings = []*setting{
	{
		key: "sasl.mechanisms", flag: "sasl-mechanisms", typ: "list", usage: "SASL mechanisms SASL listeners offer: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN, OAUTHBEARER (default SCRAM-SHA-256,SCRAM-SHA-512)",
		set: func(c *Config, raw string) error {
			var ms []string
			for m := range strings.SplitSeq(raw, ",") {
				if m = strings.ToUpper(strings.TrimSpace(m)); m != "" {
					switch m {
					case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER":
					default:
						return fmt.Errorf("%q: want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", m)
					}
					ms = append(ms, m)
				}
			}
			c.SASL.Mechanisms = ms
			return nil
		},
		get: func(c *Config) string { return strings.Join(c.SASL.Mechanisms, ",") },
	},
	{
		key: "sasl.plain_users_file", flag: "sasl-plain-users-file", typ: "file", usage: "PLAIN's users, one user:password a line, read again when it changes; users it does not name are checked against their SCRAM credentials",
		set: stringSetter(func(c *Config) *string { return &c.SASL.PlainUsersFile }),
		get: func(c *Config) string { return c.SASL.PlainUsersFile },
	},
	{
		key: "sasl.oauthbearer_jwks", flag: "sasl-oauthbearer-jwks", typ: "file|url", usage: "JSON Web Key Set that OAUTHBEARER tokens must be signed by (fetched again for an unknown key id, at most every 30s)",
		set: stringSetter(func(c *Config) *string { return &c.SASL.OAuthJWKS }),
		get: func(c *Config) string { return c.SASL.OAuthJWKS },
	},
	{
		key: "sasl.oauthbearer_unsecured", flag: "sasl-oauthbearer-unsecured", typ: "bool", usage: "accept unsigned OAUTHBEARER tokens, checking only exp and sub (Kafka's default validator; development only)",
		set: boolSetter(func(c *Config) *bool { return &c.SASL.OAuthUnsecured }),
		get: func(c *Config) string { return strconv.FormatBool(c.SASL.OAuthUnsecured) },
	},
	{
		key: "sasl.bootstrap_user", flag: "sasl-bootstrap-user", typ: "name:password", usage: "SCRAM user (both mechanisms) created at start if missing, and the brokers' own on a SASL inter-broker listener; the password may be env:VAR or file:PATH",
		set: func(c *Config, raw string) error {
			user, pass, ok := strings.Cut(raw, ":")
			if !ok || user == "" || pass == "" {
				return fmt.Errorf("want NAME:PASSWORD")
			}
			pass, err := resolveSecret(pass)
			if err != nil {
				return err
			}
			c.SASL.BootstrapUser, c.SASL.BootstrapPassword = user, pass
			return nil
		},
		// Never the password, not even in --help.
		get: func(c *Config) string { return "" },
	},
	{
		key: "sasl.connections_max_reauth", flag: "connections-max-reauth", typ: "duration", usage: "SASL sessions end after this long unless re-authenticated (connections.max.reauth.ms; 0: never)",
		set: durationSetter(func(c *Config) *time.Duration { return &c.SASL.ConnectionsMaxReauth }),
		get: func(c *Config) string { return c.SASL.ConnectionsMaxReauth.String() },
	},
	{
		key: "sasl.max_receive_size", flag: "sasl-max-receive-size", typ: "bytes", usage: "largest frame before authentication; a larger one closes the connection unread (sasl.server.max.receive.size)",
		set: bytes32Setter(func(c *Config) *int32 { return &c.SASL.MaxReceiveSize }, 1024),
		get: func(c *Config) string { return strconv.Itoa(int(c.SASL.MaxReceiveSize)) },
	},
	{
		key: "sasl.failed_authentication_delay", flag: "failed-authentication-delay", typ: "duration", usage: "wait this long before answering a failed authentication and closing (connection.failed.authentication.delay.ms)",
		set: positiveDurationSetter(func(c *Config) *time.Duration { return &c.SASL.FailedDelay }),
		get: func(c *Config) string { return c.SASL.FailedDelay.String() },
	},
	{
		key: "kafka.max_connections_per_ip", flag: "max-connections-per-ip", typ: "int", usage: "open connections one client address may hold; more are closed at once (max.connections.per.ip; 0: no bound)",
		set: intSetter(func(c *Config) *int { return &c.Kafka.MaxConnectionsPerIP }, 0),
		get: func(c *Config) string { return strconv.Itoa(c.Kafka.MaxConnectionsPerIP) },
	},
}
