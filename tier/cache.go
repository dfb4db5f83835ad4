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

// chunkCache keeps fixed-size chunks of remote objects, so a consumer
// replaying history costs one ranged GET per chunk, not one per fetch.
// Chunks are downloaded on a worker pool of their own (at most workers GETs
// at once, shared by reads and read-ahead).
//
// It has two levels, each with a strict bound and least recently used
// eviction:
//
//   - memory (memLimit bytes): every download lands here, and the read that
//     asked for it and the read-ahead chunks a sequential consumer needs
//     next are served from here.
//   - disk (limit bytes): a chunk is written here the second time it has
//     to be downloaded, that is, when it was evicted from memory and is
//     wanted again. A one-pass replay, where each chunk is read once and
//     then never again, writes nothing to the local disk; such writes
//     would be pure cost, and would compete with the hot tier's appends
//     for the disk. A range read again and again (a consumer that
//     rewinds, groups replaying the same window at different times) has
//     proved it is read twice and stays on disk after that.
//
// Chunks evicted from memory while not on disk are remembered by key only
// (the ghosts), so their second download can be recognised.
//
// Memory chunks are reference counted and their buffers recycled: a
// replay streams its whole history through the memory level, and fresh
// buffers for every chunk would cost a page fault per 4 KiB and the
// garbage collector's time.
type chunkCache struct {
	store    objstore.Store
	dir      string
	chunk    int64
	limit    int64 // bound of the disk level
	memLimit int64 // bound of the memory level
	ahead    int
	workers  chan struct{} // semaphore of concurrent GETs

	// ctx bounds read-ahead downloads and disk writes; close cancels it
	// and waits for them.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu struct {
		sync.Mutex
		mem     map[chunkKey]*list.Element // of *memChunk
		memLRU  list.List                  // front: most recently used
		memSize int64
		// memReserved counts chunks being downloaded: room is made for
		// them before the GET, so memory never holds more than memLimit.
		memReserved int64

		disk     map[chunkKey]*list.Element // of *diskChunk
		diskLRU  list.List
		diskSize int64
		// diskReserved counts chunks being written: room is made for them
		// before their bytes reach the disk, so the files in the cache
		// directory never add up to more than the limit.
		diskReserved int64

		// admitting holds the chunks being written to disk: at most one
		// write per chunk, and a chunk on its way to disk is no ghost. A
		// write whose chunk is no longer here when it ends (invalidate
		// dropped it) throws its file away.
		admitting map[chunkKey]*memChunk

		ghosts   map[chunkKey]*list.Element // of chunkKey
		ghostLRU list.List
		ghostCap int

		flights map[chunkKey]*flight // downloads under way

		free [][]byte // recycled chunk buffers, at most maxFree
	}
	// Counters for tests and metrics: reads served from either level,
	// reads that waited for a download (their own or read-ahead's), disk
	// evictions, and chunks written to disk.
	hits, misses, evictions, admissions atomic.Int64

	fileSeq atomic.Int64 // numbers the chunk files

	// testBeforeWrite, when set by a test, runs before a chunk is written
	// to disk.
	testBeforeWrite func()
}

// maxFree bounds the recycled buffers kept aside. A download evicts a
// chunk and takes a buffer in one step, so the free list is rarely longer
// than one; what it holds, plus the evicted chunks readers are still
// copying from, is the only chunk memory outside memLimit.
const maxFree = 2

type chunkKey struct {
	object string
	index  int64
}

type memChunk struct {
	key chunkKey
	// data is never written while refs > 0: readers use it without the
	// lock.
	data []byte
	// refs counts the chunk's users (guarded by chunkCache.mu): one for
	// being in the memory level, one per reader or disk write holding
	// it. The buffer is recycled when it drops to zero.
	refs int
	// used says a reader has had the chunk (guarded by chunkCache.mu);
	// a chunk read ahead and evicted before anyone read it is no
	// evidence that it is wanted twice.
	used bool
}

