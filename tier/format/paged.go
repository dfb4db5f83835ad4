package format

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strconv"
	"strings"
)

// The paged manifest (manifest version 2) keeps what version 1 kept, but
// in a shape whose cost does not grow with the history. A small root,
// published under the same manifest keys as version 1 (so "the current
// manifest is the largest key under manifests/" still holds), lists
// summaries of immutable page objects and the newest segments inline. A
// leaf page (level 0) lists a run of contiguous segments; an index page
// (level k > 0) lists summaries of pages of level k-1, as in Apache
// Iceberg's manifest list and manifest files. Both objects are JSON with
// the same CRC-32C trailer as version 1, so the bucket stays readable with
// curl and jq.
const (
	// RootVersion is the manifest version of a paged root.
	RootVersion = 2
	// PageFormat is the value of a page's "format" field.
	PageFormat = "strata.manifest.page"
	// PageVersion is the page version this package writes and reads.
	PageVersion = 2

	// MaxPageEntries bounds the entries of a page, and the page summaries
	// and inline segments of a root, that a decoder accepts: it bounds the
	// memory an object from the bucket can claim.
	MaxPageEntries = 4096
	// maxLevel bounds page levels; 2^63 segments need fewer levels than
	// this at any fanout of 2 or more.
	maxLevel = 63

	pagesDir = "pages"
	pageExt  = ".page"
)

// Root is one version of a paged manifest: a partition's list of remote
// segments, held as summaries of pages followed by the newest segments
// inline. Like Manifest, a Root is a value: the transitions return new
// roots and a root must not be modified once shared.
type Root struct {
	TopicPartition
	// LeaderEpoch is the epoch of the leader that wrote this version; it is
	// at least that of every page and segment it references.
	LeaderEpoch int32
	// Seq increases by one with every version.
	Seq int64
	// LogStartOffset is the remote log start offset: offsets below it are
	// deleted, even where a listed segment still holds them.
	LogStartOffset int64
	// CleanedOffset is where the cold tier's compaction stopped: offsets
	// below it hold only the latest record per key (and tombstones within
	// their retention). 0 if never compacted. It may lag the log start,
	// which retention moves on its own: what is cleaned is
	// [LogStartOffset, CleanedEnd()).
	CleanedOffset int64
	// LastCompactionMs is when the last compaction was swapped in, in
	// Unix milliseconds; 0 if never.
	LastCompactionMs int64
	// Pages summarise the older segments, in offset order and contiguous.
	Pages []PageRef
	// Tail is the newest segments, inline, continuing right after the last
	// page (the "segments" field of the encoding).
	Tail []RemoteSegment
	// V1 reports a root read from a version 1 manifest: every segment is
	// inline, and the next transition moves them into pages.
	V1 bool
}

// PageRef is a root's or an index page's summary of one page: where the
// page is, how to check it, and the aggregates of the segments beneath it,
// which let a reader pick the page to fetch (or skip it) without fetching.
type PageRef struct {
	Key string `json:"key"`
	// Level is 0 for a page of segments, k > 0 for a page of level k-1
	// page summaries.
	Level int `json:"level"`
	// Size and CRC are the page object's length and the CRC-32C of all of
	// its bytes.
	Size int64  `json:"size"`
	CRC  uint32 `json:"crc32c"`
	// BaseOffset and LastOffset are the first segment's BaseOffset and the
	// last segment's LastOffset beneath the page.
	BaseOffset int64 `json:"baseOffset"`
	LastOffset int64 `json:"lastOffset"`
	// FirstTimestamp is the first segment's; MaxTimestamp the largest of
	// all segments beneath.
	FirstTimestamp int64 `json:"firstTimestamp"`
	MaxTimestamp   int64 `json:"maxTimestamp"`
	// Bytes is the total size of the segment objects beneath, Records
	// their total record count (-1 if any is unknown), Segments their
	// number.
	Bytes    int64 `json:"bytes"`
	Records  int64 `json:"records"`
	Segments int64 `json:"segments"`
	// LeaderEpoch is the epoch of the leader that wrote the page, as in
	// its key.
	LeaderEpoch int32 `json:"leaderEpoch"`
}

// Page is the content of one page object.
type Page struct {
	TopicPartition
	// LeaderEpoch is the epoch of the leader that wrote the page.
	LeaderEpoch int32
	Level       int
	// Segments, for a leaf page (level 0), are contiguous and non-empty.
	Segments []RemoteSegment
	// Pages, for an index page (level > 0), are contiguous summaries of
	// pages of level Level-1, non-empty.
	Pages []PageRef
}

