package main

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/meta"
	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// clusterTopics is what a checkpoint needs of a running cluster's
// topics: names, ids, replicas, epochs and the configs they set.
func clusterTopics(t *testing.T, bootstrap string) []format.CheckpointTopic {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := kadm.NewClient(newClient(t, bootstrap))
	tds, err := adm.ListTopicsWithInternal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []format.CheckpointTopic
	for _, td := range tds.Sorted() {
		rcs, err := adm.DescribeTopicConfigs(ctx, td.Topic)
		if err != nil {
			t.Fatal(err)
		}
		configs := map[string]string{}
		for _, c := range rcs[0].Configs {
			if c.Source == 1 && c.Value != nil { // the topic's own
				configs[c.Key] = *c.Value
			}
		}
		ct := format.CheckpointTopic{Name: td.Topic, ID: format.HexID(td.ID), Internal: td.IsInternal, Configs: configs}
		for _, p := range td.Partitions.Sorted() {
			ct.ReplicationFactor = int16(len(p.Replicas))
			ct.Partitions = append(ct.Partitions, format.CheckpointPartition{Partition: p.Partition, Replicas: p.Replicas, LeaderEpoch: p.LeaderEpoch})
		}
		out = append(out, ct)
	}
	return out
}

// writeBucketCheckpoint writes a checkpoint of topics into the directory
// bucket, each partition against its newest manifest there: what the
// controller's checkpoint writer does.
func writeBucketCheckpoint(t *testing.T, bucketDir, clusterID string, topics []format.CheckpointTopic) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := objstore.NewDir(bucketDir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range topics {
		ct := &topics[i]
		for j := range ct.Partitions {
			cp := &ct.Partitions[j]
			m, ok, err := tier.ReadManifest(ctx, st, format.TopicPartition{Topic: ct.Name, TopicID: ct.TopicID(), Partition: cp.Partition})
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				cp.Manifest = format.ManifestVersionOf(format.ManifestKey{TopicPartition: m.TopicPartition, LeaderEpoch: m.LeaderEpoch, Seq: m.Seq})
				cp.LogStart, cp.End = m.LogStartOffset, m.EndOffset()
			}
		}
	}
	c := &format.Checkpoint{ClusterID: clusterID, History: meta.NewIncarnation(), Index: 1000, WrittenMs: time.Now().UnixMilli(), NextProducerID: 1000, Topics: topics}
	if _, err := tier.WriteCheckpoint(ctx, st, c); err != nil {
		t.Fatal(err)
	}
}

