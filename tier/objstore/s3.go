package objstore

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strata/internal/certs"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
)

// S3 defaults; see S3Config.
const (
	DefaultRequestTimeout = 30 * time.Second
	DefaultMaxRetries     = 3
	DefaultMinThroughput  = 1 << 20 // bytes per second
	DefaultRegion         = "us-east-1"

	// dialTimeout bounds connecting, so an unroutable endpoint fails the
	// start-up check in seconds rather than after the kernel's minutes.
	dialTimeout = 5 * time.Second
	// maxConnsPerHost lets the remote reader's worker pool keep enough
	// connections open for parallel ranged GETs (the SDK default is 10).
	maxConnsPerHost = 64
	maxBackoff      = 5 * time.Second
)

// S3Config configures NewS3. Only cmd fills it from flags and the
// environment; the zero value of every optional field means its default.
// String, GoString and LogValue redact the keys, so a config can be printed
// or logged safely.
type S3Config struct {
	// Endpoint is the service URL, e.g. "http://127.0.0.1:9000" for MinIO.
	// Empty means AWS S3 for Region.
	Endpoint string
	// Region signs requests; empty means the AWS chain's region, else
	// DefaultRegion.
	Region string
	// Bucket must exist; NewS3 checks it with HeadBucket.
	Bucket string
	// Prefix is prepended to every key (see WithPrefix), so several clusters
	// or tests can share a bucket.
	Prefix string
	// PathStyle addresses the bucket as endpoint/bucket/key instead of
	// bucket.endpoint/key; MinIO and most self-hosted servers need it.
	PathStyle bool
	// AccessKey and SecretKey are static credentials. Both empty means the
	// default AWS credential chain (environment, shared files, SSO, IMDS).
	AccessKey, SecretKey string
	// RequestTimeout bounds each attempt's wait for response headers (after
	// the request body is sent) and the start-up check. Default 30s.
	RequestTimeout time.Duration
	// MaxRetries is how many times the SDK retries a retryable failure,
	// with jittered exponential backoff. 0 means DefaultMaxRetries; a
	// negative value disables retries.
	MaxRetries int
	// CAFile names PEM CA certificates that an https endpoint's
	// certificate is verified against besides the system's: a private
	// MinIO or S3 gateway signed by the company's CA.
	CAFile string
	// SSE asks the bucket to encrypt every object written: "AES256"
	// (SSE-S3, the bucket's keys) or "aws:kms" (SSE-KMS, with SSEKMSKeyID
	// or, empty, the account's default KMS key). Empty asks nothing (the
	// bucket's default encryption, if any, applies).
	SSE         string
	SSEKMSKeyID string
	// MinThroughput (bytes/s) sizes the deadline of transfers, so a
	// stalled transfer fails (retryably) instead of hanging: reading a
	// ranged body of n bytes must finish within RequestTimeout +
	// n/MinThroughput, a Put of n bytes within that times its attempts.
	// Default 1 MiB/s.
	MinThroughput int64
}

func (c S3Config) withDefaults() S3Config {
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = DefaultMaxRetries
	} else if c.MaxRetries < 0 {
		c.MaxRetries = 0
	}
	if c.MinThroughput <= 0 {
		c.MinThroughput = DefaultMinThroughput
	}
	return c
}

func (c S3Config) validate() error {
	if c.Bucket == "" {
		return errors.New("objstore: s3: bucket is required")
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("objstore: s3: endpoint %q is not an http:// or https:// URL", c.Endpoint)
		}
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		return errors.New("objstore: s3: access key and secret key must be set together (or neither, for the default AWS credential chain)")
	}
	switch types.ServerSideEncryption(c.SSE) {
	case "", types.ServerSideEncryptionAes256, types.ServerSideEncryptionAwsKms:
	default:
		return fmt.Errorf("objstore: s3: server-side encryption %q: want AES256 or aws:kms", c.SSE)
	}
	if c.SSEKMSKeyID != "" && types.ServerSideEncryption(c.SSE) != types.ServerSideEncryptionAwsKms {
		return fmt.Errorf("objstore: s3: a KMS key id needs server-side encryption aws:kms, not %q", c.SSE)
	}
	return nil
}

