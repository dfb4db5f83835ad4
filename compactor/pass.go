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
	// AbortedRemoved counts the records of aborted transactions removed;
	// MarkersRemoved the transaction markers whose horizon had passed.
	AbortedRemoved, MarkersRemoved int64
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
//     records might not fit; mapEnd is where it stopped. Batches of
//     aborted transactions are passed over: their records are nobody's
//     latest value.
//  2. Every batch from the log start up to the segment holding mapEnd-1 is
//     filtered: a keyed record below mapEnd is dropped when the map holds
//     a later offset for its key, a tombstone is dropped once its batch's
//     delete horizon has passed, a record without a key is dropped (as
//     Kafka's cleaner does; produce refuses them on compacted topics);
//     everything at or above mapEnd is kept. Whatever the map says, a
//     batch of an aborted transaction goes whole, and a transaction
//     marker is judged by txns: it stays while the pass meets batches of
//     its transaction, then gets a delete horizon, and goes after it.
//  3. The partition is compacted below mapEnd: the next pass starts its
//     map there.
//
// The section a pass reads ends below the first unstable offset, so every
// transaction in it is decided (Kafka's cleaner stops at the last stable
// offset for the same reason).
type cleaning struct {
	m                *keyMap
	firstDirty       int64
	mapEnd           int64
	nowMs, horizonMs int64
	// producers maps each producer to the last offset of its last batch:
	// that batch stays, empty if need be, so its sequence is not lost.
	producers map[int64]int64
	// mapTxns and txns follow transactions through step 1 and step 2.
	mapTxns, txns *txns
	// horizonDue is the earliest delete horizon of a tombstone or marker
	// the pass kept (0: none): a pass is due then, dirty or not.
	horizonDue int64
	// expire lets tombstones and markers past their horizon go. A tiered
	// log's local pass keeps them: older values of their keys, and the
	// batches of their transactions, may be in the bucket only, below the
	// local log, where the cold pass decides.
	expire bool
	// keepLast is the last offset of the section being rewritten when it
	// ends at the active segment: that batch stays, empty if need be, so
	// that a read below the log end always finds a batch (-1: none).
	keepLast int64
	stats    Stats
	buf      []byte
}

// newCleaning starts a pass whose filter reads from start; aborted are the
// aborted transactions overlapping the section it cleans.
func newCleaning(m *keyMap, start, firstDirty int64, now time.Time, p Policy, producers map[int64]int64, aborted []segment.AbortedTxn) *cleaning {
	m.reset()
	return &cleaning{
		m: m, firstDirty: firstDirty, mapEnd: firstDirty,
		nowMs: now.UnixMilli(), horizonMs: now.Add(p.DeleteRetention).UnixMilli(),
		producers: producers, expire: true, keepLast: -1,
		mapTxns: newTxns(aborted, firstDirty), txns: newTxns(aborted, start),
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
		if m, ok, err := segment.TxnMarkerOf(batch); err == nil {
			c.mapTxns.onControl(&h, m, ok)
		}
		c.mapEnd = h.LastOffset() + 1
		return nil
	}
	if c.mapTxns.onBatch(&h) {
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
	retain := c.retainEmpty(&h)
	if h.IsControl() {
		return c.filterControl(&h, batch, retain)
	}
	if c.txns.onBatch(&h) {
		out, res, err := segment.FilterBatch(c.buf[:0], batch, nil, segment.FilterOptions{Discard: true, RetainEmpty: retain})
		if err != nil {
			return nil, fmt.Errorf("filter batch at offset %d: %w", h.BaseOffset, err)
		}
		c.buf = out[:0]
		c.stats.AbortedRemoved += int64(res.Removed)
		c.stats.BytesWritten += int64(len(out))
		return out, nil
	}
	if h.BaseOffset >= c.mapEnd {
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
	opts := segment.FilterOptions{DeleteHorizonMs: c.horizonMs, RetainEmpty: retain}
	out, _, err := segment.FilterBatch(c.buf[:0], batch, keep, opts)
	if err != nil {
		return nil, fmt.Errorf("filter batch at offset %d: %w", h.BaseOffset, err)
	}
	c.buf = out[:0]
	if keptTombstone {
		c.noteHorizon(horizon, hasHorizon)
	}
	c.stats.BytesWritten += int64(len(out))
	return out, nil
}

// retainEmpty reports whether h's batch stays even with no record left:
// its producer's last batch, whose sequence the producer state must
// still find after a restart, or the last batch before the active
// segment (Kafka's RETAIN_EMPTY).
func (c *cleaning) retainEmpty(h *segment.BatchHeader) bool {
	if h.ProducerID >= 0 {
		if last, ok := c.producers[h.ProducerID]; ok && last == h.LastOffset() {
			return true
		}
	}
	return h.LastOffset() == c.keepLast
}

// noteHorizon records that the pass kept a tombstone or marker whose
// delete horizon is horizon (hasHorizon false: the one stamped now).
func (c *cleaning) noteHorizon(horizon int64, hasHorizon bool) {
	if !c.expire {
		return
	}
	due := c.horizonMs
	if hasHorizon {
		due = horizon
	}
	if c.horizonDue == 0 || due < c.horizonDue {
		c.horizonDue = due
	}
}

// filterControl judges a control batch as Kafka's cleaner does: a marker
// stays while the pass meets batches of its transaction; once it meets
// none, the marker gets a delete horizon (KIP-534, as a tombstone's
// batch does) and goes when that has passed, so that a consumer reading
// the log within delete.retention.ms still sees how the transaction
// ended. An empty control batch goes at once. A control batch that holds
// no END_TXN marker is copied.
func (c *cleaning) filterControl(h *segment.BatchHeader, batch []byte, retain bool) ([]byte, error) {
	m, ok, err := segment.TxnMarkerOf(batch)
	if err != nil || !c.txns.onControl(h, m, ok) {
		return batch, nil
	}
	horizon, hasHorizon := h.DeleteHorizon()
	opts := segment.FilterOptions{RetainEmpty: retain}
	switch {
	case !ok || (c.expire && hasHorizon && c.nowMs >= horizon):
		opts.Discard = true
	default:
		opts.StampMarker, opts.DeleteHorizonMs = true, c.horizonMs
		c.noteHorizon(horizon, hasHorizon)
	}
	out, res, err := segment.FilterBatch(c.buf[:0], batch, nil, opts)
	if err != nil {
		return nil, fmt.Errorf("filter control batch at offset %d: %w", h.BaseOffset, err)
	}
	c.buf = out[:0]
	if ok && opts.Discard {
		c.stats.MarkersRemoved += int64(res.Removed)
	}
	c.stats.BytesWritten += int64(len(out))
	return out, nil
}
