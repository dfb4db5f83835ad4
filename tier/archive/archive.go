// Package archive reads a bucket's topics and records without a broker,
// read-only: the topics from the newest metadata checkpoint (or, in a
// bucket written before checkpoints existed, from a listing of its
// partition prefixes), each partition's offsets, times and size from its
// newest manifest, and the records themselves, in offset order,
// decompressed, CRC-checked and, by default, read_committed, from the
// segment objects (docs/bucket-format.md). `strata bucket ls|cat|export`
// are its commands.
//
// Everything goes through a read-only store (objstore.ReadOnly): read
// credentials are enough, and nothing here can change an archive.
package archive

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// ErrNoTopic reports a topic the bucket holds nothing of.
var ErrNoTopic = errors.New("no such topic in the bucket")

// Archive is a bucket opened for reading. It is safe for concurrent use.
type Archive struct {
	st    objstore.Store
	pages format.PageSource
}

// pageCacheBytes bounds the manifest pages an Archive keeps in memory.
const pageCacheBytes = 16 << 20

// Open returns an Archive over st, which it wraps read-only.
func Open(st objstore.Store) *Archive {
	ro := objstore.ReadOnly(st)
	return &Archive{st: ro, pages: tier.NewPageSource(ro, pageCacheBytes)}
}

// Topic is one topic (one incarnation: a name and an id) of the bucket.
type Topic struct {
	Name     string
	ID       [16]byte
	Internal bool
	// Partitions are the partitions the checkpoint names, or, from a
	// listing, those with objects in the bucket, in order.
	Partitions []int32
}

// Source says where a topic list came from: the key of the checkpoint
// it was read from, or "" for a listing of the bucket. Others counts the
// other metadata histories' newest checkpoints that added topics.
type Source struct {
	Checkpoint string
	Others     int
}

func (s Source) String() string {
	if s.Checkpoint == "" {
		return "a listing of the bucket (no metadata checkpoint)"
	}
	if s.Others > 0 {
		return fmt.Sprintf("checkpoint %s and the newest checkpoints of %d other metadata histories", s.Checkpoint, s.Others)
	}
	return "checkpoint " + s.Checkpoint
}

// internalTopic reports whether a topic the bucket names without a
// checkpoint is one of Strata's internal topics.
func internalTopic(name string) bool {
	return name == "__consumer_offsets" || name == "__transaction_state"
}

// Topics lists the bucket's topics: from its newest metadata checkpoint
// when it has one, else by listing the partition prefixes (a bucket
// written before checkpoints existed). The list is sorted by name.
//
// A bucket restored by a later cluster holds several metadata histories
// (docs/bucket-format.md §12), and a topic the later one did not restore
// is named only by an older history: the newest checkpoint of every other
// history adds the topics (name and id) the chosen one lacks, so that no
// topic whose history is in the bucket goes unlisted.
func (a *Archive) Topics(ctx context.Context) ([]Topic, Source, error) {
	cp, key, err := tier.LatestCheckpoint(ctx, a.st)
	switch {
	case err == nil:
	case !errors.Is(err, tier.ErrNoCheckpoint):
		return nil, Source{}, err
	default:
		ts, err := a.listTopics(ctx)
		return ts, Source{}, err
	}
	out := checkpointTopics(cp)
	src := Source{Checkpoint: key}
	heads, err := tier.HistoryHeads(ctx, a.st)
	if err != nil {
		return nil, Source{}, err
	}
	for _, h := range heads {
		if h.History == cp.History {
			continue
		}
		other, err := tier.ReadCheckpoint(ctx, a.st, h.String())
		if err != nil {
			return nil, Source{}, err
		}
		added := false
		for _, t := range checkpointTopics(other) {
			if !slices.ContainsFunc(out, func(have Topic) bool { return have.Name == t.Name && have.ID == t.ID }) {
				out = append(out, t)
				added = true
			}
		}
		if added {
			src.Others++
		}
	}
	slices.SortFunc(out, func(x, y Topic) int { return strings.Compare(x.Name, y.Name) })
	return out, src, nil
}

