package tier

import (
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"strata/segment"
	"strata/tier/format"
)

// windowBufs hold the bucket bytes a read parses before copying whole
// batches out, so replaying history does not allocate (and zero) a fresh
// window per fetch.
var windowBufs = sync.Pool{New: func() any { b := make([]byte, 0, minReadWindow); return &b }}

// minReadWindow is the least the reader asks the cache for at once, so
// that small fetches of small batches do not cost a cache round trip per
// batch.
const minReadWindow = 64 << 10

// ReadBelow appends to dst whole batches from the bucket, starting with
// the batch that contains offset, and stops before exceeding maxBytes
// except that the first batch is returned whole (KIP-74). It returns only
// batches whose base offset is below maxOffset (the fetch's high
// watermark, or its last stable offset for read_committed), as a local
// read does: the bucket may hold a transaction still open there, uploaded
// by a version that bounded uploads by the high watermark alone. Like a
// local read it stays within one segment, the first holding a batch at or
// after offset: compaction may leave a segment with none (a gap at its
// end, or no batch at all), and the read then goes on in the next. Every
// batch's CRC-32C is checked; a batch that fails it ends the read (the
// batches before it are returned, or segment.ErrCorruptSegment when there
// are none). An offset the bucket does not hold is
// segment.ErrOffsetOutOfRange. ReadBelow is for a consumer's fetch: it
// reads ahead of what it returns.
func (t *Tier) ReadBelow(ctx context.Context, tp format.TopicPartition, dst []byte, offset, maxOffset int64, maxBytes int) ([]byte, error) {
	return t.read(ctx, tp, dst, offset, maxOffset, maxBytes, true)
}

// Read is ReadBelow with no upper bound: everything the bucket holds, for
// tools and tests. A consumer's fetch has a bound and uses ReadBelow.
func (t *Tier) Read(ctx context.Context, tp format.TopicPartition, dst []byte, offset int64, maxBytes int) ([]byte, error) {
	return t.read(ctx, tp, dst, offset, math.MaxInt64, maxBytes, true)
}

// read is ReadBelow; sequential says the caller goes on reading where it
// stops, so the chunks and the segment it needs next are worth fetching
// now. A lookup (ListOffsets) is not sequential: read-ahead for it would
// fetch tens of MiB nobody asked for.
func (t *Tier) read(ctx context.Context, tp format.TopicPartition, dst []byte, offset, maxOffset int64, maxBytes int, sequential bool) ([]byte, error) {
	m, err := t.Manifest(ctx, tp)
	if err != nil {
		return dst, err
	}
	if offset < m.LogStartOffset || offset >= m.EndOffset() {
		return dst, fmt.Errorf("%w: offset %d, bucket holds [%d, %d)", segment.ErrOffsetOutOfRange, offset, m.LogStartOffset, m.EndOffset())
	}
	for offset < maxOffset {
		rs, ok, err := m.Find(ctx, t.pages, offset)
		if err != nil {
			return dst, fmt.Errorf("read %s-%d at %d: %w", tp.Topic, tp.Partition, offset, err)
		}
		if !ok {
			return dst, fmt.Errorf("%w: offset %d not in the manifest", segment.ErrOffsetOutOfRange, offset)
		}
		n := len(dst)
		dst, err = t.readSegment(ctx, tp, m, rs, dst, offset, maxOffset, maxBytes, sequential)
		if err != nil || len(dst) > n || rs.LastOffset+1 >= m.EndOffset() {
			return dst, err
		}
		// Compaction left no batch at or after offset in rs (a gap at its
		// end, or an object with no batch at all): the next record kept is
		// in a later object.
		offset = rs.LastOffset + 1
	}
	return dst, nil
}

