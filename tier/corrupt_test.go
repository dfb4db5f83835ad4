package tier

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"strata/segment"
)

// lockedBuffer is a log sink safe for the tier's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// lines returns the logged lines containing s.
func (w *lockedBuffer) lines(s string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, l := range strings.Split(w.b.String(), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// testClock is a clock a test moves by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestCorruptChunkIsDownloadedAgain is the promise that damage in the
// bucket lasts only as long as it is in the bucket (issue 9 item 4): a
// read that finds a batch failing its checks drops the chunks it read
// from memory, disk and the ghost list and tries a fresh GET; while the
// object stays damaged the read fails with ErrCorruptSegment, and once
// the object is restored the first read after corruptRetryInterval serves
// it (a damage a fresh download confirmed is believed that long, costing
// no GETs meanwhile), whether the bad
// copy was in memory or on disk. Every corrupt read is counted, and the
// log says so once per object per interval.
func TestCorruptChunkIsDownloadedAgain(t *testing.T) {
	const chunk = 64 << 10
	ctx := context.Background()
	var logs lockedBuffer
	clock := &testClock{now: time.Unix(1_800_000_000, 0)}
	l, tr, store := uploadedLog(t, 300, 256<<10, func(i int) int64 { return int64(i) }, Config{
		ChunkBytes: chunk, MemoryBytes: 2 * chunk, CacheBytes: 8 * chunk, ReadAhead: -1, ReadWorkers: 1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: clock.Now,
	})
	m, err := tr.Manifest(ctx, testTP)
	if err != nil {
		t.Fatal(err)
	}
	rs := allSegments(t, store, m)[0]
	good := getObject(t, store, rs.Key)
	// Batches hold one 1 KiB record each: batch i holds offset i. The
	// victim and its neighbour are in chunk 1 (a read of either also
	// touches chunk 2); reads of batches 150 and 200 fill the two chunks
	// of memory with chunks 2 and 3.
	batchPos := func(off int64) int64 {
		pos := int64(0)
		for i := int64(0); i < off; i++ {
			h, err := segment.ParseBatchHeader(good[pos:])
			if err != nil {
				t.Fatal(err)
			}
			pos += int64(h.Size())
		}
		return pos
	}
	const victim, neighbour = 90, 65
	if batchPos(victim)/chunk != 1 || batchPos(neighbour)/chunk != 1 || batchPos(150)/chunk != 2 || batchPos(200)/chunk != 3 || rs.Log.End() > 4*chunk {
		t.Fatalf("batches not laid out as the test needs: victim at %d, neighbour at %d", batchPos(victim), batchPos(neighbour))
	}
	bad := bytes.Clone(good)
	bad[batchPos(victim)+100] ^= 0x10 // inside the record: fails the CRC
	put := func(b []byte) {
		t.Helper()
		if err := store.Put(ctx, rs.Key, bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	end := l.EndOffset()
	read := func(off int64) ([]byte, error) {
		t.Helper()
		got, err := tr.Read(ctx, testTP, nil, off, 1)
		if err == nil {
			want, lerr := l.Read(nil, off, end, 1)
			if lerr != nil {
				t.Fatal(lerr)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("read %d: %d bytes differ from the local log's %d", off, len(got), len(want))
			}
		}
		return got, err
	}
	mustRead := func(offs ...int64) {
		t.Helper()
		for _, off := range offs {
			if _, err := read(off); err != nil {
				t.Fatalf("read %d: %v", off, err)
			}
		}
	}
	mustFail := func(what string) {
		t.Helper()
		if got, err := read(victim); !errors.Is(err, segment.ErrCorruptSegment) {
			t.Fatalf("%s: read of the damaged batch: %d bytes, %v; want ErrCorruptSegment", what, len(got), err)
		}
	}

	// In memory: the damaged chunk read again and again, then the object
	// restored. The log has one line for the object per interval, with
	// the corrupt reads since the line before.
	put(bad)
	mustFail("in memory")
	// The damage a fresh download confirmed is believed for a while: the
	// reads that meet it meanwhile cost no GET (a retrying consumer would
	// otherwise download the chunk again several times a second).
	store.reset()
	for range 4 {
		mustFail("in memory, confirmed")
	}
	if gets := store.getsOf(rs.Key); len(gets) != 0 {
		t.Fatalf("%d GETs of the damaged object within the retry interval, want none: %v", len(gets), gets)
	}
	if lines := logs.lines(rs.Key); len(lines) != 1 || !strings.Contains(lines[0], "reads=1") {
		t.Fatalf("log lines about %s within one interval, want 1:\n%s", rs.Key, strings.Join(lines, "\n"))
	}
	clock.Advance(corruptLogInterval)
	mustFail("in memory, after the interval")
	if lines := logs.lines(rs.Key); len(lines) != 2 || !strings.Contains(lines[1], "reads=5") {
		t.Fatalf("log lines about %s after the interval, want a second one counting 5 reads:\n%s", rs.Key, strings.Join(lines, "\n"))
	}
	put(good)
	clock.Advance(corruptRetryInterval)
	if _, err := read(victim); err != nil {
		t.Fatalf("read after the object was restored, bad copy in memory: %v", err)
	}

	// On disk: the damaged chunk goes to disk through reads of a good
	// batch beside the damage (downloaded twice), then the object is
	// restored.
	mustRead(150, 200) // chunk 1 out of memory
	put(bad)
	mustRead(neighbour) // chunk 1's second download: to disk
	// Admission is asynchronous, and another chunk may have been admitted
	// before: wait for chunk 1 itself.
	c := tr.cache
	chunk1OnDisk := func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.mu.disk[chunkKey{rs.Key, 1}]
		return ok
	}
	deadline := time.Now().Add(10 * time.Second)
	for !chunk1OnDisk() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !chunk1OnDisk() {
		t.Fatal("chunk 1 never reached the disk level")
	}
	mustRead(150, 200) // chunk 1 only on disk now
	c.mu.Lock()
	_, inMem := c.mu.mem[chunkKey{rs.Key, 1}]
	_, onDisk := c.mu.disk[chunkKey{rs.Key, 1}]
	c.mu.Unlock()
	if inMem || !onDisk {
		t.Fatalf("chunk 1 in memory %v, on disk %v: want it on disk only", inMem, onDisk)
	}
	clock.Advance(corruptRetryInterval)
	mustFail("on disk")
	put(good)
	clock.Advance(corruptRetryInterval)
	if _, err := read(victim); err != nil {
		t.Fatalf("read after the object was restored, bad copy on disk: %v", err)
	}

	// Every read that met the damage is counted, the ones a fresh
	// download healed too (the reads after each restore).
	if n := tr.CacheStats().CorruptReads; n != 9 {
		t.Fatalf("%d corrupt reads counted, want 9", n)
	}
}
