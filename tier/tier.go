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
	"sync/atomic"
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
	// ManifestCacheBytes bounds the manifest pages held in memory, all
	// partitions together (default 64 MiB). A partition opens with its
	// manifest's root alone; pages are fetched when a lookup needs them.
	ManifestCacheBytes int64
	// Paging is the shape of the manifests this tier writes (format
	// defaults when zero).
	Paging format.Paging
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
	if c.ManifestCacheBytes <= 0 {
		c.ManifestCacheBytes = DefaultManifestCacheBytes
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
	// pages holds manifest pages for every partition.
	pages *pageCache
	// corrupt reports corrupt remote reads (read.go).
	corrupt corruptReports
	// compaction counts the requests made for compaction (compact.go).
	compaction requestCounts
	// fence refuses writes to deleted partitions (orphans.go); every
	// write goes through it.
	fence *deletionFence

	mu         sync.Mutex
	partitions map[format.TopicPartition]*partitionState // guarded by mu
}

// ErrFenced reports a write by a leader whose epoch is below that of a
// manifest in the bucket: a newer leader owns the partition's manifest, and
// the deposed one writes nothing.
var ErrFenced = errors.New("tier: fenced by a newer leader epoch")

// errConflict reports that the key of the manifest being published holds
// another manifest: this tier's view was behind the bucket.
var errConflict = errors.New("tier: manifest key already published")

// maxConflicts bounds how many times a writer reloads the bucket and tries
// again after publishing into a taken key.
const maxConflicts = 5

// partitionState is the tier's view of one partition.
//
// Readers take cur without locking: it points to an immutable manifest
// root (its pages come from the tier's page cache) and
// only ever moves forward in (LeaderEpoch, Seq), so a read never waits for
// an upload or a collection pass and never sees an older version than one
// already served. mu serialises this tier's writers of the partition
// (Upload, ApplyRetention), which hold it across their PUTs; the collector
// does not take it. Lock order: partitionState.mu, then Tier.mu.
type partitionState struct {
	cur atomic.Pointer[format.Root] // nil until loaded

	// mu is held by this tier's writers of the partition.
	mu sync.Mutex
	// claim is where this tier's claim of the manifest at its writer's
	// epoch stands. Written with mu held.
	claim claimState
	// pending is a manifest whose publication has an unknown outcome (the
	// PUT failed in a way that may have applied it, and reading it back
	// failed too). The next write resolves it first; the collector keeps
	// its objects meanwhile. Written with mu held.
	pending atomic.Pointer[pendingPublish]

	// mergeFrom is where MergeSmall looks for small segments next: what
	// is below it was found unmergeable.
	mergeFrom atomic.Int64

	// inflight holds the keys of objects this tier is writing for a
	// manifest it has not published yet (a segment, a merged segment, the
	// pages of a change): the collector keeps them whatever their age, so
	// that even a grace shorter than an upload never deletes an object
	// that is about to be referenced.
	inflight struct {
		sync.Mutex
		keys map[string]int
	}

	refs struct {
		sync.Mutex
		// byKey caches the roots of the manifest versions the collector
		// has read; a version never changes under its key.
		byKey map[string]*format.Root
	}
}

type pendingPublish struct {
	m   *format.Root
	raw []byte
}

// hold marks keys as in flight until the returned func is first called.
func (ps *partitionState) hold(keys ...string) (release func()) {
	ps.inflight.Lock()
	if ps.inflight.keys == nil {
		ps.inflight.keys = make(map[string]int)
	}
	for _, k := range keys {
		ps.inflight.keys[k]++
	}
	ps.inflight.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() { ps.release(keys) })
	}
}

func (ps *partitionState) release(keys []string) {
	ps.inflight.Lock()
	defer ps.inflight.Unlock()
	for _, k := range keys {
		if ps.inflight.keys[k]--; ps.inflight.keys[k] <= 0 {
			delete(ps.inflight.keys, k)
		}
	}
}

// heldKeys returns the keys in flight.
func (ps *partitionState) heldKeys() []string {
	ps.inflight.Lock()
	defer ps.inflight.Unlock()
	keys := make([]string, 0, len(ps.inflight.keys))
	for k := range ps.inflight.keys {
		keys = append(keys, k)
	}
	return keys
}

