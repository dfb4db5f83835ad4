package broker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/node"
	"strata/tier"
	"strata/tier/objstore"
)

// replicaPoll is the read replicas' poll interval in these tests.
const replicaPoll = 100 * time.Millisecond

// readReplicaPair starts a source cluster (one tiered node whose bucket is
// the directory srcBucket, everything uploaded within ~100 ms) and a
// replica cluster (one tiered node with a bucket of its own) that polls
// sources every replicaPoll.
func readReplicaPair(t *testing.T, srcMutate ...func(*Config)) (src, rep *Broker, srcBucket string) {
	t.Helper()
	srcBucket = filepath.Join(t.TempDir(), "source-bucket")
	srcStore, err := objstore.NewDir(srcBucket)
	if err != nil {
		t.Fatal(err)
	}
	src = tieredBroker(t, "", srcStore, append([]func(*Config){func(c *Config) {
		c.Tier.IdleUpload = 50 * time.Millisecond
	}}, srcMutate...)...)
	rep = tieredBroker(t, "", tierStores[0].open(t), func(c *Config) {
		c.ReadReplica.PollInterval = replicaPoll
	})
	return src, rep, srcBucket
}

// uploadedEnd is where the source bucket's manifest of topic-partition
// ends, as a reader of the bucket sees it.
func uploadedEnd(t *testing.T, b *Broker, topic string, partition int32) int64 {
	t.Helper()
	p := b.partition(topic, partition)
	m, ok, err := tier.ReadManifest(context.Background(), b.cfg.Tier.Store, p.BucketName())
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return 0
	}
	return m.EndOffset()
}

