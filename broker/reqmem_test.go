package broker

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRequestMemoryUnauthenticatedHalf: frames of unauthenticated
// connections hold at most half of queued.max.request.bytes, so the other
// half stays for authenticated requests however many of them wait.
func TestRequestMemoryUnauthenticatedHalf(t *testing.T) {
	var m requestMemory
	const limit = 1000
	if !m.tryAcquire(400, limit, true) {
		t.Fatal("the first unauthenticated 400 of 1000 bytes was refused")
	}
	if m.tryAcquire(200, limit, true) {
		t.Fatal("unauthenticated frames were given 600 of 1000 bytes, more than half")
	}
	if !m.tryAcquire(600, limit, false) {
		t.Fatal("an authenticated 600 bytes was refused with 400 of 1000 held")
	}
	m.release(400, true)
	if !m.tryAcquire(400, limit, true) {
		t.Fatal("unauthenticated 400 bytes refused with only authenticated ones held")
	}
	if m.mu.used != 1000 || m.mu.preAuth != 400 {
		t.Fatalf("used %d, unauthenticated %d; want 1000 and 400", m.mu.used, m.mu.preAuth)
	}
}

// TestRequestMemoryRelease: a release grants the waiters that now fit, in
// order, with a smaller one going ahead of a larger one that does not fit;
// a waiter whose context ends leaves the queue holding nothing.
func TestRequestMemoryRelease(t *testing.T) {
	var m requestMemory
	const limit = 1000
	if !m.tryAcquire(900, limit, false) {
		t.Fatal("first reservation refused")
	}
	type result struct {
		name string
		err  error
	}
	done := make(chan result, 3)
	wait := func(ctx context.Context, name string, n int64) {
		go func() { done <- result{name, m.acquire(ctx, n, limit, false)} }()
		waitFor(t, 5*time.Second, name+" to wait", func() bool {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, w := range m.mu.waiters {
				if w.n == n {
					return true
				}
			}
			return false
		})
	}
	cctx, cancel := context.WithCancel(context.Background())
	wait(context.Background(), "large", 800)
	wait(cctx, "cancelled", 700)
	wait(context.Background(), "small", 300)
	cancel()
	if r := <-done; r.name != "cancelled" || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("%s: %v; want the cancelled waiter to give up first", r.name, r.err)
	}
	m.release(500, false) // 400 used: the small one fits, the large one does not
	if r := <-done; r.name != "small" || r.err != nil {
		t.Fatalf("%s: %v; want the small waiter granted", r.name, r.err)
	}
	select {
	case r := <-done:
		t.Fatalf("%s granted with 700 of 1000 used", r.name)
	case <-time.After(50 * time.Millisecond):
	}
	m.release(700, false) // nothing left: the large one goes
	if r := <-done; r.name != "large" || r.err != nil {
		t.Fatalf("%s: %v; want the large waiter granted", r.name, r.err)
	}
	if m.mu.used != 800 || len(m.mu.waiters) != 0 {
		t.Fatalf("used %d with %d waiters; want 800 and none", m.mu.used, len(m.mu.waiters))
	}
}
