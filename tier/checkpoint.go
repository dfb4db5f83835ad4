package tier

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"strata/tier/format"
	"strata/tier/objstore"
)

// ErrNoCheckpoint says a bucket holds no metadata checkpoint: no
// controller of a version that writes them has run against it, or it is
// not a bucket of Strata's.
var ErrNoCheckpoint = errors.New("tier: the bucket holds no metadata checkpoint")

// WriteCheckpoint stores c under its key (format.CheckpointKey of its
// index and written time) with a conditional create, so no checkpoint is
// ever replaced. A checkpoint of the same key already there is not an
// error: it holds the same state, written by another controller in the
// same millisecond, or by a retry of this write.
func WriteCheckpoint(ctx context.Context, st objstore.Store, c *format.Checkpoint) (string, error) {
	b, err := format.EncodeCheckpoint(c)
	if err != nil {
		return "", err
	}
	key := format.CheckpointKey{History: c.History, Index: c.Index, WrittenMs: c.WrittenMs}.String()
	if err := st.Create(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil && !errors.Is(err, objstore.ErrExists) {
		return "", fmt.Errorf("write checkpoint %s: %w", key, err)
	}
	return key, nil
}

// Checkpoints lists the bucket's checkpoint keys in key order: by
// history, and within each history oldest first. Objects under the prefix
// that are not checkpoints are skipped.
func Checkpoints(ctx context.Context, st objstore.Store) ([]objstore.Attrs, error) {
	var out []objstore.Attrs
	err := st.List(ctx, format.CheckpointsPrefix(), func(a objstore.Attrs) error {
		if _, err := format.ParseCheckpointKey(a.Key); err == nil {
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	return out, nil
}

// ReadCheckpoint reads and checks the checkpoint at key.
func ReadCheckpoint(ctx context.Context, st objstore.Store, key string) (*format.Checkpoint, error) {
	rc, err := st.GetRange(ctx, key, 0, -1)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, format.MaxCheckpointBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	c, err := format.ParseCheckpoint(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return c, nil
}

// LatestCheckpoint reads the checkpoint that stands for the bucket's
// archive: NewestCheckpoint with no history set aside.
func LatestCheckpoint(ctx context.Context, st objstore.Store) (*format.Checkpoint, string, error) {
	return NewestCheckpoint(ctx, st, "")
}

// NewestCheckpoint reads the newest checkpoint of the histories other
// than except (the running cluster's own, for a restore), or returns
// ErrNoCheckpoint. Of each history only its newest checkpoint counts, and
// of those the most recently written that names a topic of users' own
// wins: a cluster started afresh over the bucket and lost again before it
// restored anything wrote checkpoints of nothing but its internal topics,
// which must not stand for the archive. When only except's history is
// there its newest checkpoint is returned.
//
// A chosen checkpoint that does not parse is an error, not a reason to
// fall back silently to an older one: the caller reports it, and the
// operator decides.
func NewestCheckpoint(ctx context.Context, st objstore.Store, except string) (*format.Checkpoint, string, error) {
	heads, err := HistoryHeads(ctx, st)
	if err != nil {
		return nil, "", err
	}
	return NewestOf(ctx, st, heads, except)
}

// NewestOf is NewestCheckpoint's choice among heads, the histories'
// newest checkpoints as HistoryHeads returns them: a caller that lists
// the heads for more than the choice lists them once.
func NewestOf(ctx context.Context, st objstore.Store, heads []format.CheckpointKey, except string) (*format.Checkpoint, string, error) {
	if len(heads) == 0 {
		return nil, "", ErrNoCheckpoint
	}
	var others, own []format.CheckpointKey
	for _, k := range heads {
		if k.History == except {
			own = append(own, k)
		} else {
			others = append(others, k)
		}
	}
	if len(others) == 0 {
		others = own
	}
	var first *format.Checkpoint
	var firstKey string
	for _, k := range others { // newest written first
		c, err := ReadCheckpoint(ctx, st, k.String())
		if err != nil {
			return nil, "", err
		}
		if first == nil {
			first, firstKey = c, k.String()
		}
		if c.NamesUserTopic() {
			return c, k.String(), nil
		}
	}
	return first, firstKey, nil
}

// HistoryHeads returns the key of each metadata history's newest
// checkpoint, the most recently written first (ties by history id): one
// LIST of the checkpoints, no checkpoint read. A history is known to a
// reader only by its checkpoints, so these are the bucket's histories.
func HistoryHeads(ctx context.Context, st objstore.Store) ([]format.CheckpointKey, error) {
	all, err := Checkpoints(ctx, st)
	if err != nil {
		return nil, err
	}
	var heads []format.CheckpointKey
	for i, a := range all {
		k, _ := format.ParseCheckpointKey(a.Key)
		if i+1 < len(all) {
			if next, _ := format.ParseCheckpointKey(all[i+1].Key); next.History == k.History {
				continue // in key order: the last of a history is its newest
			}
		}
		heads = append(heads, k)
	}
	slices.SortStableFunc(heads, func(a, b format.CheckpointKey) int { return cmp.Compare(b.WrittenMs, a.WrittenMs) })
	return heads, nil
}

// HistoryCheckpoint reads the newest checkpoint of history, or returns
// ErrNoCheckpoint when it has none.
func HistoryCheckpoint(ctx context.Context, st objstore.Store, history string) (*format.Checkpoint, string, error) {
	if history == "" {
		return nil, "", ErrNoCheckpoint
	}
	var newest string
	err := st.List(ctx, format.CheckpointsPrefix()+history+"/", func(a objstore.Attrs) error {
		if k, err := format.ParseCheckpointKey(a.Key); err == nil && k.History == history {
			newest = a.Key // in key order: the last is the newest
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("list checkpoints of history %s: %w", history, err)
	}
	if newest == "" {
		return nil, "", ErrNoCheckpoint
	}
	c, err := ReadCheckpoint(ctx, st, newest)
	return c, newest, err
}

// PruneCheckpoints deletes the checkpoints written before cutoff, always
// keeping the newest keep (at least one) of each history, and returns how
// many it deleted. Another history's newest checkpoints are the archive a
// restore reads, so every history keeps its own.
func PruneCheckpoints(ctx context.Context, st objstore.Store, cutoff time.Time, keep int) (int, error) {
	all, err := Checkpoints(ctx, st)
	if err != nil {
		return 0, err
	}
	keep = max(keep, 1)
	byHistory := map[string][]format.CheckpointKey{}
	for _, a := range all {
		k, _ := format.ParseCheckpointKey(a.Key)
		byHistory[k.History] = append(byHistory[k.History], k)
	}
	n := 0
	for _, h := range slices.Sorted(maps.Keys(byHistory)) {
		keys := byHistory[h]
		for _, k := range keys[:max(len(keys)-keep, 0)] {
			if k.WrittenMs >= cutoff.UnixMilli() {
				break // keys sort by index first; a later one is no older in practice, and keeping it is safe
			}
			if err := st.Delete(ctx, k.String()); err != nil {
				return n, fmt.Errorf("delete checkpoint %s: %w", k, err)
			}
			n++
		}
	}
	return n, nil
}
