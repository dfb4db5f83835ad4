package broker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/tier/objstore"
)

// listOffsetV answers ListOffsets for partition 0 of topic at the newest
// version both sides know, so the tiered special timestamps (-4, -5) can
// be asked for; it returns the offset and the partition's error code.
func listOffsetV(t *testing.T, cl *kgo.Client, topic string, ts int64) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Timestamp = ts
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatalf("list offsets: %v", err)
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, p.ErrorCode
}

// TestTieredOffsets: once history is only in the bucket, ListOffsets
// earliest (-2) is the bucket's start, earliest-local (-4) the local log
// start, latest-tiered (-5, KIP-1005) the last offset in the bucket, and a
// timestamp lookup finds records that are only in the bucket.
func TestTieredOffsets(t *testing.T) {
	store := tierStores[0].open(t)
	b := tieredBroker(t, "", store)
	createTopic(t, testAdmin(t, b), "offsets", 1, map[string]*string{
		"segment.bytes":         ptr("16384"),
		"local.retention.bytes": ptr("0"),
		"retention.ms":          ptr("-1"),
	})
	cl := testClient(t, b, kgo.DefaultProduceTopic("offsets"), kgo.ProducerLinger(0), kgo.ProducerBatchMaxBytes(4096))
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 200
	for i := 0; i < n; i++ {
		r := &kgo.Record{Value: make([]byte, 1000), Timestamp: base.Add(time.Duration(i) * time.Second)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	waitUploaded(t, b, "offsets", 1)
	p := b.partition("offsets", 0)
	waitFor(t, 10*time.Second, "local deletion", func() bool { return p.Log().StartOffset() > 0 })

	if off, code := listOffsetV(t, cl, "offsets", -2); code != 0 || off != 0 {
		t.Fatalf("earliest: %d (%v), want 0 from the bucket", off, kerr.ErrorForCode(code))
	}
	local := p.Log().StartOffset()
	if off, code := listOffsetV(t, cl, "offsets", -4); code != 0 || off != local {
		t.Fatalf("earliest-local: %d (%v), want %d", off, kerr.ErrorForCode(code), local)
	}
	if off, code := listOffsetV(t, cl, "offsets", -5); code != 0 || off != p.RemoteEnd()-1 || off < local-1 {
		t.Fatalf("latest-tiered: %d (%v), remote end %d", off, kerr.ErrorForCode(code), p.RemoteEnd())
	}
	for _, i := range []int{0, 3, 17, int(local) - 1} {
		off, code := listOffsetV(t, cl, "offsets", base.Add(time.Duration(i)*time.Second).UnixMilli())
		if code != 0 || off != int64(i) {
			t.Fatalf("offset for the timestamp of record %d (in the bucket): %d (%v)", i, off, kerr.ErrorForCode(code))
		}
	}
}

// TestIdleUpload: a quiet partition's data reaches the bucket: its active
// segment is rolled once older than the idle bound and then uploaded.
func TestIdleUpload(t *testing.T) {
	store := tierStores[0].open(t)
	b := tieredBroker(t, "", store, func(c *Config) { c.Tier.IdleUpload = 200 * time.Millisecond })
	createTopic(t, testAdmin(t, b), "quiet", 1, nil)
	produceKeyed(t, b, "quiet", 10, 100)
	p := b.partition("quiet", 0)
	waitFor(t, 20*time.Second, "the idle segment uploaded", func() bool { return p.RemoteEnd() == 10 })
}

// TestUploadBackpressure: while the object store is down nothing is lost,
// the local data stays, upload lag shows, and once the local logs cross
// the configured limit produce fails with a retriable error; when the
// store comes back, uploads catch up and produce works again.
func TestUploadBackpressure(t *testing.T) {
	inner := tierStores[0].open(t)
	faulty := objstore.WithFaults(inner, objstore.FaultConfig{FailRate: 1})
	b := tieredBroker(t, "", faulty, func(c *Config) { c.Tier.LocalDiskLimit = 256 << 10 })
	createTopic(t, testAdmin(t, b), "stuck", 1, map[string]*string{
		"segment.bytes":         ptr("32768"),
		"local.retention.bytes": ptr("0"),
	})
	cl := testClient(t, b, kgo.DefaultProduceTopic("stuck"), kgo.RecordRetries(0), kgo.ProducerBatchMaxBytes(8192),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var refused error
	acked := 0
	for i := 0; i < 2000 && refused == nil; i++ {
		err := cl.ProduceSync(ctx, &kgo.Record{Value: make([]byte, 1000)}).FirstErr()
		switch {
		case err == nil:
			acked++
		case errors.Is(err, kerr.KafkaStorageError):
			refused = err
		default:
			t.Fatalf("produce %d: %v", i, err)
		}
		if i%50 == 0 {
			time.Sleep(30 * time.Millisecond) // let an upload pass measure the disk
		}
	}
	if refused == nil {
		t.Logf("acked %d, local bytes %d, log size %d", acked, b.node.LocalBytes(), b.partition("stuck", 0).Log().Size())
		t.Fatal("produce never refused while the store was down and the disk limit crossed")
	}
	p := b.partition("stuck", 0)
	if p.Log().StartOffset() != 0 || p.RemoteEnd() > 0 {
		t.Fatalf("local start %d, remote end %d while the store was down", p.Log().StartOffset(), p.RemoteEnd())
	}
	if !kerr.IsRetriable(refused) {
		t.Fatalf("refusal %v is not retriable", refused)
	}

	faulty.SetConfig(objstore.FaultConfig{}) // the store is back
	waitFor(t, 30*time.Second, "uploads to catch up", func() bool { return p.Log().StartOffset() > 0 })
	waitFor(t, 10*time.Second, "produce to be accepted again", func() bool {
		return cl.ProduceSync(ctx, &kgo.Record{Value: []byte("again")}).FirstErr() == nil
	})
	consumeCount(t, b, "stuck", acked+1)
}

// consumeCount reads topic from the start and checks it holds n records at
// contiguous offsets.
func consumeCount(t *testing.T, b *Broker, topic string, n int) {
	t.Helper()
	cons := testClient(t, b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for got := 0; got < n; {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d", got, n)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatal(err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != int64(got) {
				t.Fatalf("offset %d, want %d", r.Offset, got)
			}
			got++
		})
	}
}

// TestRemoteReadChecksCRC: a byte flipped inside an uploaded object is
// caught on the remote read: the fetch is refused, never served.
func TestRemoteReadChecksCRC(t *testing.T) {
	bucket := filepath.Join(t.TempDir(), "bucket")
	store, err := objstore.NewDir(bucket)
	if err != nil {
		t.Fatal(err)
	}
	b := tieredBroker(t, "", store)
	createTopic(t, testAdmin(t, b), "rot", 1, map[string]*string{
		"segment.bytes":         ptr("16384"),
		"local.retention.bytes": ptr("0"),
	})
	produceKeyed(t, b, "rot", 100, 1000, kgo.ProducerBatchMaxBytes(4096), kgo.ProducerBatchCompression(kgo.NoCompression()))
	waitUploaded(t, b, "rot", 1)
	p := b.partition("rot", 0)
	waitFor(t, 10*time.Second, "local deletion", func() bool { return p.Log().StartOffset() > 0 })

	m, err := b.tier.Manifest(context.Background(), p.BucketName())
	if err != nil || m.Empty() {
		t.Fatalf("manifest: %v", err)
	}
	first := remoteSegments(t, b.tier, m)[0]
	path := filepath.Join(bucket, filepath.FromSlash(first.Key))
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[200] ^= 0x01 // inside the first batch's records
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = p.ReadRemote(nil, 0, p.HighWatermark(), 1<<20)
	if code := errorCode(err); code != kerr.KafkaStorageError.Code {
		t.Fatalf("remote read of a damaged object: %v (code %d), want KAFKA_STORAGE_ERROR", err, code)
	}
}

// TestDeleteTopicDeletesBucketObjects: deleting a tiered topic removes its
// history from the bucket too, and a topic re-created under the same name
// starts empty (its objects live under the new topic id).
func TestDeleteTopicDeletesBucketObjects(t *testing.T) {
	store := tierStores[0].open(t)
	b := tieredBroker(t, "", store)
	adm := testAdmin(t, b)
	createTopic(t, adm, "doomed", 2, map[string]*string{"segment.bytes": ptr("16384")})
	produceKeyed(t, b, "doomed", 200, 1000, kgo.ProducerBatchMaxBytes(4096))
	waitUploaded(t, b, "doomed", 2)
	count := func() int {
		n := 0
		store.List(context.Background(), "", func(a objstore.Attrs) error {
			if strings.Contains(a.Key, "/doomed-") {
				n++
			}
			return nil
		})
		return n
	}
	if count() == 0 {
		t.Fatal("nothing uploaded")
	}
	if _, err := adm.DeleteTopics(context.Background(), "doomed"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the bucket to forget the topic", func() bool { return count() == 0 })
	createTopic(t, adm, "doomed", 1, nil)
	if off, _ := listOffsetV(t, testClient(t, b), "doomed", -2); off != 0 {
		t.Fatalf("re-created topic starts at %d", off)
	}
	if end, _ := listOffsetV(t, testClient(t, b), "doomed", -1); end != 0 {
		t.Fatalf("re-created topic ends at %d: it sees the old data", end)
	}
}
