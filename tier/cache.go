package tier

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"strata/tier/objstore"
)

// chunkCache keeps fixed-size chunks of remote objects on local disk, so a
// consumer replaying history costs one ranged GET per chunk, not one per
// fetch. Chunks are downloaded on a worker pool of their own (at most
// workers GETs at once, shared by reads and read-ahead), and the cache
// never holds more than limit bytes: inserting a chunk evicts the least
// recently used ones first.
type chunkCache struct {
	store   objstore.Store
	dir     string
	chunk   int64
	limit   int64
	ahead   int
	workers chan struct{} // semaphore of concurrent GETs

	// ctx bounds read-ahead downloads; Close cancels it and waits.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		entries map[chunkKey]*list.Element // of *chunkEntry
		lru     list.List                  // front: most recently used
		size    int64                      // bytes of the cached chunks
		// reserved counts chunks being downloaded: room is made for them
		// before their bytes reach the disk, so the files in the cache
		// directory never add up to more than the limit.
		reserved int64
		flights  map[chunkKey]*flight // downloads under way
	}
	// Counters for tests and metrics.
	hits, misses, evictions atomic.Int64
}

type chunkKey struct {
	object string
	index  int64
}

type chunkEntry struct {
	key  chunkKey
	path string
	size int64
}

// flight is one download; waiters block on done and then read err.
type flight struct {
	done chan struct{}
	err  error
}

// copyBufs are the buffers chunk downloads copy through: large, so a chunk
// costs a handful of read and write calls rather than hundreds.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 1<<20); return &b }}

func newChunkCache(store objstore.Store, dir string, chunk, limit int64, ahead, workers int) (*chunkCache, error) {
	// A restarted broker starts cold: whatever is left from before may be
	// half-written, and the bucket has it all anyway.
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("clear chunk cache %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chunk cache %s: %w", dir, err)
	}
	c := &chunkCache{store: store, dir: dir, chunk: chunk, limit: limit, ahead: ahead, workers: make(chan struct{}, workers)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.mu.entries = make(map[chunkKey]*list.Element)
	c.mu.flights = make(map[chunkKey]*flight)
	return c, nil
}

func (c *chunkCache) close() {
	c.cancel()
	c.wg.Wait()
}

// cachedBytes is the total size of the cached chunks.
func (c *chunkCache) cachedBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.size
}

// readAt appends n bytes at off of object (whose size is objSize) to dst,
// through the cache. limitOff bounds read-ahead: chunks past it (the end of
// the object's log part) are never prefetched.
func (c *chunkCache) readAt(ctx context.Context, dst []byte, object string, objSize, off, n, limitOff int64) ([]byte, error) {
	if off < 0 || n < 0 || off+n > objSize {
		return dst, fmt.Errorf("read %s [%d, %d): outside the %d-byte object", object, off, off+n, objSize)
	}
	base := len(dst)
	dst = slices.Grow(dst, int(n))[:base+int(n)]
	out := dst[base:]
	for done := int64(0); done < n; {
		pos := off + done
		idx := pos / c.chunk
		within := pos - idx*c.chunk
		want := min(n-done, c.chunk-within)
		if err := c.readChunk(ctx, chunkKey{object, idx}, objSize, within, out[done:done+want]); err != nil {
			return dst[:base], err
		}
		done += want
	}
	last := (off + max(n, 1) - 1) / c.chunk
	for i := int64(1); i <= int64(c.ahead); i++ {
		if next := last + i; next*c.chunk < min(limitOff, objSize) {
			c.prefetch(chunkKey{object, next}, objSize)
		}
	}
	return dst, nil
}

// readChunk fills p from the chunk at offset within, downloading the chunk
// if it is not cached. A chunk evicted between lookup and open is fetched
// again.
func (c *chunkCache) readChunk(ctx context.Context, key chunkKey, objSize, within int64, p []byte) error {
	for attempt := 0; ; attempt++ {
		path, err := c.ensure(ctx, key, objSize, attempt == 0)
		if err != nil {
			return err
		}
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) && attempt < 3 {
			continue // evicted under us
		}
		if err != nil {
			return fmt.Errorf("chunk cache: %w", err)
		}
		_, err = f.ReadAt(p, within)
		f.Close()
		if err != nil {
			return fmt.Errorf("chunk cache: read %s chunk %d: %w", key.object, key.index, err)
		}
		return nil
	}
}

