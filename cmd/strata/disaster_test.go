package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tier"
	"strata/tier/objstore"
)

// disasterTopics are the topics of TestDisasterRestore: a normal topic
// with most of its history only in the bucket, a compacted one, and a
// transactional one with aborted transactions.
const (
	eventsTopic, eventsPartitions   = "events", 4
	compactTopic, compactPartitions = "latest", 2
	txnTopic, txnPartitions         = "payments", 2
	disasterRecords                 = 200_000
)

// lostCluster is what the first cluster acknowledged before it was lost: what
// the restored cluster must serve again.
type lostCluster struct {
	ids     map[string][16]byte
	configs map[string]map[string]string
	events  map[string][]sentRecord // the history check() judges
	hw      map[int32]int64         // events' high watermarks
	latest  map[string]string       // the compacted topic's newest value per key
	txns    *txnLedger
	groups  map[string]map[int32]int64 // committed offsets per group, of events
}

// TestDisasterRestore (issue 23, "Done when"): three `strata serve` nodes
// share a bucket. They hold an RF=3 topic of 200,000 records, a compacted
// topic, a transactional topic with aborted transactions and two consumer
// groups' committed offsets, all of it uploaded. Then every node is killed
// and its disk deleted; three fresh nodes start on the same bucket, and
// `strata cluster restore` brings the topics back: the same ids and
// configs, every record once at its original offset, the compacted
// topic's newest values, no aborted record for read_committed, both
// groups resuming at their committed offsets, and produce going on at the
// next offset.
func TestDisasterRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("three nodes, 200,000 records, all killed and restored: not under -short")
	}
	flags := append(slices.Clone(tierFlags), "--tier-metadata-checkpoint-interval", "1s")
	c := startCluster(t, 3, clusterSettings{sharedBucket: true, offsetsPartitions: 3, replicationFactor: 3, extra: flags})
	clusterID := clusterIDOf(t, c.addr(1))
	a := writeArchive(t, c)
	waitArchived(t, c, a)
	// What a read_committed consumer gets of the transactional topic,
	// for the offline read to match.
	consumed := readCommitted(t, c.addr(1), txnTopic, a.txns)

	for id := int32(1); id <= 3; id++ {
		c.kill(id)
	}
	for id := int32(1); id <= 3; id++ {
		c.wipe(id)
	}
	t.Logf("all three nodes killed and their data dirs deleted; the bucket is all that is left")
	checkOffline(t, c.bucketDir, a, consumed)

	// Fresh nodes: empty disks, a new metadata quorum, the old cluster's
	// id so that they accept its bucket.
	c.settings.extra = append(c.settings.extra, "--cluster-id", clusterID)
	lines := make([]<-chan string, 3)
	for id := int32(1); id <= 3; id++ {
		lines[id-1] = c.launch(id)
	}
	for id := int32(1); id <= 3; id++ {
		c.awaitStart(id, lines[id-1])
	}
	c.waitController()

	code, stdout, stderr := runCLI(t, nil, "cluster", "restore", "--bootstrap", c.bootstrap(), "--dry-run")
	if code != 0 {
		t.Fatalf("cluster restore --dry-run: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("cluster restore --dry-run:\n%s", stdout)
	for _, topic := range []string{eventsTopic, compactTopic, txnTopic} {
		if !strings.Contains(stdout, topic) {
			t.Errorf("the dry run does not name %s:\n%s", topic, stdout)
		}
	}
	if _, ok := c.topicIDs()[eventsTopic]; ok {
		t.Fatalf("the dry run created %s", eventsTopic)
	}

	start := time.Now()
	code, stdout, stderr = runCLI(t, nil, "cluster", "restore", "--bootstrap", c.bootstrap())
	if code != 0 {
		t.Fatalf("cluster restore: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("cluster restore took %s:\n%s%s", time.Since(start).Round(time.Millisecond), stdout, stderr)

	checkDisasterRestored(t, c, a)
}

// writeArchive fills the first cluster and returns what it acknowledged.
func writeArchive(t *testing.T, c *cluster) *lostCluster {
	t.Helper()
	a := &lostCluster{ids: map[string][16]byte{}, configs: map[string]map[string]string{}, latest: map[string]string{}, groups: map[string]map[int32]int64{}}
	topicConfigs := map[string]map[string]*string{
		eventsTopic:  tieredConfigs(256<<10, "min.insync.replicas", "2", "retention.ms", "-1"),
		compactTopic: tieredConfigs(64<<10, "cleanup.policy", "compact"),
		txnTopic:     tieredConfigs(64 << 10),
	}
	parts := map[string]int32{eventsTopic: eventsPartitions, compactTopic: compactPartitions, txnTopic: txnPartitions}
	for _, topic := range slices.Sorted(maps.Keys(topicConfigs)) {
		c.createTopic(topic, parts[topic], 3, topicConfigs[topic])
		a.ids[topic] = c.topicID(c.up()[0], topic)
		a.configs[topic] = map[string]string{}
		for k, v := range topicConfigs[topic] {
			a.configs[topic][k] = *v
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The normal topic: 200,000 acks=all records, spread over its
	// partitions in order.
	start := time.Now()
	cl := newClient(t, c.addr(1), kgo.DefaultProduceTopic(eventsTopic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.MaxBufferedRecords(20_000))
	var mu sync.Mutex
	sent := make([]sentRecord, disasterRecords)
	var wg sync.WaitGroup
	for i := range disasterRecords {
		wg.Add(1)
		v := fmt.Sprintf("event-%06d", i)
		cl.Produce(ctx, &kgo.Record{Partition: int32(i % eventsPartitions), Value: []byte(v)}, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			sent[i] = sentRecord{partition: r.Partition, value: v, acked: err == nil, offset: r.Offset, err: err}
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, s := range sent {
		if !s.acked {
			t.Fatalf("produce %s: %v", s.value, s.err)
		}
	}
	a.events = map[string][]sentRecord{"events": sent}
	t.Logf("%d records acknowledged by all in-sync replicas in %s", disasterRecords, time.Since(start).Round(time.Millisecond))
	adm := kadm.NewClient(c.client())
	hw, err := highWatermarks(adm, eventsTopic)
	if err != nil {
		t.Fatal(err)
	}
	a.hw = hw

	// The compacted topic: five rounds over the same 200 keys; only the
	// last round's values must survive.
	ccl := newClient(t, c.addr(1), kgo.DefaultProduceTopic(compactTopic), kgo.RequiredAcks(kgo.AllISRAcks()))
	for round := range 5 {
		var recs []*kgo.Record
		for k := range 200 {
			key, value := fmt.Sprintf("key-%03d", k), fmt.Sprintf("round %d of key-%03d", round, k)
			recs = append(recs, &kgo.Record{Key: []byte(key), Value: []byte(value)})
			a.latest[key] = value
		}
		if err := ccl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce to %s: %v", compactTopic, err)
		}
	}

	// The transactional topic: 30 transactions of 10 records, every third
	// one aborted; the last one commits, so that a read_committed reader
	// that has seen every committed record has passed every aborted one.
	a.txns = &txnLedger{txns: map[string]txnOutcome{}, keys: map[string]string{}}
	tcl := newClient(t, c.addr(1), kgo.TransactionalID("disaster-txn"), kgo.DefaultProduceTopic(txnTopic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	for x := range 30 {
		id := fmt.Sprintf("t%03d", x)
		commit := x%3 != 1
		if err := tcl.BeginTransaction(); err != nil {
			t.Fatalf("begin %s: %v", id, err)
		}
		var recs []*kgo.Record
		for i := range 10 {
			k := fmt.Sprintf("%s-%d", id, i)
			a.txns.keys[k] = id
			recs = append(recs, &kgo.Record{Key: []byte(k), Value: []byte("value of " + k)})
		}
		if err := tcl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce in %s: %v", id, err)
		}
		if err := tcl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatalf("end %s: %v", id, err)
		}
		a.txns.txns[id] = outcomeAborted
		if commit {
			a.txns.txns[id] = outcomeCommitted
		}
	}

	// Two groups' committed offsets, of the normal topic.
	for g, frac := range map[string]int64{"billing": 4, "audit": 2} {
		offsets := kadm.Offsets{}
		a.groups[g] = map[int32]int64{}
		for p, end := range a.hw {
			at := end / frac
			offsets.Add(kadm.Offset{Topic: eventsTopic, Partition: p, At: at, LeaderEpoch: -1})
			a.groups[g][p] = at
		}
		resp, err := adm.CommitOffsets(ctx, g, offsets)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("commit offsets of group %s: %v", g, err)
		}
	}
	return a
}

// waitArchived waits until the bucket holds everything the cluster
// acknowledged, groups' offsets included, and a metadata checkpoint that
// names every topic.
func waitArchived(t *testing.T, c *cluster, a *lostCluster) {
	t.Helper()
	adm := kadm.NewClient(c.client())
	b := openBucket(t, c.bucketDir)
	ids := c.topicIDs()
	for _, topic := range []string{eventsTopic, compactTopic, txnTopic, "__consumer_offsets", "__transaction_state"} {
		var last tierProgress
		var err error
		if !poll(2*time.Minute, func() bool {
			last, err = progress(adm, b, topic, ids[topic])
			return err == nil && last.caughtUp()
		}) {
			t.Fatalf("%s: the bucket did not catch up with the high watermarks: %s (%v)", topic, last, err)
		}
	}
	store, err := objstore.NewDir(c.bucketDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	if !poll(time.Minute, func() bool {
		cp, _, err := tier.LatestCheckpoint(context.Background(), store)
		if err != nil {
			return false
		}
		names = names[:0]
		for _, tp := range cp.Topics {
			names = append(names, tp.Name)
		}
		for topic := range a.ids {
			if !slices.Contains(names, topic) {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("no metadata checkpoint names every topic; the newest names %v", names)
	}
	t.Logf("the bucket holds every topic up to its high watermark, and a checkpoint names them all")
}

// topicIDs is every topic's id as a running node's metadata shows it.
func (c *cluster) topicIDs() map[string][16]byte {
	c.t.Helper()
	up := c.up()
	if len(up) == 0 {
		c.t.Fatal("no node running")
	}
	resp, err := c.tryMetadata(up[0])
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string][16]byte{}
	for _, tp := range resp.Topics {
		if tp.Topic != nil {
			out[*tp.Topic] = tp.TopicID
		}
	}
	return out
}

// checkDisasterRestored checks the restored cluster against what the lost one
// acknowledged.
func checkDisasterRestored(t *testing.T, c *cluster, a *lostCluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	adm := kadm.NewClient(c.client())

	ids := c.topicIDs()
	for topic, want := range a.ids {
		if ids[topic] != want {
			t.Errorf("%s is back with id %x, want %x", topic, ids[topic], want)
		}
	}
	described, err := adm.DescribeTopicConfigs(ctx, slices.Collect(maps.Keys(a.configs))...)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range described {
		got := map[string]string{}
		for _, cfg := range rc.Configs {
			if cfg.Value != nil {
				got[cfg.Key] = *cfg.Value
			}
		}
		for k, v := range a.configs[rc.Name] {
			if got[k] != v {
				t.Errorf("%s: config %s is %q after the restore, want %q", rc.Name, k, got[k], v)
			}
		}
	}
	c.waitISR(eventsTopic, time.Minute)

	res := check(a.events, readBack(t, c, eventsTopic))
	t.Logf("checker, %s after the restore: %s", eventsTopic, res)
	if !res.ok() {
		t.Errorf("the restored %s does not hold what was acknowledged: %s", eventsTopic, res)
	}

	latest := map[string]string{}
	for _, recs := range readAll(t, c.addr(1), compactTopic) {
		for _, r := range recs {
			latest[string(r.Key)] = string(r.Value)
		}
	}
	if !maps.Equal(latest, a.latest) {
		var diff []string
		for k, v := range a.latest {
			if latest[k] != v {
				diff = append(diff, fmt.Sprintf("%s: %q, want %q", k, latest[k], v))
			}
		}
		sort.Strings(diff)
		t.Errorf("the restored compacted topic's newest values differ (%d keys read, %d written): %v", len(latest), len(a.latest), diff[:min(len(diff), 5)])
	}

	got := readCommitted(t, c.addr(1), txnTopic, a.txns)
	if r := checkTxns(a.txns, got, nil); !r.ok() || r.committed != 20 || r.aborted != 10 {
		t.Errorf("the restored transactional topic, read_committed: %s", r)
	} else {
		t.Logf("%s read_committed after the restore: %s", txnTopic, r)
	}

	for g, want := range a.groups {
		fetched, err := adm.FetchOffsets(ctx, g)
		if err == nil {
			err = fetched.Error()
		}
		if err != nil {
			t.Errorf("offsets of group %s after the restore: %v", g, err)
			continue
		}
		for p, at := range want {
			if o, ok := fetched.Lookup(eventsTopic, p); !ok || o.At != at {
				t.Errorf("group %s, partition %d: committed offset %d after the restore (found %v), want %d", g, p, o.At, ok, at)
			}
		}
		first := firstConsumed(t, c.addr(1), g, eventsTopic, eventsPartitions)
		for p, at := range want {
			if first[p] != at {
				t.Errorf("group %s resumes partition %d at %d, want its committed offset %d", g, p, first[p], at)
			}
		}
	}

	pcl := newClient(t, c.addr(1), kgo.DefaultProduceTopic(eventsTopic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RequiredAcks(kgo.AllISRAcks()))
	for p := range int32(eventsPartitions) {
		r := &kgo.Record{Partition: p, Value: []byte("after the restore")}
		if err := pcl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Errorf("produce to %s/%d after the restore: %v", eventsTopic, p, err)
			continue
		}
		if r.Offset != a.hw[p] {
			t.Errorf("produce to %s/%d after the restore went to offset %d, want the next offset %d", eventsTopic, p, r.Offset, a.hw[p])
		}
	}
}

// readCommitted reads topic read_committed until every record of l's
// committed transactions has been seen (the last transaction committed,
// so every aborted one lies before it) or a minute passes.
func readCommitted(t *testing.T, bootstrap, topic string, l *txnLedger) map[int32][]*kgo.Record {
	t.Helper()
	want := 0
	for id, o := range l.txns {
		if o == outcomeCommitted && id != "" {
			want += 10
		}
	}
	cl := newClient(t, bootstrap, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := map[int32][]*kgo.Record{}
	seen := map[string]bool{}
	for len(seen) < want && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(_ string, p int32, err error) {
			if ctx.Err() == nil {
				t.Errorf("read_committed fetch of %s/%d: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			out[r.Partition] = append(out[r.Partition], r)
			if l.txns[l.keys[string(r.Key)]] == outcomeCommitted {
				seen[string(r.Key)] = true
			}
		})
	}
	return out
}

// firstConsumed joins group with a franz-go group consumer and returns the
// offset of the first record it is given on each partition of topic.
func firstConsumed(t *testing.T, bootstrap, group, topic string, partitions int) map[int32]int64 {
	t.Helper()
	cl := newClient(t, bootstrap, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic), kgo.DisableAutoCommit())
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := map[int32]int64{}
	for len(first) < partitions && ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(_ string, p int32, err error) {
			if ctx.Err() == nil {
				t.Errorf("group %s fetch of %s/%d: %v", group, topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			if _, ok := first[r.Partition]; !ok {
				first[r.Partition] = r.Offset
			}
		})
	}
	if len(first) < partitions {
		t.Errorf("group %s got records from %d of %d partitions within a minute", group, len(first), partitions)
	}
	return first
}

// checkOffline reads the lost cluster's bucket with no broker running:
// `strata bucket cat` prints exactly what was acknowledged, and what a
// read_committed consumer got, in the same order; its JSON parses; and
// `strata bucket export` writes every record of each partition.
func checkOffline(t *testing.T, bucketDir string, a *lostCluster, consumed map[int32][]*kgo.Record) {
	t.Helper()
	type line struct {
		partition int32
		offset    int64
		text      string
	}
	parse := func(out string) map[int32][]line {
		got := map[int32][]line{}
		for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
			var r line
			f := strings.SplitN(l, " ", 3)
			if len(f) != 3 {
				t.Fatalf("bucket cat printed %q", l)
			}
			p, err1 := strconv.ParseInt(f[0], 10, 32)
			o, err2 := strconv.ParseInt(f[1], 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("bucket cat printed %q", l)
			}
			r.partition, r.offset, r.text = int32(p), o, f[2]
			got[r.partition] = append(got[r.partition], r)
		}
		return got
	}
	compare := func(what string, got, want map[int32][]line) {
		t.Helper()
		for p := range max(len(got), len(want)) {
			g, w := got[int32(p)], want[int32(p)]
			if len(g) != len(w) {
				t.Errorf("%s, partition %d: bucket cat printed %d records, want %d", what, p, len(g), len(w))
				continue
			}
			for i := range w {
				if g[i] != w[i] {
					t.Errorf("%s, partition %d, record %d: bucket cat printed %+v, want %+v", what, p, i, g[i], w[i])
					break
				}
			}
		}
	}

	start := time.Now()
	out := cliOK(t, nil, "bucket", "cat", eventsTopic, "--bucket-dir", bucketDir, "--format", `%p %o %s\n`)
	want := map[int32][]line{}
	for _, s := range a.events["events"] {
		want[s.partition] = append(want[s.partition], line{s.partition, s.offset, s.value})
	}
	for _, recs := range want {
		sort.Slice(recs, func(i, j int) bool { return recs[i].offset < recs[j].offset })
	}
	compare(eventsTopic, parse(out), want)
	t.Logf("bucket cat %s, no broker running: %d records in %s", eventsTopic, strings.Count(out, "\n"), time.Since(start).Round(time.Millisecond))

	out = cliOK(t, nil, "bucket", "cat", txnTopic, "--bucket-dir", bucketDir, "--format", `%p %o %k=%s\n`)
	want = map[int32][]line{}
	total := 0
	for p, recs := range consumed {
		for _, r := range recs {
			want[p] = append(want[p], line{p, r.Offset, string(r.Key) + "=" + string(r.Value)})
			total++
		}
	}
	compare(txnTopic+" (read_committed)", parse(out), want)

	js := cliOK(t, nil, "bucket", "cat", txnTopic, "--bucket-dir", bucketDir, "--format", "json")
	n := 0
	for _, l := range strings.Split(strings.TrimSuffix(js, "\n"), "\n") {
		var rec struct {
			Partition *int32  `json:"partition"`
			Offset    *int64  `json:"offset"`
			Key       *string `json:"key"`
			Value     *string `json:"value"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Partition == nil || rec.Offset == nil || rec.Key == nil || rec.Value == nil {
			t.Fatalf("bucket cat --format json printed %q: %v", l, err)
		}
		if want := "value of " + *rec.Key; *rec.Value != want {
			t.Errorf("bucket cat --format json: %s/%d@%d value %q, want %q", txnTopic, *rec.Partition, *rec.Offset, *rec.Value, want)
		}
		n++
	}
	if n != total {
		t.Errorf("bucket cat --format json printed %d records of %s, a read_committed consumer got %d", n, txnTopic, total)
	}

	dir := t.TempDir()
	start = time.Now()
	cliOK(t, nil, "bucket", "export", eventsTopic, "--bucket-dir", bucketDir, "--to", dir)
	for p, hw := range a.hw {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%s-%d.jsonl", eventsTopic, p)))
		if err != nil {
			t.Fatal(err)
		}
		if lines := bytes.Count(b, []byte("\n")); int64(lines) != hw {
			t.Errorf("bucket export of %s-%d wrote %d records, the partition held %d", eventsTopic, p, lines, hw)
		}
	}
	t.Logf("bucket export %s, no broker running: %s", eventsTopic, time.Since(start).Round(time.Millisecond))
}
