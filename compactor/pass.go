package compactor

import (
	"errors"
	"fmt"
	"time"

	"strata/segment"
)

// Stats describe one compaction pass.
type Stats struct {
	// BytesRead and BytesWritten count log bytes: what the pass read
	// (the dirty section twice for a local pass, once for a cold one)
	// and what it wrote.
	BytesRead, BytesWritten int64
	// KeysSeen and KeysKept count the keyed records the pass filtered and
	// those it kept.
	KeysSeen, KeysKept int64
	// KeysMapped is how many records went into the key map.
	KeysMapped int64
	// Doubtful is how many map slots two keys collided in (their records
	// were all kept).
	Doubtful int
	// TombstonesRemoved counts tombstones whose delete horizon had passed.
	TombstonesRemoved int64
	// CleanedTo is the offset below which the partition is compacted
	// after the pass.
	CleanedTo int64
	// Gets and Puts are the object-store requests of a cold pass.
	Gets, Puts int64
	Duration   time.Duration
}

// cleaning is the state of one pass: Kafka's cleaner algorithm, shared by
// the local and the cold tier.
//
//  1. The key map takes the dirty section [firstDirty, ...) in offset
//     order, batch by batch, until the section ends or the next batch's
//     records might not fit; mapEnd is where it stopped.
//  2. Every batch from the log start up to the segment holding mapEnd-1 is
//     filtered: a keyed record below mapEnd is dropped when the map holds
//     a later offset for its key, a tombstone is dropped once its batch's
//     delete horizon has passed, a record without a key is dropped (as
//     Kafka's cleaner does; produce refuses them on compacted topics);
//     everything at or above mapEnd is kept.
//  3. The partition is compacted below mapEnd: the next pass starts its
//     map there.
type cleaning struct {
	m                *keyMap
	firstDirty       int64
	mapEnd           int64
	nowMs, horizonMs int64
	// producers maps each producer to the last offset of its last batch:
	// that batch stays, empty if need be, so its sequence is not lost.
	producers map[int64]int64
	// tombstoneDue is the earliest delete horizon of a tombstone the pass
	// kept (0: none): a pass is due then, dirty or not.
	tombstoneDue int64
	// expire lets tombstones past their horizon go. A tiered log's local
	// pass keeps them: older values of their keys may be in the bucket
	// only, below the local log, where the cold pass decides.
	expire bool
	// keepLast is the last offset of the section being rewritten when it
	// ends at the active segment: that batch stays, empty if need be, so
	// that a read below the log end always finds a batch (-1: none).
	keepLast int64
	stats    Stats
	buf      []byte
}

func newCleaning(m *keyMap, firstDirty int64, now time.Time, p Policy, producers map[int64]int64) *cleaning {
	m.reset()
	return &cleaning{
		m: m, firstDirty: firstDirty, mapEnd: firstDirty,
		nowMs: now.UnixMilli(), horizonMs: now.Add(p.DeleteRetention).UnixMilli(),
		producers: producers, expire: true, keepLast: -1,
	}
}

// cleanedTo is where the pass leaves the log compacted: the map's end, or
// the first key kept on doubt.
func (c *cleaning) cleanedTo() int64 { return max(min(c.mapEnd, c.m.firstDoubt), c.firstDirty) }

// errStopMap ends the map's scan: the next batch might not fit.
var errStopMap = errors.New("compactor: key map full")

// mapBatch adds the keys of batch (offsets at or above firstDirty) to the
// map and moves mapEnd past it. It returns errStopMap, adding nothing,
// when the map might not hold all of the batch's keys.
func (c *cleaning) mapBatch(batch []byte) error {
	h, err := segment.ParseBatchHeader(batch)
	if err != nil {
		return err
	}
	if h.LastOffset() < c.mapEnd {
		return nil
	}
	if h.IsControl() {
		c.mapEnd = h.LastOffset() + 1
		return nil
	}
	if int(h.NumRecords) > c.m.free() {
		return errStopMap
	}
	err = segment.ForEachRecord(batch, func(r *segment.Record) error {
		if r.Offset < c.firstDirty || r.Key == nil {
			return nil
		}
		c.stats.KeysMapped++
		return c.m.add(r.Key, r.Offset)
	})
	if err != nil {
		return fmt.Errorf("map batch at offset %d: %w", h.BaseOffset, err)
	}
	c.mapEnd = h.LastOffset() + 1
	return nil
}

// filter appends to c.buf what compaction keeps of batch and returns it
// (empty when the batch goes).
func (c *cleaning) filter(batch []byte) ([]byte, error) {
	h, err := segment.ParseBatchHeader(batch)
	if err != nil {
		return nil, err
	}
	if h.BaseOffset >= c.mapEnd || h.IsControl() {
		return batch, nil
	}
	horizon, hasHorizon := h.DeleteHorizon()
	expired := c.expire && hasHorizon && c.nowMs >= horizon
	keptTombstone := false
	keep := func(r *segment.Record) bool {
		if r.Offset >= c.mapEnd {
			return true
		}
		if r.Key == nil {
			return false
		}
		c.stats.KeysSeen++
		if latest, ok := c.m.latest(r.Key); ok && latest > r.Offset {
			return false
		}
		if r.Tombstone {
			if expired {
				c.stats.TombstonesRemoved++
				return false
			}
			keptTombstone = true
		}
		c.stats.KeysKept++
		return true
	}
	opts := segment.FilterOptions{DeleteHorizonMs: c.horizonMs}
	if h.ProducerID >= 0 {
		if last, ok := c.producers[h.ProducerID]; ok && last == h.LastOffset() {
			opts.RetainEmpty = true
		}
	}
	if h.LastOffset() == c.keepLast {
		opts.RetainEmpty = true
	}
	out, _, err := segment.FilterBatch(c.buf[:0], batch, keep, opts)
	if err != nil {
		return nil, fmt.Errorf("filter batch at offset %d: %w", h.BaseOffset, err)
	}
	c.buf = out[:0]
	if keptTombstone && c.expire {
		due := c.horizonMs
		if hasHorizon {
			due = horizon
		}
		if c.tombstoneDue == 0 || due < c.tombstoneDue {
			c.tombstoneDue = due
		}
	}
	c.stats.BytesWritten += int64(len(out))
	return out, nil
}
