package broker

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/node"
	"strata/broker/partition"
	"strata/compactor"
	"strata/segment"
	"strata/tier/format"
	"strata/tier/objstore"
)

// The done-when tests of log compaction (docs/compaction.md): what a user
// of a compacted topic checks by reading it from the start with an
// ordinary client. After compaction each key's latest value is there, and
// only it; offsets only grow; a deleted key shows its tombstone for
// delete.retention.ms and then nothing.

// compactEvery is the compactor interval of these tests: short, so that a
// pass follows soon after a segment closes.
const compactEvery = 100 * time.Millisecond

// compactingBroker is testBroker with the compactor checking every
// compactEvery and its metrics in reg.
func compactingBroker(t *testing.T, dir string, reg *prometheus.Registry, mutate ...func(*Config)) *Broker {
	t.Helper()
	return testBroker(t, dir, append([]func(*Config){func(c *Config) {
		c.Compactor = compactor.Config{Interval: compactEvery}
		if reg != nil {
			c.Registerer, c.Gatherer = reg, reg
		}
	}}, mutate...)...)
}

// tableKey and tableValue name the records of the tables the tests write.
func tableKey(k int) string { return fmt.Sprintf("key-%06d", k) }

func tableValue(i, k int) []byte { return fmt.Appendf(nil, "update %d of key %d", i, k) }

// table is what a compacted topic must show once compacted: the latest
// value of every key, nil for a deleted key.
type table map[string][]byte

// produceTable writes n updates over keys keys to partition 0 of topic
// (every key once, in order, then keys drawn at random), then a
// tombstone for each of the keys deleted (drawn at random), and returns
// the table the topic must show. It produces the way a bulk loader
// would: asynchronously, with linger and large batches, and a final
// flush; every record must be acknowledged.
func produceTable(t *testing.T, b *Broker, topic string, n, keys, deleted int, seed uint64) table {
	t.Helper()
	return produceTableWith(t, testClient(t, b, tableProducer(topic)...), n, keys, deleted, seed)
}

// tableProducer is how produceTable's client produces.
func tableProducer(topic string) []kgo.Opt {
	return []kgo.Opt{kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5 * time.Millisecond), kgo.ProducerBatchMaxBytes(128 << 10), kgo.MaxBufferedRecords(64 << 10)}
}

// produceTableWith is produceTable through cl (made with tableProducer),
// which it closes.
func produceTableWith(t *testing.T, cl *kgo.Client, n, keys, deleted int, seed uint64) table {
	t.Helper()
	if n < keys || deleted > keys {
		t.Fatalf("produceTable: %d updates, %d keys, %d deleted", n, keys, deleted)
	}
	rng := rand.New(rand.NewPCG(seed, 13))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var perr error
	done := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			perr = cmpErr(perr, err)
			mu.Unlock()
		}
	}
	want := table{}
	for i := range n {
		k := i
		if i >= keys {
			k = rng.IntN(keys)
		}
		v := tableValue(i, k)
		want[tableKey(k)] = v
		cl.Produce(ctx, &kgo.Record{Key: []byte(tableKey(k)), Value: v}, done)
	}
	for _, k := range rng.Perm(keys)[:deleted] {
		want[tableKey(k)] = nil
		cl.Produce(ctx, &kgo.Record{Key: []byte(tableKey(k))}, done)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if perr != nil {
		t.Fatalf("produce: %v", perr)
	}
	cl.Close()
	return want
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// produceFiller writes about size bytes of records under one key of its
// own, so that the segments holding what came before close: the active
// segment is never compacted. The values are random: the client
// compresses (snappy), and a repeated byte would take no room.
func produceFiller(t *testing.T, b *Broker, topic string, size int) {
	t.Helper()
	produceFillerWith(t, testClient(t, b, tableProducer(topic)...), size)
}

// produceFillerWith is produceFiller through cl (made with
// tableProducer), which it closes.
func produceFillerWith(t *testing.T, cl *kgo.Client, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var perr error
	for range size / 1024 {
		v := make([]byte, 1024)
		for i := range v {
			v[i] = byte(rand.Uint32())
		}
		cl.Produce(ctx, &kgo.Record{Key: []byte("filler"), Value: v}, func(_ *kgo.Record, err error) {
			mu.Lock()
			perr = cmpErr(perr, err)
			mu.Unlock()
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("flush filler: %v", err)
	}
	if perr != nil {
		t.Fatalf("produce filler: %v", perr)
	}
	cl.Close()
}

// readLog consumes partition 0 of topic from the earliest offset up to
// its end offset, as a client rebuilding the table would. The last
// record before the end is never compacted away (it is in the active
// segment), so reading stops there.
func readLog(t *testing.T, b *Broker, topic string) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ends, err := testAdmin(t, b).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, 0)
	if end.Err != nil {
		t.Fatal(end.Err)
	}
	cl := testClient(t, b, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxBytes(16<<20))
	defer cl.Close()
	var out []*kgo.Record
	for len(out) == 0 || out[len(out)-1].Offset < end.Offset-1 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s to its end %d: got %d records, timed out", topic, end.Offset, len(out))
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch %s-%d: %v", topic, p, err) })
		out = append(out, fs.Records()...)
	}
	return out
}