type diskChunk struct {
	key  chunkKey
	path string
	size int64
}

var errCacheClosed = errors.New("chunk cache closed")

// flight is one download; waiters block on done and then take chunk, on
// which the download holds a reference for each of them, or err. Handing
// them the chunk directly, rather than through the memory level, serves
// the reads that caused a download even when memory is so contended that
// the chunk is evicted again at once.
type flight struct {
	done    chan struct{}
	waiters int // guarded by chunkCache.mu
	chunk   *memChunk
	err     error
}

func newChunkCache(store objstore.Store, dir string, chunk, limit, memLimit int64, ahead, workers int) (*chunkCache, error) {
	// A restarted broker starts cold: whatever is left from before may be
	// half-written, and the bucket has it all anyway.
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("clear chunk cache %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chunk cache %s: %w", dir, err)
	}
	c := &chunkCache{store: store, dir: dir, chunk: chunk, limit: limit, memLimit: memLimit, ahead: ahead, workers: make(chan struct{}, workers)}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.mu.mem = make(map[chunkKey]*list.Element)
	c.mu.disk = make(map[chunkKey]*list.Element)
	c.mu.ghosts = make(map[chunkKey]*list.Element)
	c.mu.admitting = make(map[chunkKey]*memChunk)
	// Remember about twice as many chunks as the disk holds: a chunk
	// wanted again within that distance is worth keeping on disk.
	c.mu.ghostCap = int(max(16, 2*limit/chunk))
	c.mu.flights = make(map[chunkKey]*flight)
	return c, nil
}

func (c *chunkCache) close() {
	// Under the lock, so that no background task is started (wg.Add)
	// after Wait has begun.
	c.mu.Lock()
	c.cancel()
	c.mu.Unlock()
	c.wg.Wait()
}

// goBackgroundLocked runs f as a background task unless the cache is
// closing. The caller holds c.mu.
func (c *chunkCache) goBackgroundLocked(f func()) bool {
	if c.ctx.Err() != nil {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// goBackground is goBackgroundLocked for callers without the lock.
func (c *chunkCache) goBackground(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.goBackgroundLocked(f)
}

// getOnWorker is one ranged GET of n bytes of object at off, made on one
// of the workers (waiting for one first) under the cache's context, so
// that every GET of the remote reads counts against the same bound.
func (c *chunkCache) getOnWorker(object string, off int64, buf []byte) error {
	select {
	case c.workers <- struct{}{}:
		defer func() { <-c.workers }()
	case <-c.ctx.Done():
		return c.ctx.Err()
	}
	return c.get(c.ctx, object, off, buf)
}

// cachedBytes is the total size of the chunks on disk.
func (c *chunkCache) cachedBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.diskSize
}

// memBytes is the total size of the chunks in memory, downloads under way
// included.
func (c *chunkCache) memBytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.memSize + c.mu.memReserved
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
		// From disk the bytes are read straight into out (its capacity
		// holds them); from memory they are copied there.
		b, mc, err := c.chunkBytes(ctx, chunkKey{object, idx}, objSize, within, want, out[done:done])
		if err != nil {
			return dst[:base], err
		}
		if mc != nil {
			copy(out[done:], b)
			c.release(mc)
		}
		done += want
	}
	c.readAhead(object, objSize, off, n, limitOff)
	return dst, nil
}