// rootCAs is the system's certificate pool plus the certificates of
// CAFile, nil (the system's) without one.
func (c S3Config) rootCAs() (*x509.CertPool, error) {
	if c.CAFile == "" {
		return nil, nil
	}
	system, _ := x509.SystemCertPool() // nil when there is none: ReadPool starts afresh
	pool, err := certs.ReadPool(c.CAFile, system)
	if err != nil {
		return nil, fmt.Errorf("objstore: s3: CA file: %w", err)
	}
	return pool, nil
}

func redact(s string) string {
	if s == "" {
		return "<unset>"
	}
	return "<redacted>"
}

// String describes the config with the keys redacted.
func (c S3Config) String() string {
	return fmt.Sprintf("S3Config{Endpoint:%q Region:%q Bucket:%q Prefix:%q PathStyle:%t CAFile:%q SSE:%q SSEKMSKeyID:%q AccessKey:%s SecretKey:%s RequestTimeout:%s MaxRetries:%d MinThroughput:%d}",
		c.Endpoint, c.Region, c.Bucket, c.Prefix, c.PathStyle, c.CAFile, c.SSE, c.SSEKMSKeyID, redact(c.AccessKey), redact(c.SecretKey),
		c.RequestTimeout, c.MaxRetries, c.MinThroughput)
}

// GoString keeps %#v from printing the keys.
func (c S3Config) GoString() string { return c.String() }

// LogValue keeps slog from printing the keys.
func (c S3Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("endpoint", c.Endpoint), slog.String("region", c.Region),
		slog.String("bucket", c.Bucket), slog.String("prefix", c.Prefix),
		slog.Bool("path_style", c.PathStyle), slog.String("ca_file", c.CAFile), slog.String("sse", c.SSE),
		slog.String("access_key", redact(c.AccessKey)), slog.String("secret_key", redact(c.SecretKey)))
}

type s3Store struct {
	cfg    S3Config
	client *s3.Client
}

var _ Store = (*s3Store)(nil)

// NewS3 returns a Store on an S3 bucket. It checks at once that the endpoint
// answers and the bucket exists and is accessible (HeadBucket, one attempt),
// so a broker with a wrong endpoint, bucket or key fails at start-up with an
// error that says which, not at its first upload.
//
// Retries are the SDK's standard retryer (jittered exponential backoff, at
// most MaxRetries+1 attempts, no client-side retry quota so a long outage
// does not leave the client refusing to retry); errors that survive them are
// classified for IsRetryable. Put is one PutObject with a known content
// length, never multipart.
func NewS3(ctx context.Context, cfg S3Config) (Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	roots, err := cfg.rootCAs()
	if err != nil {
		return nil, err
	}

	httpClient := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = dialTimeout }).
		WithTransportOptions(func(t *http.Transport) {
			t.ResponseHeaderTimeout = cfg.RequestTimeout
			t.MaxIdleConnsPerHost = maxConnsPerHost
			if roots != nil {
				if t.TLSClientConfig == nil {
					t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
				}
				t.TLSClientConfig.RootCAs = roots
			}
		})
	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(httpClient),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = cfg.MaxRetries + 1
				o.MaxBackoff = maxBackoff
				o.RateLimiter = ratelimit.None
			})
		}),
		// Validating a response checksum needs the whole object; Strata
		// reads ranges and verifies its own per-part CRCs instead. (Some
		// servers even send the full object's checksum with a range.)
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
		// The SDK's own logger writes free-form lines to stderr (e.g. an
		// IMDS fallback warning); our errors carry what matters instead.
		config.WithLogger(logging.Nop{}),
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.AccessKey != "" {
		opts = append(opts,
			config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")),
			// With static keys nothing may probe the instance metadata
			// service: off EC2 that is a stray request to a link-local
			// address.
			config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("objstore: s3: load AWS config: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = DefaultRegion
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
	})
	st := &s3Store{cfg: cfg, client: client}
	if cfg.AccessKey == "" && awsCfg.Credentials != nil {
		if err := st.checkCredentials(ctx, awsCfg.Credentials); err != nil {
			return nil, err
		}
	}
	if err := st.checkBucket(ctx); err != nil {
		return nil, err
	}
	if cfg.Prefix != "" {
		return WithPrefix(st, cfg.Prefix)
	}
	return st, nil
}