// checkTable checks what a consumer read from the start of a compacted
// topic against want: offsets strictly increasing; each key of want
// exactly once, with its latest value; a deleted key's tombstone exactly
// once while tombstones are kept, and nothing of it after. Records of
// other keys (filler) are not looked at.
func checkTable(t *testing.T, recs []*kgo.Record, want table, tombstones bool) {
	t.Helper()
	seen := map[string]int{}
	prev := int64(-1)
	bad := 0
	fail := func(format string, args ...any) {
		t.Helper()
		if bad++; bad > 10 {
			t.Fatalf("more errors follow; first ones above")
		}
		t.Errorf(format, args...)
	}
	for _, r := range recs {
		if r.Offset <= prev {
			fail("offset %d after %d", r.Offset, prev)
		}
		prev = r.Offset
		k := string(r.Key)
		v, ok := want[k]
		if !ok {
			continue
		}
		if seen[k]++; seen[k] > 1 {
			fail("%s again at offset %d", k, r.Offset)
		}
		switch {
		case v == nil && !tombstones:
			fail("%s: deleted, still there at offset %d (value %q)", k, r.Offset, r.Value)
		case v == nil && r.Value != nil:
			fail("%s: deleted, read %q at offset %d, want its tombstone", k, r.Value, r.Offset)
		case v != nil && !bytes.Equal(r.Value, v):
			fail("%s: read %q at offset %d, want its latest value %q", k, r.Value, r.Offset, v)
		}
	}
	var missing []string
	for k, v := range want {
		if seen[k] == 0 && (v != nil || tombstones) {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Errorf("%d keys missing, e.g. %v", len(missing), missing[:min(5, len(missing))])
	}
}

// liveAndDeleted counts want's live and deleted keys.
func (w table) liveAndDeleted() (live, deleted int) {
	for _, v := range w {
		if v == nil {
			deleted++
		} else {
			live++
		}
	}
	return live, deleted
}

// counterValue sums the series of counter name in reg whose labels
// include labels.
func counterValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// lastOffset is the offset of the last record read.
func lastOffset(recs []*kgo.Record) int64 { return recs[len(recs)-1].Offset }

// TestCompactionDoneWhen is the promise of cleanup.policy=compact (Kafka's
// log cleaner guarantees): a topic fed a million updates over ten
// thousand keys, then a thousand deletions, reads back from the start as
// exactly the latest value of each live key, at increasing offsets, with
// a tombstone for each deleted key; once delete.retention.ms has passed
// and another pass ran, the tombstones are gone and the live keys still
// exactly right.
func TestCompactionDoneWhen(t *testing.T) {
	if testing.Short() {
		t.Skip("a million records: not under -short")
	}
	const (
		updates, keys, deleted = 1_000_000, 10_000, 1_000
		segBytes               = 256 << 10
		retention              = 15 * time.Second
	)
	reg := prometheus.NewRegistry()
	b := compactingBroker(t, "", reg)
	createTopic(t, testAdmin(t, b), "table", 1, map[string]*string{
		"cleanup.policy":            ptr("compact"),
		"segment.bytes":             ptr(fmt.Sprint(segBytes)),
		"min.cleanable.dirty.ratio": ptr("0.01"),
		"delete.retention.ms":       ptr(fmt.Sprint(retention.Milliseconds())),
	})
	start := time.Now()
	want := produceTable(t, b, "table", updates, keys, deleted, 1)
	tableEnd := b.partition("table", 0).Log().EndOffset()
	t.Logf("produced %d records in %s", tableEnd, time.Since(start))
	produceFiller(t, b, "table", 2*segBytes)

	p := b.partition("table", 0)
	waitFor(t, 3*time.Minute, "compaction past the tombstones", func() bool {
		cleaned, _ := p.Log().CleanerCheckpoint()
		return cleaned >= tableEnd
	})
	recs := readLog(t, b, "table")
	t.Logf("compacted in %s: %d records of %d read back, %d bytes on disk", time.Since(start), len(recs), lastOffset(recs)+1, p.Log().Size())
	checkTable(t, recs, want, true)
	if t.Failed() {
		t.FailNow()
	}

	_, dels := want.liveAndDeleted()
	waitFor(t, retention+2*time.Minute, "the tombstones removed", func() bool {
		return counterValue(t, reg, "strata_compactor_tombstones_removed_total", map[string]string{"tier": "local"}) >= float64(dels)
	})
	checkTable(t, readLog(t, b, "table"), want, false)
}

// alterTopic sets one config of topic, as kafka-configs --alter does.
func alterTopic(t *testing.T, b *Broker, topic, name, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resps, err := testAdmin(t, b).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: name, Value: &value}}, topic)
	if err == nil {
		_, err = resps.On(topic, nil)
	}
	if err == nil {
		err = resps[0].Err
	}
	if err != nil {
		t.Fatalf("alter %s %s=%s: %v", topic, name, value, err)
	}
}