// readSegment is read within rs, the segment of m holding offset.
func (t *Tier) readSegment(ctx context.Context, tp format.TopicPartition, m *format.Root, rs format.RemoteSegment, dst []byte, offset, maxOffset int64, maxBytes int, sequential bool) ([]byte, error) {
	index, err := t.index.get(ctx, t, rs.Key, rs.Size, rs.Index, t.partsWith(rs, rs.Index))
	if err != nil {
		if errors.Is(err, segment.ErrCorruptSegment) {
			t.reportCorrupt(tp, rs.Key, err, false)
		}
		return dst, err
	}
	pos, indexed, err := format.LookupOffsetEntry(index, rs.BaseOffset, offset)
	if err != nil {
		err = fmt.Errorf("%w: offset index of %s: %v", segment.ErrCorruptSegment, rs.Key, err)
		t.reportCorrupt(tp, rs.Key, err, false)
		return dst, err
	}
	order := batchOrder{prevLast: rs.BaseOffset - 1, end: rs.LastOffset + 1, indexed: indexed, limit: maxOffset}
	logEnd := rs.Log.End()
	start := len(dst)
	wb := windowBufs.Get().(*[]byte)
	defer windowBufs.Put(wb)
	// A sequential reader crosses into the next segment soon: warm its
	// index and first chunks now, so the crossing costs no waiting.
	ahead := int64(t.cfg.ReadAhead) * t.cfg.ChunkBytes
	aheadEnd := logEnd // read-ahead stops there
	if !sequential {
		aheadEnd = 0
	}
	if sequential && pos+int64(maxBytes)+ahead >= logEnd {
		if next, ok, _ := m.Find(ctx, t.pages, rs.LastOffset+1); ok {
			t.prefetchSegment(next, 0)
		}
	}
	var need int64 // the size of a batch that did not fit the last window
	// damage is the first check that failed, nil while none has: a failure
	// is retried once, from a fresh download.
	var damage error
	for pos < logEnd {
		want := min(max(int64(maxBytes-(len(dst)-start)), minReadWindow), logEnd-pos)
		// Within one chunk the window is the cached chunk itself, not a
		// copy of it.
		if rest := t.cfg.ChunkBytes - pos%t.cfg.ChunkBytes; rest >= minReadWindow {
			want = min(want, rest)
		}
		window, release, err := t.cache.view(ctx, wb, rs.Key, rs.Size, pos, max(want, need), aheadEnd)
		if err != nil {
			return dst, err
		}
		winLen := int64(len(window))
		used, done, err := appendBatches(&dst, start, window, offset, maxBytes, &order)
		if err == nil && used == 0 && !done {
			// The next batch is larger than the window: the next window
			// is its size, and must then hold it.
			var h segment.BatchHeader
			if h, err = segment.ParseBatchHeader(window); err == nil && need > 0 {
				err = fmt.Errorf("batch of %d bytes not read whole", need)
			}
			need = int64(h.Size())
			if fits := len(dst) == start || len(dst)-start+int(need) <= maxBytes; err == nil && fits && pos+need > logEnd {
				err = fmt.Errorf("batch of %d bytes runs past the log", need)
			}
		}
		release()
		if err != nil {
			// The batches before the damage passed every check: they stay.
			from := pos
			pos += used
			err = fmt.Errorf("%w: %s at position %d: %v", segment.ErrCorruptSegment, rs.Key, pos, err)
			if damage == nil && !t.corrupt.confirmedSince(rs.Key, t.cfg.Now().Add(-corruptRetryInterval)) {
				// What is damaged may be our copy: a chunk cached before
				// the object was repaired, a download or a chunk file
				// damaged on the way. Forget it and look again.
				damage = err
				t.cache.invalidate(rs.Key, from, winLen)
				need = 0
				continue
			}
			if damage != nil {
				t.corrupt.confirm(rs.Key, t.cfg.Now())
			}
			t.reportCorrupt(tp, rs.Key, err, false)
			if len(dst) > start {
				return dst, nil
			}
			return dst, err
		}
		if used == 0 && !done {
			if len(dst) > start && len(dst)-start+int(need) > maxBytes {
				break
			}
			continue
		}
		need = 0
		pos += used
		if done {
			break
		}
	}
	if damage != nil {
		t.reportCorrupt(tp, rs.Key, damage, true)
	}
	return dst, nil
}