// ErrNoCredentials is returned by NewS3 when no keys were given and the
// default AWS credential chain found none.
var ErrNoCredentials = errors.New("no credentials")

func (s *s3Store) where() string {
	ep := s.cfg.Endpoint
	if ep == "" {
		ep = "AWS S3"
	}
	return fmt.Sprintf("bucket %q at %s", s.cfg.Bucket, ep)
}

func (s *s3Store) String() string { return "s3:" + s.where() }

// checkCredentials resolves the default chain's credentials before the
// first request, because the SDK reports a chain that found nothing as a
// failure to send that request, which reads like a dead endpoint. The
// chain caches what it finds, so the requests that follow reuse it.
func (s *s3Store) checkCredentials(ctx context.Context, p aws.CredentialsProvider) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout+dialTimeout)
	defer cancel()
	if _, err := p.Retrieve(ctx); err != nil {
		return fmt.Errorf("objstore: s3: %w for %s: none given, and the default AWS chain found none "+
			"(it looks at AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, ~/.aws/credentials and ~/.aws/config "+
			"for AWS_PROFILE or the default profile, AWS_WEB_IDENTITY_TOKEN_FILE, ECS/EKS container credentials, "+
			"and the EC2 instance metadata service): %v", ErrNoCredentials, s.where(), err)
	}
	return nil
}

func (s *s3Store) checkBucket(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout+dialTimeout)
	defer cancel()
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.cfg.Bucket)},
		func(o *s3.Options) { o.RetryMaxAttempts = 1 })
	if err == nil {
		return nil
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() != 0 {
		switch re.HTTPStatusCode() {
		case http.StatusNotFound:
			return fmt.Errorf("objstore: s3: %s does not exist (create it first)", s.where())
		case http.StatusForbidden:
			return fmt.Errorf("objstore: s3: access denied to %s (check the access key, secret key and bucket policy): %w", s.where(), err)
		case http.StatusMovedPermanently:
			return fmt.Errorf("objstore: s3: %s is in another region than %q: %w", s.where(), s.cfg.Region, err)
		}
		return fmt.Errorf("objstore: s3: checking %s: %w", s.where(), err)
	}
	return fmt.Errorf("objstore: s3: endpoint unreachable, checking %s: %w", s.where(), err)
}

// errTransferTimeout is the cancel cause of a transfer's own deadline, to
// tell it from the caller's: the first is retryable, the second is not.
var errTransferTimeout = errors.New("transfer deadline exceeded")

// transferCtx derives a context that expires after the transfer budget for
// n bytes. The caller must call stop; the timer may be moved with reset.
func (s *s3Store) transferCtx(ctx context.Context, n int64) (context.Context, *time.Timer, func()) {
	tctx, cancel := context.WithCancelCause(ctx)
	timer := time.AfterFunc(s.budget(n), func() { cancel(errTransferTimeout) })
	return tctx, timer, func() { timer.Stop(); cancel(nil) }
}

func (s *s3Store) budget(n int64) time.Duration {
	return transferBudget(s.cfg.RequestTimeout, n, s.cfg.MinThroughput)
}

