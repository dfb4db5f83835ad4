package txn

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Load rebuilds the transactional ids of partition from its records, in
// log order (the last record of an id wins, a tombstone deletes it), and
// starts deciding for them under coordinatorEpoch, which the markers it
// asks for carry. It replaces whatever the partition held. It returns the
// markers of transactions that were in PrepareCommit or PrepareAbort: the
// previous coordinator may not have written them all, so the caller writes
// them again and then calls CompleteMarkers.
func (c *Coordinator) Load(partition, coordinatorEpoch int32, recs []Record) ([]*Markers, error) {
	if partition < 0 || partition >= c.cfg.Partitions {
		return nil, fmt.Errorf("txn: load partition %d of %d", partition, c.cfg.Partitions)
	}
	state := make(map[string]Metadata)
	for i, r := range recs {
		id, err := DecodeKey(r.Key)
		if errors.Is(err, ErrUnknownKey) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("txn: load partition %d, record %d: %w", partition, i, err)
		}
		if r.Value == nil {
			delete(state, id)
			continue
		}
		m, err := DecodeValue(id, r.Value)
		if err != nil {
			return nil, fmt.Errorf("txn: load partition %d, record %d: %w", partition, i, err)
		}
		state[id] = m
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if loaded, ok := c.mu.partitions[partition]; ok && loaded >= coordinatorEpoch {
		// Already deciding under this epoch (or a newer one): what the
		// caller read may be older than what has been decided since.
		return nil, fmt.Errorf("%w: partition %d is loaded at coordinator epoch %d, not below %d", ErrLoaded, partition, loaded, coordinatorEpoch)
	}
	c.unloadLocked(partition)
	c.mu.partitions[partition] = coordinatorEpoch
	var resend []*Markers
	for id, m := range state {
		c.mu.ids[id] = &entry{partition: partition, md: m}
		if m.State == PrepareCommit || m.State == PrepareAbort {
			resend = append(resend, markersOf(m, coordinatorEpoch))
		}
	}
	slices.SortFunc(resend, func(a, b *Markers) int { return strings.Compare(a.TransactionalID, b.TransactionalID) })
	return resend, nil
}

// ErrLoaded is wrapped when Load is asked to replace a partition already
// loaded under the same or a newer coordinator epoch.
var ErrLoaded = errors.New("txn: partition already loaded")

// Unload stops deciding for partition's transactional ids, as when this
// node stops leading it; their pending transitions can no longer complete.
func (c *Coordinator) Unload(partition int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unloadLocked(partition)
}

func (c *Coordinator) unloadLocked(partition int32) {
	delete(c.mu.partitions, partition)
	for id, e := range c.mu.ids {
		if e.partition == partition {
			delete(c.mu.ids, id)
		}
	}
}

// Loaded reports whether partition is loaded here, and under which
// coordinator epoch.
func (c *Coordinator) Loaded(partition int32) (epoch int32, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	epoch, ok = c.mu.partitions[partition]
	return epoch, ok
}

// Coordinates reports whether this coordinator still decides for m's
// transactional id under m's coordinator epoch: while it does, m's
// markers are its to write.
func (c *Coordinator) Coordinates(m *Markers) bool {
	epoch, ok := c.Loaded(c.PartitionFor(m.TransactionalID))
	return ok && epoch == m.CoordinatorEpoch
}