// batchOrder checks the offsets of a segment's batches as a read walks
// them. A batch's CRC starts after its base offset and length, so without
// this a flipped bit there serves offsets the segment does not hold, or
// skips the records a consumer asked for.
type batchOrder struct {
	prevLast int64 // last offset of the batch before; every batch is above it
	end      int64 // the segment's offsets are below it
	// indexed is the last offset of the first batch, as the index entry
	// the read starts from records it; -1 with no entry.
	indexed int64
	// limit ends the read: no batch based at or above it is returned.
	limit int64
}

// check reports whether h can be the next batch.
func (o *batchOrder) check(h segment.BatchHeader) error {
	if h.BaseOffset <= o.prevLast || h.LastOffsetDelta < 0 || h.BaseOffset >= o.end || h.LastOffset() >= o.end ||
		(o.indexed >= 0 && h.LastOffset() != o.indexed) {
		return fmt.Errorf("batch offsets [%d, %d] after offset %d in a segment ending before %d", h.BaseOffset, h.LastOffset(), o.prevLast, o.end)
	}
	return nil
}

// next records that h, which passed check, was read.
func (o *batchOrder) next(h segment.BatchHeader) {
	o.prevLast, o.indexed = h.LastOffset(), -1
}

// appendBatches appends the whole batches of window that end at or after
// offset, until maxBytes (the first batch always goes in whole), checking
// the offsets of every batch it passes with order, and stopping at the
// first batch based at or above order.limit. It returns how many bytes of
// window it consumed and whether either limit stopped it.
func appendBatches(dst *[]byte, start int, window []byte, offset int64, maxBytes int, order *batchOrder) (used int64, done bool, err error) {
	for len(window)-int(used) >= 61 {
		b := window[used:]
		h, err := segment.ParseBatchHeader(b)
		if err != nil {
			return used, false, err
		}
		if err := order.check(h); err != nil {
			return used, false, err
		}
		if h.BaseOffset >= order.limit {
			return used, true, nil
		}
		size := h.Size()
		if size > len(b) {
			return used, false, nil // continues past the window
		}
		if h.LastOffset() >= offset {
			if len(*dst) > start && len(*dst)-start+size > maxBytes {
				return used, true, nil
			}
			if !h.CRCMatches(b[:size]) {
				return used, false, fmt.Errorf("batch at offset %d fails its CRC", h.BaseOffset)
			}
			*dst = append(*dst, b[:size]...)
		}
		order.next(h)
		used += int64(size)
		if len(*dst)-start >= maxBytes {
			return used, true, nil
		}
	}
	return used, false, nil
}

// OffsetForTimestamp returns the first record in the bucket whose
// timestamp is at least ts (ListOffsets by time), looking inside batches.
func (t *Tier) OffsetForTimestamp(ctx context.Context, tp format.TopicPartition, ts int64) (offset, timestamp int64, ok bool, err error) {
	m, err := t.Manifest(ctx, tp)
	if err != nil {
		return 0, 0, false, err
	}
	return t.offsetForTimestamp(ctx, tp, m, ts, m.LogStartOffset)
}

