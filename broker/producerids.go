package broker

import (
	"context"
	"sync"
)

// producerIDBlock is how many producer ids one Raft entry reserves. Ids are
// allocated through the metadata log so they stay unique across restarts
// (and, later, across brokers); a block keeps that off the per-producer
// path.
const producerIDBlock = 1000

// idAllocator is what producerIDs needs from the metadata store.
type idAllocator interface {
	// AllocateProducerIDs durably reserves n ids and returns the first.
	AllocateProducerIDs(ctx context.Context, n int64) (first int64, err error)
}

// producerIDs hands out idempotent-producer ids from reserved blocks.
type producerIDs struct {
	store idAllocator

	mu        sync.Mutex
	next, end int64 // guarded by mu; [next, end) is still free
}

func (p *producerIDs) allocate(ctx context.Context) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next >= p.end {
		first, err := p.store.AllocateProducerIDs(ctx, producerIDBlock)
		if err != nil {
			return -1, err
		}
		p.next, p.end = first, first+producerIDBlock
	}
	id := p.next
	p.next++
	return id, nil
}