// consumeRange reads [from, to) of every partition of topic, in order.
func consumeRange(t *testing.T, b *Broker, topic string, to map[int32]int64) map[int32][]*kgo.Record {
	t.Helper()
	offsets := map[int32]kgo.Offset{}
	for p := range to {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	cl := testClient(t, b, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[int32][]*kgo.Record{}
	done := func() bool {
		for p, end := range to {
			if n := len(got[p]); end > 0 && (n == 0 || got[p][n-1].Offset < end-1) {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consume %s: timed out with %d/%d records", topic, len(got), len(to))
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("consume %s-%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < to[r.Partition] {
				got[r.Partition] = append(got[r.Partition], r)
			}
		})
	}
	return got
}

func sameRecord(a, b *kgo.Record) error {
	switch {
	case a.Offset != b.Offset:
		return fmt.Errorf("offset %d vs %d", a.Offset, b.Offset)
	case !bytes.Equal(a.Key, b.Key) || !bytes.Equal(a.Value, b.Value):
		return fmt.Errorf("offset %d: key or value differ", a.Offset)
	case !a.Timestamp.Equal(b.Timestamp):
		return fmt.Errorf("offset %d: timestamp %v vs %v", a.Offset, a.Timestamp, b.Timestamp)
	case len(a.Headers) != len(b.Headers):
		return fmt.Errorf("offset %d: %d vs %d headers", a.Offset, len(a.Headers), len(b.Headers))
	case a.LeaderEpoch != b.LeaderEpoch:
		return fmt.Errorf("offset %d: batch leader epoch %d vs %d", a.Offset, a.LeaderEpoch, b.LeaderEpoch)
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return fmt.Errorf("offset %d: header %d differs", a.Offset, i)
		}
	}
	return nil
}

// produceWithHeaders writes n records round-robin over topic's partitions.
func produceWithHeaders(t *testing.T, b *Broker, topic string, from, n int) {
	t.Helper()
	cl := testClient(t, b, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.ProducerBatchMaxBytes(4<<10))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rs []*kgo.Record
	for i := from; i < from+n; i++ {
		v := make([]byte, 200)
		fillValue(v, uint64(i))
		rs = append(rs, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: v,
			Headers: []kgo.RecordHeader{{Key: "i", Value: fmt.Appendf(nil, "%d", i)}}})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// waitAllUploaded waits until every partition of topic on b has its
// whole log end in the bucket, and returns those ends.
func waitAllUploaded(t *testing.T, b *Broker, topic string, partitions int32) map[int32]int64 {
	t.Helper()
	ends := map[int32]int64{}
	waitFor(t, 30*time.Second, topic+" uploaded", func() bool {
		for p := int32(0); p < partitions; p++ {
			end := b.partition(topic, p).Log().EndOffset()
			if uploadedEnd(t, b, topic, p) < end {
				return false
			}
			ends[p] = end
		}
		return true
	})
	return ends
}

// TestReadReplicaServesTheSourceBucket is issue 23's read-replica
// promise: a second cluster serves the first cluster's topic from its
// bucket with the same offsets and bytes, refuses produce and every other
// write, and shows new records within the poll interval plus one upload
// interval of their upload; consumer groups work on it as on any topic.
func TestReadReplicaServesTheSourceBucket(t *testing.T) {
	src, rep, srcBucket := readReplicaPair(t)
	const partitions = 2
	createTopic(t, testAdmin(t, src), "events", partitions, map[string]*string{
		"segment.bytes":         ptr("16384"),
		"local.retention.bytes": ptr("16384"),
	})
	produceWithHeaders(t, src, "events", 0, 1000)
	ends := waitAllUploaded(t, src, "events", partitions)

	uri := "file://" + srcBucket
	adm := testAdmin(t, rep)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, -1, -1, map[string]*string{node.ReadReplicaSourceKey: &uri}, "events")
	if err != nil {
		t.Fatalf("create read replica: %v %s", err, resp.ErrMessage)
	}
	if resp.NumPartitions != partitions {
		t.Fatalf("replica has %d partitions, source %d", resp.NumPartitions, partitions)
	}

	// Same offsets, bytes, timestamps, headers and batch epochs.
	want := consumeRange(t, src, "events", ends)
	got := consumeRange(t, rep, "events", ends)
	for p := int32(0); p < partitions; p++ {
		if len(got[p]) != len(want[p]) || len(got[p]) == 0 {
			t.Fatalf("partition %d: %d records on the replica, %d on the source", p, len(got[p]), len(want[p]))
		}
		for i := range want[p] {
			if err := sameRecord(want[p][i], got[p][i]); err != nil {
				t.Fatalf("partition %d: %v", p, err)
			}
		}
	}
	repCl := testClient(t, rep)
	if e, l := listOffset(t, repCl, "events", -2), listOffset(t, repCl, "events", -1); e != 0 || l != ends[0] {
		t.Fatalf("replica partition 0: earliest %d latest %d, want 0 and %d", e, l, ends[0])
	}
	ts := want[0][len(want[0])/2].Timestamp.UnixMilli()
	if off := listOffset(t, repCl, "events", ts); off > want[0][len(want[0])/2].Offset {
		t.Fatalf("timestamp lookup on the replica: %d, past the record at %d", off, want[0][len(want[0])/2].Offset)
	}

	// Produce is refused with POLICY_VIOLATION, and so is every write.
	prod := testClient(t, rep, kgo.DefaultProduceTopic("events"), kgo.RecordRetries(1))
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("produce to the replica: %v, want POLICY_VIOLATION", err)
	}
	if dr, err := adm.DeleteRecords(ctx, kadm.Offsets{"events": {0: {At: 10}}}); err != nil || !errors.Is(dr["events"][0].Err, kerr.PolicyViolation) {
		t.Fatalf("delete records on the replica: %v %v", err, dr)
	}
	if cp, err := adm.CreatePartitions(ctx, 1, "events"); err != nil || !errors.Is(cp["events"].Err, kerr.PolicyViolation) {
		t.Fatalf("create partitions on the replica: %v %+v", err, cp)
	}
	other := "file:///elsewhere"
	ac, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: node.ReadReplicaSourceKey, Value: &other}}, "events")
	if err != nil || !errors.Is(ac[0].Err, kerr.InvalidConfig) {
		t.Fatalf("change the replica's source: %v %+v", err, ac)
	}

	// A consumer group on the replica commits in the replica cluster.
	grp := testClient(t, rep, kgo.ConsumeTopics("events"), kgo.ConsumerGroup("replica-readers"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	var read int
	for read < 10 {
		fs := grp.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatal("group consumer read nothing")
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatal(err) })
		read += fs.NumRecords()
	}
	if err := grp.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit on the replica: %v", err)
	}
	offs, err := adm.FetchOffsets(ctx, "replica-readers")
	if err != nil || len(offs) == 0 {
		t.Fatalf("fetch offsets on the replica: %v %v", err, offs)
	}

	// The lag: new records at the source, from their upload to their
	// visibility on the replica.
	for round := range 3 {
		before := listOffset(t, repCl, "events", -1)
		produceWithHeaders(t, src, "events", 1000+100*round, 100)
		var uploaded time.Time
		waitFor(t, 30*time.Second, "new records uploaded at the source", func() bool {
			if uploadedEnd(t, src, "events", 0) > before {
				uploaded = time.Now()
				return true
			}
			return false
		})
		waitFor(t, 30*time.Second, "new records on the replica", func() bool {
			return listOffset(t, repCl, "events", -1) > before
		})
		visible := time.Since(uploaded)
		lag, _ := rep.node.ReadReplicaLag("events")
		t.Logf("read replica lag, dir store, poll interval %s: upload to visibility %s (test's view, 10-20 ms resolution); strata_read_replica_lag_seconds %.3f s",
			replicaPoll, visible.Round(time.Millisecond), lag.Seconds())
		if visible > replicaPoll+2*time.Second {
			t.Errorf("new records took %s to show on the replica, poll interval %s", visible, replicaPoll)
		}
	}
	if _, ok := rep.node.ReadReplicaLag("events"); !ok {
		t.Error("no lag measured")
	}
}