// view returns the n bytes at off of object. When they lie within one
// chunk that is in memory (or is downloaded now), they are a slice of the
// cached chunk, valid until release is called; otherwise they are read
// into *buf, which grows as needed.
func (c *chunkCache) view(ctx context.Context, buf *[]byte, object string, objSize, off, n, limitOff int64) (data []byte, release func(), err error) {
	if off < 0 || n < 0 || off+n > objSize {
		return nil, nil, fmt.Errorf("read %s [%d, %d): outside the %d-byte object", object, off, off+n, objSize)
	}
	idx := off / c.chunk
	if within := off - idx*c.chunk; n > 0 && within+n <= c.chunk {
		b, mc, err := c.chunkBytes(ctx, chunkKey{object, idx}, objSize, within, n, (*buf)[:0])
		if err != nil {
			return nil, nil, err
		}
		c.readAhead(object, objSize, off, n, limitOff)
		if mc != nil {
			return b, func() { c.release(mc) }, nil
		}
		*buf = b[:0]
		return b, func() {}, nil
	}
	out, err := c.readAt(ctx, (*buf)[:0], object, objSize, off, n, limitOff)
	*buf = out[:0]
	return out, func() {}, err
}

// readAhead starts downloads of the chunks a sequential reader of [off,
// off+n) needs next, up to limitOff.
func (c *chunkCache) readAhead(object string, objSize, off, n, limitOff int64) {
	next := ((off+max(n, 1)-1)/c.chunk + 1) * c.chunk
	c.prefetchRange(object, objSize, next, min(int64(c.ahead)*c.chunk, limitOff-next))
}

// forget drops key's disk entry if it still names path, a file that has
// turned out to be missing, so that the next look downloads the chunk
// instead of failing on the same path again.
func (c *chunkCache) forget(key chunkKey, path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.mu.disk[key]; ok && el.Value.(*diskChunk).path == path {
		c.mu.diskLRU.Remove(el)
		delete(c.mu.disk, key)
		c.mu.diskSize -= el.Value.(*diskChunk).size
	}
}

// readFile fills p from the chunk file at path, at offset within.
func readFile(path string, within int64, p []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.ReadAt(p, within)
	return err
}

// chunkBytes returns the n bytes at offset within of chunk key,
// downloading the chunk if it is not cached. When the chunk is in memory
// they are a slice of it, and mc is the reference the caller must release;
// else they are read from the chunk's file into buf, grown as needed. A
// chunk evicted from disk between lookup and open is looked up again.
func (c *chunkCache) chunkBytes(ctx context.Context, key chunkKey, objSize, within, n int64, buf []byte) (b []byte, mc *memChunk, err error) {
	for attempt := 0; ; attempt++ {
		mc, path, err := c.ensure(ctx, key, objSize, attempt == 0)
		if err != nil {
			return nil, nil, err
		}
		if mc != nil {
			return mc.data[within : within+n], mc, nil
		}
		buf = slices.Grow(buf[:0], int(n))[:n]
		err = readFile(path, within, buf)
		if errors.Is(err, fs.ErrNotExist) && attempt < 3 {
			c.forget(key, path) // evicted under us, or lost: look again
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("chunk cache: read %s chunk %d: %w", key.object, key.index, err)
		}
		return buf, nil, nil
	}
}

// ensure returns a cached chunk: when it is in memory, the chunk with a
// reference the caller must release; else the path of its file. It
// downloads the chunk (or waits for the download under way) if neither
// level has it.
func (c *chunkCache) ensure(ctx context.Context, key chunkKey, objSize int64, count bool) (*memChunk, string, error) {
	c.mu.Lock()
	if el, ok := c.mu.mem[key]; ok {
		c.mu.memLRU.MoveToFront(el)
		mc := el.Value.(*memChunk)
		mc.refs++
		mc.used = true
		c.mu.Unlock()
		if count {
			c.hits.Add(1)
		}
		return mc, "", nil
	}
	if el, ok := c.mu.disk[key]; ok {
		c.mu.diskLRU.MoveToFront(el)
		path := el.Value.(*diskChunk).path
		c.mu.Unlock()
		if count {
			c.hits.Add(1)
		}
		return nil, path, nil
	}
	fl, inFlight := c.mu.flights[key]
	if !inFlight {
		// The download runs under the cache's context, not this reader's:
		// other readers may come to wait for it, and one giving up must
		// not fail them.
		if fl = c.downloadLocked(key, objSize); fl == nil {
			c.mu.Unlock()
			return nil, "", errCacheClosed
		}
	}
	fl.waiters++
	c.mu.Unlock()
	if count {
		c.misses.Add(1)
	}
	select {
	case <-fl.done:
	case <-ctx.Done():
		// The reference the download takes for us is never released:
		// the buffer goes to the garbage collector instead of back to
		// the free list.
		return nil, "", ctx.Err()
	}
	return fl.chunk, "", fl.err
}