// PageKey identifies a page object:
//
//	<h>/<topic>-<topicID>/<partition>/pages/<base>-<epoch>-<uid>.page
//
// spelled like a segment key. The epoch is the writer's and the uid is
// random, so a page is written once and never replaced, and a deposed
// leader's pages are never referenced by a newer leader's roots.
type PageKey struct {
	TopicPartition
	BaseOffset  int64
	LeaderEpoch int32
	UID         [16]byte
}

// PagesPrefix returns the prefix to list to find the partition's page
// objects.
func (tp TopicPartition) PagesPrefix() string { return tp.Prefix() + pagesDir + "/" }

// String returns the object key.
func (k PageKey) String() string {
	return fmt.Sprintf("%s%0*d-%0*d-%s%s", k.PagesPrefix(), offsetDigits, k.BaseOffset,
		epochDigits, k.LeaderEpoch, hex.EncodeToString(k.UID[:]), pageExt)
}

// ParsePageKey parses a key made by PageKey.String, and nothing else.
func ParsePageKey(key string) (PageKey, error) {
	tp, name, err := parseKey(key, pagesDir)
	if err != nil {
		return PageKey{}, err
	}
	const n = offsetDigits + 1 + epochDigits + 1 + 32 + len(pageExt)
	if len(name) != n || name[offsetDigits] != '-' || name[offsetDigits+1+epochDigits] != '-' ||
		!strings.HasSuffix(name, pageExt) {
		return PageKey{}, fmt.Errorf("%w: page name %q", errKey, name)
	}
	base, ok1 := parseDigits(name[:offsetDigits])
	epoch, ok2 := parseDigits(name[offsetDigits+1 : offsetDigits+1+epochDigits])
	uid, ok3 := parseHex(name[offsetDigits+1+epochDigits+1 : n-len(pageExt)])
	if !ok1 || !ok2 || !ok3 || epoch > maxInt32 {
		return PageKey{}, fmt.Errorf("%w: page name %q", errKey, name)
	}
	return PageKey{TopicPartition: tp, BaseOffset: base, LeaderEpoch: int32(epoch), UID: uid}, nil
}

// Key returns the key under which this version of the root is stored: the
// same as a version 1 manifest's.
func (r *Root) Key() string {
	return ManifestKey{TopicPartition: r.TopicPartition, LeaderEpoch: r.LeaderEpoch, Seq: r.Seq}.String()
}

// EndOffset returns the offset after the last remote segment, or the log
// start offset if there is none.
func (r *Root) EndOffset() int64 {
	if n := len(r.Tail); n > 0 {
		return r.Tail[n-1].LastOffset + 1
	}
	if n := len(r.Pages); n > 0 {
		return r.Pages[n-1].LastOffset + 1
	}
	return r.LogStartOffset
}

// CleanedEnd returns the end of the cleaned part of the log: the
// cleaned offset, or the log start offset if retention has passed it.
func (r *Root) CleanedEnd() int64 { return max(r.LogStartOffset, r.CleanedOffset) }

// Empty reports whether the root lists no segment.
func (r *Root) Empty() bool { return len(r.Pages) == 0 && len(r.Tail) == 0 }

// firstOffset returns the first offset the root covers, and false if it
// lists nothing.
func (r *Root) firstOffset() (int64, bool) {
	switch {
	case len(r.Pages) > 0:
		return r.Pages[0].BaseOffset, true
	case len(r.Tail) > 0:
		return r.Tail[0].BaseOffset, true
	}
	return 0, false
}

// Span is the aggregate of a run of segments: one segment, a page's or a
// whole manifest's.
type Span struct {
	BaseOffset, LastOffset       int64
	FirstTimestamp, MaxTimestamp int64
	// Bytes is the size of the segment objects, Records their record count
	// (-1 if any is unknown), Segments their number.
	Bytes, Records, Segments int64
}

func segmentSpan(s *RemoteSegment) Span {
	return Span{s.BaseOffset, s.LastOffset, s.FirstTimestamp, s.MaxTimestamp, s.Size, s.RecordCount, 1}
}

func (p *PageRef) span() Span {
	return Span{p.BaseOffset, p.LastOffset, p.FirstTimestamp, p.MaxTimestamp, p.Bytes, p.Records, p.Segments}
}

