// Package localstack runs the services Strata depends on, locally, for tests
// and development: today a real S3 endpoint (S3 over HTTP on loopback, served
// in-process) so the aws-sdk-go-v2 client is exercised end to end without
// MinIO or AWS; or, when STRATA_S3_* is set, the S3 server those variables
// name.
//
// The server is github.com/johannesboyne/gofakes3 (MIT). versitygw's
// embedgw was the first choice but cannot be embedded here: its posix
// backend calls os.Chdir into the bucket root and then resolves buckets
// relative to the process's working directory, and embedgw allows one
// gateway per process. Either would break a test binary or broker that runs
// two servers or uses relative paths.
//
// The in-process server does not check request signatures, so it cannot
// catch wrong keys; run the suite against MinIO (docs/minio.md) for that.
package localstack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"strata/tier/objstore"
)

// Fixed keys of the in-process server. It does not verify signatures, so
// these are not secrets; the SDK only needs something to sign with.
const (
	devAccessKey = "strata"
	devSecretKey = "strata-dev-secret"
	devRegion    = "us-east-1"
)

// S3 says where an S3 endpoint is and how to reach it. String redacts the
// secret key.
type S3 struct {
	Endpoint, Region, Bucket string
	// Prefix is a key prefix inside Bucket that this user owns (TestS3 gives
	// each test its own when it runs against a shared server); may be empty.
	Prefix               string
	AccessKey, SecretKey string
}

// Config returns the objstore configuration that reaches s, path-style as
// self-hosted servers need.
func (s *S3) Config() objstore.S3Config {
	return objstore.S3Config{
		Endpoint: s.Endpoint, Region: s.Region, Bucket: s.Bucket, Prefix: s.Prefix,
		PathStyle: true, AccessKey: s.AccessKey, SecretKey: s.SecretKey,
	}
}

func (s *S3) String() string {
	secret := "<unset>"
	if s.SecretKey != "" {
		secret = "<redacted>"
	}
	return fmt.Sprintf("S3{Endpoint:%q Region:%q Bucket:%q Prefix:%q AccessKey:%q SecretKey:%s}",
		s.Endpoint, s.Region, s.Bucket, s.Prefix, s.AccessKey, secret)
}

// GoString keeps %#v from printing the secret key.
func (s *S3) GoString() string { return s.String() }

// Options configures Start.
type Options struct {
	// Listen is the TCP address to serve on; default "127.0.0.1:0" (a free
	// loopback port).
	Listen string
	// Dir, when set, keeps the objects on disk under Dir/<bucket>/<key>
	// (written atomically through objstore's directory store) so they
	// survive a restart. Empty keeps them in memory, which is faster for
	// tests.
	Dir string
	// Bucket is created at start; default "strata".
	Bucket string
}

// Start serves S3 until stop is called; ctx bounds only the start-up.
func Start(ctx context.Context, o Options) (s *S3, stop func() error, err error) {
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.Bucket == "" {
		o.Bucket = "strata"
	}
	if err := gofakes3.ValidateBucketName(o.Bucket); err != nil {
		return nil, nil, fmt.Errorf("localstack: bucket %q: %w", o.Bucket, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	var backend gofakes3.Backend
	if o.Dir == "" {
		backend = s3mem.New()
	} else if backend, err = newDiskBackend(o.Dir); err != nil {
		return nil, nil, fmt.Errorf("localstack: disk backend in %s: %w", o.Dir, err)
	}
	exists, err := backend.BucketExists(o.Bucket)
	if err == nil && !exists {
		err = backend.CreateBucket(o.Bucket)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("localstack: create bucket %q: %w", o.Bucket, err)
	}

	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("localstack: listen: %w", err)
	}
	srv := &http.Server{
		Handler:           gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server(),
		ReadHeaderTimeout: 10 * time.Second,
		// gofakes3 logs harmless protocol noise (superfluous WriteHeader).
		ErrorLog: log.New(io.Discard, "", 0),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()

	var once sync.Once
	var stopErr error
	stop = func() error {
		once.Do(func() {
			// Close, not Shutdown: clients keep pooled connections that
			// Shutdown would wait seconds for, and nothing in flight at
			// stop needs to finish.
			stopErr = srv.Close()
			if err := <-done; !errors.Is(err, http.ErrServerClosed) && stopErr == nil {
				stopErr = err
			}
		})
		return stopErr
	}
	return &S3{
		Endpoint:  "http://" + ln.Addr().String(),
		Region:    devRegion,
		Bucket:    o.Bucket,
		AccessKey: devAccessKey,
		SecretKey: devSecretKey,
	}, stop, nil
}

// StartS3 serves S3 on a free loopback port with bucket created, objects
// kept under dir (in memory when dir is empty). Call stop to shut it down.
func StartS3(ctx context.Context, dir, bucket string) (*S3, func() error, error) {
	return Start(ctx, Options{Dir: dir, Bucket: bucket})
}

// Environment variables that point tests at an external S3 (MinIO, AWS).
const (
	EnvEndpoint  = "STRATA_S3_ENDPOINT"
	EnvBucket    = "STRATA_S3_BUCKET"
	EnvAccessKey = "STRATA_S3_ACCESS_KEY"
	EnvSecretKey = "STRATA_S3_SECRET_KEY"
	EnvRegion    = "STRATA_S3_REGION"
)

// FromEnv returns the S3 that STRATA_S3_ENDPOINT and STRATA_S3_BUCKET (with
// STRATA_S3_ACCESS_KEY, STRATA_S3_SECRET_KEY and optionally
// STRATA_S3_REGION) name, and whether they are set.
func FromEnv() (*S3, bool) {
	s := &S3{
		Endpoint:  os.Getenv(EnvEndpoint),
		Bucket:    os.Getenv(EnvBucket),
		AccessKey: os.Getenv(EnvAccessKey),
		SecretKey: os.Getenv(EnvSecretKey),
		Region:    os.Getenv(EnvRegion),
	}
	if s.Endpoint == "" || s.Bucket == "" {
		return nil, false
	}
	if s.Region == "" {
		s.Region = devRegion
	}
	return s, true
}

var unsafeKeyChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// TestS3 returns an S3 for t: the external one from FromEnv when it is set,
// with a prefix unique to this test run and test, else a fresh in-process
// server stopped when t ends.
func TestS3(t testing.TB) *S3 {
	t.Helper()
	if s, ok := FromEnv(); ok {
		name := strings.Trim(unsafeKeyChars.ReplaceAllString(t.Name(), "_"), "_")
		s.Prefix = fmt.Sprintf("strata-test/%s-%d/%s", time.Now().UTC().Format("20060102T150405"), os.Getpid(), name)
		t.Cleanup(func() { removeAll(t, s) })
		return s
	}
	s, stop, err := StartS3(context.Background(), "", "strata-test")
	if err != nil {
		t.Fatalf("localstack: %v", err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("localstack: stop: %v", err)
		}
	})
	return s
}

// removeAll deletes what a test left under its prefix of a shared bucket.
func removeAll(t testing.TB, s *S3) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := objstore.NewS3(ctx, s.Config())
	if err != nil {
		t.Logf("localstack: cleaning %s: %v", s.Prefix, err)
		return
	}
	var keys []string
	err = st.List(ctx, "", func(a objstore.Attrs) error {
		keys = append(keys, a.Key)
		return nil
	})
	for _, k := range keys {
		if err == nil {
			err = st.Delete(ctx, k)
		}
	}
	if err != nil {
		t.Logf("localstack: cleaning %s: %v", s.Prefix, err)
	}
}