// MaxTimestamp returns the largest record timestamp in the bucket, at or
// above its log start offset, and the offset of the first record carrying
// it (ListOffsets -3, KIP-734); ok is false when the bucket holds no
// timestamped record. The manifest's per-segment maxima find the segment;
// only that segment is read.
func (t *Tier) MaxTimestamp(ctx context.Context, tp format.TopicPartition) (timestamp, offset int64, ok bool, err error) {
	m, err := t.Manifest(ctx, tp)
	if err != nil {
		return 0, 0, false, err
	}
	from := m.LogStartOffset
	for {
		best, found, err := m.FindMaxTimestampFrom(ctx, t.pages, from)
		if err != nil {
			return 0, 0, false, fmt.Errorf("largest timestamp of %s-%d: %w", tp.Topic, tp.Partition, err)
		}
		if !found || best.MaxTimestamp < 0 {
			return 0, 0, false, nil
		}
		maxTs := best.MaxTimestamp
		off, ts, found, err := t.offsetForTimestamp(ctx, tp, m, maxTs, from)
		if err != nil {
			return 0, 0, false, err
		}
		if found && ts == maxTs {
			return ts, off, true, nil
		}
		// The segment's maximum belongs to a record below the log start:
		// look among the segments after it.
		from = best.LastOffset + 1
		if from >= m.EndOffset() {
			return 0, 0, false, nil
		}
	}
}

// offsetForTimestamp is OffsetForTimestamp in m, at or after offset from
// (at least m's log start).
func (t *Tier) offsetForTimestamp(ctx context.Context, tp format.TopicPartition, m *format.Root, ts, from int64) (offset, timestamp int64, ok bool, err error) {
	start := max(from, m.LogStartOffset)
	for {
		rs, found, err := m.FindTimestampFrom(ctx, t.pages, ts, start)
		if err != nil {
			return 0, 0, false, fmt.Errorf("find timestamp %d in %s-%d: %w", ts, tp.Topic, tp.Partition, err)
		}
		if !found {
			return 0, 0, false, nil
		}
		timeIndex, err := t.index.get(ctx, t, rs.Key, rs.Size, rs.TimeIndex, t.partsWith(rs, rs.TimeIndex))
		if err != nil {
			if errors.Is(err, segment.ErrCorruptSegment) {
				t.reportCorrupt(tp, rs.Key, err, false)
			}
			return 0, 0, false, err
		}
		pos, _, err := format.LookupTimestamp(timeIndex, rs.BaseOffset, ts)
		if err != nil {
			err = fmt.Errorf("%w: time index of %s: %v", segment.ErrCorruptSegment, rs.Key, err)
			t.reportCorrupt(tp, rs.Key, err, false)
			return 0, 0, false, err
		}
		pos = max(pos, start, rs.BaseOffset)
		for pos <= rs.LastOffset {
			batches, err := t.read(ctx, tp, nil, pos, math.MaxInt64, 1<<20, false)
			if err != nil {
				return 0, 0, false, err
			}
			if len(batches) == 0 {
				break
			}
			for p := 0; p < len(batches); {
				h, _ := segment.ParseBatchHeader(batches[p:])
				size := h.Size()
				if h.MaxTimestamp >= ts {
					off, rts, ok, err := segment.FirstRecordAtOrAfter(batches[p:p+size], ts, max(pos, start))
					if err != nil {
						return 0, 0, false, err
					}
					if ok {
						return off, rts, true, nil
					}
				}
				pos = h.LastOffset() + 1
				p += size
			}
		}
		// Timestamps need not grow with offsets: the segment's max timestamp
		// said yes but no record qualified past the start; look further.
		start = rs.LastOffset + 1
		if start >= m.EndOffset() {
			return 0, 0, false, nil
		}
	}
}

// indexCache keeps remote offset and time indexes in memory, least
// recently used out first, within a byte bound. Indexes are downloaded on
// the chunk cache's workers, one download per index however many readers
// want it at once.
type indexCache struct {
	limit int64
	mu    sync.Mutex
	size  int64
	lru   list.List // of *indexEntry, front most recent
	byKey map[indexKey]*list.Element
	// flights are the downloads under way.
	flights map[indexKey]*indexFlight
}

// indexKey names a part of an object. The length is part of it: an
// empty part starts where the next one does.
type indexKey struct {
	object         string
	offset, length int64
}

type indexEntry struct {
	key indexKey
	b   []byte
}

// indexFlight is one index download; its waiters block on done, then
// take b or err.
type indexFlight struct {
	done chan struct{}
	b    []byte
	err  error
}