func checkpointTopics(cp *format.Checkpoint) []Topic {
	out := make([]Topic, 0, len(cp.Topics))
	for _, ct := range cp.Topics {
		t := Topic{Name: ct.Name, ID: ct.TopicID(), Internal: ct.Internal}
		for _, p := range ct.Partitions {
			t.Partitions = append(t.Partitions, p.Partition)
		}
		slices.Sort(t.Partitions)
		out = append(out, t)
	}
	slices.SortFunc(out, func(x, y Topic) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// errSkip ends one listing call so that the next starts past a
// partition's prefix.
var errSkip = errors.New("skip")

// listTopics finds every partition by listing the bucket, skipping over
// each partition's objects once its first key is seen: one listing
// request per partition rather than one per thousand objects. Keys of a
// partition all start with its prefix "<h>/<topic>-<id>/<p>/", so the
// listing resumes after that prefix with its '/' bumped to '0', which
// sorts above every key under it and below the next partition's.
func (a *Archive) listTopics(ctx context.Context) ([]Topic, error) {
	type incarnation struct {
		name string
		id   [16]byte
	}
	found := make(map[incarnation][]int32)
	after := ""
	for {
		err := objstore.ListAfter(ctx, a.st, "", after, func(at objstore.Attrs) error {
			tp, ok := tier.PartitionOfKey(at.Key)
			if !ok {
				return nil
			}
			inc := incarnation{tp.Topic, tp.TopicID}
			found[inc] = append(found[inc], tp.Partition)
			after = tier.SkipPartition(tp)
			return errSkip
		})
		if err == nil {
			break
		}
		if !errors.Is(err, errSkip) {
			return nil, fmt.Errorf("list the bucket: %w", err)
		}
	}
	out := make([]Topic, 0, len(found))
	for inc, parts := range found {
		slices.Sort(parts)
		out = append(out, Topic{Name: inc.name, ID: inc.id, Internal: internalTopic(inc.name), Partitions: slices.Compact(parts)})
	}
	slices.SortFunc(out, func(x, y Topic) int {
		if c := strings.Compare(x.Name, y.Name); c != 0 {
			return c
		}
		return strings.Compare(format.HexID(x.ID), format.HexID(y.ID))
	})
	return out, nil
}

// FindTopic returns the topic called name: the checkpoint's when the
// newest checkpoint names it, else the one the bucket holds under that
// name, found by listing where its partitions' keys must be. id, when not
// empty (32 hex digits), picks one incarnation of several: a topic
// deleted and created again under the same name. ErrNoTopic when the
// bucket holds nothing of it.
func (a *Archive) FindTopic(ctx context.Context, name, id string) (Topic, error) {
	if err := (format.TopicPartition{Topic: name, TopicID: [16]byte{1}}).Validate(); err != nil {
		return Topic{}, fmt.Errorf("topic %q: %w", name, err)
	}
	cp, _, err := tier.LatestCheckpoint(ctx, a.st)
	if err != nil && !errors.Is(err, tier.ErrNoCheckpoint) {
		return Topic{}, err
	}
	if cp != nil {
		for _, t := range checkpointTopics(cp) {
			if t.Name == name && (id == "" || format.HexID(t.ID) == id) {
				return t, nil
			}
		}
	}
	// Not in the checkpoint (none, or older than the topic): every key
	// of partition p sits under <h(name/p)>/<name>-<id>/p/. The bucket
	// does not record how many partitions a topic has, and a partition
	// that never uploaded has no objects, so tier.ProbeTopic probes
	// partitions until tier.ProbeGap in a row hold nothing.
	found, err := tier.ProbeTopic(ctx, a.st, name)
	if err != nil {
		return Topic{}, err
	}
	if id != "" {
		maps.DeleteFunc(found, func(x [16]byte, _ []int32) bool { return format.HexID(x) != id })
	}
	switch len(found) {
	case 0:
		if id != "" {
			return Topic{}, fmt.Errorf("%w: %s with id %s", ErrNoTopic, name, id)
		}
		return Topic{}, fmt.Errorf("%w: %s", ErrNoTopic, name)
	case 1:
	default:
		var hex []string
		for x := range found {
			hex = append(hex, format.HexID(x))
		}
		slices.Sort(hex)
		return Topic{}, fmt.Errorf("the bucket holds topic %s under several ids (%s), a topic deleted and created again: choose one with --topic-id",
			name, strings.Join(hex, ", "))
	}
	t := Topic{Name: name, Internal: internalTopic(name)}
	for x, parts := range found {
		t.ID, t.Partitions = x, parts
	}
	return t, nil
}

// Partition is what the bucket holds of one partition, from its newest
// manifest.
type Partition struct {
	format.TopicPartition
	// Manifest is the key of the manifest read.
	Manifest string
	// LogStart and End bound the offsets the bucket holds: [LogStart, End).
	LogStart, End int64
	// FirstTimestamp is the first segment's first batch timestamp and
	// MaxTimestamp the largest record timestamp, Unix milliseconds; -1
	// when unknown (no segment, or only segments compaction emptied).
	FirstTimestamp, MaxTimestamp int64
	// Bytes, Segments and Records total the segment objects listed
	// (Records is -1 if any count is unknown).
	Bytes, Segments, Records int64
	// LastUpload is when the newest segment object was written (its
	// last-modified time); zero without segments.
	LastUpload time.Time

	root *format.Root
}

// Partition reads tp's newest manifest. ok is false when the bucket holds
// none (nothing of the partition was ever uploaded).
func (a *Archive) Partition(ctx context.Context, tp format.TopicPartition) (p Partition, ok bool, err error) {
	m, ok, err := tier.ReadManifest(ctx, a.st, tp)
	if err != nil || !ok {
		return Partition{}, ok, err
	}
	tot := m.Totals()
	p = Partition{
		TopicPartition: tp, Manifest: m.Key(), LogStart: m.LogStartOffset, End: m.EndOffset(),
		FirstTimestamp: -1, MaxTimestamp: -1,
		Bytes: tot.Bytes, Segments: tot.Segments, Records: tot.Records, root: m,
	}
	if tot.Segments > 0 {
		p.FirstTimestamp, p.MaxTimestamp = tot.FirstTimestamp, tot.MaxTimestamp
	}
	if p.End > p.LogStart {
		last, found, err := m.Find(ctx, a.pages, p.End-1)
		if err != nil {
			return Partition{}, false, fmt.Errorf("manifest %s: %w", p.Manifest, err)
		}
		if found {
			at, err := a.st.Stat(ctx, last.Key)
			if err != nil {
				return Partition{}, false, fmt.Errorf("segment %s: %w", last.Key, err)
			}
			p.LastUpload = at.LastModified
		}
	}
	return p, true, nil
}
