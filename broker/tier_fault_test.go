package broker

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// TestTieredUploadUnderFaults is the promise that an unreliable object
// store costs time, never data: with a fifth of the calls failing (some
// failing after the write was applied, as when S3 commits a PUT and the
// reply is lost) and some stalling, every record is still consumed exactly
// once, every closed segment still reaches the bucket, and each partition's
// manifest lists every offset range exactly once. Objects the uploader
// thinks it failed to put stay behind as orphans, which is allowed.
//
// It runs against the raw faulty store (the uploader's own loop is the only
// retry, and stalls delay calls that have no per-attempt timeout) and
// behind objstore.WithRetry, as production wires it, where stalls outlast
// the per-attempt timeout and are cut short and retried.
func TestTieredUploadUnderFaults(t *testing.T) {
	const partitions = 6
	const size = 1024
	// 30 MB in 256 KiB segments, about 20 segments per partition; -short
	// scales the data down by 4 and the segments by 4.
	n, segBytes := 30_000, 256<<10
	if testing.Short() {
		n, segBytes = 8_000, 64<<10
	}
	cases := []struct {
		name   string
		faults objstore.FaultConfig
		wrap   func(objstore.Store) objstore.Store
	}{
		{"raw", objstore.FaultConfig{FailRate: 0.12, LostReplyRate: 0.08, StallRate: 0.03, Stall: 200 * time.Millisecond, Seed: 1},
			func(s objstore.Store) objstore.Store { return s }},
		{"retry", objstore.FaultConfig{FailRate: 0.12, LostReplyRate: 0.08, StallRate: 0.03, Stall: time.Second, Seed: 2},
			func(s objstore.Store) objstore.Store {
				// The budget of a 256 KiB PUT is 50ms + 256 KiB at 1 MiB/s,
				// about 300ms: every stall outlasts it.
				return objstore.WithRetry(s, objstore.RetryPolicy{
					Backoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, AttemptTimeout: 50 * time.Millisecond,
				})
			}},
	}
	for _, st := range tierStores {
		for _, tc := range cases {
			t.Run(st.name+"/"+tc.name, func(t *testing.T) {
				clean := st.open(t)
				faulty := objstore.WithFaults(clean, tc.faults)
				b := tieredBroker(t, t.TempDir(), tc.wrap(faulty))
				createTopic(t, testAdmin(t, b), "faults", partitions, map[string]*string{
					"segment.bytes":         ptr(fmt.Sprint(segBytes)),
					"local.retention.bytes": ptr(fmt.Sprint(4 * segBytes)),
				})
				produceKeyed(t, b, "faults", n, size)
				waitUploaded(t, b, "faults", partitions)
				errs := consumeExactlyOnceTolerant(t, b, "faults", n, size)
				fails, stalls := faulty.Injected()
				t.Logf("injected %d failures and %d stalls; consumer saw %d fetch errors", fails, stalls, errs)
				// Which calls fail or stall depends on timing; failures are
				// frequent enough to be certain, stalls (3%) only at full
				// size.
				if fails == 0 || stalls == 0 && !testing.Short() {
					t.Fatalf("injected %d failures and %d stalls: the test exercised too little", fails, stalls)
				}
				want := uploadedEnds(t, b, "faults", partitions)
				// Quiesce the uploader before looking at the bucket.
				if err := b.Close(); err != nil {
					t.Fatal(err)
				}
				orphans := checkBucket(t, clean, want)
				t.Logf("%d orphaned segment objects", orphans)
			})
		}
	}
}

// uploadedEnds returns, for each partition of topic, its name in the
// bucket and the end offset of its last closed segment (the base of the
// active one): what the bucket must reach.
func uploadedEnds(t *testing.T, b *Broker, topic string, partitions int32) map[format.TopicPartition]int64 {
	t.Helper()
	ends := map[format.TopicPartition]int64{}
	for i := int32(0); i < partitions; i++ {
		p := b.partition(topic, i)
		end := uploadTarget(t, p)
		if end == 0 {
			t.Fatalf("partition %d has no closed segment", i)
		}
		ends[p.BucketName()] = end
	}
	return ends
}

