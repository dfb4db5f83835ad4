package broker

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/broker/node"
	"strata/tier/objstore"
)

// TestCompactedTopicsTier: a compacted topic with remote.storage.enable
// tiers like any other (issue 13): its closed segments go to the bucket,
// local retention deletes them once they are there, and a consumer from
// the earliest offset reads every record back, byte-identical and in
// order. Every key is distinct, so whatever compaction runs keeps them all.
func TestCompactedTopicsTier(t *testing.T) {
	for _, policy := range []string{"compact", "compact,delete"} {
		t.Run(policy, func(t *testing.T) {
			const partitions, n, size = 2, 4000, 200
			store := tierStores[0].open(t)
			b := tieredBroker(t, "", store)
			createTopic(t, testAdmin(t, b), "keyed", partitions, map[string]*string{
				"cleanup.policy":        ptr(policy),
				"remote.storage.enable": ptr("true"),
				"segment.bytes":         ptr("32768"),
				"local.retention.bytes": ptr("65536"),
			})
			// Small batches, so that segments roll every few of them.
			produceKeyed(t, b, "keyed", n, size, kgo.ProducerBatchMaxBytes(4<<10))
			waitFor(t, time.Minute, "local retention to delete uploaded segments", func() bool {
				for i := range int32(partitions) {
					if b.partition("keyed", i).Log().StartOffset() == 0 {
						return false
					}
				}
				return true
			})
			waitUploaded(t, b, "keyed", partitions)
			for i := range int32(partitions) {
				p := b.partition("keyed", i)
				m, err := b.tier.Manifest(context.Background(), p.BucketName())
				if err != nil {
					t.Fatal(err)
				}
				if m.Empty() || m.LogStartOffset != 0 || m.EndOffset() < p.Log().StartOffset() {
					t.Errorf("partition %d: bucket holds [%d, %d), local log starts at %d", i, m.LogStartOffset, m.EndOffset(), p.Log().StartOffset())
				}
			}
			consumeExactlyOnce(t, b, "keyed", n, size)
		})
	}
}

// offsetsTierBroker is a tiered broker with one offsets partition, so that
// every group of a test shares the partition whose history goes to the
// bucket.
func offsetsTierBroker(t *testing.T, dir string, store objstore.Store, mutate ...func(*Config)) *Broker {
	return tieredBroker(t, dir, store, append([]func(*Config){func(c *Config) {
		c.OffsetsPartitions = 1
		c.GroupInitialRebalanceDelay = -1
	}}, mutate...)...)
}

// offsetsConfigs reads the configs __consumer_offsets has of its own, as
// DescribeConfigs shows them.
func offsetsConfigs(t *testing.T, adm *kadm.Client) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rcs, err := adm.DescribeTopicConfigs(ctx, offsetsTopic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(offsetsTopic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe %s: %v %v", offsetsTopic, err, rc.Err)
	}
	got := map[string]string{}
	for _, c := range rc.Configs {
		if c.Source == 1 && c.Value != nil { // the topic's own
			got[c.Key] = *c.Value
		}
	}
	return got
}

// TestOffsetsTopicTiers: with a bucket, __consumer_offsets is created with
// remote.storage.enable=true and a bounded local retention, and its
// partitions tier; an offsets topic an older version created without
// those settings gets them when the broker starts.
func TestOffsetsTopicTiers(t *testing.T) {
	dir := t.TempDir()
	store := tierStores[0].open(t)
	b := offsetsTierBroker(t, dir, store)
	check := func(b *Broker) {
		t.Helper()
		got := offsetsConfigs(t, testAdmin(t, b))
		if got["remote.storage.enable"] != "true" || got["local.retention.bytes"] == "" || got["local.retention.ms"] == "" || got["cleanup.policy"] != "compact" {
			t.Errorf("%s configs: %v", offsetsTopic, got)
		}
		p := b.partition(offsetsTopic, 0)
		if cfg := p.Settings().Log; !cfg.Tiered || cfg.LocalRetentionBytes < 0 || cfg.LocalRetentionMs < 0 {
			t.Errorf("%s-0 log: tiered %v, local retention %d bytes, %s", offsetsTopic, cfg.Tiered, cfg.LocalRetentionBytes, cfg.LocalRetentionMs)
		}
	}
	check(b)

	// What a version before tiered offsets wrote: compacted, large
	// segments, nothing else.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	old := map[string]string{"cleanup.policy": "compact", "segment.bytes": "104857600"}
	if err := b.meta.AlterConfigs(ctx, offsetsTopic, old, nil, true); err != nil {
		t.Fatal(err)
	}
	if got := b.meta.State().Topics[offsetsTopic].Configs; !maps.Equal(got, old) {
		t.Fatalf("configs after the downgrade: %v", got)
	}
	// An operator's own choice for a key is kept.
	if err := b.meta.AlterConfigs(ctx, offsetsTopic, map[string]string{"local.retention.ms": "3600000"}, nil, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = offsetsTierBroker(t, dir, store)
	check(b)
	if got := offsetsConfigs(t, testAdmin(t, b))["local.retention.ms"]; got != "3600000" {
		t.Errorf("local.retention.ms %q after the upgrade, the operator had set 3600000", got)
	}
}

// smallOffsetsSegments makes __consumer_offsets roll every few commits and
// keep little locally, so its history moves to the bucket.
func smallOffsetsSegments(t testing.TB, adm *kadm.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Name: "segment.bytes", Value: ptr("16384")},
		{Name: "local.retention.bytes", Value: ptr("32768")},
	}, offsetsTopic)
	if err == nil {
		_, err = rs.On(offsetsTopic, nil)
	}
	if err != nil {
		t.Fatalf("alter %s configs: %v", offsetsTopic, err)
	}
}

