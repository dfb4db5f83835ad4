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
// else's small ones.
//
// Frames of connections that have yet to authenticate (preAuth) may hold
// at most half the bound between them: otherwise a flood of unauthenticated
// connections, each announcing a frame of sasl.server.max.receive.size and
// sending it a byte at a time, would hold all of it, and every
// authenticated request larger than what is left would wait for as long as
// the flood lasts.
//
// Releasing memory hands it to the waiters it now fits, in the order they
// came, and wakes only those: with hundreds of connections waiting, waking
// them all on every release (for most to find that nothing fits and wait
// again) cost the broker more CPU than serving its clients. The zero value
// is ready to use.
type requestMemory struct {
	// mu guards used, preAuth and waiters.
	mu struct {
		sync.Mutex
		used int64
		// preAuth is the part of used held by unauthenticated frames.
		preAuth int64
		// waiters wait for their reservation, oldest first.
		waiters []*memWaiter
	}
}

// memWaiter is one reservation waiting in acquire.
type memWaiter struct {
	n, limit int64
	preAuth  bool
	// granted is closed once release has reserved n bytes for it.
	granted chan struct{}
}

// fits reports whether n more bytes fit under limit (and, for an
// unauthenticated frame, the unauthenticated half of it). A request
// larger than the limit is admitted when nothing else is reserved, so a
// limit below the maximum request size slows such requests down rather
// than refusing them. Called with mu held.
func (m *requestMemory) fits(n, limit int64, preAuth bool) bool {
	if m.mu.used == 0 {
		return true
	}
	if m.mu.used+n > limit {
		return false
	}
	return !preAuth || m.mu.preAuth == 0 || m.mu.preAuth+n <= limit/2
}

// take reserves n bytes. Called with mu held.
func (m *requestMemory) take(n int64, preAuth bool) {
	m.mu.used += n
	if preAuth {
		m.mu.preAuth += n
	}
}

// tryAcquire reserves n bytes if they fit now.
func (m *requestMemory) tryAcquire(n, limit int64, preAuth bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.fits(n, limit, preAuth) {
		return false
	}
	m.take(n, preAuth)
	return true
}

// acquire reserves n bytes, waiting until they fit or ctx is done.
func (m *requestMemory) acquire(ctx context.Context, n, limit int64, preAuth bool) error {
	m.mu.Lock()
	if m.fits(n, limit, preAuth) {
		m.take(n, preAuth)
		m.mu.Unlock()
		return nil
	}
	w := &memWaiter{n: n, limit: limit, preAuth: preAuth, granted: make(chan struct{})}
	m.mu.waiters = append(m.mu.waiters, w)
	m.mu.Unlock()
	select {
	case <-w.granted:
		return nil
	case <-ctx.Done():
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-w.granted: // granted meanwhile: the reservation is ours
		return nil
	default:
	}
	for i, x := range m.mu.waiters {
		if x == w {
			m.mu.waiters = append(m.mu.waiters[:i], m.mu.waiters[i+1:]...)
			break
		}
	}
	return ctx.Err()
}

// release gives back n bytes (preAuth as they were reserved) and grants
// them to the waiters they now fit.
func (m *requestMemory) release(n int64, preAuth bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.used -= n
	if preAuth {
		m.mu.preAuth -= n
	}
	kept := m.mu.waiters[:0]
	for _, w := range m.mu.waiters {
		if m.fits(w.n, w.limit, w.preAuth) {
			m.take(w.n, w.preAuth)
			close(w.granted)
			continue
		}
		kept = append(kept, w)
	}
	clear(m.mu.waiters[len(kept):])
	m.mu.waiters = kept
}
