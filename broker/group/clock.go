package group

import "time"

// Clock is the coordinator's source of time. Session timeouts, rebalance
// timeouts, the initial rebalance delay and offset retention all go through
// it, so tests can drive them deterministically.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f on its own goroutine after d, unless the returned
	// Timer is stopped first. f must tolerate running after Stop returned
	// false; the coordinator guards every callback with a token.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it
	// did.
	Stop() bool
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