// release drops a reference to mc taken by ensure.
func (c *chunkCache) release(mc *memChunk) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unrefLocked(mc)
}

func (c *chunkCache) unrefLocked(mc *memChunk) {
	if mc.refs--; mc.refs == 0 {
		c.recycleLocked(mc.data)
	}
}

// recycleLocked keeps buf for a later download, if the free list has room.
func (c *chunkCache) recycleLocked(buf []byte) {
	if int64(cap(buf)) == c.chunk && len(c.mu.free) < maxFree {
		c.mu.free = append(c.mu.free, buf[:0])
	}
}

// bufferLocked returns an n-byte buffer for a download, recycled when
// one is free.
func (c *chunkCache) bufferLocked(n int64) []byte {
	if k := len(c.mu.free); k > 0 {
		b := c.mu.free[k-1]
		c.mu.free = c.mu.free[:k-1]
		return b[:n]
	}
	return make([]byte, n, c.chunk)
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
	defer c.mu.Unlock()
	_, inMem := c.mu.mem[key]
	_, onDisk := c.mu.disk[key]
	_, inFlight := c.mu.flights[key]
	if inMem || onDisk || inFlight {
		return
	}
	// When memory is full of read-ahead nobody has read yet, more of it
	// would only push out chunks that are about to be wanted: the reader
	// will ask in time.
	if c.mu.memSize+c.mu.memReserved+c.chunk > c.memLimit && c.oldestUsedLocked() == nil {
		return
	}
	c.downloadLocked(key, objSize)
}

// downloadLocked starts a background download of key and registers its
// flight, which ends when the chunk is in memory (or the GET failed); nil
// when the cache is closing.
func (c *chunkCache) downloadLocked(key chunkKey, objSize int64) *flight {
	fl := &flight{done: make(chan struct{})}
	if !c.goBackgroundLocked(func() {
		fl.chunk, fl.err = c.fetch(key, objSize, fl)
		close(fl.done)
	}) {
		return nil
	}
	c.mu.flights[key] = fl
	return fl
}

// fetch GETs one chunk into memory, with its room reserved first, puts it
// in the memory level and ends its flight, taking a reference for each of
// the flight's waiters (in the same critical section, so that the chunk
// cannot be evicted and its buffer reused in between). It holds a worker
// until then, so that reservations never add up to more than the workers'
// chunks. A chunk downloaded for the second time is then also written to
// disk, in the background.
func (c *chunkCache) fetch(key chunkKey, objSize int64, fl *flight) (*memChunk, error) {
	ctx := c.ctx
	select {
	case c.workers <- struct{}{}:
		defer func() { <-c.workers }()
	case <-ctx.Done():
		c.mu.Lock()
		c.endFlightLocked(key, fl)
		c.mu.Unlock()
		return nil, ctx.Err()
	}
	start := key.index * c.chunk
	n := min(c.chunk, objSize-start)
	c.mu.Lock()
	c.evictMemLocked(n)
	c.mu.memReserved += n
	buf := c.bufferLocked(n)
	c.mu.Unlock()
	err := c.get(ctx, key.object, start, buf)
	c.mu.Lock()
	defer c.mu.Unlock()
	current := c.endFlightLocked(key, fl)
	c.mu.memReserved -= n
	if err != nil {
		c.recycleLocked(buf)
		return nil, fmt.Errorf("get %s [%d, %d): %w", key.object, start, start+n, err)
	}
	if !current {
		// Invalidated while downloading: the bytes may predate the
		// repair that invalidation is waiting for. They go to the
		// readers that were waiting, and no further.
		mc := &memChunk{key: key, data: buf, refs: fl.waiters, used: true}
		if mc.refs == 0 {
			c.recycleLocked(buf)
		}
		return mc, nil
	}
	mc := &memChunk{key: key, data: buf, refs: 1 + fl.waiters, used: fl.waiters > 0}
	c.mu.mem[key] = c.mu.memLRU.PushFront(mc)
	c.mu.memSize += n
	if el, seen := c.mu.ghosts[key]; seen {
		c.mu.ghostLRU.Remove(el)
		delete(c.mu.ghosts, key)
		if _, onDisk := c.mu.disk[key]; !onDisk && c.mu.admitting[key] == nil {
			mc.refs++
			c.mu.admitting[key] = mc
			if !c.goBackgroundLocked(func() { c.admit(mc) }) {
				mc.refs--
				delete(c.mu.admitting, key)
			}
		}
	}
	return mc, nil
}