// add extends a (whose Segments may be 0: empty) with b, which follows it.
func (a Span) add(b Span) Span {
	if a.Segments == 0 {
		return b
	}
	a.LastOffset = b.LastOffset
	a.MaxTimestamp = max(a.MaxTimestamp, b.MaxTimestamp)
	a.Bytes += b.Bytes
	if a.Records < 0 || b.Records < 0 {
		a.Records = -1
	} else {
		a.Records += b.Records
	}
	a.Segments += b.Segments
	return a
}

// Totals returns the aggregate of every segment the root lists, from the
// summaries alone. Segments is 0 if it lists none.
func (r *Root) Totals() Span {
	var t Span
	for i := range r.Pages {
		t = t.add(r.Pages[i].span())
	}
	for i := range r.Tail {
		t = t.add(segmentSpan(&r.Tail[i]))
	}
	return t
}

// pageAggregate returns the aggregate of p's entries.
func (p *Page) aggregate() Span {
	var t Span
	for i := range p.Segments {
		t = t.add(segmentSpan(&p.Segments[i]))
	}
	for i := range p.Pages {
		t = t.add(p.Pages[i].span())
	}
	return t
}

// Validate checks every invariant of the root: a valid partition,
// non-negative epoch, sequence and log start, well-formed page summaries of
// this partition and of epochs up to the root's, segments as in a version 1
// manifest, everything contiguous (pages, then the inline segments), and
// the log start offset inside the first page or segment (or anywhere if
// there is none).
func (r *Root) Validate() error {
	if err := r.TopicPartition.Validate(); err != nil {
		return err
	}
	if r.LeaderEpoch < 0 || r.Seq < 0 || r.LogStartOffset < 0 {
		return fmt.Errorf("format: root epoch %d, seq %d, log start %d", r.LeaderEpoch, r.Seq, r.LogStartOffset)
	}
	if r.CleanedOffset < 0 || r.LastCompactionMs < 0 {
		return fmt.Errorf("format: root cleaned offset %d, last compaction %d", r.CleanedOffset, r.LastCompactionMs)
	}
	if len(r.Pages) > MaxPageEntries || len(r.Tail) > MaxPageEntries && !r.V1 {
		return fmt.Errorf("format: root with %d pages and %d segments", len(r.Pages), len(r.Tail))
	}
	next := int64(-1)
	for i := range r.Pages {
		p := &r.Pages[i]
		if err := p.validate(r.TopicPartition, r.LeaderEpoch, -1); err != nil {
			return err
		}
		if next >= 0 && p.BaseOffset != next {
			return fmt.Errorf("format: page %s starts at %d, want %d", p.Key, p.BaseOffset, next)
		}
		next = p.LastOffset + 1
	}
	if err := validateSegments(r.TopicPartition, r.LeaderEpoch, r.Tail, next); err != nil {
		return err
	}
	if first, ok := r.firstOffset(); ok {
		if r.LogStartOffset < first || r.LogStartOffset >= r.EndOffset() {
			return fmt.Errorf("format: log start offset %d outside the first entry [%d, %d)", r.LogStartOffset, first, r.EndOffset())
		}
		if len(r.Pages) == 0 && r.LogStartOffset > r.Tail[0].LastOffset {
			return fmt.Errorf("format: log start offset %d above the first segment [%d, %d]", r.LogStartOffset, first, r.Tail[0].LastOffset)
		}
		if len(r.Pages) > 0 && r.LogStartOffset > r.Pages[0].LastOffset {
			return fmt.Errorf("format: log start offset %d above the first page [%d, %d]", r.LogStartOffset, first, r.Pages[0].LastOffset)
		}
	}
	return nil
}

// validateSegments checks segs as entries of a manifest or page of
// partition tp written at epoch: each well formed, of an epoch up to
// epoch, and contiguous, the first starting at next unless next is -1.
func validateSegments(tp TopicPartition, epoch int32, segs []RemoteSegment, next int64) error {
	for i := range segs {
		s := &segs[i]
		if err := s.validate(tp); err != nil {
			return err
		}
		if s.LeaderEpoch > epoch {
			return fmt.Errorf("format: segment %s has epoch %d above %d", s.Key, s.LeaderEpoch, epoch)
		}
		if next >= 0 && s.BaseOffset != next {
			return fmt.Errorf("format: segment %s starts at %d, want %d", s.Key, s.BaseOffset, next)
		}
		next = s.LastOffset + 1
	}
	return nil
}

