package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"strata/segment"
	"strata/tier/format"
	"strata/tier/objstore"
)

// Config configures a Tier.
type Config struct {
	// Store is the object store (already prefixed and decorated).
	Store objstore.Store
	// CacheDir holds the chunk cache; it is emptied at Open.
	CacheDir string
	// ChunkBytes is the size of the ranged GETs remote reads are made of
	// (default 8 MiB).
	ChunkBytes int64
	// MemoryBytes bounds the chunks held in memory, downloads under way
	// included (default 256 MiB; at least two chunks). Every download
	// lands there first.
	MemoryBytes int64
	// CacheBytes bounds the chunk cache on disk (default 1 GiB; at least two
	// chunks). A chunk is written to disk the second time it has to be
	// downloaded, so one-pass replays cost no local disk writes.
	CacheBytes int64
	// ReadAhead is how many chunks past the one being read are fetched in
	// the background for a sequential reader (default 2).
	ReadAhead int
	// ReadWorkers bounds concurrent GETs of remote reads, read-ahead
	// included (default 8; at most MemoryBytes/ChunkBytes, since each
	// download in flight reserves its chunk's room in memory).
	ReadWorkers int
	// Logger receives upload and collection reports; nil discards them.
	Logger *slog.Logger
	// Now is the clock for orphan grace periods; nil is time.Now.
	Now func() time.Time
}

// Defaults.
const (
	DefaultChunkBytes  = 8 << 20
	DefaultCacheBytes  = 1 << 30
	DefaultMemoryBytes = 256 << 20
	DefaultReadAhead   = 2
	DefaultReadWorkers = 8
	// indexCacheBytes bounds the remote offset and time indexes kept in
	// memory.
	indexCacheBytes = 64 << 20
)