// get fills buf from object at start with one ranged GET.
func (c *chunkCache) get(ctx context.Context, object string, start int64, buf []byte) error {
	rc, err := c.store.GetRange(ctx, object, start, int64(len(buf)))
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, buf); err != nil {
		return err
	}
	// A store that sends more than it was asked for is broken.
	var extra [1]byte
	if m, _ := rc.Read(extra[:]); m != 0 {
		return fmt.Errorf("got more than %d bytes", len(buf))
	}
	return nil
}

// admit writes a chunk to the disk level and releases the reference the
// caller took for it. It is best effort: a chunk that cannot be written,
// or finds the disk level full of chunks still being written, is simply
// downloaded again when it is next wanted.
func (c *chunkCache) admit(mc *memChunk) {
	key, data := mc.key, mc.data
	n := int64(len(data))
	c.mu.Lock()
	defer func() {
		if c.mu.admitting[key] == mc {
			delete(c.mu.admitting, key)
		}
		c.unrefLocked(mc)
		c.mu.Unlock()
	}()
	if c.ctx.Err() != nil || c.mu.diskReserved+n > c.limit || c.mu.admitting[key] != mc {
		return // closing, or the level is all reserved by writes under way
	}
	c.evictDiskLocked(n)
	c.mu.diskReserved += n
	c.mu.Unlock()
	if c.testBeforeWrite != nil {
		c.testBeforeWrite()
	}
	path, err := c.writeChunk(key, data)
	c.mu.Lock()
	c.mu.diskReserved -= n
	if err != nil {
		return
	}
	if c.mu.admitting[key] != mc {
		os.Remove(path) // invalidated while being written
		return
	}
	c.mu.disk[key] = c.mu.diskLRU.PushFront(&diskChunk{key: key, path: path, size: n})
	c.mu.diskSize += n
	c.admissions.Add(1)
}

// writeChunk writes data to a new file of its own: a file name is never
// reused, so a path always means the one write it came from.
func (c *chunkCache) writeChunk(key chunkKey, data []byte) (string, error) {
	sum := sha256.Sum256([]byte(key.object))
	name := hex.EncodeToString(sum[:12]) + "-" + strconv.FormatInt(key.index, 10) + "-" + strconv.FormatInt(c.fileSeq.Add(1), 10)
	path := filepath.Join(c.dir, name)
	tmp, err := os.CreateTemp(c.dir, ".chunk-*")
	if err != nil {
		return "", err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return "", err
	}
	return path, nil
}