// ensure returns the path of a cached chunk, downloading it (or waiting for
// the download under way) if needed.
func (c *chunkCache) ensure(ctx context.Context, key chunkKey, objSize int64, count bool) (string, error) {
	for {
		c.mu.Lock()
		if el, ok := c.mu.entries[key]; ok {
			c.mu.lru.MoveToFront(el)
			path := el.Value.(*chunkEntry).path
			c.mu.Unlock()
			if count {
				c.hits.Add(1)
			}
			return path, nil
		}
		fl, inFlight := c.mu.flights[key]
		if !inFlight {
			fl = &flight{done: make(chan struct{})}
			c.mu.flights[key] = fl
		}
		c.mu.Unlock()
		if !inFlight {
			if count {
				c.misses.Add(1)
			}
			c.download(ctx, key, objSize, fl)
		}
		select {
		case <-fl.done:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		if fl.err != nil {
			return "", fl.err
		}
		// Loop: the chunk is in the cache now (unless already evicted,
		// which the next round handles).
	}
}

// prefetchRange starts background downloads of the chunks covering
// [off, off+n) of object.
func (c *chunkCache) prefetchRange(object string, objSize, off, n int64) {
	if n <= 0 {
		return
	}
	for idx := off / c.chunk; idx*c.chunk < min(off+n, objSize); idx++ {
		c.prefetch(chunkKey{object, idx}, objSize)
	}
}

// prefetch starts a background download of key unless it is cached or
// already coming.
func (c *chunkCache) prefetch(key chunkKey, objSize int64) {
	c.mu.Lock()
	_, cached := c.mu.entries[key]
	_, inFlight := c.mu.flights[key]
	if cached || inFlight || c.ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	fl := &flight{done: make(chan struct{})}
	c.mu.flights[key] = fl
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		c.download(c.ctx, key, objSize, fl)
	}()
}

// download fetches one chunk with a ranged GET into the cache and ends the
// flight.
func (c *chunkCache) download(ctx context.Context, key chunkKey, objSize int64, fl *flight) {
	err := c.fetch(ctx, key, objSize)
	c.mu.Lock()
	delete(c.mu.flights, key)
	c.mu.Unlock()
	fl.err = err
	close(fl.done)
}

func (c *chunkCache) fetch(ctx context.Context, key chunkKey, objSize int64) error {
	select {
	case c.workers <- struct{}{}:
		defer func() { <-c.workers }()
	case <-ctx.Done():
		return ctx.Err()
	}
	start := key.index * c.chunk
	n := min(c.chunk, objSize-start)
	c.reserve(n)
	inserted := false
	defer func() {
		if !inserted {
			c.unreserve(n)
		}
	}()
	rc, err := c.store.GetRange(ctx, key.object, start, n)
	if err != nil {
		return fmt.Errorf("get %s [%d, %d): %w", key.object, start, start+n, err)
	}
	defer rc.Close()
	sum := sha256.Sum256([]byte(key.object))
	path := filepath.Join(c.dir, hex.EncodeToString(sum[:12])+"-"+strconv.FormatInt(key.index, 10))
	tmp, err := os.CreateTemp(c.dir, ".chunk-*")
	if err != nil {
		return fmt.Errorf("chunk cache: %w", err)
	}
	bp := copyBufs.Get().(*[]byte)
	written, err := io.CopyBuffer(tmp, rc, *bp)
	copyBufs.Put(bp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil && written != n {
		err = fmt.Errorf("got %d bytes, want %d", written, n)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("get %s [%d, %d): %w", key.object, start, start+n, err)
	}
	c.insert(&chunkEntry{key: key, path: path, size: n})
	inserted = true
	return nil
}

// reserve makes room for an n-byte chunk about to be downloaded, evicting
// least recently used chunks.
func (c *chunkCache) reserve(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evictLocked(n)
	c.mu.reserved += n
}

func (c *chunkCache) unreserve(n int64) {
	c.mu.Lock()
	c.mu.reserved -= n
	c.mu.Unlock()
}

// evictLocked removes least recently used chunks until n more bytes fit.
func (c *chunkCache) evictLocked(n int64) {
	for c.mu.size+c.mu.reserved+n > c.limit && c.mu.lru.Len() > 0 {
		victim := c.mu.lru.Remove(c.mu.lru.Back()).(*chunkEntry)
		delete(c.mu.entries, victim.key)
		c.mu.size -= victim.size
		os.Remove(victim.path)
		c.evictions.Add(1)
	}
}

// insert turns a downloaded chunk's reservation into a cache entry.
func (c *chunkCache) insert(e *chunkEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.reserved -= e.size
	c.evictLocked(e.size) // only if the limit shrank under us; normally a no-op
	c.mu.entries[e.key] = c.mu.lru.PushFront(e)
	c.mu.size += e.size
}
