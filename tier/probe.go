package tier

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"strata/tier/format"
	"strata/tier/objstore"
)

// Finding a topic's partitions in a bucket without a metadata checkpoint
// (docs/bucket-format.md §1): the bucket does not record how many
// partitions a topic has, and a partition that never uploaded has no
// objects at all, so counting up to the first partition without a
// manifest stops short at a quiet partition. ProbeTopic looks on past
// gaps instead. `strata bucket` (tier/archive) and read replicas
// (broker/node) find topics with it.

// ProbeGap is how many partitions in a row without objects end
// ProbeTopic's search: a topic whose partitions 0..n-1 all uploaded
// nothing is not found, and partitions past such a run are not counted.
const ProbeGap = 16

// PartitionOfKey returns the partition a key of the bucket belongs to,
// if it is one of a partition's objects (a manifest, a segment object or
// a manifest page).
func PartitionOfKey(key string) (format.TopicPartition, bool) {
	if k, err := format.ParseManifestKey(key); err == nil {
		return k.TopicPartition, true
	}
	if k, err := format.ParseSegmentKey(key); err == nil {
		return k.TopicPartition, true
	}
	if k, err := format.ParsePageKey(key); err == nil {
		return k.TopicPartition, true
	}
	return format.TopicPartition{}, false
}

// SkipPartition is where a listing resumes to pass over the rest of a
// partition's objects once one is seen: every key of the partition
// starts with its prefix "<h>/<topic>-<id>/<p>/", and that prefix with
// its '/' bumped to '0' sorts above every key under it and below the
// next partition's.
func SkipPartition(tp format.TopicPartition) string {
	p := tp.Prefix()
	return p[:len(p)-1] + "0"
}

// errSkip ends one listing call so that the next starts past a
// partition's prefix.
var errSkip = errors.New("skip")

// PartitionIDs lists, sorted, the topic ids under which st holds objects
// of partition p of topic name: usually one, several when the topic was
// deleted and created again under the same name before the old objects
// were collected. It costs one listing request per id, whatever the
// number of objects.
func PartitionIDs(ctx context.Context, st objstore.Store, name string, p int32) ([][16]byte, error) {
	tp := format.TopicPartition{Topic: name, Partition: p}
	prefix := tp.HashPrefix() + "/" + name + "-"
	var ids [][16]byte
	after := ""
	for {
		err := objstore.ListAfter(ctx, st, prefix, after, func(at objstore.Attrs) error {
			got, ok := PartitionOfKey(at.Key)
			if !ok || got.Topic != name {
				return nil // a longer name (orders-eu) shares the prefix
			}
			if got.Partition == p {
				ids = append(ids, got.TopicID)
			}
			after = SkipPartition(got)
			return errSkip
		})
		if err == nil {
			break
		}
		if !errors.Is(err, errSkip) {
			return nil, fmt.Errorf("list topic %s partition %d: %w", name, p, err)
		}
	}
	slices.SortFunc(ids, func(x, y [16]byte) int { return strings.Compare(format.HexID(x), format.HexID(y)) })
	return slices.Compact(ids), nil
}

// ProbeTopic finds the partitions of topic name that hold objects in st,
// by topic id (each list sorted), probing partitions 0, 1, 2, ... until
// ProbeGap in a row hold nothing: a partition that never uploaded between
// two that did is passed over, not taken for the end of the topic. An
// empty map means the bucket holds nothing of the topic.
func ProbeTopic(ctx context.Context, st objstore.Store, name string) (map[[16]byte][]int32, error) {
	found := make(map[[16]byte][]int32)
	for p, empty := int32(0), 0; empty < ProbeGap && p >= 0; p++ {
		ids, err := PartitionIDs(ctx, st, name, p)
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			empty++
			continue
		}
		empty = 0
		for _, id := range ids {
			found[id] = append(found[id], p)
		}
	}
	return found, nil
}
