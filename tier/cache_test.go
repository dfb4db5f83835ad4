package tier

import (
	"bytes"
	"context"
	"math/rand/v2"
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
		size   = 2 * chunks * chunk
	)
	ctx := context.Background()
	dir, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	metrics := objstore.NewMetrics()
	store := objstore.WithMetrics(dir, metrics)
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := store.Put(ctx, "obj", bytes.NewReader(data), size); err != nil {
		t.Fatal(err)
	}
	// Read-ahead off, so every GET is one the reads asked for.
	tr, err := Open(Config{Store: store, CacheDir: t.TempDir(), ChunkBytes: chunk, MemoryBytes: 4 * chunk, CacheBytes: chunks * chunk, ReadAhead: -1, ReadWorkers: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	c := tr.cache

	// pass reads the first `chunks` chunks in order and returns the GETs
	// it cost.
	pass := func(name string) int64 {
		t.Helper()
		before := metrics.Counts()[objstore.OpGet].Requests
		for i := range int64(chunks) {
			got, err := c.readAt(ctx, nil, "obj", size, i*chunk, chunk, size)
			if err != nil {
				t.Fatalf("%s: read chunk %d: %v", name, i, err)
			}
			if !bytes.Equal(got, data[i*chunk:(i+1)*chunk]) {
				t.Fatalf("%s: chunk %d: wrong bytes", name, i)
			}
		}
		return metrics.Counts()[objstore.OpGet].Requests - before
	}

	if gets := pass("first pass"); gets != chunks {
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
	if gets := pass("second pass"); gets != chunks {
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

	if gets := pass("third pass"); gets != 0 {
		t.Fatalf("third pass: %d GETs, want 0 (every chunk is on disk)", gets)
	}
}
