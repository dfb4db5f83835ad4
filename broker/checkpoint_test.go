package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// checkpointBroker is a tiered broker on the directory store whose
// controller checkpoints the metadata every interval and at most every
// debounce.
func checkpointBroker(t *testing.T, interval, debounce, retention time.Duration) (*Broker, objstore.Store) {
	t.Helper()
	store, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := tieredBroker(t, "", store, func(c *Config) {
		c.Tier.CheckpointInterval, c.Tier.CheckpointDebounce, c.Tier.CheckpointRetention = interval, debounce, retention
	})
	return b, store
}

// latestCheckpoint is the bucket's newest checkpoint, nil when there is
// none yet.
func latestCheckpoint(t testing.TB, store objstore.Store) *format.Checkpoint {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cp, _, err := tier.LatestCheckpoint(ctx, store)
	if errors.Is(err, tier.ErrNoCheckpoint) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// waitCheckpoint waits until the bucket's newest checkpoint satisfies
// cond and returns it.
func waitCheckpoint(t testing.TB, store objstore.Store, within time.Duration, what string, cond func(*format.Checkpoint) bool) *format.Checkpoint {
	t.Helper()
	var cp *format.Checkpoint
	waitFor(t, within, what, func() bool {
		cp = latestCheckpoint(t, store)
		return cp != nil && cond(cp)
	})
	return cp
}

func checkpointTopic(cp *format.Checkpoint, name string) (format.CheckpointTopic, bool) {
	for _, t := range cp.Topics {
		if t.Name == name {
			return t, true
		}
	}
	return format.CheckpointTopic{}, false
}

// value reads a counter's or a gauge's value, through a registry of its
// own.
func value(m prometheus.Collector) float64 {
	r := prometheus.NewRegistry()
	r.MustRegister(m)
	mfs, err := r.Gather()
	if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
		panic(fmt.Sprintf("gather: %v, %d families", err, len(mfs)))
	}
	d := mfs[0].GetMetric()[0]
	if c := d.GetCounter(); c != nil {
		return c.GetValue()
	}
	return d.GetGauge().GetValue()
}

func checkpointCount(t testing.TB, store objstore.Store) int {
	t.Helper()
	all, err := tier.Checkpoints(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	return len(all)
}

// TestMetadataCheckpointHoldsTopicsAndManifests (issue 23, item 1): the
// controller's checkpoint in the bucket holds each topic's id, configs and
// partitions as the metadata has them, and, once records are uploaded,
// each partition's newest manifest version with its offsets.
func TestMetadataCheckpointHoldsTopicsAndManifests(t *testing.T) {
	b, store := checkpointBroker(t, 300*time.Millisecond, 50*time.Millisecond, time.Hour)
	createTopic(t, testAdmin(t, b), "orders", 3, map[string]*string{
		"retention.ms":  ptr("86400000"),
		"segment.bytes": ptr("16384"),
	})
	st := b.meta.State()
	topic := st.Topics["orders"]
	cp := waitCheckpoint(t, store, 5*time.Second, "a checkpoint with the topic", func(cp *format.Checkpoint) bool {
		_, ok := checkpointTopic(cp, "orders")
		return ok
	})
	if cp.Version != 1 || cp.ClusterID != st.ClusterID || cp.ClusterID == "" || cp.WrittenBy != b.cfg.NodeID || cp.Index == 0 {
		t.Errorf("checkpoint header: version %d cluster %q (metadata %q) by %d index %d", cp.Version, cp.ClusterID, st.ClusterID, cp.WrittenBy, cp.Index)
	}
	if cp.NextProducerID != b.meta.State().NextProducerID {
		t.Errorf("next producer id %d, metadata %d", cp.NextProducerID, b.meta.State().NextProducerID)
	}
	ct, _ := checkpointTopic(cp, "orders")
	if ct.ID != format.HexID(topic.ID) || ct.Internal || ct.ReplicationFactor != 1 {
		t.Errorf("topic: id %s (metadata %s), internal %v, rf %d", ct.ID, format.HexID(topic.ID), ct.Internal, ct.ReplicationFactor)
	}
	if ct.Configs["retention.ms"] != "86400000" || ct.Configs["segment.bytes"] != "16384" {
		t.Errorf("configs %v", ct.Configs)
	}
	if len(ct.Partitions) != 3 {
		t.Fatalf("%d partitions", len(ct.Partitions))
	}
	for i, p := range ct.Partitions {
		if p.Partition != int32(i) || len(p.Replicas) != 1 || p.Replicas[0] != b.cfg.NodeID || p.LeaderEpoch != topic.Partitions[i].LeaderEpoch {
			t.Errorf("partition %d: %+v, metadata %+v", i, p, topic.Partitions[i])
		}
		if p.Manifest != "" {
			t.Errorf("partition %d names manifest %s before anything was uploaded", i, p.Manifest)
		}
	}

	// Records reach the bucket: a later checkpoint names each partition's
	// newest manifest version, and its offsets, without any metadata
	// change (the interval's reading of the manifests).
	// Small batches, so that segments roll at segment.bytes.
	produceKeyed(t, b, "orders", 3000, 100, kgo.ProducerBatchMaxBytes(4<<10))
	waitUploaded(t, b, "orders", 3)
	want := map[int32]format.CheckpointPartition{}
	for i := range int32(3) {
		m, err := b.tier.Refresh(context.Background(), b.partition("orders", i).BucketName())
		if err != nil {
			t.Fatal(err)
		}
		if m.EndOffset() == 0 {
			t.Fatalf("partition %d: nothing uploaded", i)
		}
		k, _ := format.ParseManifestKey(m.Key())
		want[i] = format.CheckpointPartition{Manifest: format.ManifestVersionOf(k), LogStart: m.LogStartOffset, End: m.EndOffset()}
	}
	waitCheckpoint(t, store, 5*time.Second, "a checkpoint naming the uploaded manifests", func(cp *format.Checkpoint) bool {
		ct, _ := checkpointTopic(cp, "orders")
		for i, p := range ct.Partitions {
			w := want[int32(i)]
			if p.Manifest < w.Manifest {
				return false // not read yet
			}
			if p.Manifest == w.Manifest && (p.LogStart != w.LogStart || p.End != w.End) {
				t.Fatalf("partition %d names manifest %s with [%d, %d), the manifest says [%d, %d)", i, p.Manifest, p.LogStart, p.End, w.LogStart, w.End)
			}
			if _, _, ok := p.ManifestVersion(); !ok {
				return false
			}
		}
		return true
	})
	// The named version is an object of the bucket, and its offsets are its.
	cp = latestCheckpoint(t, store)
	ct, _ = checkpointTopic(cp, "orders")
	for i, p := range ct.Partitions {
		e, s, _ := p.ManifestVersion()
		tp := format.TopicPartition{Topic: "orders", TopicID: topic.ID, Partition: int32(i)}
		m, err := tier.GetManifest(context.Background(), store, format.ManifestKey{TopicPartition: tp, LeaderEpoch: e, Seq: s}.String())
		if err != nil {
			t.Fatalf("partition %d: manifest %s: %v", i, p.Manifest, err)
		}
		if m.LogStartOffset != p.LogStart || m.EndOffset() != p.End || p.End == 0 {
			t.Errorf("partition %d: checkpoint [%d, %d), manifest %s [%d, %d)", i, p.LogStart, p.End, p.Manifest, m.LogStartOffset, m.EndOffset())
		}
	}
	if f := value(b.metrics.checkpointLastSuccess); f < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last success gauge %v", f)
	}
	if f := value(b.metrics.checkpointFailures); f != 0 {
		t.Errorf("%v failures", f)
	}
}

