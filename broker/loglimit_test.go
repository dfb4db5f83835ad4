package broker

import (
	"fmt"
	"testing"
	"time"
)

func TestLogLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLogLimiter(10 * time.Second)
	l.now = func() time.Time { return now }
	steps := []struct {
		advance time.Duration
		key     string
		ok      bool
		held    int
	}{
		{0, "10.0.0.1", true, 0},
		{time.Second, "10.0.0.1", false, 0},
		{time.Second, "10.0.0.1", false, 0},
		{0, "10.0.0.2", true, 0}, // another host is its own key
		{8 * time.Second, "10.0.0.1", true, 2},
		{time.Second, "10.0.0.1", false, 0},
		{10 * time.Second, "10.0.0.1", true, 1},
		{10 * time.Second, "10.0.0.1", true, 0},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		ok, held := l.allow(s.key)
		if ok != s.ok || held != s.held {
			t.Errorf("step %d (%s): allow = %v, %d held; want %v, %d", i, s.key, ok, held, s.ok, s.held)
		}
	}
}

// TestLogLimiterBounded: a flood from ever new hosts keeps at most
// logLimiterKeys keys.
func TestLogLimiterBounded(t *testing.T) {
	l := newLogLimiter(time.Minute)
	for i := range 3 * logLimiterKeys {
		l.allow(fmt.Sprintf("host-%d", i))
		if len(l.seen) > logLimiterKeys {
			t.Fatalf("%d keys after %d hosts, want at most %d", len(l.seen), i+1, logLimiterKeys)
		}
	}
}