// TestReadReplicaFollowsSourceRetention: as retention at the source
// deletes old segments (objects included), the replica's log start moves
// with the source's, a fetch below it is OFFSET_OUT_OF_RANGE and nothing
// else, and a consumer from offset 0 resets to the new start and reads
// on without an error.
func TestReadReplicaFollowsSourceRetention(t *testing.T) {
	src, rep, srcBucket := readReplicaPair(t, func(c *Config) {
		shortOrphanGrace(c, time.Nanosecond)
		c.Tier.CollectInterval = 50 * time.Millisecond
	})
	createTopic(t, testAdmin(t, src), "aging", 1, map[string]*string{
		"segment.bytes":         ptr("16384"),
		"local.retention.bytes": ptr("16384"),
	})
	produceWithHeaders(t, src, "aging", 0, 1500)
	end := waitAllUploaded(t, src, "aging", 1)[0]
	uri := "file://" + srcBucket
	createTopic(t, testAdmin(t, rep), "aging", -1, map[string]*string{node.ReadReplicaSourceKey: &uri})
	repCl := testClient(t, rep)
	if e := listOffset(t, repCl, "aging", -2); e != 0 {
		t.Fatalf("replica's earliest offset %d before retention", e)
	}

	// Retention at the source: the bucket keeps ~64 KiB.
	adm := testAdmin(t, src)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: ptr("65536")}}, "aging"); err != nil {
		t.Fatal(err)
	}
	var start int64
	waitFor(t, 30*time.Second, "the replica's log start to follow the source's retention", func() bool {
		start = listOffset(t, repCl, "aging", -2)
		return start > 0
	})
	// Wait for the source's collector to delete the dropped objects, so
	// that the replica's reads meet missing objects too.
	p := src.partition("aging", 0)
	waitFor(t, 30*time.Second, "dropped objects collected", func() bool {
		m, _ := src.tier.Manifest(context.Background(), p.BucketName())
		objects := 0
		src.cfg.Tier.Store.List(context.Background(), p.BucketName().SegmentsPrefix(), func(objstore.Attrs) error { objects++; return nil })
		return objects == int(m.Totals().Segments)
	})
	t.Logf("source retention moved the replica's log start to %d (end %d)", start, end)

	// Below the start: OFFSET_OUT_OF_RANGE, never another error.
	for _, off := range []int64{0, start / 2, start - 1} {
		req := kmsg.NewPtrFetchRequest()
		req.Version = 11
		req.MaxBytes = 1 << 20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "aging"
		topic, _ := rep.node.TopicByName("aging")
		rt.TopicID = topic.ID // v13+, which the client sends
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = off, 1<<20, -1, -1
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, repCl)
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.OffsetOutOfRange.Code {
			t.Fatalf("fetch at %d below the log start %d: %v, want OFFSET_OUT_OF_RANGE", off, start, kerr.ErrorForCode(code))
		}
	}
	// A consumer from offset 0 resets to the start and reads to the end.
	cons := testClient(t, rep, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"aging": {0: kgo.NewOffset().At(0)}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	next := int64(-1)
	for next < end {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read up to %d of %d", next, end)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("consume after the source's retention: %v", err) })
		fs.EachRecord(func(r *kgo.Record) {
			if next == -1 && r.Offset < start {
				t.Fatalf("first record at %d, below the log start %d", r.Offset, start)
			}
			if next != -1 && r.Offset != next {
				t.Fatalf("offset %d after %d", r.Offset, next-1)
			}
			next = r.Offset + 1
		})
	}
}

