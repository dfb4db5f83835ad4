package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"
)

// RetryPolicy configures WithRetry. Zero fields take the defaults noted.
type RetryPolicy struct {
	// Attempts is the most calls made for one operation (default 4).
	Attempts int
	// Backoff is the first wait between attempts (default 50ms); each
	// further wait doubles up to MaxBackoff (default 2s), with full jitter.
	Backoff, MaxBackoff time.Duration
	// AttemptTimeout bounds one attempt (0: unbounded). A transfer of n
	// bytes gets AttemptTimeout + n/MinThroughput (default 1 MiB/s), and a
	// GetRange body must be read within that too. An attempt that times
	// out is retried; the caller's own deadline is never extended.
	AttemptTimeout time.Duration
	MinThroughput  int64
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Attempts <= 0 {
		p.Attempts = 4
	}
	if p.Backoff <= 0 {
		p.Backoff = 50 * time.Millisecond
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 2 * time.Second
	}
	if p.MinThroughput <= 0 {
		p.MinThroughput = DefaultMinThroughput
	}
	return p
}

// WithRetry returns a Store that retries the calls to s that fail with a
// retryable error (IsRetryable), so callers do not each write a retry loop.
// It is meant for short outages inside one operation: the uploader still
// keeps its own slower loop, because an object store can be down for longer
// than any one call should wait.
//
// Put and Delete are idempotent and are retried whole; so is Create (see
// retryStore.Create). A GetRange body that fails mid-read is resumed from
// the first unread byte with a new ranged request. A List that fails
// part-way is restarted and skips the keys it has already delivered, so fn
// sees every key once; errors from fn are returned as is, never retried.
//
// The S3 backend already retries inside the SDK; wrap it with WithRetry when
// the per-attempt timeout or body resumption is wanted, or when a fault
// injector sits between the two.
func WithRetry(s Store, p RetryPolicy) Store {
	return &retryStore{inner: s, p: p.withDefaults()}
}

type retryStore struct {
	inner Store
	p     RetryPolicy
}

func (s *retryStore) String() string { return fmt.Sprintf("retry(%v)", s.inner) }

var errAttemptTimeout = errors.New("attempt timed out")

// attempt runs fn under an attempt context. keep reports that fn handed out
// something (a body) that still needs the context; release must then be
// called when it is done with. Otherwise the context is released here.
func (s *retryStore) attempt(ctx context.Context, n int64, fn func(actx context.Context) (keep bool, err error)) (release func(), timer *time.Timer, err error) {
	actx, cancel := context.WithCancelCause(ctx)
	if s.p.AttemptTimeout > 0 {
		timer = time.AfterFunc(s.budget(n), func() { cancel(errAttemptTimeout) })
	}
	release = func() {
		if timer != nil {
			timer.Stop()
		}
		cancel(nil)
	}
	keep, err := fn(actx)
	if err != nil {
		err = s.timeoutErr(ctx, actx, err)
	}
	if err != nil || !keep {
		release()
		return nil, nil, err
	}
	return release, timer, nil
}

func (s *retryStore) budget(n int64) time.Duration {
	return transferBudget(s.p.AttemptTimeout, n, s.p.MinThroughput)
}

// timeoutErr makes an error caused by the attempt's own deadline retryable.
func (s *retryStore) timeoutErr(ctx, actx context.Context, err error) error {
	if ctx.Err() == nil && errors.Is(context.Cause(actx), errAttemptTimeout) && !IsRetryable(err) {
		return markRetryable(fmt.Errorf("%w after %v: %w", errAttemptTimeout, s.p.AttemptTimeout, err))
	}
	return err
}

// do runs op until it succeeds, fails for good, runs out of attempts, or
// ctx is done.
func (s *retryStore) do(ctx context.Context, op func() error) error {
	var err error
	for i := 0; i < s.p.Attempts; i++ {
		if i > 0 {
			if werr := s.wait(ctx, i); werr != nil {
				return fmt.Errorf("%w (giving up; last error: %v)", werr, err)
			}
		}
		if err = op(); err == nil || !IsRetryable(err) {
			return err
		}
	}
	return fmt.Errorf("objstore: %d attempts failed: %w", s.p.Attempts, err)
}

