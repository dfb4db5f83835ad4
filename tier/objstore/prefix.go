package objstore

import (
	"context"
	"fmt"
	"io"
	"strings"
)

type prefixStore struct {
	inner  Store
	prefix string // ends in '/'
}

// WithPrefix returns a Store that keeps every key of s under prefix, so
// several clusters, tests or tools can share one bucket. Keys seen through
// the returned Store (in List too) do not carry the prefix. A prefix is a
// directory: a missing trailing '/' is added. An empty prefix returns s.
func WithPrefix(s Store, prefix string) (Store, error) {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix == "" {
		return s, nil
	}
	if err := validateKey(prefix); err != nil {
		return nil, fmt.Errorf("objstore: prefix: %w", err)
	}
	return &prefixStore{inner: s, prefix: prefix + "/"}, nil
}

func (p *prefixStore) String() string { return fmt.Sprintf("%v/%s", p.inner, p.prefix) }

func (p *prefixStore) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	if err := validateKey(key); err != nil {
		return err
	}
	return p.inner.Put(ctx, p.prefix+key, r, size)
}

func (p *prefixStore) Create(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	if err := validateKey(key); err != nil {
		return err
	}
	return p.inner.Create(ctx, p.prefix+key, r, size)
}

func (p *prefixStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := validateKey(key); err != nil {
		return nil, err
	}
	return p.inner.GetRange(ctx, p.prefix+key, off, n)
}

func (p *prefixStore) Stat(ctx context.Context, key string) (Attrs, error) {
	if err := validateKey(key); err != nil {
		return Attrs{}, err
	}
	a, err := p.inner.Stat(ctx, p.prefix+key)
	a.Key = key
	return a, err
}

func (p *prefixStore) List(ctx context.Context, prefix string, fn func(Attrs) error) error {
	return p.inner.List(ctx, p.prefix+prefix, func(a Attrs) error {
		a.Key = strings.TrimPrefix(a.Key, p.prefix)
		return fn(a)
	})
}

func (p *prefixStore) ListAfter(ctx context.Context, prefix, startAfter string, fn func(Attrs) error) error {
	after := ""
	if startAfter != "" {
		after = p.prefix + startAfter
	}
	return ListAfter(ctx, p.inner, p.prefix+prefix, after, func(a Attrs) error {
		a.Key = strings.TrimPrefix(a.Key, p.prefix)
		return fn(a)
	})
}

func (p *prefixStore) Delete(ctx context.Context, key string) error {
	if err := validateKey(key); err != nil {
		return err
	}
	return p.inner.Delete(ctx, p.prefix+key)
}
