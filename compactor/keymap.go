package compactor

import (
	"errors"
	"hash/maphash"
	"math"
)

// slotBytes is what one key takes in a keyMap: two 64-bit hashes of the
// key and the offset of its latest record.
const slotBytes = 24

// maxLoad is the share of slots a keyMap fills before it reports itself
// full: linear probing stays short below it.
const maxLoad = 0.8

// minSlots keeps a tiny budget useful: a map must hold at least one
// batch's keys for a pass to make progress.
const minSlots = 1024

// errMapFull is returned by keyMap.add when the key does not fit.
var errMapFull = errors.New("compactor: key map full")

// keyMap maps keys to the offset of their latest record in a fixed amount
// of memory, as Kafka's SkimpyOffsetMap does: it stores hashes, never keys.
//
// A slot is found by the first hash (h1) and confirmed by the second (h2),
// both from maphash under seeds chosen per map. Two keys that share h1 but
// differ in h2 are a detected collision: the slot is marked doubtful and
// every record of either key is kept for this pass (keep on doubt), so a
// collision can cost bytes, never a live key. The pass then calls the log
// compacted only below the collision (firstDoubt), so the next pass, under
// new seeds, decides those keys again: a tombstone kept on doubt is not
// left to expire above a value it should have removed. Only two keys
// equal in both hashes (63 + 64 bits) could be confused; under random
// seeds that no client can know, the chance is about n²/2^128 for n keys
// in a pass (2^-68 for a billion keys).
type keyMap struct {
	slots    []slot
	used     int
	limit    int
	s1, s2   maphash.Seed
	doubtful int
	// firstDoubt is the smallest offset of a key in a doubtful slot (as
	// of the collision; later offsets of those keys are larger): the pass
	// may call the log compacted only below it, so that the next pass,
	// under new seeds, maps those keys again.
	firstDoubt int64
	// hash replaces the seeded hashes in tests that need collisions.
	hash func(key []byte) (h1, h2 uint64)
}

type slot struct {
	h1, h2 uint64
	// off is the latest offset of the key; doubt marks a detected
	// collision. A slot with h1 == 0 is empty (hashes are forced odd).
	off int64
}

// doubt is the offset of a slot two keys collided in.
const doubt = -1

// newKeyMap returns a map that uses at most budget bytes for its slots.
func newKeyMap(budget int64) *keyMap {
	n := max(int(budget/slotBytes), minSlots)
	m := &keyMap{slots: make([]slot, n), limit: int(float64(n) * maxLoad)}
	m.reset()
	return m
}

// reset empties the map and draws new seeds.
func (m *keyMap) reset() {
	clear(m.slots)
	m.used, m.doubtful, m.firstDoubt = 0, 0, math.MaxInt64
	m.s1, m.s2 = maphash.MakeSeed(), maphash.MakeSeed()
}

// free is how many more keys the map takes.
func (m *keyMap) free() int { return m.limit - m.used }

func (m *keyMap) hashes(key []byte) (h1, h2 uint64) {
	if m.hash != nil {
		h1, h2 = m.hash(key)
		return h1 | 1, h2
	}
	return maphash.Bytes(m.s1, key) | 1, maphash.Bytes(m.s2, key)
}

// find returns the slot for h1: the one holding it, or the empty slot
// where it would go.
func (m *keyMap) find(h1 uint64) *slot {
	n := uint64(len(m.slots))
	for i := h1 % n; ; i = (i + 1) % n {
		s := &m.slots[i]
		if s.h1 == h1 || s.h1 == 0 {
			return s
		}
	}
}

// add records offset as key's latest. Offsets come in ascending order, so
// a later add of the same key replaces the earlier. It fails with
// errMapFull when a new key would go past the map's load limit.
func (m *keyMap) add(key []byte, offset int64) error {
	h1, h2 := m.hashes(key)
	s := m.find(h1)
	switch {
	case s.h1 == 0:
		if m.used >= m.limit {
			return errMapFull
		}
		*s = slot{h1: h1, h2: h2, off: offset}
		m.used++
	case s.off == doubt:
	case s.h2 != h2:
		m.firstDoubt = min(m.firstDoubt, s.off, offset)
		s.off = doubt
		m.doubtful++
	default:
		s.off = offset
	}
	return nil
}

// latest returns the offset of key's latest record in the map. ok is false
// when the key is not in it, or shares its slot with another key.
func (m *keyMap) latest(key []byte) (offset int64, ok bool) {
	h1, h2 := m.hashes(key)
	s := m.find(h1)
	if s.h1 == 0 || s.h2 != h2 || s.off == doubt {
		return 0, false
	}
	return s.off, true
}
