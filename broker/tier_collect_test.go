package broker

import (
	"strings"
	"testing"
	"time"
)

// shortOrphanGrace sets an orphan grace below the bound a broker
// accepts, for a test that watches the collector work within seconds.
func shortOrphanGrace(c *Config, grace time.Duration) {
	c.Tier.OrphanGrace = grace
	c.Tier.TestShortOrphanGrace = true
}

// TestOrphanGraceShorterThanAPassIsRefused: issue 20 item 8. A grace
// shorter than an upload pass lets a collector delete objects a writer it
// does not know of (a deposed leader) is about to publish; the broker
// refuses to start with one, in one line naming the bound.
func TestOrphanGraceShorterThanAPassIsRefused(t *testing.T) {
	cfg := Config{DataDir: t.TempDir(), Tier: TierConfig{OrphanGrace: time.Minute}}.WithDefaults()
	err := cfg.Validate()
	if err == nil {
		t.Fatal("an orphan grace of 1m was accepted")
	}
	if msg := err.Error(); !strings.Contains(msg, "orphan grace 1m0s") || !strings.Contains(msg, MinOrphanGrace.String()) || strings.Contains(msg, "\n") {
		t.Fatalf("error %q: want one line naming the grace and the bound %s", msg, MinOrphanGrace)
	}
	cfg.Tier.OrphanGrace = MinOrphanGrace
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the bound itself is refused: %v", err)
	}
	if def := (Config{DataDir: t.TempDir()}).WithDefaults(); def.Validate() != nil {
		t.Fatalf("the default orphan grace %s is refused: %v", def.Tier.OrphanGrace, def.Validate())
	}
}