// TestCompactionSmallKeyBudget: with the smallest key map the compactor
// takes (1 MiB, about 35,000 keys a pass) a history of 100,000 distinct
// keys is still compacted exactly, in several passes, each mapping what
// fits and the next going on from where it stopped.
func TestCompactionSmallKeyBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("200,000 records: not under -short")
	}
	const (
		updates, keys = 200_000, 100_000
		segBytes      = 256 << 10
	)
	reg := prometheus.NewRegistry()
	b := compactingBroker(t, "", reg, func(c *Config) { c.Compactor.MemoryBytes = 1 << 20 })
	// Nothing is compacted while the history is written (a day of
	// min.compaction.lag.ms), so that the passes counted below are the
	// ones that compact it all.
	createTopic(t, testAdmin(t, b), "wide", 1, map[string]*string{
		"cleanup.policy":            ptr("compact"),
		"segment.bytes":             ptr(fmt.Sprint(segBytes)),
		"min.cleanable.dirty.ratio": ptr("0.01"),
		"min.compaction.lag.ms":     ptr("86400000"),
	})
	want := produceTable(t, b, "wide", updates, keys, 0, 2)
	p := b.partition("wide", 0)
	tableEnd := p.Log().EndOffset()
	produceFiller(t, b, "wide", 2*segBytes)

	passes := func() float64 {
		return counterValue(t, reg, "strata_compactor_passes_total", map[string]string{"tier": "local", "result": "ok"})
	}
	before := passes()
	alterTopic(t, b, "wide", "min.compaction.lag.ms", "0")
	waitFor(t, 3*time.Minute, "compaction of the whole history", func() bool {
		cleaned, _ := p.Log().CleanerCheckpoint()
		return cleaned >= tableEnd
	})
	n := passes() - before
	t.Logf("%d passes", int(n))
	if n < 2 {
		t.Errorf("%v passes compacted %d keys with a 1 MiB key map; want several", n, keys)
	}
	checkTable(t, readLog(t, b, "wide"), want, true)
}

