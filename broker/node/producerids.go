package node

import (
	"context"
	"sync"
)

// ProducerIDBlock is how many producer ids one Raft entry reserves. Ids are
// allocated through the metadata log so they stay unique across restarts
// (and, later, across brokers); a block keeps that off the per-producer
// path.
const ProducerIDBlock = 1000

// idAllocator is what producerIDs needs from the metadata store.
type idAllocator interface {
	// AllocateProducerIDs durably reserves n ids and returns the first.
	AllocateProducerIDs(ctx context.Context, n int64) (first int64, err error)
}

// producerIDs hands out producer ids from reserved blocks. Once half of a
// block is used the next one is reserved in the background, so that a
// caller rarely waits for the metadata log (or the controller): the
// transaction coordinator allocates while it holds its lock, and every
// decision of the node's coordinator would wait with it.
type producerIDs struct {
	store idAllocator
	// ahead runs a reservation ahead of need; nil reserves only on demand.
	// The node runs it on Config.Go, stopped by its context.
	ahead func(reserve func(context.Context))

	mu        sync.Mutex
	next, end int64 // guarded by mu; [next, end) is still free
	spare     int64 // first id of the block reserved ahead, if haveSpare
	haveSpare bool
	reserving bool // a reservation ahead is running
}

func (p *producerIDs) allocate(ctx context.Context) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.next >= p.end {
		if p.haveSpare {
			p.next, p.end, p.haveSpare = p.spare, p.spare+ProducerIDBlock, false
		} else {
			first, err := p.store.AllocateProducerIDs(ctx, ProducerIDBlock)
			if err != nil {
				return -1, err
			}
			p.next, p.end = first, first+ProducerIDBlock
		}
	}
	id := p.next
	p.next++
	if p.ahead != nil && !p.reserving && !p.haveSpare && p.end-p.next <= ProducerIDBlock/2 {
		p.reserving = true
		p.ahead(p.reserveAhead)
	}
	return id, nil
}

// reserveAhead reserves the block after the current one; a failure is
// left to the next allocation that needs it, which reserves on demand.
func (p *producerIDs) reserveAhead(ctx context.Context) {
	first, err := p.store.AllocateProducerIDs(ctx, ProducerIDBlock)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reserving = false
	if err == nil {
		p.spare, p.haveSpare = first, true
	}
}