func (c Config) withDefaults() Config {
	if c.ChunkBytes <= 0 {
		c.ChunkBytes = DefaultChunkBytes
	}
	if c.CacheBytes <= 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.MemoryBytes <= 0 {
		c.MemoryBytes = DefaultMemoryBytes
	}
	if c.ReadAhead < 0 {
		c.ReadAhead = 0
	} else if c.ReadAhead == 0 {
		c.ReadAhead = DefaultReadAhead
	}
	if c.ReadWorkers <= 0 {
		c.ReadWorkers = DefaultReadWorkers
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Tier is the cold tier of the partitions of one broker.
type Tier struct {
	cfg   Config
	store objstore.Store
	log   *slog.Logger
	cache *chunkCache
	index *indexCache
	// corrupt reports corrupt remote reads (read.go).
	corrupt corruptReports

	mu         sync.Mutex
	partitions map[format.TopicPartition]*partitionState // guarded by mu
}

// partitionState is the tier's view of one partition. mu serialises
// uploads and manifest loads; readers take the current manifest pointer,
// which is immutable.
type partitionState struct {
	mu       sync.Mutex
	manifest *format.Manifest // nil until loaded
}

// Open starts a Tier over cfg.Store.
func Open(cfg Config) (*Tier, error) {
	cfg = cfg.withDefaults()
	if cfg.Store == nil {
		return nil, errors.New("tier: no object store")
	}
	if cfg.CacheBytes < 2*cfg.ChunkBytes {
		return nil, fmt.Errorf("tier: chunk cache of %d bytes cannot hold two %d-byte chunks", cfg.CacheBytes, cfg.ChunkBytes)
	}
	if cfg.MemoryBytes < 2*cfg.ChunkBytes {
		return nil, fmt.Errorf("tier: chunk memory of %d bytes cannot hold two %d-byte chunks", cfg.MemoryBytes, cfg.ChunkBytes)
	}
	// Every download in flight holds a chunk's worth of memory, so the
	// memory bound bounds the GETs that may run at once.
	cfg.ReadWorkers = int(min(int64(cfg.ReadWorkers), cfg.MemoryBytes/cfg.ChunkBytes))
	cache, err := newChunkCache(cfg.Store, cfg.CacheDir, cfg.ChunkBytes, cfg.CacheBytes, cfg.MemoryBytes, cfg.ReadAhead, cfg.ReadWorkers)
	if err != nil {
		return nil, err
	}
	return &Tier{
		cfg:        cfg,
		store:      cfg.Store,
		log:        cfg.Logger,
		cache:      cache,
		index:      newIndexCache(indexCacheBytes),
		partitions: make(map[format.TopicPartition]*partitionState),
	}, nil
}

// Close stops read-ahead downloads and waits for them.
func (t *Tier) Close() error {
	t.cache.close()
	return nil
}

func (t *Tier) state(tp format.TopicPartition) *partitionState {
	t.mu.Lock()
	defer t.mu.Unlock()
	ps, ok := t.partitions[tp]
	if !ok {
		ps = &partitionState{}
		t.partitions[tp] = ps
	}
	return ps
}

// Manifest returns the partition's current manifest, reading it from the
// bucket the first time. A partition with nothing in the bucket has an
// empty manifest (no segments, sequence 0).
func (t *Tier) Manifest(ctx context.Context, tp format.TopicPartition) (*format.Manifest, error) {
	ps := t.state(tp)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return t.manifestLocked(ctx, tp, ps)
}

func (t *Tier) manifestLocked(ctx context.Context, tp format.TopicPartition, ps *partitionState) (*format.Manifest, error) {
	if ps.manifest != nil {
		return ps.manifest, nil
	}
	m, err := t.loadManifest(ctx, tp)
	if err != nil {
		return nil, err
	}
	ps.manifest = m
	return m, nil
}

// loadManifest reads the newest manifest of tp from the bucket, or an
// empty one when there is none.
func (t *Tier) loadManifest(ctx context.Context, tp format.TopicPartition) (*format.Manifest, error) {
	m, ok, err := ReadManifest(ctx, t.store, tp)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &format.Manifest{TopicPartition: tp}, nil
	}
	return m, nil
}

// Upload copies one closed segment to the bucket as a single object, then
// publishes a new manifest that lists it, and returns that manifest. The
// order is what keeps the bucket consistent: a crash after the object and
// before the manifest leaves an orphan (collected later), never a hole. A
// segment that ends at or below what the manifest already covers is not
// uploaded again.
func (t *Tier) Upload(ctx context.Context, tp format.TopicPartition, seg segment.SegmentInfo, leaderEpoch int32) (*format.Manifest, error) {
	ps := t.state(tp)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	m, err := t.manifestLocked(ctx, tp, ps)
	if err != nil {
		return nil, err
	}
	if len(m.Segments) > 0 && seg.EndOffset <= m.EndOffset() {
		return m, nil // already there
	}
	obj, rs, err := t.buildObject(tp, seg, leaderEpoch)
	if err != nil {
		return nil, err
	}
	defer obj.close()
	if err := t.store.Put(ctx, rs.Key, obj.r, obj.r.Size()); err != nil {
		return nil, fmt.Errorf("upload segment %d of %s-%d: %w", seg.BaseOffset, tp.Topic, tp.Partition, err)
	}
	next, err := m.With(rs)
	if err != nil {
		return nil, fmt.Errorf("add segment %d to the manifest of %s-%d: %w", seg.BaseOffset, tp.Topic, tp.Partition, err)
	}
	next.LeaderEpoch = max(next.LeaderEpoch, leaderEpoch)
	if err := t.publish(ctx, next); err != nil {
		return nil, err
	}
	ps.manifest = next
	t.log.Debug("segment uploaded", "topic", tp.Topic, "partition", tp.Partition, "base", seg.BaseOffset, "end", seg.EndOffset, "bytes", rs.Size, "key", rs.Key)
	return next, nil
}

// publish writes m under its own, never-reused key.
func (t *Tier) publish(ctx context.Context, m *format.Manifest) error {
	raw, err := format.EncodeManifest(m)
	if err != nil {
		return fmt.Errorf("encode manifest of %s-%d: %w", m.Topic, m.Partition, err)
	}
	if err := t.store.Put(ctx, m.Key(), bytes.NewReader(raw), int64(len(raw))); err != nil {
		return fmt.Errorf("publish manifest %s: %w", m.Key(), err)
	}
	return nil
}

// segmentObject is an object ready to PUT: the log file, unread, followed
// by the small parts in memory.
type segmentObject struct {
	f *os.File
	r *io.SectionReader
}

func (o *segmentObject) close() { o.f.Close() }

// buildObject lays out seg as one object (docs/bucket-format.md). The log
// bytes are read twice, once here for their checksum and once by the PUT,
// both from the page cache in the usual case; nothing of the log is
// copied into memory.
func (t *Tier) buildObject(tp format.TopicPartition, seg segment.SegmentInfo, leaderEpoch int32) (*segmentObject, format.RemoteSegment, error) {
	fail := func(err error) (*segmentObject, format.RemoteSegment, error) {
		return nil, format.RemoteSegment{}, fmt.Errorf("prepare segment %d of %s-%d: %w", seg.BaseOffset, tp.Topic, tp.Partition, err)
	}
	index, err := os.ReadFile(seg.IndexPath)
	if err != nil {
		return fail(err)
	}
	timeIndex, err := os.ReadFile(seg.TimeIndexPath)
	if err != nil {
		return fail(err)
	}
	var snapshot []byte
	if seg.SnapshotPath != "" {
		if snapshot, err = os.ReadFile(seg.SnapshotPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail(err)
		}
	}
	f, err := os.Open(seg.LogPath)
	if err != nil {
		return fail(err)
	}
	firstTs := int64(-1)
	var hdr [61]byte
	if _, err := f.ReadAt(hdr[:], 0); err == nil {
		if h, err := segment.ParseBatchHeader(hdr[:]); err == nil {
			firstTs = h.FirstTimestamp
		}
	}
	parts := format.SegmentParts{
		Log:              io.NewSectionReader(f, 0, seg.Size),
		LogSize:          seg.Size,
		Index:            index,
		TimeIndex:        timeIndex,
		ProducerSnapshot: snapshot,
		BaseOffset:       seg.BaseOffset,
		LastOffset:       seg.EndOffset - 1,
		FirstTimestamp:   firstTs,
		MaxTimestamp:     seg.MaxTimestamp,
		RecordCount:      recordCount(f, seg.Size),
		LeaderEpoch:      leaderEpoch,
	}
	// The footer needs the log's checksum; keep everything after the log
	// bytes (indexes, snapshot, footer) and discard the log itself.
	tail := &tailWriter{skip: seg.Size}
	footer, objectCRC, err := format.WriteSegmentObject(tail, parts)
	if err != nil {
		f.Close()
		return fail(err)
	}
	key := format.SegmentKey{TopicPartition: tp, BaseOffset: seg.BaseOffset, LeaderEpoch: leaderEpoch, UID: format.NewUID()}.String()
	r := objstore.Concat(io.NewSectionReader(f, 0, seg.Size), io.NewSectionReader(bytes.NewReader(tail.buf), 0, int64(len(tail.buf))))
	if r.Size() != footer.ObjectSize() {
		f.Close()
		return fail(fmt.Errorf("object of %d bytes, footer says %d", r.Size(), footer.ObjectSize()))
	}
	return &segmentObject{f: f, r: r}, footer.Segment(key, objectCRC), nil
}

// recordCount adds up the record counts of the batch headers in the log
// file's first size bytes: a header read per batch, not the records. A
// header it cannot read makes the count unknown (-1), never wrong.
func recordCount(f *os.File, size int64) int64 {
	var hdr [61]byte
	n := int64(0)
	for pos := int64(0); pos < size; {
		if _, err := f.ReadAt(hdr[:], pos); err != nil {
			return -1
		}
		h, err := segment.ParseBatchHeader(hdr[:])
		if err != nil || h.NumRecords < 0 || pos+int64(h.Size()) > size {
			return -1
		}
		n += int64(h.NumRecords)
		pos += int64(h.Size())
	}
	return n
}

// tailWriter discards the first skip bytes written to it and keeps the
// rest.
type tailWriter struct {
	skip int64
	buf  []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	n := len(p)
	if w.skip > 0 {
		d := min(int64(len(p)), w.skip)
		w.skip -= d
		p = p[d:]
	}
	w.buf = append(w.buf, p...)
	return n, nil
}

// CachedBytes is the size of the chunk cache on disk, never above
// Config.CacheBytes.
func (t *Tier) CachedBytes() int64 { return t.cache.cachedBytes() }

// CacheStats describes the chunk cache, for metrics.
type CacheStats struct {
	// MemoryBytes and DiskBytes are what each level holds now; memory
	// includes downloads under way.
	MemoryBytes, DiskBytes int64
	// Hits counts chunk reads served from either level; Misses, those that
	// waited for a download of the chunk (their own, or read-ahead's still
	// under way).
	Hits, Misses int64
	// DiskWrites counts chunks written to the disk level (downloaded a
	// second time); DiskEvictions, chunks evicted from it.
	DiskWrites, DiskEvictions int64
	// CorruptReads counts remote reads that found bytes failing their
	// checks (CRC-32C, batch structure or offsets), healed by a fresh
	// download or not.
	CorruptReads int64
}

// CacheStats returns the chunk cache's current figures.
func (t *Tier) CacheStats() CacheStats {
	c := t.cache
	return CacheStats{
		MemoryBytes:   c.memBytes(),
		DiskBytes:     c.cachedBytes(),
		Hits:          c.hits.Load(),
		Misses:        c.misses.Load(),
		DiskWrites:    c.admissions.Load(),
		DiskEvictions: c.evictions.Load(),
		CorruptReads:  t.corrupt.count.Load(),
	}
}