func (s *retryStore) wait(ctx context.Context, attempt int) error {
	d := s.p.Backoff << min(attempt-1, 20)
	if d <= 0 || d > s.p.MaxBackoff {
		d = s.p.MaxBackoff
	}
	d = time.Duration(rand.Int64N(int64(d)) + 1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// call runs fn until it succeeds or fails for good, each attempt under
// the attempt timeout of a transfer of n bytes.
func (s *retryStore) call(ctx context.Context, n int64, fn func(actx context.Context) error) error {
	return s.do(ctx, func() error {
		_, _, err := s.attempt(ctx, n, func(actx context.Context) (bool, error) {
			return false, fn(actx)
		})
		return err
	})
}

func (s *retryStore) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return s.call(ctx, size, func(actx context.Context) error { return s.inner.Put(actx, key, r, size) })
}

// Create is retried like Put. A retry after a lost reply meets the object
// the lost attempt created and reports ErrExists, as Store.Create warns.
func (s *retryStore) Create(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return s.call(ctx, size, func(actx context.Context) error { return s.inner.Create(actx, key, r, size) })
}

func (s *retryStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	b := &retryBody{s: s, ctx: ctx, key: key, off: off, n: n}
	if err := s.do(ctx, b.open); err != nil {
		return nil, err
	}
	return b, nil
}

// retryBody reads a ranged body, reopening it where it broke off when a read
// fails retryably.
type retryBody struct {
	s        *retryStore
	ctx      context.Context
	key      string
	off, n   int64 // what is left to read; n < 0: to the end
	rc       io.ReadCloser
	release  func()
	failures int
}

func (b *retryBody) open() error {
	var rc io.ReadCloser
	release, timer, err := b.s.attempt(b.ctx, max(b.n, 0), func(actx context.Context) (bool, error) {
		var err error
		rc, err = b.s.inner.GetRange(actx, b.key, b.off, b.n)
		return true, err
	})
	if err != nil {
		return err
	}
	if b.n < 0 && timer != nil {
		// The body's size is unknown, so no budget fits it: only the
		// caller's ctx bounds reading it.
		timer.Stop()
	}
	b.rc, b.release = rc, release
	return nil
}

func (b *retryBody) Read(p []byte) (int, error) {
	if b.rc == nil {
		return 0, fmt.Errorf("objstore: read %q after a failed resume", b.key)
	}
	k, err := b.rc.Read(p)
	b.off += int64(k)
	if b.n > 0 {
		b.n -= int64(k)
	}
	if err == nil || err == io.EOF || b.n == 0 {
		return k, err
	}
	if !IsRetryable(err) || b.failures+1 >= b.s.p.Attempts {
		return k, err
	}
	b.failures++
	b.Close()
	rerr := b.s.do(b.ctx, b.open)
	if rerr != nil {
		return k, rerr
	}
	if k == 0 {
		return b.Read(p)
	}
	return k, nil
}

func (b *retryBody) Close() error {
	if b.rc == nil {
		return nil
	}
	err := b.rc.Close()
	b.release()
	b.rc = nil
	return err
}

func (s *retryStore) Stat(ctx context.Context, key string) (Attrs, error) {
	var a Attrs
	err := s.call(ctx, 0, func(actx context.Context) (err error) {
		a, err = s.inner.Stat(actx, key)
		return err
	})
	return a, err
}

func (s *retryStore) List(ctx context.Context, prefix string, fn func(Attrs) error) error {
	return s.ListAfter(ctx, prefix, "", fn)
}

func (s *retryStore) ListAfter(ctx context.Context, prefix, startAfter string, fn func(Attrs) error) error {
	var (
		last      string
		delivered bool
		fnErr     error
	)
	err := s.do(ctx, func() error {
		// No attempt timeout here: a List runs as long as fn takes.
		err := ListAfter(ctx, s.inner, prefix, startAfter, func(a Attrs) error {
			if delivered && a.Key <= last {
				return nil // seen before the failure that restarted us
			}
			if err := fn(a); err != nil {
				fnErr = err
				return err
			}
			last, delivered = a.Key, true
			return nil
		})
		if fnErr != nil {
			return errStopRetry // fn's error is not ours to retry
		}
		return err
	})
	if fnErr != nil {
		return fnErr
	}
	return err
}

// errStopRetry ends a retry loop without being an error of the store.
var errStopRetry = errors.New("objstore: stop retrying")

func (s *retryStore) Delete(ctx context.Context, key string) error {
	return s.call(ctx, 0, func(actx context.Context) error { return s.inner.Delete(actx, key) })
}
