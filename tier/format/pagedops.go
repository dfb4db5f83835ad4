package format

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
)

// PageSource fetches the pages a root references; the tier serves them
// from a cache in front of the object store.
type PageSource interface {
	// Page returns the page ref summarises, checked against ref (as
	// OpenPage does). The page may be shared with other callers and must
	// not be modified. Page may be called concurrently.
	Page(ctx context.Context, ref PageRef) (*Page, error)
}

// Paging is the shape writers give paged manifests. Readers need none of
// it: any shape that satisfies the invariants reads the same.
type Paging struct {
	// PageSegments is the number of segments a new leaf page takes from
	// the root's inline tail once the tail holds that many. Default 32.
	PageSegments int
	// Fanout is the number of page summaries of one level that are folded
	// into an index page of the next level. Default 16.
	Fanout int
	// NewUID returns the random part of new page keys. Default NewUID.
	NewUID func() [16]byte
}

// DefaultPaging is the shape Strata writes: a root of about 20 KB at
// most in normal operation, leaf pages of about 16 KB, index pages of
// about 6 KB (at ~500 bytes per segment entry and ~350 per summary).
var DefaultPaging = Paging{PageSegments: 32, Fanout: 16}

// Validate checks p with defaults applied.
func (p Paging) Validate() error {
	p = p.withDefaults()
	if p.PageSegments < 2 || p.PageSegments > MaxPageEntries/4 || p.Fanout < 2 || p.Fanout > MaxPageEntries/4 {
		return fmt.Errorf("format: paging of %d segments per page and fanout %d, want each in [2, %d]", p.PageSegments, p.Fanout, MaxPageEntries/4)
	}
	return nil
}

func (p Paging) withDefaults() Paging {
	if p.PageSegments == 0 {
		p.PageSegments = DefaultPaging.PageSegments
	}
	if p.Fanout == 0 {
		p.Fanout = DefaultPaging.Fanout
	}
	if p.NewUID == nil {
		p.NewUID = NewUID
	}
	return p
}

// Change is the outcome of a transition: the new root and the new page
// objects it references, which must all be stored (conditionally created)
// before the root is published, so that a crash in between leaves orphan
// pages, never a root naming a missing page.
type Change struct {
	Root    *Root
	Pages   []PageObject
	Dropped Dropped
}

// PageObject is a page to store: its summary (with its key) and its bytes.
type PageObject struct {
	Ref  PageRef
	Data []byte
}

// Dropped lists what the previous root referenced and the new one does
// not. The objects are deleted only after a grace period, for readers
// still holding the previous root.
type Dropped struct {
	// Segments are segment object keys.
	Segments []string
	// Pages are page object keys; what they list may live on in pages
	// that replaced them.
	Pages []string
	// Trees are pages dropped with everything beneath them (pages and
	// segments), which only fetching them enumerates.
	Trees []PageRef
}

// ErrEpoch reports a transition by a writer whose epoch is below the
// root's: a newer leader owns the manifest.
var ErrEpoch = errors.New("format: writer epoch below the manifest's")

// next returns a copy of r for a transition by a writer of epoch, with Seq
// increased and slices of its own.
func (r *Root) next(epoch int32) (*Root, error) {
	if r.Seq == math.MaxInt64 {
		return nil, errors.New("format: manifest sequence exhausted")
	}
	if epoch < r.LeaderEpoch {
		return nil, fmt.Errorf("%w: %d < %d", ErrEpoch, epoch, r.LeaderEpoch)
	}
	n := *r
	n.Seq++
	n.LeaderEpoch = epoch
	n.V1 = false
	n.Pages = append([]PageRef(nil), r.Pages...)
	n.Tail = append([]RemoteSegment(nil), r.Tail...)
	return &n, nil
}

