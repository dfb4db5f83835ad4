package tier

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/segment"

	"strata/tier/format"
	"strata/tier/objstore"
)

// allSegments lists every segment of m, reading every page from store
// afresh (nothing cached, so a page gone from the bucket fails the test).
func allSegments(t testing.TB, store objstore.Store, m *format.Root) []format.RemoteSegment {
	t.Helper()
	segs, err := AllSegments(context.Background(), NewPageSource(store, 0), m)
	if err != nil {
		t.Fatalf("manifest %s: %v", m.Key(), err)
	}
	return segs
}

// writeCounter passes every call to a store and adds up the bytes written
// (Put and Create) under manifests/ and pages/.
type writeCounter struct {
	objstore.Store
	manifestBytes atomic.Int64
}

func (w *writeCounter) count(key string, size int64) {
	if strings.Contains(key, "/manifests/") || strings.Contains(key, "/pages/") {
		w.manifestBytes.Add(size)
	}
}

func (w *writeCounter) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	w.count(key, size)
	return w.Store.Put(ctx, key, r, size)
}

func (w *writeCounter) Create(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	w.count(key, size)
	return w.Store.Create(ctx, key, r, size)
}

// tenRecords is a batch of records base..base+9, stamped ts.
func tenRecords(base, ts int64) []byte {
	vals := make([][]byte, 10)
	for i := range vals {
		vals[i] = fmt.Appendf(nil, "record %d", base+int64(i))
	}
	b := timedBatch(ts, vals...)
	binary.BigEndian.PutUint64(b, uint64(base)) // outside the batch CRC
	return b
}