// classify turns an SDK error into the package's error vocabulary.
func (s *s3Store) classify(ctx, tctx context.Context, op, key string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("objstore: s3 %s %q: %w", op, key, cerr)
	}
	if tctx != nil && errors.Is(context.Cause(tctx), errTransferTimeout) {
		return markRetryable(fmt.Errorf("objstore: s3 %s %q: %w: %w", op, key, errTransferTimeout, err))
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "NoSuchBucket":
			return fmt.Errorf("objstore: s3 %s %q: %s is gone: %w", op, key, s.where(), err)
		case "InvalidRange":
			return fmt.Errorf("objstore: s3 %s %q: %w", op, key, ErrInvalidRange)
		case "PreconditionFailed":
			return fmt.Errorf("objstore: s3 %s %q: %w", op, key, ErrExists)
		case "ConditionalRequestConflict":
			return markRetryable(fmt.Errorf("objstore: s3 %s %q: %w", op, key, err))
		}
	}
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	var re *awshttp.ResponseError
	if errors.As(err, &nsk) || errors.As(err, &nf) ||
		(errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound) {
		return fmt.Errorf("objstore: s3 %s %q: %w", op, key, ErrNotFound)
	}
	if re != nil && re.HTTPStatusCode() == http.StatusPreconditionFailed {
		return fmt.Errorf("objstore: s3 %s %q: %w", op, key, ErrExists)
	}
	wrapped := fmt.Errorf("objstore: s3 %s %q: %w", op, key, err)
	if retry.IsErrorRetryables(retry.DefaultRetryables).IsErrorRetryable(err) == aws.TrueTernary {
		return markRetryable(wrapped)
	}
	return wrapped
}

func (s *s3Store) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return s.put(ctx, "put", key, r, size, nil)
}

// Create is a PUT with If-None-Match: *, which AWS S3 (since August 2024),
// MinIO and the in-process server (gofakes3) evaluate atomically: 412
// Precondition Failed when the key exists. A 409 ConditionalRequestConflict
// (a concurrent write of the key was in flight) is retryable; the retry
// then sees the winner's object. A server that ignores the header would
// silently replace, so docs/bucket-format.md lists the servers checked.
func (s *s3Store) Create(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return s.put(ctx, "create", key, r, size, aws.String("*"))
}

func (s *s3Store) put(ctx context.Context, op, key string, r io.ReaderAt, size int64, ifNoneMatch *string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("objstore: %s %q: negative size %d", op, key, size)
	}
	if err := ctxErr(ctx, op, key); err != nil {
		return err
	}
	// One deadline covers every attempt the SDK makes inside this call.
	tctx, timer, stop := s.transferCtx(ctx, size)
	timer.Reset(time.Duration(s.cfg.MaxRetries+1) * s.budget(size))
	defer stop()
	_, err := s.client.PutObject(tctx, &s3.PutObjectInput{
		Bucket: aws.String(s.cfg.Bucket),
		Key:    aws.String(key),
		// A SectionReader is an io.ReadSeeker: the SDK seeks it to hash
		// the payload for signing and to rewind it for a retry.
		Body:          io.NewSectionReader(r, 0, size),
		ContentLength: aws.Int64(size),
		IfNoneMatch:   ifNoneMatch,
		// Encrypted at rest as configured: every object Strata writes
		// (segments, manifests, checkpoints) goes through here.
		ServerSideEncryption: types.ServerSideEncryption(s.cfg.SSE),
		SSEKMSKeyId:          nonEmpty(s.cfg.SSEKMSKeyID),
	})
	if err != nil {
		return s.classify(ctx, tctx, op, key, err)
	}
	return nil
}

