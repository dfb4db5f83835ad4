package broker

import (
	"sync"
	"time"
)

// logLimiter lets a line through once per interval per key, a client's
// host, and counts the lines it held back. A client that fails in a
// loop (a password guesser, a flood of oversized frames) must neither
// fill the log nor spend the broker's time writing it: Kafka logs each
// failed authentication, which under CVE-2022-34917's kind of flood is
// thousands of lines a second.
type logLimiter struct {
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	seen map[string]*heldLines
}

// heldLines is one key's last line let through and the count since.
type heldLines struct {
	last time.Time
	held int
}

// logLimiterKeys bounds the limiter's memory: past it, keys older than
// the interval are dropped, and all of them if none is (a few extra
// lines then, never unbounded growth).
const logLimiterKeys = 4096

func newLogLimiter(interval time.Duration) *logLimiter {
	return &logLimiter{interval: interval, now: time.Now, seen: make(map[string]*heldLines)}
}

// allow reports whether a line for key may be logged now and, if so,
// how many were held back since the last one.
func (l *logLimiter) allow(key string) (ok bool, held int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if h, seen := l.seen[key]; seen {
		if now.Sub(h.last) < l.interval {
			h.held++
			return false, 0
		}
		held, h.held, h.last = h.held, 0, now
		return true, held
	}
	if len(l.seen) >= logLimiterKeys {
		for k, h := range l.seen {
			if now.Sub(h.last) >= l.interval {
				delete(l.seen, k)
			}
		}
		if len(l.seen) >= logLimiterKeys {
			clear(l.seen)
		}
	}
	l.seen[key] = &heldLines{last: now}
	return true, 0
}
