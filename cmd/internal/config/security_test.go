package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"strata/broker"
)

// TestListenerSettings: listeners, their advertised addresses and the
// inter-broker listener from a file, flags and the environment, in the
// order given; --listen alone is still one PLAINTEXT listener.
func TestListenerSettings(t *testing.T) {
	cfg, _, err := load(t, `
node: {data_dir: /d}
kafka:
  listeners:
    INTERNAL: SSL://0.0.0.0:9093
    EXTERNAL: sasl_ssl://0.0.0.0:9094
  advertised_listeners:
    EXTERNAL: kafka.example:19094
  inter_broker_listener: INTERNAL
tls:
  cert_file: /c.crt
  key_file: /c.key
  ca_file: /ca.crt
  client_auth: require
`, nil, "--listener", "PLAIN=PLAINTEXT://127.0.0.1:9092", "--advertised-listener", "INTERNAL=10.0.0.1:9093")
	if err != nil {
		t.Fatal(err)
	}
	want := []broker.Listener{
		{Name: "INTERNAL", Security: broker.SSL, Addr: "0.0.0.0:9093", Advertised: "10.0.0.1:9093"},
		{Name: "EXTERNAL", Security: broker.SASLSSL, Addr: "0.0.0.0:9094", Advertised: "kafka.example:19094"},
		{Name: "PLAIN", Security: broker.Plaintext, Addr: "127.0.0.1:9092"},
	}
	if got := cfg.BrokerListeners(); !reflect.DeepEqual(got, want) {
		t.Errorf("listeners %+v\nwant %+v", got, want)
	}
	if cfg.Kafka.InterBrokerListener != "INTERNAL" || cfg.TLS != (TLS{CertFile: "/c.crt", KeyFile: "/c.key", CAFile: "/ca.crt", ClientAuth: "require"}) {
		t.Errorf("inter-broker %q, tls %+v", cfg.Kafka.InterBrokerListener, cfg.TLS)
	}

	cfg, _, err = load(t, "", []string{"STRATA_DATA_DIR=/d", "STRATA_LISTENERS=A=PLAINTEXT://:1,B=PLAINTEXT://:2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.BrokerListeners(); len(got) != 2 || got[1].Name != "B" || got[1].Addr != ":2" {
		t.Errorf("listeners from the environment: %+v", got)
	}

	cfg, _, err = load(t, "", nil, "--data-dir", "/d", "--listen", "127.0.0.1:0", "--advertised-addr", "h:1")
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.BrokerListeners(); !reflect.DeepEqual(got, []broker.Listener{{Name: "PLAINTEXT", Security: broker.Plaintext, Addr: "127.0.0.1:0", Advertised: "h:1"}}) {
		t.Errorf("--listen made %+v", got)
	}
}

// TestSecuritySettingErrors: a bad value is one line naming the flag (or
// the key), and settings that do not fit together say which.
func TestSecuritySettingErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listener", "A=TLS://:1"}, `"--listener" flag: listener A: unknown security protocol "TLS"`},
		{[]string{"--listener", "A=:9092"}, `"--listener" flag: listener A: ":9092" is not PROTO://host:port`},
		{[]string{"--listener", "SSL://:9093"}, `"--listener" flag: "SSL://:9093" is not key=value`},
		{[]string{"--listener", "A=PLAINTEXT://nohost"}, `"--listener" flag: listener A: "nohost" is not host:port`},
		{[]string{"--advertised-listener", "A=x"}, `"--advertised-listener" flag: advertised listener A: "x" is not host:port`},
		{[]string{"--tls-client-auth", "maybe"}, `"--tls-client-auth" flag: client auth "maybe": want none, request or require`},
		{[]string{"--s3-sse", "aes"}, `"--s3-sse" flag: "aes": want AES256 or aws:kms`},
		{[]string{"--http-bearer-token", "file:/nonexistent/token"}, `"--http-bearer-token" flag: file:/nonexistent/token:`},
		{[]string{"--listener", "A=PLAINTEXT://:1", "--listen", ":2"}, "kafka.listen \":2\" and kafka.listeners are both set"},
		{[]string{"--listener", "A=PLAINTEXT://:1", "--advertised-listener", "B=h:1"}, "kafka.advertised_listeners: B names no listener"},
		{[]string{"--inter-broker-listener", "X"}, "kafka.inter_broker_listener: X names no listener"},
		{[]string{"--listener", "A=SSL://:1"}, "listener A uses TLS but tls.cert_file is not set"},
		{[]string{"--tls-cert-file", "c"}, "set both or neither"},
		{[]string{"--tls-cert-file", "c", "--tls-key-file", "k", "--tls-client-auth", "require"}, "tls.client_auth require verifies client certificates: tls.ca_file must name the CA"},
		{[]string{"--http-tls"}, "http.tls is on but tls.cert_file is not set"},
		{[]string{"--s3-sse-kms-key-id", "k"}, `s3.sse_kms_key_id is set but s3.sse is ""`},
	} {
		_, _, err := load(t, "", nil, append([]string{"--data-dir", "/d"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestBearerTokenReferences: the token may be given by env: or file:
// reference, and is never shown as a default.
func TestBearerTokenReferences(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("STRATA_TEST_TOKEN", "from-env")
	for raw, want := range map[string]string{"plain": "plain", "file:" + path: "from-file", "env:STRATA_TEST_TOKEN": "from-env"} {
		cfg, _, err := load(t, "", nil, "--data-dir", "/d", "--http-bearer-token", raw)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.HTTP.BearerToken != want {
			t.Errorf("%s: token %q, want %q", raw, cfg.HTTP.BearerToken, want)
		}
		if s := byKey["http.bearer_token"]; s.get(&cfg) != "" {
			t.Error("the token shows as a default")
		}
	}
}
