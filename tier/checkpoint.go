package tier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	key := format.CheckpointKey{Index: c.Index, WrittenMs: c.WrittenMs}.String()
	if err := st.Create(ctx, key, bytes.NewReader(b), int64(len(b))); err != nil && !errors.Is(err, objstore.ErrExists) {
		return "", fmt.Errorf("write checkpoint %s: %w", key, err)
	}
	return key, nil
}

// Checkpoints lists the bucket's checkpoint keys, oldest first. Objects
// under the prefix that are not checkpoints are skipped.
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

// LatestCheckpoint reads the bucket's newest checkpoint (the largest key),
// or returns ErrNoCheckpoint. A newest checkpoint that does not parse is
// an error, not a reason to fall back silently to an older one: the
// caller reports it, and the operator decides.
func LatestCheckpoint(ctx context.Context, st objstore.Store) (*format.Checkpoint, string, error) {
	all, err := Checkpoints(ctx, st)
	if err != nil {
		return nil, "", err
	}
	if len(all) == 0 {
		return nil, "", ErrNoCheckpoint
	}
	key := all[len(all)-1].Key
	c, err := ReadCheckpoint(ctx, st, key)
	return c, key, err
}

// PruneCheckpoints deletes the checkpoints written before cutoff, always
// keeping the newest keep of them (at least one), and returns how many it
// deleted.
func PruneCheckpoints(ctx context.Context, st objstore.Store, cutoff time.Time, keep int) (int, error) {
	all, err := Checkpoints(ctx, st)
	if err != nil {
		return 0, err
	}
	keep = max(keep, 1)
	n := 0
	for _, a := range all[:max(len(all)-keep, 0)] {
		k, _ := format.ParseCheckpointKey(a.Key)
		if k.WrittenMs >= cutoff.UnixMilli() {
			break // keys sort by index first; a later one is no older in practice, and keeping it is safe
		}
		if err := st.Delete(ctx, a.Key); err != nil {
			return n, fmt.Errorf("delete checkpoint %s: %w", a.Key, err)
		}
		n++
	}
	return n, nil
}