// checkBucket reads every partition's current manifest from store (not
// through the broker's cache) and checks that it lists each offset range
// once: segments contiguous from offset 0 up to ends[tp], distinct keys,
// every listed object present and matching its checksums. Segment objects
// the manifest does not list are orphans; it returns how many there are.
func checkBucket(t *testing.T, store objstore.Store, ends map[format.TopicPartition]int64) (orphans int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, err := tier.Open(tier.Config{Store: store, CacheDir: t.TempDir(), ChunkBytes: 1 << 20, CacheBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for tp, end := range ends {
		i := tp.Partition
		m, keys := manifestKeys(t, tr, tp)
		if m.Empty() {
			t.Fatalf("partition %d: empty manifest", i)
		}
		for _, s := range remoteSegments(t, tr, m) {
			rc, err := store.GetRange(ctx, s.Key, 0, -1)
			if err != nil {
				t.Fatalf("partition %d: listed segment: %v", i, err)
			}
			err = s.VerifyObject(rc)
			rc.Close()
			if err != nil {
				t.Fatalf("partition %d: %v", i, err)
			}
		}
		if next := m.EndOffset(); next != end {
			t.Errorf("partition %d: bucket ends at %d, last closed segment at %d", i, next, end)
		}
		listed := 0
		if err := store.List(ctx, tp.SegmentsPrefix(), func(a objstore.Attrs) error {
			if keys[a.Key] {
				listed++
			} else {
				orphans++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if listed != len(keys) {
			t.Fatalf("partition %d: %d of the %d segments the manifest lists are in the bucket", i, listed, len(keys))
		}
	}
	return orphans
}

// consumeExactlyOnceTolerant is consumeExactlyOnce for a broker whose
// object store fails. A transient store failure must reach the client as
// a retriable error, which franz-go retries without surfacing it, so any
// fetch error the client reports fails the test; the consumer still goes
// on (a failed fetch is retried at the same offset) so that the same run
// also checks that no record is lost, duplicated, reordered or changed.
// It returns how many fetch errors reached the client.
func consumeExactlyOnceTolerant(t *testing.T, b *Broker, topic string, n, size int) (fetchErrs int) {
	t.Helper()
	consumeChecked(t, b, topic, n, size, func(tp string, p int32, err error) {
		if fetchErrs == 0 {
			t.Errorf("fetch %s-%d: %v (a failing object store must give a retriable error, e.g. KAFKA_STORAGE_ERROR)", tp, p, err)
		}
		fetchErrs++
	})
	return fetchErrs
}

// crashStore lets calls through to the store it wraps until armed; then
// it lets segment object PUTs through but fails the first manifest PUT of
// one partition and, from then on, every call: the broker "crashed" right
// after the object was written and before the manifest that lists it was.
type crashStore struct {
	objstore.Store
	partition string // the partition's key prefix

	armed, crashed atomic.Bool
	once           sync.Once
	crash          chan struct{} // closed at the crash
	lastSegment    atomic.Pointer[string]
}

var errCrashed = errors.New("test: the broker crashed")

func (s *crashStore) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	if err := s.write(key); err != nil {
		return err
	}
	return s.Store.Put(ctx, key, r, size)
}

// Create is how manifests are published.
func (s *crashStore) Create(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	if err := s.write(key); err != nil {
		return err
	}
	return s.Store.Create(ctx, key, r, size)
}

func (s *crashStore) write(key string) error {
	if s.crashed.Load() {
		return errCrashed
	}
	if s.armed.Load() && strings.HasPrefix(key, s.partition) {
		if strings.HasSuffix(key, ".manifest") {
			s.once.Do(func() {
				s.crashed.Store(true)
				close(s.crash)
			})
			return errCrashed
		}
		s.lastSegment.Store(&key)
	}
	return nil
}

func (s *crashStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if s.crashed.Load() {
		return nil, errCrashed
	}
	return s.Store.GetRange(ctx, key, off, n)
}

func (s *crashStore) List(ctx context.Context, prefix string, fn func(objstore.Attrs) error) error {
	if s.crashed.Load() {
		return errCrashed
	}
	return s.Store.List(ctx, prefix, fn)
}

func (s *crashStore) Delete(ctx context.Context, key string) error {
	if s.crashed.Load() {
		return errCrashed
	}
	return s.Store.Delete(ctx, key)
}

// TestTieredCrashBeforeManifest is the order-of-operations promise
// (DESIGN.md section 3): a broker that dies after uploading a segment
// object and before publishing the manifest that lists it leaves an
// orphan, never a gap. After a restart on the same data directory every
// record is consumed exactly once from the earliest offset; the orphan is
// still there while its grace period runs, even with the collector
// running; once the grace period has passed the collector deletes it and
// nothing that a manifest references.
func TestTieredCrashBeforeManifest(t *testing.T) {
	const partitions = 3
	const size = 1024
	n, segBytes := 12_000, 256<<10
	if testing.Short() {
		n, segBytes = 3_000, 64<<10
	}
	for _, st := range tierStores {
		t.Run(st.name, func(t *testing.T) {
			store := st.open(t)
			dir := t.TempDir()
			topicConfigs := map[string]*string{
				"segment.bytes":         ptr(fmt.Sprint(segBytes)),
				"local.retention.bytes": ptr(fmt.Sprint(2 * segBytes)),
			}
			cs := &crashStore{Store: store, crash: make(chan struct{})}
			b := tieredBroker(t, dir, cs)
			createTopic(t, testAdmin(t, b), "crash", partitions, topicConfigs)
			produceKeyed(t, b, "crash", n/2, size)
			waitUploaded(t, b, "crash", partitions)

			tp := b.partition("crash", 1).BucketName()
			cs.partition = tp.Prefix()
			cs.armed.Store(true)
			produceKeyed(t, b, "crash", n/2, size) // keys repeat; checked below by offset
			select {
			case <-cs.crash:
			case <-time.After(time.Minute):
				t.Fatal("no manifest publication of partition 1 within a minute")
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			last := cs.lastSegment.Load()
			if last == nil {
				t.Fatal("the manifest PUT that crashed followed no segment PUT")
			}
			orphan := *last
			if _, err := store.Stat(context.Background(), orphan); err != nil {
				t.Fatalf("the object uploaded before the crash: %v", err)
			}

			// Restart on the same data directory and bucket. The collector
			// runs every 20ms, with the default grace of an hour.
			b = tieredBroker(t, dir, store, func(c *Config) { c.Tier.CollectInterval = 20 * time.Millisecond })
			waitUploaded(t, b, "crash", partitions)
			consumeOffsetsOnce(t, b, "crash", partitions, n, size)
			time.Sleep(100 * time.Millisecond) // several collector passes
			if _, err := store.Stat(context.Background(), orphan); err != nil {
				t.Fatalf("the orphan is gone before its grace period ended: %v", err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			referenced := checkBucketKeys(t, store, tp)
			if referenced[orphan] {
				t.Fatalf("the object whose manifest was never published is referenced: %s", orphan)
			}

			// The collector with a clock an hour on: the orphan goes, the
			// referenced objects stay.
			var now atomic.Pointer[time.Time]
			start := time.Now()
			now.Store(&start)
			tr, err := tier.Open(tier.Config{Store: store, CacheDir: t.TempDir(), Now: func() time.Time { return *now.Load() }})
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Close()
			ctx := context.Background()
			later := start.Add(59 * time.Minute)
			now.Store(&later)
			if n, err := tr.CollectOrphans(ctx, tp, time.Hour); err != nil || n != 0 {
				t.Fatalf("collect within the grace period: deleted %d, %v", n, err)
			}
			later = start.Add(61 * time.Minute)
			now.Store(&later)
			deleted, err := tr.CollectOrphans(ctx, tp, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.Stat(ctx, orphan); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("orphan after collection: %v", err)
			}
			for key := range referenced {
				if _, err := store.Stat(ctx, key); err != nil {
					t.Fatalf("referenced object after collection: %v", err)
				}
			}
			after := checkBucketKeys(t, store, tp)
			if len(after) != len(referenced) {
				t.Fatalf("the manifest lists %d segments after collection, %d before", len(after), len(referenced))
			}
			t.Logf("collector deleted %d objects (the orphan and superseded manifests)", deleted)
		})
	}
}

// checkBucketKeys reads tp's manifest from store, checks that its segments
// are contiguous from offset 0, and returns their keys.
func checkBucketKeys(t *testing.T, store objstore.Store, tp format.TopicPartition) map[string]bool {
	t.Helper()
	tr, err := tier.Open(tier.Config{Store: store, CacheDir: t.TempDir(), ChunkBytes: 1 << 20, CacheBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	_, keys := manifestKeys(t, tr, tp)
	return keys
}

// manifestKeys reads tp's manifest through tr and checks that it lists
// each offset range once: segments contiguous from offset 0, distinct
// keys. It returns the manifest and its segments' keys.
func manifestKeys(t *testing.T, tr *tier.Tier, tp format.TopicPartition) (*format.Root, map[string]bool) {
	t.Helper()
	m, err := tr.Manifest(context.Background(), tp)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	next := int64(0)
	for _, s := range remoteSegments(t, tr, m) {
		if s.BaseOffset != next {
			t.Fatalf("partition %d: segment %s starts at %d, want %d (gap or overlap)", tp.Partition, s.Key, s.BaseOffset, next)
		}
		if keys[s.Key] {
			t.Fatalf("partition %d: %s listed twice", tp.Partition, s.Key)
		}
		keys[s.Key] = true
		next = s.LastOffset + 1
	}
	return m, keys
}

// consumeOffsetsOnce reads topic from the earliest offset until it has n
// records and checks that each partition's offsets run 0, 1, 2... with no
// gap or repeat, each record's value matching its key. Keys may repeat
// (the topic was produced to twice).
func consumeOffsetsOnce(t *testing.T, b *Broker, topic string, partitions int32, n, size int) {
	t.Helper()
	cl := testClient(t, b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(16<<20))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	next := make([]int64, partitions)
	want := make([]byte, size)
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d", got, n)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s-%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset != next[r.Partition] {
				t.Fatalf("partition %d: offset %d, want %d", r.Partition, r.Offset, next[r.Partition])
			}
			next[r.Partition]++
			got++
			fillValue(want, binary.BigEndian.Uint64(r.Key))
			if string(r.Value) != string(want) {
				t.Fatalf("partition %d offset %d: value differs", r.Partition, r.Offset)
			}
		})
	}
}
