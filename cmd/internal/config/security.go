package config

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"strata/broker"
)

// parseListener parses one kafka.listeners entry, NAME and
// PROTO://host:port.
func parseListener(name, v string) (broker.Listener, error) {
	if name == "" {
		return broker.Listener{}, fmt.Errorf("%q: empty listener name", "="+v)
	}
	proto, addr, ok := strings.Cut(v, "://")
	if !ok {
		return broker.Listener{}, fmt.Errorf("listener %s: %q is not PROTO://host:port", name, v)
	}
	sec, err := broker.ParseSecurity(proto)
	if err != nil {
		return broker.Listener{}, fmt.Errorf("listener %s: %w", name, err)
	}
	if err := checkHostPort(addr); err != nil {
		return broker.Listener{}, fmt.Errorf("listener %s: %w", name, err)
	}
	return broker.Listener{Name: name, Security: sec, Addr: addr}, nil
}

func checkHostPort(raw string) error {
	_, port, err := net.SplitHostPort(raw)
	if err != nil {
		return fmt.Errorf("%q is not host:port", raw)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("%q does not have a port number", raw)
	}
	return nil
}

// resolveSecret reads a secret setting's value: "env:NAME" is the
// variable NAME, "file:PATH" the file's contents without its trailing
// newline, anything else the value itself. Errors name the reference,
// never the secret.
func resolveSecret(raw string) (string, error) {
	switch {
	case strings.HasPrefix(raw, "env:"):
		name := strings.TrimPrefix(raw, "env:")
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			return "", fmt.Errorf("%s: the variable is not set", raw)
		}
		return v, nil
	case strings.HasPrefix(raw, "file:"):
		data, err := os.ReadFile(strings.TrimPrefix(raw, "file:"))
		if err != nil {
			return "", fmt.Errorf("%s: %w", raw, err)
		}
		v := strings.TrimRight(string(data), "\r\n")
		if v == "" {
			return "", fmt.Errorf("%s: the file is empty", raw)
		}
		return v, nil
	}
	return raw, nil
}

// checkSecurity checks that the listener and TLS settings fit together,
// once every source is applied.
func (c *Config) checkSecurity() error {
	if len(c.Kafka.Listeners) > 0 {
		if c.Kafka.Listen != DefaultListen {
			return fmt.Errorf("kafka.listen %q and kafka.listeners are both set: give every listener with --listener NAME=PROTO://host:port", c.Kafka.Listen)
		}
		if c.Kafka.AdvertisedAddr != "" {
			return fmt.Errorf("kafka.advertised_addr %q and kafka.listeners are both set: use --advertised-listener NAME=host:port", c.Kafka.AdvertisedAddr)
		}
	}
	names := map[string]bool{}
	for _, l := range c.listeners() {
		names[l.Name] = true
	}
	for name := range c.Kafka.AdvertisedListeners {
		if !names[name] {
			return fmt.Errorf("kafka.advertised_listeners: %s names no listener", name)
		}
	}
	if c.Kafka.InterBrokerListener != "" && !names[c.Kafka.InterBrokerListener] {
		return fmt.Errorf("kafka.inter_broker_listener: %s names no listener", c.Kafka.InterBrokerListener)
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		return fmt.Errorf("tls.cert_file %q and tls.key_file %q: set both or neither", c.TLS.CertFile, c.TLS.KeyFile)
	}
	tlsListener := ""
	for _, l := range c.listeners() {
		if l.Security.TLS() {
			tlsListener = l.Name
		}
	}
	if tlsListener != "" && c.TLS.CertFile == "" {
		return fmt.Errorf("listener %s uses TLS but tls.cert_file is not set (use --tls-cert-file and --tls-key-file)", tlsListener)
	}
	if c.TLS.ClientAuth != "" && c.TLS.ClientAuth != "none" && c.TLS.CAFile == "" {
		return fmt.Errorf("tls.client_auth %s verifies client certificates: tls.ca_file must name the CA (use --tls-ca-file)", c.TLS.ClientAuth)
	}
	if c.HTTP.TLS && c.TLS.CertFile == "" {
		return fmt.Errorf("http.tls is on but tls.cert_file is not set (use --tls-cert-file and --tls-key-file)")
	}
	if c.S3.SSEKMSKeyID != "" && c.S3.SSE != "aws:kms" {
		return fmt.Errorf("s3.sse_kms_key_id is set but s3.sse is %q, not aws:kms", c.S3.SSE)
	}
	return nil
}

// listeners are the node's Kafka listeners: kafka.listeners with their
// advertised addresses, or the one PLAINTEXT listener of kafka.listen.
func (c *Config) listeners() []broker.Listener {
	if len(c.Kafka.Listeners) == 0 {
		adv := c.Kafka.AdvertisedAddr
		if adv == "" {
			adv = c.Kafka.AdvertisedListeners[broker.DefaultListenerName]
		}
		return []broker.Listener{{Name: broker.DefaultListenerName, Security: broker.Plaintext, Addr: c.Kafka.Listen, Advertised: adv}}
	}
	out := make([]broker.Listener, len(c.Kafka.Listeners))
	for i, l := range c.Kafka.Listeners {
		l.Advertised = c.Kafka.AdvertisedListeners[l.Name]
		out[i] = l
	}
	return out
}

// BrokerListeners are the node's Kafka listeners as broker.Config takes
// them.
func (c *Config) BrokerListeners() []broker.Listener { return c.listeners() }
