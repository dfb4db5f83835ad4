package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPrincipal: Kafka's DEFAULT mapping rule, the subject's RFC 2253
// string, most specific attribute first, special characters escaped.
func TestPrincipal(t *testing.T) {
	dir := t.TempDir()
	if _, err := GenerateDev(dir, nil, 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		subject pkix.Name
		want    string
	}{
		{pkix.Name{CommonName: "alice", OrganizationalUnit: []string{"eng"}, Organization: []string{"acme"}}, "User:CN=alice,OU=eng,O=acme"},
		{pkix.Name{CommonName: "bob, the builder", Country: []string{"FR"}}, `User:CN=bob\, the builder,C=FR`},
	} {
		f, err := DevClient(dir, tc.subject.CommonName[:3], tc.subject)
		if err != nil {
			t.Fatal(err)
		}
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		if got := Principal(pair.Leaf); got != tc.want {
			t.Errorf("principal %q, want %q", got, tc.want)
		}
	}
}

// fakeClock is a Source's clock that a test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// devSource generates dev certificates in a new directory and loads node
// 0's, on a clock the test moves.
func devSource(t *testing.T) (*Source, DevSet, *fakeClock) {
	t.Helper()
	set, err := GenerateDev(t.TempDir(), []string{"broker.example"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Load(set.Nodes[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Now()}
	s.now = clk.now
	return s, set, clk
}

// replace copies src over dst and gives dst a later modification time
// than it had, as a certificate rotation does.
func replace(t *testing.T, dst, src string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	writeLater(t, dst, data)
}

func writeLater(t *testing.T, dst string, data []byte) {
	t.Helper()
	fi, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o600); err != nil {
		t.Fatal(err)
	}
	later := fi.ModTime().Add(time.Second)
	if err := os.Chtimes(dst, later, later); err != nil {
		t.Fatal(err)
	}
}

// TestReloadAfterRewrite: a certificate rewritten on disk is the one
// served once the next look at the files comes (at most a second later),
// and not before.
func TestReloadAfterRewrite(t *testing.T) {
	s, set, clk := devSource(t)
	old := s.Certificate().Leaf.SerialNumber
	other, err := GenerateDev(t.TempDir(), nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	replace(t, set.Nodes[0].CertFile, other.Nodes[0].CertFile)
	replace(t, set.Nodes[0].KeyFile, other.Nodes[0].KeyFile)
	if got := s.Certificate().Leaf.SerialNumber; got.Cmp(old) != 0 {
		t.Fatal("reloaded within the second after the last look")
	}
	clk.add(2 * time.Second)
	if got := s.Certificate().Leaf.SerialNumber; got.Cmp(old) == 0 {
		t.Fatal("the rewritten certificate was not reloaded")
	}
}

// TestBadFileKeepsOld: a rewritten file that does not load (garbage, or a
// key that does not match yet) leaves the loaded certificate in use; once
// it is fixed, the new one is.
func TestBadFileKeepsOld(t *testing.T) {
	s, set, clk := devSource(t)
	old := s.Certificate().Leaf.SerialNumber
	writeLater(t, set.Nodes[0].CertFile, []byte("not a certificate"))
	clk.add(2 * time.Second)
	if got := s.Certificate(); got == nil || got.Leaf.SerialNumber.Cmp(old) != 0 {
		t.Fatal("a bad certificate file replaced the loaded one")
	}
	other, err := GenerateDev(t.TempDir(), nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	// The cert first, its key a moment later: in between, a mismatch.
	replace(t, set.Nodes[0].CertFile, other.Nodes[0].CertFile)
	clk.add(2 * time.Second)
	if s.Certificate().Leaf.SerialNumber.Cmp(old) != 0 {
		t.Fatal("a certificate without its key replaced the loaded one")
	}
	replace(t, set.Nodes[0].KeyFile, other.Nodes[0].KeyFile)
	clk.add(2 * time.Second)
	if s.Certificate().Leaf.SerialNumber.Cmp(old) == 0 {
		t.Fatal("the fixed files were not reloaded")
	}
	if _, err := Load(Files{CertFile: set.Nodes[0].CertFile, KeyFile: filepath.Join(t.TempDir(), "missing.key")}, nil); err == nil || !strings.Contains(err.Error(), "missing.key") {
		t.Fatalf("loading a missing key: %v", err)
	}
}

// handshake runs one TLS handshake between a client and a server config
// over loopback and returns the server's and client's errors and the
// server's view of the connection.
func handshake(t *testing.T, server, client *tls.Config) (serverErr, clientErr error, st tls.ConnectionState) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			serverErr = err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		serverErr = tc.Handshake()
		if serverErr == nil {
			st = tc.ConnectionState()
			// TLS 1.3 clients learn of a refused certificate on their
			// first read: give them something to read.
			tc.Write([]byte{1})
		}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), client)
	if err == nil {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		var b [1]byte
		_, err = c.Read(b[:])
		c.Close()
	}
	<-done
	return serverErr, err, st
}

// TestClientAuthModes: none admits a client without a certificate; request
// admits one without and verifies one that is given; require refuses a
// client without a certificate the cluster CA signed. The client side
// verifies the server against the CA.
func TestClientAuthModes(t *testing.T) {
	s, set, _ := devSource(t)
	dir := filepath.Dir(set.CAFile)
	alice, err := DevClient(dir, "alice", pkix.Name{CommonName: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := GenerateDev(t.TempDir(), nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(set.CAFile)
	pool.AppendCertsFromPEM(caPEM)
	client := func(f *Files) *tls.Config {
		c := &tls.Config{RootCAs: pool, ServerName: "broker.example"}
		if f != nil {
			pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
			if err != nil {
				t.Fatal(err)
			}
			c.Certificates = []tls.Certificate{pair}
		}
		return c
	}
	for _, tc := range []struct {
		auth    ClientAuth
		cert    *Files
		ok      bool
		subject string
	}{
		{ClientAuthNone, nil, true, ""},
		{ClientAuthNone, &alice, true, ""}, // not asked for, not sent
		{ClientAuthRequest, nil, true, ""},
		{ClientAuthRequest, &alice, true, "CN=alice"},
		{ClientAuthRequest, &stranger.Nodes[0], false, ""},
		{ClientAuthRequire, nil, false, ""},
		{ClientAuthRequire, &alice, true, "CN=alice"},
		{ClientAuthRequire, &stranger.Nodes[0], false, ""},
	} {
		srv, err := s.ServerConfig(tc.auth)
		if err != nil {
			t.Fatal(err)
		}
		serr, cerr, st := handshake(t, srv, client(tc.cert))
		name := string(tc.auth) + " with " + map[bool]string{true: "a certificate", false: "none"}[tc.cert != nil]
		if tc.ok != (serr == nil && cerr == nil) {
			t.Errorf("%s: server %v, client %v; want ok=%v", name, serr, cerr, tc.ok)
			continue
		}
		got := ""
		if len(st.VerifiedChains) > 0 {
			got = st.VerifiedChains[0][0].Subject.String()
		}
		if tc.ok && got != tc.subject {
			t.Errorf("%s: verified client %q, want %q", name, got, tc.subject)
		}
		if st.Version != 0 && st.Version < tls.VersionTLS12 {
			t.Errorf("%s: TLS version %x", name, st.Version)
		}
	}

	// TLS 1.1 is refused.
	srv, _ := s.ServerConfig(ClientAuthNone)
	old := client(nil)
	old.MinVersion, old.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	if serr, _, _ := handshake(t, srv, old); serr == nil {
		t.Error("a TLS 1.1 client was admitted")
	}

	// The node's client side: the server verified against the cluster CA,
	// by name when named and by chain alone when not.
	cc := s.ClientConfig()
	if _, cerr, _ := handshake(t, srv, cc); cerr != nil {
		t.Errorf("client config without a server name: %v", cerr)
	}
	named := cc.Clone()
	named.ServerName = "elsewhere.example"
	if _, cerr, _ := handshake(t, srv, named); cerr == nil {
		t.Error("a server certificate for other names was accepted")
	}
	strangerSrc, err := Load(stranger.Nodes[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	strangerSrv, _ := strangerSrc.ServerConfig(ClientAuthNone)
	if _, cerr, _ := handshake(t, strangerSrv, cc); cerr == nil {
		t.Error("a server certificate from another CA was accepted")
	}
	// And the cluster's require mode admits the node's own client side.
	req, _ := s.ServerConfig(ClientAuthRequire)
	if serr, cerr, st := handshake(t, req, cc); serr != nil || cerr != nil || len(st.VerifiedChains) == 0 {
		t.Errorf("node to node under require: server %v, client %v", serr, cerr)
	}

	if _, err := ParseClientAuth("sometimes"); err == nil {
		t.Error("ParseClientAuth accepted sometimes")
	}
	noCA, _ := Load(Files{CertFile: set.Nodes[0].CertFile, KeyFile: set.Nodes[0].KeyFile}, nil)
	if _, err := noCA.ServerConfig(ClientAuthRequire); err == nil {
		t.Error("require without a CA file was accepted")
	}
}

// TestGenerateDevKeepsFiles: generating again keeps what exists, so a dev
// cluster restarted keeps its CA and its certificates.
func TestGenerateDevKeepsFiles(t *testing.T) {
	dir := t.TempDir()
	a, err := GenerateDev(dir, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	ca1, _ := os.ReadFile(a.CAFile)
	n1, _ := os.ReadFile(a.Nodes[0].CertFile)
	b, err := GenerateDev(dir, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	ca2, _ := os.ReadFile(b.CAFile)
	n2, _ := os.ReadFile(b.Nodes[0].CertFile)
	if !bytes.Equal(ca1, ca2) || !bytes.Equal(n1, n2) {
		t.Fatal("existing files were rewritten")
	}
	if _, err := Load(b.Nodes[1], nil); err != nil {
		t.Fatalf("the added node's certificate: %v", err)
	}
	if fi, _ := os.Stat(b.Nodes[1].KeyFile); fi.Mode().Perm() != 0o600 {
		t.Errorf("key mode %v", fi.Mode())
	}
	os.Remove(b.CAKeyFile)
	if _, err := GenerateDev(dir, nil, 1); err == nil || !strings.Contains(err.Error(), "without the other") {
		t.Fatalf("a CA without its key: %v", err)
	}
}
