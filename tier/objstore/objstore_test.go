package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"strata/localstack"
	"strata/tier/objstore"
	"strata/tier/objstore/objstoretest"
)

func newDir(t *testing.T) objstore.Store {
	s, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newS3(t *testing.T, ls *localstack.S3) objstore.Store {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := objstore.NewS3(ctx, ls.Config())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDir(t *testing.T) {
	objstoretest.Run(t, newDir)
}

// TestS3InProcess runs the suite through aws-sdk-go-v2 against the in-process
// S3 server, or against STRATA_S3_* when set.
func TestS3InProcess(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return newS3(t, localstack.TestS3(t)) })
}

// TestS3External runs the suite against the S3 that STRATA_S3_* names.
func TestS3External(t *testing.T) {
	if _, ok := localstack.FromEnv(); !ok {
		t.Skipf("set %s and %s (and the keys) to run the suite against MinIO or AWS; see docs/minio.md",
			localstack.EnvEndpoint, localstack.EnvBucket)
	}
	objstoretest.Run(t, func(t *testing.T) objstore.Store { return newS3(t, localstack.TestS3(t)) })
}

// TestDecorators checks that the decorators keep the contract: a prefixed,
// counted, fault-free, retrying store is still a Store.
func TestDecorators(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store {
		s, err := objstore.WithPrefix(newDir(t), "some/prefix")
		if err != nil {
			t.Fatal(err)
		}
		s = objstore.WithMetrics(s, objstore.NewMetrics())
		s = objstore.WithFaults(s, objstore.FaultConfig{})
		return objstore.WithRetry(s, objstore.RetryPolicy{})
	})
}

func TestPrefixIsolates(t *testing.T) {
	ctx := context.Background()
	base := newDir(t)
	a, _ := objstore.WithPrefix(base, "a/")
	b, _ := objstore.WithPrefix(base, "b")
	if err := a.Put(ctx, "k", bytes.NewReader([]byte("A")), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stat(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("b sees a's key: %v", err)
	}
	if at, err := base.Stat(ctx, "a/k"); err != nil || at.Size != 1 {
		t.Fatalf("base Stat(a/k) = %+v, %v", at, err)
	}
	if _, err := objstore.WithPrefix(base, "../x"); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("WithPrefix(../x) = %v, want ErrInvalidKey", err)
	}
}

func TestMetricsCountRequestsAndBytes(t *testing.T) {
	ctx := context.Background()
	m := objstore.NewMetrics()
	s := objstore.WithMetrics(newDir(t), m)
	data := make([]byte, 1000)
	for i := range 3 {
		if err := s.Put(ctx, fmt.Sprint("k", i), bytes.NewReader(data), int64(len(data))); err != nil {
			t.Fatal(err)
		}
	}
	before := m.Counts()
	rc, err := s.GetRange(ctx, "k0", 100, 500)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, rc)
	rc.Close()
	s.Stat(ctx, "missing")
	s.List(ctx, "", func(objstore.Attrs) error { return nil })
	s.Delete(ctx, "k1")

	c := m.Counts()
	if p := c[objstore.OpPut]; p.Requests != 3 || p.Bytes != 3000 || p.Errors != 0 {
		t.Fatalf("put counts %+v", p)
	}
	d := c.Sub(before)
	if g := d[objstore.OpGet]; g.Requests != 1 || g.Bytes != 500 {
		t.Fatalf("get counts %+v", g)
	}
	if st := d[objstore.OpStat]; st.Requests != 1 || st.Errors != 1 {
		t.Fatalf("stat counts %+v", st)
	}
	if d[objstore.OpList].Requests != 1 || d[objstore.OpDelete].Requests != 1 || d[objstore.OpPut].Requests != 0 {
		t.Fatalf("delta %+v", d)
	}
}

func TestFaultsFailRetryably(t *testing.T) {
	ctx := context.Background()
	f := objstore.WithFaults(newDir(t), objstore.FaultConfig{FailRate: 1, Seed: 1})
	err := f.Put(ctx, "k", bytes.NewReader([]byte("x")), 1)
	if !errors.Is(err, objstore.ErrInjected) || !objstore.IsRetryable(err) {
		t.Fatalf("Put = %v, want a retryable ErrInjected", err)
	}
	f.SetConfig(objstore.FaultConfig{Seed: 1})
	if _, err := f.Stat(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a failed Put was applied: Stat = %v", err)
	}

	// A lost reply applies the write and still fails.
	f.SetConfig(objstore.FaultConfig{LostReplyRate: 1, Seed: 1})
	if err := f.Put(ctx, "k", bytes.NewReader([]byte("x")), 1); !errors.Is(err, objstore.ErrInjected) {
		t.Fatalf("Put with a lost reply = %v", err)
	}
	f.SetConfig(objstore.FaultConfig{Seed: 1})
	if _, err := f.Stat(ctx, "k"); err != nil {
		t.Fatalf("a Put whose reply was lost was not applied: %v", err)
	}
	if fails, _ := f.Injected(); fails != 2 {
		t.Fatalf("Injected fails = %d, want 2", fails)
	}
}

