package tier

import (
	"context"
	"errors"
	"testing"
	"time"

	"strata/tier/format"
	"strata/tier/objstore"
)

const (
	historyA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	historyB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	historyC = "cccccccccccccccccccccccccccccccc"
)

// checkpointOf is a checkpoint of history at index, written at ms,
// naming the topics given (internal when their name starts with "__").
func checkpointOf(history string, index uint64, ms int64, topics ...string) *format.Checkpoint {
	c := &format.Checkpoint{ClusterID: "c", History: history, Index: index, WrittenMs: ms, WrittenBy: 1}
	for i, name := range topics {
		var id [16]byte
		id[0], id[1] = byte(i+1), history[0]
		c.Topics = append(c.Topics, format.CheckpointTopic{
			Name: name, ID: format.HexID(id), Internal: name[:2] == "__", ReplicationFactor: 1,
			Partitions: []format.CheckpointPartition{{Partition: 0, Replicas: []int32{1}}},
		})
	}
	return c
}

// TestNewestCheckpoint: the checkpoint that stands for the archive is
// the newest history's newest checkpoint naming a user topic; a restore
// sets its own history aside, and falls back to it only when it is alone.
func TestNewestCheckpoint(t *testing.T) {
	ctx := context.Background()
	st, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := LatestCheckpoint(ctx, st); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("empty bucket: %v, want ErrNoCheckpoint", err)
	}
	write := func(c *format.Checkpoint) {
		t.Helper()
		if _, err := WriteCheckpoint(ctx, st, c); err != nil {
			t.Fatal(err)
		}
	}
	// History A, the archive: its newest checkpoint is at index 900.
	write(checkpointOf(historyA, 100, 1000, "__consumer_offsets", "orders"))
	write(checkpointOf(historyA, 900, 2000, "__consumer_offsets", "orders", "payments"))
	check := func(what, except, wantHistory string, wantIndex uint64) {
		t.Helper()
		c, key, err := NewestCheckpoint(ctx, st, except)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if c.History != wantHistory || c.Index != wantIndex {
			t.Fatalf("%s: got history %s index %d (%s), want %s index %d", what, c.History, c.Index, key, wantHistory, wantIndex)
		}
	}
	check("one history", "", historyA, 900)
	check("a restore by A itself", historyA, historyA, 900)

	// History B started afresh later; its index is far lower but it
	// wrote later, and so far it holds only internal topics.
	write(checkpointOf(historyB, 5, 3000, "__consumer_offsets"))
	check("B has restored nothing yet", "", historyA, 900)
	check("a restore by B", historyB, historyA, 900)

	// B restored orders: it stands for the archive now, but B's own
	// restore still reads A's.
	write(checkpointOf(historyB, 40, 4000, "__consumer_offsets", "orders"))
	check("B restored", "", historyB, 40)
	check("B restores again", historyB, historyA, 900)
	// A third history, C, restores from the newest of the others: B's.
	check("C restores", historyC, historyB, 40)
}

// TestHistoryHeads: one key per history, its newest, the most recently
// written first.
func TestHistoryHeads(t *testing.T) {
	ctx := context.Background()
	st, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if heads, err := HistoryHeads(ctx, st); err != nil || len(heads) != 0 {
		t.Fatalf("empty bucket: %v, %v", heads, err)
	}
	for _, c := range []*format.Checkpoint{
		checkpointOf(historyA, 100, 1000, "orders"),
		checkpointOf(historyA, 900, 2000, "orders", "payments"),
		checkpointOf(historyB, 5, 3000, "__consumer_offsets"),
		checkpointOf(historyC, 7, 1500, "orders"),
		checkpointOf(historyC, 8, 1600, "orders"),
	} {
		if _, err := WriteCheckpoint(ctx, st, c); err != nil {
			t.Fatal(err)
		}
	}
	heads, err := HistoryHeads(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	want := []format.CheckpointKey{
		{History: historyB, Index: 5, WrittenMs: 3000},
		{History: historyA, Index: 900, WrittenMs: 2000},
		{History: historyC, Index: 8, WrittenMs: 1600},
	}
	if len(heads) != len(want) {
		t.Fatalf("heads %v, want %v", heads, want)
	}
	for i := range want {
		if heads[i] != want[i] {
			t.Fatalf("heads %v, want %v", heads, want)
		}
	}
}

// TestPruneCheckpoints: each history keeps its newest checkpoints,
// whatever their age; older ones go once past the cutoff.
func TestPruneCheckpoints(t *testing.T) {
	ctx := context.Background()
	st, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		for _, h := range []string{historyA, historyB} {
			if _, err := WriteCheckpoint(ctx, st, checkpointOf(h, uint64(10+i), int64(1000+i), "orders")); err != nil {
				t.Fatal(err)
			}
		}
	}
	n, err := PruneCheckpoints(ctx, st, time.UnixMilli(1003), 2)
	if err != nil {
		t.Fatal(err)
	}
	if n != 6 {
		t.Fatalf("pruned %d, want 3 of each history (written before the cutoff, not among its newest 2)", n)
	}
	left, err := Checkpoints(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, a := range left {
		keys = append(keys, a.Key)
	}
	want := []string{
		format.CheckpointKey{History: historyA, Index: 13, WrittenMs: 1003}.String(),
		format.CheckpointKey{History: historyA, Index: 14, WrittenMs: 1004}.String(),
		format.CheckpointKey{History: historyB, Index: 13, WrittenMs: 1003}.String(),
		format.CheckpointKey{History: historyB, Index: 14, WrittenMs: 1004}.String(),
	}
	if len(keys) != len(want) {
		t.Fatalf("left %v, want %v", keys, want)
	}
	for i := range want {
		if keys[i] != want[i] {
			t.Fatalf("left %v, want %v", keys, want)
		}
	}
}
