package tier

import (
	"container/list"
	"context"
	"fmt"
	"io"
	"sync"

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

// Read appends to dst whole batches from the bucket, starting with the
// batch that contains offset, and stops before exceeding maxBytes except
// that the first batch is returned whole (KIP-74). Like a local read it
// stays within one segment. Every batch's CRC-32C is checked; a batch that
// fails it ends the read (the batches before it are returned, or
// segment.ErrCorruptSegment when there are none). An offset the bucket does
// not hold is segment.ErrOffsetOutOfRange.
func (t *Tier) Read(ctx context.Context, tp format.TopicPartition, dst []byte, offset int64, maxBytes int) ([]byte, error) {
	m, err := t.Manifest(ctx, tp)
	if err != nil {
		return dst, err
	}
	if offset < m.LogStartOffset || offset >= m.EndOffset() {
		return dst, fmt.Errorf("%w: offset %d, bucket holds [%d, %d)", segment.ErrOffsetOutOfRange, offset, m.LogStartOffset, m.EndOffset())
	}
	rs, ok := m.Find(offset)
	if !ok {
		return dst, fmt.Errorf("%w: offset %d not in the manifest", segment.ErrOffsetOutOfRange, offset)
	}
	index, err := t.index.get(ctx, t, rs.Key, rs.Size, rs.Index)
	if err != nil {
		return dst, err
	}
	pos, err := format.LookupOffset(index, rs.BaseOffset, offset)
	if err != nil {
		return dst, fmt.Errorf("%w: offset index of %s: %v", segment.ErrCorruptSegment, rs.Key, err)
	}
	logEnd := rs.Log.End()
	start := len(dst)
	wb := windowBufs.Get().(*[]byte)
	defer windowBufs.Put(wb)
	// A sequential reader crosses into the next segment soon: warm its
	// index and first chunks now, so the crossing costs no waiting.
	ahead := int64(t.cfg.ReadAhead) * t.cfg.ChunkBytes
	if pos+int64(maxBytes)+ahead >= logEnd {
		if next, ok := m.Find(rs.LastOffset + 1); ok {
			t.prefetchSegment(next, 0)
		}
	}
	var need int64 // the size of a batch that did not fit the last window
	for pos < logEnd {
		want := min(max(int64(maxBytes-(len(dst)-start)), minReadWindow), logEnd-pos)
		// Within one chunk the window is the cached chunk itself, not a
		// copy of it.
		if rest := t.cfg.ChunkBytes - pos%t.cfg.ChunkBytes; rest >= minReadWindow {
			want = min(want, rest)
		}
		window, release, err := t.cache.view(ctx, wb, rs.Key, rs.Size, pos, max(want, need), logEnd)
		if err != nil {
			return dst, err
		}
		used, done, err := appendBatches(&dst, start, window, offset, maxBytes)
		if err == nil && used == 0 {
			// The next batch is larger than the window: the next window
			// is its size, and must then hold it.
			var h segment.BatchHeader
			if h, err = segment.ParseBatchHeader(window); err == nil && need > 0 {
				err = fmt.Errorf("batch of %d bytes not read whole", need)
			}
			need = int64(h.Size())
		}
		release()
		if err != nil {
			if len(dst) > start {
				return dst, nil
			}
			return dst, fmt.Errorf("%w: %s at position %d: %v", segment.ErrCorruptSegment, rs.Key, pos+used, err)
		}
		if used == 0 {
			if len(dst) > start && len(dst)-start+int(need) > maxBytes {
				break
			}
			if pos+need > logEnd {
				return dst, fmt.Errorf("%w: %s: batch at %d runs past the log", segment.ErrCorruptSegment, rs.Key, pos)
			}
			continue
		}
		need = 0
		pos += used
		if done {
			break
		}
	}
	return dst, nil
}

// appendBatches appends the whole batches of window that end at or after
// offset, until maxBytes (the first batch always goes in whole). It
// returns how many bytes of window it consumed and whether the byte limit
// stopped it.
func appendBatches(dst *[]byte, start int, window []byte, offset int64, maxBytes int) (used int64, done bool, err error) {
	for len(window)-int(used) >= 61 {
		b := window[used:]
		h, err := segment.ParseBatchHeader(b)
		if err != nil {
			return used, false, err
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
	for {
		rs, found := m.FindTimestamp(ts)
		if !found {
			return 0, 0, false, nil
		}
		timeIndex, err := t.index.get(ctx, t, rs.Key, rs.Size, rs.TimeIndex)
		if err != nil {
			return 0, 0, false, err
		}
		from, _, err := format.LookupTimestamp(timeIndex, rs.BaseOffset, ts)
		if err != nil {
			return 0, 0, false, fmt.Errorf("%w: time index of %s: %v", segment.ErrCorruptSegment, rs.Key, err)
		}
		from = max(from, m.LogStartOffset, rs.BaseOffset)
		for from <= rs.LastOffset {
			batches, err := t.Read(ctx, tp, nil, from, 1<<20)
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
					off, rts, ok, err := segment.FirstRecordAtOrAfter(batches[p:p+size], ts, max(from, m.LogStartOffset))
					if err != nil {
						return 0, 0, false, err
					}
					if ok {
						return off, rts, true, nil
					}
				}
				from = h.LastOffset() + 1
				p += size
			}
		}
		// Timestamps need not grow with offsets: the segment's max timestamp
		// said yes but no record qualified past the start; look further.
		next := rs.LastOffset + 1
		if next >= m.EndOffset() {
			return 0, 0, false, nil
		}
		m = m.WithLogStart(next)
	}
}

// indexCache keeps remote offset and time indexes in memory, least
// recently used out first, within a byte bound.
type indexCache struct {
	limit int64
	mu    sync.Mutex
	size  int64
	lru   list.List // of *indexEntry, front most recent
	byKey map[indexKey]*list.Element
}

type indexKey struct {
	object string
	offset int64
}

type indexEntry struct {
	key indexKey
	b   []byte
}

func newIndexCache(limit int64) *indexCache {
	return &indexCache{limit: limit, byKey: make(map[indexKey]*list.Element)}
}

// get returns part p of object, fetched with one ranged GET and checked
// against its CRC, from the cache when it is there.
func (c *indexCache) get(ctx context.Context, t *Tier, object string, objSize int64, p format.Part) ([]byte, error) {
	k := indexKey{object, p.Offset}
	c.mu.Lock()
	if el, ok := c.byKey[k]; ok {
		c.lru.MoveToFront(el)
		b := el.Value.(*indexEntry).b
		c.mu.Unlock()
		return b, nil
	}
	c.mu.Unlock()
	rc, err := t.store.GetRange(ctx, object, p.Offset, p.Len)
	if err != nil {
		return nil, fmt.Errorf("get index of %s: %w", object, err)
	}
	b := make([]byte, p.Len)
	_, err = io.ReadFull(rc, b)
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("get index of %s: %w", object, err)
	}
	if err := p.Check(b); err != nil {
		return nil, fmt.Errorf("%w: index of %s: %v", segment.ErrCorruptSegment, object, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byKey[k]; !ok {
		c.byKey[k] = c.lru.PushFront(&indexEntry{k, b})
		c.size += int64(len(b))
		for c.size > c.limit && c.lru.Len() > 1 {
			e := c.lru.Remove(c.lru.Back()).(*indexEntry)
			delete(c.byKey, e.key)
			c.size -= int64(len(e.b))
		}
	}
	return b, nil
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
	rs, ok := m.Find(offset)
	if !ok {
		return
	}
	t.cache.goBackground(func() {
		index, err := t.index.get(t.cache.ctx, t, rs.Key, rs.Size, rs.Index)
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
			t.index.get(t.cache.ctx, t, rs.Key, rs.Size, rs.Index)
		})
	}
	n := min(int64(max(t.cfg.ReadAhead, 1))*t.cfg.ChunkBytes, rs.Log.End()-pos)
	t.cache.prefetchRange(rs.Key, rs.Size, pos, n)
}
