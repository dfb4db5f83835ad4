package format

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"sort"
)

// A manifest is stored as a JSON document followed by a 16-byte trailer
// line, "crc32c:" + 8 lowercase hex digits + "\n", holding the CRC-32C of
// every byte before it. JSON keeps the bucket readable with curl and jq;
// the trailer turns a torn or corrupt manifest into an error.
const (
	// ManifestFormat is the value of the "format" field.
	ManifestFormat = "strata.manifest"
	// ManifestVersion is the manifest version this package writes and reads.
	ManifestVersion = 1

	trailerPrefix = "crc32c:"
	trailerSize   = len(trailerPrefix) + 8 + 1
)

// Manifest is one version of a partition's list of remote segments: the
// whole truth about what the bucket holds for it. Manifests are values:
// the With methods return modified copies, and a manifest must not be
// modified once shared.
type Manifest struct {
	TopicPartition
	// LeaderEpoch is the epoch of the leader that wrote this version; it is
	// at least that of every segment listed.
	LeaderEpoch int32
	// Seq increases by one with every version.
	Seq int64
	// LogStartOffset is the partition's remote log start offset: offsets
	// below it are deleted, even where a listed segment still holds them.
	LogStartOffset int64
	// Segments are in offset order and contiguous: each starts right after
	// the previous one's LastOffset.
	Segments []RemoteSegment
}

// RemoteSegment is a manifest's entry for one segment object: its key, its
// size and checksum, and a copy of its footer, so that a reader can fetch
// an index with one ranged GET without reading the footer first.
type RemoteSegment struct {
	Key string `json:"key"`
	// Size is the object size in bytes (Footer.ObjectSize()).
	Size int64 `json:"size"`
	// CRC is the CRC-32C of the whole object.
	CRC uint32 `json:"crc32c"`
	Footer
	// LeaderEpochs, if not empty, is the leader-epoch history of the
	// segment's batches: the epoch in force at BaseOffset, then each later
	// epoch with the first offset written under it.
	LeaderEpochs []EpochStart `json:"leaderEpochs,omitempty"`
}

// EpochStart is one entry of a leader-epoch history.
type EpochStart struct {
	Epoch       int32 `json:"epoch"`
	StartOffset int64 `json:"startOffset"`
}

// Segment returns the manifest entry for the object f ends, stored under
// key with whole-object CRC-32C objectCRC (both as WriteSegmentObject
// returned them).
func (f Footer) Segment(key string, objectCRC uint32) RemoteSegment {
	return RemoteSegment{Key: key, Size: f.ObjectSize(), CRC: objectCRC, Footer: f}
}

// Key returns the key under which this version of the manifest is stored.
func (m *Manifest) Key() string {
	return ManifestKey{TopicPartition: m.TopicPartition, LeaderEpoch: m.LeaderEpoch, Seq: m.Seq}.String()
}

// EndOffset returns the offset after the last remote segment, or the log
// start offset if there is none: the next segment to upload starts there.
func (m *Manifest) EndOffset() int64 {
	if n := len(m.Segments); n > 0 {
		return m.Segments[n-1].LastOffset + 1
	}
	return m.LogStartOffset
}

// Find returns the segment holding offset, if offset is in
// [LogStartOffset, EndOffset()).
func (m *Manifest) Find(offset int64) (RemoteSegment, bool) {
	if offset < m.LogStartOffset || offset >= m.EndOffset() {
		return RemoteSegment{}, false
	}
	i := sort.Search(len(m.Segments), func(i int) bool { return m.Segments[i].LastOffset >= offset })
	if i == len(m.Segments) || m.Segments[i].BaseOffset > offset {
		return RemoteSegment{}, false
	}
	return m.Segments[i], true
}

// FindTimestamp returns the first segment whose MaxTimestamp is >= ts: the
// one holding the first record with a timestamp >= ts. Timestamps need not
// grow from segment to segment (CreateTime), hence a scan. The record found
// in the first segment may lie below LogStartOffset; the caller clamps.
func (m *Manifest) FindTimestamp(ts int64) (RemoteSegment, bool) {
	for _, s := range m.Segments {
		if s.MaxTimestamp >= ts {
			return s, true
		}
	}
	return RemoteSegment{}, false
}

