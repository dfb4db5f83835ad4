package broker

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/broker/extension"
	"strata/broker/node"
	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// restoreBroker is a tiered broker whose partitions put everything in the
// bucket quickly: small segments, and an idle active segment rolled and
// uploaded within a fraction of a second, so that a checkpoint taken after
// waitAllInBucket covers every record.
func restoreBroker(t *testing.T, dir string, store objstore.Store, mutate ...func(*Config)) *Broker {
	return tieredBroker(t, dir, store, append([]func(*Config){func(c *Config) {
		c.OffsetsPartitions = 2
		c.GroupInitialRebalanceDelay = -1
		c.Tier.IdleUpload = 100 * time.Millisecond
	}}, mutate...)...)
}

// waitAllInBucket waits until every record of topic's partitions is in the
// bucket.
func waitAllInBucket(t testing.TB, b *Broker, topic string, partitions int32) {
	t.Helper()
	waitFor(t, 2*time.Minute, topic+" to be wholly in the bucket", func() bool {
		for i := range partitions {
			p := b.partition(topic, i)
			if end := p.Log().EndOffset(); end > 0 && p.RemoteEnd() < end {
				return false
			}
		}
		return true
	})
}

// writeCheckpoint writes what the controller's checkpoint writer would:
// b's metadata, each partition against its newest manifest in the bucket.
func writeCheckpoint(t testing.TB, b *Broker, store objstore.Store) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := b.meta.State()
	c := &format.Checkpoint{ClusterID: st.ClusterID, History: st.HistoryID, Index: st.Index, WrittenMs: time.Now().UnixMilli(), WrittenBy: b.cfg.NodeID, NextProducerID: st.NextProducerID}
	for _, name := range st.SortedTopicNames() {
		mt := st.Topics[name]
		ct := format.CheckpointTopic{Name: name, ID: format.HexID(mt.ID), Internal: mt.Internal, ReplicationFactor: int16(len(mt.Partitions[0].Replicas)), Configs: mt.Configs}
		for _, mp := range mt.Partitions {
			cp := format.CheckpointPartition{Partition: mp.Index, Replicas: mp.Replicas, LeaderEpoch: mp.LeaderEpoch}
			m, ok, err := tier.ReadManifest(ctx, store, format.TopicPartition{Topic: name, TopicID: mt.ID, Partition: mp.Index})
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				cp.Manifest = format.ManifestVersionOf(format.ManifestKey{TopicPartition: m.TopicPartition, LeaderEpoch: m.LeaderEpoch, Seq: m.Seq})
				cp.LogStart, cp.End = m.LogStartOffset, m.EndOffset()
			}
			ct.Partitions = append(ct.Partitions, cp)
		}
		c.Topics = append(c.Topics, ct)
	}
	key, err := tier.WriteCheckpoint(ctx, store, c)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// restoreRequest sends StrataRestore to b.
func restoreRequest(t testing.TB, b *Broker, dryRun bool, topics ...string) *extension.RestoreResponse {
	t.Helper()
	cl := testClient(t, b, kgo.MaxVersions(extension.ClientVersions()))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := &extension.RestoreRequest{Topics: topics, DryRun: dryRun, TimeoutMillis: 60_000}
	resp, err := cl.Request(ctx, req)
	if err != nil {
		t.Fatalf("StrataRestore: %v", err)
	}
	return resp.(*extension.RestoreResponse)
}

type storedRecord struct {
	offset     int64
	key, value string
}

// readRestored consumes topic from the start up to each partition's current
// end and returns its records by partition.
func readRestored(t testing.TB, b *Broker, topic string, want int) map[int32][]storedRecord {
	t.Helper()
	cl := testClient(t, b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(16<<20))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := map[int32][]storedRecord{}
	for got := 0; got < want; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records of %s", got, want, topic)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Logf("fetch %s-%d: %v (retried)", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], storedRecord{r.Offset, string(r.Key), string(r.Value)})
			got++
		})
	}
	cl.Close()
	return out
}

