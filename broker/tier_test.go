package broker

import (
	"context"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/broker/partition"
	"strata/localstack"
	"strata/tier/objstore"
)

// tierStores are the object stores every tiered-storage promise is checked
// against: the embedded local directory and real S3 (the in-process server,
// or MinIO/any S3 named by STRATA_S3_*).
var tierStores = []struct {
	name string
	open func(t *testing.T) objstore.Store
}{
	{"dir", func(t *testing.T) objstore.Store {
		s, err := objstore.NewDir(filepath.Join(t.TempDir(), "bucket"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"s3", func(t *testing.T) objstore.Store {
		s3 := localstack.TestS3(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		s, err := objstore.NewS3(ctx, s3.Config())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

func tieredBroker(t *testing.T, dir string, store objstore.Store, mutate ...func(*Config)) *Broker {
	return testBroker(t, dir, append([]func(*Config){func(c *Config) {
		c.Tier = TierConfig{
			Store:          store,
			UploadInterval: 20 * time.Millisecond,
			ChunkBytes:     1 << 20,
			CacheBytes:     8 << 20,
		}
	}}, mutate...)...)
}

// produceKeyed writes n records of size bytes to topic, key = index, value
// derived from the index, and returns once all are acknowledged.
func produceKeyed(t testing.TB, b *Broker, topic string, n, size int, opts ...kgo.Opt) {
	t.Helper()
	cl := testClient(t, b, append([]kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(2 * time.Millisecond),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()), kgo.MaxBufferedRecords(16 << 10)}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var once sync.Once
	var perr error
	for i := 0; i < n; i++ {
		v := make([]byte, size)
		fillValue(v, uint64(i))
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Key: binary.BigEndian.AppendUint64(nil, uint64(i)), Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				once.Do(func() { perr = err })
			}
			wg.Done()
		})
	}
	wg.Wait()
	if perr != nil {
		t.Fatalf("produce: %v", perr)
	}
	cl.Close()
}

// consumeExactlyOnce reads topic from the earliest offset and checks that
// records 0..n-1 each arrive once, byte-identical, in per-partition order.
func consumeExactlyOnce(t *testing.T, b *Broker, topic string, n, size int) {
	t.Helper()
	consumeChecked(t, b, topic, n, size, func(tp string, p int32, err error) { t.Fatalf("fetch %s-%d: %v", tp, p, err) })
}

// consumeChecked is consumeExactlyOnce with the fetch errors the client
// reports handed to onErr; the consumer goes on after them (a failed fetch
// is retried at the same offset).
func consumeChecked(t *testing.T, b *Broker, topic string, n, size int, onErr func(topic string, partition int32, err error)) {
	t.Helper()
	cl := testClient(t, b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(16<<20))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seen := make([]bool, n)
	last := map[int32]int64{}
	want := make([]byte, size)
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d", got, n)
		}
		fs.EachError(onErr)
		fs.EachRecord(func(r *kgo.Record) {
			i := binary.BigEndian.Uint64(r.Key)
			if i >= uint64(n) || seen[i] {
				t.Fatalf("record %d unexpected or consumed twice", i)
			}
			seen[i] = true
			got++
			if prev, ok := last[r.Partition]; ok && r.Offset != prev+1 {
				t.Fatalf("partition %d: offset %d after %d", r.Partition, r.Offset, prev)
			}
			last[r.Partition] = r.Offset
			fillValue(want, i)
			if string(r.Value) != string(want) {
				t.Fatalf("record %d differs", i)
			}
		})
	}
}

// waitUploaded waits until every closed segment of topic's partitions is
// in the bucket and local retention has run.
func waitUploaded(tb testing.TB, b *Broker, topic string, partitions int32) {
	tb.Helper()
	waitUploadedWithin(tb, b, topic, partitions, 2*time.Minute)
}

// waitUploadedWithin is waitUploaded with a deadline d.
func waitUploadedWithin(tb testing.TB, b *Broker, topic string, partitions int32, d time.Duration) {
	tb.Helper()
	waitFor(tb, d, "uploads to settle", func() bool {
		for i := range partitions {
			p := b.partition(topic, i)
			if end := uploadTarget(tb, p); end > 0 && p.RemoteEnd() < end {
				return false
			}
		}
		return true
	})
	// The pass that moved the remote end applies local retention after
	// it, holding the partition's upload lock throughout: once the lock
	// is free, that pass is over.
	for i := range partitions {
		p := b.partition(topic, i)
		p.HoldUploads()() // taking the lock is waiting for the pass
	}
}

// uploadTarget is the offset p's bucket must reach to hold every closed
// segment: the end of its last closed segment or, with none left locally
// (uploaded and deleted, big batches and small local retention), the local
// log start, where the active segment begins. It is 0 while p has nothing
// to upload.
func uploadTarget(tb testing.TB, p *partition.Partition) int64 {
	tb.Helper()
	segs, err := p.Log().ClosedSegments(0)
	if err != nil {
		tb.Fatal(err)
	}
	if len(segs) > 0 {
		return segs[len(segs)-1].EndOffset
	}
	return p.Log().StartOffset()
}

// TestTieredReplay is the promise of tiered storage: with small segments
// and a small local retention, most of the history moves to the bucket,
// the local log keeps only a few segments, and a consumer from the earliest
// offset still receives every record exactly once, byte-identical, in
// order; after a restart with a cold chunk cache, too.
func TestTieredReplay(t *testing.T) {
	for _, st := range tierStores {
		t.Run(st.name, func(t *testing.T) { checkTieredReplay(t, st.open(t)) })
	}
}

// checkTieredReplay is TestTieredReplay against one store.
func checkTieredReplay(t *testing.T, store objstore.Store) {
	t.Helper()
	const partitions = 6
	const size = 1024
	// 200 MB with 1 MiB segments and 4 MiB of local retention; -short
	// scales all three down by 8.
	n, segBytes := 200_000, 1<<20
	if testing.Short() {
		n, segBytes = 25_000, 128<<10
	}
	dir := t.TempDir()
	b := tieredBroker(t, dir, store)
	createTopic(t, testAdmin(t, b), "history", partitions, map[string]*string{
		"segment.bytes":         ptr(fmt.Sprint(segBytes)),
		"local.retention.bytes": ptr(fmt.Sprint(4 * segBytes)),
	})
	produceKeyed(t, b, "history", n, size)
	waitUploaded(t, b, "history", partitions)
	// Local retention deletes what the bucket holds on its own pass, which
	// on a loaded machine can trail the last upload by a few seconds.
	waitFor(t, 2*time.Minute, "local retention to keep about 5 segments per partition", func() bool {
		for i := int32(0); i < partitions; i++ {
			if segmentFiles(t, b, "history", i) > 7 {
				return false
			}
		}
		return true
	})
	remote := 0
	for i := int32(0); i < partitions; i++ {
		p := b.partition("history", i)
		if p.Log().StartOffset() == 0 {
			t.Errorf("partition %d: nothing was deleted locally", i)
		}
		m, err := b.tier.Manifest(context.Background(), p.BucketName())
		if err != nil {
			t.Fatal(err)
		}
		remote += int(m.Totals().Segments)
	}
	t.Logf("%d segments in the bucket", remote)
	consumeExactlyOnce(t, b, "history", n, size)

	// Restart: the chunk cache starts empty; history comes from the bucket.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = tieredBroker(t, dir, store)
	if got := b.tier.CachedBytes(); got != 0 {
		t.Fatalf("chunk cache holds %d bytes after a restart", got)
	}
	consumeExactlyOnce(t, b, "history", n, size)
	if got := b.tier.CachedBytes(); got > 8<<20 {
		t.Fatalf("chunk cache holds %d bytes, bound is %d", got, 8<<20)
	}
}
