package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// ErrInjected is the cause of every failure a Faulty store injects. Such
// failures are retryable, as the outages they stand for are.
var ErrInjected = errors.New("objstore: injected fault")

// FaultConfig sets what a Faulty store injects. Each call draws its fate
// from a generator seeded with Seed, so a single-goroutine test replays the
// same faults; under concurrency the order of draws varies.
type FaultConfig struct {
	// FailRate is the probability that a call fails with ErrInjected. A
	// failed Put, Create or Delete is not applied; half of the failed GetRange
	// calls succeed and then fail in the middle of the body instead.
	FailRate float64
	// LostReplyRate is the probability that a Put, Create or Delete is applied and
	// still reports ErrInjected, as when S3 commits a write but the reply
	// is lost: callers must tolerate objects they think they failed to put.
	LostReplyRate float64
	// StallRate is the probability that a call first blocks for Stall, or
	// until its ctx is done (then it returns the ctx error), before going on.
	StallRate float64
	Stall     time.Duration
	Seed      int64
}

// Faulty is a Store that injects failures and stalls into calls to another
// Store, for tests of the uploader, the remote reader and the collector. Its
// config can be changed while it is in use (an outage that starts and ends).
type Faulty struct {
	inner Store

	mu struct {
		sync.Mutex
		cfg FaultConfig
		rng *rand.Rand
	}
	fails, stalls atomic.Int64
}

var _ Store = (*Faulty)(nil)

// WithFaults wraps s with fault injection configured by cfg.
func WithFaults(s Store, cfg FaultConfig) *Faulty {
	f := &Faulty{inner: s}
	f.SetConfig(cfg)
	return f
}

// SetConfig replaces the fault config; the generator is reseeded only when
// Seed changes.
func (f *Faulty) SetConfig(cfg FaultConfig) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.rng == nil || cfg.Seed != f.mu.cfg.Seed {
		f.mu.rng = rand.New(rand.NewPCG(uint64(cfg.Seed), 0x535452415441))
	}
	f.mu.cfg = cfg
}

// Injected returns how many failures and stalls have been injected so far.
func (f *Faulty) Injected() (fails, stalls int64) { return f.fails.Load(), f.stalls.Load() }

func (f *Faulty) String() string { return fmt.Sprintf("faulty(%v)", f.inner) }

type fate struct {
	fail, lostReply, midBody bool
	stall                    time.Duration
}

func (f *Faulty) draw() fate {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, r := f.mu.cfg, f.mu.rng
	var ft fate
	if c.StallRate > 0 && r.Float64() < c.StallRate {
		ft.stall = c.Stall
	}
	switch x := r.Float64(); {
	case x < c.FailRate:
		ft.fail = true
		ft.midBody = r.IntN(2) == 0
	case x < c.FailRate+c.LostReplyRate:
		ft.lostReply = true
	}
	return ft
}

// begin applies a call's stall, then reports the error it must fail with
// before reaching the inner store, if any.
func (f *Faulty) begin(ctx context.Context, op, key string, ft fate) error {
	if ft.stall > 0 {
		f.stalls.Add(1)
		t := time.NewTimer(ft.stall)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("objstore: %s %q: stalled: %w", op, key, ctx.Err())
		}
	}
	if ft.fail {
		return f.injected(op, key)
	}
	return nil
}

func (f *Faulty) injected(op, key string) error {
	f.fails.Add(1)
	return markRetryable(fmt.Errorf("objstore: %s %q: %w", op, key, ErrInjected))
}

// write runs a Put, Create or Delete, apply, with its fate: a lost reply reports
// a failure after applying it.
func (f *Faulty) write(ctx context.Context, op, key string, apply func() error) error {
	ft := f.draw()
	if err := f.begin(ctx, op, key, ft); err != nil {
		return err
	}
	if err := apply(); err != nil || !ft.lostReply {
		return err
	}
	return f.injected(op, key)
}

func (f *Faulty) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return f.write(ctx, "put", key, func() error { return f.inner.Put(ctx, key, r, size) })
}

func (f *Faulty) Create(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return f.write(ctx, "create", key, func() error { return f.inner.Create(ctx, key, r, size) })
}

func (f *Faulty) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	ft := f.draw()
	if ft.fail && ft.midBody {
		ft.fail = false
	} else {
		ft.midBody = false
	}
	if err := f.begin(ctx, "get", key, ft); err != nil {
		return nil, err
	}
	rc, err := f.inner.GetRange(ctx, key, off, n)
	if err != nil || !ft.midBody {
		return rc, err
	}
	return &faultyBody{ReadCloser: rc, f: f, key: key}, nil
}

// faultyBody delivers one read's worth of bytes, then fails.
type faultyBody struct {
	io.ReadCloser
	f     *Faulty
	key   string
	reads int
}

func (b *faultyBody) Read(p []byte) (int, error) {
	if b.reads > 0 {
		return 0, b.f.injected("get body", b.key)
	}
	b.reads++
	n, err := b.ReadCloser.Read(p[:max(len(p)/2, 1)])
	if err == io.EOF {
		err = b.f.injected("get body", b.key)
	}
	return n, err
}

func (f *Faulty) Stat(ctx context.Context, key string) (Attrs, error) {
	if err := f.begin(ctx, "stat", key, f.draw()); err != nil {
		return Attrs{}, err
	}
	return f.inner.Stat(ctx, key)
}

func (f *Faulty) List(ctx context.Context, prefix string, fn func(Attrs) error) error {
	if err := f.begin(ctx, "list", prefix, f.draw()); err != nil {
		return err
	}
	return f.inner.List(ctx, prefix, fn)
}

func (f *Faulty) ListAfter(ctx context.Context, prefix, startAfter string, fn func(Attrs) error) error {
	if err := f.begin(ctx, "list", prefix, f.draw()); err != nil {
		return err
	}
	return ListAfter(ctx, f.inner, prefix, startAfter, fn)
}

func (f *Faulty) Delete(ctx context.Context, key string) error {
	return f.write(ctx, "delete", key, func() error { return f.inner.Delete(ctx, key) })
}