func newIndexCache(limit int64) *indexCache {
	return &indexCache{limit: limit, byKey: make(map[indexKey]*list.Element), flights: make(map[indexKey]*indexFlight)}
}

// get returns part p of object, from the cache when it is there, else
// fetched and checked against its CRC. with lists the parts fetched in
// the same ranged GET: contiguous, in object order, p among them (see
// Tier.partsWith); those not cached nor already on their way are cached
// too, each checked against its own CRC. The download runs under the
// chunk cache's context, not the caller's: other readers may be waiting
// for it, and one giving up must not fail them.
func (c *indexCache) get(ctx context.Context, t *Tier, object string, objSize int64, p format.Part, with []format.Part) ([]byte, error) {
	k := indexKey{object, p.Offset, p.Len}
	c.mu.Lock()
	if el, ok := c.byKey[k]; ok {
		c.lru.MoveToFront(el)
		b := el.Value.(*indexEntry).b
		c.mu.Unlock()
		return b, nil
	}
	fl, inFlight := c.flights[k]
	var batch []partFlight
	if !inFlight {
		fl = &indexFlight{done: make(chan struct{})}
		c.flights[k] = fl
		batch = append(batch, partFlight{p, fl})
		for _, q := range with {
			qk := indexKey{object, q.Offset, q.Len}
			if _, ok := c.byKey[qk]; ok || qk == k {
				continue
			}
			if _, ok := c.flights[qk]; ok {
				continue
			}
			qf := &indexFlight{done: make(chan struct{})}
			c.flights[qk] = qf
			batch = append(batch, partFlight{q, qf})
		}
	}
	c.mu.Unlock()
	if !inFlight && !t.cache.goBackground(func() { c.download(t, object, batch) }) {
		for _, pf := range batch {
			c.finish(indexKey{object, pf.p.Offset, pf.p.Len}, pf.fl, nil, errCacheClosed)
		}
	}
	select {
	case <-fl.done:
		return fl.b, fl.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// partFlight is one part of a download and the flight its readers wait on.
type partFlight struct {
	p  format.Part
	fl *indexFlight
}

// download fetches the parts of batch in one ranged GET spanning them,
// checks each, caches those that pass, and ends their flights.
func (c *indexCache) download(t *Tier, object string, batch []partFlight) {
	from, end := batch[0].p.Offset, batch[0].p.End()
	for _, pf := range batch[1:] {
		from, end = min(from, pf.p.Offset), max(end, pf.p.End())
	}
	span := make([]byte, end-from)
	err := t.cache.getOnWorker(object, from, span)
	for _, pf := range batch {
		k := indexKey{object, pf.p.Offset, pf.p.Len}
		if err != nil {
			c.finish(k, pf.fl, nil, fmt.Errorf("get index of %s: %w", object, err))
			continue
		}
		// A copy of its own: a part cached alone must not keep the whole
		// span in memory.
		b := slices.Clone(span[pf.p.Offset-from : pf.p.End()-from])
		if cerr := pf.p.Check(b); cerr != nil {
			c.finish(k, pf.fl, nil, fmt.Errorf("%w: index of %s: %v", segment.ErrCorruptSegment, object, cerr))
			continue
		}
		c.finish(k, pf.fl, b, nil)
	}
}

// finish ends flight fl of index k with b (cached) or err.
func (c *indexCache) finish(k indexKey, fl *indexFlight, b []byte, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.flights, k)
	fl.b, fl.err = b, err
	close(fl.done)
	if err != nil {
		return
	}
	if _, ok := c.byKey[k]; !ok {
		c.byKey[k] = c.lru.PushFront(&indexEntry{k, b})
		c.size += int64(len(b))
		for c.size > c.limit && c.lru.Len() > 1 {
			e := c.lru.Remove(c.lru.Back()).(*indexEntry)
			delete(c.byKey, e.key)
			c.size -= int64(len(e.b))
		}
	}
}

// maxExtraPartBytes bounds what a GET of one part of an object's tail
// reads besides it, for the object's other small parts: about what one
// request's round trip costs in transfer time, so fetching them along is
// cheaper than a GET of their own later.
const maxExtraPartBytes = 1 << 20

// partsWith returns the parts of rs fetched in one GET with p, which is
// one of them: an object's offset index, time index, producer snapshot
// and txn index lie one after the other before its footer, and a read of
// the remote log needs the offset index, a read_committed one the
// snapshot and the txn index (Tier.AbortedTransactions) too. Fetched
// together they cost read_committed no GET more than read_uncommitted.
// When all of them would read more than maxExtraPartBytes besides p (an
// object of a large segment), the snapshot and the txn index still go
// together; else p alone.
func (t *Tier) partsWith(rs format.RemoteSegment, p format.Part) []format.Part {
	all := []format.Part{rs.Index, rs.TimeIndex, rs.ProducerSnapshot}
	if rs.TxnIndex.Present {
		all = append(all, rs.TxnIndex.Part)
	}
	for _, group := range [][]format.Part{all, all[2:]} {
		if !slices.Contains(group, p) || !contiguous(group, rs.Size) {
			continue
		}
		if group[len(group)-1].End()-group[0].Offset-p.Len <= maxExtraPartBytes {
			return group
		}
	}
	return []format.Part{p}
}

// contiguous reports whether parts follow one another without a gap,
// within an object of size bytes.
func contiguous(parts []format.Part, size int64) bool {
	for i, q := range parts {
		if q.Offset < 0 || q.Len < 0 || q.End() > size || i > 0 && q.Offset != parts[i-1].End() {
			return false
		}
	}
	return true
}

// Prefetch warms the cache for a read of tp at offset without waiting: the
// segment's index and the chunks a sequential reader needs next are
// fetched on the tier's worker pool. A fetch that reads several remote
// partitions calls it for all of them first, so their GETs overlap instead
// of queueing behind one another.
func (t *Tier) Prefetch(tp format.TopicPartition, offset int64) {
	m := t.cachedManifest(tp)
	if m == nil {
		return // not loaded yet: the read itself will load it
	}
	// Only pages already in memory: a prefetch must not wait on a GET.
	rs, ok, err := m.Find(context.Background(), cachedPages{t.pages}, offset)
	if err != nil || !ok {
		return
	}
	t.cache.goBackground(func() {
		index, err := t.index.get(t.cache.ctx, t, rs.Key, rs.Size, rs.Index, t.partsWith(rs, rs.Index))
		if err != nil {
			return
		}
		pos, err := format.LookupOffset(index, rs.BaseOffset, offset)
		if err != nil {
			return
		}
		t.prefetchSegment(rs, pos)
	})
}

// prefetchSegment warms rs's index and the ReadAhead chunks from pos.
func (t *Tier) prefetchSegment(rs format.RemoteSegment, pos int64) {
	if pos == 0 {
		t.cache.goBackground(func() {
			t.index.get(t.cache.ctx, t, rs.Key, rs.Size, rs.Index, t.partsWith(rs, rs.Index))
		})
	}
	n := min(int64(max(t.cfg.ReadAhead, 1))*t.cfg.ChunkBytes, rs.Log.End()-pos)
	t.cache.prefetchRange(rs.Key, rs.Size, pos, n)
}

// corruptLogInterval is how often a corrupt remote object is logged at
// most: a consumer retrying a damaged partition reads it again several
// times a second.
const corruptLogInterval = time.Minute

// corruptReports counts corrupt remote reads and rate-limits their log
// lines per object. Its zero value is ready to use.
type corruptReports struct {
	count atomic.Int64
	mu    sync.Mutex
	seen  map[string]*corruptSeen // by object key; guarded by mu
}

// corruptSeen is what was logged about one object: when, and the corrupt
// reads since then; and when a fresh download of it last failed its
// checks too.
type corruptSeen struct {
	logged    time.Time
	reads     int64
	confirmed time.Time
}

// corruptRetryInterval is how long a damage that a fresh download
// confirmed is believed: reads meeting it meanwhile fail at once from the
// cached copy. Without it every retry of a consumer (several a second)
// would download the chunk again, megabytes each, for as long as the
// object stays damaged; with it a repaired object is served within this
// interval.
const corruptRetryInterval = 5 * time.Second

// confirm records that a fresh download of key failed its checks at now.
func (r *corruptReports) confirm(key string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = make(map[string]*corruptSeen)
	}
	s, ok := r.seen[key]
	if !ok {
		s = &corruptSeen{}
		r.seen[key] = s
	}
	s.confirmed = now
}