// newer reports whether a is a later manifest version than b.
func newer(a, b *format.Root) bool {
	if a.LeaderEpoch != b.LeaderEpoch {
		return a.LeaderEpoch > b.LeaderEpoch
	}
	return a.Seq > b.Seq
}

// advance makes m the current manifest unless a later one is already
// there, and returns the current one.
func (ps *partitionState) advance(m *format.Root) *format.Root {
	for {
		cur := ps.cur.Load()
		if cur != nil && !newer(m, cur) {
			return cur
		}
		if ps.cur.CompareAndSwap(cur, m) {
			return m
		}
	}
}

// Open starts a Tier over cfg.Store.
func Open(cfg Config) (*Tier, error) {
	cfg = cfg.withDefaults()
	if cfg.Store == nil {
		return nil, errors.New("tier: no object store")
	}
	if err := cfg.Paging.Validate(); err != nil {
		return nil, fmt.Errorf("tier: %w", err)
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
	// Requests made under a context marked by counted are counted for
	// compaction's bill; the chunk cache's own GETs never are.
	fence := &deletionFence{Store: countingStore{cfg.Store}}
	store := objstore.Store(fence)
	cache, err := newChunkCache(cfg.Store, cfg.CacheDir, cfg.ChunkBytes, cfg.CacheBytes, cfg.MemoryBytes, cfg.ReadAhead, cfg.ReadWorkers)
	if err != nil {
		return nil, err
	}
	return &Tier{
		cfg:        cfg,
		store:      store,
		fence:      fence,
		log:        cfg.Logger,
		cache:      cache,
		index:      newIndexCache(indexCacheBytes),
		pages:      newPageCache(store, cfg.ManifestCacheBytes),
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

// Manifest returns the root of the partition's current manifest, reading
// it from the bucket the first time. A partition with nothing in the
// bucket has an empty root (no segments, sequence 0). It never waits for a
// writer: only the first load does I/O, bounded by ctx. Lookups in the
// root take Pages() as their page source.
func (t *Tier) Manifest(ctx context.Context, tp format.TopicPartition) (*format.Root, error) {
	ps := t.state(tp)
	if m := ps.cur.Load(); m != nil {
		return m, nil
	}
	m, err := t.loadManifest(ctx, tp)
	if err != nil {
		return nil, err
	}
	return ps.advance(m), nil
}

// Refresh reads tp's manifest from the store again and returns the newest
// of it and the one cached. A follower calls it to learn what its leader
// has uploaded, and a new leader before its first upload, since the
// previous leader published manifests this Tier never saw.
func (t *Tier) Refresh(ctx context.Context, tp format.TopicPartition) (*format.Root, error) {
	m, err := t.loadManifest(ctx, tp)
	if err != nil {
		return nil, err
	}
	return t.state(tp).advance(m), nil
}

// RefreshSource is Refresh for a reader of a bucket another cluster
// writes (a read replica's source), which also says whether the bucket
// holds a manifest of tp at all. When it holds none, the tier forgets
// the manifest it had read, if any, and returns an empty root: a
// partition's last manifest goes only when its topic is deleted (the
// collector always keeps the newest version), and every read through the
// forgotten one would meet deleted objects. Refresh keeps what it had,
// since a writer never sees its own manifests vanish.
func (t *Tier) RefreshSource(ctx context.Context, tp format.TopicPartition) (m *format.Root, found bool, err error) {
	m, found, err = ReadManifest(ctx, t.store, tp)
	if err != nil {
		return nil, false, err
	}
	ps := t.state(tp)
	if !found {
		m = &format.Root{TopicPartition: tp}
		ps.cur.Store(m)
		return m, false, nil
	}
	return ps.advance(m), true, nil
}

// cachedManifest returns tp's current manifest if it is loaded, without
// any I/O.
func (t *Tier) cachedManifest(tp format.TopicPartition) *format.Root {
	return t.state(tp).cur.Load()
}

// Pages returns the source of manifest pages for lookups in the roots
// Manifest returns: the tier's page cache, shared by all partitions.
func (t *Tier) Pages() format.PageSource { return t.pages }

// Segments lists every segment of m, fetching every page: for tools and
// tests, not for serving.
func (t *Tier) Segments(ctx context.Context, m *format.Root) ([]format.RemoteSegment, error) {
	return AllSegments(ctx, t.pages, m)
}

// AllSegments lists every segment of m, fetching its pages from src.
func AllSegments(ctx context.Context, src format.PageSource, m *format.Root) ([]format.RemoteSegment, error) {
	var segs []format.RemoteSegment
	err := m.Walk(ctx, src, func(_ *format.PageRef, s *format.RemoteSegment) error {
		if s != nil {
			segs = append(segs, *s)
		}
		return nil
	})
	return segs, err
}

// loadManifest reads the newest manifest of tp from the bucket, or an
// empty one when there is none.
func (t *Tier) loadManifest(ctx context.Context, tp format.TopicPartition) (*format.Root, error) {
	m, ok, err := ReadManifest(ctx, t.store, tp)
	if err != nil {
		return nil, err
	}
	if !ok {
		return &format.Root{TopicPartition: tp}, nil
	}
	return m, nil
}

// Upload copies one closed segment to the bucket as a single object, then
// publishes a new manifest that lists it, and returns that manifest. The
// order is what keeps the bucket consistent: a crash after the object and
// before the manifest leaves an orphan (collected later), never a hole. A
// segment that ends at or below what the manifest already covers is not
// uploaded again.
//
// leaderEpoch is the uploader's epoch: the new manifest is stored under
// it, and a manifest of a higher epoch in the bucket fences the upload
// (ErrFenced).
func (t *Tier) Upload(ctx context.Context, tp format.TopicPartition, seg segment.SegmentInfo, leaderEpoch int32) (*format.Root, error) {
	ps := t.state(tp)
	ps.mu.Lock()
	defer ps.mu.Unlock()
	m, err := t.writableLocked(ctx, tp, ps, leaderEpoch)
	if err != nil {
		return nil, err
	}
	if !m.Empty() && seg.EndOffset <= m.EndOffset() {
		return m, nil // already there
	}
	var rs format.RemoteSegment
	if from := m.EndOffset(); !m.Empty() && seg.BaseOffset < from {
		// This replica rolls its segments at other offsets than the one
		// that uploaded before it (it was rebuilt, or restarted at its
		// leader's local start): only the part above the bucket's end goes
		// up, so the bucket stays without gap or overlap.
		part, release, err := t.uploadPart(ctx, tp, seg, from, leaderEpoch)
		if err != nil {
			return nil, err
		}
		defer release()
		rs = part
	} else {
		obj, whole, err := t.buildObject(tp, seg, leaderEpoch)
		if err != nil {
			return nil, err
		}
		defer obj.close()
		rs = whole
		// Held until the manifest that lists it is current (or the upload
		// failed, leaving an ordinary orphan).
		defer ps.hold(rs.Key)()
		if err := t.store.Put(ctx, rs.Key, obj.r, obj.r.Size()); err != nil {
			return nil, fmt.Errorf("upload segment %d of %s-%d: %w", seg.BaseOffset, tp.Topic, tp.Partition, err)
		}
	}
	next, err := t.updateLocked(ctx, tp, ps, leaderEpoch, func(m *format.Root) (*format.Change, error) {
		if !m.Empty() && seg.EndOffset <= m.EndOffset() {
			return nil, nil // another writer of this epoch put it there meanwhile
		}
		if !m.Empty() && rs.BaseOffset != m.EndOffset() {
			return nil, fmt.Errorf("segment %d of %s-%d: the bucket's end moved to %d meanwhile", rs.BaseOffset, tp.Topic, tp.Partition, m.EndOffset())
		}
		next, err := m.Append(rs, leaderEpoch, t.cfg.Paging)
		if err != nil {
			return nil, fmt.Errorf("add segment %d to the manifest of %s-%d: %w", seg.BaseOffset, tp.Topic, tp.Partition, err)
		}
		return next, nil
	})
	if err != nil {
		return nil, err
	}
	t.log.Debug("segment uploaded", "topic", tp.Topic, "partition", tp.Partition, "base", seg.BaseOffset, "end", seg.EndOffset, "bytes", rs.Size, "key", rs.Key)
	return next, nil
}

// writableLocked returns the manifest a writer of epoch builds on, after
// resolving a publication of unknown outcome; ErrFenced if a later epoch
// owns the manifest.
//
// A writer whose epoch is above the manifest's claims it first (claimLocked),
// so that whatever it publishes afterwards is fenced against the leader it
// replaced.
func (t *Tier) writableLocked(ctx context.Context, tp format.TopicPartition, ps *partitionState, epoch int32) (*format.Root, error) {
	if err := t.resolvePendingLocked(ctx, tp, ps); err != nil {
		return nil, err
	}
	m, err := t.Manifest(ctx, tp)
	if err != nil {
		return nil, err
	}
	switch {
	case m.LeaderEpoch > epoch:
		return nil, t.fenced(m, epoch)
	case m.LeaderEpoch < epoch, ps.claim.epoch == epoch && !ps.claim.checked:
		return t.claimLocked(ctx, tp, ps, epoch)
	}
	return m, nil
}

// claimLocked publishes, at the writer's epoch, the bucket's newest
// manifest unchanged, and returns it. Until a new leader has published
// at its epoch, a deposed one (paused past its session, or cut off from
// the controller but not from the bucket) can publish versions of its own
// epoch that readers take as current; once the claim is listed, the
// deposed writer's check after publishing (confirmLocked) finds it and it
// deletes nothing on the strength of its version.
//
// A deposed writer may still publish between this writer's read of the
// bucket and its claim becoming visible: then a version of a lower epoch
// sorts below the claim but is newer than what the claim was made from,
// and what that writer uploaded, and possibly deleted locally, would be
// hidden. So the claim is checked by listing, and made again over such a
// version, which keeps the deposed writer's objects referenced rather than
// hidden, as KIP-405 keeps a zombie's copy.
//
// The check is part of the claim: until it has found nothing (its LIST
// failed, the claim's publication had an unknown outcome, or lower-epoch
// versions kept appearing), every write of this epoch makes it again
// first, from the version the claim was made from (ps.claim).
func (t *Tier) claimLocked(ctx context.Context, tp format.TopicPartition, ps *partitionState, epoch int32) (*format.Root, error) {
	cur, err := t.loadManifest(ctx, tp)
	if err != nil {
		return nil, err
	}
	cur = ps.advance(cur)
	switch {
	case cur.LeaderEpoch > epoch:
		return nil, t.fenced(cur, epoch)
	case cur.LeaderEpoch < epoch:
		ps.claim = claimState{epoch: epoch, from: keyOf(cur)}
	case ps.claim.epoch != epoch || ps.claim.checked:
		// Claimed, and checked, by this tier; or by a writer of this
		// epoch this tier does not know of, which checked its own.
		return cur, nil
	}
	minSeq := int64(0)
	for attempt := 0; ; attempt++ {
		if cur.LeaderEpoch < epoch {
			ch, err := cur.Claim(epoch, minSeq, t.cfg.Paging)
			if err != nil {
				return nil, fmt.Errorf("claim the manifest of %s-%d at epoch %d: %w", tp.Topic, tp.Partition, epoch, err)
			}
			err = t.publishLocked(ctx, ps, ch)
			switch {
			case errors.Is(err, errConflict) && attempt < maxConflicts:
				if err := t.reloadLocked(ctx, tp, ps, ch.Root.Key()); err != nil {
					return nil, err
				}
				if cur = ps.cur.Load(); cur.LeaderEpoch > epoch {
					return nil, t.fenced(cur, epoch)
				}
				continue
			case err != nil:
				return nil, err
			}
			if cur = ps.advance(ch.Root); cur.LeaderEpoch > epoch {
				return nil, t.fenced(cur, epoch)
			}
		}
		from := ps.claim.from
		newest, below, err := listNewest(ctx, t.store, tp, from.String(), epoch)
		if err != nil {
			return nil, fmt.Errorf("check the claim of %s-%d at epoch %d: %w", tp.Topic, tp.Partition, epoch, err)
		}
		if newest.LeaderEpoch > epoch {
			return nil, t.fencedBy(ctx, ps, newest, epoch)
		}
		if below == (format.ManifestKey{}) {
			ps.claim.checked = true
			// Routine at every leadership change: one line per partition
			// moved would bury a failover's own lines.
			t.log.Debug("manifest claimed by a new leader", "topic", tp.Topic, "partition", tp.Partition, "epoch", epoch, "from", from.String())
			return cur, nil
		}
		if attempt == maxConflicts {
			return nil, fmt.Errorf("claim the manifest of %s-%d at epoch %d: versions of lower epochs keep appearing (last %s)", tp.Topic, tp.Partition, epoch, below)
		}
		// A deposed writer published after the claim's version was read:
		// claim again, over its version.
		base, err := GetManifest(ctx, t.store, below.String())
		if err != nil {
			return nil, err
		}
		t.log.Warn("a deposed leader published after this leader read the bucket; claiming over its version", "topic", tp.Topic, "partition", tp.Partition, "epoch", epoch, "version", below.String())
		minSeq = cur.Seq + 1
		ps.claim.from = below
		cur = base
	}
}

// claimState is where a writer's claim of its epoch stands (claimLocked).
type claimState struct {
	epoch int32
	// from is the version the claim was last made over; checked is set
	// once a listing found no version of a lower epoch after it.
	from    format.ManifestKey
	checked bool
}

// keyOf returns the key of m's version.
func keyOf(m *format.Root) format.ManifestKey {
	return format.ManifestKey{TopicPartition: m.TopicPartition, LeaderEpoch: m.LeaderEpoch, Seq: m.Seq}
}

// Claim makes a writer of epoch claim tp's manifest (claimLocked) if it
// has not yet: a leader calls it when it takes office and before a
// compaction pass or a collection writes or deletes anything, so that a
// deposed leader's collector or compactor is fenced from then on, not only
// from the new leader's first change of the manifest.
//
// Once the manifest is at epoch it returns at once, without waiting for
// a writer of the partition: the claim is in the bucket, which is what
// fences, and a check of it that failed is made again by the next write.
func (t *Tier) Claim(ctx context.Context, tp format.TopicPartition, epoch int32) error {
	ps := t.state(tp)
	if cur := ps.cur.Load(); cur != nil && cur.LeaderEpoch >= epoch {
		if cur.LeaderEpoch > epoch {
			return t.fenced(cur, epoch)
		}
		return nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	_, err := t.writableLocked(ctx, tp, ps, epoch)
	return err
}

// listNewest lists tp's manifest keys above after (a version's key; keys
// sort as versions do, so the listing costs what is newer, not the whole
// history the orphan grace keeps, and the last key listed is the newest)
// and returns the newest, and the newest of an epoch below epoch (zero
// keys when there is none).
func listNewest(ctx context.Context, store objstore.Store, tp format.TopicPartition, after string, epoch int32) (newest, below format.ManifestKey, err error) {
	err = objstore.ListAfter(ctx, store, tp.ManifestsPrefix(), after, func(a objstore.Attrs) error {
		k, err := format.ParseManifestKey(a.Key)
		if err != nil {
			return nil // not a manifest: the collector's business
		}
		newest = k
		if k.LeaderEpoch < epoch {
			below = k
		}
		return nil
	})
	if err != nil {
		return newest, below, fmt.Errorf("list manifests of %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	return newest, below, nil
}

// confirmLocked checks, after publishing m, that no manifest of a higher
// epoch is in the bucket. A deposed writer's publish succeeds under its
// own key, but a newer leader's version hides it: nothing may then be
// deleted on the strength of m, locally or on followers, so the writer
// gets ErrFenced and its cache moves to the newer version. It needs a
// store whose LIST shows every completed PUT (S3 has been strongly
// consistent since 2020; docs/bucket-format.md §3).
func (t *Tier) confirmLocked(ctx context.Context, tp format.TopicPartition, ps *partitionState, m *format.Root) error {
	newest, _, err := listNewest(ctx, t.store, tp, m.Key(), m.LeaderEpoch)
	if err != nil {
		return fmt.Errorf("confirm manifest %s: %w", m.Key(), err)
	}
	if newest.LeaderEpoch > m.LeaderEpoch {
		return t.fencedBy(ctx, ps, newest, m.LeaderEpoch)
	}
	return nil
}

// fencedBy moves the cache to the newer leader's version k and returns
// ErrFenced for a writer of epoch.
func (t *Tier) fencedBy(ctx context.Context, ps *partitionState, k format.ManifestKey, epoch int32) error {
	if m, err := GetManifest(ctx, t.store, k.String()); err == nil {
		ps.advance(m)
	}
	return fmt.Errorf("%w: %s-%d has a manifest of epoch %d, this writer's epoch is %d", ErrFenced, k.Topic, k.Partition, k.LeaderEpoch, epoch)
}

func (t *Tier) fenced(m *format.Root, epoch int32) error {
	return fmt.Errorf("%w: %s-%d has a manifest of epoch %d, this writer's epoch is %d", ErrFenced, m.Topic, m.Partition, m.LeaderEpoch, epoch)
}

// updateLocked publishes the manifest that change derives from the current
// one (its new pages, then its root, keyed by the writer's epoch, which
// change gives the transition) and makes it current. change returns nil
// when there is nothing to write; updateLocked then returns the current
// manifest. A publication that finds its key taken reloads the bucket and
// applies change again to what it finds.
func (t *Tier) updateLocked(ctx context.Context, tp format.TopicPartition, ps *partitionState, epoch int32, change func(*format.Root) (*format.Change, error)) (*format.Root, error) {
	for attempt := 0; ; attempt++ {
		m, err := t.writableLocked(ctx, tp, ps, epoch)
		if err != nil {
			return nil, err
		}
		ch, err := change(m)
		if err != nil || ch == nil {
			return m, err
		}
		next := ch.Root
		// Keyed by the writer's own epoch, never by a higher one it has
		// read: a deposed writer's versions sort below the new leader's.
		if next.LeaderEpoch != epoch {
			return nil, fmt.Errorf("tier: manifest change of %s-%d at epoch %d, writer's is %d", tp.Topic, tp.Partition, next.LeaderEpoch, epoch)
		}
		// The new pages are in flight until the root naming them is
		// current (or pending, whose pages the collector walks).
		keys := make([]string, len(ch.Pages))
		for i, p := range ch.Pages {
			keys[i] = p.Ref.Key
		}
		release := ps.hold(keys...)
		err = t.publishLocked(ctx, ps, ch)
		if err == nil {
			cur := ps.advance(next)
			release()
			if cur != next && cur.LeaderEpoch > epoch {
				// A newer leader's manifest arrived meanwhile: what this
				// writer published is not the partition's state.
				return nil, t.fenced(cur, epoch)
			}
			if err := t.confirmLocked(ctx, tp, ps, next); err != nil {
				return nil, err
			}
			return next, nil
		}
		release() // orphans now, unless pending (the collector walks that)
		if !errors.Is(err, errConflict) || attempt == maxConflicts {
			return nil, err
		}
		if err := t.reloadLocked(ctx, tp, ps, next.Key()); err != nil {
			return nil, err
		}
	}
}

// reloadLocked brings the cache up to the bucket after a publication found
// taken: it reads the manifest under the taken key (which a lagging LIST
// might not show yet) and the newest one listed.
func (t *Tier) reloadLocked(ctx context.Context, tp format.TopicPartition, ps *partitionState, taken string) error {
	if m, err := GetManifest(ctx, t.store, taken); err == nil {
		ps.advance(m)
	} else if !errors.Is(err, objstore.ErrNotFound) {
		return err
	}
	m, err := t.loadManifest(ctx, tp)
	if err != nil {
		return err
	}
	ps.advance(m)
	return nil
}

// publishLocked stores ch's new pages, then writes its root under its key
// with a conditional create, so that it never replaces a published
// version. Pages go first: a crash in between leaves pages no root names
// (orphans the collector removes), never a root naming a missing page.
// Pages have fresh random keys, so a page create refused because the key
// exists is this call's own retried write.
//
// A root create refused because the key exists is this call's own retried
// write or someone else's: reading it back tells which (errConflict for
// the second). A failure that may have been applied is resolved the same
// way; if even the read-back fails, the root is kept pending and the next
// write resolves it before anything else.
func (t *Tier) publishLocked(ctx context.Context, ps *partitionState, ch *format.Change) error {
	for _, p := range ch.Pages {
		err := t.store.Create(ctx, p.Ref.Key, bytes.NewReader(p.Data), int64(len(p.Data)))
		if err == nil {
			continue
		}
		if same, rerr := t.readBack(ctx, p.Ref.Key, p.Data); rerr != nil || !same {
			return fmt.Errorf("store manifest page %s: %w", p.Ref.Key, err)
		}
	}
	m := ch.Root
	raw, err := format.EncodeRoot(m)
	if err != nil {
		return fmt.Errorf("encode manifest of %s-%d: %w", m.Topic, m.Partition, err)
	}
	key := m.Key()
	err = t.store.Create(ctx, key, bytes.NewReader(raw), int64(len(raw)))
	if err == nil {
		return nil
	}
	perr := fmt.Errorf("publish manifest %s: %w", key, err)
	same, rerr := t.readBack(ctx, key, raw)
	switch {
	case rerr == nil && same:
		return nil
	case rerr == nil:
		return fmt.Errorf("%w: %s", errConflict, key)
	case errors.Is(rerr, objstore.ErrNotFound) && !errors.Is(err, objstore.ErrExists):
		return perr // not applied
	}
	ps.pending.Store(&pendingPublish{m, raw})
	return fmt.Errorf("%w (outcome unknown until read back: %v)", perr, rerr)
}

// resolvePendingLocked settles a publication of unknown outcome: if the
// manifest is in the bucket it becomes current, as a successful publish
// would have made it.
//
// A version found published is confirmed as a fresh publish is: a writer
// deposed meanwhile gets ErrFenced.
func (t *Tier) resolvePendingLocked(ctx context.Context, tp format.TopicPartition, ps *partitionState) error {
	p := ps.pending.Load()
	if p == nil {
		return nil
	}
	m, raw := p.m, p.raw
	same, err := t.readBack(ctx, m.Key(), raw)
	switch {
	case err == nil && same:
		ps.pending.Store(nil)
		ps.advance(m)
		return t.confirmLocked(ctx, tp, ps, m)
	case err != nil && !errors.Is(err, objstore.ErrNotFound):
		return fmt.Errorf("resolve the publication of manifest %s: %w", m.Key(), err)
	}
	ps.pending.Store(nil)
	return nil
}

// readBack reports whether key holds exactly raw.
func (t *Tier) readBack(ctx context.Context, key string, raw []byte) (bool, error) {
	rc, err := t.store.GetRange(ctx, key, 0, -1)
	if err != nil {
		return false, err
	}
	defer rc.Close()
	got, err := io.ReadAll(io.LimitReader(rc, int64(len(raw))+1))
	if err != nil {
		return false, err
	}
	return bytes.Equal(got, raw), nil
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
	var snapshot, txnIndex []byte
	if seg.SnapshotPath != "" {
		if snapshot, err = os.ReadFile(seg.SnapshotPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail(err)
		}
	}
	// A segment no transaction aborted in has no file: an empty part.
	if seg.TxnIndexPath != "" {
		if txnIndex, err = os.ReadFile(seg.TxnIndexPath); err != nil && !errors.Is(err, os.ErrNotExist) {
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
	records, epochs := scanHeaders(f, seg.Size, seg.BaseOffset)
	parts := format.SegmentParts{
		Log:              io.NewSectionReader(f, 0, seg.Size),
		LogSize:          seg.Size,
		Index:            index,
		TimeIndex:        timeIndex,
		ProducerSnapshot: snapshot,
		TxnIndex:         txnIndex,
		BaseOffset:       seg.BaseOffset,
		LastOffset:       seg.EndOffset - 1,
		FirstTimestamp:   firstTs,
		MaxTimestamp:     seg.MaxTimestamp,
		RecordCount:      records,
		LeaderEpoch:      leaderEpoch,
	}
	// The footer needs the log's checksum; keep everything after the log
	// bytes (indexes, snapshot, txn index, footer) and discard the log
	// itself.
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
	rs := footer.Segment(key, objectCRC)
	rs.LeaderEpochs = epochs
	return &segmentObject{f: f, r: r}, rs, nil
}

// uploadPart uploads the batches of seg from offset from on as one object
// of its own (its indexes, record count and leader epochs rebuilt for the
// part, its producer snapshot the segment's, which is the state after
// the segment's last batch either way, and the segment's aborted
// transactions whose markers are in the part) and returns its manifest
// entry and the release of its hold from the collector. from must be a
// batch boundary: replicas copy batches whole, so the bucket's end, which
// another replica's segment boundary made, is one in every replica's log.
// Rare enough (after a failover to a rebuilt replica) that copying the
// part to a temporary file first costs nothing that matters.
func (t *Tier) uploadPart(ctx context.Context, tp format.TopicPartition, seg segment.SegmentInfo, from int64, epoch int32) (format.RemoteSegment, func(), error) {
	fail := func(err error) (format.RemoteSegment, func(), error) {
		return format.RemoteSegment{}, func() {}, fmt.Errorf("upload segment %d of %s-%d from %d: %w", seg.BaseOffset, tp.Topic, tp.Partition, from, err)
	}
	f, err := os.Open(seg.LogPath)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	w := t.NewSegmentWriter(tp, from, epoch)
	defer w.Discard()
	var hdr [61]byte
	for pos := int64(0); pos < seg.Size; {
		if _, err := f.ReadAt(hdr[:], pos); err != nil {
			return fail(fmt.Errorf("batch header at %d: %w", pos, err))
		}
		h, err := segment.ParseBatchHeader(hdr[:])
		if err != nil {
			return fail(fmt.Errorf("batch header at %d: %w", pos, err))
		}
		size := int64(h.Size())
		switch {
		case pos+size > seg.Size:
			return fail(fmt.Errorf("batch at %d of %d bytes past the segment's %d", pos, size, seg.Size))
		case h.LastOffset() < from:
		case h.BaseOffset < from:
			return fail(fmt.Errorf("batch [%d, %d] straddles the bucket's end", h.BaseOffset, h.LastOffset()))
		default:
			batch := make([]byte, size)
			if _, err := f.ReadAt(batch, pos); err != nil {
				return fail(err)
			}
			if err := w.Append(batch); err != nil {
				return fail(err)
			}
		}
		pos += size
	}
	if seg.TxnIndexPath != "" {
		b, err := os.ReadFile(seg.TxnIndexPath)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail(err)
		}
		txns, err := segment.DecodeTxnIndex(b)
		if err != nil {
			return fail(fmt.Errorf("txn index: %w", err))
		}
		var kept []segment.AbortedTxn
		for _, tx := range txns {
			if tx.LastOffset >= from {
				kept = append(kept, tx)
			}
		}
		w.SetAborted(kept)
	}
	var snapshot []byte
	if seg.SnapshotPath != "" {
		if snapshot, err = os.ReadFile(seg.SnapshotPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail(err)
		}
	}
	return w.Finish(ctx, seg.EndOffset-1, snapshot)
}

// scanHeaders reads the batch headers in the log file's first size bytes
// (a header per batch, not the records) and returns their record count
// and leader-epoch history from base. A header it cannot read makes both
// unknown (-1 and nil), never wrong; so does an epoch history the format
// cannot hold (a negative or decreasing epoch) for the history alone.
func scanHeaders(f *os.File, size, base int64) (records int64, epochs []format.EpochStart) {
	var hdr [61]byte
	epochsOK := true
	for pos := int64(0); pos < size; {
		if _, err := f.ReadAt(hdr[:], pos); err != nil {
			return -1, nil
		}
		h, err := segment.ParseBatchHeader(hdr[:])
		if err != nil || h.NumRecords < 0 || pos+int64(h.Size()) > size {
			return -1, nil
		}
		switch n := len(epochs); {
		case h.LeaderEpoch < 0:
			epochsOK = false
		case n == 0:
			epochs = append(epochs, format.EpochStart{Epoch: h.LeaderEpoch, StartOffset: base})
		case h.LeaderEpoch > epochs[n-1].Epoch:
			epochs = append(epochs, format.EpochStart{Epoch: h.LeaderEpoch, StartOffset: h.BaseOffset})
		case h.LeaderEpoch < epochs[n-1].Epoch:
			epochsOK = false
		}
		records += int64(h.NumRecords)
		pos += int64(h.Size())
	}
	if !epochsOK {
		epochs = nil
	}
	return records, epochs
}

// ListAfter passes the tier's listings from a key on to the store's own
// (objstore.ListAfter), uncounted like every listing.
func (s countingStore) ListAfter(ctx context.Context, prefix, startAfter string, fn func(objstore.Attrs) error) error {
	return objstore.ListAfter(ctx, s.Store, prefix, startAfter, fn)
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
