package tier

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"strata/tier/format"
	"strata/tier/objstore"
)

// DefaultManifestCacheBytes bounds the manifest pages a tier keeps in
// memory, all partitions together.
const DefaultManifestCacheBytes = 64 << 20

// pageCache is a format.PageSource over an object store that keeps the
// pages it fetched, shared by all partitions, least recently used out
// first, within a bound on their encoded size (the decoded form is of the
// same order). A page never changes under its key, so an entry is never
// stale; only memory decides how long it stays. Concurrent requests for
// one page share one GET.
type pageCache struct {
	store objstore.Store
	limit int64

	mu struct {
		sync.Mutex
		size    int64
		lru     list.List // of *pageEntry, front most recent
		byKey   map[string]*list.Element
		flights map[string]*pageFlight // GETs under way
	}
	hits, misses atomic.Int64
}

type pageEntry struct {
	key  string
	page *format.Page
	size int64
}

// pageFlight is one page GET; its waiters block on done.
type pageFlight struct {
	done chan struct{}
	page *format.Page
	err  error
}

var _ format.PageSource = (*pageCache)(nil)

func newPageCache(store objstore.Store, limit int64) *pageCache {
	c := &pageCache{store: store, limit: limit}
	c.mu.byKey = make(map[string]*list.Element)
	c.mu.flights = make(map[string]*pageFlight)
	return c
}

// NewPageSource returns a format.PageSource that reads pages from store
// and keeps up to limit bytes of them; for tools that read a bucket
// without a Tier.
func NewPageSource(store objstore.Store, limit int64) format.PageSource {
	return newPageCache(store, limit)
}

// Page returns the page ref summarises, checked against ref. The GET runs
// under the context of the first caller that asked; if that caller gives
// up, those waiting with it try again under their own.
func (c *pageCache) Page(ctx context.Context, ref format.PageRef) (*format.Page, error) {
	for {
		c.mu.Lock()
		if el, ok := c.mu.byKey[ref.Key]; ok {
			c.mu.lru.MoveToFront(el)
			p := el.Value.(*pageEntry).page
			c.mu.Unlock()
			c.hits.Add(1)
			return p, nil
		}
		fl, waiting := c.mu.flights[ref.Key]
		if !waiting {
			fl = &pageFlight{done: make(chan struct{})}
			c.mu.flights[ref.Key] = fl
		}
		c.mu.Unlock()
		if !waiting {
			c.misses.Add(1)
			fl.page, fl.err = c.fetch(ctx, ref)
			c.finish(ref, fl)
			return fl.page, fl.err
		}
		select {
		case <-fl.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if fl.err == nil || !(errors.Is(fl.err, context.Canceled) || errors.Is(fl.err, context.DeadlineExceeded)) || ctx.Err() != nil {
			return fl.page, fl.err
		}
	}
}

func (c *pageCache) fetch(ctx context.Context, ref format.PageRef) (*format.Page, error) {
	rc, err := c.store.GetRange(ctx, ref.Key, 0, -1)
	if err != nil {
		return nil, fmt.Errorf("get manifest page %s: %w", ref.Key, err)
	}
	defer rc.Close()
	// One byte more than the summary says, so that a longer object fails
	// its check instead of being cut to size.
	b, err := io.ReadAll(io.LimitReader(rc, ref.Size+1))
	if err != nil {
		return nil, fmt.Errorf("get manifest page %s: %w", ref.Key, err)
	}
	return format.OpenPage(ref, b)
}

// finish ends flight fl, caching its page.
func (c *pageCache) finish(ref format.PageRef, fl *pageFlight) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.mu.flights, ref.Key)
	close(fl.done)
	if fl.err != nil || ref.Size > c.limit {
		return
	}
	c.mu.byKey[ref.Key] = c.mu.lru.PushFront(&pageEntry{ref.Key, fl.page, ref.Size})
	c.mu.size += ref.Size
	for c.mu.size > c.limit {
		e := c.mu.lru.Remove(c.mu.lru.Back()).(*pageEntry)
		delete(c.mu.byKey, e.key)
		c.mu.size -= e.size
	}
}

// ManifestCacheStats describes the manifest page cache, for metrics and
// tests.
type ManifestCacheStats struct {
	// Bytes is the encoded size of the pages held, never above the bound.
	Bytes int64
	// Pages is their number.
	Pages int
	// Hits and Misses count page requests served from memory and GETs.
	Hits, Misses int64
}

// ManifestCacheStats returns the page cache's current figures.
func (t *Tier) ManifestCacheStats() ManifestCacheStats {
	c := t.pages
	c.mu.Lock()
	defer c.mu.Unlock()
	return ManifestCacheStats{Bytes: c.mu.size, Pages: c.mu.lru.Len(), Hits: c.hits.Load(), Misses: c.misses.Load()}
}

// cachedPages serves only the pages already in memory; any other is an
// error (errPageNotCached), never a GET.
type cachedPages struct{ c *pageCache }

var errPageNotCached = errors.New("tier: manifest page not in memory")

func (s cachedPages) Page(_ context.Context, ref format.PageRef) (*format.Page, error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	if el, ok := s.c.mu.byKey[ref.Key]; ok {
		s.c.mu.lru.MoveToFront(el)
		return el.Value.(*pageEntry).page, nil
	}
	return nil, errPageNotCached
}