// TestRestoreFromBucket is the promise of the bucket as the archive: a
// cluster whose every broker and metadata is lost comes back from its
// bucket alone. Cluster A tiers a topic (several partitions, configs of
// its own) and a group's commits, and a checkpoint is written; A's data
// dir is wiped. A fresh node B on the same bucket (adopting A's cluster
// id) restores it: the topic has its id and configs, every record reads
// back at its offset with its bytes, a new record goes after the
// bucket's end, and the group's commits are there.
func TestRestoreFromBucket(t *testing.T) {
	store := tierStores[0].open(t)
	dirA := t.TempDir()
	a := restoreBroker(t, dirA, store)
	adm := testAdmin(t, a)
	const topic, parts, n = "orders", 3, 3000
	createTopic(t, adm, topic, parts, map[string]*string{
		"remote.storage.enable": ptr("true"),
		"segment.bytes":         ptr("65536"),
		"retention.ms":          ptr("-1"),
		"max.message.bytes":     ptr("500000"),
	})
	produceKeyed(t, a, topic, n, 100)
	commitOne(t, adm, "billing", topic, 0, 417, "up to 417")
	commitOne(t, adm, "billing", topic, 2, 999, "")
	commitOne(t, adm, "audit", topic, 1, 5, "x")
	waitAllInBucket(t, a, topic, parts)
	waitAllInBucket(t, a, offsetsTopic, 2)
	before := readRestored(t, a, topic, n)
	idA := a.meta.State().Topics[topic].ID
	ends := map[int32]int64{}
	for i := range int32(parts) {
		ends[i] = a.partition(topic, i).Log().EndOffset()
	}
	clusterID := a.node.ClusterID()
	ckpt := writeCheckpoint(t, a, store)
	t.Logf("checkpoint %s, ends %v", ckpt, ends)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dirA); err != nil {
		t.Fatal(err)
	}

	b := restoreBroker(t, t.TempDir(), store, func(c *Config) { c.ClusterID = clusterID })
	dry := restoreRequest(t, b, true)
	if dry.ErrorCode != 0 || dry.Plan == nil || dry.Plan.Checkpoint != ckpt {
		t.Fatalf("dry run: error %d %q, plan %+v", dry.ErrorCode, dry.ErrorMessage, dry.Plan)
	}
	actions := map[string]string{}
	for _, pt := range dry.Plan.Topics {
		actions[pt.Name] = pt.Action
		if pt.Name == topic {
			for _, p := range pt.Partitions {
				if p.End != ends[p.Partition] || p.LogStart != 0 || p.Bytes <= 0 {
					t.Errorf("plan of %s-%d: %+v, want [0, %d) with bytes", topic, p.Partition, p, ends[p.Partition])
				}
			}
		}
	}
	if actions[topic] != "create" || actions[offsetsTopic] != "replace" {
		t.Fatalf("dry run actions %v, want %s create and %s replace", actions, topic, offsetsTopic)
	}
	if _, ok := b.meta.State().Topics[topic]; ok {
		t.Fatal("a dry run created the topic")
	}

	start := time.Now()
	if resp := restoreRequest(t, b, false); resp.ErrorCode != 0 {
		t.Fatalf("restore: error %d: %s", resp.ErrorCode, resp.ErrorMessage)
	}
	t.Logf("restore took %v", time.Since(start))
	mt, ok := b.meta.State().Topics[topic]
	if !ok || mt.ID != idA {
		t.Fatalf("restored topic %+v, want id %x", mt, idA)
	}
	for k, v := range map[string]string{"segment.bytes": "65536", "retention.ms": "-1", "max.message.bytes": "500000"} {
		if mt.Configs[k] != v {
			t.Errorf("config %s = %q, want %q", k, mt.Configs[k], v)
		}
	}
	if again := restoreRequest(t, b, true); again.ErrorCode != 0 || again.Plan.Topics[0].Action != "present" {
		t.Errorf("a second plan: error %d, %+v", again.ErrorCode, again.Plan.Topics)
	}

	after := readRestored(t, b, topic, n)
	for p, recs := range before {
		got := after[p]
		if len(got) != len(recs) {
			t.Fatalf("partition %d: %d records after the restore, %d before", p, len(got), len(recs))
		}
		for i := range recs {
			if got[i] != recs[i] {
				t.Fatalf("partition %d record %d: %+v after the restore, %+v before", p, i, got[i], recs[i])
			}
		}
	}

	// Producing goes on at the bucket's end.
	cl := testClient(t, b, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for p := range int32(parts) {
		r := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte("after")})
		if err := r.FirstErr(); err != nil {
			t.Fatalf("produce to %s-%d: %v", topic, p, err)
		}
		if off := r[0].Record.Offset; off != ends[p] {
			t.Errorf("%s-%d: new record at %d, the bucket ended at %d", topic, p, off, ends[p])
		}
	}

	adm = testAdmin(t, b)
	wantCommitted(t, adm, "billing", topic, 0, 417, "up to 417")
	wantCommitted(t, adm, "billing", topic, 2, 999, "")
	wantCommitted(t, adm, "audit", topic, 1, 5, "x")
}