// TestReadReplicaBadSources: a source that does not exist, one without
// the topic, and a partition count other than the source's are each
// refused in one line with INVALID_CONFIG, and nothing is created.
func TestReadReplicaBadSources(t *testing.T) {
	src, rep, srcBucket := readReplicaPair(t)
	createTopic(t, testAdmin(t, src), "present", 2, map[string]*string{"segment.bytes": ptr("16384")})
	produceWithHeaders(t, src, "present", 0, 200)
	waitAllUploaded(t, src, "present", 2)

	adm := testAdmin(t, rep)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct {
		name, topic, uri string
		partitions       int32
		want             string
	}{
		{"missing bucket dir", "present", "file://" + filepath.Join(t.TempDir(), "nothing-here"), -1, "no bucket directory"},
		{"relative dir", "present", "file://relative/bucket", -1, "absolute"},
		{"no such topic", "absent", "file://" + srcBucket, -1, `no topic "absent"`},
		{"partition count", "present", "file://" + srcBucket, 3, "has 2 partition(s)"},
		{"s3 without settings", "present", "s3://bucket/prefix", -1, "directory stores only"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, _ := adm.CreateTopic(ctx, c.partitions, -1, map[string]*string{node.ReadReplicaSourceKey: &c.uri}, c.topic)
			if !errors.Is(resp.Err, kerr.InvalidConfig) || !strings.Contains(resp.ErrMessage, c.want) || strings.Contains(resp.ErrMessage, "\n") {
				t.Fatalf("got %v %q, want INVALID_CONFIG saying %q", resp.Err, resp.ErrMessage, c.want)
			}
			t.Logf("%s: %s", c.name, resp.ErrMessage)
			topics, err := adm.ListTopics(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if topics.Has(c.topic) {
				t.Fatalf("topic %s created despite the error", c.topic)
			}
		})
	}
	// The topic id is the broker's: one that is not the source's is refused.
	uri := "file://" + srcBucket
	wrong := strings.Repeat("ab", 16)
	resp, _ := adm.CreateTopic(ctx, -1, -1, map[string]*string{node.ReadReplicaSourceKey: &uri, node.ReadReplicaTopicIDKey: &wrong}, "present")
	if !errors.Is(resp.Err, kerr.InvalidConfig) {
		t.Fatalf("wrong source topic id: %v", resp.Err)
	}
	// A topic that is not a read replica cannot become one.
	createTopic(t, adm, "plain", 1, nil)
	ac, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: node.ReadReplicaSourceKey, Value: &uri}}, "plain")
	if err != nil || !errors.Is(ac[0].Err, kerr.InvalidConfig) {
		t.Fatalf("make a topic a read replica: %v %+v", err, ac)
	}
}

// TestReadReplicaMissingObjectRereadsManifest: a replica whose manifest is
// stale (its poll interval is long) reads an object the source's
// retention has since deleted: it reads the source's manifest again and
// answers OFFSET_OUT_OF_RANGE with the new log start, not a storage
// error and never a hole served as data.
func TestReadReplicaMissingObjectRereadsManifest(t *testing.T) {
	srcBucket := filepath.Join(t.TempDir(), "source-bucket")
	srcStore, err := objstore.NewDir(srcBucket)
	if err != nil {
		t.Fatal(err)
	}
	src := tieredBroker(t, "", srcStore, func(c *Config) {
		c.Tier.IdleUpload = 50 * time.Millisecond
		shortOrphanGrace(c, time.Nanosecond)
		c.Tier.CollectInterval = 50 * time.Millisecond
	})
	rep := tieredBroker(t, "", tierStores[0].open(t), func(c *Config) {
		c.ReadReplica.PollInterval = time.Hour // only the creation's poll
	})
	createTopic(t, testAdmin(t, src), "stale", 1, map[string]*string{
		"segment.bytes":         ptr("16384"),
		"local.retention.bytes": ptr("16384"),
	})
	produceWithHeaders(t, src, "stale", 0, 1000)
	waitAllUploaded(t, src, "stale", 1)
	uri := "file://" + srcBucket
	createTopic(t, testAdmin(t, rep), "stale", -1, map[string]*string{node.ReadReplicaSourceKey: &uri})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := testAdmin(t, src).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: ptr("32768")}}, "stale"); err != nil {
		t.Fatal(err)
	}
	p := src.partition("stale", 0)
	waitFor(t, 30*time.Second, "retention and collection at the source", func() bool {
		m, _ := src.tier.Manifest(context.Background(), p.BucketName())
		objects := 0
		srcStore.List(context.Background(), p.BucketName().SegmentsPrefix(), func(objstore.Attrs) error { objects++; return nil })
		return m.LogStartOffset > 0 && objects == int(m.Totals().Segments)
	})
	repCl := testClient(t, rep)
	if e := listOffset(t, repCl, "stale", -2); e != 0 {
		t.Fatalf("the replica's manifest is not stale: earliest %d", e)
	}
	req := kmsg.NewPtrFetchRequest()
	req.MaxBytes = 1 << 20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "stale"
	topic, _ := rep.node.TopicByName("stale")
	rt.TopicID = topic.ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = 0, 1<<20, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, repCl)
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Topics[0].Partitions[0]
	if got.ErrorCode != kerr.OffsetOutOfRange.Code || len(got.RecordBatches) != 0 {
		t.Fatalf("fetch at 0 after the source deleted it: %v, %d bytes; want OFFSET_OUT_OF_RANGE", kerr.ErrorForCode(got.ErrorCode), len(got.RecordBatches))
	}
	if e := listOffset(t, repCl, "stale", -2); e == 0 {
		t.Fatal("the replica's log start did not move after it met a deleted object")
	}
}