// finish brings a transition's root within the bounds of the format (a
// root read from a version 1 manifest is paged whole, once) plus up to
// budget more steps of paging, validates it and returns the change.
func (ch *Change) finish(pg Paging, budget int) (*Change, error) {
	r := ch.Root
	// A root beyond its bounds (a version 1 list, or a replacement that
	// grew the tail) is paged all the way down at once.
	eager := len(r.Tail) > 2*pg.PageSegments
	for {
		n := len(r.Pages)
		fold := n >= pg.Fanout && r.Pages[n-1].Level < maxLevel && sameLevel(r.Pages[n-pg.Fanout:])
		flush := len(r.Tail) >= pg.PageSegments
		if !fold && !flush || budget <= 0 && !eager {
			break
		}
		budget--
		if fold {
			// Fold before paging the tail, so that the summaries stay
			// fewer than Fanout per level.
			po, err := summarise(&Page{TopicPartition: r.TopicPartition, LeaderEpoch: r.LeaderEpoch,
				Level: r.Pages[n-1].Level + 1, Pages: append([]PageRef(nil), r.Pages[n-pg.Fanout:]...)}, pg.NewUID())
			if err != nil {
				return nil, err
			}
			ch.Pages = append(ch.Pages, po)
			r.Pages = append(r.Pages[:n-pg.Fanout], po.Ref)
			continue
		}
		po, err := summarise(&Page{TopicPartition: r.TopicPartition, LeaderEpoch: r.LeaderEpoch,
			Segments: append([]RemoteSegment(nil), r.Tail[:pg.PageSegments]...)}, pg.NewUID())
		if err != nil {
			return nil, err
		}
		ch.Pages = append(ch.Pages, po)
		r.Pages = append(r.Pages, po.Ref)
		// Slicing, not copying: paging a version 1 list of 100,000
		// segments must not cost a copy of the rest per page.
		r.Tail = r.Tail[pg.PageSegments:]
	}
	r.Pages, r.Tail = nilIfEmpty(r.Pages), nilIfEmpty(append([]RemoteSegment(nil), r.Tail...))
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return ch, nil
}

func sameLevel(refs []PageRef) bool {
	for _, p := range refs {
		if p.Level != refs[0].Level {
			return false
		}
	}
	return true
}

// Append returns the change that adds seg, uploaded by a writer of epoch,
// after the last segment. It writes the root and at most one page (when
// the inline tail has filled, or a level of summaries is full): the bytes
// written do not depend on the length of the history. A root read from a
// version 1 manifest is paged whole first, once.
//
// As for Manifest.With, seg must start at EndOffset(), or, on a root that
// lists nothing, reach the log start offset (which moves up to seg's base
// if below it). seg's epoch may not be below the root's nor above epoch.
func (r *Root) Append(seg RemoteSegment, epoch int32, pg Paging) (*Change, error) {
	pg = pg.withDefaults()
	if err := pg.Validate(); err != nil {
		return nil, err
	}
	n, err := r.next(epoch)
	if err != nil {
		return nil, err
	}
	if err := seg.validate(r.TopicPartition); err != nil {
		return nil, err
	}
	if seg.LeaderEpoch < r.LeaderEpoch || seg.LeaderEpoch > epoch {
		return nil, fmt.Errorf("format: segment %s of epoch %d cannot follow a manifest of epoch %d written at epoch %d", seg.Key, seg.LeaderEpoch, r.LeaderEpoch, epoch)
	}
	if _, ok := r.firstOffset(); !ok {
		if seg.LastOffset < r.LogStartOffset {
			return nil, fmt.Errorf("format: segment %s ends below the log start offset %d", seg.Key, r.LogStartOffset)
		}
		n.LogStartOffset = max(r.LogStartOffset, seg.BaseOffset)
	} else if seg.BaseOffset != r.EndOffset() {
		return nil, fmt.Errorf("format: segment %s starts at %d, want %d", seg.Key, seg.BaseOffset, r.EndOffset())
	}
	n.Tail = append(n.Tail, seg)
	return (&Change{Root: n}).finish(pg, 1)
}

// Claim returns the change by which a new leader of epoch takes the
// manifest over before its first write: r unchanged but for its epoch and
// a sequence above both r's and minSeq. Publishing it first is what fences
// a deposed leader (docs/bucket-format.md §3): every later version of the
// old epoch sorts below it, and the deposed writer's check after publishing
// finds it.
func (r *Root) Claim(epoch int32, minSeq int64, pg Paging) (*Change, error) {
	pg = pg.withDefaults()
	n, err := r.next(epoch)
	if err != nil {
		return nil, err
	}
	n.Seq = max(n.Seq, minSeq)
	return (&Change{Root: n}).finish(pg, 0)
}