func TestFaultsStallHonoursContext(t *testing.T) {
	f := objstore.WithFaults(newDir(t), objstore.FaultConfig{StallRate: 1, Stall: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := f.Stat(ctx, "k")
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("stalled Stat = %v after %v, want the ctx deadline promptly", err, time.Since(start))
	}
	if _, stalls := f.Injected(); stalls != 1 {
		t.Fatalf("stalls = %d", stalls)
	}

	// A short stall delays the call and then lets it through.
	f.SetConfig(objstore.FaultConfig{StallRate: 1, Stall: 20 * time.Millisecond})
	start = time.Now()
	if _, err := f.Stat(context.Background(), "k"); !errors.Is(err, objstore.ErrNotFound) || time.Since(start) < 20*time.Millisecond {
		t.Fatalf("short stall: %v after %v", err, time.Since(start))
	}
}

// TestRetryRidesOutFaults is the shape of the uploader's and remote reader's
// fault tests: with 30% of calls failing (half of the failed gets mid-body),
// some writes applied with lost replies and some attempts stalling past the
// attempt timeout, every operation through WithRetry still succeeds with the
// right bytes.
func TestRetryRidesOutFaults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := objstore.NewMetrics()
	f := objstore.WithFaults(objstore.WithMetrics(newDir(t), m), objstore.FaultConfig{
		FailRate: 0.3, LostReplyRate: 0.1, StallRate: 0.05, Stall: time.Hour, Seed: 42,
	})
	s := objstore.WithRetry(f, objstore.RetryPolicy{
		Attempts: 20, Backoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond, AttemptTimeout: 50 * time.Millisecond,
	})
	const n = 40
	payload := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 10_000+i) }
	for i := range n {
		b := payload(i)
		if err := s.Put(ctx, fmt.Sprintf("seg/%02d", i), bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	for i := range n {
		rc, err := s.GetRange(ctx, fmt.Sprintf("seg/%02d", i), 0, -1)
		if err != nil {
			t.Fatalf("GetRange %d: %v", i, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, payload(i)) {
			t.Fatalf("object %d: %d bytes, err %v", i, len(got), err)
		}
	}
	var keys []string
	if err := s.List(ctx, "seg/", func(a objstore.Attrs) error {
		keys = append(keys, a.Key)
		return nil
	}); err != nil || len(keys) != n {
		t.Fatalf("List: %d keys, err %v", len(keys), err)
	}
	for i := range n {
		if err := s.Delete(ctx, fmt.Sprintf("seg/%02d", i)); err != nil {
			t.Fatalf("Delete %d: %v", i, err)
		}
	}
	fails, stalls := f.Injected()
	if fails == 0 || stalls == 0 {
		t.Fatalf("injected %d fails and %d stalls; the test exercised nothing", fails, stalls)
	}
	t.Logf("injected %d failures and %d stalls; %d puts reached the store", fails, stalls, m.Counts()[objstore.OpPut].Requests)
}

func TestRetryGivesUpOnPermanentErrors(t *testing.T) {
	var calls atomic.Int64
	s := objstore.WithRetry(countingStore{newDir(t), &calls}, objstore.RetryPolicy{Attempts: 5, Backoff: time.Millisecond})
	if _, err := s.Stat(context.Background(), "missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatal(err)
	}
	if calls.Load() != 1 {
		t.Fatalf("not found was retried: %d calls", calls.Load())
	}
	// Retryable failures stop after Attempts.
	calls.Store(0)
	f := objstore.WithFaults(countingStore{newDir(t), &calls}, objstore.FaultConfig{FailRate: 1})
	s = objstore.WithRetry(f, objstore.RetryPolicy{Attempts: 3, Backoff: time.Millisecond})
	if err := s.Delete(context.Background(), "k"); !errors.Is(err, objstore.ErrInjected) {
		t.Fatalf("Delete = %v", err)
	}
	if fails, _ := f.Injected(); fails != 3 {
		t.Fatalf("%d attempts, want 3", fails)
	}
}

type countingStore struct {
	objstore.Store
	calls *atomic.Int64
}

func (c countingStore) Stat(ctx context.Context, key string) (objstore.Attrs, error) {
	c.calls.Add(1)
	return c.Store.Stat(ctx, key)
}

func TestConcat(t *testing.T) {
	parts := []*io.SectionReader{
		io.NewSectionReader(strings.NewReader("hello, "), 0, 7),
		io.NewSectionReader(strings.NewReader(""), 0, 0),
		io.NewSectionReader(strings.NewReader("xxworld!"), 2, 6),
	}
	c := objstore.Concat(parts...)
	if c.Size() != 13 {
		t.Fatalf("size %d", c.Size())
	}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hello, world!" {
		t.Fatalf("%q, %v", got, err)
	}
	buf := make([]byte, 5)
	if n, err := c.ReadAt(buf, 5); n != 5 || err != nil || string(buf) != ", wor" {
		t.Fatalf("ReadAt across parts: %q %d %v", buf[:n], n, err)
	}
	s := newDir(t)
	if err := s.Put(context.Background(), "c", c, c.Size()); err != nil {
		t.Fatal(err)
	}
}

func TestS3UnreachableEndpointFailsFast(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	start := time.Now()
	_, err = objstore.NewS3(context.Background(), objstore.S3Config{
		Endpoint: "http://" + addr, Bucket: "b", PathStyle: true, AccessKey: "a", SecretKey: "s",
	})
	if err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("NewS3 on a dead endpoint: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v to report a dead endpoint", d)
	}
}

