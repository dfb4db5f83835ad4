package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/internal/certs"
)

// tlsBroker starts a broker with a PLAINTEXT listener and an SSL listener
// requiring client certificates of a development CA, and an HTTP port
// over TLS behind a bearer token. It returns the broker and the CA's
// directory (ca.crt, node-0.crt/key, the client certificates).
func tlsBroker(t *testing.T) (*Broker, string) {
	t.Helper()
	src, dir := devCerts(t)
	srv, err := src.ServerConfig(certs.ClientAuthRequire)
	if err != nil {
		t.Fatal(err)
	}
	httpTLS, err := src.ServerConfig(certs.ClientAuthNone)
	if err != nil {
		t.Fatal(err)
	}
	b := testBroker(t, "", func(c *Config) {
		c.Listen = ""
		c.Listeners = []Listener{
			{Name: "PLAIN", Security: Plaintext, Addr: "127.0.0.1:0"},
			{Name: "SECURE", Security: SSL, Addr: "127.0.0.1:0", Advertised: "localhost:0"},
		}
		c.InterBrokerListener = "PLAIN"
		c.TLS = srv
		c.HTTPListen, c.HTTPTLS, c.HTTPBearerToken = "127.0.0.1:0", httpTLS, "s3cret"
	})
	return b, dir
}

// devCerts makes a development CA and a node certificate under a temp
// dir, and returns the node's TLS source and the dir.
func devCerts(t *testing.T) (*certs.Source, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	set, err := certs.GenerateDev(dir, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	src, err := certs.Load(set.Nodes[0], testLogger())
	if err != nil {
		t.Fatal(err)
	}
	return src, dir
}

// clientTLS is a client's TLS config trusting the CA in dir, with the
// client certificate name (none if empty).
func clientTLS(t *testing.T, dir, name string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	c := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if name != "" {
		f, err := certs.DevClient(dir, name, pkix.Name{CommonName: name, Organization: []string{"acme"}})
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c
}

func port(a net.Addr) int32 { return int32(a.(*net.TCPAddr).Port) }

// metadataOn asks for Metadata through a client bootstrapped at addr.
func metadataOn(t *testing.T, addr string, opts ...kgo.Opt) (*kmsg.MetadataResponse, error) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RequestRetries(0), kgo.DialTimeout(3 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
}

// TestListenersPlaintextAndSSL: one broker, a PLAINTEXT and an SSL
// listener requiring client certificates. Clients on each are told that
// listener's endpoint in Metadata and FindCoordinator; records produced
// on one are read on the other; a client without a certificate is
// refused on the SSL one; a certificate rewritten on disk is served to
// new connections without a restart.
func TestListenersPlaintextAndSSL(t *testing.T) {
	b, dir := tlsBroker(t)
	plain, secure := b.ListenerAddr("PLAIN"), b.ListenerAddr("SECURE")
	if plain == nil || secure == nil || b.Addr().String() != plain.String() || b.ListenerAddr("NONE") != nil {
		t.Fatalf("listener addresses: plain %v secure %v first %v", plain, secure, b.Addr())
	}
	alice := kgo.DialTLSConfig(clientTLS(t, dir, "alice"))

	m, err := metadataOn(t, plain.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Brokers) != 1 || m.Brokers[0].Port != port(plain) || m.Brokers[0].Host != "127.0.0.1" {
		t.Fatalf("Metadata on PLAIN advertises %+v, want 127.0.0.1:%d", m.Brokers, port(plain))
	}
	m, err = metadataOn(t, secure.String(), alice)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Brokers) != 1 || m.Brokers[0].Port != port(secure) || m.Brokers[0].Host != "localhost" {
		t.Fatalf("Metadata on SECURE advertises %+v, want localhost:%d", m.Brokers, port(secure))
	}

	// A record produced over TLS is read over plaintext, and the group
	// coordinator each is sent to is on its own listener.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prod := testClient(t, b, kgo.SeedBrokers(secure.String()), alice, kgo.AllowAutoTopicCreation())
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "secure-events", Value: []byte("over tls")}).FirstErr(); err != nil {
		t.Fatalf("produce over SSL: %v", err)
	}
	for _, tc := range []struct {
		addr net.Addr
		opts []kgo.Opt
	}{{plain, nil}, {secure, []kgo.Opt{alice}}} {
		cl := testClient(t, b, append([]kgo.Opt{kgo.SeedBrokers(tc.addr.String())}, tc.opts...)...)
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = "g"
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ErrorCode == 0 && resp.Port != port(tc.addr) {
			t.Errorf("FindCoordinator on %v answers port %d", tc.addr, resp.Port)
		}
		cons := testClient(t, b, append([]kgo.Opt{kgo.SeedBrokers(tc.addr.String()), kgo.ConsumeTopics("secure-events"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, tc.opts...)...)
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume on %v: %v", tc.addr, err)
		}
		if recs := fs.Records(); len(recs) != 1 || string(recs[0].Value) != "over tls" {
			t.Fatalf("consumed on %v: %v", tc.addr, recs)
		}
	}

	// No client certificate, or plaintext on the TLS port: refused.
	if _, err := metadataOn(t, secure.String(), kgo.DialTLSConfig(clientTLS(t, dir, ""))); err == nil {
		t.Fatal("a client without a certificate was answered on the SSL listener")
	}
	if _, err := metadataOn(t, secure.String()); err == nil {
		t.Fatal("a plaintext client was answered on the SSL listener")
	}

	// Rotation: a new certificate of the same CA, written over the node's
	// files, is what the next connection gets, without a restart.
	served := func() *x509.Certificate {
		c, err := tls.Dial("tcp", secure.String(), clientTLS(t, dir, "alice"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0]
	}
	old := served()
	next := filepath.Join(t.TempDir(), "next")
	for _, f := range []string{"ca.crt", "ca.key"} {
		copyFile(t, filepath.Join(dir, f), filepath.Join(next, f))
	}
	if _, err := certs.GenerateDev(next, nil, 1); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"node-0.key", "node-0.crt"} {
		copyFile(t, filepath.Join(next, f), filepath.Join(dir, f))
	}
	deadline := time.Now().Add(10 * time.Second)
	for served().SerialNumber.Cmp(old.SerialNumber) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the rewritten certificate was never served")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestHTTPTLSAndBearerToken: the HTTP port over TLS answers /metrics and
// /readyz only with the bearer token, /healthz without.
func TestHTTPTLSAndBearerToken(t *testing.T) {
	b, dir := tlsBroker(t)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: clientTLS(t, dir, "")}}
	base := "https://" + b.HTTPAddr().String()
	get := func(path, token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/metrics", "", 401}, {"/metrics", "wrong", 401}, {"/metrics", "s3cret", 200},
		{"/readyz", "", 401}, {"/readyz", "s3cret", 200},
		{"/healthz", "", 200},
	} {
		if got := get(tc.path, tc.token); got != tc.want {
			t.Errorf("GET %s with token %q: %d, want %d", tc.path, tc.token, got, tc.want)
		}
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + b.HTTPAddr().String() + "/healthz")
	if err == nil && resp.StatusCode == 200 {
		t.Error("plain HTTP was answered on the TLS port")
	}
	if err == nil {
		resp.Body.Close()
	}
}