// WithLogStart returns the change that raises the log start offset to
// offset (it never moves down) and drops the segments wholly below it:
// whole pages are dropped from their summaries, an index page straddling
// the offset is replaced by its children's summaries, and at most one leaf
// page, the first, is rewritten without its dropped segments.
func (r *Root) WithLogStart(ctx context.Context, src PageSource, offset int64, epoch int32, pg Paging) (*Change, error) {
	pg = pg.withDefaults()
	n, err := r.next(epoch)
	if err != nil {
		return nil, err
	}
	ch := &Change{Root: n}
	n.LogStartOffset = max(r.LogStartOffset, offset)
	start := n.LogStartOffset
	for len(n.Pages) > 0 {
		p := n.Pages[0]
		if p.LastOffset < start {
			ch.Dropped.Trees = append(ch.Dropped.Trees, p)
			n.Pages = n.Pages[1:]
			continue
		}
		if p.BaseOffset >= start {
			break
		}
		page, err := src.Page(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("format: retention to %d: %w", start, err)
		}
		ch.Dropped.Pages = append(ch.Dropped.Pages, p.Key)
		if p.Level > 0 {
			n.Pages = append(append([]PageRef(nil), page.Pages...), n.Pages[1:]...)
			continue
		}
		i := sort.Search(len(page.Segments), func(i int) bool { return page.Segments[i].LastOffset >= start })
		for _, s := range page.Segments[:i] {
			ch.Dropped.Segments = append(ch.Dropped.Segments, s.Key)
		}
		po, err := summarise(&Page{TopicPartition: n.TopicPartition, LeaderEpoch: n.LeaderEpoch,
			Segments: append([]RemoteSegment(nil), page.Segments[i:]...)}, pg.NewUID())
		if err != nil {
			return nil, err
		}
		ch.Pages = append(ch.Pages, po)
		n.Pages[0] = po.Ref
		break
	}
	if len(n.Pages) == 0 {
		i := sort.Search(len(n.Tail), func(i int) bool { return n.Tail[i].LastOffset >= start })
		for _, s := range n.Tail[:i] {
			ch.Dropped.Segments = append(ch.Dropped.Segments, s.Key)
		}
		n.Tail = n.Tail[i:]
	}
	return ch.finish(pg, 0)
}

// ErrRangeChanged reports a replacement whose range the root no longer
// lists whole: retention, DeleteRecords or another rewrite changed it
// since the replacement was planned.
var ErrRangeChanged = errors.New("format: replaced range no longer listed as planned")

// Replace returns the change in which segs take the place of the segments
// covering exactly the same offsets: how compaction and merging swap
// rewritten segments in. segs must be contiguous, and every offset they
// cover must still be listed, by segments that start at segs' first offset
// and end at their last, or Replace fails with ErrRangeChanged (Iceberg's
// RewriteFiles check: a rewrite commits only over what it read). So a
// replacement never drops what it does not put back, and never empties a
// root: only retention and DeleteRecords (WithLogStart) may. Only the
// pages holding replaced segments, and the index pages above them, are
// rewritten.
func (r *Root) Replace(ctx context.Context, src PageSource, segs []RemoteSegment, epoch int32, pg Paging) (*Change, error) {
	pg = pg.withDefaults()
	if len(segs) == 0 {
		return nil, errors.New("format: no replacement segments")
	}
	for i := range segs {
		s := &segs[i]
		if err := s.validate(r.TopicPartition); err != nil {
			return nil, err
		}
		if s.LeaderEpoch > epoch {
			return nil, fmt.Errorf("format: replacement segment %s of epoch %d written at epoch %d", s.Key, s.LeaderEpoch, epoch)
		}
		if i > 0 && s.BaseOffset != segs[i-1].LastOffset+1 {
			return nil, fmt.Errorf("format: replacement segment %s starts at %d, want %d", s.Key, s.BaseOffset, segs[i-1].LastOffset+1)
		}
	}
	n, err := r.next(epoch)
	if err != nil {
		return nil, err
	}
	x := &replacer{ch: &Change{Root: n}, src: src, pg: pg, segs: segs,
		first: segs[0].BaseOffset, last: segs[len(segs)-1].LastOffset}
	x.next = x.first
	if n.Pages, err = x.refs(ctx, n.Pages); err != nil {
		return nil, err
	}
	if n.Tail, err = x.segments(n.Tail); err != nil {
		return nil, err
	}
	if x.next != x.last+1 {
		return nil, fmt.Errorf("%w: offsets [%d, %d] listed up to %d", ErrRangeChanged, x.first, x.last, x.next-1)
	}
	if n.Empty() && !r.Empty() {
		// Unreachable given the check above; kept because an empty root
		// makes the next upload move the log start past all history.
		return nil, fmt.Errorf("format: replacing [%d, %d] would empty the manifest", x.first, x.last)
	}
	return x.ch.finish(pg, 0)
}