func TestS3MissingBucket(t *testing.T) {
	ls := *localstack.TestS3(t)
	ls.Bucket = "no-such-bucket-strata"
	ls.Prefix = ""
	_, err := objstore.NewS3(context.Background(), ls.Config())
	if err == nil || !strings.Contains(err.Error(), `bucket "no-such-bucket-strata"`) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("NewS3 with a missing bucket: %v", err)
	}
}

func TestS3ConfigErrors(t *testing.T) {
	for _, c := range []objstore.S3Config{
		{},
		{Bucket: "b", Endpoint: "127.0.0.1:9000"},
		{Bucket: "b", AccessKey: "only-access"},
	} {
		if _, err := objstore.NewS3(context.Background(), c); err == nil {
			t.Fatalf("NewS3(%v) succeeded", c)
		}
	}
}

// TestS3StallIsRetriedThenReported: a server that accepts requests and never
// answers costs each attempt RequestTimeout, then a retryable error.
func TestS3StallIsRetriedThenReported(t *testing.T) {
	var requests atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			return // HeadBucket at start-up: 200
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	s, err := objstore.NewS3(context.Background(), objstore.S3Config{
		Endpoint: srv.URL, Bucket: "b", PathStyle: true, AccessKey: "a", SecretKey: "s",
		RequestTimeout: 200 * time.Millisecond, MaxRetries: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = s.Stat(context.Background(), "k")
	if err == nil || !objstore.IsRetryable(err) {
		t.Fatalf("Stat against a stalled server = %v, want a retryable error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("stalled Stat took %v", d)
	}
	if got := requests.Load() - 1; got != 3 {
		t.Fatalf("%d attempts, want 1 + 2 retries", got)
	}
}

func TestSecretsNeverPrinted(t *testing.T) {
	const secret, access = "SUPER-SECRET-KEY-123", "AKIA-ACCESS-456"
	c := objstore.S3Config{Endpoint: "http://x", Bucket: "b", AccessKey: access, SecretKey: secret}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("config", "s3", c)
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("config", "s3", c)
	for _, out := range []string{fmt.Sprint(c), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), fmt.Sprint(&c), buf.String()} {
		if strings.Contains(out, secret) || strings.Contains(out, access) {
			t.Fatalf("keys leaked: %s", out)
		}
	}
	if !strings.Contains(buf.String(), "http://x") {
		t.Fatalf("log lost the endpoint: %s", buf.String())
	}
	ls := &localstack.S3{Endpoint: "http://x", SecretKey: secret}
	if out := fmt.Sprintf("%v %+v %#v %s", ls, ls, ls, ls); strings.Contains(out, secret) {
		t.Fatalf("localstack.S3 leaked the secret: %s", out)
	}
}