// confirmedSince reports whether a fresh download of key failed its
// checks after since.
func (r *corruptReports) confirmedSince(key string, since time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.seen[key]
	return ok && s.confirmed.After(since)
}

// maxCorruptSeen bounds the objects corruptReports remembers: beyond it,
// those last logged an interval ago or more are forgotten (their next
// corrupt read is logged at once, as it would be anyway).
const maxCorruptSeen = 1024

// reportCorrupt counts a remote read of tp's object key that found bytes
// failing their checks, healed by a fresh download or not, and logs it
// unless that object was logged less than corruptLogInterval ago; the
// line carries the corrupt reads of the object since the last one.
func (t *Tier) reportCorrupt(tp format.TopicPartition, key string, err error, healed bool) {
	r := &t.corrupt
	r.count.Add(1)
	now := t.cfg.Now()
	r.mu.Lock()
	s, ok := r.seen[key]
	if !ok {
		if r.seen == nil {
			r.seen = make(map[string]*corruptSeen)
		}
		if len(r.seen) >= maxCorruptSeen {
			for k, old := range r.seen {
				if now.Sub(old.logged) >= corruptLogInterval {
					delete(r.seen, k)
				}
			}
		}
		s = &corruptSeen{}
		r.seen[key] = s
	}
	s.reads++
	if ok && now.Sub(s.logged) < corruptLogInterval {
		r.mu.Unlock()
		return
	}
	reads := s.reads
	s.logged, s.reads = now, 0
	r.mu.Unlock()
	if healed {
		t.log.Warn("corrupt remote read healed by a fresh download", "topic", tp.Topic, "partition", tp.Partition, "object", key, "reads", reads, "err", err)
		return
	}
	t.log.Error("corrupt data in the object store: reads of it fail with KAFKA_STORAGE_ERROR until the object is repaired",
		"topic", tp.Topic, "partition", tp.Partition, "object", key, "reads", reads, "err", err)
}

