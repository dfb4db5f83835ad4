package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tier/objstore"
)

// TestTinySegmentsManifestBytes is issue 12's first "done when": a quiet
// partition's history of thousands of tiny segments. Every upload
// rewrote the whole manifest in version 1 (about 1 MB of manifest per
// 16 KB segment at 4,000 segments); with pages, the manifest objects
// written, all of them kept by a long orphan grace, average under 64 KiB
// per uploaded segment, and every record still replays.
func TestTinySegmentsManifestBytes(t *testing.T) {
	const (
		n    = 33_000 // records of 100 bytes in segments of 1 KiB: over 4,000 segments
		size = 100
	)
	store := tierStores[0].open(t)
	b := tieredBroker(t, "", store, func(c *Config) {
		c.Tier.OrphanGrace = 24 * time.Hour
	})
	createTopic(t, testAdmin(t, b), "quiet", 1, map[string]*string{
		"segment.bytes":         ptr("1024"),
		"local.retention.bytes": ptr("1"),
	})
	produceKeyed(t, b, "quiet", n, size, kgo.ProducerBatchMaxBytes(1024))
	waitUploadedWithin(t, b, "quiet", 1, 4*time.Minute)

	p := b.partition("quiet", 0)
	ctx := context.Background()
	var segments, manifestBytes, manifests int64
	if err := store.List(ctx, p.bucketName().Prefix(), func(a objstore.Attrs) error {
		switch {
		case strings.Contains(a.Key, "/segments/"):
			segments++
		case strings.Contains(a.Key, "/manifests/"), strings.Contains(a.Key, "/pages/"):
			manifests++
			manifestBytes += a.Size
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d segment objects, %d manifest objects of %d bytes: %d bytes per segment", segments, manifests, manifestBytes, manifestBytes/max(segments, 1))
	if segments < 4000 {
		t.Fatalf("only %d segments uploaded: the test needs thousands", segments)
	}
	if per := manifestBytes / segments; per >= 64<<10 {
		t.Fatalf("%d bytes of manifest per uploaded segment, want under 64 KiB", per)
	}
	consumeExactlyOnce(t, b, "quiet", n, size)
}
