package quota

import "time"

// bucket is one measurement: Kafka's TokenBucket (KIP-599). Credits
// refill at the quota per second up to a burst of the quota over all the
// windows (Samples × Window); what a client uses is taken out, down below
// zero; a client in debt waits until the refill has paid it back.
type bucket struct {
	credits float64
	updated time.Time // the last refill
	last    time.Time // the last record, for expiry
}

// burst is how much a bucket holds when full.
func burst(cfg *Config, quota float64) float64 {
	return quota * float64(cfg.Samples) * cfg.Window.Seconds()
}

// newBucket returns a full bucket: a client that was not measured before
// has used nothing.
func newBucket(cfg *Config, quota float64, now time.Time) *bucket {
	return &bucket{credits: burst(cfg, quota), updated: now, last: now}
}

// refill adds the credits earned since the last refill, at quota per
// second, up to the burst. A quota changed meanwhile applies from now:
// the credits held are kept, capped at the new burst.
func (b *bucket) refill(cfg *Config, quota float64, now time.Time) {
	if d := now.Sub(b.updated); d > 0 {
		b.credits += quota * d.Seconds()
		b.updated = now
	}
	b.credits = min(b.credits, burst(cfg, quota))
}

// take records value at now and returns the debt left: how far below
// zero the credits are, or zero.
func (b *bucket) take(cfg *Config, quota, value float64, now time.Time) (debt float64) {
	b.refill(cfg, quota, now)
	b.credits = min(b.credits-value, burst(cfg, quota))
	b.last = now
	return max(-b.credits, 0)
}