// evictMemLocked drops chunks from memory until n more bytes fit: the
// least recently used of those a reader has had first, and only then
// read-ahead nobody has read yet. A sequential reader is done with the
// chunks it read longest ago, while the read-ahead of a partition that a
// fetch's byte limit left out this time is what it will read next. A
// dropped chunk that is not on disk becomes a ghost.
func (c *chunkCache) evictMemLocked(n int64) {
	for c.mu.memSize+c.mu.memReserved+n > c.memLimit && c.mu.memLRU.Len() > 0 {
		el := c.oldestUsedLocked()
		if el == nil {
			el = c.mu.memLRU.Back()
		}
		victim := c.mu.memLRU.Remove(el).(*memChunk)
		delete(c.mu.mem, victim.key)
		c.mu.memSize -= int64(len(victim.data))
		if _, onDisk := c.mu.disk[victim.key]; !onDisk && c.mu.admitting[victim.key] == nil && victim.used {
			c.rememberLocked(victim.key)
		}
		c.unrefLocked(victim)
	}
}

// oldestUsedLocked returns the least recently used memory chunk that a
// reader has had, or nil when memory holds only unread read-ahead.
func (c *chunkCache) oldestUsedLocked() *list.Element {
	for e := c.mu.memLRU.Back(); e != nil; e = e.Prev() {
		if e.Value.(*memChunk).used {
			return e
		}
	}
	return nil
}

// rememberLocked adds key to the ghosts, forgetting the oldest beyond
// their capacity.
func (c *chunkCache) rememberLocked(key chunkKey) {
	if el, ok := c.mu.ghosts[key]; ok {
		c.mu.ghostLRU.MoveToFront(el)
		return
	}
	c.mu.ghosts[key] = c.mu.ghostLRU.PushFront(key)
	for c.mu.ghostLRU.Len() > c.mu.ghostCap {
		delete(c.mu.ghosts, c.mu.ghostLRU.Remove(c.mu.ghostLRU.Back()).(chunkKey))
	}
}

// evictDiskLocked removes least recently used chunks from disk until n
// more bytes fit.
func (c *chunkCache) evictDiskLocked(n int64) {
	for c.mu.diskSize+c.mu.diskReserved+n > c.limit && c.mu.diskLRU.Len() > 0 {
		victim := c.mu.diskLRU.Remove(c.mu.diskLRU.Back()).(*diskChunk)
		delete(c.mu.disk, victim.key)
		c.mu.diskSize -= victim.size
		os.Remove(victim.path)
		c.evictions.Add(1)
	}
}

// endFlightLocked removes fl, the download of key, from the downloads
// under way, and reports whether it was still there: invalidate detaches
// downloads, and a later one of the same chunk may have taken its place.
func (c *chunkCache) endFlightLocked(key chunkKey, fl *flight) bool {
	if c.mu.flights[key] != fl {
		return false
	}
	delete(c.mu.flights, key)
	return true
}

// invalidate forgets the chunks of object that overlap [off, off+n): a
// reader found bytes there failing their checks, and the copy may be what
// is bad (a damaged object since restored, a download damaged on the way,
// a chunk file damaged on disk). They leave memory and disk, and the
// ghosts, so that the next download of one is not taken for a chunk
// wanted twice; downloads of them under way still serve the readers
// waiting for them but are cached nowhere. The next read of any of them
// makes a fresh GET. Readers still holding a dropped memory chunk keep it
// until they release it.
func (c *chunkCache) invalidate(object string, off, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for idx := off / c.chunk; idx*c.chunk < off+max(n, 1); idx++ {
		key := chunkKey{object, idx}
		if el, ok := c.mu.mem[key]; ok {
			mc := c.mu.memLRU.Remove(el).(*memChunk)
			delete(c.mu.mem, key)
			c.mu.memSize -= int64(len(mc.data))
			c.unrefLocked(mc)
		}
		if el, ok := c.mu.disk[key]; ok {
			dc := c.mu.diskLRU.Remove(el).(*diskChunk)
			delete(c.mu.disk, key)
			c.mu.diskSize -= dc.size
			os.Remove(dc.path)
		}
		if el, ok := c.mu.ghosts[key]; ok {
			c.mu.ghostLRU.Remove(el)
			delete(c.mu.ghosts, key)
		}
		delete(c.mu.admitting, key)
		delete(c.mu.flights, key)
	}
}