// TestReadReplicaRefusesTransactions: a transactional producer that
// writes to a read replica fails at once with POLICY_VIOLATION from
// AddPartitionsToTxn, before the coordinator records the partition, so
// the transactional id goes on working (were the partition added, the
// abort's markers would be refused forever).
// In a request with other partitions, those are OPERATION_NOT_ATTEMPTED.
func TestReadReplicaRefusesTransactions(t *testing.T) {
	src, rep, srcBucket := readReplicaPair(t)
	createTopic(t, testAdmin(t, src), "ledger", 1, map[string]*string{"segment.bytes": ptr("16384")})
	produceWithHeaders(t, src, "ledger", 0, 200)
	waitAllUploaded(t, src, "ledger", 1)
	uri := "file://" + srcBucket
	adm := testAdmin(t, rep)
	createTopic(t, adm, "ledger", -1, map[string]*string{node.ReadReplicaSourceKey: &uri})
	createTopic(t, adm, "local", 1, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := testClient(t, rep, kgo.TransactionalID("writes-to-replica"), kgo.RecordRetries(3))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := cl.ProduceSync(ctx, &kgo.Record{Topic: "ledger", Value: []byte("no")}).FirstErr()
	if !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("transactional produce to the replica: %v, want POLICY_VIOLATION", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the transactional producer took %s to fail", took)
	}
	// franz-go takes the refusal as fatal to its producer id; a new
	// client with the same transactional id is not stuck behind markers
	// that cannot be written: its transaction on a local topic commits.
	cl.Close()
	raw := testClient(t, rep)
	initPID := func(id string) *kmsg.InitProducerIDResponse {
		t.Helper()
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID, req.TransactionTimeoutMillis = &id, 60000
		deadline := time.Now().Add(15 * time.Second)
		for {
			resp, err := req.RequestWith(ctx, raw)
			if err != nil {
				t.Fatalf("init producer id %s: %v", id, err)
			}
			if resp.ErrorCode == 0 {
				return resp
			}
			if time.Now().After(deadline) {
				t.Fatalf("init producer id %s: still %v after 15 s", id, kerr.ErrorForCode(resp.ErrorCode))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	initPID("writes-to-replica")
	cl = testClient(t, rep, kgo.TransactionalID("writes-to-replica"))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "local", Value: []byte("yes")}).FirstErr(); err != nil {
		t.Fatalf("transactional produce to a local topic after the refusal: %v", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("commit after the refusal: %v", err)
	}

	// The wire: both forms of the request, a replica partition beside a
	// local one.
	txnID := "raw-adds"
	ip := initPID(txnID)
	want := map[string]int16{"ledger": kerr.PolicyViolation.Code, "local": kerr.OperationNotAttempted.Code}
	for _, version := range []int16{3, 4} {
		req := kmsg.NewPtrAddPartitionsToTxnRequest()
		req.Version = version
		var codes map[string]int16
		if version < 4 {
			req.TransactionalID, req.ProducerID, req.ProducerEpoch = txnID, ip.ProducerID, ip.ProducerEpoch
			for _, topic := range []string{"local", "ledger"} {
				rt := kmsg.NewAddPartitionsToTxnRequestTopic()
				rt.Topic, rt.Partitions = topic, []int32{0}
				req.Topics = append(req.Topics, rt)
			}
			resp, err := req.RequestWith(ctx, raw)
			if err != nil {
				t.Fatal(err)
			}
			codes = map[string]int16{}
			for _, rt := range resp.Topics {
				codes[rt.Topic] = rt.Partitions[0].ErrorCode
			}
		} else {
			tx := kmsg.NewAddPartitionsToTxnRequestTransaction()
			tx.TransactionalID, tx.ProducerID, tx.ProducerEpoch = txnID, ip.ProducerID, ip.ProducerEpoch
			for _, topic := range []string{"local", "ledger"} {
				rt := kmsg.NewAddPartitionsToTxnRequestTransactionTopic()
				rt.Topic, rt.Partitions = topic, []int32{0}
				tx.Topics = append(tx.Topics, rt)
			}
			req.Transactions = append(req.Transactions, tx)
			resp, err := req.RequestWith(ctx, raw)
			if err != nil {
				t.Fatal(err)
			}
			codes = map[string]int16{}
			for _, rt := range resp.Transactions[0].Topics {
				codes[rt.Topic] = rt.Partitions[0].ErrorCode
			}
		}
		for topic, code := range want {
			if codes[topic] != code {
				t.Errorf("v%d: %s: %v, want %v", version, topic, kerr.ErrorForCode(codes[topic]), kerr.ErrorForCode(code))
			}
		}
	}
	// Nothing was added: the transaction is not ongoing.
	dt := kmsg.NewPtrDescribeTransactionsRequest()
	dt.TransactionalIDs = []string{txnID}
	desc, err := dt.RequestWith(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	if s := desc.TransactionStates[0]; len(s.Topics) != 0 || s.State == "Ongoing" {
		t.Fatalf("the refused adds left the transaction %s with %+v", s.State, s.Topics)
	}
}

// copyBucket copies every object of from into a new directory bucket,
// leaving out the metadata checkpoints: the bucket of a cluster that
// writes none (an older version's).
func copyBucket(t *testing.T, from objstore.Store) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "no-checkpoint-bucket")
	to, err := objstore.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = from.List(ctx, "", func(a objstore.Attrs) error {
		if strings.HasPrefix(a.Key, "metadata/") {
			return nil
		}
		r, err := from.GetRange(ctx, a.Key, 0, -1)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			return err
		}
		return to.Put(ctx, a.Key, bytes.NewReader(b), int64(len(b)))
	})
	if err != nil {
		t.Fatalf("copy the bucket: %v", err)
	}
	return dir
}

// TestReadReplicaFindsPartitionsWithoutCheckpoint: from a bucket without
// a metadata checkpoint, a read replica finds its source topic's
// partitions from the objects, counting past a partition in the middle
// that never uploaded (which it serves empty) instead of stopping there.
func TestReadReplicaFindsPartitionsWithoutCheckpoint(t *testing.T) {
	src, rep, _ := readReplicaPair(t)
	const partitions = 3
	createTopic(t, testAdmin(t, src), "sparse", partitions, map[string]*string{"segment.bytes": ptr("16384")})
	// Partitions 0 and 2 only: 1 never uploads.
	cl := testClient(t, src, kgo.DefaultProduceTopic("sparse"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rs []*kgo.Record
	for i := range 400 {
		rs = append(rs, &kgo.Record{Partition: int32(i%2) * 2, Key: fmt.Appendf(nil, "k%d", i), Value: make([]byte, 100)})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	ends := waitAllUploaded(t, src, "sparse", partitions)
	if ends[1] != 0 || ends[0] == 0 || ends[2] == 0 {
		t.Fatalf("source ends %v", ends)
	}
	bucket := copyBucket(t, src.cfg.Tier.Store)

	uri := "file://" + bucket
	adm := testAdmin(t, rep)
	resp, err := adm.CreateTopic(ctx, -1, -1, map[string]*string{node.ReadReplicaSourceKey: &uri}, "sparse")
	if err != nil {
		t.Fatalf("create read replica: %v %s", err, resp.ErrMessage)
	}
	if resp.NumPartitions != partitions {
		t.Fatalf("replica has %d partitions, source %d", resp.NumPartitions, partitions)
	}
	want := consumeRange(t, src, "sparse", ends)
	got := consumeRange(t, rep, "sparse", ends)
	for p := range int32(partitions) {
		if len(got[p]) != len(want[p]) {
			t.Fatalf("partition %d: %d records on the replica, %d on the source", p, len(got[p]), len(want[p]))
		}
		for i := range want[p] {
			if err := sameRecord(want[p][i], got[p][i]); err != nil {
				t.Fatalf("partition %d: %v", p, err)
			}
		}
	}
	lo, err := adm.ListEndOffsets(ctx, "sparse")
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := lo.Lookup("sparse", 1); o.Err != nil || o.Offset != 0 {
		t.Fatalf("the partition that never uploaded: end %d %v, want 0", o.Offset, o.Err)
	}
}

// TestReadReplicaLagSeriesGoesWithTheTopic: strata_read_replica_lag_seconds
// has a series for a read replica once its source has uploaded since its
// creation, keeps it while the source is quiet, and loses it when the
// replica topic is deleted.
func TestReadReplicaLagSeriesGoesWithTheTopic(t *testing.T) {
	srcBucket := filepath.Join(t.TempDir(), "source-bucket")
	srcStore, err := objstore.NewDir(srcBucket)
	if err != nil {
		t.Fatal(err)
	}
	src := tieredBroker(t, "", srcStore, func(c *Config) { c.Tier.IdleUpload = 50 * time.Millisecond })
	rep := tieredBroker(t, "", tierStores[0].open(t), func(c *Config) {
		c.ReadReplica.PollInterval = replicaPoll
		c.HTTPListen = "127.0.0.1:0"
	})
	createTopic(t, testAdmin(t, src), "gauged", 2, map[string]*string{"segment.bytes": ptr("16384")})
	produceWithHeaders(t, src, "gauged", 0, 200)
	waitAllUploaded(t, src, "gauged", 2)
	uri := "file://" + srcBucket
	adm := testAdmin(t, rep)
	createTopic(t, adm, "gauged", -1, map[string]*string{node.ReadReplicaSourceKey: &uri})

	const series = `strata_read_replica_lag_seconds{topic="gauged"}`
	produceWithHeaders(t, src, "gauged", 200, 200)
	waitFor(t, 30*time.Second, "the lag series", func() bool {
		_, ok := scrapeSeries(t, rep)[series]
		return ok
	})
	// The source is quiet now: the series holds its value, poll after poll.
	waitAllUploaded(t, src, "gauged", 2)
	time.Sleep(3 * replicaPoll)
	v := scrapeSeries(t, rep)[series]
	time.Sleep(3 * replicaPoll)
	if now, ok := scrapeSeries(t, rep)[series]; !ok || now != v {
		t.Fatalf("the lag series moved from %v to %v (present %v) while the source was quiet", v, now, ok)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.DeleteTopic(ctx, "gauged"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the lag series to go with the topic", func() bool {
		_, ok := scrapeSeries(t, rep)[series]
		return !ok
	})
	// It stays gone: no poll in flight at the deletion brings it back.
	time.Sleep(3 * replicaPoll)
	if _, ok := scrapeSeries(t, rep)[series]; ok {
		t.Fatal("the lag series came back after the topic was deleted")
	}
}

// fetchCode fetches topic-partition 0 at offset from b and returns the
// partition's error code and how many record bytes came back.
func fetchCode(t *testing.T, b *Broker, cl *kgo.Client, topic string, offset int64) (int16, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrFetchRequest()
	req.MaxBytes = 1 << 20
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	tt, _ := b.node.TopicByName(topic)
	rt.TopicID = tt.ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.FetchOffset, rp.PartitionMaxBytes, rp.CurrentLeaderEpoch, rp.LogStartOffset = offset, 1<<20, -1, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	got := resp.Topics[0].Partitions[0]
	return got.ErrorCode, len(got.RecordBatches)
}

// TestReadReplicaSourceTopicDeleted: the source deletes its topic (its
// manifests and segments go from the bucket) while the replica holds a
// stale manifest. A read of a deleted object (not in the replica's
// chunk cache, which serves until the next poll) reads the source again,
// finds no manifest, and the replica's log start moves to its end: every
// fetch below answers OFFSET_OUT_OF_RANGE, never KAFKA_STORAGE_ERROR,
// the latest offset stays, a consumer resetting to the start waits at
// the end without an error, and the node logs and counts it.
func TestReadReplicaSourceTopicDeleted(t *testing.T) {
	srcBucket := filepath.Join(t.TempDir(), "source-bucket")
	srcStore, err := objstore.NewDir(srcBucket)
	if err != nil {
		t.Fatal(err)
	}
	src := tieredBroker(t, "", srcStore, func(c *Config) { c.Tier.IdleUpload = 50 * time.Millisecond })
	rep := tieredBroker(t, "", tierStores[0].open(t), func(c *Config) {
		c.ReadReplica.PollInterval = time.Hour // only the creation's poll, and the reads'
		c.HTTPListen = "127.0.0.1:0"
	})
	createTopic(t, testAdmin(t, src), "doomed", 1, map[string]*string{"segment.bytes": ptr("16384")})
	produceWithHeaders(t, src, "doomed", 0, 500)
	end := waitAllUploaded(t, src, "doomed", 1)[0]
	uri := "file://" + srcBucket
	createTopic(t, testAdmin(t, rep), "doomed", -1, map[string]*string{node.ReadReplicaSourceKey: &uri})
	repCl := testClient(t, rep)
	waitFor(t, 10*time.Second, "the replica's first poll", func() bool {
		off, code := listOffsetV(t, repCl, "doomed", -1)
		return code == 0 && off == end
	})
	// (No fetch yet: a chunk read before the deletion stays in the
	// replica's cache and is served until a poll sees the deletion.)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := testAdmin(t, src).DeleteTopic(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the source bucket to forget the topic", func() bool {
		n := 0
		srcStore.List(context.Background(), "", func(a objstore.Attrs) error {
			if strings.Contains(a.Key, "/doomed-") {
				n++
			}
			return nil
		})
		return n == 0
	})

	// The replica's manifest is stale (no poll since): the read meets a
	// deleted object, reads the source again and finds the topic gone.
	for _, off := range []int64{0, end / 2, end - 1} {
		if code, n := fetchCode(t, rep, repCl, "doomed", off); code != kerr.OffsetOutOfRange.Code || n != 0 {
			t.Fatalf("fetch at %d after the source deleted the topic: %v, %d bytes; want OFFSET_OUT_OF_RANGE", off, kerr.ErrorForCode(code), n)
		}
	}
	if start := listOffset(t, repCl, "doomed", -2); start != end {
		t.Fatalf("earliest %d after the source's deletion, want the end %d", start, end)
	}
	if latest := listOffset(t, repCl, "doomed", -1); latest != end {
		t.Fatalf("latest %d after the source's deletion, want %d", latest, end)
	}
	if code, _ := fetchCode(t, rep, repCl, "doomed", end); code != 0 {
		t.Fatalf("fetch at the end: %v", kerr.ErrorForCode(code))
	}
	// A consumer from 0 resets to the start (the end) and waits there.
	cons := testClient(t, rep, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"doomed": {0: kgo.NewOffset().At(0)}}),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
	pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer pcancel()
	for pctx.Err() == nil {
		fs := cons.PollFetches(pctx)
		fs.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("consume after the source's deletion: %v", err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) { t.Fatalf("record at %d served after the source's deletion", r.Offset) })
	}

	// The loop's next poll reports it.
	rep.node.PollReadReplicas(rep.node.Partitions())
	const series = `strata_read_replica_source_deleted_partitions{topic="doomed"}`
	if v := scrapeSeries(t, rep)[series]; v != 1 {
		t.Fatalf("%s = %v, want 1", series, v)
	}
	// The replica goes on answering the same after every poll.
	if code, _ := fetchCode(t, rep, repCl, "doomed", 0); code != kerr.OffsetOutOfRange.Code {
		t.Fatalf("fetch at 0 after a poll: %v", kerr.ErrorForCode(code))
	}
	if _, err := testAdmin(t, rep).DeleteTopic(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the series to go with the topic", func() bool {
		_, ok := scrapeSeries(t, rep)[series]
		return !ok
	})
}