type replacer struct {
	ch          *Change
	src         PageSource
	pg          Paging
	segs        []RemoteSegment
	first, last int64
	// next is the first offset of the range not yet found listed: the
	// replaced segments must follow one another from first.
	next int64
}

// refs returns list with the pages overlapping the replaced range
// rewritten.
func (x *replacer) refs(ctx context.Context, list []PageRef) ([]PageRef, error) {
	out := make([]PageRef, 0, len(list))
	for _, p := range list {
		if p.LastOffset < x.first || p.BaseOffset > x.last {
			out = append(out, p)
			continue
		}
		page, err := x.src.Page(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("format: replacing [%d, %d]: %w", x.first, x.last, err)
		}
		x.ch.Dropped.Pages = append(x.ch.Dropped.Pages, p.Key)
		var repl []PageRef
		if p.Level == 0 {
			segs, err := x.segments(page.Segments)
			if err != nil {
				return nil, err
			}
			repl, err = x.write(segs, nil, 0, x.pg.PageSegments)
			if err != nil {
				return nil, err
			}
		} else {
			children, err := x.refs(ctx, page.Pages)
			if err != nil {
				return nil, err
			}
			if repl, err = x.write(nil, children, p.Level, x.pg.Fanout); err != nil {
				return nil, err
			}
		}
		out = append(out, repl...)
	}
	return out, nil
}

// segments returns list with the replaced segments taken out and the
// replacements put in place of the first.
func (x *replacer) segments(list []RemoteSegment) ([]RemoteSegment, error) {
	out := make([]RemoteSegment, 0, len(list))
	for _, s := range list {
		if s.LastOffset < x.first || s.BaseOffset > x.last {
			out = append(out, s)
			continue
		}
		if s.BaseOffset < x.first || s.LastOffset > x.last {
			return nil, fmt.Errorf("%w: offsets [%d, %d] do not match segment boundaries (segment [%d, %d])", ErrRangeChanged, x.first, x.last, s.BaseOffset, s.LastOffset)
		}
		if s.BaseOffset != x.next {
			return nil, fmt.Errorf("%w: offsets [%d, %d] listed from %d, want %d", ErrRangeChanged, x.first, x.last, s.BaseOffset, x.next)
		}
		if s.BaseOffset == x.first {
			out = append(out, x.segs...)
		}
		x.ch.Dropped.Segments = append(x.ch.Dropped.Segments, s.Key)
		x.next = s.LastOffset + 1
	}
	return out, nil
}

// write stores segs (level 0) or refs (level > 0) in as few pages as their
// bounds allow: one up to twice the usual size, else pages of the usual
// size.
func (x *replacer) write(segs []RemoteSegment, refs []PageRef, level, size int) ([]PageRef, error) {
	n := max(len(segs), len(refs))
	step := n
	if n > 2*size {
		step = size
	}
	var out []PageRef
	for i := 0; i < n; i += step {
		j := min(i+step, n)
		p := &Page{TopicPartition: x.ch.Root.TopicPartition, LeaderEpoch: x.ch.Root.LeaderEpoch, Level: level}
		if level == 0 {
			p.Segments = append([]RemoteSegment(nil), segs[i:j]...)
		} else {
			p.Pages = append([]PageRef(nil), refs[i:j]...)
		}
		po, err := summarise(p, x.pg.NewUID())
		if err != nil {
			return nil, err
		}
		x.ch.Pages = append(x.ch.Pages, po)
		out = append(out, po.Ref)
	}
	return out, nil
}

// Find returns the segment holding offset, if offset is in
// [LogStartOffset, EndOffset()). It fetches one page per level, chosen by
// binary search over the summaries.
func (r *Root) Find(ctx context.Context, src PageSource, offset int64) (RemoteSegment, bool, error) {
	if offset < r.LogStartOffset || offset >= r.EndOffset() {
		return RemoteSegment{}, false, nil
	}
	if s, ok := findSegment(r.Tail, offset); ok {
		return s, true, nil
	}
	refs := r.Pages
	for {
		i := sort.Search(len(refs), func(i int) bool { return refs[i].LastOffset >= offset })
		if i == len(refs) || refs[i].BaseOffset > offset {
			return RemoteSegment{}, false, nil
		}
		p, err := src.Page(ctx, refs[i])
		if err != nil {
			return RemoteSegment{}, false, fmt.Errorf("format: finding offset %d: %w", offset, err)
		}
		if p.Level == 0 {
			s, ok := findSegment(p.Segments, offset)
			return s, ok, nil
		}
		refs = p.Pages
	}
}