// validate checks a summary found in a root (level -1: any) or in an index
// page of level level+1, written at epoch.
func (p *PageRef) validate(tp TopicPartition, epoch int32, level int) error {
	k, err := ParsePageKey(p.Key)
	if err != nil {
		return err
	}
	switch {
	case k.TopicPartition != tp || k.BaseOffset != p.BaseOffset || k.LeaderEpoch != p.LeaderEpoch:
		return fmt.Errorf("format: page key %s does not match its summary (base %d, epoch %d)", p.Key, p.BaseOffset, p.LeaderEpoch)
	case p.LeaderEpoch > epoch:
		return fmt.Errorf("format: page %s has epoch %d above %d", p.Key, p.LeaderEpoch, epoch)
	case p.Level < 0 || p.Level > maxLevel || level >= 0 && p.Level != level:
		return fmt.Errorf("format: page %s has level %d", p.Key, p.Level)
	case p.Size <= 0 || p.BaseOffset < 0 || p.LastOffset < p.BaseOffset:
		return fmt.Errorf("format: page %s: size %d, offsets [%d, %d]", p.Key, p.Size, p.BaseOffset, p.LastOffset)
	case p.FirstTimestamp > p.MaxTimestamp:
		return fmt.Errorf("format: page %s: first timestamp %d above max %d", p.Key, p.FirstTimestamp, p.MaxTimestamp)
	case p.Segments < 1 || p.Segments-1 > p.LastOffset-p.BaseOffset:
		return fmt.Errorf("format: page %s: %d segments in [%d, %d]", p.Key, p.Segments, p.BaseOffset, p.LastOffset)
	case p.Bytes/FooterSizeV1 < p.Segments || p.Records < -1 || p.Records-1 > p.LastOffset-p.BaseOffset:
		return fmt.Errorf("format: page %s: %d bytes, %d records", p.Key, p.Bytes, p.Records)
	}
	return nil
}

// Validate checks a page's invariants: a valid partition and epoch, the
// entries its level calls for (at least one, at most MaxPageEntries),
// contiguous, of epochs up to the page's.
func (p *Page) Validate() error {
	if err := p.TopicPartition.Validate(); err != nil {
		return err
	}
	if p.LeaderEpoch < 0 || p.Level < 0 || p.Level > maxLevel {
		return fmt.Errorf("format: page epoch %d, level %d", p.LeaderEpoch, p.Level)
	}
	n := len(p.Segments)
	if p.Level > 0 {
		n = len(p.Pages)
	}
	if n == 0 || n > MaxPageEntries || p.Level == 0 && len(p.Pages) > 0 || p.Level > 0 && len(p.Segments) > 0 {
		return fmt.Errorf("format: page of level %d with %d segments and %d pages", p.Level, len(p.Segments), len(p.Pages))
	}
	if p.Level == 0 {
		return validateSegments(p.TopicPartition, p.LeaderEpoch, p.Segments, -1)
	}
	next := int64(-1)
	for i := range p.Pages {
		c := &p.Pages[i]
		if err := c.validate(p.TopicPartition, p.LeaderEpoch, p.Level-1); err != nil {
			return err
		}
		if next >= 0 && c.BaseOffset != next {
			return fmt.Errorf("format: page %s starts at %d, want %d", c.Key, c.BaseOffset, next)
		}
		next = c.LastOffset + 1
	}
	return nil
}

// wireRoot is the root's JSON document; its field order is the order
// written.
type wireRoot struct {
	Format         string `json:"format"`
	Version        int    `json:"version"`
	Topic          string `json:"topic"`
	TopicID        string `json:"topicId"`
	Partition      int32  `json:"partition"`
	LeaderEpoch    int32  `json:"leaderEpoch"`
	Seq            int64  `json:"seq"`
	LogStartOffset int64  `json:"logStartOffset"`
	// Absent until the first compaction, so that older readers of a
	// never compacted partition see the document they know.
	CleanedOffset    int64           `json:"cleanedOffset,omitempty"`
	LastCompactionMs int64           `json:"lastCompactionMs,omitempty"`
	Pages            []PageRef       `json:"pages"`
	Segments         []RemoteSegment `json:"segments"`
}

