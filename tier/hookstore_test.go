package tier

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"strata/tier/objstore"
)

// hookStore wraps a store for the manifest tests: it stamps objects with a
// test clock (so that grace periods and the store's LastModified agree),
// remembers every manifest version written so that a key rewritten with
// other bytes is caught, and lets a test stall or fail writes and doctor
// listings.
type hookStore struct {
	objstore.Store
	clk *clock

	mu struct {
		sync.Mutex
		stamped   map[string]time.Time
		manifests map[string][]byte
		rewritten []string
	}
	// beforeWrite runs before a Put or Create is applied; an error fails
	// the write unapplied. It may block until ctx is done.
	beforeWrite func(ctx context.Context, key string) error
	// afterWrite runs after a Put or Create is applied; an error is what
	// the caller sees (a lost reply).
	afterWrite func(key string) error
	// get, when set, runs before a GetRange; an error fails it.
	get func(key string) error
	// list, when set, filters what List reports for prefix.
	list func(prefix string, as []objstore.Attrs) []objstore.Attrs
	// listErr, when set, runs before a List; an error fails it.
	listErr func(prefix string) error
}

func newHookStore(inner objstore.Store, clk *clock) *hookStore {
	h := &hookStore{Store: inner, clk: clk}
	h.mu.stamped = make(map[string]time.Time)
	h.mu.manifests = make(map[string][]byte)
	return h
}

func (h *hookStore) write(ctx context.Context, key string, r io.ReaderAt, size int64, op func() error) error {
	if h.beforeWrite != nil {
		if err := h.beforeWrite(ctx, key); err != nil {
			return err
		}
	}
	if err := op(); err != nil {
		return err
	}
	h.mu.Lock()
	if h.clk != nil {
		h.mu.stamped[key] = h.clk.Now()
	}
	if strings.HasSuffix(key, ".manifest") {
		b, _ := io.ReadAll(io.NewSectionReader(r, 0, size))
		if prev, ok := h.mu.manifests[key]; ok && !bytes.Equal(prev, b) {
			h.mu.rewritten = append(h.mu.rewritten, key)
		}
		h.mu.manifests[key] = b
	}
	h.mu.Unlock()
	if h.afterWrite != nil {
		return h.afterWrite(key)
	}
	return nil
}

// rewritten returns the manifest keys written twice with different bytes.
func (h *hookStore) rewritten() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.mu.rewritten)
}

func (h *hookStore) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return h.write(ctx, key, r, size, func() error { return h.Store.Put(ctx, key, r, size) })
}

func (h *hookStore) Create(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return h.write(ctx, key, r, size, func() error { return h.Store.Create(ctx, key, r, size) })
}

func (h *hookStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if h.get != nil {
		if err := h.get(key); err != nil {
			return nil, err
		}
	}
	return h.Store.GetRange(ctx, key, off, n)
}

func (h *hookStore) stamp(a objstore.Attrs) objstore.Attrs {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.mu.stamped[a.Key]; ok {
		a.LastModified = t
	}
	return a
}

func (h *hookStore) Stat(ctx context.Context, key string) (objstore.Attrs, error) {
	a, err := h.Store.Stat(ctx, key)
	return h.stamp(a), err
}

func (h *hookStore) List(ctx context.Context, prefix string, fn func(objstore.Attrs) error) error {
	if h.listErr != nil {
		if err := h.listErr(prefix); err != nil {
			return err
		}
	}
	var as []objstore.Attrs
	if err := h.Store.List(ctx, prefix, func(a objstore.Attrs) error {
		as = append(as, h.stamp(a))
		return nil
	}); err != nil {
		return err
	}
	if h.list != nil {
		as = h.list(prefix, as)
	}
	for _, a := range as {
		if err := fn(a); err != nil {
			return err
		}
	}
	return nil
}