// TestRestoreRefuses: a restore that cannot be done says why in one
// answer and changes nothing: a bucket without a checkpoint, a
// checkpoint of a format version this broker does not know, and a topic
// that exists here with other data.
func TestRestoreRefuses(t *testing.T) {
	store := tierStores[0].open(t)
	a := restoreBroker(t, "", store)
	adm := testAdmin(t, a)
	createTopic(t, adm, "orders", 2, map[string]*string{"remote.storage.enable": ptr("true"), "segment.bytes": ptr("65536")})
	createTopic(t, adm, "events", 1, map[string]*string{"remote.storage.enable": ptr("true")})
	produceKeyed(t, a, "orders", 200, 100)
	waitAllInBucket(t, a, "orders", 2)
	clusterID := a.node.ClusterID()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	unchanged := func(b *Broker, want ...string) {
		t.Helper()
		got := strings.Join(b.meta.State().SortedTopicNames(), ",")
		if got != strings.Join(want, ",") {
			t.Errorf("topics after a refused restore: %s, want %s", got, strings.Join(want, ","))
		}
	}
	refused := func(resp *extension.RestoreResponse, code int16, says string) {
		t.Helper()
		if resp.ErrorCode != code || !strings.Contains(resp.ErrorMessage, says) || strings.Contains(resp.ErrorMessage, "\n") {
			t.Errorf("answer %d %q, want %d saying %q", resp.ErrorCode, resp.ErrorMessage, code, says)
		}
	}

	// No checkpoint yet.
	resp := restoreRequest(t, a, false)
	refused(resp, kerr.InvalidRequest.Code, "holds no metadata checkpoint")
	unchanged(a, "__consumer_offsets", "events", "orders")

	// A checkpoint of a format version from the future.
	writeCheckpoint(t, a, store)
	all, err := tier.Checkpoints(ctx, store)
	if err != nil || len(all) != 1 {
		t.Fatalf("checkpoints %v: %v", all, err)
	}
	good, err := tier.ReadCheckpoint(ctx, store, all[0].Key)
	if err != nil {
		t.Fatal(err)
	}
	future := checkpointOfVersion(t, good, 99)
	key := format.CheckpointKey{History: good.History, Index: good.Index + 1, WrittenMs: good.WrittenMs}.String()
	if err := store.Put(ctx, key, bytes.NewReader(future), int64(len(future))); err != nil {
		t.Fatal(err)
	}
	refused(restoreRequest(t, a, true), kerr.InvalidRequest.Code, "format version 99")
	if err := store.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}

	// Cluster B, on the same bucket, made a topic "orders" of its own and
	// wrote to it: the checkpoint's orders may not overwrite it, and the
	// restore of everything (events too) is refused as a whole.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := restoreBroker(t, "", store, func(c *Config) { c.ClusterID = clusterID })
	createTopic(t, testAdmin(t, b), "orders", 2, nil)
	produceKeyed(t, b, "orders", 10, 10)
	idB := b.meta.State().Topics["orders"].ID
	resp = restoreRequest(t, b, false)
	refused(resp, kerr.InvalidRequest.Code, "topic orders exists here with id "+format.HexID(idB))
	if resp.Plan == nil {
		t.Fatal("a refused restore answered no plan")
	}
	unchanged(b, "__consumer_offsets", "orders")
	if b.meta.State().Topics["orders"].ID != idB {
		t.Error("the refused restore replaced orders")
	}
	// Asked for events alone, it is done.
	if resp := restoreRequest(t, b, false, "events"); resp.ErrorCode != 0 {
		t.Fatalf("restore events: %d %s", resp.ErrorCode, resp.ErrorMessage)
	}
	unchanged(b, "__consumer_offsets", "events", "orders")
	refused(restoreRequest(t, b, true, "nothing"), kerr.InvalidRequest.Code, `no topic "nothing" in checkpoint`)
}

// checkpointOfVersion encodes c as a checkpoint object claiming format
// version v, with a valid checksum.
func checkpointOfVersion(t testing.TB, c *format.Checkpoint, v int) []byte {
	t.Helper()
	b, err := format.EncodeCheckpoint(c)
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	line = bytes.Replace(line, []byte(`"version":1`), []byte(fmt.Sprintf(`"version":%d`, v)), 1)
	line = append(line, '\n')
	sum := crc32.Checksum(line, crc32.MakeTable(crc32.Castagnoli))
	return fmt.Appendf(line, "crc32c:%08x\n", sum)
}