// wirePage is a page's JSON document.
type wirePage struct {
	Format      string          `json:"format"`
	Version     int             `json:"version"`
	Topic       string          `json:"topic"`
	TopicID     string          `json:"topicId"`
	Partition   int32           `json:"partition"`
	LeaderEpoch int32           `json:"leaderEpoch"`
	Level       int             `json:"level"`
	Segments    []RemoteSegment `json:"segments,omitempty"`
	Pages       []PageRef       `json:"pages,omitempty"`
}

// EncodeRoot validates r and encodes it as a version 2 manifest. A root
// read from version 1 (V1) is encoded in version 2 too, with every segment
// inline, if it fits MaxPageEntries; transitions page it first.
func EncodeRoot(r *Root) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if len(r.Tail) > MaxPageEntries {
		return nil, fmt.Errorf("format: root with %d inline segments", len(r.Tail))
	}
	w := wireRoot{
		Format: ManifestFormat, Version: RootVersion,
		Topic: r.Topic, TopicID: hex.EncodeToString(r.TopicID[:]), Partition: r.Partition,
		LeaderEpoch: r.LeaderEpoch, Seq: r.Seq, LogStartOffset: r.LogStartOffset,
		CleanedOffset: r.CleanedOffset, LastCompactionMs: r.LastCompactionMs,
		Pages: r.Pages, Segments: r.Tail,
	}
	if w.Pages == nil {
		w.Pages = []PageRef{}
	}
	if w.Segments == nil {
		w.Segments = []RemoteSegment{}
	}
	return sealJSON(&w, "root")
}

// EncodePage validates p and encodes it.
func EncodePage(p *Page) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	w := wirePage{
		Format: PageFormat, Version: PageVersion,
		Topic: p.Topic, TopicID: hex.EncodeToString(p.TopicID[:]), Partition: p.Partition,
		LeaderEpoch: p.LeaderEpoch, Level: p.Level, Segments: p.Segments, Pages: p.Pages,
	}
	return sealJSON(&w, "page")
}

// sealJSON encodes v compactly, with a newline and the CRC-32C trailer.
func sealJSON(v any, what string) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("format: encoding %s: %w", what, err)
	}
	b = append(b, '\n')
	return fmt.Appendf(b, "%s%08x\n", trailerPrefix, crc32.Checksum(b, castagnoli)), nil
}

// openJSON checks b's CRC-32C trailer and returns the document before it.
func openJSON(b []byte, what string) ([]byte, error) {
	if len(b) < trailerSize {
		return nil, fmt.Errorf("%w: %s of %d bytes", ErrCorrupt, what, len(b))
	}
	body, trailer := b[:len(b)-trailerSize], b[len(b)-trailerSize:]
	if !bytes.HasPrefix(trailer, []byte(trailerPrefix)) || trailer[trailerSize-1] != '\n' {
		return nil, fmt.Errorf("%w: %s trailer %q", ErrCorrupt, what, trailer)
	}
	digits := trailer[len(trailerPrefix) : trailerSize-1]
	for _, c := range digits {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return nil, fmt.Errorf("%w: %s trailer %q", ErrCorrupt, what, trailer)
		}
	}
	want, _ := strconv.ParseUint(string(digits), 16, 32)
	if c := crc32.Checksum(body, castagnoli); uint64(c) != want {
		return nil, fmt.Errorf("%w: %s CRC-32C %08x, trailer says %08x", ErrCorrupt, what, c, want)
	}
	return body, nil
}

// decodeStrict decodes one JSON document into v: no unknown fields, no
// trailing data.
func decodeStrict(body []byte, v any, what string) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, what, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: %s: data after the document", ErrCorrupt, what)
	}
	return nil
}

