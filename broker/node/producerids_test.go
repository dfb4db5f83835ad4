package node

import (
	"context"
	"sync"
	"testing"
)

// countingIDs is an idAllocator that counts its reservations, and those
// made on demand (not from a reservation ahead).
type countingIDs struct {
	mu              sync.Mutex
	next            int64
	calls, onDemand int
	inBackground    bool
}

func (c *countingIDs) AllocateProducerIDs(_ context.Context, n int64) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if !c.inBackground {
		c.onDemand++
	}
	first := c.next
	c.next += n
	return first, nil
}

// TestProducerIDsReserveAhead: the next block is reserved in the
// background once half of the current one is used, so that allocating
// never waits for the metadata log while blocks keep up; ids stay unique
// and in order.
func TestProducerIDsReserveAhead(t *testing.T) {
	store := &countingIDs{}
	var background []func(context.Context)
	p := producerIDs{store: store, ahead: func(reserve func(context.Context)) { background = append(background, reserve) }}
	ctx := context.Background()
	seen := map[int64]bool{}
	for i := range 3 * ProducerIDBlock {
		// Run the reservations started so far, as the broker's goroutines
		// would, before the block runs out.
		for _, r := range background {
			store.inBackground = true
			r(ctx)
			store.inBackground = false
		}
		background = nil
		id, err := p.allocate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if seen[id] || id != int64(i) {
			t.Fatalf("allocation %d gave id %d", i, id)
		}
		seen[id] = true
	}
	// Only the first block is reserved on demand; each later one was
	// ready ahead (and one more is reserved for what comes next).
	if store.onDemand != 1 || store.calls != 4 {
		t.Fatalf("%d reservations, %d on demand, for 3 blocks; want 4 and 1", store.calls, store.onDemand)
	}

	// Without the reservations ahead having run, allocation reserves on
	// demand, once per block.
	lazy := &countingIDs{}
	q := producerIDs{store: lazy, ahead: func(func(context.Context)) {}}
	for i := range 2*ProducerIDBlock + 1 {
		if id, err := q.allocate(ctx); err != nil || id != int64(i) {
			t.Fatalf("allocation %d: %d, %v", i, id, err)
		}
	}
	if lazy.onDemand != 3 {
		t.Fatalf("%d reservations on demand for 3 blocks", lazy.onDemand)
	}
}