// With returns a copy of m with seg appended and Seq increased. seg must
// start at EndOffset(); on a manifest without segments it may also start
// below the log start offset (if it reaches it) or above it (the log start
// then moves up to it, since nothing below is in the bucket). seg's epoch
// (its uploader's) may not be below the manifest's: a deposed leader's
// segment never follows a newer leader's version. LeaderEpoch rises to
// seg's: the uploader writes the manifest.
func (m *Manifest) With(seg RemoteSegment) (*Manifest, error) {
	if m.Seq == math.MaxInt64 {
		return nil, errors.New("format: manifest sequence exhausted")
	}
	if err := seg.validate(m.TopicPartition); err != nil {
		return nil, err
	}
	if seg.LeaderEpoch < m.LeaderEpoch {
		return nil, fmt.Errorf("format: segment %s of epoch %d cannot follow a manifest of epoch %d", seg.Key, seg.LeaderEpoch, m.LeaderEpoch)
	}
	next := m.clone(len(m.Segments) + 1)
	if len(m.Segments) == 0 {
		if seg.LastOffset < m.LogStartOffset {
			return nil, fmt.Errorf("format: segment %s ends below the log start offset %d", seg.Key, m.LogStartOffset)
		}
		next.LogStartOffset = max(m.LogStartOffset, seg.BaseOffset)
	} else if seg.BaseOffset != m.EndOffset() {
		return nil, fmt.Errorf("format: segment %s starts at %d, want %d", seg.Key, seg.BaseOffset, m.EndOffset())
	}
	next.Segments = append(next.Segments, seg)
	next.LeaderEpoch = max(m.LeaderEpoch, seg.LeaderEpoch)
	return next, nil
}

// WithLogStart returns a copy of m with the log start offset raised to
// offset (it never moves down), the segments wholly below it dropped, and
// Seq increased. This is how retention deletes; the dropped objects are
// deleted from the bucket only after a grace period, for readers still
// holding an older version.
func (m *Manifest) WithLogStart(offset int64) *Manifest {
	next := m.clone(len(m.Segments))
	next.LogStartOffset = max(m.LogStartOffset, offset)
	i := sort.Search(len(m.Segments), func(i int) bool { return m.Segments[i].LastOffset >= next.LogStartOffset })
	next.Segments = append(next.Segments[:0], m.Segments[i:]...)
	return next
}

// WithReplaced returns a copy of m in which segs take the place of the
// segments covering exactly the same offsets, and Seq increased: this is
// how compaction swaps rewritten segments in. segs must be contiguous, its
// first BaseOffset must be a listed segment's BaseOffset and its last
// LastOffset a listed segment's LastOffset. The replaced objects are
// deleted only after a grace period.
func (m *Manifest) WithReplaced(segs []RemoteSegment) (*Manifest, error) {
	if len(segs) == 0 {
		return nil, errors.New("format: no replacement segments")
	}
	if m.Seq == math.MaxInt64 {
		return nil, errors.New("format: manifest sequence exhausted")
	}
	for i, s := range segs {
		if err := s.validate(m.TopicPartition); err != nil {
			return nil, err
		}
		if i > 0 && s.BaseOffset != segs[i-1].LastOffset+1 {
			return nil, fmt.Errorf("format: replacement segment %s starts at %d, want %d", s.Key, s.BaseOffset, segs[i-1].LastOffset+1)
		}
	}
	first, last := segs[0].BaseOffset, segs[len(segs)-1].LastOffset
	i := sort.Search(len(m.Segments), func(i int) bool { return m.Segments[i].BaseOffset >= first })
	j := sort.Search(len(m.Segments), func(i int) bool { return m.Segments[i].LastOffset >= last })
	if i == len(m.Segments) || m.Segments[i].BaseOffset != first || j == len(m.Segments) || m.Segments[j].LastOffset != last {
		return nil, fmt.Errorf("format: offsets [%d, %d] do not match segment boundaries", first, last)
	}
	next := m.clone(len(m.Segments) - (j - i + 1) + len(segs))
	next.Segments = append(append(append(next.Segments[:0], m.Segments[:i]...), segs...), m.Segments[j+1:]...)
	for _, s := range segs {
		next.LeaderEpoch = max(next.LeaderEpoch, s.LeaderEpoch)
	}
	return next, nil
}

// clone copies m with Seq increased, leaving room for n segments.
func (m *Manifest) clone(n int) *Manifest {
	next := *m
	next.Seq++
	next.Segments = append(make([]RemoteSegment, 0, n), m.Segments...)
	return &next
}

// Validate checks every invariant of the manifest: a valid partition,
// non-negative epoch, sequence and log start, each segment well formed and
// stored under a key of this partition that carries its base offset and
// epoch, segments contiguous, and the log start offset inside the first
// segment (or anywhere if there is none).
func (m *Manifest) Validate() error {
	if err := m.TopicPartition.Validate(); err != nil {
		return err
	}
	if m.LeaderEpoch < 0 || m.Seq < 0 || m.LogStartOffset < 0 {
		return fmt.Errorf("format: manifest epoch %d, seq %d, log start %d", m.LeaderEpoch, m.Seq, m.LogStartOffset)
	}
	for i, s := range m.Segments {
		if err := s.validate(m.TopicPartition); err != nil {
			return err
		}
		if s.LeaderEpoch > m.LeaderEpoch {
			return fmt.Errorf("format: segment %s has epoch %d above the manifest's %d", s.Key, s.LeaderEpoch, m.LeaderEpoch)
		}
		if i > 0 && s.BaseOffset != m.Segments[i-1].LastOffset+1 {
			return fmt.Errorf("format: segment %s starts at %d, want %d", s.Key, s.BaseOffset, m.Segments[i-1].LastOffset+1)
		}
	}
	if len(m.Segments) > 0 {
		if s := m.Segments[0]; m.LogStartOffset < s.BaseOffset || m.LogStartOffset > s.LastOffset {
			return fmt.Errorf("format: log start offset %d outside the first segment [%d, %d]", m.LogStartOffset, s.BaseOffset, s.LastOffset)
		}
	}
	return nil
}