// TestMetadataCheckpointFollowsAConfigChange: altering a topic's config
// produces a checkpoint holding it within the debounce, long before the
// interval; with nothing changing after, no further checkpoint is written
// (an identical one would say nothing new), and the loop stops when the
// broker closes.
func TestMetadataCheckpointFollowsAConfigChange(t *testing.T) {
	const debounce = 300 * time.Millisecond
	b, store := checkpointBroker(t, time.Hour, debounce, time.Hour)
	adm := testAdmin(t, b)
	createTopic(t, adm, "settings", 1, nil)
	waitCheckpoint(t, store, 5*time.Second, "a checkpoint with the topic", func(cp *format.Checkpoint) bool {
		_, ok := checkpointTopic(cp, "settings")
		return ok
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: ptr("4242")}}, "settings")
	if err == nil {
		_, err = resp.On("settings", nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	waitCheckpoint(t, store, 5*time.Second, "a checkpoint with the new config", func(cp *format.Checkpoint) bool {
		ct, _ := checkpointTopic(cp, "settings")
		return ct.Configs["retention.ms"] == "4242"
	})
	took := time.Since(start)
	t.Logf("config change in the bucket after %s (debounce %s)", took.Round(time.Millisecond), debounce)
	if took > 4*debounce+time.Second {
		t.Errorf("the change took %s to reach a checkpoint", took)
	}

	// Settled: no more writes while nothing changes.
	time.Sleep(3 * debounce)
	writes := value(b.metrics.checkpointWrites)
	n := checkpointCount(t, store)
	time.Sleep(5 * debounce)
	if got := value(b.metrics.checkpointWrites); got != writes || checkpointCount(t, store) != n {
		t.Errorf("an idle cluster wrote %v more checkpoints", got-writes)
	}

	// The loop ends with the broker: Close waits for it.
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the broker did not close: a loop did not stop")
	}
}

