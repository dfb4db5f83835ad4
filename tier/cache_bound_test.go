package tier

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"strata/tier/objstore"
)

// TestChunkCacheBound is the promise that the chunk cache never exceeds its
// bounds (issue 4). Sequential readers (with read-ahead) and random readers
// go through a cache four chunks big in memory and four on disk, over
// objects forty times larger, while a sampler checks, as often as it can:
//
//   - the chunks in memory, downloads under way included, never exceed
//     MemoryBytes;
//   - CachedBytes, the cache's own account of its chunks on disk, never
//     exceeds CacheBytes;
//   - the bytes on disk in the cache directory, finished chunk files and
//     the temporary files of downloads under way together, never exceed
//     CacheBytes plus ReadWorkers chunks (room is reserved before a chunk
//     is written, so this slack only covers the sampler's view of the
//     directory not being one instant).
//
// Chunks re-read after leaving memory must reach the disk level; every
// read, including views of cached chunks held while other reads evict and
// recycle buffers, is checked against the object's bytes.
func TestChunkCacheBound(t *testing.T) {
	const (
		chunk   = 64 << 10
		limit   = 4 * chunk
		workers = 4
		objects = 4
		objSize = 10*limit + 123 // not a multiple of the chunk
	)
	reads := 400
	if testing.Short() {
		reads = 100
	}
	store, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := make(map[string][]byte, objects)
	for i := range objects {
		b := make([]byte, objSize)
		rng := rand.New(rand.NewPCG(uint64(i), 1))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		key := fmt.Sprintf("obj/%d", i)
		if err := store.Put(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
		data[key] = b
	}
	cacheDir := filepath.Join(t.TempDir(), "cache")
	tr, err := Open(Config{Store: store, CacheDir: cacheDir, ChunkBytes: chunk, MemoryBytes: limit, CacheBytes: limit, ReadAhead: 2, ReadWorkers: workers})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()

	stop := make(chan struct{})
	var samples, maxCached, maxDisk, maxChunks, maxMem atomic.Int64
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if mem := tr.cache.memBytes(); mem > limit {
				t.Errorf("%d bytes of chunks in memory, above the bound %d", mem, limit)
			} else {
				maxMem.Store(max(maxMem.Load(), mem))
			}
			cached := tr.CachedBytes()
			if cached > limit {
				t.Errorf("CachedBytes %d above the bound %d", cached, limit)
			}
			chunks, temps := cacheDirBytes(t, cacheDir)
			if chunks+temps > limit+workers*chunk {
				t.Errorf("cache directory holds %d bytes of chunks and %d of downloads, above %d + %d workers x %d", chunks, temps, limit, workers, chunk)
			}
			samples.Add(1)
			maxCached.Store(max(maxCached.Load(), cached))
			maxDisk.Store(max(maxDisk.Load(), chunks+temps))
			maxChunks.Store(max(maxChunks.Load(), chunks))
		}
	})

	var readers sync.WaitGroup
	for r := range 6 {
		readers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 2))
			key := fmt.Sprintf("obj/%d", r%objects)
			var off int64
			for range reads {
				n := rng.Int64N(3*chunk/2) + 1
				if r%2 == 1 { // random reader
					key = fmt.Sprintf("obj/%d", rng.IntN(objects))
					off = rng.Int64N(objSize)
				}
				n = min(n, objSize-off)
				var got []byte
				release := func() {}
				var err error
				if r%3 == 2 {
					// A view of a cached chunk, held a while so that
					// other reads evict and reuse buffers meanwhile: a
					// held chunk must not change under its reader.
					var buf []byte
					got, release, err = tr.cache.view(ctx, &buf, key, objSize, off, n, objSize)
					time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				} else {
					got, err = tr.cache.readAt(ctx, nil, key, objSize, off, n, objSize)
				}
				if err != nil {
					t.Errorf("read %s [%d, %d): %v", key, off, off+n, err)
					return
				}
				ok := bytes.Equal(got, data[key][off:off+n])
				release()
				if !ok {
					t.Errorf("read %s [%d, %d): wrong bytes", key, off, off+n)
					return
				}
				if off += n; off == objSize { // sequential reader: wrap
					off = 0
				}
			}
		})
	}
	readers.Wait()
	close(stop)
	sampler.Wait()
	c := tr.cache
	t.Logf("%d samples; max in memory %d, max CachedBytes %d, max on disk %d (finished chunks %d), bound %d; hits %d, misses %d, written to disk %d, evicted from disk %d",
		samples.Load(), maxMem.Load(), maxCached.Load(), maxDisk.Load(), maxChunks.Load(), limit, c.hits.Load(), c.misses.Load(), c.admissions.Load(), c.evictions.Load())
	if c.evictions.Load() == 0 {
		t.Fatal("nothing was evicted from disk: the test did not press on the bound")
	}
	if samples.Load() < 10 {
		t.Fatalf("only %d samples", samples.Load())
	}
	if got := tr.CachedBytes(); got > limit {
		t.Fatalf("CachedBytes %d above the bound %d at the end", got, limit)
	}
	// Read-ahead downloads may still run; Close cancels and waits for them.
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	if chunks, temps := cacheDirBytes(t, cacheDir); chunks > limit || temps != 0 {
		t.Fatalf("at rest the cache directory holds %d bytes of chunks (bound %d) and %d of downloads", chunks, limit, temps)
	}
}

// cacheDirBytes sums the sizes of the files in the chunk cache directory:
// finished chunks, and the temporary files of downloads under way. Files
// that vanish while it looks are skipped.
func cacheDirBytes(t *testing.T, dir string) (chunks, temps int64) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Errorf("read cache dir: %v", err)
		return 0, 0
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			continue // evicted or renamed since ReadDir
		}
		if strings.HasPrefix(e.Name(), ".chunk-") {
			temps += info.Size()
		} else {
			chunks += info.Size()
		}
	}
	return chunks, temps
}
