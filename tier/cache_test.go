package tier

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"strata/tier/objstore"
)

// TestChunkCacheSecondDownloadGoesToDisk pins the admission rule of the
// disk level: a one-pass read writes nothing to disk; a chunk that has to
// be downloaded again after leaving memory is written to disk, and from
// then on it is read without a GET.
func TestChunkCacheSecondDownloadGoesToDisk(t *testing.T) {
	const (
		chunk  = 64 << 10
		chunks = 8
	)
	// Read-ahead off, so every GET is one the reads asked for.
	tr, data, metrics := newTestCache(t, chunk, 2*chunks, Config{MemoryBytes: 4 * chunk, CacheBytes: chunks * chunk, ReadAhead: -1, ReadWorkers: 1})
	c := tr.cache

	// pass reads the first `chunks` chunks in order and returns the GETs
	// it cost.
	pass := func() int64 {
		t.Helper()
		before := metrics.Counts()[objstore.OpGet].Requests
		readChunks(t, c, data, chunk, 0, 1, 2, 3, 4, 5, 6, 7)
		return metrics.Counts()[objstore.OpGet].Requests - before
	}

	if gets := pass(); gets != chunks {
		t.Fatalf("first pass: %d GETs, want %d", gets, chunks)
	}
	if n := c.admissions.Load(); n != 0 || tr.CachedBytes() != 0 {
		t.Fatalf("a one-pass read wrote %d chunks (%d bytes) to disk, want none", n, tr.CachedBytes())
	}
	if mem := c.memBytes(); mem > 4*chunk {
		t.Fatalf("%d bytes in memory, above the bound %d", mem, 4*chunk)
	}

	// Memory held the last four chunks; reading from the start again
	// evicts them in turn, so every chunk is downloaded a second time.
	if gets := pass(); gets != chunks {
		t.Fatalf("second pass: %d GETs, want %d", gets, chunks)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.admissions.Load() < chunks {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d twice-downloaded chunks written to disk", c.admissions.Load(), chunks)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := tr.CachedBytes(); got != chunks*chunk {
		t.Fatalf("disk level holds %d bytes, want %d", got, chunks*chunk)
	}

	if gets := pass(); gets != 0 {
		t.Fatalf("third pass: %d GETs, want 0 (every chunk is on disk)", gets)
	}
}

// newTestCache opens a Tier over one object of `chunks` random chunks and
// returns it with the object's bytes and the metrics of its store.
func newTestCache(t *testing.T, chunk, chunks int64, cfg Config) (*Tier, []byte, *objstore.Metrics) {
	t.Helper()
	ctx := context.Background()
	dir, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	metrics := objstore.NewMetrics()
	store := objstore.WithMetrics(dir, metrics)
	data := make([]byte, chunk*chunks)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := store.Put(ctx, "obj", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.CacheDir, cfg.ChunkBytes = store, t.TempDir(), chunk
	tr, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr, data, metrics
}

// readChunks reads chunks idx of obj through c and checks their bytes.
func readChunks(t *testing.T, c *chunkCache, data []byte, chunk int64, idx ...int64) {
	t.Helper()
	for _, i := range idx {
		got, err := c.readAt(context.Background(), nil, "obj", int64(len(data)), i*chunk, chunk, int64(len(data)))
		if err != nil {
			t.Fatalf("read chunk %d: %v", i, err)
		}
		if !bytes.Equal(got, data[i*chunk:(i+1)*chunk]) {
			t.Fatalf("chunk %d: wrong bytes", i)
		}
	}
}

// TestChunkCacheDiskBoundUnderConcurrentWrites: chunks downloaded a second
// time at once are written to disk only as far as the disk level has room,
// counting the writes still under way; the others are skipped, not
// squeezed in beyond the bound.
func TestChunkCacheDiskBoundUnderConcurrentWrites(t *testing.T) {
	const chunk = 64 << 10
	tr, data, _ := newTestCache(t, chunk, 8, Config{MemoryBytes: 4 * chunk, CacheBytes: 2 * chunk, ReadAhead: -1, ReadWorkers: 4})
	c := tr.cache
	var writers atomic.Int64
	release := make(chan struct{})
	c.testBeforeWrite = func() {
		writers.Add(1)
		<-release
	}
	readChunks(t, c, data, chunk, 0, 1, 2, 3) // in memory
	readChunks(t, c, data, chunk, 4, 5, 6, 7) // 0-3 leave memory: ghosts
	var wg sync.WaitGroup
	for i := range int64(4) {
		wg.Go(func() { readChunks(t, c, data, chunk, i) }) // second downloads
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond) // let every admission that will start, start
	c.mu.Lock()
	reserved, size := c.mu.diskReserved, c.mu.diskSize
	c.mu.Unlock()
	if reserved+size > 2*chunk || writers.Load() > 2 {
		t.Errorf("%d chunk writes under way reserving %d bytes (+%d cached) of a %d-byte disk level", writers.Load(), reserved, size, 2*chunk)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for c.admissions.Load() < writers.Load() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := tr.CachedBytes(); got > 2*chunk {
		t.Fatalf("disk level holds %d bytes, bound %d", got, 2*chunk)
	}
	if files, temps := cacheDirBytes(t, c.dir); files+temps > 2*chunk {
		t.Fatalf("cache directory holds %d bytes, bound %d", files+temps, 2*chunk)
	}
}

// TestChunkCacheLostFileIsDownloadedAgain: a chunk file that vanished from
// the cache directory (removed by an operator, lost with the disk) costs a
// download, never a failed read.
func TestChunkCacheLostFileIsDownloadedAgain(t *testing.T) {
	const chunk = 64 << 10
	tr, data, _ := newTestCache(t, chunk, 8, Config{MemoryBytes: 2 * chunk, CacheBytes: 8 * chunk, ReadAhead: -1, ReadWorkers: 1})
	c := tr.cache
	readChunks(t, c, data, chunk, 0, 1, 2, 3)
	readChunks(t, c, data, chunk, 0, 1, 2, 3) // downloaded twice: to disk
	deadline := time.Now().Add(10 * time.Second)
	for c.admissions.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c.admissions.Load() < 4 {
		t.Fatalf("%d chunks on disk, want 4", c.admissions.Load())
	}
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.Remove(filepath.Join(c.dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	// Chunks 0 and 1 are only on disk now (memory holds 2 and 3).
	readChunks(t, c, data, chunk, 0, 1)
	var buf []byte
	for i := range int64(4) {
		got, release, err := c.view(context.Background(), &buf, "obj", int64(len(data)), i*chunk, chunk, int64(len(data)))
		if err != nil {
			t.Fatalf("view chunk %d: %v", i, err)
		}
		if !bytes.Equal(got, data[i*chunk:(i+1)*chunk]) {
			t.Fatalf("view chunk %d: wrong bytes", i)
		}
		release()
	}
}