// TestMetadataCheckpointPruning: checkpoints older than the retention are
// deleted, but the newest three are kept, the newest holding the latest
// state.
func TestMetadataCheckpointPruning(t *testing.T) {
	b, store := checkpointBroker(t, time.Hour, 50*time.Millisecond, time.Millisecond)
	adm := testAdmin(t, b)
	for i := range 6 {
		name := fmt.Sprintf("prune-%d", i)
		createTopic(t, adm, name, 1, nil)
		waitCheckpoint(t, store, 5*time.Second, "a checkpoint with "+name, func(cp *format.Checkpoint) bool {
			_, ok := checkpointTopic(cp, name)
			return ok
		})
	}
	// The metric counts a write once it is in the bucket.
	waitFor(t, 5*time.Second, "six checkpoints counted", func() bool { return value(b.metrics.checkpointWrites) >= 6 })
	// Pruning follows the write that made a fourth.
	waitFor(t, 5*time.Second, "the newest 3 checkpoints, and no more, in the bucket", func() bool { return checkpointCount(t, store) == 3 })
	cp := latestCheckpoint(t, store)
	if _, ok := checkpointTopic(cp, "prune-5"); !ok {
		t.Error("the newest checkpoint lacks the last topic")
	}
}

// TestMetadataCheckpointAfterControllerFailover: on a three-node cluster
// sharing a bucket, the controller writes the checkpoints; once it stops,
// the new controller goes on writing them, at a later raft index.
func TestMetadataCheckpointAfterControllerFailover(t *testing.T) {
	store, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := testCluster(t, 3, func(cfg *Config) {
		cfg.Tier = TierConfig{Store: store, Where: "shared", UploadInterval: 50 * time.Millisecond,
			CheckpointInterval: 500 * time.Millisecond, CheckpointDebounce: 100 * time.Millisecond}
	})
	c.createTopic("before", 2, 3, nil)
	first := waitCheckpoint(t, store, 10*time.Second, "a checkpoint with the topic", func(cp *format.Checkpoint) bool {
		_, ok := checkpointTopic(cp, "before")
		return ok
	})
	old := c.any().meta.ControllerID()
	if first.WrittenBy != old {
		t.Errorf("checkpoint written by %d, the controller is %d", first.WrittenBy, old)
	}
	if ct, _ := checkpointTopic(first, "before"); ct.ReplicationFactor != 3 || len(ct.Partitions[0].Replicas) != 3 {
		t.Errorf("topic %+v", ct)
	}
	c.stop(old)
	c.waitFor("a new controller", 10*time.Second, func() bool {
		id := c.any().meta.ControllerID()
		return id > 0 && id != old
	})
	c.createTopic("after", 1, 2, nil)
	now := c.any().meta.ControllerID()
	cp := waitCheckpoint(t, store, 10*time.Second, "the new controller's checkpoint with the new topic", func(cp *format.Checkpoint) bool {
		_, ok := checkpointTopic(cp, "after")
		return ok && cp.WrittenBy == now
	})
	if cp.Index <= first.Index {
		t.Errorf("new controller's checkpoint at index %d, the old one's at %d", cp.Index, first.Index)
	}
	if _, ok := checkpointTopic(cp, "before"); !ok {
		t.Error("the new controller's checkpoint lost the first topic")
	}
}

// listFailingStore refuses to list any key containing refused: a
// partition whose manifests cannot be read.
type listFailingStore struct {
	objstore.Store
	refused string
}

func (s listFailingStore) List(ctx context.Context, prefix string, fn func(objstore.Attrs) error) error {
	if strings.Contains(prefix, s.refused) {
		return fmt.Errorf("list %s: access denied", prefix)
	}
	return s.Store.List(ctx, prefix, fn)
}

func (s listFailingStore) ListAfter(ctx context.Context, prefix, startAfter string, fn func(objstore.Attrs) error) error {
	if strings.Contains(prefix, s.refused) {
		return fmt.Errorf("list %s: access denied", prefix)
	}
	return objstore.ListAfter(ctx, s.Store, prefix, startAfter, fn)
}

// TestMetadataCheckpointDespiteAnUnreadableManifest: one partition whose
// manifests cannot be read does not keep the rest of the metadata out of
// the bucket: the checkpoint is written, that partition without a
// manifest version (a restore then looks for its newest), and the round
// counts as failed.
func TestMetadataCheckpointDespiteAnUnreadableManifest(t *testing.T) {
	dir, err := objstore.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := listFailingStore{Store: dir, refused: "/broken-"}
	b := tieredBroker(t, "", store, func(c *Config) {
		c.Tier.CheckpointInterval, c.Tier.CheckpointDebounce, c.Tier.CheckpointRetention = time.Hour, 50*time.Millisecond, time.Hour
	})
	adm := testAdmin(t, b)
	createTopic(t, adm, "broken", 1, nil)
	createTopic(t, adm, "fine", 1, nil)
	cp := waitCheckpoint(t, dir, 10*time.Second, "a checkpoint naming both topics", func(cp *format.Checkpoint) bool {
		_, ok1 := checkpointTopic(cp, "broken")
		_, ok2 := checkpointTopic(cp, "fine")
		return ok1 && ok2
	})
	if ct, _ := checkpointTopic(cp, "broken"); ct.Partitions[0].Manifest != "" {
		t.Errorf("the unreadable partition names manifest %q", ct.Partitions[0].Manifest)
	}
	waitFor(t, 5*time.Second, "the round counted as failed", func() bool {
		return value(b.metrics.checkpointFailures) > 0
	})
}