func (s *RemoteSegment) validate(tp TopicPartition) error {
	k, err := ParseSegmentKey(s.Key)
	if err != nil {
		return err
	}
	if k.TopicPartition != tp || k.BaseOffset != s.BaseOffset || k.LeaderEpoch != s.LeaderEpoch {
		return fmt.Errorf("format: segment key %s does not match its entry (partition %s-%d, base %d, epoch %d)",
			s.Key, tp.Topic, tp.Partition, s.BaseOffset, s.LeaderEpoch)
	}
	if err := s.Footer.validate(); err != nil {
		return fmt.Errorf("format: segment %s: %w", s.Key, err)
	}
	if s.Size != s.ObjectSize() {
		return fmt.Errorf("format: segment %s: size %d, parts end at %d", s.Key, s.Size, s.ObjectSize())
	}
	for i, e := range s.LeaderEpochs {
		switch {
		case i == 0 && e.StartOffset != s.BaseOffset,
			i > 0 && (e.Epoch <= s.LeaderEpochs[i-1].Epoch || e.StartOffset <= s.LeaderEpochs[i-1].StartOffset),
			e.Epoch < 0, e.Epoch > s.LeaderEpoch, e.StartOffset > s.LastOffset:
			return fmt.Errorf("format: segment %s: bad leader-epoch entry %d (%d, %d)", s.Key, i, e.Epoch, e.StartOffset)
		}
	}
	return nil
}

// wireManifest is the JSON document; its field order is the order written.
type wireManifest struct {
	Format         string          `json:"format"`
	Version        int             `json:"version"`
	Topic          string          `json:"topic"`
	TopicID        string          `json:"topicId"`
	Partition      int32           `json:"partition"`
	LeaderEpoch    int32           `json:"leaderEpoch"`
	Seq            int64           `json:"seq"`
	LogStartOffset int64           `json:"logStartOffset"`
	Segments       []RemoteSegment `json:"segments"`
}

// EncodeManifest validates m and encodes it.
func EncodeManifest(m *Manifest) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	w := wireManifest{
		Format: ManifestFormat, Version: ManifestVersion,
		Topic: m.Topic, TopicID: hex.EncodeToString(m.TopicID[:]), Partition: m.Partition,
		LeaderEpoch: m.LeaderEpoch, Seq: m.Seq, LogStartOffset: m.LogStartOffset,
		Segments: m.Segments,
	}
	if w.Segments == nil {
		w.Segments = []RemoteSegment{}
	}
	b, err := json.Marshal(&w)
	if err != nil {
		return nil, fmt.Errorf("format: encoding manifest: %w", err)
	}
	b = append(b, '\n')
	b = fmt.Appendf(b, "%s%08x\n", trailerPrefix, crc32.Checksum(b, castagnoli))
	return b, nil
}

// wireTopicPartition is the partition an object names, its topic ID in
// hex as the wire forms carry it; what names the object for the error.
func wireTopicPartition(topic, hexID string, partition int32, what string) (TopicPartition, error) {
	id, ok := parseHex(hexID)
	if !ok {
		return TopicPartition{}, fmt.Errorf("%w: %s topic ID %q", ErrCorrupt, what, hexID)
	}
	return TopicPartition{Topic: topic, TopicID: id, Partition: partition}, nil
}

// DecodeManifest checks the trailer's CRC-32C, decodes the document
// strictly (no unknown fields, no trailing data, a known format and
// version) and validates the result.
func DecodeManifest(b []byte) (*Manifest, error) {
	body, err := openJSON(b, "manifest")
	if err != nil {
		return nil, err
	}
	var w wireManifest
	if err := decodeStrict(body, &w, "manifest"); err != nil {
		return nil, err
	}
	if w.Format != ManifestFormat || w.Version != ManifestVersion {
		return nil, fmt.Errorf("%w: manifest format %q version %d, want %q version %d", ErrCorrupt, w.Format, w.Version, ManifestFormat, ManifestVersion)
	}
	tp, err := wireTopicPartition(w.Topic, w.TopicID, w.Partition, "manifest")
	if err != nil {
		return nil, err
	}
	m := &Manifest{
		TopicPartition: tp,
		LeaderEpoch:    w.LeaderEpoch, Seq: w.Seq, LogStartOffset: w.LogStartOffset,
		Segments: w.Segments,
	}
	if len(m.Segments) == 0 {
		m.Segments = nil
	}
	for i := range m.Segments {
		if len(m.Segments[i].LeaderEpochs) == 0 {
			m.Segments[i].LeaderEpochs = nil
		}
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	return m, nil
}