// commitOne commits offset at with metadata meta for one partition and
// fails the test on any error.
func commitOne(t testing.TB, adm *kadm.Client, group, topic string, partition int32, at int64, meta string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var o kadm.Offsets
	o.Add(kadm.Offset{Topic: topic, Partition: partition, At: at, LeaderEpoch: -1, Metadata: meta})
	resp, err := adm.CommitOffsets(ctx, group, o)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("commit %s %s-%d: %v", group, topic, partition, err)
	}
}

// wantCommitted checks a group's committed offset and metadata for one
// partition.
func wantCommitted(t testing.TB, adm *kadm.Client, group, topic string, partition int32, at int64, meta string) {
	t.Helper()
	o, ok := committedOffsets(t, adm, group).Lookup(topic, partition)
	if !ok || o.Err != nil || o.At != at || o.Metadata != meta {
		t.Errorf("group %s %s-%d: committed %+v (found %v), want %d %q", group, topic, partition, o, ok, at, meta)
	}
}

// TestCoordinatorLoadsOffsetsFromTheBucket: a group's commit that only
// the bucket still holds (the offsets partition's local log starts above
// it) is loaded again after a restart, along with the commits that are
// still local.
func TestCoordinatorLoadsOffsetsFromTheBucket(t *testing.T) {
	dir := t.TempDir()
	store := tierStores[0].open(t)
	b := offsetsTierBroker(t, dir, store)
	adm := testAdmin(t, b)
	createTopic(t, adm, "orders", 4, nil)
	smallOffsetsSegments(t, adm)

	p := b.partition(offsetsTopic, 0)
	commitOne(t, adm, "early", "orders", 2, 7, "the only commit")
	early := p.Log().EndOffset() // the early group's record lies below
	const commits = 3000
	for i := range commits {
		commitOne(t, adm, "busy", "orders", int32(i%4), int64(i), fmt.Sprint("commit ", i))
	}
	waitFor(t, time.Minute, "the early commit to be only in the bucket", func() bool {
		return p.Log().StartOffset() >= early && p.RemoteEnd() >= p.Log().StartOffset()
	})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = offsetsTierBroker(t, dir, store)
	p = b.partition(offsetsTopic, 0)
	if p.Log().StartOffset() < early {
		t.Fatalf("after the restart the local log starts at %d, the early commit is below %d", p.Log().StartOffset(), early)
	}
	adm = testAdmin(t, b)
	wantCommitted(t, adm, "early", "orders", 2, 7, "the only commit")
	for i := commits - 4; i < commits; i++ {
		wantCommitted(t, adm, "busy", "orders", int32(i%4), int64(i), fmt.Sprint("commit ", i))
	}
}

// TestCoordinatorRetriesLoadAfterBucketOutage: when the bucket is down as
// the broker restarts, the coordinator does not serve a group whose
// commits it could not read (no silent "no offset"); once the bucket is
// back it loads them, with no metadata change to prompt it.
func TestCoordinatorRetriesLoadAfterBucketOutage(t *testing.T) {
	dir := t.TempDir()
	store := objstore.WithFaults(tierStores[0].open(t), objstore.FaultConfig{})
	fast := func(c *Config) { c.MaintenanceInterval = 100 * time.Millisecond }
	b := offsetsTierBroker(t, dir, store, fast)
	adm := testAdmin(t, b)
	createTopic(t, adm, "orders", 1, nil)
	smallOffsetsSegments(t, adm)
	p := b.partition(offsetsTopic, 0)
	commitOne(t, adm, "early", "orders", 0, 5, "before the outage")
	early := p.Log().EndOffset()
	for i := range 1000 {
		commitOne(t, adm, "busy", "orders", 0, int64(i), "")
	}
	waitFor(t, time.Minute, "the early commit to be only in the bucket", func() bool {
		return p.Log().StartOffset() >= early && p.RemoteEnd() >= p.Log().StartOffset()
	})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	store.SetConfig(objstore.FaultConfig{FailRate: 1})
	b = offsetsTierBroker(t, dir, store, fast)
	adm = testAdmin(t, b)
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		got, err := adm.FetchOffsets(ctx, "early")
		cancel()
		if err == nil {
			err = got.Error()
		}
		if err == nil {
			t.Fatalf("offsets of the early group served while the bucket holding them is down: %+v", got)
		}
	}
	store.SetConfig(objstore.FaultConfig{})
	waitFor(t, time.Minute, "the early group's offsets once the bucket is back", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		got, err := adm.FetchOffsets(ctx, "early")
		return err == nil && got.Error() == nil
	})
	wantCommitted(t, adm, "early", "orders", 0, 5, "before the outage")
}