// TestRestoreAtStart: a fresh node started with Restore (serve --restore)
// on another cluster's bucket adopts that cluster's id and restores its
// topics by itself; without Restore it is refused with a hint, and with a
// cluster id of its own that differs, refused in one line.
func TestRestoreAtStart(t *testing.T) {
	store := tierStores[0].open(t)
	a := restoreBroker(t, "", store)
	createTopic(t, testAdmin(t, a), "events", 2, map[string]*string{"remote.storage.enable": ptr("true"), "segment.bytes": ptr("65536")})
	produceKeyed(t, a, "events", 500, 100)
	commitOne(t, testAdmin(t, a), "g", "events", 1, 42, "m")
	waitAllInBucket(t, a, "events", 2)
	waitAllInBucket(t, a, offsetsTopic, 2)
	before := readRestored(t, a, "events", 500)
	idA, clusterID := a.meta.State().Topics["events"].ID, a.node.ClusterID()
	writeCheckpoint(t, a, store)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	start := func(mutate func(*Config)) error {
		cfg := Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: testLogger(), OffsetsPartitions: 2,
			Tier: TierConfig{Store: store, UploadInterval: 20 * time.Millisecond}}
		mutate(&cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := Start(ctx, cfg)
		if err == nil {
			b.Close()
		}
		return err
	}
	if err := start(func(*Config) {}); err == nil || !strings.Contains(err.Error(), "--restore") {
		t.Errorf("a fresh node on another cluster's bucket: %v, want a refusal hinting --restore", err)
	}
	if err := start(func(c *Config) { c.Restore, c.ClusterID = true, "someone-else" }); err == nil || !strings.Contains(err.Error(), "cluster.id is someone-else") || strings.Contains(err.Error(), "\n") {
		t.Errorf("--restore with another cluster.id: %v", err)
	}

	b := restoreBroker(t, "", store, func(c *Config) { c.Restore = true })
	if got := b.node.ClusterID(); got != clusterID {
		t.Fatalf("cluster id %s, want the bucket's %s", got, clusterID)
	}
	waitFor(t, 30*time.Second, "the restore at start", func() bool {
		mt, ok := b.meta.State().Topics["events"]
		return ok && mt.ID == idA
	})
	after := readRestored(t, b, "events", 500)
	for p, recs := range before {
		if fmt.Sprint(after[p]) != fmt.Sprint(recs) {
			t.Fatalf("partition %d differs after the restore at start", p)
		}
	}
	wantCommitted(t, testAdmin(t, b), "g", "events", 1, 42, "m")
}

// TestRestoreReplansAnInternalTopicMadeMeanwhile: a plan made before the
// cluster created its own offsets topic (the controller does as it
// starts) says create; applied after, the restore replaces the new,
// empty topic with the bucket's instead of failing on a topic that
// exists, and the group's commits are back.
func TestRestoreReplansAnInternalTopicMadeMeanwhile(t *testing.T) {
	store := tierStores[0].open(t)
	dirA := t.TempDir()
	a := restoreBroker(t, dirA, store)
	adm := testAdmin(t, a)
	createTopic(t, adm, "orders", 1, map[string]*string{"remote.storage.enable": ptr("true")})
	produceKeyed(t, a, "orders", 10, 10)
	commitOne(t, adm, "billing", "orders", 0, 7, "")
	waitAllInBucket(t, a, "orders", 1)
	waitAllInBucket(t, a, offsetsTopic, 2)
	clusterID := a.node.ClusterID()
	offsetsA := a.meta.State().Topics[offsetsTopic].ID
	writeCheckpoint(t, a, store)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	b := restoreBroker(t, t.TempDir(), store, func(c *Config) { c.ClusterID = clusterID })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plan, err := b.node.PlanRestore(ctx, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for i := range plan.Topics {
		if pt := &plan.Topics[i]; pt.Name == offsetsTopic {
			if pt.Action != node.RestoreReplace {
				t.Fatalf("%s planned %s, want replace (the broker made its own at start)", offsetsTopic, pt.Action)
			}
			// As planned before the broker made its own.
			pt.Action = node.RestoreCreate
			found = true
		}
	}
	if !found {
		t.Fatalf("the plan has no %s: %+v", offsetsTopic, plan.Topics)
	}
	if err := b.node.Restore(ctx, plan, nil); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if got := b.meta.State().Topics[offsetsTopic].ID; got != offsetsA {
		t.Fatalf("%s has id %x after the restore, want the bucket's %x", offsetsTopic, got, offsetsA)
	}
	waitFor(t, 30*time.Second, "the group's commit back", func() bool {
		resp, err := testAdmin(t, b).FetchOffsets(ctx, "billing")
		if err != nil {
			return false
		}
		o, ok := resp.Lookup("orders", 0)
		return ok && o.At == 7
	})
}
