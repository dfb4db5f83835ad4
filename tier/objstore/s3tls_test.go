package objstore_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"strata/tier/objstore"
)

// recordingS3 is an S3 endpoint over TLS that answers every request with
// 200 and records the headers of each PUT.
func recordingS3(t *testing.T) (*httptest.Server, func() []http.Header) {
	t.Helper()
	var mu sync.Mutex
	var puts []http.Header
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			mu.Lock()
			puts = append(puts, r.Header.Clone())
			mu.Unlock()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, func() []http.Header {
		mu.Lock()
		defer mu.Unlock()
		return append([]http.Header(nil), puts...)
	}
}

// caFile writes the test server's certificate as a CA file.
func caFile(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.crt")
	data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestS3CustomCA: an https endpoint signed by a private CA is reached
// with s3.ca_file naming it, and refused without.
func TestS3CustomCA(t *testing.T) {
	srv, _ := recordingS3(t)
	cfg := objstore.S3Config{Endpoint: srv.URL, Bucket: "b", PathStyle: true, AccessKey: "a", SecretKey: "s", MaxRetries: -1}
	if _, err := objstore.NewS3(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("an endpoint of an unknown CA: %v", err)
	}
	cfg.CAFile = caFile(t, srv)
	if _, err := objstore.NewS3(context.Background(), cfg); err != nil {
		t.Fatalf("with the CA file: %v", err)
	}
	cfg.CAFile = filepath.Join(t.TempDir(), "missing.crt")
	if _, err := objstore.NewS3(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "missing.crt") {
		t.Fatalf("a missing CA file: %v", err)
	}
}

// TestS3ServerSideEncryptionHeaders: every object written asks for the
// configured encryption, SSE-S3 or SSE-KMS with its key id.
func TestS3ServerSideEncryptionHeaders(t *testing.T) {
	srv, puts := recordingS3(t)
	ca := caFile(t, srv)
	for _, tc := range []struct {
		sse, key       string
		wantSSE, wantK string
	}{
		{"", "", "", ""},
		{"AES256", "", "AES256", ""},
		{"aws:kms", "arn:aws:kms:eu-west-1:1:key/k", "aws:kms", "arn:aws:kms:eu-west-1:1:key/k"},
	} {
		s, err := objstore.NewS3(context.Background(), objstore.S3Config{
			Endpoint: srv.URL, Bucket: "b", PathStyle: true, AccessKey: "a", SecretKey: "s", MaxRetries: -1,
			CAFile: ca, SSE: tc.sse, SSEKMSKeyID: tc.key,
		})
		if err != nil {
			t.Fatal(err)
		}
		before := len(puts())
		data := []byte("segment")
		if err := s.Put(context.Background(), "k-"+tc.sse, bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		if err := s.Create(context.Background(), "c-"+tc.sse, bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
		got := puts()[before:]
		if len(got) != 2 {
			t.Fatalf("%d PUTs, want 2", len(got))
		}
		for _, h := range got {
			if h.Get("X-Amz-Server-Side-Encryption") != tc.wantSSE || h.Get("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id") != tc.wantK {
				t.Errorf("sse %q: PUT headers sse %q key %q", tc.sse, h.Get("X-Amz-Server-Side-Encryption"), h.Get("X-Amz-Server-Side-Encryption-Aws-Kms-Key-Id"))
			}
		}
	}
	for _, bad := range []objstore.S3Config{
		{Endpoint: srv.URL, Bucket: "b", SSE: "DES"},
		{Endpoint: srv.URL, Bucket: "b", SSE: "AES256", SSEKMSKeyID: "k"},
	} {
		if _, err := objstore.NewS3(context.Background(), bad); err == nil {
			t.Errorf("NewS3(%v) succeeded", bad)
		}
	}
}
