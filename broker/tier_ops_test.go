package broker

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tier/objstore"
)

// gaugeValue reads one series of a gauge from reg, as a scrape would; ok is
// false while the series does not exist.
func gaugeValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (v float64, ok bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue series
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestUploadLagGrowsDuringOutage: docs/tiered-storage.md promises that
// strata_tier_upload_lag_offsets grows while the store is down. Records
// produced during an outage are not in the bucket, so the lag must count
// them.
func TestUploadLagGrowsDuringOutage(t *testing.T) {
	reg := prometheus.NewRegistry()
	faulty := objstore.WithFaults(tierStores[0].open(t), objstore.FaultConfig{})
	b := tieredBroker(t, "", faulty, func(c *Config) { c.Registerer, c.Gatherer = reg, reg })
	createTopic(t, testAdmin(t, b), "out", 1, map[string]*string{"segment.bytes": ptr("16384")})
	produceKeyed(t, b, "out", 100, 1000, kgo.ProducerBatchMaxBytes(4096))
	waitUploaded(t, b, "out", 1)
	p := b.partition("out", 0)
	lag := func() (float64, bool) {
		return gaugeValue(t, reg, "strata_tier_upload_lag_offsets", map[string]string{"topic": "out", "partition": "0"})
	}
	waitFor(t, 10*time.Second, "the lag of the uploaded partition", func() bool { _, ok := lag(); return ok })

	faulty.SetConfig(objstore.FaultConfig{FailRate: 1})
	uploaded := p.RemoteEnd()
	produceKeyed(t, b, "out", 200, 1000, kgo.ProducerBatchMaxBytes(4096))
	want := float64(p.Log().EndOffset() - uploaded)
	waitFor(t, 10*time.Second, "the lag to count what the outage holds back (want "+strconv.FormatFloat(want, 'f', -1, 64)+")", func() bool {
		v, _ := lag()
		return v == want
	})
	if p.RemoteEnd() != uploaded {
		t.Fatalf("remote end moved from %d to %d while every store call failed", uploaded, p.RemoteEnd())
	}
}

// TestUploadLagAfterRetentionEmptiesBucket: once whole-log retention has
// dropped every remote segment of an idle partition, everything is still
// uploaded: the lag is 0, not the whole log (review of issue 10 item 1).
func TestUploadLagAfterRetentionEmptiesBucket(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := tieredBroker(t, "", tierStores[0].open(t), func(c *Config) { c.Registerer, c.Gatherer = reg, reg })
	createTopic(t, testAdmin(t, b), "gone", 1, map[string]*string{
		"segment.bytes":         ptr("16384"),
		"local.retention.bytes": ptr("0"),
		"retention.bytes":       ptr("0"),
	})
	produceKeyed(t, b, "gone", 100, 1000, kgo.ProducerBatchMaxBytes(4096))
	p := b.partition("gone", 0)
	waitFor(t, 20*time.Second, "retention to empty the bucket", func() bool {
		segs, err := p.Log().ClosedSegments(0)
		return err == nil && len(segs) == 0 && p.RemoteEnd() == -1 && p.Log().StartOffset() > 0
	})
	// What is left is the active segment, which is not uploaded (every
	// closed segment was, then deleted locally): the lag is what it holds.
	want := float64(p.Log().EndOffset() - p.Log().StartOffset())
	waitFor(t, 10*time.Second, "the lag to be the active segment's records only", func() bool {
		v, ok := gaugeValue(t, reg, "strata_tier_upload_lag_offsets", map[string]string{"topic": "gone", "partition": "0"})
		return ok && v == want && v < float64(p.Log().EndOffset())
	})
}

// hookStore runs a hook before every call to the store it wraps: tests
// use it to fail, hold or count the calls of one partition. A hook error
// fails the call without reaching the inner store.
type hookStore struct {
	objstore.Store
	hook atomic.Pointer[func(ctx context.Context, op, key string) error]
}

func (s *hookStore) setHook(h func(ctx context.Context, op, key string) error) {
	if h == nil {
		s.hook.Store(nil)
		return
	}
	s.hook.Store(&h)
}

func (s *hookStore) before(ctx context.Context, op, key string) error {
	if h := s.hook.Load(); h != nil {
		return (*h)(ctx, op, key)
	}
	return nil
}

func (s *hookStore) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	if err := s.before(ctx, "put", key); err != nil {
		return err
	}
	return s.Store.Put(ctx, key, r, size)
}