// waitInBucket waits until the directory bucket holds every offset of
// topic's partitions up to ends.
func waitInBucket(t *testing.T, bucketDir string, ct format.CheckpointTopic, ends map[int32]int64) {
	t.Helper()
	st, err := objstore.NewDir(bucketDir)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, cp := range ct.Partitions {
		for ends[cp.Partition] > 0 {
			m, ok, err := tier.ReadManifest(context.Background(), st, format.TopicPartition{Topic: ct.Name, TopicID: ct.TopicID(), Partition: cp.Partition})
			if err == nil && ok && m.EndOffset() >= ends[cp.Partition] {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s-%d did not reach the bucket up to %d", ct.Name, cp.Partition, ends[cp.Partition])
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// TestClusterRestoreProcess: `strata cluster restore` against a fresh
// node on a wiped cluster's bucket prints its plan (--dry-run changes
// nothing), restores the topics with their records, offsets and group
// commits, and says so; `strata serve --restore` does the same by itself
// on first start.
func TestClusterRestoreProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three nodes")
	}
	bucket := filepath.Join(t.TempDir(), "bucket")
	quick := []string{"--bucket-dir", bucket, "--listen", "127.0.0.1:0", "--http-listen", "off", "--tier-idle-upload", "200ms", "--tier-upload-interval", "100ms"}

	// Cluster A: a topic and a group's commit, all in the bucket.
	a := startNode(t, nil, append([]string{"dev", "--data-dir", t.TempDir()}, quick...)...)
	mustCreate(t, a.bootstrap, "orders", 2, map[string]*string{"remote.storage.enable": ptrTo("true"), "segment.bytes": ptrTo("16384"), "retention.ms": ptrTo("-1")})
	produceN(t, a.bootstrap, "orders", 0, 300)
	before := readAll(t, a.bootstrap, "orders")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var commit kadm.Offsets
	commit.Add(kadm.Offset{Topic: "orders", Partition: 1, At: 77, LeaderEpoch: -1, Metadata: "kept"})
	if err := kadm.NewClient(newClient(t, a.bootstrap)).CommitAllOffsets(ctx, "billing", commit); err != nil {
		t.Fatal(err)
	}
	clusterID := clusterIDOf(t, a.bootstrap)
	topics := clusterTopics(t, a.bootstrap)
	for _, ct := range topics {
		listed, err := kadm.NewClient(newClient(t, a.bootstrap)).ListEndOffsets(ctx, ct.Name)
		if err != nil {
			t.Fatal(err)
		}
		ends := map[int32]int64{}
		listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
		waitInBucket(t, bucket, ct, ends)
	}
	a.stop(t)
	writeBucketCheckpoint(t, bucket, clusterID, topics)
	var ordersID string
	for _, ct := range topics {
		if ct.Name == "orders" {
			ordersID = ct.ID
		}
	}
	// An older history, of a cluster that had a topic audit the newest
	// checkpoint does not name: the plan says where it is.
	older := &format.Checkpoint{ClusterID: clusterID, History: meta.NewIncarnation(), Index: 7, WrittenMs: time.Now().Add(-time.Hour).UnixMilli(),
		Topics: []format.CheckpointTopic{{Name: "audit", ID: "0123456789abcdef0123456789abcdef", ReplicationFactor: 1, Partitions: []format.CheckpointPartition{{Partition: 0, Replicas: []int32{1}}}}}}
	if st, err := objstore.NewDir(bucket); err != nil {
		t.Fatal(err)
	} else if _, err := tier.WriteCheckpoint(ctx, st, older); err != nil {
		t.Fatal(err)
	}

	// Node B: fresh, on A's bucket and id.
	b := startNode(t, nil, append([]string{"serve", "--data-dir", t.TempDir(), "--cluster-id", clusterID, "--offsets-partitions", "3"}, quick...)...)
	code, stdout, stderr := runCLI(t, nil, "cluster", "restore", "--dry-run", "--bootstrap", b.bootstrap)
	if code != 0 {
		t.Fatalf("restore --dry-run: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("dry run:\n%s", stdout)
	end0 := before[0][len(before[0])-1].Offset + 1
	for _, want := range []string{"TOPIC", "orders", ordersID, "create", fmt.Sprintf("0..%d", max(end0, before[1][len(before[1])-1].Offset+1)), "__consumer_offsets", "replace", "checkpoint metadata/checkpoints/"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the plan does not show %q", want)
		}
	}
	if md := clusterTopicNames(t, b.bootstrap); strings.Contains(md, "orders") {
		t.Fatalf("--dry-run created orders: %s", md)
	}
	if want := "history " + older.History[:8] + "… (written " + timestamp(older.WrittenMs) + ") also names topics not in this checkpoint: audit — restore them with --history " + older.History[:8]; !strings.Contains(stdout, want) {
		t.Errorf("the plan does not say %q", want)
	}
	code, stdout, stderr = runCLI(t, nil, "cluster", "restore", "--dry-run", "--history", "deadbeef00", "--bootstrap", b.bootstrap)
	if code != 1 {
		t.Fatalf("restore --history deadbeef00: exit %d\n%s%s", code, stdout, stderr)
	}
	assertOneLineError(t, stderr, "no metadata history deadbeef00", older.History)

	code, stdout, stderr = runCLI(t, nil, "cluster", "restore", "--bootstrap", b.bootstrap)
	if code != 0 || !strings.Contains(stdout, "restored 2 topic(s)") || !strings.Contains(stderr, "restoring orders") {
		t.Fatalf("restore: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("restore:\n%s%s", stdout, stderr)
	checkRestored(t, b.bootstrap, before)
	code, stdout, _ = runCLI(t, nil, "cluster", "restore", "--bootstrap", b.bootstrap)
	if code != 0 || !strings.Contains(stdout, "nothing to restore") {
		t.Errorf("a second restore: exit %d\n%s", code, stdout)
	}
	b.stop(t)

	// Node C: serve --restore on a fresh data dir does it all by itself,
	// from the same checkpoint (the bucket's manifests are B's by now:
	// newer than the checkpoint's).
	if line := runFails(t, append([]string{"serve", "--restore", "--data-dir", t.TempDir(), "--cluster-id", "other"}, quick...)...); !strings.Contains(line, "cluster.id is other") {
		t.Errorf("serve --restore with another --cluster-id: %q", line)
	}
	c := startNode(t, nil, append([]string{"serve", "--restore", "--data-dir", t.TempDir(), "--offsets-partitions", "3"}, quick...)...)
	defer c.stop(t)
	if got := clusterIDOf(t, c.bootstrap); got != clusterID {
		t.Fatalf("serve --restore: cluster %s, want the bucket's %s", got, clusterID)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(clusterTopicNames(t, c.bootstrap), "orders") {
		if time.Now().After(deadline) {
			t.Fatalf("serve --restore did not restore orders within 30s\n%s", c.stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	checkRestored(t, c.bootstrap, before)
}

func clusterTopicNames(t *testing.T, bootstrap string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tds, err := kadm.NewClient(newClient(t, bootstrap)).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(tds.Names(), ",")
}

// checkRestored checks that orders reads back as before, record by
// record, and that the billing group's commit is there.
func checkRestored(t *testing.T, bootstrap string, before map[int32][]*kgo.Record) {
	t.Helper()
	after := readAll(t, bootstrap, "orders")
	for p, recs := range before {
		if len(after[p]) != len(recs) {
			t.Fatalf("orders-%d: %d records after the restore, %d before", p, len(after[p]), len(recs))
		}
		for i, r := range recs {
			g := after[p][i]
			if g.Offset != r.Offset || string(g.Key) != string(r.Key) || string(g.Value) != string(r.Value) {
				t.Fatalf("orders-%d record %d: offset %d after the restore, %d before (or other bytes)", p, i, g.Offset, r.Offset)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		os, err := kadm.NewClient(newClient(t, bootstrap)).FetchOffsets(ctx, "billing")
		if o, ok := os.Lookup("orders", 1); err == nil && ok && o.At == 77 && o.Metadata == "kept" {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("billing's commit is not back: %v %+v", err, os)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestClusterRestoreRefusals (issue 23, bad input): `strata cluster
// restore` against a bucket whose archive names a topic the running
// cluster has with other data, or whose newest checkpoint is of a format
// version from the future, fails with one line saying why, and changes
// nothing.
func TestClusterRestoreRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two nodes")
	}
	bucket := filepath.Join(t.TempDir(), "bucket")
	quick := []string{"--bucket-dir", bucket, "--listen", "127.0.0.1:0", "--http-listen", "off", "--tier-idle-upload", "200ms", "--tier-upload-interval", "100ms"}

	// Cluster A leaves orders in the bucket, and a checkpoint naming it.
	a := startNode(t, nil, append([]string{"dev", "--data-dir", t.TempDir()}, quick...)...)
	mustCreate(t, a.bootstrap, "orders", 1, map[string]*string{"remote.storage.enable": ptrTo("true")})
	produceN(t, a.bootstrap, "orders", 0, 20)
	clusterID := clusterIDOf(t, a.bootstrap)
	store, err := objstore.NewDir(bucket)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		cp, _, err := tier.LatestCheckpoint(context.Background(), store)
		if err == nil && strings.Contains(fmt.Sprint(cp.Topics), "orders") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint names orders within 30s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.stop(t)

	// Cluster B, on the bucket under A's id, has an orders of its own,
	// with records.
	b := startNode(t, nil, append([]string{"serve", "--data-dir", t.TempDir(), "--cluster-id", clusterID, "--offsets-partitions", "3"}, quick...)...)
	defer b.stop(t)
	mustCreate(t, b.bootstrap, "orders", 1, nil)
	produceN(t, b.bootstrap, "orders", 0, 5)
	code, stdout, stderr := runCLI(t, nil, "cluster", "restore", "--bootstrap", b.bootstrap)
	if code != 1 {
		t.Fatalf("restore over a topic with other data: exit %d\n%s%s", code, stdout, stderr)
	}
	assertOneLineError(t, stderr, "orders", "exists here with id")
	if n := len(readAll(t, b.bootstrap, "orders")[0]); n != 5 {
		t.Errorf("after the refused restore orders holds %d records, want its own 5", n)
	}

	// A checkpoint of a format version from the future, newest in the
	// bucket: refused, naming the version.
	cp, _, err := tier.LatestCheckpoint(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	cp.History, cp.WrittenMs = meta.NewIncarnation(), time.Now().UnixMilli()
	body, err := format.EncodeCheckpoint(cp)
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := bytes.Cut(body, []byte("\n"))
	line = append(bytes.Replace(line, []byte(`"version":1`), []byte(`"version":99`), 1), '\n')
	body = fmt.Appendf(line, "crc32c:%08x\n", crc32.Checksum(line, crc32.MakeTable(crc32.Castagnoli)))
	key := format.CheckpointKey{History: cp.History, Index: cp.Index, WrittenMs: cp.WrittenMs}.String()
	if err := store.Put(context.Background(), key, bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(t, nil, "cluster", "restore", "--bootstrap", b.bootstrap, "--dry-run")
	if code != 1 {
		t.Fatalf("restore from a checkpoint of version 99: exit %d\n%s%s", code, stdout, stderr)
	}
	assertOneLineError(t, stderr, "format version 99")
}