func findSegment(segs []RemoteSegment, offset int64) (RemoteSegment, bool) {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].LastOffset >= offset })
	if i == len(segs) || segs[i].BaseOffset > offset {
		return RemoteSegment{}, false
	}
	return segs[i], true
}

// FindTimestamp returns the first segment whose MaxTimestamp is >= ts: the
// one holding the first record with a timestamp >= ts (which may lie below
// LogStartOffset; the caller clamps). Timestamps need not grow from
// segment to segment (CreateTime), so the summaries are scanned in order
// rather than bisected, but only the summaries: one page per level is
// fetched.
func (r *Root) FindTimestamp(ctx context.Context, src PageSource, ts int64) (RemoteSegment, bool, error) {
	return r.FindTimestampFrom(ctx, src, ts, math.MinInt64)
}

// FindTimestampFrom is FindTimestamp among the segments ending at or after
// from. A page straddling from may hold its MaxTimestamp below from; it is
// then searched too, so at most two pages per level are fetched.
func (r *Root) FindTimestampFrom(ctx context.Context, src PageSource, ts, from int64) (RemoteSegment, bool, error) {
	return findTimestamp(ctx, src, r.Pages, r.Tail, ts, from)
}

func findTimestamp(ctx context.Context, src PageSource, refs []PageRef, segs []RemoteSegment, ts, from int64) (RemoteSegment, bool, error) {
	for i := range refs {
		if refs[i].LastOffset < from || refs[i].MaxTimestamp < ts {
			continue
		}
		p, err := src.Page(ctx, refs[i])
		if err != nil {
			return RemoteSegment{}, false, fmt.Errorf("format: finding timestamp %d: %w", ts, err)
		}
		if s, ok, err := findTimestamp(ctx, src, p.Pages, p.Segments, ts, from); err != nil || ok {
			return s, ok, err
		}
	}
	for i := range segs {
		if segs[i].LastOffset >= from && segs[i].MaxTimestamp >= ts {
			return segs[i], true, nil
		}
	}
	return RemoteSegment{}, false, nil
}

// FindMaxTimestampFrom returns, among the segments ending at or after
// from, the first of those with the largest MaxTimestamp. The summaries
// are visited largest maximum first, so only the pages that can hold the
// answer are fetched: those on the way down to it, and those straddling
// from.
func (r *Root) FindMaxTimestampFrom(ctx context.Context, src PageSource, from int64) (RemoteSegment, bool, error) {
	return findMax(ctx, src, r.Pages, r.Tail, from)
}

func findMax(ctx context.Context, src PageSource, refs []PageRef, segs []RemoteSegment, from int64) (RemoteSegment, bool, error) {
	var best RemoteSegment
	found := false
	// better reports whether s beats the best so far: a larger maximum,
	// or the same at a lower offset.
	better := func(maxTs, base int64) bool {
		return !found || maxTs > best.MaxTimestamp || maxTs == best.MaxTimestamp && base < best.BaseOffset
	}
	for i := range segs {
		if segs[i].LastOffset >= from && better(segs[i].MaxTimestamp, segs[i].BaseOffset) {
			best, found = segs[i], true
		}
	}
	order := make([]int, 0, len(refs))
	for i := range refs {
		if refs[i].LastOffset >= from {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return refs[order[a]].MaxTimestamp > refs[order[b]].MaxTimestamp })
	for _, i := range order {
		ref := &refs[i]
		if !better(ref.MaxTimestamp, ref.BaseOffset) {
			// Nothing beneath ref can do better: its maximum is at most
			// ref's, at an offset no lower than ref's base. The refs after
			// it in this order have smaller maxima, or equal ones further on.
			if ref.MaxTimestamp < best.MaxTimestamp {
				break
			}
			continue
		}
		p, err := src.Page(ctx, *ref)
		if err != nil {
			return RemoteSegment{}, false, fmt.Errorf("format: finding the largest timestamp: %w", err)
		}
		s, ok, err := findMax(ctx, src, p.Pages, p.Segments, from)
		if err != nil {
			return RemoteSegment{}, false, err
		}
		if ok && better(s.MaxTimestamp, s.BaseOffset) {
			best, found = s, true
		}
	}
	return best, found, nil
}

// Walk calls fn for every page summary (ref set, before what is beneath
// it) and every segment (seg set) of the root, in offset order, fetching
// every page. It stops at fn's first error. A tool's view, not a hot path.
func (r *Root) Walk(ctx context.Context, src PageSource, fn func(ref *PageRef, seg *RemoteSegment) error) error {
	if err := walkRefs(ctx, src, r.Pages, fn); err != nil {
		return err
	}
	for i := range r.Tail {
		if err := fn(nil, &r.Tail[i]); err != nil {
			return err
		}
	}
	return nil
}

