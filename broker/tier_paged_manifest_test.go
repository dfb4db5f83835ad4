package broker

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tier/format"
	"strata/tier/objstore"
)

// TestTinySegmentsManifestBytes is issue 12's first "done when": a quiet
// partition's history of thousands of tiny segments. Every upload
// rewrote the whole manifest in version 1 (about 1 MB of manifest per
// 16 KB segment at 4,000 segments); with pages, the manifest objects
// written, all of them kept by a long orphan grace, average under 64 KiB
// per uploaded segment, and every record still replays. After a restart
// the first fetches, at offset 0 and at the bucket's end, read a page per
// level of the manifest, not all of its pages.
func TestTinySegmentsManifestBytes(t *testing.T) {
	const size = 100
	// Records of 100 bytes in segments of 1 KiB: over 4,000 segments.
	// -short (the race detector's pass) takes a quarter of the history,
	// still over 1,000 segments in two levels of pages.
	n, minSegments := 33_000, int64(4000)
	if testing.Short() {
		n, minSegments = 8_500, 1000
	}
	store := tierStores[0].open(t)
	dir := t.TempDir()
	keep := func(c *Config) { c.Tier.OrphanGrace = 24 * time.Hour }
	b := tieredBroker(t, dir, store, keep)
	createTopic(t, testAdmin(t, b), "quiet", 1, map[string]*string{
		"segment.bytes":         ptr("1024"),
		"local.retention.bytes": ptr("1"),
	})
	produceKeyed(t, b, "quiet", n, size, kgo.ProducerBatchMaxBytes(1024))
	waitUploadedWithin(t, b, "quiet", 1, 4*time.Minute)

	p := b.partition("quiet", 0)
	ctx := context.Background()
	var segments, manifestBytes, manifests int64
	if err := store.List(ctx, p.BucketName().Prefix(), func(a objstore.Attrs) error {
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
	if segments < minSegments {
		t.Fatalf("only %d segments uploaded: the test needs thousands", segments)
	}
	if per := manifestBytes / segments; per >= 64<<10 {
		t.Fatalf("%d bytes of manifest per uploaded segment, want under 64 KiB", per)
	}
	consumeExactlyOnce(t, b, "quiet", n, size)

	// The restart, over a store that counts the page GETs.
	m, err := b.tier.Manifest(ctx, p.BucketName())
	if err != nil {
		t.Fatal(err)
	}
	pages, levels := 0, 0
	if err := m.Walk(ctx, b.tier.Pages(), func(ref *format.PageRef, _ *format.RemoteSegment) error {
		if ref != nil {
			pages++
			levels = max(levels, ref.Level+1)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	remoteEnd := m.EndOffset()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// The collector's first pass after a restart walks every page of
	// every live manifest; it is held at its first LIST so that only the
	// fetches' page reads are counted.
	counted := &pageGetCounter{Store: store, hold: make(chan struct{})}
	defer close(counted.hold)
	b = tieredBroker(t, dir, counted, keep)
	for _, o := range []int64{0, remoteEnd - 1} {
		cl := testClient(t, b, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"quiet": {0: kgo.NewOffset().At(o)}}))
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var got []*kgo.Record
		for len(got) == 0 && fctx.Err() == nil {
			fs := cl.PollFetches(fctx)
			fs.EachError(func(_ string, _ int32, err error) { t.Logf("fetch at %d: %v", o, err) })
			got = append(got, fs.Records()...)
		}
		cancel()
		if len(got) == 0 || got[0].Offset != o {
			t.Fatalf("first fetch at %d after the restart: %d records", o, len(got))
		}
	}
	if g := counted.pageGets.Load(); g > int64(2*levels) || g >= int64(pages) {
		t.Fatalf("the first fetches after the restart read %d pages; the manifest has %d pages on %d levels", g, pages, levels)
	}
	t.Logf("after the restart the first fetches at both ends read %d of %d pages (%d levels)", counted.pageGets.Load(), pages, levels)
}

// pageGetCounter counts the GETs of manifest pages, and holds listings of
// segment objects (which only the collector makes) until hold is closed.
type pageGetCounter struct {
	objstore.Store
	pageGets atomic.Int64
	hold     chan struct{}
}

func (c *pageGetCounter) List(ctx context.Context, prefix string, fn func(objstore.Attrs) error) error {
	if strings.HasSuffix(prefix, "/segments/") {
		select {
		case <-c.hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return c.Store.List(ctx, prefix, fn)
}

func (c *pageGetCounter) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if strings.Contains(key, "/pages/") {
		c.pageGets.Add(1)
	}
	return c.Store.GetRange(ctx, key, off, n)
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
		m, err := b.tier.Manifest(ctx, p.BucketName())
		return err == nil && m.Totals().Segments <= 4
	})
	m, _ := b.tier.Manifest(ctx, p.BucketName())
	// Every object ever uploaded is still there: the replaced ones wait
	// out the orphan grace.
	uploaded := 0
	if err := store.List(ctx, p.BucketName().SegmentsPrefix(), func(objstore.Attrs) error { uploaded++; return nil }); err != nil {
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
