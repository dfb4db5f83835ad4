package tier

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"strata/segment"
	"strata/tier/format"
	"strata/tier/objstore"
)

// testSegments returns n closed segments of a fresh log, a few batches
// each.
func testSegments(t *testing.T, n int) []segment.SegmentInfo {
	t.Helper()
	l, err := segment.Open(t.TempDir(), segment.Config{SegmentBytes: 4 << 10, MaxBatchBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	value := make([]byte, 1000)
	for i := 0; ; i++ {
		if i%n == 0 { // listing loads every segment: not after each append
			segs, err := l.ClosedSegments(0)
			if err != nil {
				t.Fatal(err)
			}
			if len(segs) >= n {
				return segs[:n]
			}
		}
		value[0] = byte(i)
		if _, err := l.Append(testBatch(value), 0); err != nil {
			t.Fatal(err)
		}
	}
}

// clock is a settable test clock.
type clock struct{ now atomic.Pointer[time.Time] }

func newClock() *clock {
	c := &clock{}
	c.set(time.Now())
	return c
}
func (c *clock) set(t time.Time)     { c.now.Store(&t) }
func (c *clock) add(d time.Duration) { c.set(c.Now().Add(d)) }
func (c *clock) Now() time.Time      { return *c.now.Load() }

func openTier(t *testing.T, store objstore.Store, now func() time.Time) *Tier {
	t.Helper()
	tr, err := Open(Config{Store: store, CacheDir: t.TempDir(), ChunkBytes: 64 << 10, MemoryBytes: 1 << 20, CacheBytes: 1 << 20, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func newDirStore(t *testing.T) objstore.Store {
	t.Helper()
	s, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func manifestKeys(t *testing.T, store objstore.Store) []string {
	t.Helper()
	var keys []string
	if err := store.List(context.Background(), testTP.ManifestsPrefix(), func(a objstore.Attrs) error {
		keys = append(keys, a.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// checkCovers reads the partition's current manifest from the bucket, as
// a restarted broker or `strata tier` would, and fails unless it covers
// [from, end) and every object it lists is there.
func checkCovers(t *testing.T, store objstore.Store, from, end int64) *format.Root {
	t.Helper()
	ctx := context.Background()
	m, ok, err := ReadManifest(ctx, store, testTP)
	if err != nil || !ok {
		t.Fatalf("read the bucket's manifest: ok %v, %v", ok, err)
	}
	if m.LogStartOffset > from || m.EndOffset() < end {
		t.Fatalf("the bucket's manifest %s holds [%d, %d); published were [%d, %d)", m.Key(), m.LogStartOffset, m.EndOffset(), from, end)
	}
	for _, s := range allSegments(t, store, m) {
		if _, err := store.Stat(ctx, s.Key); err != nil {
			t.Fatalf("manifest %s lists a missing object: %v", m.Key(), err)
		}
	}
	return m
}

// TestOldEpochWriterCannotReplaceNewerManifest is issue 9 item 1: a
// deposed leader (epoch 3) that has seen the epoch-5 leader's manifest
// must not publish over it, and the epoch-5 leader's collector must then
// not delete the segment it published.
func TestOldEpochWriterCannotReplaceNewerManifest(t *testing.T) {
	ctx := context.Background()
	store := newDirStore(t)
	clk := newClock()
	segs := testSegments(t, 2)
	old, cur := openTier(t, store, clk.Now), openTier(t, store, clk.Now)

	if _, err := cur.Upload(ctx, testTP, segs[0], 5); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Manifest(ctx, testTP); err != nil { // the deposed leader has seen epoch 5
		t.Fatal(err)
	}
	m, err := cur.Upload(ctx, testTP, segs[1], 5)
	if err != nil {
		t.Fatal(err)
	}
	published := m.EndOffset()

	// The deposed leader applies retention (everything would go), and
	// uploads: it writes nothing.
	before := manifestKeys(t, store)
	if _, err := old.ApplyRetention(ctx, testTP, Retention{Bytes: 0, Age: -1, LeaderEpoch: 3}); !errors.Is(err, ErrFenced) {
		t.Fatalf("retention by the deposed leader: %v, want ErrFenced", err)
	}
	if _, err := old.Upload(ctx, testTP, segs[1], 3); !errors.Is(err, ErrFenced) {
		t.Fatalf("upload by the deposed leader: %v, want ErrFenced", err)
	}
	if after := manifestKeys(t, store); !slices.Equal(after, before) {
		t.Fatalf("the fenced writer changed the manifests: %q, then %q", before, after)
	}

	clk.add(24 * time.Hour)
	if _, err := cur.CollectOrphans(ctx, testTP, time.Hour); err != nil {
		t.Fatal(err)
	}
	checkCovers(t, store, 0, published)
	got, err := cur.Read(ctx, testTP, nil, segs[1].BaseOffset, 1<<20)
	if err != nil || len(got) == 0 {
		t.Fatalf("read the epoch-5 leader's last segment: %d bytes, %v", len(got), err)
	}
}

// TestCacheNeverMovesBack is issue 9 item 2 with a lagging LIST: the
// collector sees an older newest manifest than the tier published. Reads
// of published offsets must keep working, and the next upload must not
// reuse a published manifest key with other bytes.
func TestCacheNeverMovesBack(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	segs := testSegments(t, 3)
	tr := openTier(t, store, clk.Now)
	if _, err := tr.Upload(ctx, testTP, segs[0], 0); err != nil {
		t.Fatal(err)
	}
	var stale []objstore.Attrs
	if err := store.List(ctx, testTP.ManifestsPrefix(), func(a objstore.Attrs) error {
		stale = append(stale, a)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Upload(ctx, testTP, segs[1], 0); err != nil {
		t.Fatal(err)
	}
	// From now on the manifests' listing lags: it shows only the first.
	store.list = func(prefix string, as []objstore.Attrs) []objstore.Attrs {
		if prefix == testTP.ManifestsPrefix() {
			return stale
		}
		return as
	}
	clk.add(24 * time.Hour)
	if _, err := tr.CollectOrphans(ctx, testTP, time.Hour); !errors.Is(err, ErrCollectionSkipped) {
		t.Fatalf("collection over a lagging listing: %v, want ErrCollectionSkipped", err)
	}
	if got, err := tr.Read(ctx, testTP, nil, segs[1].BaseOffset, 1<<20); err != nil || len(got) == 0 {
		t.Fatalf("read of a published offset after a lagging listing: %d bytes, %v", len(got), err)
	}
	m, err := tr.Upload(ctx, testTP, segs[2], 0)
	if err != nil {
		t.Fatal(err)
	}
	if m.EndOffset() != segs[2].EndOffset {
		t.Fatalf("after the upload the tier holds up to %d, want %d", m.EndOffset(), segs[2].EndOffset)
	}
	if r := store.rewritten(); len(r) > 0 {
		t.Fatalf("manifest keys rewritten with other content: %q", r)
	}
	store.list = nil
	checkCovers(t, store, 0, segs[2].EndOffset)
}

// TestLostManifestReplyIsResolved is issue 9 item 2 with a manifest PUT
// that is applied but whose reply is lost: whatever the tier does next
// (retention here, then the upload again) must not write the same
// manifest key with other bytes, and nothing published may go missing.
func TestLostManifestReplyIsResolved(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	segs := testSegments(t, 3)
	tr := openTier(t, store, clk.Now)
	if _, err := tr.Upload(ctx, testTP, segs[0], 0); err != nil {
		t.Fatal(err)
	}
	var lost atomic.Bool
	lost.Store(true)
	store.afterWrite = func(key string) error {
		if strings.HasSuffix(key, ".manifest") && lost.CompareAndSwap(true, false) {
			return fmt.Errorf("test: reply lost: %w", objstore.ErrInjected)
		}
		return nil
	}
	_, uerr := tr.Upload(ctx, testTP, segs[1], 0)
	t.Logf("upload with a lost manifest reply: %v", uerr)
	if _, err := tr.ApplyRetention(ctx, testTP, Retention{Bytes: segs[1].Size + segs[2].Size, Age: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Upload(ctx, testTP, segs[1], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Upload(ctx, testTP, segs[2], 0); err != nil {
		t.Fatal(err)
	}
	if r := store.rewritten(); len(r) > 0 {
		t.Fatalf("manifest keys rewritten with other content: %q", r)
	}
	clk.add(24 * time.Hour)
	if _, err := tr.CollectOrphans(ctx, testTP, time.Hour); err != nil {
		t.Fatal(err)
	}
	checkCovers(t, store, segs[1].BaseOffset, segs[2].EndOffset)
}

// TestRetentionGraceCountsFromRemoval is issue 9 item 3: an object that
// retention drops from the manifest stays for the grace period counted
// from the drop, not from its upload, so a reader holding the previous
// manifest still finds it; once the grace has passed it goes, and no
// manifest is left in the bucket that names a deleted object.
func TestRetentionGraceCountsFromRemoval(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	segs := testSegments(t, 3)
	tr := openTier(t, store, clk.Now)
	for _, s := range segs {
		if _, err := tr.Upload(ctx, testTP, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	held, err := tr.Manifest(ctx, testTP) // a reader in the middle of a read
	if err != nil {
		t.Fatal(err)
	}
	heldSegs := allSegments(t, store, held)
	clk.add(48 * time.Hour) // the objects were uploaded long ago
	if _, err := tr.ApplyRetention(ctx, testTP, Retention{Bytes: segs[1].Size + segs[2].Size, Age: -1}); err != nil {
		t.Fatal(err)
	}
	clk.add(10 * time.Minute)
	if _, err := tr.CollectOrphans(ctx, testTP, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, s := range heldSegs {
		if _, err := store.Stat(ctx, s.Key); err != nil {
			t.Fatalf("10 minutes after retention, within the hour of grace, an object of the previous manifest is gone: %v", err)
		}
	}
	clk.add(time.Hour)
	if _, err := tr.CollectOrphans(ctx, testTP, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Stat(ctx, heldSegs[0].Key); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("the dropped object after its grace: %v, want it deleted", err)
	}
	checkEveryManifestComplete(t, store)
	checkCovers(t, store, segs[1].BaseOffset, segs[2].EndOffset)
}

// checkEveryManifestComplete fails if any manifest left in the bucket
// names an object that is gone: a reader that picks it up would fail.
func checkEveryManifestComplete(t *testing.T, store objstore.Store) {
	t.Helper()
	ctx := context.Background()
	for _, k := range manifestKeys(t, store) {
		m, err := GetManifest(ctx, store, k)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range allSegments(t, store, m) {
			if _, err := store.Stat(ctx, s.Key); err != nil {
				t.Fatalf("manifest %s is kept but names a missing object: %v", k, err)
			}
		}
	}
}

// TestReadsDoNotWaitForWriters is issue 9 item 5: a read of an offset
// already in the bucket is served while an upload of the same partition
// is stuck in its PUT and while the collector is stuck in a LIST.
func TestReadsDoNotWaitForWriters(t *testing.T) {
	ctx := context.Background()
	store := newHookStore(newDirStore(t), nil)
	segs := testSegments(t, 2)
	tr := openTier(t, store, nil)
	if _, err := tr.Upload(ctx, testTP, segs[0], 0); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	stuck := make(chan string, 2)
	var armed atomic.Bool
	armed.Store(true)
	wait := func(ctx context.Context, what string) error {
		stuck <- what
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	store.beforeWrite = func(ctx context.Context, key string) error {
		if armed.Load() && strings.HasSuffix(key, ".seg") {
			return wait(ctx, "upload")
		}
		return nil
	}
	store.list = func(prefix string, as []objstore.Attrs) []objstore.Attrs {
		if armed.Load() && prefix == testTP.SegmentsPrefix() {
			wait(context.Background(), "collector")
		}
		return as
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(release)
	wg.Go(func() {
		if _, err := tr.Upload(ctx, testTP, segs[1], 0); err != nil {
			t.Errorf("upload: %v", err)
		}
	})
	wg.Go(func() {
		if _, err := tr.CollectOrphans(ctx, testTP, time.Hour); err != nil {
			t.Errorf("collect: %v", err)
		}
	})
	for i := range 2 {
		select {
		case what := <-stuck:
			t.Logf("%s is stuck in the store", what)
		case <-time.After(30 * time.Second):
			// The other writer is queued behind the stuck one: the
			// collector and uploads share a lock.
			t.Errorf("after 30s only %d of 2 writers reached the store", i)
		}
	}
	for _, read := range []struct {
		name string
		fn   func(ctx context.Context) error
	}{
		{"Read", func(ctx context.Context) error {
			got, err := tr.Read(ctx, testTP, nil, segs[0].BaseOffset, 1<<20)
			if err == nil && len(got) == 0 {
				err = errors.New("no bytes")
			}
			return err
		}},
		{"OffsetForTimestamp", func(ctx context.Context) error {
			_, _, ok, err := tr.OffsetForTimestamp(ctx, testTP, 0)
			if err == nil && !ok {
				err = errors.New("not found")
			}
			return err
		}},
		{"Manifest", func(ctx context.Context) error {
			_, err := tr.Manifest(ctx, testTP)
			return err
		}},
	} {
		done := make(chan error, 1)
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			done <- read.fn(rctx)
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s of an uploaded offset while writers are stuck: %v", read.name, err)
			}
		case <-time.After(30 * time.Second):
			armed.Store(false)
			t.Fatalf("%s with a 5s deadline still blocked after 30s behind the stuck writers", read.name)
		}
	}
	armed.Store(false)
}

// TestCollectorSparesTheUploadUnderWay: a collection that runs between an
// upload's segment PUT and its manifest publication (the collector no
// longer waits for writers) does not take the new object for an orphan,
// even with no grace at all; the published manifest's object is there.
func TestCollectorSparesTheUploadUnderWay(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	segs := testSegments(t, 2)
	tr := openTier(t, store, clk.Now)
	if _, err := tr.Upload(ctx, testTP, segs[0], 0); err != nil {
		t.Fatal(err)
	}
	collected := make(chan error, 1)
	var once sync.Once
	store.beforeWrite = func(ctx context.Context, key string) error {
		if strings.HasSuffix(key, ".manifest") {
			once.Do(func() {
				clk.add(time.Hour) // the segment object is now an hour old
				_, err := tr.CollectOrphans(ctx, testTP, 0)
				collected <- err
			})
		}
		return nil
	}
	if _, err := tr.Upload(ctx, testTP, segs[1], 0); err != nil {
		t.Fatal(err)
	}
	if err := <-collected; err != nil {
		t.Fatal(err)
	}
	checkCovers(t, store, segs[0].BaseOffset, segs[1].EndOffset)
}

// TestUnknownPublishResolvedBeforeNextWrite is issue 9 item 2's last
// clause in its hard case: a manifest's reply is lost and reading it back
// fails too, so the outcome stays unknown. The next write settles it
// first; no manifest key is ever written twice with different content,
// the collector keeps the segment meanwhile, and the bucket's manifest
// covers everything published.
func TestUnknownPublishResolvedBeforeNextWrite(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	segs := testSegments(t, 3)
	tr := openTier(t, store, clk.Now)
	if _, err := tr.Upload(ctx, testTP, segs[0], 0); err != nil {
		t.Fatal(err)
	}
	var lostKey atomic.Pointer[string]
	var lost, unreadable atomic.Bool
	lost.Store(true)
	store.afterWrite = func(key string) error {
		if strings.HasSuffix(key, ".manifest") && lost.CompareAndSwap(true, false) {
			lostKey.Store(&key)
			unreadable.Store(true)
			return fmt.Errorf("test: reply lost: %w", objstore.ErrInjected)
		}
		return nil
	}
	store.get = func(key string) error {
		if k := lostKey.Load(); k != nil && key == *k && unreadable.Load() {
			return fmt.Errorf("test: read-back failed: %w", objstore.ErrInjected)
		}
		return nil
	}
	if _, err := tr.Upload(ctx, testTP, segs[1], 0); err == nil {
		t.Fatal("upload whose manifest reply was lost and could not be read back reported success")
	}
	// Meanwhile the collector keeps what the unknown version names (it
	// may fail to read that version too, and then deletes nothing).
	clk.add(24 * time.Hour)
	n, err := tr.CollectOrphans(ctx, testTP, time.Hour)
	t.Logf("collection while the outcome is unknown: %d deleted, %v", n, err)
	unreadable.Store(false)
	if _, err := tr.Upload(ctx, testTP, segs[1], 0); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Upload(ctx, testTP, segs[2], 0); err != nil {
		t.Fatal(err)
	}
	if r := store.rewritten(); len(r) > 0 {
		t.Fatalf("manifest keys rewritten with other content: %q", r)
	}
	clk.add(24 * time.Hour)
	if _, err := tr.CollectOrphans(ctx, testTP, time.Hour); err != nil {
		t.Fatal(err)
	}
	checkCovers(t, store, segs[0].BaseOffset, segs[2].EndOffset)
}
