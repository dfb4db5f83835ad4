package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ErrReadOnly reports a write through a store opened read-only. It is
// final, never retryable: the caller asked for something it promised not
// to do.
var ErrReadOnly = errors.New("objstore: store is read-only")

type readOnlyStore struct{ inner Store }

// ReadOnly returns a Store that passes reads (GetRange, Stat, List,
// ListAfter) to s and refuses every write (Put, Create, Delete) with
// ErrReadOnly, without sending it. Tools that read a bucket (`strata
// bucket`) go through it, so that a bug can never change an archive, and
// so that read-only credentials are all they need.
func ReadOnly(s Store) Store { return &readOnlyStore{inner: s} }

func (r *readOnlyStore) String() string { return fmt.Sprintf("readonly(%v)", r.inner) }

func (r *readOnlyStore) refuse(op, key string) error {
	return fmt.Errorf("%w: %s %q", ErrReadOnly, op, key)
}

func (r *readOnlyStore) Put(_ context.Context, key string, _ io.ReaderAt, _ int64) error {
	return r.refuse("put", key)
}

func (r *readOnlyStore) Create(_ context.Context, key string, _ io.ReaderAt, _ int64) error {
	return r.refuse("create", key)
}

func (r *readOnlyStore) Delete(_ context.Context, key string) error {
	return r.refuse("delete", key)
}

func (r *readOnlyStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	return r.inner.GetRange(ctx, key, off, n)
}

func (r *readOnlyStore) Stat(ctx context.Context, key string) (Attrs, error) {
	return r.inner.Stat(ctx, key)
}

func (r *readOnlyStore) List(ctx context.Context, prefix string, fn func(Attrs) error) error {
	return r.inner.List(ctx, prefix, fn)
}

func (r *readOnlyStore) ListAfter(ctx context.Context, prefix, startAfter string, fn func(Attrs) error) error {
	return ListAfter(ctx, r.inner, prefix, startAfter, fn)
}