// hangingManifests is a source store whose manifest GETs wait until their
// context ends: a source bucket that stopped answering, as a poll sees it.
type hangingManifests struct {
	objstore.Store
	hung *atomic.Int32
}

func (h hangingManifests) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if strings.HasSuffix(key, ".manifest") {
		h.hung.Add(1)
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.Store.GetRange(ctx, key, off, n)
}

// TestReadReplicaHungSourceDoesNotStallTheNode: a read replica whose
// source stops answering (every manifest GET waits for its context, a
// minute) holds up nothing else on its node: a normal topic created
// meanwhile takes leadership and takes a produce within seconds, and the
// replica answers ListOffsets with a retriable error until its source
// answers.
func TestReadReplicaHungSourceDoesNotStallTheNode(t *testing.T) {
	srcBucket := filepath.Join(t.TempDir(), "source-bucket")
	srcStore, err := objstore.NewDir(srcBucket)
	if err != nil {
		t.Fatal(err)
	}
	src := tieredBroker(t, "", srcStore, func(c *Config) { c.Tier.IdleUpload = 50 * time.Millisecond })
	createTopic(t, testAdmin(t, src), "far", 1, map[string]*string{"segment.bytes": ptr("16384")})
	produceWithHeaders(t, src, "far", 0, 200)
	waitAllUploaded(t, src, "far", 1)

	var hung atomic.Int32
	rep := tieredBroker(t, "", tierStores[0].open(t), func(c *Config) {
		c.ReadReplica.PollInterval = replicaPoll
		c.ReadReplica.Open = func(ctx context.Context, uri string) (objstore.Store, error) {
			st, err := node.OpenDirSource(ctx, uri)
			if err != nil {
				return nil, err
			}
			return hangingManifests{st, &hung}, nil
		}
	})
	uri := "file://" + srcBucket
	created := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := testAdmin(t, rep).CreateTopic(ctx, -1, -1, map[string]*string{node.ReadReplicaSourceKey: &uri}, "far")
		if err == nil {
			err = resp.Err
		}
		created <- err
	}()
	waitFor(t, 20*time.Second, "the replica's first poll to hang", func() bool {
		_, ok := rep.node.TopicByName("far")
		return ok && hung.Load() > 0
	})

	began := time.Now()
	adm := testAdmin(t, rep)
	createTopic(t, adm, "near", 1, nil)
	cl := testClient(t, rep, kgo.DefaultProduceTopic("near"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	t.Logf("normal topic created and produced to in %v while the replica's source hangs", took)
	if took > 5*time.Second {
		t.Fatalf("a normal topic took %v to create and take a produce while a read replica's source hung", took)
	}
	// The replica's creation answered too (after its bounded wait).
	select {
	case err := <-created:
		if err != nil {
			t.Fatalf("create the replica: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the replica's creation still waits on its hung source")
	}
	if off, code := listOffsetV(t, testClient(t, rep), "far", -1); code == 0 || !kerr.IsRetriable(kerr.ErrorForCode(code)) {
		t.Fatalf("latest offset of a replica whose source hangs: %d, %v; want a retriable error", off, kerr.ErrorForCode(code))
	}
}