func walkRefs(ctx context.Context, src PageSource, refs []PageRef, fn func(*PageRef, *RemoteSegment) error) error {
	for i := range refs {
		if err := fn(&refs[i], nil); err != nil {
			return err
		}
		p, err := src.Page(ctx, refs[i])
		if err != nil {
			return err
		}
		if err := walkRefs(ctx, src, p.Pages, fn); err != nil {
			return err
		}
		for j := range p.Segments {
			if err := fn(nil, &p.Segments[j]); err != nil {
				return err
			}
		}
	}
	return nil
}

// Scan calls fn for the segments ending at or after from, in offset
// order, until fn returns false or an error. It fetches only the pages
// that hold such segments, one at a time as it goes.
func (r *Root) Scan(ctx context.Context, src PageSource, from int64, fn func(*RemoteSegment) (bool, error)) error {
	return r.ScanPages(ctx, src, from, nil, fn)
}

// ScanPages is Scan, with page asked first about every page it would
// fetch: page may skip it (its segments are not visited), and may stop the
// scan. A nil page skips nothing.
func (r *Root) ScanPages(ctx context.Context, src PageSource, from int64, page func(*PageRef) (skip, more bool), fn func(*RemoteSegment) (bool, error)) error {
	more, err := scanRefs(ctx, src, r.Pages, from, page, fn)
	if err != nil || !more {
		return err
	}
	for i := range r.Tail {
		if r.Tail[i].LastOffset < from {
			continue
		}
		if more, err := fn(&r.Tail[i]); err != nil || !more {
			return err
		}
	}
	return nil
}

// scanRefs is ScanPages over refs; it reports whether to go on.
func scanRefs(ctx context.Context, src PageSource, refs []PageRef, from int64, page func(*PageRef) (bool, bool), fn func(*RemoteSegment) (bool, error)) (bool, error) {
	i := sort.Search(len(refs), func(i int) bool { return refs[i].LastOffset >= from })
	for ; i < len(refs); i++ {
		if page != nil {
			skip, more := page(&refs[i])
			if !more {
				return false, nil
			}
			if skip {
				continue
			}
		}
		p, err := src.Page(ctx, refs[i])
		if err != nil {
			return false, err
		}
		if more, err := scanRefs(ctx, src, p.Pages, from, page, fn); err != nil || !more {
			return false, err
		}
		for j := range p.Segments {
			if p.Segments[j].LastOffset < from {
				continue
			}
			if more, err := fn(&p.Segments[j]); err != nil || !more {
				return false, err
			}
		}
	}
	return true, nil
}

// CutPrefix returns the log start offset that drops the longest prefix of
// segments that drop accepts. drop is asked about a whole page first, and
// a page it accepts is dropped without being fetched; for a page it
// refuses, it is asked about the page's entries, down to single segments.
// drop must accept a run only if it would accept each of its segments in
// turn; it may keep state (running totals), as it is called in offset
// order and each accepted span is dropped. The result is never below
// LogStartOffset.
func (r *Root) CutPrefix(ctx context.Context, src PageSource, drop func(Span) bool) (int64, error) {
	start := r.LogStartOffset
	stop, err := cutRefs(ctx, src, r.Pages, drop, &start)
	if err != nil || stop {
		return start, err
	}
	cutSegments(r.Tail, drop, &start)
	return start, nil
}

// cutRefs applies CutPrefix to refs, reporting whether it stopped in them.
func cutRefs(ctx context.Context, src PageSource, refs []PageRef, drop func(Span) bool, start *int64) (bool, error) {
	for i := range refs {
		if drop(refs[i].span()) {
			*start = max(*start, refs[i].LastOffset+1)
			continue
		}
		p, err := src.Page(ctx, refs[i])
		if err != nil {
			return true, err
		}
		if stop, err := cutRefs(ctx, src, p.Pages, drop, start); err != nil || stop {
			return true, err
		}
		if cutSegments(p.Segments, drop, start) {
			return true, nil
		}
	}
	return false, nil
}

func cutSegments(segs []RemoteSegment, drop func(Span) bool, start *int64) bool {
	for i := range segs {
		if !drop(segmentSpan(&segs[i])) {
			return true
		}
		*start = max(*start, segs[i].LastOffset+1)
	}
	return false
}