// AbortedTransactions returns the aborted transactions of tp's objects
// that a read_committed fetch of [from, upTo) must know about, in
// first-offset order, each once: those whose ABORT marker (LastOffset) is
// at or after from and whose FirstOffset is below upTo, from the objects'
// txn index parts (Kafka's collectAbortedTransactions over remote
// segments). An entry sits with its marker, which may lie past upTo, so
// the walk goes on from the object holding from until it knows no
// transaction begun below upTo is left: after an entry whose
// LastStableOffset reaches upTo (as the local log stops), or after an
// object ending at or past upTo whose producer snapshot shows no such
// transaction open; else to the end of the bucket, where the local log
// takes over. Parts are read through the index cache, checked against
// their CRC-32C and structure (segment.ErrCorruptSegment, never an empty
// answer); an object with an empty part, or one written before the part
// existed, costs no GET.
func (t *Tier) AbortedTransactions(ctx context.Context, tp format.TopicPartition, from, upTo int64) ([]segment.AbortedTxn, error) {
	m, err := t.Manifest(ctx, tp)
	if err != nil {
		return nil, err
	}
	if upTo <= from || from >= m.EndOffset() || m.Empty() {
		return nil, nil
	}
	var out []segment.AbortedTxn
	seen := make(map[segment.AbortedTxn]bool)
	err = m.Scan(ctx, t.pages, max(from, m.LogStartOffset), func(s *format.RemoteSegment) (bool, error) {
		entries, err := t.cachedTxnIndex(ctx, tp, s)
		if err != nil {
			return false, err
		}
		for _, a := range entries {
			if a.LastOffset >= from && a.FirstOffset < upTo && !seen[a] {
				seen[a] = true
				out = append(out, a)
			}
			if a.LastStableOffset >= upTo {
				return false, nil
			}
		}
		if s.LastOffset+1 < upTo || !s.TxnIndex.Present {
			// A version 1 object's snapshot cannot tell open transactions.
			return true, nil
		}
		settled, err := t.settledBefore(ctx, tp, s, upTo)
		return !settled, err
	})
	if err != nil {
		return nil, fmt.Errorf("aborted transactions of %s-%d in [%d, %d): %w", tp.Topic, tp.Partition, from, upTo, err)
	}
	slices.SortStableFunc(out, func(a, b segment.AbortedTxn) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
	return out, nil
}

// cachedTxnIndex returns the entries of s's txn index part, in marker
// order, through the index cache.
func (t *Tier) cachedTxnIndex(ctx context.Context, tp format.TopicPartition, s *format.RemoteSegment) ([]segment.AbortedTxn, error) {
	if s.TxnIndex.Len == 0 {
		return nil, nil
	}
	b, err := t.part(ctx, tp, s, s.TxnIndex.Part, "txn index")
	if err != nil {
		return nil, err
	}
	entries, err := parseTxnIndex(b, s.BaseOffset, s.LastOffset)
	if err != nil {
		err = fmt.Errorf("%w: txn index of %s: %v", segment.ErrCorruptSegment, s.Key, err)
		t.reportCorrupt(tp, s.Key, err, false)
	}
	return entries, err
}

// parseTxnIndex decodes a txn index part of an object covering [base,
// last], refusing any entry the format does not allow.
func parseTxnIndex(b []byte, base, last int64) ([]segment.AbortedTxn, error) {
	if err := format.CheckTxnIndex(b, base, last); err != nil {
		return nil, err
	}
	return segment.DecodeTxnIndex(b)
}

// settledBefore reports whether every transaction begun below upTo had
// ended by the end of s, as its producer snapshot says: then their
// entries are in s or before it.
func (t *Tier) settledBefore(ctx context.Context, tp format.TopicPartition, s *format.RemoteSegment, upTo int64) (bool, error) {
	if s.ProducerSnapshot.Len == 0 {
		return false, nil // no snapshot: nothing known
	}
	b, err := t.part(ctx, tp, s, s.ProducerSnapshot, "producer snapshot")
	if err != nil {
		return false, err
	}
	open, err := segment.SnapshotOpenTransactions(b)
	if err != nil {
		err = fmt.Errorf("%w: producer snapshot of %s: %v", segment.ErrCorruptSegment, s.Key, err)
		t.reportCorrupt(tp, s.Key, err, false)
		return false, err
	}
	for _, first := range open {
		if first < upTo {
			return false, nil
		}
	}
	return true, nil
}

// part returns part p of s's object through the index cache, checked
// against its CRC-32C; what names it in errors.
func (t *Tier) part(ctx context.Context, tp format.TopicPartition, s *format.RemoteSegment, p format.Part, what string) ([]byte, error) {
	if p.Offset < 0 || p.Len < 0 || p.End() > s.Size {
		return nil, fmt.Errorf("%w: %s of %s at [%d, %d) outside the %d-byte object", segment.ErrCorruptSegment, what, s.Key, p.Offset, p.End(), s.Size)
	}
	b, err := t.index.get(ctx, t, s.Key, s.Size, p, t.partsWith(*s, p))
	if err != nil {
		if errors.Is(err, segment.ErrCorruptSegment) {
			t.reportCorrupt(tp, s.Key, err, false)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return b, nil
}
