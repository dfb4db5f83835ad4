package tier

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"testing"

	"strata/tier/format"
	"strata/tier/objstore"
)

// TestProbeTopic: without a checkpoint, a topic's partitions are those
// with objects, found past partitions that never uploaded (a gap shorter
// than ProbeGap), by incarnation, and not confused with a longer name
// that shares the key prefix.
func TestProbeTopic(t *testing.T) {
	st, err := objstore.NewDir(filepath.Join(t.TempDir(), "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(key string) {
		t.Helper()
		if err := st.Put(ctx, key, bytes.NewReader([]byte("x")), 1); err != nil {
			t.Fatal(err)
		}
	}
	old, cur := [16]byte{1}, [16]byte{2}
	manifest := func(topic string, id [16]byte, p int32) {
		put(format.ManifestKey{TopicPartition: format.TopicPartition{Topic: topic, TopicID: id, Partition: p}, Seq: 1}.String())
	}
	// cur: partitions 0 and 3 uploaded, 1 and 2 never did; 4 has only a
	// segment object (its manifest not written yet).
	manifest("orders", cur, 0)
	manifest("orders", cur, 3)
	put(format.SegmentKey{TopicPartition: format.TopicPartition{Topic: "orders", TopicID: cur, Partition: 4}}.String())
	// past a gap of ProbeGap: not found
	manifest("orders", cur, 5+ProbeGap)
	// an older incarnation's partition 1, not collected yet
	manifest("orders", old, 1)
	// longer names under the same partitions' hash prefixes would be
	// skipped; other topics are never looked at
	manifest("orders-eu", cur, 0)
	manifest("orders-eu", cur, 7)

	got, err := ProbeTopic(ctx, st, "orders")
	if err != nil {
		t.Fatal(err)
	}
	want := map[[16]byte][]int32{cur: {0, 3, 4}, old: {1}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for id, ps := range want {
		if !slices.Equal(got[id], ps) {
			t.Fatalf("id %x: partitions %v, want %v", id, got[id], ps)
		}
	}
	ids, err := PartitionIDs(ctx, st, "orders", 0)
	if err != nil || len(ids) != 1 || ids[0] != cur {
		t.Fatalf("PartitionIDs(orders, 0) = %x, %v", ids, err)
	}
	if got, err := ProbeTopic(ctx, st, "absent"); err != nil || len(got) != 0 {
		t.Fatalf("absent topic: %v, %v", got, err)
	}
}