// TestClusterCoordinatorFailoverLoadsFromTheBucket: in a 3-node cluster
// sharing a bucket, every replica of the offsets partition keeps only its
// recent part locally; after the coordinator dies, the new one loads a
// commit that only the bucket still holds.
func TestClusterCoordinatorFailoverLoadsFromTheBucket(t *testing.T) {
	store := tierStores[0].open(t)
	c := testCluster(t, 3, func(cfg *Config) {
		cfg.OffsetsPartitions = 1
		cfg.Tier = TierConfig{Store: store, UploadInterval: 20 * time.Millisecond}
	})
	c.waitFor("the offsets topic on every node", 30*time.Second, func() bool { return c.allKnow(offsetsTopic) })
	c.createTopic("g", 1, 3, nil)
	adm := kadm.NewClient(c.client())
	smallOffsetsSegments(t, adm)
	c.waitFor("the offsets partition's three replicas in sync", 30*time.Second, func() bool {
		return len(c.partitionState(offsetsTopic, 0).ISR) == 3
	})

	commitOne(t, adm, "early", "g", 0, 7, "before the failover")
	coord := c.partitionState(offsetsTopic, 0).Leader
	early := c.node(coord).partition(offsetsTopic, 0).Log().EndOffset()
	for i := range 2000 {
		commitOne(t, adm, "busy", "g", 0, int64(i), "")
	}
	c.waitFor("the early commit only in the bucket on every replica", time.Minute, func() bool {
		for id := int32(1); id <= 3; id++ {
			p := c.node(id).partition(offsetsTopic, 0)
			if p == nil || p.Log().StartOffset() < early || p.RemoteEnd() < p.Log().StartOffset() {
				return false
			}
		}
		return true
	})

	c.stop(coord)
	c.waitFor("a new coordinator", 20*time.Second, func() bool {
		l := c.partitionState(offsetsTopic, 0).Leader
		return l >= 1 && l != coord
	})
	next := c.partitionState(offsetsTopic, 0).Leader
	if start := c.node(next).partition(offsetsTopic, 0).Log().StartOffset(); start < early {
		t.Fatalf("the new coordinator's local log starts at %d, the early commit is below %d", start, early)
	}
	c.waitFor("the early group's offsets from the new coordinator", 30*time.Second, func() bool {
		// A fresh client each time: kgo keeps a dead coordinator cached
		// while its dials fail.
		adm := kadm.NewClient(c.client())
		defer adm.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got, err := adm.FetchOffsets(ctx, "early")
		if err == nil {
			err = got.Error()
		}
		if err != nil {
			t.Logf("fetch offsets: %v", err)
			return false
		}
		o, ok := got.Lookup("g", 0)
		if !ok || o.At != 7 || o.Metadata != "before the failover" {
			t.Fatalf("early g-0 from the new coordinator: %+v (found %v)", o, ok)
		}
		return true
	})
}

// TestClusterUpgradesOffsetsTopicSettings: in a cluster whose offsets
// topic an older version created, a rolling restart into this version
// gives the topic the settings it lacks, whichever node is the controller.
func TestClusterUpgradesOffsetsTopicSettings(t *testing.T) {
	store := tierStores[0].open(t)
	c := testCluster(t, 3, func(cfg *Config) {
		cfg.Tier = TierConfig{Store: store, UploadInterval: 20 * time.Millisecond}
	})
	c.waitFor("the offsets topic on every node", 30*time.Second, func() bool { return c.allKnow(offsetsTopic) })
	// The loops that created the topic end on their next tick (250ms):
	// the downgrade below must come after, or they would undo it.
	time.Sleep(time.Second)
	old := map[string]string{"cleanup.policy": "compact", "segment.bytes": "104857600"}
	c.waitFor("the older version's settings", 20*time.Second, func() bool {
		for id := int32(1); id <= 3; id++ {
			b := c.node(id)
			if !b.meta.IsLeader() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return b.meta.AlterConfigs(ctx, offsetsTopic, old, nil, true) == nil
		}
		return false
	})
	for id := int32(1); id <= 3; id++ {
		c.stop(id)
		c.restart(id)
	}
	c.waitFor("the offsets topic's settings on every node", 30*time.Second, func() bool {
		for id := int32(1); id <= 3; id++ {
			t, ok := c.node(id).node.TopicByName(offsetsTopic)
			if !ok || len(node.MissingOffsetsConfigs(t)) > 0 {
				return false
			}
		}
		return true
	})
	for id := int32(1); id <= 3; id++ {
		for _, p := range c.node(id).partitionList() {
			if p.Topic() == offsetsTopic && !p.Settings().Log.Tiered {
				t.Errorf("node %d: %s-%d does not tier", id, offsetsTopic, p.Index())
			}
		}
	}
}