func (s *s3Store) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	if err := validateRange(key, off); err != nil {
		return nil, err
	}
	if err := ctxErr(ctx, "get", key); err != nil {
		return nil, err
	}
	if n == 0 {
		// S3 has no empty range; the object must still exist and hold off.
		a, err := s.Stat(ctx, key)
		if err != nil {
			return nil, err
		}
		if _, err := checkRange(key, off, 0, a.Size); err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	in := &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(key)}
	switch {
	case n > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	case off > 0:
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", off))
	}
	budgetN := max(n, 0)
	tctx, timer, stop := s.transferCtx(ctx, budgetN)
	out, err := s.client.GetObject(tctx, in)
	if err != nil {
		stop()
		err = s.classify(ctx, tctx, "get", key, err)
		if n < 0 && errors.Is(err, ErrInvalidRange) {
			// "bytes=size-" is unsatisfiable to S3 but an empty read to us.
			return s.GetRange(ctx, key, off, 0)
		}
		return nil, err
	}
	got := aws.ToInt64(out.ContentLength)
	if n > 0 && got != n {
		// S3 clips a range that runs past the end instead of failing it.
		out.Body.Close()
		stop()
		return nil, fmt.Errorf("%w: %q: [%d, %d) past the end of the object (%d bytes from offset %d)",
			ErrInvalidRange, key, off, off+n, got, off)
	}
	if n < 0 {
		timer.Reset(s.budget(got))
	}
	return &s3Reader{s: s, ctx: ctx, tctx: tctx, key: key, body: out.Body, stop: stop, left: got}, nil
}

// s3Reader reads a GetObject body under the transfer deadline, checks that it
// delivers every promised byte, and releases the deadline on Close.
type s3Reader struct {
	s         *s3Store
	ctx, tctx context.Context
	key       string
	body      io.ReadCloser
	stop      func()
	left      int64
}

func (r *s3Reader) Read(p []byte) (int, error) {
	// The transport notices a cancelled ctx asynchronously and may serve
	// bytes already in socket buffers meanwhile; check it first so that a
	// cancelled read stops at once, as it does for the other backends.
	if err := r.ctx.Err(); err != nil {
		return 0, fmt.Errorf("objstore: s3 get %q: %w", r.key, err)
	}
	n, err := r.body.Read(p)
	r.left -= int64(n)
	switch {
	case err == io.EOF && r.left > 0:
		err = fmt.Errorf("objstore: s3 get %q: body ended %d bytes short: %w", r.key, r.left, io.ErrUnexpectedEOF)
	case err != nil && err != io.EOF:
		err = r.s.classify(r.ctx, r.tctx, "get", r.key, err)
	}
	return n, err
}

func (r *s3Reader) Close() error {
	err := r.body.Close()
	r.stop()
	return err
}

func (s *s3Store) Stat(ctx context.Context, key string) (Attrs, error) {
	if err := validateKey(key); err != nil {
		return Attrs{}, err
	}
	if err := ctxErr(ctx, "stat", key); err != nil {
		return Attrs{}, err
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(key)})
	if err != nil {
		return Attrs{}, s.classify(ctx, nil, "stat", key, err)
	}
	return Attrs{Key: key, Size: aws.ToInt64(out.ContentLength), LastModified: aws.ToTime(out.LastModified)}, nil
}

func (s *s3Store) List(ctx context.Context, prefix string, fn func(Attrs) error) error {
	return s.ListAfter(ctx, prefix, "", fn)
}

// ListAfter lists with StartAfter, so the server returns only the keys
// above startAfter.
func (s *s3Store) ListAfter(ctx context.Context, prefix, startAfter string, fn func(Attrs) error) error {
	if err := ctxErr(ctx, "list", prefix); err != nil {
		return err
	}
	in := &s3.ListObjectsV2Input{Bucket: aws.String(s.cfg.Bucket)}
	if prefix != "" {
		in.Prefix = aws.String(prefix)
	}
	if startAfter != "" {
		in.StartAfter = aws.String(startAfter)
	}
	pages := s3.NewListObjectsV2Paginator(s.client, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return s.classify(ctx, nil, "list", prefix, err)
		}
		for _, o := range page.Contents {
			a := Attrs{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), LastModified: aws.ToTime(o.LastModified)}
			if err := fn(a); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *s3Store) Delete(ctx context.Context, key string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	if err := ctxErr(ctx, "delete", key); err != nil {
		return err
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(key)})
	if err != nil {
		err = s.classify(ctx, nil, "delete", key, err)
		if errors.Is(err, ErrNotFound) {
			return nil // some S3 servers answer 404 where AWS answers 204
		}
		return err
	}
	return nil
}

// nonEmpty is s as an optional SDK field: nil when empty.
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