// DecodeRoot decodes a manifest of either version: a version 2 root, or a
// version 1 manifest, returned as a root with every segment inline and V1
// set. It checks the trailer, decodes strictly and validates.
func DecodeRoot(b []byte) (*Root, error) {
	body, err := openJSON(b, "manifest")
	if err != nil {
		return nil, err
	}
	// Only the version picks the decoder; the strict decode checks the rest.
	var head struct {
		Version json.RawMessage `json:"version"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	if string(head.Version) == "1" {
		m, err := DecodeManifest(b)
		if err != nil {
			return nil, err
		}
		return &Root{TopicPartition: m.TopicPartition, LeaderEpoch: m.LeaderEpoch, Seq: m.Seq,
			LogStartOffset: m.LogStartOffset, Tail: m.Segments, V1: true}, nil
	}
	var w wireRoot
	if err := decodeStrict(body, &w, "manifest"); err != nil {
		return nil, err
	}
	if w.Format != ManifestFormat || w.Version != RootVersion {
		return nil, fmt.Errorf("%w: manifest format %q version %d, want %q version %d or 1", ErrCorrupt, w.Format, w.Version, ManifestFormat, RootVersion)
	}
	tp, err := wireTopicPartition(w.Topic, w.TopicID, w.Partition, "manifest")
	if err != nil {
		return nil, err
	}
	r := &Root{
		TopicPartition: tp,
		LeaderEpoch:    w.LeaderEpoch, Seq: w.Seq, LogStartOffset: w.LogStartOffset,
		CleanedOffset: w.CleanedOffset, LastCompactionMs: w.LastCompactionMs,
		Pages: nilIfEmpty(w.Pages), Tail: normalSegments(w.Segments),
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	return r, nil
}

// DecodePage checks a page object's trailer, decodes it strictly and
// validates it. OpenPage also checks it against its summary.
func DecodePage(b []byte) (*Page, error) {
	body, err := openJSON(b, "page")
	if err != nil {
		return nil, err
	}
	var w wirePage
	if err := decodeStrict(body, &w, "page"); err != nil {
		return nil, err
	}
	if w.Format != PageFormat || w.Version != PageVersion {
		return nil, fmt.Errorf("%w: page format %q version %d, want %q version %d", ErrCorrupt, w.Format, w.Version, PageFormat, PageVersion)
	}
	tp, err := wireTopicPartition(w.Topic, w.TopicID, w.Partition, "page")
	if err != nil {
		return nil, err
	}
	p := &Page{
		TopicPartition: tp,
		LeaderEpoch:    w.LeaderEpoch, Level: w.Level,
		Segments: normalSegments(w.Segments), Pages: nilIfEmpty(w.Pages),
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("%w: page: %v", ErrCorrupt, err)
	}
	return p, nil
}

// ErrPageMismatch reports a page object that decodes but is not the page
// its summary describes.
var ErrPageMismatch = errors.New("format: page does not match its summary")

// OpenPage decodes the object b fetched for ref and checks that it is the
// page ref summarises: its size and CRC-32C, partition (the key's), level,
// epoch and aggregates.
func OpenPage(ref PageRef, b []byte) (*Page, error) {
	k, err := ParsePageKey(ref.Key)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != ref.Size {
		return nil, fmt.Errorf("%w: %s is %d bytes, its summary says %d", ErrCorrupt, ref.Key, len(b), ref.Size)
	}
	if c := crc32.Checksum(b, castagnoli); c != ref.CRC {
		return nil, fmt.Errorf("%w: %s has CRC-32C %08x, its summary says %08x", ErrCorrupt, ref.Key, c, ref.CRC)
	}
	p, err := DecodePage(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref.Key, err)
	}
	if p.TopicPartition != k.TopicPartition || p.Level != ref.Level || p.LeaderEpoch != ref.LeaderEpoch || p.aggregate() != ref.span() {
		return nil, fmt.Errorf("%w: %s", ErrPageMismatch, ref.Key)
	}
	return p, nil
}

// summarise encodes p and returns its object and summary, stored under a
// fresh key.
func summarise(p *Page, uid [16]byte) (PageObject, error) {
	b, err := EncodePage(p)
	if err != nil {
		return PageObject{}, err
	}
	a := p.aggregate()
	ref := PageRef{
		Key:   PageKey{TopicPartition: p.TopicPartition, BaseOffset: a.BaseOffset, LeaderEpoch: p.LeaderEpoch, UID: uid}.String(),
		Level: p.Level, Size: int64(len(b)), CRC: crc32.Checksum(b, castagnoli),
		BaseOffset: a.BaseOffset, LastOffset: a.LastOffset, FirstTimestamp: a.FirstTimestamp, MaxTimestamp: a.MaxTimestamp,
		Bytes: a.Bytes, Records: a.Records, Segments: a.Segments, LeaderEpoch: p.LeaderEpoch,
	}
	return PageObject{Ref: ref, Data: b}, nil
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// normalSegments gives decoded segments the shape the transitions build
// (nil for empty lists), so that a decode and an encode round-trip to
// equal values.
func normalSegments(segs []RemoteSegment) []RemoteSegment {
	for i := range segs {
		if len(segs[i].LeaderEpochs) == 0 {
			segs[i].LeaderEpochs = nil
		}
	}
	return nilIfEmpty(segs)
}