// segmentEntry returns the object and manifest entry of a segment of one
// batch of ten records from base, stamped ts, uploaded at epoch 0.
func segmentEntry(t testing.TB, base, ts int64) ([]byte, format.RemoteSegment) {
	log := tenRecords(base, ts)
	var obj bytes.Buffer
	f, crc, err := format.WriteSegmentObject(&obj, format.SegmentParts{
		Log: bytes.NewReader(log), LogSize: int64(len(log)),
		BaseOffset: base, LastOffset: base + 9, FirstTimestamp: ts, MaxTimestamp: ts, RecordCount: 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	key := format.SegmentKey{TopicPartition: testTP, BaseOffset: base, UID: format.NewUID()}.String()
	return obj.Bytes(), f.Segment(key, crc)
}

// localSegment writes a closed local segment of one batch of ten records
// from base, as the log hands them to Upload.
func localSegment(t testing.TB, dir string, base, ts int64) segment.SegmentInfo {
	log := tenRecords(base, ts)
	p := filepath.Join(dir, fmt.Sprintf("%020d", base))
	for ext, b := range map[string][]byte{".log": log, ".index": nil, ".timeindex": nil} {
		if err := os.WriteFile(p+ext, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return segment.SegmentInfo{BaseOffset: base, EndOffset: base + 10, Size: int64(len(log)), MaxTimestamp: ts,
		LogPath: p + ".log", IndexPath: p + ".index", TimeIndexPath: p + ".timeindex"}
}

// TestHundredThousandSegments is the second "done when": a
// partition of 100,000 remote segments, built through the format and the
// object store. After a restart the first reads at offset 0 and at the end
// need the root and one page per level, not the 3,000-odd pages; every
// further upload writes a bounded number of manifest bytes, whatever the
// history; and lookups all over the history keep the page cache within its
// bound.
func TestHundredThousandSegments(t *testing.T) {
	const (
		n        = 100_000
		maxBytes = 64 << 10 // manifest bytes one upload may write
		cacheCap = 256 << 10
	)
	ctx := context.Background()
	dir := newDirStore(t)
	entries := make([]format.RemoteSegment, n)
	for i := range entries {
		obj, e := segmentEntry(t, int64(i)*10, 1_700_000_000_000+int64(i))
		entries[i] = e
		if i == 0 || i == n-1 { // the objects the reads below need
			if err := dir.Put(ctx, e.Key, bytes.NewReader(obj), int64(len(obj))); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A version 1 list paged in one change: the root and every page.
	v1 := &format.Root{TopicPartition: testTP, Tail: entries[:n-1], V1: true}
	ch, err := v1.Append(entries[n-1], 0, format.Paging{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ch.Pages {
		if err := dir.Create(ctx, p.Ref.Key, bytes.NewReader(p.Data), int64(len(p.Data))); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := format.EncodeRoot(ch.Root)
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Create(ctx, ch.Root.Key(), bytes.NewReader(raw), int64(len(raw))); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d segments: root of %d bytes, %d pages", n, len(raw), len(ch.Pages))

	// The restart: a fresh tier over the bucket.
	rec := &recordingStore{Store: dir}
	counter := &writeCounter{Store: rec}
	tr, err := Open(Config{Store: counter, CacheDir: t.TempDir(), ChunkBytes: 64 << 10, MemoryBytes: 1 << 20, CacheBytes: 1 << 20, ManifestCacheBytes: cacheCap})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	pageGets := func() int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		k := 0
		for _, g := range rec.gets {
			if strings.Contains(g.key, "/pages/") {
				k++
			}
		}
		return k
	}
	t0 := time.Now()
	m, err := tr.Manifest(ctx, testTP)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("partition opened after the restart in %v", time.Since(t0))
	if got := pageGets(); got != 0 {
		t.Fatalf("opening the partition read %d pages", got)
	}
	levels := 0
	for _, p := range m.Pages {
		levels = max(levels, p.Level+1)
	}
	for _, o := range []int64{0, n*10 - 1} {
		t0 := time.Now()
		b, err := tr.Read(ctx, testTP, nil, o, 1<<20)
		t.Logf("first read at %d after the restart: %v", o, time.Since(t0))
		if err != nil || len(b) == 0 || int64(binary.BigEndian.Uint64(b)) != o/10*10 {
			t.Fatalf("read at %d: %d bytes, %v", o, len(b), err)
		}
	}
	if got := pageGets(); got > 2*levels {
		t.Fatalf("the first reads at both ends read %d pages; %d levels", got, levels)
	}

	// Further uploads: each writes the root and at most one page.
	local := t.TempDir()
	wrotePage := false
	for i := range 2 * format.DefaultPaging.PageSegments {
		base := int64(n+i) * 10
		before := counter.manifestBytes.Load()
		pagesBefore := countKeys(t, dir, testTP.PagesPrefix())
		if _, err := tr.Upload(ctx, testTP, localSegment(t, local, base, 1_800_000_000_000), 0); err != nil {
			t.Fatal(err)
		}
		if w := counter.manifestBytes.Load() - before; w > maxBytes {
			t.Fatalf("upload %d wrote %d manifest bytes, more than %d", i, w, maxBytes)
		}
		if countKeys(t, dir, testTP.PagesPrefix()) > pagesBefore {
			wrotePage = true
		}
	}
	if !wrotePage {
		t.Fatal("no upload wrote a page: the bound was not tested with one")
	}

	// Lookups all over the history: the cache stays within its bound.
	m, _ = tr.Manifest(ctx, testTP)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		o := rng.Int64N(m.EndOffset())
		s, ok, err := m.Find(ctx, tr.Pages(), o)
		if err != nil || !ok || s.BaseOffset != o/10*10 {
			t.Fatalf("find %d: %d %v %v", o, s.BaseOffset, ok, err)
		}
	}
	st := tr.ManifestCacheStats()
	if st.Bytes > cacheCap || st.Misses <= int64(st.Pages) {
		t.Fatalf("page cache: %+v, bound %d", st, cacheCap)
	}
	t.Logf("page cache after 300 lookups: %+v", st)
}

func countKeys(t testing.TB, store objstore.Store, prefix string) int {
	n := 0
	if err := store.List(context.Background(), prefix, func(objstore.Attrs) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// smallPages makes every other upload write a page, and every fourth fold
// pages into an index page.
var smallPages = format.Paging{PageSegments: 2, Fanout: 2}

func openPagedTier(t *testing.T, store objstore.Store, now func() time.Time) *Tier {
	t.Helper()
	return openTierWith(t, store, now, smallPages)
}

// openTierWith is openTier with manifests of shape pg.
func openTierWith(t *testing.T, store objstore.Store, now func() time.Time, pg format.Paging) *Tier {
	t.Helper()
	tr, err := Open(Config{Store: store, CacheDir: t.TempDir(), ChunkBytes: 64 << 10, MemoryBytes: 1 << 20, CacheBytes: 1 << 20, Now: now, Paging: pg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// readAll reads [from, end) through a fresh tier over store and fails
// unless every offset comes back, in order.
func readAll(t *testing.T, store objstore.Store, from, end int64) {
	t.Helper()
	ctx := context.Background()
	tr := openTier(t, store, time.Now)
	for o := from; o < end; {
		b, err := tr.Read(ctx, testTP, nil, o, 1<<20)
		if err != nil || len(b) == 0 {
			t.Fatalf("read at %d: %d bytes, %v", o, len(b), err)
		}
		for len(b) > 0 {
			h, err := segment.ParseBatchHeader(b)
			if err != nil || h.BaseOffset > o || h.LastOffset() < o {
				t.Fatalf("read at %d: batch [%d, %d], %v", o, h.BaseOffset, h.LastOffset(), err)
			}
			o = h.LastOffset() + 1
			b = b[h.Size():]
		}
	}
}

// TestCrashBetweenPageAndRoot: the pages of a change are stored before
// its root. A writer that dies in between leaves pages no root names:
// the bucket's manifest is the previous one, whole and contiguous, the
// next upload goes on from it, and the collector removes the orphan
// pages after the grace, nothing else.
func TestCrashBetweenPageAndRoot(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	segs := testSegments(t, 12)
	tr := openPagedTier(t, store, clk.Now)
	for _, s := range segs[:5] {
		if _, err := tr.Upload(ctx, testTP, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	// The sixth upload fills the tail: it writes a page, then its root,
	// which never lands (the writer is gone).
	pagesBefore := countKeys(t, store, testTP.PagesPrefix())
	store.beforeWrite = func(_ context.Context, key string) error {
		if strings.HasSuffix(key, ".manifest") {
			return errors.New("the broker died")
		}
		return nil
	}
	if _, err := tr.Upload(ctx, testTP, segs[5], 0); err == nil {
		t.Fatal("upload succeeded without its root")
	}
	store.beforeWrite = nil
	if countKeys(t, store, testTP.PagesPrefix()) <= pagesBefore {
		t.Fatal("the failed upload wrote no page: the test did not test a crash after one")
	}
	checkCovers(t, store, 0, segs[4].EndOffset)
	checkEveryManifestComplete(t, store)

	// A new leader (fresh tier) carries on from the bucket.
	clk.add(time.Minute)
	tr2 := openPagedTier(t, store, clk.Now)
	for _, s := range segs[5:] {
		if _, err := tr2.Upload(ctx, testTP, s, 1); err != nil {
			t.Fatal(err)
		}
	}
	clk.add(2 * time.Hour)
	if _, err := tr2.CollectOrphans(ctx, testTP, time.Hour); err != nil {
		t.Fatal(err)
	}
	m := checkCovers(t, store, 0, segs[11].EndOffset)
	checkEveryManifestComplete(t, store)
	if got, want := countKeys(t, store, testTP.PagesPrefix()), len(referencedPages(t, store, m)); got != want {
		t.Fatalf("%d pages in the bucket after collection, the manifest references %d", got, want)
	}
	readAll(t, store, 0, segs[11].EndOffset)
}

// referencedPages returns the keys of every page m references.
func referencedPages(t *testing.T, store objstore.Store, m *format.Root) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	if err := m.Walk(context.Background(), NewPageSource(store, 0), func(ref *format.PageRef, _ *format.RemoteSegment) error {
		if ref != nil {
			keys[ref.Key] = true
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestRetentionAcrossPages: retention drops whole pages and rewrites at
// most the first; a reader holding the previous manifest still finds
// every object within the grace; after it, the collector deletes the
// dropped segments and pages and nothing the manifest references.
func TestRetentionAcrossPages(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	segs := testSegments(t, 24)
	tr := openPagedTier(t, store, clk.Now)
	for _, s := range segs {
		if _, err := tr.Upload(ctx, testTP, s, 0); err != nil {
			t.Fatal(err)
		}
	}
	held, _ := tr.Manifest(ctx, testTP)
	if len(held.Pages) == 0 || held.Pages[0].Level == 0 {
		t.Fatalf("24 segments in pages of 2, fanout 2: want index pages, got %+v", held.Pages)
	}
	heldSegs := allSegments(t, store, held)
	heldPages := referencedPages(t, store, held)
	// Keep the last 9 segments: the cut is inside a leaf under an index
	// page.
	var keep int64
	for _, s := range heldSegs[len(heldSegs)-9:] {
		keep += s.Size
	}
	pagesBefore := countKeys(t, store, testTP.PagesPrefix())
	start, err := tr.ApplyRetention(ctx, testTP, Retention{Bytes: keep, Age: -1})
	if err != nil || start != heldSegs[len(heldSegs)-9].BaseOffset {
		t.Fatalf("retention: start %d, %v; want %d", start, err, heldSegs[len(heldSegs)-9].BaseOffset)
	}
	if n := countKeys(t, store, testTP.PagesPrefix()) - pagesBefore; n > 1 {
		t.Fatalf("retention wrote %d pages", n)
	}
	clk.add(10 * time.Minute)
	if _, err := tr.CollectOrphans(ctx, testTP, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, s := range heldSegs {
		if _, err := store.Stat(ctx, s.Key); err != nil {
			t.Fatalf("within the grace, an object of the previous manifest is gone: %v", err)
		}
	}
	for k := range heldPages {
		if _, err := store.Stat(ctx, k); err != nil {
			t.Fatalf("within the grace, a page of the previous manifest is gone: %v", err)
		}
	}
	clk.add(2 * time.Hour)
	if _, err := tr.CollectOrphans(ctx, testTP, time.Hour); err != nil {
		t.Fatal(err)
	}
	m := checkCovers(t, store, start, segs[23].EndOffset)
	checkEveryManifestComplete(t, store)
	if got, want := countKeys(t, store, testTP.SegmentsPrefix()), len(allSegments(t, store, m)); got != want {
		t.Fatalf("%d segment objects after collection, the manifest lists %d", got, want)
	}
	if got, want := countKeys(t, store, testTP.PagesPrefix()), len(referencedPages(t, store, m)); got != want {
		t.Fatalf("%d pages after collection, the manifest references %d", got, want)
	}
	readAll(t, store, start, segs[23].EndOffset)
}

// TestV1BucketUpgrade: a bucket written by the version 1 code (the
// fixture in format/testdata) is read record for record; the first upload
// after the upgrade writes a version 2 root, and then everything still
// reads, the old records and the new.
func TestV1BucketUpgrade(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("format/testdata/v1bucket")); err != nil {
		t.Fatal(err)
	}
	store, err := objstore.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tp := format.TopicPartition{Topic: "fixture", TopicID: [16]byte{15: 1}, Partition: 0}
	check := func(tr *Tier, from, end int64, value func(o int64) string) {
		t.Helper()
		for o := from; o < end; {
			b, err := tr.Read(ctx, tp, nil, o, 1<<20)
			if err != nil || len(b) == 0 {
				t.Fatalf("read at %d: %d bytes, %v", o, len(b), err)
			}
			for _, r := range records(t, b) {
				if r.offset != o || string(r.value) != value(o) {
					t.Fatalf("offset %d: record %d %q, want %q", o, r.offset, r.value, value(o))
				}
				o++
			}
		}
	}
	fixture := func(o int64) string { return fmt.Sprintf("v1 fixture record %d", o) }
	tr := openTier(t, store, time.Now)
	m, err := tr.Manifest(ctx, tp)
	if err != nil || !m.V1 || m.LogStartOffset != 32 || m.EndOffset() != 80 {
		t.Fatalf("fixture manifest: %+v, %v", m, err)
	}
	check(tr, 32, 80, fixture)

	// The first upload after the upgrade, by the leader of epoch 1.
	seg := localSegment(t, t.TempDir(), 80, 1_760_000_100_000)
	if _, err := tr.Upload(ctx, tp, seg, 1); err != nil {
		t.Fatal(err)
	}
	m, ok, err := ReadManifest(ctx, store, tp)
	if err != nil || !ok || m.V1 || m.Seq != 7 || m.LogStartOffset != 32 || m.EndOffset() != 90 {
		t.Fatalf("after the first upload the bucket's manifest is %+v, %v", m, err)
	}
	check(openTier(t, store, time.Now), 32, 90, func(o int64) string {
		if o < 80 {
			return fixture(o)
		}
		return fmt.Sprintf("record %d", o)
	})
}

type record struct {
	offset int64
	value  []byte
}

// records decodes the records of uncompressed batches b.
func records(t *testing.T, b []byte) []record {
	t.Helper()
	var out []record
	for len(b) > 0 {
		h, err := segment.ParseBatchHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b[:h.Size()]); err != nil {
			t.Fatal(err)
		}
		recs := rb.Records
		for range rb.NumRecords {
			l, n := binary.Varint(recs)
			var r kmsg.Record
			if n <= 0 || r.ReadFrom(recs[:n+int(l)]) != nil {
				t.Fatal("bad record")
			}
			out = append(out, record{rb.FirstOffset + int64(r.OffsetDelta), r.Value})
			recs = recs[n+int(l):]
		}
		b = b[h.Size():]
	}
	return out
}

// TestMergeSmallSegments is issue 12 item 4: a quiet partition's 1,000
// tiny segments (as idle uploads make them) become a handful of objects of
// up to segment.bytes, through the manifest's replace step, and every
// record still reads at its offset, and by timestamp, from a fresh tier.
// Replaced objects stay for the grace (a reader holding the old manifest
// finishes) and go after it.
func TestMergeSmallSegments(t *testing.T) {
	const (
		n        = 1000
		segBytes = 64 << 10
	)
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	tr := openTierWith(t, store, clk.Now, format.Paging{PageSegments: 8, Fanout: 4})
	local := t.TempDir()
	const ts0 = 1_700_000_000_000
	for i := range n {
		// Timestamps mostly rising, some going back (CreateTime).
		ts := ts0 + int64(i)*1000 - int64(i%7)*3000
		if _, err := tr.Upload(ctx, testTP, localSegment(t, local, int64(i)*10, ts), 0); err != nil {
			t.Fatal(err)
		}
	}
	held, _ := tr.Manifest(ctx, testTP)
	heldSegs := allSegments(t, store, held)
	merges := 0
	for {
		k, err := tr.MergeSmall(ctx, testTP, Merge{SegmentBytes: segBytes, Max: 16})
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			break
		}
		merges += k
	}
	m, _ := tr.Manifest(ctx, testTP)
	segs := allSegments(t, store, m)
	t.Logf("%d segments merged into %d objects in %d merges", n, len(segs), merges)
	if len(segs) > 10 || m.LogStartOffset != 0 || m.EndOffset() != n*10 {
		t.Fatalf("after merging: %d segments covering [%d, %d)", len(segs), m.LogStartOffset, m.EndOffset())
	}
	for _, s := range segs {
		if s.Log.Len > segBytes {
			t.Fatalf("merged segment %d holds %d bytes of log, more than segment.bytes", s.BaseOffset, s.Log.Len)
		}
	}
	checkEveryManifestComplete(t, store)

	fresh := openTier(t, store, clk.Now)
	for o := int64(0); o < n*10; {
		b, err := fresh.Read(ctx, testTP, nil, o, 1<<20)
		if err != nil || len(b) == 0 {
			t.Fatalf("read at %d: %d bytes, %v", o, len(b), err)
		}
		for _, r := range records(t, b) {
			if r.offset != o || string(r.value) != fmt.Sprintf("record %d", o) {
				t.Fatalf("offset %d: record %d %q", o, r.offset, r.value)
			}
			o++
		}
	}
	// By timestamp: the first record at or after ts, as before merging.
	for _, i := range []int64{0, 1, 6, 7, 500, 993, 999} {
		ts := ts0 + i*1000 - (i%7)*3000
		want := int64(-1)
		for j := int64(0); j < n; j++ {
			if ts0+j*1000-(j%7)*3000 >= ts {
				want = j * 10
				break
			}
		}
		off, _, ok, err := fresh.OffsetForTimestamp(ctx, testTP, ts)
		if err != nil || !ok || off != want {
			t.Fatalf("offset for timestamp of segment %d: %d %v %v, want %d", i, off, ok, err, want)
		}
	}

	// The replaced objects outlive the grace only as long as it lasts.
	clk.add(10 * time.Minute)
	if _, err := tr.CollectOrphans(ctx, testTP, time.Hour); err != nil {
		t.Fatal(err)
	}
	for _, s := range heldSegs {
		if _, err := store.Stat(ctx, s.Key); err != nil {
			t.Fatalf("within the grace, a replaced object is gone: %v", err)
		}
	}
	clk.add(2 * time.Hour)
	if _, err := tr.CollectOrphans(ctx, testTP, time.Hour); err != nil {
		t.Fatal(err)
	}
	if got := countKeys(t, store, testTP.SegmentsPrefix()); got != len(segs) {
		t.Fatalf("%d segment objects after the grace, the manifest lists %d", got, len(segs))
	}
}

// TestCollectorKeepsObjectsInFlight: the collector runs on its own
// goroutine, without the writers' lock. Objects written for a manifest
// not yet published (the segment of an upload under way, the pages of its
// root) are kept whatever the grace, even none: otherwise the manifest
// would be published naming objects already deleted.
func TestCollectorKeepsObjectsInFlight(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	store := newHookStore(newDirStore(t), clk)
	segs := testSegments(t, 8)
	tr := openPagedTier(t, store, clk.Now)
	collections := 0
	store.beforeWrite = func(_ context.Context, key string) error {
		if strings.HasSuffix(key, ".manifest") {
			// Between the objects and the root that names them.
			clk.add(time.Second)
			if _, err := tr.CollectOrphans(ctx, testTP, 0); err != nil {
				return err
			}
			collections++
		}
		return nil
	}
	for _, s := range segs {
		if _, err := tr.Upload(ctx, testTP, s, 0); err != nil {
			t.Fatal(err)
		}
		checkCovers(t, store, 0, s.EndOffset)
		checkEveryManifestComplete(t, store)
	}
	if collections < len(segs) {
		t.Fatalf("%d collections ran during %d uploads", collections, len(segs))
	}
	store.beforeWrite = nil
	readAll(t, store, 0, segs[len(segs)-1].EndOffset)
}
