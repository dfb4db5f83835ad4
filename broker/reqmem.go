package broker

import (
	"context"
	"sync"
)

// requestMemory bounds the bytes of requests being read or handled across
// all connections (queued.max.request.bytes). Reservations are of the
// announced size, taken before a body is read: a body never grows beyond
// it, so what the broker holds stays under the bound however slowly the
// clients send. A reservation that does not fit waits, while smaller ones
// that fit go ahead: a few stalled large requests must not stop everyone
// else's small ones. The zero value is ready to use.
type requestMemory struct {
	// mu guards used and freed.
	mu struct {
		sync.Mutex
		used int64
		// freed is closed, and replaced, whenever memory is released.
		freed chan struct{}
	}
}

// tryAcquire reserves n bytes if they fit under limit. A request larger
// than the limit is admitted when nothing else is reserved, so a limit
// below the maximum request size slows such requests down rather than
// refusing them.
func (m *requestMemory) tryAcquire(n, limit int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.used > 0 && m.mu.used+n > limit {
		return false
	}
	m.mu.used += n
	return true
}

// acquire reserves n bytes, waiting until they fit or ctx is done.
func (m *requestMemory) acquire(ctx context.Context, n, limit int64) error {
	for {
		m.mu.Lock()
		if m.mu.used == 0 || m.mu.used+n <= limit {
			m.mu.used += n
			m.mu.Unlock()
			return nil
		}
		if m.mu.freed == nil {
			m.mu.freed = make(chan struct{})
		}
		freed := m.mu.freed
		m.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release gives back n bytes and wakes the waiters.
func (m *requestMemory) release(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.used -= n
	if m.mu.freed != nil {
		close(m.mu.freed)
		m.mu.freed = nil
	}
}
