package format

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
)

// memPages is a PageSource over the pages of applied changes, counting
// fetches, as a bucket would hold them.
type memPages struct {
	mu      sync.Mutex
	objects map[string][]byte
	fetches int
}

func newMemPages() *memPages { return &memPages{objects: map[string][]byte{}} }

func (m *memPages) Page(_ context.Context, ref PageRef) (*Page, error) {
	m.mu.Lock()
	b, ok := m.objects[ref.Key]
	m.fetches++
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%s: not found", ref.Key)
	}
	return OpenPage(ref, b)
}

// apply stores ch's pages, as a writer does before publishing the root,
// and checks that the root encodes and decodes to itself. It returns the
// bytes written: pages and root.
func (m *memPages) apply(t testing.TB, ch *Change) int {
	t.Helper()
	n := 0
	for _, p := range ch.Pages {
		if _, ok := m.objects[p.Ref.Key]; ok {
			t.Fatalf("page key %s written twice", p.Ref.Key)
		}
		m.objects[p.Ref.Key] = p.Data
		n += len(p.Data)
	}
	b, err := EncodeRoot(ch.Root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRoot(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ch.Root) {
		t.Fatalf("root round trip:\n%+v\n%+v", got, ch.Root)
	}
	return n + len(b)
}

func (m *memPages) resetFetches() { m.mu.Lock(); m.fetches = 0; m.mu.Unlock() }

// pseg is like seg with a uid of its own, so that a replacement of the
// same range has another key.
func pseg(base, last, maxTs int64, epoch int32, uid byte) RemoteSegment {
	s := seg(base, last, maxTs, epoch)
	s.Key = SegmentKey{testTP, base, epoch, [16]byte{byte(base), byte(base >> 8), byte(base >> 16), byte(last), uid, 1}}.String()
	return s
}

// flatten lists the root's segments by walking every page, checking each
// page's summary against what is beneath it on the way.
func flatten(t testing.TB, r *Root, src PageSource) []RemoteSegment {
	t.Helper()
	var out []RemoteSegment
	err := r.Walk(context.Background(), src, func(ref *PageRef, s *RemoteSegment) error {
		if s != nil {
			out = append(out, *s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var testPaging = Paging{PageSegments: 4, Fanout: 3}

// buildRoot appends n segments of 10 offsets each, epoch 1.
func buildRoot(t testing.TB, src *memPages, n int, pg Paging) *Root {
	t.Helper()
	r := &Root{TopicPartition: testTP}
	for i := range n {
		ch, err := r.Append(pseg(int64(i)*10, int64(i)*10+9, int64(1000+i), 1, 0), 1, pg)
		if err != nil {
			t.Fatal(err)
		}
		src.apply(t, ch)
		r = ch.Root
	}
	return r
}

func TestRootRoundTripAndShape(t *testing.T) {
	src := newMemPages()
	r := buildRoot(t, src, 50, testPaging)
	if r.Seq != 50 || r.LeaderEpoch != 1 || r.EndOffset() != 500 {
		t.Fatalf("seq %d epoch %d end %d", r.Seq, r.LeaderEpoch, r.EndOffset())
	}
	// 50 segments, 4 per leaf and fanout 3: the root keeps fewer than
	// Fanout summaries per level and at most a few inline segments.
	if len(r.Tail) > 2*testPaging.PageSegments || len(r.Pages) > 3*testPaging.Fanout {
		t.Fatalf("root of %d pages and %d segments", len(r.Pages), len(r.Tail))
	}
	levels := map[int]bool{}
	for _, p := range r.Pages {
		levels[p.Level] = true
	}
	if !levels[2] {
		t.Fatalf("no level-2 page after 50 segments: %+v", r.Pages)
	}
	got := flatten(t, r, src)
	if len(got) != 50 {
		t.Fatalf("%d segments", len(got))
	}
	for i, s := range got {
		if s.BaseOffset != int64(i)*10 {
			t.Fatalf("segment %d at %d", i, s.BaseOffset)
		}
	}
	if tot := r.Totals(); tot.Segments != 50 || tot.BaseOffset != 0 || tot.LastOffset != 499 || tot.MaxTimestamp != 1049 || tot.Bytes != 50*got[0].Size {
		t.Fatalf("totals %+v", tot)
	}
}

// The documented shape of both objects: JSON, a newline, the trailer.
func TestPagedEncoding(t *testing.T) {
	src := newMemPages()
	r := buildRoot(t, src, 5, testPaging)
	b, err := EncodeRoot(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`{"format":"strata.manifest","version":2,"topic":"orders.v1",`, `"pages":[{"key":"`, `"level":0,`, `"segments":[{"key":`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("root lacks %s:\n%s", want, b)
		}
	}
	if !bytes.Equal(b[len(b)-trailerSize:], withCRC(string(b[:len(b)-trailerSize]))[len(b)-trailerSize:]) {
		t.Fatal("root trailer is not the CRC-32C of the document")
	}
	pb := src.objects[r.Pages[0].Key]
	if !bytes.HasPrefix(pb, []byte(`{"format":"strata.manifest.page","version":2,"topic":"orders.v1","topicId":"0f1e2d3c4b5a69788796a5b4c3d2e1f0","partition":5,"leaderEpoch":1,"level":0,"segments":[{"key":"`)) {
		t.Fatalf("page: %s", pb)
	}
	if !strings.Contains(r.Pages[0].Key, "/5/pages/00000000000000000000-0000000001-") || !strings.HasSuffix(r.Pages[0].Key, ".page") {
		t.Fatalf("page key %s", r.Pages[0].Key)
	}
	empty, err := EncodeRoot(&Root{TopicPartition: testTP, LogStartOffset: 7})
	if err != nil || !bytes.Contains(empty, []byte(`"logStartOffset":7,"pages":[],"segments":[]}`)) {
		t.Fatalf("empty root: %s %v", empty, err)
	}
}

func TestPageKeyRoundTrip(t *testing.T) {
	k := PageKey{TopicPartition: testTP, BaseOffset: 12345, LeaderEpoch: 7, UID: [16]byte{1, 2, 3}}
	got, err := ParsePageKey(k.String())
	if err != nil || got != k {
		t.Fatalf("%+v %v", got, err)
	}
	if !strings.HasPrefix(k.String(), testTP.PagesPrefix()) {
		t.Fatal(k.String())
	}
	seg := SegmentKey{TopicPartition: testTP, BaseOffset: 1}.String()
	for _, bad := range []string{seg, strings.Replace(k.String(), ".page", ".pag", 1), strings.Replace(k.String(), "/pages/", "/segments/", 1),
		strings.Replace(k.String(), "-0000000007-", "-9999999999-", 1)} {
		if _, err := ParsePageKey(bad); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// Every upload writes the root and at most one page, and the bytes do not
// grow with the history: the root holds fewer than Fanout summaries per
// level and a bounded tail.
func TestAppendBoundedBytes(t *testing.T) {
	src := newMemPages()
	pg := Paging{PageSegments: 8, Fanout: 4}
	r := &Root{TopicPartition: testTP}
	maxAt := map[int]int{}
	for i := range 2000 {
		ch, err := r.Append(pseg(int64(i)*10, int64(i)*10+9, int64(i), 1, 0), 1, pg)
		if err != nil {
			t.Fatal(err)
		}
		if len(ch.Pages) > 1 {
			t.Fatalf("append %d wrote %d pages", i, len(ch.Pages))
		}
		if len(ch.Dropped.Segments)+len(ch.Dropped.Pages)+len(ch.Dropped.Trees) > 0 {
			t.Fatalf("append %d dropped %+v", i, ch.Dropped)
		}
		n := src.apply(t, ch)
		bucket := 1
		for ; bucket*10 <= i; bucket *= 10 {
		}
		maxAt[bucket] = max(maxAt[bucket], n)
		r = ch.Root
	}
	// From 100 to 2,000 segments the largest upload grows by at most a
	// few summaries (one per level), not with the number of segments.
	if maxAt[1000] > maxAt[100]*3/2 || maxAt[1000] > maxAt[100]+4*1024 {
		t.Fatalf("largest upload by history size: %v", maxAt)
	}
	if got := flatten(t, r, src); len(got) != 2000 {
		t.Fatalf("%d segments", len(got))
	}
}

func TestAppendRejects(t *testing.T) {
	src := newMemPages()
	r := buildRoot(t, src, 10, testPaging)
	for name, c := range map[string]struct {
		s     RemoteSegment
		epoch int32
	}{
		"gap":            {pseg(101, 110, 1, 1, 0), 1},
		"overlap":        {pseg(95, 110, 1, 1, 0), 1},
		"older segment":  {pseg(100, 110, 1, 0, 0), 1},
		"segment above":  {pseg(100, 110, 1, 3, 0), 2},
		"deposed writer": {pseg(100, 110, 1, 1, 0), 0},
		"bad key":        {RemoteSegment{Key: "x"}, 1},
		"other partition": {func() RemoteSegment {
			s := pseg(100, 110, 1, 1, 0)
			s.Key = strings.Replace(s.Key, "/5/", "/6/", 1)
			return s
		}(), 1},
	} {
		before, _ := EncodeRoot(r)
		if _, err := r.Append(c.s, c.epoch, testPaging); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if after, _ := EncodeRoot(r); !bytes.Equal(before, after) {
			t.Fatalf("%s: Append modified its receiver", name)
		}
	}
	if _, err := r.Append(pseg(100, 110, 1, 1, 0), 0, testPaging); !errors.Is(err, ErrEpoch) {
		t.Fatalf("deposed writer: %v", err)
	}
	// On an empty root the first segment may start above the log start
	// (which moves up) or below it, if it reaches it.
	e := &Root{TopicPartition: testTP, LogStartOffset: 50}
	if ch, err := e.Append(pseg(60, 70, 1, 0, 0), 0, testPaging); err != nil || ch.Root.LogStartOffset != 60 {
		t.Fatalf("%+v %v", ch, err)
	}
	if ch, err := e.Append(pseg(40, 70, 1, 0, 0), 0, testPaging); err != nil || ch.Root.LogStartOffset != 50 {
		t.Fatalf("%+v %v", ch, err)
	}
	if _, err := e.Append(pseg(40, 49, 1, 0, 0), 0, testPaging); err == nil {
		t.Fatal("accepted a segment below the log start")
	}
	if _, err := e.Append(pseg(60, 70, 1, 0, 0), 0, Paging{PageSegments: 1}); err == nil {
		t.Fatal("accepted pages of one segment")
	}
}

// depth returns the number of page levels below the root.
func depth(r *Root) int {
	d := 0
	for _, p := range r.Pages {
		d = max(d, p.Level+1)
	}
	return d
}

func TestFindFetchesOnePagePerLevel(t *testing.T) {
	src := newMemPages()
	r := buildRoot(t, src, 200, testPaging)
	ctx := context.Background()
	for _, c := range []struct {
		offset int64
		want   int64 // base of the segment, -1: none
	}{{0, 0}, {9, 0}, {10, 10}, {1234, 1230}, {1999, 1990}, {2000, -1}, {-1, -1}} {
		src.resetFetches()
		s, ok, err := r.Find(ctx, src, c.offset)
		if err != nil || ok != (c.want >= 0) || ok && s.BaseOffset != c.want {
			t.Errorf("Find(%d) = %d %v %v, want %d", c.offset, s.BaseOffset, ok, err, c.want)
		}
		if src.fetches > depth(r) {
			t.Errorf("Find(%d) fetched %d pages, depth %d", c.offset, src.fetches, depth(r))
		}
	}
	// Timestamps: segment i has max timestamp 1000+i.
	for _, c := range []struct{ ts, want int64 }{{0, 0}, {1000, 0}, {1001, 10}, {1150, 1500}, {1199, 1990}, {1200, -1}} {
		src.resetFetches()
		s, ok, err := r.FindTimestamp(ctx, src, c.ts)
		if err != nil || ok != (c.want >= 0) || ok && s.BaseOffset != c.want {
			t.Errorf("FindTimestamp(%d) = %d %v %v, want %d", c.ts, s.BaseOffset, ok, err, c.want)
		}
		if src.fetches > depth(r) {
			t.Errorf("FindTimestamp(%d) fetched %d pages, depth %d", c.ts, src.fetches, depth(r))
		}
	}
	if s, ok, err := r.FindMaxTimestampFrom(ctx, src, 0); err != nil || !ok || s.BaseOffset != 1990 {
		t.Fatalf("FindMaxTimestampFrom: %d %v %v", s.BaseOffset, ok, err)
	}
}

// Timestamps that do not grow (CreateTime): the first segment reaching
// the target wins, as in a version 1 manifest.
func TestFindTimestampUnordered(t *testing.T) {
	src := newMemPages()
	r := &Root{TopicPartition: testTP}
	m := &Manifest{TopicPartition: testTP}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 100 {
		// Few distinct timestamps, so that ties are common too.
		s := pseg(int64(i)*10, int64(i)*10+9, rng.Int64N(60)*17, 1, 0)
		ch, err := r.Append(s, 1, testPaging)
		if err != nil {
			t.Fatal(err)
		}
		src.apply(t, ch)
		r = ch.Root
		if m, err = m.With(s); err != nil {
			t.Fatal(err)
		}
	}
	all := m.Segments
	for ts := int64(-1); ts <= 1001; ts += 7 {
		for _, from := range []int64{-1, 0, 5, 333, 640, 995, 1000} {
			want := slices.IndexFunc(all, func(s RemoteSegment) bool { return s.LastOffset >= from && s.MaxTimestamp >= ts })
			src.resetFetches()
			got, ok, err := r.FindTimestampFrom(context.Background(), src, ts, from)
			if err != nil || ok != (want >= 0) || ok && got.Key != all[want].Key {
				t.Fatalf("FindTimestampFrom(%d, %d) = %s %v %v, want %d", ts, from, got.Key, ok, err, want)
			}
			if src.fetches > 2*depth(r) {
				t.Fatalf("FindTimestampFrom(%d, %d) fetched %d pages, depth %d", ts, from, src.fetches, depth(r))
			}
		}
	}
	for _, from := range []int64{-1, 0, 5, 333, 640, 995, 1000} {
		want := -1
		for i, s := range all {
			if s.LastOffset >= from && (want < 0 || s.MaxTimestamp > all[want].MaxTimestamp) {
				want = i
			}
		}
		src.resetFetches()
		got, ok, err := r.FindMaxTimestampFrom(context.Background(), src, from)
		if err != nil || ok != (want >= 0) || ok && got.Key != all[want].Key {
			t.Fatalf("FindMaxTimestampFrom(%d) = %s %v %v, want %d", from, got.Key, ok, err, want)
		}
		if src.fetches > 2*depth(r) {
			t.Fatalf("FindMaxTimestampFrom(%d) fetched %d pages, depth %d", from, src.fetches, depth(r))
		}
	}
}

// Retention across page boundaries: whole pages go without being fetched
// (with everything beneath them), and only the first leaf is rewritten.
func TestRetentionAcrossPages(t *testing.T) {
	ctx := context.Background()
	for _, start := range []int64{0, 5, 10, 39, 40, 41, 155, 160, 479, 480, 485, 499, 500, 10000} {
		src := newMemPages()
		r := buildRoot(t, src, 50, testPaging) // [0, 500)
		before := flatten(t, r, src)
		src.resetFetches()
		ch, err := r.WithLogStart(ctx, src, start, 2, testPaging)
		if err != nil {
			t.Fatalf("start %d: %v", start, err)
		}
		if len(ch.Pages) > 1 || len(ch.Pages) == 1 && ch.Pages[0].Ref.Level != 0 {
			t.Fatalf("start %d: wrote %d pages", start, len(ch.Pages))
		}
		if src.fetches > depth(r) {
			t.Fatalf("start %d: fetched %d pages, depth %d", start, src.fetches, depth(r))
		}
		src.apply(t, ch)
		n := ch.Root
		if n.LogStartOffset != max(start, 0) || n.LeaderEpoch != 2 || n.Seq != r.Seq+1 {
			t.Fatalf("start %d: root %+v", start, n)
		}
		after := flatten(t, n, src)
		var want []RemoteSegment
		for _, s := range before {
			if s.LastOffset >= start {
				want = append(want, s)
			}
		}
		if !reflect.DeepEqual(after, want) {
			t.Fatalf("start %d: %d segments left, want %d", start, len(after), len(want))
		}
		// What was dropped is exactly what is gone.
		gone := map[string]bool{}
		for _, k := range ch.Dropped.Segments {
			gone[k] = true
		}
		for _, tr := range ch.Dropped.Trees {
			flat := flatten(t, &Root{Pages: []PageRef{tr}}, src)
			for _, s := range flat {
				gone[s.Key] = true
			}
		}
		if len(gone) != len(before)-len(want) {
			t.Fatalf("start %d: %d reported dropped, %d gone", start, len(gone), len(before)-len(want))
		}
		for _, s := range want {
			if gone[s.Key] {
				t.Fatalf("start %d: %s reported dropped but kept", start, s.Key)
			}
		}
		if got, _ := n.WithLogStart(ctx, src, start-5, 2, testPaging); got.Root.LogStartOffset != n.LogStartOffset {
			t.Fatalf("start moved down to %d", got.Root.LogStartOffset)
		}
	}
}

// Replacement (compaction, merging) rewrites only the pages holding the
// replaced segments and the index pages above them.
func TestReplaceInsideAndAcrossPages(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name        string
		first, last int64 // replaced offsets
		parts       int   // replacement segments
		maxLeaves   int
	}{
		{"one segment", 40, 49, 1, 1},
		{"inside one page", 40, 69, 1, 1},
		{"whole page into two", 40, 79, 2, 1},
		{"across two pages", 70, 89, 1, 2},
		// 2 kept + 8 new segments overflow one leaf: 3 leaves, and the
		// second touched leaf keeps its other 2.
		{"across two pages, more segments", 60, 99, 8, 4},
		{"into the tail", 470, 499, 1, 1},
		{"first segment", 0, 9, 1, 1},
		{"everything", 0, 499, 3, 99},
	} {
		src := newMemPages()
		r := buildRoot(t, src, 50, testPaging)
		before := flatten(t, r, src)
		var repl []RemoteSegment
		step := (c.last - c.first + 1) / int64(c.parts)
		for i := range c.parts {
			b := c.first + int64(i)*step
			l := b + step - 1
			if i == c.parts-1 {
				l = c.last
			}
			repl = append(repl, pseg(b, l, 7, 2, 9))
		}
		src.resetFetches()
		ch, err := r.Replace(ctx, src, repl, 2, testPaging)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		leaves := 0
		for _, p := range ch.Pages {
			if p.Ref.Level == 0 {
				leaves++
			}
		}
		if leaves > c.maxLeaves || len(ch.Pages) > c.maxLeaves*(depth(r)+1) {
			t.Fatalf("%s: wrote %d pages, %d leaves", c.name, len(ch.Pages), leaves)
		}
		src.apply(t, ch)
		var want []RemoteSegment
		var dropped []string
		for _, s := range before {
			switch {
			case s.BaseOffset == c.first:
				want = append(want, repl...)
				fallthrough
			case s.BaseOffset > c.first && s.LastOffset <= c.last:
				dropped = append(dropped, s.Key)
			default:
				want = append(want, s)
			}
		}
		if got := flatten(t, ch.Root, src); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: after replacement %d segments, want %d", c.name, len(got), len(want))
		}
		if !reflect.DeepEqual(ch.Dropped.Segments, dropped) {
			t.Fatalf("%s: dropped %v, want %v", c.name, ch.Dropped.Segments, dropped)
		}
	}
	src := newMemPages()
	r := buildRoot(t, src, 50, testPaging)
	for _, segs := range [][]RemoteSegment{
		nil,
		{pseg(40, 55, 1, 1, 9)}, // ends inside a segment
		{pseg(45, 59, 1, 1, 9)}, // starts inside one
		{pseg(40, 49, 1, 1, 9), pseg(51, 59, 1, 1, 9)}, // not contiguous
		{pseg(500, 509, 1, 1, 9)},                      // beyond the end
		{pseg(490, 509, 1, 1, 9)},                      // past the end
		{pseg(40, 49, 1, 3, 9)},                        // above the writer's epoch
	} {
		if _, err := r.Replace(context.Background(), src, segs, 2, testPaging); err == nil {
			t.Errorf("Replace(%v) accepted", segs)
		}
	}
}

// A replacement planned before retention (or DeleteRecords) dropped the
// first segments of its range is refused whole (ErrRangeChanged), the
// Iceberg RewriteFiles check: it would otherwise remove the rest of the
// range and put nothing back, down to an empty root when the range
// reached the end. Ranges held in pages and in the inline tail alike.
func TestReplaceRefusesRangeNoLongerListed(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		n           int
		first, last int64
		logStart    int64
	}{
		{"whole manifest, first dropped", 3, 0, 29, 10},
		{"paged range, first dropped", 50, 0, 99, 10},
		{"paged range, two dropped", 50, 0, 119, 25},
		{"range to the end, first dropped", 50, 400, 499, 410},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newMemPages()
			r := buildRoot(t, src, tc.n, testPaging)
			if tc.first > 0 {
				ch, err := r.WithLogStart(ctx, src, tc.first, 1, testPaging)
				if err != nil {
					t.Fatal(err)
				}
				src.apply(t, ch)
				r = ch.Root
			}
			ch, err := r.WithLogStart(ctx, src, tc.logStart, 1, testPaging)
			if err != nil {
				t.Fatal(err)
			}
			src.apply(t, ch)
			r = ch.Root
			before := flatten(t, r, src)
			_, err = r.Replace(ctx, src, []RemoteSegment{pseg(tc.first, tc.last, 1, 1, 9)}, 1, testPaging)
			if !errors.Is(err, ErrRangeChanged) {
				t.Fatalf("Replace of [%d, %d] over a root listing [%d, %d) after retention: err %v, want ErrRangeChanged",
					tc.first, tc.last, before[0].BaseOffset, r.EndOffset(), err)
			}
		})
	}
}

// A random sequence of uploads, retention and replacements gives the
// same segments and log start as a version 1 manifest would, and roots
// that stay small.
func TestPagedMatchesV1(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	src := newMemPages()
	pg := Paging{PageSegments: 3, Fanout: 2}
	r := &Root{TopicPartition: testTP}
	m := &Manifest{TopicPartition: testTP}
	uid := byte(0)
	for step := range 1500 {
		var ch *Change
		var err error
		switch op := rng.IntN(10); {
		case op < 7 || len(m.Segments) < 2:
			b := m.EndOffset()
			s := pseg(b, b+rng.Int64N(20), rng.Int64N(1e6), 1, uid)
			ch, err = r.Append(s, 1, pg)
			if err == nil {
				m, err = m.With(s)
			}
		case op < 8:
			start := m.LogStartOffset + rng.Int64N(m.EndOffset()-m.LogStartOffset)/8
			ch, err = r.WithLogStart(ctx, src, start, 1, pg)
			m = m.WithLogStart(start)
		default:
			i := rng.IntN(len(m.Segments))
			j := min(len(m.Segments)-1, i+rng.IntN(12))
			first, last := m.Segments[i].BaseOffset, m.Segments[j].LastOffset
			var segs []RemoteSegment
			for b := first; b <= last; {
				l := min(last, b+rng.Int64N(40))
				uid++
				segs = append(segs, pseg(b, l, rng.Int64N(1e6), 1, uid))
				b = l + 1
			}
			ch, err = r.Replace(ctx, src, segs, 1, pg)
			if err == nil {
				m, err = m.WithReplaced(segs)
			}
		}
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		src.apply(t, ch)
		r = ch.Root
		if r.LogStartOffset != m.LogStartOffset || r.EndOffset() != m.EndOffset() {
			t.Fatalf("step %d: [%d, %d), want [%d, %d)", step, r.LogStartOffset, r.EndOffset(), m.LogStartOffset, m.EndOffset())
		}
		if len(r.Pages) > 40 || len(r.Tail) > 2*pg.PageSegments {
			t.Fatalf("step %d: root of %d pages, %d segments", step, len(r.Pages), len(r.Tail))
		}
		if step%50 == 0 {
			if got := flatten(t, r, src); !reflect.DeepEqual(got, nilIfEmpty(m.Segments)) {
				t.Fatalf("step %d: segments differ", step)
			}
		}
	}
}

// CutPrefix drops whole pages by their summaries.
func TestCutPrefix(t *testing.T) {
	ctx := context.Background()
	src := newMemPages()
	r := buildRoot(t, src, 200, testPaging) // 200 segments of equal size
	size := flatten(t, r, src)[0].Size
	for _, keep := range []int64{200, 199, 150, 37, 1, 0} {
		total := r.Totals().Bytes
		src.resetFetches()
		start, err := r.CutPrefix(ctx, src, func(s Span) bool {
			if total-s.Bytes < keep*size {
				return false
			}
			total -= s.Bytes
			return true
		})
		if err != nil || start != (200-keep)*10 {
			t.Fatalf("keep %d: start %d %v", keep, start, err)
		}
		if src.fetches > depth(r) {
			t.Fatalf("keep %d: %d fetches, depth %d", keep, src.fetches, depth(r))
		}
	}
}

// A version 1 manifest reads as a root and is paged on the first write.
func TestV1Upgrade(t *testing.T) {
	m := &Manifest{TopicPartition: testTP, LeaderEpoch: 1}
	var err error
	for i := range 1000 {
		if m, err = m.With(pseg(int64(i)*10, int64(i)*10+9, int64(i), 1, 0)); err != nil {
			t.Fatal(err)
		}
	}
	m = m.WithLogStart(15)
	b, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	r, err := DecodeRoot(b)
	if err != nil {
		t.Fatal(err)
	}
	if !r.V1 || r.Seq != m.Seq || r.LogStartOffset != 10+5 || len(r.Tail) != 999 || len(r.Pages) != 0 {
		t.Fatalf("v1 root: v1 %v seq %d start %d, %d segments", r.V1, r.Seq, r.LogStartOffset, len(r.Tail))
	}
	src := newMemPages()
	ch, err := r.Append(pseg(10000, 10009, 5, 1, 0), 1, DefaultPaging)
	if err != nil {
		t.Fatal(err)
	}
	src.apply(t, ch)
	n := ch.Root
	if n.V1 || len(n.Tail) > 2*DefaultPaging.PageSegments || len(n.Pages) > 2*DefaultPaging.Fanout || n.Seq != m.Seq+1 {
		t.Fatalf("after the first write: v1 %v, %d pages, %d segments", n.V1, len(n.Pages), len(n.Tail))
	}
	got := flatten(t, n, src)
	want := append(append([]RemoteSegment(nil), m.Segments...), pseg(10000, 10009, 5, 1, 0))
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after the upgrade %d segments, want %d", len(got), len(want))
	}
	// The next write is an ordinary one.
	ch, err = n.Append(pseg(10010, 10019, 5, 1, 0), 1, DefaultPaging)
	if err != nil || len(ch.Pages) > 1 {
		t.Fatalf("second write: %v", err)
	}
}

func TestDecodeRootRejects(t *testing.T) {
	src := newMemPages()
	r := buildRoot(t, src, 9, testPaging)
	b, _ := EncodeRoot(r)
	body := string(b[:len(b)-trailerSize])
	page := src.objects[r.Pages[0].Key]
	pbody := string(page[:len(page)-trailerSize])
	for name, c := range map[string]string{
		"unknown field":    strings.Replace(body, `"seq"`, `"extra":1,"seq"`, 1),
		"version 3":        strings.Replace(body, `"version":2`, `"version":3`, 1),
		"other format":     strings.Replace(body, `strata.manifest`, `other`, 1),
		"trailing data":    body + "{}\n",
		"page level":       strings.Replace(body, `"level":0`, `"level":-1`, 1),
		"page gap":         strings.Replace(body, `"baseOffset":40`, `"baseOffset":41`, 1),
		"page epoch":       strings.Replace(body, `"leaderEpoch":1,"seq"`, `"leaderEpoch":0,"seq"`, 1),
		"no pages field":   strings.Replace(body, `"pages":`, `"pagez":`, 1),
		"page of root":     pbody,
		"root of page":     strings.Replace(pbody, `"format":"strata.manifest.page"`, `"format":"strata.manifest"`, 1),
		"log start beyond": strings.Replace(body, `"logStartOffset":0`, `"logStartOffset":90`, 1),
	} {
		if got, err := DecodeRoot(withCRC(c)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %+v, %v", name, got, err)
		}
	}
	for name, c := range map[string]string{
		"root":           body,
		"level 1":        strings.Replace(pbody, `"level":0`, `"level":1`, 1),
		"not contiguous": strings.Replace(pbody, `"baseOffset":10,`, `"baseOffset":11,`, 1),
		"newer segment":  strings.Replace(pbody, `"leaderEpoch":1,"level"`, `"leaderEpoch":0,"level"`, 1),
	} {
		if got, err := DecodePage(withCRC(c)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("page %s: %+v, %v", name, got, err)
		}
	}
}

// A page is only accepted as the one its summary names: a flipped bit, a
// truncation or another page under its key is an error, never a wrong
// answer.
func TestOpenPageChecksSummary(t *testing.T) {
	src := newMemPages()
	r := buildRoot(t, src, 20, testPaging)
	ref := r.Pages[0]
	b := src.objects[ref.Key]
	if _, err := OpenPage(ref, b); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(b)*8; i += 7 {
		c := bytes.Clone(b)
		c[i/8] ^= 1 << (i % 8)
		if _, err := OpenPage(ref, c); err == nil {
			t.Fatalf("bit %d flipped: accepted", i)
		}
	}
	if _, err := OpenPage(ref, b[:len(b)-1]); err == nil {
		t.Fatal("truncated page accepted")
	}
	other := r.Pages[1]
	ob := src.objects[other.Key]
	lie := ref
	lie.Size, lie.CRC = other.Size, other.CRC
	if _, err := OpenPage(lie, ob); !errors.Is(err, ErrPageMismatch) {
		t.Fatalf("another page under the summary: %v", err)
	}
}

// Paging a large version 1 list happens in one change, in time linear in
// its length.
func TestV1UpgradeLarge(t *testing.T) {
	const n = 100_000
	tail := make([]RemoteSegment, n)
	for i := range tail {
		tail[i] = pseg(int64(i)*10, int64(i)*10+9, int64(i), 1, 0)
	}
	r := &Root{TopicPartition: testTP, LeaderEpoch: 1, Seq: n, Tail: tail, V1: true}
	ch, err := r.Append(pseg(n*10, n*10+9, n, 1, 0), 1, DefaultPaging)
	if err != nil {
		t.Fatal(err)
	}
	if got := ch.Root.Totals(); got.Segments != n+1 || got.LastOffset != n*10+9 {
		t.Fatalf("after the upgrade: %+v", got)
	}
	if len(ch.Root.Tail) >= DefaultPaging.PageSegments || len(ch.Root.Pages) >= DefaultPaging.Fanout*depth(ch.Root) {
		t.Fatalf("root of %d pages and %d segments", len(ch.Root.Pages), len(ch.Root.Tail))
	}
	b, err := EncodeRoot(ch.Root)
	if err != nil || len(b) > 64<<10 {
		t.Fatalf("root of %d bytes, %v", len(b), err)
	}
}

// Scan visits the segments from an offset on, in order, fetching only the
// pages it goes through.
func TestScan(t *testing.T) {
	ctx := context.Background()
	src := newMemPages()
	r := buildRoot(t, src, 200, testPaging)
	for _, from := range []int64{-1, 0, 5, 1000, 1995, 2000} {
		var got []int64
		src.resetFetches()
		err := r.Scan(ctx, src, from, func(s *RemoteSegment) (bool, error) {
			got = append(got, s.BaseOffset)
			return len(got) < 3, nil
		})
		var want []int64
		for b := max(from, 0) / 10 * 10; b < 2000 && len(want) < 3; b += 10 {
			want = append(want, b)
		}
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("Scan from %d: %v %v, want %v", from, got, err, want)
		}
		if src.fetches > 2*depth(r) {
			t.Fatalf("Scan from %d for 3 segments fetched %d pages", from, src.fetches)
		}
	}
}

// ScanPages skips the pages it is told to, unread.
func TestScanPagesSkips(t *testing.T) {
	ctx := context.Background()
	src := newMemPages()
	r := buildRoot(t, src, 200, testPaging)
	src.resetFetches()
	var got int
	err := r.ScanPages(ctx, src, 0, func(p *PageRef) (bool, bool) { return p.BaseOffset < 1000, true }, func(s *RemoteSegment) (bool, error) {
		if s.BaseOffset < 1000 && s.LastOffset < 1000 {
			t.Errorf("segment %d of a skipped page visited", s.BaseOffset)
		}
		got++
		return true, nil
	})
	if err != nil || got == 0 || got > 100 {
		t.Fatalf("%d segments visited, %v", got, err)
	}
	if src.fetches > 60 {
		t.Fatalf("%d pages fetched", src.fetches)
	}
}