func (s *hookStore) Create(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	if err := s.before(ctx, "create", key); err != nil {
		return err
	}
	return s.Store.Create(ctx, key, r, size)
}

func (s *hookStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := s.before(ctx, "get", key); err != nil {
		return nil, err
	}
	return s.Store.GetRange(ctx, key, off, n)
}

func (s *hookStore) Stat(ctx context.Context, key string) (objstore.Attrs, error) {
	if err := s.before(ctx, "stat", key); err != nil {
		return objstore.Attrs{}, err
	}
	return s.Store.Stat(ctx, key)
}

func (s *hookStore) List(ctx context.Context, prefix string, fn func(objstore.Attrs) error) error {
	if err := s.before(ctx, "list", prefix); err != nil {
		return err
	}
	return s.Store.List(ctx, prefix, fn)
}

func (s *hookStore) Delete(ctx context.Context, key string) error {
	if err := s.before(ctx, "delete", key); err != nil {
		return err
	}
	return s.Store.Delete(ctx, key)
}

var errTestStore = errors.New("test: store call refused")

// topicObjects counts the segment objects and manifests of topic in
// store.
func topicObjects(t *testing.T, store objstore.Store, topic string) (segments, manifests int) {
	t.Helper()
	err := store.List(context.Background(), "", func(a objstore.Attrs) error {
		switch {
		case !strings.Contains(a.Key, "/"+topic+"-"):
		case strings.Contains(a.Key, "/segments/"):
			segments++
		case strings.Contains(a.Key, "/manifests/"):
			manifests++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return segments, manifests
}

func deleteTopic(t *testing.T, adm *kadm.Client, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := adm.DeleteTopics(ctx, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete topic %s: %v", topic, err)
	}
}

// TestDeleteTopicSurvivesFailedDeletes: a DELETE that fails while a tiered
// topic is deleted does not stop the others, the manifests (which let
// anyone find the segments) go only after every segment, and once the
// store accepts the DELETE again the bucket forgets the topic.
func TestDeleteTopicSurvivesFailedDeletes(t *testing.T) {
	inner := tierStores[0].open(t)
	hs := &hookStore{Store: inner}
	b := tieredBroker(t, "", hs)
	adm := testAdmin(t, b)
	createTopic(t, adm, "gone", 1, map[string]*string{"segment.bytes": ptr("16384")})
	produceKeyed(t, b, "gone", 200, 1000, kgo.ProducerBatchMaxBytes(4096))
	waitUploaded(t, b, "gone", 1)
	segs, _ := topicObjects(t, inner, "gone")
	if segs < 3 {
		t.Fatalf("%d segments uploaded, want several", segs)
	}
	var stuck string // the first segment object: the first DELETE to fail
	inner.List(context.Background(), "", func(a objstore.Attrs) error {
		if stuck == "" && strings.Contains(a.Key, "/gone-") && strings.Contains(a.Key, "/segments/") {
			stuck = a.Key
		}
		return nil
	})
	var failing atomic.Bool
	failing.Store(true)
	hs.setHook(func(_ context.Context, op, key string) error {
		if op == "delete" && key == stuck && failing.Load() {
			return errTestStore
		}
		return nil
	})

	deleteTopic(t, adm, "gone")
	waitFor(t, 20*time.Second, "every segment but the failing one to be deleted", func() bool {
		segs, _ := topicObjects(t, inner, "gone")
		return segs == 1
	})
	if _, manifests := topicObjects(t, inner, "gone"); manifests == 0 {
		t.Fatal("the manifests were deleted while a segment object is left: nothing lists it any more")
	}
	failing.Store(false)
	waitFor(t, 30*time.Second, "the bucket to forget the topic", func() bool {
		segs, manifests := topicObjects(t, inner, "gone")
		return segs+manifests == 0
	})
}

// TestDeleteTopicResumesAfterRestart: a broker that could not delete a
// deleted topic's objects before it stopped finishes the job after a
// restart.
func TestDeleteTopicResumesAfterRestart(t *testing.T) {
	dir := t.TempDir()
	inner := tierStores[0].open(t)
	hs := &hookStore{Store: inner}
	b := tieredBroker(t, dir, hs)
	adm := testAdmin(t, b)
	createTopic(t, adm, "later", 2, map[string]*string{"segment.bytes": ptr("16384")})
	produceKeyed(t, b, "later", 200, 1000, kgo.ProducerBatchMaxBytes(4096))
	waitUploaded(t, b, "later", 2)
	var refused atomic.Int64
	hs.setHook(func(_ context.Context, op, key string) error {
		if op == "delete" && strings.Contains(key, "/later-") {
			refused.Add(1)
			return errTestStore
		}
		return nil
	})
	deleteTopic(t, adm, "later")
	waitFor(t, 20*time.Second, "a DELETE to be refused", func() bool { return refused.Load() > 0 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if segs, _ := topicObjects(t, inner, "later"); segs == 0 {
		t.Fatal("segments deleted although every DELETE failed")
	}

	hs.setHook(nil)
	tieredBroker(t, dir, hs)
	waitFor(t, 30*time.Second, "the restarted broker to finish deleting the topic", func() bool {
		segs, manifests := topicObjects(t, inner, "later")
		return segs+manifests == 0
	})
}

// TestDeleteTopicStopsUploadFirst: deleting a topic while one of its
// segments is being uploaded stops that upload before the bucket is
// cleaned, so no object or manifest of the deleted topic appears after the
// cleaning.
func TestDeleteTopicStopsUploadFirst(t *testing.T) {
	inner := tierStores[0].open(t)
	hs := &hookStore{Store: inner}
	entered := make(chan struct{})
	var once sync.Once
	var stopped atomic.Bool
	hs.setHook(func(ctx context.Context, op, key string) error {
		if op != "put" || !strings.Contains(key, "/racy-") || !strings.Contains(key, "/segments/") {
			return nil
		}
		once.Do(func() { close(entered) })
		<-ctx.Done() // the upload is held until someone stops it
		stopped.Store(true)
		return ctx.Err()
	})
	b := tieredBroker(t, "", hs)
	adm := testAdmin(t, b)
	createTopic(t, adm, "racy", 1, map[string]*string{"segment.bytes": ptr("16384")})
	produceKeyed(t, b, "racy", 100, 1000, kgo.ProducerBatchMaxBytes(4096))
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no upload started")
	}
	deleteTopic(t, adm, "racy")
	waitFor(t, 10*time.Second, "the deletion to stop the upload under way", stopped.Load)
	waitFor(t, 20*time.Second, "the bucket to forget the topic", func() bool {
		segs, manifests := topicObjects(t, inner, "racy")
		return segs+manifests == 0
	})
}

// segmentLists counts, per topic, the LISTs of a partition's segment
// objects: only the orphan collector makes them.
type segmentLists struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *segmentLists) hook(_ context.Context, op, key string) error {
	if op == "list" && strings.HasSuffix(key, "/segments/") {
		topic := strings.Split(key, "/")[1] // <h>/<topic>-<id>/<partition>/segments/
		topic = topic[:strings.LastIndexByte(topic, '-')]
		c.mu.Lock()
		c.n[topic]++
		c.mu.Unlock()
	}
	return nil
}

func (c *segmentLists) count(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[topic]
}

// produceUntil produces to topic until stop is closed, for a partition
// that keeps uploading.
func produceUntil(t *testing.T, b *Broker, topic string, stop <-chan struct{}) (done <-chan struct{}) {
	cl := testClient(t, b, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			cl.ProduceSync(ctx, &kgo.Record{Value: make([]byte, 1000)})
			cancel()
		}
	}()
	return ch
}

// TestCollectorSkipsQuietPartitions: a partition with nothing dropped
// from its manifest since the collector last looked, and no upload or
// failure that could have left an orphan, costs no LIST per collection
// pass; a partition that keeps uploading is still collected.
func TestCollectorSkipsQuietPartitions(t *testing.T) {
	lists := &segmentLists{n: map[string]int{}}
	hs := &hookStore{Store: tierStores[0].open(t)}
	hs.setHook(lists.hook)
	b := tieredBroker(t, "", hs, func(c *Config) {
		c.Tier.CollectInterval = 20 * time.Millisecond
		shortOrphanGrace(c, 100*time.Millisecond)
	})
	adm := testAdmin(t, b)
	small := map[string]*string{"segment.bytes": ptr("16384")}
	createTopic(t, adm, "quiet", 1, small)
	createTopic(t, adm, "busy", 1, small)
	produceKeyed(t, b, "quiet", 100, 1000, kgo.ProducerBatchMaxBytes(4096))
	waitUploaded(t, b, "quiet", 1)

	stop := make(chan struct{})
	done := produceUntil(t, b, "busy", stop)
	defer func() { close(stop); <-done }()
	// Many passes, each far more than the grace period after anything
	// happened to the quiet partition...
	start := lists.count("busy")
	waitFor(t, 60*time.Second, "the busy partition to be collected 30 times", func() bool { return lists.count("busy") >= start+30 })
	quiet := lists.count("quiet")
	if quiet == 0 {
		t.Fatal("the quiet partition was never collected")
	}
	// ...and many more: none of them lists the quiet partition.
	start = lists.count("busy")
	waitFor(t, 60*time.Second, "the busy partition to be collected 30 more times", func() bool { return lists.count("busy") >= start+30 })
	if n := lists.count("quiet"); n != quiet {
		t.Fatalf("the quiet partition's segments were listed %d more times with nothing dropped from it", n-quiet)
	}
}

// TestCollectorDoesNotHoldUploads: while the collector is stuck on one
// partition (its LIST hangs), another partition's segments still reach
// the bucket.
func TestCollectorDoesNotHoldUploads(t *testing.T) {
	hs := &hookStore{Store: tierStores[0].open(t)}
	stuck := make(chan struct{})
	var once sync.Once
	var armed atomic.Bool
	hs.setHook(func(ctx context.Context, op, key string) error {
		if armed.Load() && op == "list" && strings.Contains(key, "/archive-") && strings.HasSuffix(key, "/segments/") {
			once.Do(func() { close(stuck) })
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	b := tieredBroker(t, "", hs, func(c *Config) {
		c.Tier.CollectInterval = 20 * time.Millisecond
		shortOrphanGrace(c, 50*time.Millisecond)
	})
	adm := testAdmin(t, b)
	// An archive topic: no whole-log retention, so its idle partition
	// needs nothing from the tier while it waits to be collected.
	createTopic(t, adm, "archive", 1, map[string]*string{
		"segment.bytes": ptr("16384"), "retention.ms": ptr("-1"), "retention.bytes": ptr("-1"),
	})
	produceKeyed(t, b, "archive", 100, 1000, kgo.ProducerBatchMaxBytes(4096))
	waitUploaded(t, b, "archive", 1)
	armed.Store(true)
	select {
	case <-stuck:
	case <-time.After(30 * time.Second):
		t.Fatal("the collector never listed the archive partition")
	}
	createTopic(t, adm, "live", 1, map[string]*string{"segment.bytes": ptr("16384")})
	produceKeyed(t, b, "live", 100, 1000, kgo.ProducerBatchMaxBytes(4096))
	waitUploadedWithin(t, b, "live", 1, 20*time.Second)
}

// TestStartupLoadsManifestsConcurrently: a restarted broker does not wait
// for the bucket before it serves. The manifests of its partitions are
// read side by side, each partition is served as soon as its own
// manifest is in, and one whose store requests hang answers a retriable
// error meanwhile, without holding the others or the start-up.
func TestStartupLoadsManifestsConcurrently(t *testing.T) {
	dir := t.TempDir()
	inner := tierStores[0].open(t)
	b := tieredBroker(t, dir, inner)
	adm := testAdmin(t, b)
	topics := []string{"fast", "slowa", "slowb"}
	for _, topic := range topics {
		createTopic(t, adm, topic, 1, map[string]*string{"segment.bytes": ptr("16384"), "local.retention.bytes": ptr("0")})
		produceKeyed(t, b, topic, 100, 1000, kgo.ProducerBatchMaxBytes(4096))
		waitUploaded(t, b, topic, 1)
		p := b.partition(topic, 0)
		waitFor(t, 10*time.Second, "local deletion", func() bool { return p.Log().StartOffset() > 0 })
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// The slow partitions' manifest LISTs hang until released.
	hs := &hookStore{Store: inner}
	release := make(chan struct{})
	var waiting, most, cancelled atomic.Int64
	hs.setHook(func(ctx context.Context, op, key string) error {
		if op != "list" || !strings.Contains(key, "/slow") || !strings.HasSuffix(key, "/manifests/") {
			return nil
		}
		n := waiting.Add(1)
		defer waiting.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			cancelled.Add(1)
			return ctx.Err()
		}
	})
	b = tieredBroker(t, dir, hs)
	if n := cancelled.Load(); n > 0 {
		t.Fatalf("start-up gave up on %d manifest loads before serving", n)
	}
	waitFor(t, 20*time.Second, "both slow manifests to be loaded side by side", func() bool { return most.Load() >= 2 })
	cl := testClient(t, b)
	waitFor(t, 10*time.Second, "the fast partition to be served from the bucket's start", func() bool {
		off, code := listOffsetV(t, cl, "fast", -2)
		return code == 0 && off == 0
	})
	for _, topic := range topics[1:] {
		if _, code := listOffsetV(t, cl, topic, -2); code != kerr.KafkaStorageError.Code {
			t.Fatalf("%s earliest offset with its manifest not loaded: code %d, want KAFKA_STORAGE_ERROR", topic, code)
		}
	}
	close(release)
	for _, topic := range topics[1:] {
		waitFor(t, 20*time.Second, topic+" to be served once its manifest is in", func() bool {
			off, code := listOffsetV(t, cl, topic, -2)
			return code == 0 && off == 0
		})
	}
}

// TestCollectorSpreadsPass: a collection pass does not list every due
// partition in one burst; it spreads them over tier.collect_interval. With
// an hour's interval and three partitions due after a restart, the first
// is collected at once and the others are still waiting their turn while
// the broker goes on uploading.
func TestCollectorSpreadsPass(t *testing.T) {
	dir := t.TempDir()
	inner := tierStores[0].open(t)
	b := tieredBroker(t, dir, inner)
	adm := testAdmin(t, b)
	topics := []string{"one", "two", "three"}
	for _, topic := range topics {
		createTopic(t, adm, topic, 1, map[string]*string{"segment.bytes": ptr("16384")})
		produceKeyed(t, b, topic, 50, 1000, kgo.ProducerBatchMaxBytes(4096))
		waitUploaded(t, b, topic, 1)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	lists := &segmentLists{n: map[string]int{}}
	hs := &hookStore{Store: inner}
	hs.setHook(lists.hook)
	b = tieredBroker(t, dir, hs, func(c *Config) { c.Tier.CollectInterval = time.Hour })
	total := func() (n int) {
		// __consumer_offsets tiers too: its partitions are in the pass.
		for _, topic := range append(topics, offsetsTopic) {
			n += lists.count(topic)
		}
		return n
	}
	waitFor(t, 20*time.Second, "the first partition of the pass to be collected", func() bool { return total() > 0 })
	// Meanwhile the broker works on: more data for each topic reaches the
	// bucket, and still no second partition has been collected.
	for _, topic := range topics {
		produceKeyed(t, b, topic, 50, 1000, kgo.ProducerBatchMaxBytes(4096))
		waitUploaded(t, b, topic, 1)
	}
	if n := total(); n != 1 {
		t.Fatalf("%d partitions collected at once, want one per third of the interval", n)
	}
}
