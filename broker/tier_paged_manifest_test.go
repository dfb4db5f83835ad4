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

// TestSmallSegmentsMerged is issue 12 item 4 through the broker: a topic
// whose segments roll young (as idle uploads make them on a quiet
// partition) leaves hundreds of tiny objects in the bucket; the upload
// loop merges adjacent ones into objects of up to segment.bytes, and a
// consumer from the start still reads every record exactly once.
func TestSmallSegmentsMerged(t *testing.T) {
	const (
		n    = 3000
		size = 100
	)
	store := tierStores[0].open(t)
	b := tieredBroker(t, "", store)
	createTopic(t, testAdmin(t, b), "idle", 1, map[string]*string{
		"segment.bytes":         ptr("262144"),
		"segment.ms":            ptr("1"),
		"local.retention.bytes": ptr("1"),
	})
	produceKeyed(t, b, "idle", n, size, kgo.ProducerBatchMaxBytes(2048))
	waitUploaded(t, b, "idle", 1)
	p := b.partition("idle", 0)
	ctx := context.Background()
	waitFor(t, time.Minute, "small segments merged", func() bool {
		m, err := b.tier.Manifest(ctx, p.bucketName())
		return err == nil && m.Totals().Segments <= 4
	})
	m, _ := b.tier.Manifest(ctx, p.bucketName())
	// Every object ever uploaded is still there: the replaced ones wait
	// out the orphan grace.
	uploaded := 0
	if err := store.List(ctx, p.bucketName().SegmentsPrefix(), func(objstore.Attrs) error { uploaded++; return nil }); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d segment objects uploaded, %d segments after merging", uploaded, m.Totals().Segments)
	if uploaded < 50 {
		t.Fatalf("only %d segments uploaded: nothing much to merge", uploaded)
	}
	for _, s := range remoteSegments(t, b.tier, m) {
		if s.Log.Len > 262144 {
			t.Fatalf("merged segment %d holds %d bytes of log, above segment.bytes", s.BaseOffset, s.Log.Len)
		}
	}
	consumeExactlyOnce(t, b, "idle", n, size)
}