// keyedBatch is rawBatch with a key on each record, kvs being keys and
// values in turn: a compacted topic refuses records without a key.
func keyedBatch(pid int64, epoch int16, seq int32, ts int64, kvs ...string) []byte {
	n := len(kvs) / 2
	rb := kmsg.RecordBatch{
		Magic:                2,
		LastOffsetDelta:      int32(n - 1),
		FirstTimestamp:       ts,
		MaxTimestamp:         ts,
		ProducerID:           pid,
		ProducerEpoch:        epoch,
		FirstSequence:        seq,
		NumRecords:           int32(n),
		PartitionLeaderEpoch: -1,
	}
	for i := range n {
		r := kmsg.Record{OffsetDelta: int32(i), Key: []byte(kvs[2*i]), Value: []byte(kvs[2*i+1])}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		rb.Records = r.AppendTo(rb.Records)
	}
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// TestIdempotentRetryAfterCompaction: compaction keeps each producer's
// last batch (empty if none of its records survive, Kafka's
// RETAIN_EMPTY), so a producer whose earlier batches were compacted away
// and which retries its last batch gets it acknowledged as a duplicate at
// its original offset, with nothing appended; after a restart too, and
// its next sequence number is still the one expected.
func TestIdempotentRetryAfterCompaction(t *testing.T) {
	dir := t.TempDir()
	b := compactingBroker(t, dir, nil)
	cl := testClient(t, b)
	const segBytes = 4096
	createTopic(t, kadmFor(cl), "idem", 1, map[string]*string{
		"cleanup.policy":            ptr("compact"),
		"segment.bytes":             ptr(fmt.Sprint(segBytes)),
		"min.cleanable.dirty.ratio": ptr("0.01"),
	})
	now := time.Now().UnixMilli()
	// Producer a writes key a five times, one batch each: its last batch
	// keeps the latest a. Producer b writes key b five times, then a
	// plain producer overwrites b: b's last batch loses its only record.
	type producer struct {
		key  string
		pid  int64
		last []byte // its last batch, as sent
		at   int64  // the offset it was written at
	}
	ps := []*producer{{key: "a", pid: initProducerID(t, cl)}, {key: "b", pid: initProducerID(t, cl)}}
	for _, p := range ps {
		for seq := range int32(5) {
			batch := keyedBatch(p.pid, 0, seq, now, p.key, fmt.Sprintf("%s%d", p.key, seq))
			resp := produceRaw(t, cl, "idem", batch)
			if resp.ErrorCode != 0 {
				t.Fatalf("%s seq %d: %v", p.key, seq, kerr.ErrorForCode(resp.ErrorCode))
			}
			p.last, p.at = batch, resp.BaseOffset
		}
	}
	if resp := produceRaw(t, cl, "idem", keyedBatch(-1, -1, -1, now, "b", "b-final")); resp.ErrorCode != 0 {
		t.Fatalf("overwrite b: %v", kerr.ErrorForCode(resp.ErrorCode))
	}
	written := listOffset(t, cl, "idem", -1)
	produceFiller(t, b, "idem", 2*segBytes)
	waitFor(t, time.Minute, "compaction of the producers' batches", func() bool {
		cleaned, _ := b.partition("idem", 0).Log().CleanerCheckpoint()
		return cleaned >= written
	})
	// Only the latest a and b are left: the producers' earlier batches
	// are gone.
	checkTable(t, readLog(t, b, "idem"), table{"a": []byte("a4"), "b": []byte("b-final")}, true)

	retry := func(cl *kgo.Client, when string) {
		t.Helper()
		end := listOffset(t, cl, "idem", -1)
		for _, p := range ps {
			resp := produceRaw(t, cl, "idem", p.last)
			if resp.ErrorCode != 0 || resp.BaseOffset != p.at {
				t.Errorf("%s: producer %s's last batch again: %v at offset %d, want a duplicate at %d",
					when, p.key, kerr.ErrorForCode(resp.ErrorCode), resp.BaseOffset, p.at)
			}
		}
		if got := listOffset(t, cl, "idem", -1); got != end {
			t.Errorf("%s: log end %d after the retries, was %d: a duplicate was appended", when, got, end)
		}
	}
	retry(cl, "after compaction")

	cl.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = compactingBroker(t, dir, nil)
	cl = testClient(t, b)
	retry(cl, "after a restart")

	// Damaged producer snapshots are ignored at start-up and the state
	// is rebuilt from the log itself: what compaction left of it must
	// still name each producer's last batch.
	logDir := filepath.Join(b.logsDir, node.PartitionDir("idem", b.partition("idem", 0).TopicID(), 0))
	cl.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	snaps, err := filepath.Glob(filepath.Join(logDir, "*.snapshot"))
	if err != nil || len(snaps) == 0 {
		t.Fatalf("producer snapshots in %s: %v, %v", logDir, snaps, err)
	}
	for _, s := range snaps {
		if err := os.Truncate(s, 3); err != nil {
			t.Fatal(err)
		}
	}
	b = compactingBroker(t, dir, nil)
	cl = testClient(t, b)
	retry(cl, "after a restart without producer snapshots")

	for _, p := range ps {
		end := listOffset(t, cl, "idem", -1)
		resp := produceRaw(t, cl, "idem", keyedBatch(p.pid, 0, 5, now, p.key, p.key+"5"))
		if resp.ErrorCode != 0 || resp.BaseOffset != end {
			t.Errorf("producer %s's next batch (sequence 5): %v at offset %d, want it appended at %d",
				p.key, kerr.ErrorForCode(resp.ErrorCode), resp.BaseOffset, end)
		}
	}
}

// segmentObjects lists the segment objects of topic in store, key to
// size.
func segmentObjects(t *testing.T, store objstore.Store, topic string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := store.List(context.Background(), "", func(a objstore.Attrs) error {
		if strings.Contains(a.Key, "/"+topic+"-") && strings.Contains(a.Key, "/segments/") {
			out[a.Key] = a.Size
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func totalSize(objs map[string]int64) (n int64) {
	for _, s := range objs {
		n += s
	}
	return n
}

// TestColdCompactionDoneWhen is TestCompactionDoneWhen for a history that
// is only in the bucket (remote.storage.enable, one byte of local
// retention): the manifest records a cleaned offset, its objects are
// replaced by new ones, the old ones are collected after the orphan
// grace and the bucket shrinks; a consumer from the start reads exactly
// the latest values, the tombstones until delete.retention.ms and not
// after.
func TestColdCompactionDoneWhen(t *testing.T) {
	if testing.Short() {
		t.Skip("200,000 records through the bucket: not under -short")
	}
	const (
		updates, keys, deleted = 200_000, 10_000, 1_000
		segBytes               = 128 << 10
		retention              = 15 * time.Second
	)
	reg := prometheus.NewRegistry()
	store := tierStores[0].open(t)
	b := compactingBroker(t, "", reg, func(c *Config) {
		c.Tier = TierConfig{Store: store, UploadInterval: 20 * time.Millisecond, ChunkBytes: 1 << 20, CacheBytes: 8 << 20,
			CollectInterval: 200 * time.Millisecond}
		shortOrphanGrace(c, time.Second)
	})
	// A day of min.compaction.lag.ms holds compaction off until the whole
	// history is in the bucket, so that "before" is the uncompacted one.
	createTopic(t, testAdmin(t, b), "cold", 1, map[string]*string{
		"cleanup.policy":            ptr("compact"),
		"remote.storage.enable":     ptr("true"),
		"segment.bytes":             ptr(fmt.Sprint(segBytes)),
		"local.retention.bytes":     ptr("1"),
		"min.cleanable.dirty.ratio": ptr("0.01"),
		"delete.retention.ms":       ptr(fmt.Sprint(retention.Milliseconds())),
		"min.compaction.lag.ms":     ptr("86400000"),
	})
	want := produceTable(t, b, "cold", updates, keys, deleted, 3)
	p := b.partition("cold", 0)
	tableEnd := p.Log().EndOffset()
	produceFiller(t, b, "cold", 2*segBytes)
	waitUploaded(t, b, "cold", 1)
	if p.RemoteEnd() < tableEnd {
		t.Fatalf("bucket ends at %d, before the tombstones' end %d", p.RemoteEnd(), tableEnd)
	}
	tp := p.BucketName()
	ctx := context.Background()
	manifest := func() (*format.Root, []format.RemoteSegment) {
		t.Helper()
		m, err := b.tier.Manifest(ctx, tp)
		if err != nil {
			t.Fatal(err)
		}
		return m, remoteSegments(t, b.tier, m)
	}
	root, segs := manifest()
	if root.CleanedOffset != 0 {
		t.Fatalf("cleaned offset %d before compaction", root.CleanedOffset)
	}
	oldKeys := map[string]bool{}
	for _, s := range segs {
		oldKeys[s.Key] = true
	}
	before := segmentObjects(t, store, "cold")

	alterTopic(t, b, "cold", "min.compaction.lag.ms", "0")
	waitFor(t, 3*time.Minute, "the bucket's history compacted past the tombstones", func() bool {
		m, err := b.tier.Manifest(ctx, tp)
		return err == nil && m.CleanedOffset >= tableEnd
	})
	checkTable(t, readLog(t, b, "cold"), want, true)

	root, segs = manifest()
	if root.LastCompactionMs <= 0 {
		t.Errorf("manifest's last compaction %d, want when it ran", root.LastCompactionMs)
	}
	for _, s := range segs {
		if s.BaseOffset < tableEnd && oldKeys[s.Key] {
			t.Errorf("segment %s [%d, %d] is still the uncompacted object", s.Key, s.BaseOffset, s.LastOffset)
		}
	}
	// Once the orphan grace has passed no object of the uncompacted
	// history is left, and every object the manifest names is there.
	var after map[string]int64
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		after = segmentObjects(t, store, "cold")
		left := 0
		for k := range after {
			if oldKeys[k] && !slices.ContainsFunc(segs, func(s format.RemoteSegment) bool { return s.Key == k }) {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d objects of the uncompacted history still in the bucket a minute after compaction (orphan grace 1s)", left)
			break
		}
	}
	for _, s := range segs {
		if _, ok := after[s.Key]; !ok {
			t.Errorf("manifest names %s, which is not in the bucket", s.Key)
		}
	}
	// 200,000 records over 10,000 keys keep 10,000 (a twentieth), with
	// their batch headers and index entries shrinking alongside: a fifth
	// of the bytes leaves room for the objects' fixed parts.
	t.Logf("bucket: %d objects, %d bytes before; %d objects, %d bytes after", len(before), totalSize(before), len(after), totalSize(after))
	if totalSize(after)*5 > totalSize(before) {
		t.Errorf("bucket holds %d bytes after compaction, %d before: want less than a fifth", totalSize(after), totalSize(before))
	}

	_, dels := want.liveAndDeleted()
	waitFor(t, retention+2*time.Minute, "the tombstones removed from the bucket", func() bool {
		return counterValue(t, reg, "strata_compactor_tombstones_removed_total", map[string]string{"tier": "cold"}) >= float64(dels)
	})
	checkTable(t, readLog(t, b, "cold"), want, false)
}

// TestCompactionMetrics: the strata_compactor_* series an operator
// watches (docs/compaction.md, "Watching it") move when passes run: a
// pass counted as ok, with its duration; bytes read and fewer written;
// keys seen and fewer kept; the tombstones removed once their delete
// horizon passed; the partition's dirty ratio. They are on /metrics.
func TestCompactionMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := compactingBroker(t, "", reg, func(c *Config) { c.HTTPListen = "127.0.0.1:0" })
	const segBytes = 16 << 10
	createTopic(t, testAdmin(t, b), "watched", 1, map[string]*string{
		"cleanup.policy":            ptr("compact"),
		"segment.bytes":             ptr(fmt.Sprint(segBytes)),
		"min.cleanable.dirty.ratio": ptr("0.01"),
		"delete.retention.ms":       ptr("0"),
	})
	const deleted = 20
	produceTable(t, b, "watched", 5_000, 200, deleted, 4)
	produceFiller(t, b, "watched", 2*segBytes)
	local := map[string]string{"tier": "local"}
	value := func(name string) float64 { return counterValue(t, reg, name, local) }
	waitFor(t, time.Minute, "the tombstones removed", func() bool {
		return value("strata_compactor_tombstones_removed_total") >= deleted
	})
	if n := counterValue(t, reg, "strata_compactor_passes_total", map[string]string{"tier": "local", "result": "ok"}); n < 2 {
		t.Errorf("%v passes ok; want at least two (one to stamp the tombstones, one to remove them)", n)
	}
	read, written := value("strata_compactor_bytes_read_total"), value("strata_compactor_bytes_written_total")
	if written <= 0 || written >= read {
		t.Errorf("bytes read %v, written %v: want some written, less than read", read, written)
	}
	seen, kept := value("strata_compactor_keys_seen_total"), value("strata_compactor_keys_kept_total")
	if kept <= 0 || kept >= seen {
		t.Errorf("keys seen %v, kept %v: want some kept, fewer than seen", seen, kept)
	}
	if _, ok := gaugeValue(t, reg, "strata_compactor_dirty_ratio", map[string]string{"tier": "local", "topic": "watched", "partition": "0"}); !ok {
		t.Errorf("no strata_compactor_dirty_ratio for watched-0")
	}
	page := scrape(t, b)
	for _, series := range []string{`strata_compactor_passes_total{result="ok",tier="local"}`, `strata_compactor_pass_seconds_count{tier="local"}`} {
		if !strings.Contains(page, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

// localRecords reads p's local log from its start to its end, as
// (offset, key, tombstone) triples keyed by record key: what this
// replica itself holds.
type localRecord struct {
	offset    int64
	tombstone bool
	count     int
}

func localRecords(t *testing.T, p *partition.Partition) map[string]localRecord {
	t.Helper()
	out := map[string]localRecord{}
	var buf []byte
	for off := p.Log().StartOffset(); off < p.Log().EndOffset(); {
		data, err := p.Log().Read(buf[:0], off, p.Log().EndOffset(), 1<<20)
		if err != nil {
			t.Fatalf("read local log at %d: %v", off, err)
		}
		if len(data) == 0 {
			t.Fatalf("read local log at %d: nothing below its end %d", off, p.Log().EndOffset())
		}
		buf = data
		for len(data) >= 12 {
			n := 12 + int(binary.BigEndian.Uint32(data[8:]))
			batch := data[:n]
			data = data[n:]
			h, err := segment.ParseBatchHeader(batch)
			if err != nil {
				t.Fatal(err)
			}
			err = segment.ForEachRecord(batch, func(r *segment.Record) error {
				k := string(r.Key)
				out[k] = localRecord{offset: r.Offset, tombstone: r.Tombstone, count: out[k].count + 1}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			off = h.LastOffset() + 1
		}
	}
	return out
}

// TestCompactionOnFollowers: every replica compacts its own log (as in
// Kafka). A follower that was down while the leader compacted catches up
// by fetching compacted batches (gaps between and inside them), compacts
// too, and each replica ends up with the same live set at the same
// offsets; a consumer still reads exactly the latest values after the
// leader dies.
func TestCompactionOnFollowers(t *testing.T) {
	if testing.Short() {
		t.Skip("three brokers and 40,000 records: not under -short")
	}
	c := testCluster(t, 3, func(cfg *Config) { cfg.Compactor = compactor.Config{Interval: compactEvery} })
	const segBytes = 32 << 10
	c.createTopic("replicated", 1, 3, map[string]*string{
		"cleanup.policy":            ptr("compact"),
		"segment.bytes":             ptr(fmt.Sprint(segBytes)),
		"min.cleanable.dirty.ratio": ptr("0.01"),
	})
	st := c.partitionState("replicated", 0)
	late := c.followerNotController(st)
	c.stop(late)

	want := produceTableWith(t, c.client(tableProducer("replicated")...), 40_000, 2_000, 200, 5)
	leader := c.node(st.Leader).partition("replicated", 0)
	tableEnd := leader.Log().EndOffset()
	produceFillerWith(t, c.client(tableProducer("replicated")...), 2*segBytes)
	c.waitFor("the leader's compaction past the table", time.Minute, func() bool {
		cleaned, _ := leader.Log().CleanerCheckpoint()
		return cleaned >= tableEnd
	})

	c.restart(late)
	c.waitFor("every replica caught up and compacted", 2*time.Minute, func() bool {
		for id := int32(1); id <= 3; id++ {
			p := c.node(id).partition("replicated", 0)
			if p == nil || p.Log().EndOffset() < leader.Log().EndOffset() {
				return false
			}
			if cleaned, _ := p.Log().CleanerCheckpoint(); cleaned < tableEnd {
				return false
			}
		}
		return true
	})

	recs := readAll(t, c, "replicated", 0)
	checkTable(t, recs, want, true)
	at := map[string]int64{}
	for _, r := range recs {
		at[string(r.Key)] = r.Offset
	}
	for id := int32(1); id <= 3; id++ {
		got := localRecords(t, c.node(id).partition("replicated", 0))
		bad := 0
		for k, v := range want {
			r := got[k]
			if r.count != 1 || r.offset != at[k] || r.tombstone != (v == nil) {
				if bad++; bad <= 5 {
					t.Errorf("node %d: %s %d times, last at %d (tombstone %v); the leader serves it once at %d (tombstone %v)",
						id, k, r.count, r.offset, r.tombstone, at[k], v == nil)
				}
			}
		}
	}

	c.stop(st.Leader)
	c.waitFor("a new leader", 30*time.Second, func() bool {
		l := c.partitionState("replicated", 0).Leader
		return l >= 0 && l != st.Leader
	})
	checkTable(t, readAll(t, c, "replicated", 0), want, true)
}
