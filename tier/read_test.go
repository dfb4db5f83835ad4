package tier

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/segment"
	"strata/tier/format"
	"strata/tier/objstore"
)

// TestReadMatchesLocalRead uploads segments of batches from a few hundred
// bytes to several read windows and chunks big, then reads every batch,
// from its first offset and from inside it, with byte limits below, around
// and above the batch sizes, and below offset bounds, and checks that the
// bucket returns exactly what the local log does. Memory holds two chunks, so the reads go through
// both cache levels.
func TestReadMatchesLocalRead(t *testing.T) {
	const chunk = 128 << 10
	ctx := context.Background()
	l, err := segment.Open(t.TempDir(), segment.Config{SegmentBytes: 1 << 20, MaxBatchBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	bytesRNG := rand.NewChaCha8([32]byte{7})
	for range 60 {
		size := 100 + rng.IntN(2<<10)
		if rng.IntN(3) == 0 {
			size = 60<<10 + rng.IntN(300<<10) // beyond a read window, often a chunk
		}
		value := make([]byte, size)
		bytesRNG.Read(value)
		if _, err := l.Append(testBatch(value[:size/2], value[size/2:]), 0); err != nil {
			t.Fatal(err)
		}
	}
	segs, err := l.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 2 {
		t.Fatalf("%d closed segments, want at least 2", len(segs))
	}
	store, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Open(Config{Store: store, CacheDir: t.TempDir(), ChunkBytes: chunk, MemoryBytes: 2 * chunk, CacheBytes: 8 * chunk, ReadWorkers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	tp := format.TopicPartition{Topic: "t", TopicID: [16]byte{1}, Partition: 0}
	for _, s := range segs {
		if _, err := tr.Upload(ctx, tp, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	end := segs[len(segs)-1].EndOffset
	for offset := int64(0); offset < end; offset++ {
		for _, maxBytes := range []int{1, 1 << 10, 64 << 10, 200 << 10, 1 << 20} {
			want, err := l.Read(nil, offset, end, maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tr.Read(ctx, tp, nil, offset, maxBytes)
			if err != nil {
				t.Fatalf("read offset %d, max %d: %v", offset, maxBytes, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("read offset %d, max %d: %d bytes from the bucket, %d from the local log", offset, maxBytes, len(got), len(want))
			}
		}
		// A bound (the high watermark, or the LSO of a read_committed
		// fetch) cuts a bucket read where it cuts a local one.
		for _, maxOffset := range []int64{offset, offset + 1, offset + 3, offset + 7} {
			want, err := l.Read(nil, offset, maxOffset, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			got, err := tr.ReadBelow(ctx, tp, nil, offset, maxOffset, 1<<20)
			if err != nil {
				t.Fatalf("read offset %d below %d: %v", offset, maxOffset, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("read offset %d below %d: %d bytes from the bucket, %d from the local log", offset, maxOffset, len(got), len(want))
			}
		}
	}
	if tr.cache.admissions.Load() == 0 {
		t.Fatal("no chunk reached the disk level: the test read memory only")
	}
}

// testBatch encodes a v2 record batch of one record per value.
func testBatch(values ...[]byte) []byte {
	rb := kmsg.RecordBatch{Magic: 2, LastOffsetDelta: int32(len(values) - 1), NumRecords: int32(len(values)), ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1}
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: v}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		rb.Records = r.AppendTo(rb.Records)
	}
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// TestOffsetForTimestampReadsNoAhead: a lookup by time (ListOffsets) reads
// the time index and the chunks that hold its answer, and nothing else;
// read-ahead is for sequential fetches (issue 9 item 12). The timestamp
// looked up is in the last batch of a segment, where a fetch would warm
// the next segment's index and first chunks.
func TestOffsetForTimestampReadsNoAhead(t *testing.T) {
	const chunk = 64 << 10
	ctx := context.Background()
	l, tr, store := uploadedLog(t, 600, 256<<10, func(i int) int64 { return 1000 + int64(i) },
		Config{ChunkBytes: chunk, MemoryBytes: 8 * chunk, CacheBytes: 8 * chunk, ReadAhead: 4})
	m, err := tr.Manifest(ctx, testTP)
	if err != nil {
		t.Fatal(err)
	}
	segs := allSegments(t, store, m)
	if len(segs) < 2 {
		t.Fatalf("manifest: %d segments", len(segs))
	}
	first := segs[0]
	store.reset()
	want, _, ok, err := l.OffsetForTimestamp(1000 + first.LastOffset)
	if err != nil || !ok {
		t.Fatalf("local lookup: %v, %v", ok, err)
	}
	off, _, ok, err := tr.OffsetForTimestamp(ctx, testTP, 1000+first.LastOffset)
	if err != nil || !ok || off != want {
		t.Fatalf("lookup of the last timestamp of segment 0: offset %d, %v, %v; want %d", off, ok, err, want)
	}
	tr.Close() // waits for background downloads
	for _, s := range segs[1:] {
		if gets := store.getsOf(s.Key); len(gets) != 0 {
			t.Errorf("lookup in segment 0 read segment %d: %v", s.BaseOffset, gets)
		}
	}
	var logGets int
	for _, g := range store.getsOf(first.Key) {
		if g.off < first.Log.End() {
			logGets++
		}
	}
	// The answer's batch is in the last chunk or straddles the last two.
	if logGets > 2 {
		t.Errorf("lookup read %d chunks of segment 0's log, want at most the 2 that can hold the answer", logGets)
	}
}

// TestReadChecksBatchOffsets: the base offset and length of a batch are
// outside its CRC, so the reader checks offsets instead: a remote read
// never serves a batch outside its segment's offsets or not above the
// batch before it, and never skips a batch because of a damaged one
// (issue 9 item 7). Every batch near the start is damaged in turn, so the
// damage is met both where a read starts (at an index entry) and while
// it scans.
func TestReadChecksBatchOffsets(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		damage func(b []byte, prevBase int64)
	}{
		{"bit flipped high", func(b []byte, _ int64) { b[0] ^= 0x01 }}, // +2^56
		{"repeats the batch before", func(b []byte, prevBase int64) { binary.BigEndian.PutUint64(b, uint64(prevBase)) }},
	} {
		for victim := int64(1); victim <= 6; victim++ {
			t.Run(fmt.Sprintf("%s/batch %d", tc.name, victim), func(t *testing.T) {
				_, tr, store := uploadedLog(t, 100, 64<<10, func(i int) int64 { return int64(i) }, Config{ChunkBytes: 64 << 10, MemoryBytes: 4 << 20, CacheBytes: 4 << 20})
				m, err := tr.Manifest(ctx, testTP)
				if err != nil {
					t.Fatal(err)
				}
				rs := allSegments(t, store, m)[0]
				obj := getObject(t, store, rs.Key)
				// One record per batch: batch i holds offset i.
				pos, prevBase := int64(0), int64(-1)
				for i := int64(0); i < victim; i++ {
					h, err := segment.ParseBatchHeader(obj[pos:])
					if err != nil {
						t.Fatal(err)
					}
					prevBase = h.BaseOffset
					pos += int64(h.Size())
				}
				tc.damage(obj[pos:], prevBase)
				if err := store.Put(ctx, rs.Key, bytes.NewReader(obj), int64(len(obj))); err != nil {
					t.Fatal(err)
				}
				got, err := tr.Read(ctx, testTP, nil, victim, 1<<20)
				if !errors.Is(err, segment.ErrCorruptSegment) {
					t.Fatalf("read of the damaged batch: %v, and %d bytes from offset %d; want ErrCorruptSegment", err, len(got), firstBase(got))
				}
				got, err = tr.Read(ctx, testTP, nil, 0, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				if n := countBatches(t, got); n != int(victim) || firstBase(got) != 0 {
					t.Fatalf("read from 0: %d batches from offset %d, want the %d before the damage", n, firstBase(got), victim)
				}
			})
		}
	}
}

// getObject returns the whole object stored under key.
func getObject(t *testing.T, store objstore.Store, key string) []byte {
	t.Helper()
	rc, err := store.GetRange(context.Background(), key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// firstBase is the base offset of the first batch of b, -1 without one.
func firstBase(b []byte) int64 {
	h, err := segment.ParseBatchHeader(b)
	if err != nil {
		return -1
	}
	return h.BaseOffset
}

// countBatches counts the batches of b, which must be whole.
func countBatches(t *testing.T, b []byte) int {
	t.Helper()
	n := 0
	for p := 0; p < len(b); n++ {
		h, err := segment.ParseBatchHeader(b[p:])
		if err != nil || p+h.Size() > len(b) {
			t.Fatalf("batch %d at %d of %d bytes: %v", n, p, len(b), err)
		}
		p += h.Size()
	}
	return n
}

// TestIndexGetsShareTheWorkersAndOneFlight: the remote index GETs run on
// the read workers like chunk GETs, so no more than ReadWorkers GETs are
// ever in flight, and readers wanting the same index at once share one
// GET of it (issue 9 item 6).
func TestIndexGetsShareTheWorkersAndOneFlight(t *testing.T) {
	const workers, readersPerSegment = 2, 3
	ctx := context.Background()
	_, tr, store := uploadedLog(t, 150, 16<<10, func(i int) int64 { return int64(i) },
		Config{ChunkBytes: 64 << 10, MemoryBytes: 1 << 20, CacheBytes: 1 << 20, ReadAhead: -1, ReadWorkers: workers})
	m, err := tr.Manifest(ctx, testTP)
	if err != nil {
		t.Fatal(err)
	}
	segs := allSegments(t, store, m)
	if len(segs) < 8 {
		t.Fatalf("%d segments, want at least 8", len(segs))
	}
	store.reset()
	store.delay = 20 * time.Millisecond // so that GETs started together overlap
	var wg sync.WaitGroup
	for _, s := range segs {
		for range readersPerSegment {
			wg.Go(func() {
				if _, err := tr.Read(ctx, testTP, nil, s.BaseOffset, 1); err != nil {
					t.Errorf("read %d: %v", s.BaseOffset, err)
				}
			})
		}
	}
	wg.Wait()
	if n := store.maxIn.Load(); n > workers {
		t.Errorf("%d GETs in flight at once with %d read workers", n, workers)
	}
	for _, s := range segs {
		var indexGets int
		for _, g := range store.getsOf(s.Key) {
			if g.off == s.Index.Offset {
				indexGets++
			}
		}
		if indexGets != 1 {
			t.Errorf("segment %d: its index fetched %d times by %d readers at once, want once", s.BaseOffset, indexGets, readersPerSegment)
		}
	}
}

// TestCloseStopsIndexDownloads: an index download outlives the reader
// that started it (others may be waiting for it) but not the Tier: Close
// cancels a stalled one and waits for it.
func TestCloseStopsIndexDownloads(t *testing.T) {
	_, tr, store := uploadedLog(t, 40, 16<<10, func(i int) int64 { return int64(i) }, Config{ChunkBytes: 64 << 10, MemoryBytes: 1 << 20, CacheBytes: 1 << 20})
	store.delay = time.Hour // until the GET's context ends
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := tr.Read(ctx, testTP, nil, 0, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read with a stalled store: %v, want the reader's deadline", err)
	}
	// The index download goes on without the reader.
	deadline := time.Now().Add(10 * time.Second)
	for store.inFlight.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := store.inFlight.Load(); n != 1 {
		t.Fatalf("%d GETs in flight after the reader gave up, want its index download", n)
	}
	tr.Close()
	if n := store.inFlight.Load(); n != 0 {
		t.Fatalf("%d GETs still in flight after Close", n)
	}
}
