package localstack_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"strata/localstack"
	"strata/tier/objstore"
	"strata/tier/objstore/objstoretest"
)

func open(t *testing.T, s *localstack.S3) objstore.Store {
	t.Helper()
	st, err := objstore.NewS3(context.Background(), s.Config())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestDiskBackendPassesSuite: the on-disk server that `strata localstack s3
// --dir` runs keeps the Store contract too.
func TestDiskBackendPassesSuite(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store {
		s, stop, err := localstack.StartS3(context.Background(), t.TempDir(), "bucket")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stop() })
		return open(t, s)
	})
}

func TestDiskBackendSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s, stop, err := localstack.StartS3(ctx, dir, "bkt")
	if err != nil {
		t.Fatal(err)
	}
	if err := open(t, s).Put(ctx, "a/key", bytes.NewReader([]byte("kept")), 4); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if _, err := http.Get(s.Endpoint); err == nil {
		t.Fatal("server still answers after stop")
	}
	s, stop, err = localstack.StartS3(ctx, dir, "bkt")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	rc, err := open(t, s).GetRange(ctx, "a/key", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got, _ := io.ReadAll(rc); string(got) != "kept" {
		t.Fatalf("after restart read %q", got)
	}
}

func TestStartRejectsBadBucket(t *testing.T) {
	if _, _, err := localstack.StartS3(context.Background(), "", "Not_A_Bucket"); err == nil {
		t.Fatal("started with an invalid bucket name")
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(localstack.EnvEndpoint, "")
	t.Setenv(localstack.EnvBucket, "")
	if _, ok := localstack.FromEnv(); ok {
		t.Fatal("FromEnv with nothing set reported ok")
	}
	t.Setenv(localstack.EnvEndpoint, "http://127.0.0.1:9000")
	t.Setenv(localstack.EnvBucket, "strata")
	t.Setenv(localstack.EnvAccessKey, "ak")
	t.Setenv(localstack.EnvSecretKey, "sk")
	t.Setenv(localstack.EnvRegion, "")
	s, ok := localstack.FromEnv()
	if !ok || s.Endpoint != "http://127.0.0.1:9000" || s.Bucket != "strata" || s.AccessKey != "ak" || s.SecretKey != "sk" || s.Region != "us-east-1" {
		t.Fatalf("FromEnv = %v, %v", s, ok)
	}
	if c := s.Config(); !c.PathStyle || c.SecretKey != "sk" {
		t.Fatalf("Config = %v", c)
	}
}

func TestCommandServesAndPrints(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := localstack.Command()
	var out syncBuffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"s3", "--listen", "127.0.0.1:0", "--bucket", "devbucket"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	var endpoint string
	for deadline := time.Now().Add(5 * time.Second); endpoint == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for line := range strings.SplitSeq(out.String(), "\n") {
			if v, ok := strings.CutPrefix(line, "export "+localstack.EnvEndpoint+"="); ok {
				endpoint = v
			}
		}
	}
	if endpoint == "" {
		t.Fatalf("no endpoint printed: %q", out.String())
	}
	s := &localstack.S3{Endpoint: endpoint, Region: "us-east-1", Bucket: "devbucket", AccessKey: "x", SecretKey: "y"}
	if err := open(t, s).Put(ctx, "k", bytes.NewReader(nil), 0); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("command did not stop on cancel")
	}
}

// syncBuffer lets the test read what the command goroutine writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
