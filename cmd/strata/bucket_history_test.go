package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

// The process tests of issue 20 ("Done when"): the bucket never loses or
// strands history. Each scenario ends the way a user of the long-retention
// archive checks it: the bucket's end has caught up with the high
// watermark, no node keeps any record locally, no upload failed once the
// fault had healed, and every acknowledged record is read back once, at
// the offset its acknowledgement named, from the bucket alone.

// tierFlags make the bucket follow the high watermark closely: an upload
// pass every 200 ms, and a leader's active segment rolled and uploaded
// once it is a second old.
var tierFlags = []string{"--tier-upload-interval", "200ms", "--tier-idle-upload", "1s"}

// tieredConfigs are the configs of a tiered topic whose local copies go
// as soon as they are in the bucket (local.retention.bytes 0), and whose
// active segment every replica rolls when it is two seconds old, each at
// its own moment: written slowly, the replicas' segment boundaries differ.
func tieredConfigs(segmentBytes int, kv ...string) map[string]*string {
	return configs(append([]string{"segment.bytes", fmt.Sprint(segmentBytes),
		"segment.ms", "2000", "local.retention.bytes", "0"}, kv...)...)
}

// bucketReader reads a directory bucket as a broker's tier does.
type bucketReader struct {
	tr *tier.Tier
}

func openBucket(t *testing.T, dir string) *bucketReader {
	t.Helper()
	store, err := objstore.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tier.Open(tier.Config{Store: store, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return &bucketReader{tr: tr}
}

// end is the end offset of tp's current manifest, 0 when the bucket has
// nothing of it.
func (b *bucketReader) end(tp format.TopicPartition) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	root, err := b.tr.Refresh(ctx, tp)
	if err != nil {
		return 0, fmt.Errorf("manifest of %s-%d: %w", tp.Topic, tp.Partition, err)
	}
	if root.Empty() {
		return 0, nil
	}
	return root.EndOffset(), nil
}

// highWatermarks lists topic's high watermarks through adm.
func highWatermarks(adm *kadm.Client, topic string) (map[int32]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	if len(out) == 0 {
		return nil, fmt.Errorf("no partitions of %s listed", topic)
	}
	return out, nil
}

// tierProgress is, per partition, how far the bucket is behind the high
// watermark.
type tierProgress struct {
	hw, bucketEnd map[int32]int64
}

func (p tierProgress) caughtUp() bool {
	for part, hw := range p.hw {
		if p.bucketEnd[part] != hw {
			return false
		}
	}
	return len(p.hw) > 0
}

func (p tierProgress) String() string {
	var parts []int32
	for part := range p.hw {
		parts = append(parts, part)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	var s []string
	for _, part := range parts {
		s = append(s, fmt.Sprintf("partition %d: bucket ends at %d, high watermark %d (%d behind)",
			part, p.bucketEnd[part], p.hw[part], p.hw[part]-p.bucketEnd[part]))
	}
	return strings.Join(s, "; ")
}

// progress reads topic's high watermarks and its bucket's ends.
func progress(adm *kadm.Client, b *bucketReader, topic string, id [16]byte) (tierProgress, error) {
	hw, err := highWatermarks(adm, topic)
	if err != nil {
		return tierProgress{}, err
	}
	p := tierProgress{hw: hw, bucketEnd: map[int32]int64{}}
	for part := range hw {
		e, err := b.end(format.TopicPartition{Topic: topic, TopicID: id, Partition: part})
		if err != nil {
			return tierProgress{}, err
		}
		p.bucketEnd[part] = e
	}
	return p, nil
}

// poll calls cond every 100 ms until it holds or timeout passes, and
// reports whether it held. Unlike waitFor it does not fail the test, so
// that a scenario can go on to count what was lost.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// logMark is where each running process's stderr stood at a moment.
type logMark map[*node]int

// markLogs marks the stderr of every running process of c.
func (c *cluster) markLogs() logMark {
	m := logMark{}
	for _, id := range c.up() {
		n := c.proc(id)
		m[n] = len(n.stderr.String())
	}
	return m
}

// uploadFailuresSince returns the failed upload passes (the broker's "tier
// upload" warning, which strata_tier_upload_errors_total counts) that the
// running processes of c logged after mark; a process started after mark
// counts from its first line.
func (c *cluster) uploadFailuresSince(mark logMark) []string {
	var out []string
	for _, id := range c.up() {
		n := c.proc(id)
		out = append(out, uploadFailures(fmt.Sprintf("node %d", id), n, mark[n])...)
	}
	return out
}

// uploadFailures returns the failed upload passes n logged after byte
// from of its stderr, each prefixed with who.
func uploadFailures(who string, n *node, from int) []string {
	var out []string
	for _, line := range strings.Split(n.stderr.String()[from:], "\n") {
		if strings.Contains(line, `msg="tier upload"`) {
			out = append(out, who+": "+line)
		}
	}
	return out
}

// sample is the first n of lines, for a failure message.
func sample(lines []string, n int) string {
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n... and %d more", len(lines)-n)
}

// localStarts is the first local offset of each partition of topic on
// each running node (-1: no segment at all).
func (c *cluster) localStarts(topic string, partitions int32) map[int32][]int64 {
	out := map[int32][]int64{}
	for _, id := range c.up() {
		for p := range partitions {
			out[id] = append(out[id], localStart(c.t, c.dirs[id-1], topic, int(p)))
		}
	}
	return out
}

// localCopiesGone reports whether no running node holds any record of
// topic below hw locally: every record is in the bucket alone.
func (c *cluster) localCopiesGone(topic string, hw map[int32]int64) bool {
	for _, id := range c.up() {
		for p, end := range hw {
			if localStart(c.t, c.dirs[id-1], topic, int(p)) < end {
				return false
			}
		}
	}
	return true
}

// drainToBucket waits, once a scenario's load has stopped, until the
// bucket holds every partition of topic up to its high watermark and no
// running node keeps a local copy of any record; it reports (t.Errorf)
// what did not happen within the time given, and returns whether both did.
func drainToBucket(t *testing.T, c *cluster, adm *kadm.Client, b *bucketReader, topic string, within time.Duration) bool {
	t.Helper()
	id := c.topicID(c.up()[0], topic)
	var last tierProgress
	var lastErr error
	if !poll(within, func() bool {
		last, lastErr = progress(adm, b, topic, id)
		return lastErr == nil && last.caughtUp()
	}) {
		t.Errorf("%s: the bucket has not caught up with the high watermark %s after the load stopped: %s (last error: %v)",
			topic, within, last, lastErr)
		return false
	}
	if !poll(within, func() bool { return c.localCopiesGone(topic, last.hw) }) {
		t.Errorf("%s: local copies still on disk %s after the bucket caught up (high watermarks %v); first local offset per node and partition: %v",
			topic, within, last.hw, c.localStarts(topic, int32(len(last.hw))))
		return false
	}
	t.Logf("%s: the bucket holds every partition up to its high watermark %v and no node keeps a record locally", topic, last.hw)
	return true
}

// wipe deletes everything in node id's data dir, as a replaced disk does;
// the node must be down.
func (c *cluster) wipe(id int32) {
	c.t.Helper()
	if c.proc(id) != nil {
		c.t.Fatalf("node %d is running", id)
	}
	entries, err := os.ReadDir(c.dirs[id-1])
	if err != nil {
		c.t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(c.dirs[id-1], e.Name())); err != nil {
			c.t.Fatal(err)
		}
	}
}

// TestClusterFailoverAfterRebuild (issue 20, item 2): three nodes share a
// bucket; an RF=3 tiered topic is written slowly, so that each replica
// rolls its segments at its own offsets, with local copies deleted once
// uploaded. One follower's data dir is wiped and the node restarted: it
// starts its log at the leader's local start, with boundaries of its own.
// Once it is back in the ISR the others are stopped in turn until it
// leads, and the load goes on. Its uploads must carry on from the bucket's
// end: no upload fails, the bucket's end keeps up with the high
// watermark, and once no node keeps a local copy every acknowledged record
// is read back once, at its offset, from the bucket.
func TestClusterFailoverAfterRebuild(t *testing.T) {
	if testing.Short() {
		t.Skip("wipes and restarts nodes: not under -short")
	}
	c := startCluster(t, 3, clusterSettings{sharedBucket: true, extra: tierFlags})
	const topic = "rebuilt"
	ps := c.createTopic(topic, 1, 3, tieredConfigs(1<<20, "min.insync.replicas", "2"))
	replicas := ps[0].replicas
	if len(replicas) != 3 || ps[0].leader != replicas[0] {
		t.Fatalf("new partition: leader %d, replicas %v", ps[0].leader, replicas)
	}
	// The election takes the first in-sync replica in assignment order:
	// the second one leads once the first is stopped.
	rebuilt := replicas[1]
	id := c.topicID(replicas[0], topic)
	tp := format.TopicPartition{Topic: topic, TopicID: id, Partition: 0}
	b := openBucket(t, c.bucketDir)
	adm := kadm.NewClient(c.client())

	// 25 records a second of ~60 bytes: a segment.ms roll every two
	// seconds, never a size roll.
	l := startLoad(t, c, topic, 1, 1, 25)
	l.waitAcked(c, 100, 30*time.Second)
	c.waitFor("history in the bucket and gone from the leader's disk", time.Minute, func() bool {
		e, err := b.end(tp)
		return err == nil && e > 0 && localStart(t, c.dirs[replicas[0]-1], topic, 0) > 0
	}, func() string {
		e, err := b.end(tp)
		return fmt.Sprintf("bucket end %d (%v), leader's local start %d", e, err, localStart(t, c.dirs[replicas[0]-1], topic, 0))
	})

	c.kill(rebuilt)
	c.wipe(rebuilt)
	c.restart(rebuilt)
	c.waitISR(topic, time.Minute)
	t.Logf("node %d wiped and restarted: back in the ISR, its local log starts at %d (node %d's at %d)",
		rebuilt, localStart(t, c.dirs[rebuilt-1], topic, 0), replicas[0], localStart(t, c.dirs[replicas[0]-1], topic, 0))
	l.waitAcked(c, 50, 30*time.Second)

	// Stop the others in turn (SIGTERM: a controlled shutdown) until the
	// rebuilt node leads; the last one stopped stays down, so that the
	// preferred-leader rebalance cannot move leadership back to it.
	var stopped int32 = -1
	for try := 0; ; try++ {
		if try == 3 {
			t.Fatalf("node %d does not lead after %d controlled shutdowns", rebuilt, try)
		}
		victim := c.waitISR(topic, time.Minute)[0].leader
		if victim == rebuilt {
			victim = replicas[0] // would take leadership back
		}
		c.term(victim)
		stopped = victim
		var now partitionState
		c.waitFor(fmt.Sprintf("a leader other than node %d", victim), 30*time.Second, func() bool {
			ps, err := c.partitions(topic)
			if err != nil {
				return false
			}
			now = ps[0]
			return now.leader >= 0 && now.leader != victim
		}, func() string { return fmt.Sprintf("%+v", now) })
		t.Logf("node %d stopped: node %d leads at epoch %d", victim, now.leader, now.epoch)
		if now.leader == rebuilt {
			break
		}
		c.restart(stopped)
	}
	mark := c.markLogs()
	led := time.Now()

	// Produce on under the rebuilt node: the bucket's end must follow the
	// high watermark (segments roll every two seconds and are uploaded
	// within one more).
	var behind []string
	for range 4 {
		l.waitAcked(c, 75, 30*time.Second)
		p, err := progress(adm, b, topic, id)
		if err != nil {
			t.Logf("progress: %v", err)
			continue
		}
		target := p.hw[0]
		var end int64
		if !poll(15*time.Second, func() bool {
			end, err = b.end(tp)
			return err == nil && end >= target
		}) {
			behind = append(behind, fmt.Sprintf("%s after leading: high watermark %d, bucket end still %d 15s later",
				time.Since(led).Round(time.Second), target, end))
			break // stuck: waiting more says nothing new
		}
	}
	if len(behind) > 0 {
		t.Errorf("under the rebuilt node %d the bucket's end does not keep up with the high watermark:\n%s", rebuilt, strings.Join(behind, "\n"))
	}
	l.stop()
	drainToBucket(t, c, adm, b, topic, 30*time.Second)
	res := check(l.historyCopy(), readBack(t, c, topic))
	t.Logf("checker (node %d leading, node %d down, read from the start): %s", rebuilt, stopped, res)
	if !res.ok() {
		t.Errorf("the log read back does not hold what was acknowledged: %s", res)
	}
	if failed := c.uploadFailuresSince(mark); len(failed) > 0 {
		t.Errorf("%d upload passes failed while the rebuilt node %d led, want none:\n%s", len(failed), rebuilt, sample(failed, 5))
	}
}

// TestLostLocalLog (issue 20, item 3): a single node whose logs/ directory
// is lost, its metadata and bucket intact, is restarted and takes more
// acks=all records. No offset the bucket holds may be given out again:
// every acknowledged record, before the loss and after, is read back
// once at the offset its acknowledgement named, right after the restart
// and again once local retention has left the bucket alone holding them.
func TestLostLocalLog(t *testing.T) {
	if testing.Short() {
		t.Skip("not under -short")
	}
	dir := t.TempDir()
	addr := freeAddrs(t, 1)[0]
	args := append([]string{"dev", "--data-dir", dir, "--listen", addr, "--http-listen", "off"}, tierFlags...)
	n := startNode(t, nil, args...)
	const topic, partitions = "lost-log", 2
	mustCreate(t, n.bootstrap, topic, partitions, tieredConfigs(4096))
	b := openBucket(t, filepath.Join(dir, "bucket"))

	history := map[string][]sentRecord{}
	produce := func(name string, count int) {
		t.Helper()
		cl := newClient(t, addr, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for i := range count {
			v := fmt.Sprintf("%s-%05d", name, i)
			r := &kgo.Record{Partition: int32(i % partitions), Value: []byte(v)}
			err := cl.ProduceSync(ctx, r).FirstErr()
			history[name] = append(history[name], sentRecord{partition: r.Partition, value: v, acked: err == nil, offset: r.Offset, err: err})
			if err != nil {
				t.Fatalf("produce %s: %v", v, err)
			}
		}
	}
	produce("before", 600)
	adm := kadm.NewClient(newClient(t, addr))
	id := topicIDOf(t, adm, topic)
	var before tierProgress
	var err error
	if !poll(time.Minute, func() bool {
		before, err = progress(adm, b, topic, id)
		return err == nil && before.caughtUp()
	}) {
		t.Fatalf("the history never reached the bucket: %s (%v)", before, err)
	}
	n.stop(t)
	if err := os.RemoveAll(filepath.Join(dir, "logs")); err != nil {
		t.Fatal(err)
	}
	t.Logf("history tiered (%s); logs/ deleted", before)

	n = startNode(t, nil, args...)
	produce("after", 300)
	reused := 0
	for _, s := range history["after"] {
		if s.offset < before.bucketEnd[s.partition] {
			if reused++; reused <= 5 {
				t.Errorf("%s acknowledged at partition %d offset %d, which the bucket already held (it ends at %d)",
					s.value, s.partition, s.offset, before.bucketEnd[s.partition])
			}
		}
	}
	if reused > 0 {
		t.Errorf("%d of the 300 records produced after the restart were given offsets the bucket already held", reused)
	}
	readBackSingle := func(when string) {
		t.Helper()
		var read []readRecord
		for p, recs := range readAll(t, addr, topic) {
			for _, r := range recs {
				read = append(read, readRecord{partition: p, offset: r.Offset, value: string(r.Value)})
			}
		}
		res := check(history, read)
		t.Logf("checker (%s): %s", when, res)
		if !res.ok() {
			t.Errorf("%s: the log read back does not hold what was acknowledged: %s", when, res)
		}
	}
	readBackSingle("right after the restart")

	var after tierProgress
	if !poll(30*time.Second, func() bool {
		after, err = progress(adm, b, topic, id)
		if err != nil || !after.caughtUp() {
			return false
		}
		for p, hw := range after.hw {
			if localStart(t, dir, topic, int(p)) < hw {
				return false
			}
		}
		return true
	}) {
		t.Errorf("after the restart the bucket did not take over every record within 30s: %s (%v); local starts %d, %d",
			after, err, localStart(t, dir, topic, 0), localStart(t, dir, topic, 1))
	}
	readBackSingle("from the bucket alone")
	n.stop(t)
}

// topicIDOf is topic's id as adm's cluster reports it.
func topicIDOf(t *testing.T, adm *kadm.Client, topic string) [16]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, topic)
	if err == nil {
		err = td.Error()
	}
	if err != nil {
		t.Fatalf("topic %s: %v", topic, err)
	}
	if _, ok := td[topic]; !ok {
		t.Fatal(errors.New("no topic " + topic))
	}
	return td[topic].ID
}

// localStart is the base offset of the first local segment of topic's
// partition under dataDir, -1 with none (or no directory).
func localStart(t *testing.T, dataDir, topic string, partition int) int64 {
	m, _ := filepath.Glob(filepath.Join(dataDir, "logs", fmt.Sprintf("%s-%d.*", topic, partition)))
	if len(m) != 1 {
		return -1
	}
	segs := segmentsOf(t, m[0])
	if len(segs) == 0 {
		return -1
	}
	var off int64
	if _, err := fmt.Sscanf(filepath.Base(segs[0]), "%d.log", &off); err != nil {
		return -1
	}
	return off
}

// txnResult counts what checkTxns found in a transactional topic read
// read_committed: transactions by their producer's outcome, and records
// lost (of a committed transaction, not visible), duplicated (visible
// twice), aborted and seen (of an aborted transaction, visible), partial
// (of a transaction whose outcome the producer did not learn, visible
// while others of it are not), unexpected (never produced), and seen by
// the live read_committed consumer though their transaction is not
// visible in the end.
type txnResult struct {
	committed, aborted, unknown                  int
	read, lost, duplicated, abortedSeen, partial int
	unexpected, liveSeen, liveAbortedSeen        int
	problems                                     []string
}

func (r txnResult) ok() bool {
	return r.lost == 0 && r.duplicated == 0 && r.abortedSeen == 0 && r.partial == 0 && r.unexpected == 0 && r.liveAbortedSeen == 0
}

func (r txnResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "transactions committed %d, aborted %d, of unknown outcome %d; records read %d: lost %d, duplicated %d, aborted seen %d, partial %d, unexpected %d; live read_committed consumer: saw %d, aborted seen %d",
		r.committed, r.aborted, r.unknown, r.read, r.lost, r.duplicated, r.abortedSeen, r.partial, r.unexpected, r.liveSeen, r.liveAbortedSeen)
	for i, p := range r.problems {
		if i == 20 {
			fmt.Fprintf(&b, "\n  ... and %d more", len(r.problems)-20)
			break
		}
		b.WriteString("\n  " + p)
	}
	return b.String()
}

// checkTxns judges got, a read_committed read of txnLoad's topic, and
// live, the keys a read_committed consumer saw while it ran, against l
// (the same rules as checkLedger, counted instead of failed one by one).
func checkTxns(l *txnLedger, got map[int32][]*kgo.Record, live map[string]bool) txnResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	var r txnResult
	count := map[string]int{}
	perTxn := map[string]int{}
	for p, recs := range got {
		for _, rec := range recs {
			r.read++
			k := string(rec.Key)
			id, ok := l.keys[k]
			if !ok || string(rec.Value) != "value of "+k {
				r.unexpected++
				r.problems = append(r.problems, fmt.Sprintf("unexpected: %q = %q at partition %d offset %d was never produced", k, rec.Value, p, rec.Offset))
				continue
			}
			if count[k]++; count[k] == 2 {
				r.duplicated++
				r.problems = append(r.problems, fmt.Sprintf("duplicated: %q (transaction %s) read again at partition %d offset %d", k, id, p, rec.Offset))
			}
			perTxn[id]++
		}
	}
	ids := make([]string, 0, len(l.txns))
	for id := range l.txns {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		n := perTxn[id]
		switch l.txns[id] {
		case outcomeCommitted:
			r.committed++
			if n < 10 {
				r.lost += 10 - n
				r.problems = append(r.problems, fmt.Sprintf("lost: committed transaction %s has %d of its 10 records visible", id, n))
			}
		case outcomeAborted:
			r.aborted++
			if n > 0 {
				r.abortedSeen += n
				r.problems = append(r.problems, fmt.Sprintf("aborted seen: aborted transaction %s has %d records visible", id, n))
			}
		default:
			r.unknown++
			if n != 0 && n != 10 {
				r.partial += n
				r.problems = append(r.problems, fmt.Sprintf("partial: transaction %s (outcome unknown to its producer) has %d of its 10 records visible", id, n))
			}
		}
	}
	keys := make([]string, 0, len(live))
	for k := range live {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r.liveSeen++
		id, ok := l.keys[k]
		if ok && perTxn[id] == 0 {
			r.liveAbortedSeen++
			r.problems = append(r.problems, fmt.Sprintf("aborted seen live: the read_committed consumer saw %q of transaction %s (%v), not visible in the end", k, id, l.txns[id]))
		}
	}
	return r
}

// leadersOf merges the leaderships of several topics, partitions numbered
// apart, for mostLeader.
func (c *cluster) leadersOf(topics ...string) map[int32]partitionState {
	c.t.Helper()
	out := map[int32]partitionState{}
	for i, topic := range topics {
		for p, s := range c.waitISR(topic, time.Minute) {
			out[int32(i)*1000+p] = s
		}
	}
	return out
}

// electPreferred moves every partition of topics back to its preferred
// replica and waits until the metadata shows it.
func (c *cluster) electPreferred(adm *kadm.Client, topics ...string) {
	c.t.Helper()
	set := kadm.TopicsSet{}
	for _, topic := range topics {
		ps, err := c.partitions(topic)
		if err != nil {
			c.t.Fatal(err)
		}
		for p := range ps {
			set.Add(topic, p)
		}
	}
	var off []string
	c.waitFor("every partition led by its preferred replica", time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, set)
		off = nil
		for _, topic := range topics {
			ps, err := c.partitions(topic)
			if err != nil {
				off = append(off, err.Error())
				continue
			}
			for p, s := range ps {
				if len(s.replicas) == 0 || s.leader != s.replicas[0] || len(s.isr) != len(s.replicas) {
					off = append(off, fmt.Sprintf("%s-%d led by %d, replicas %v, ISR %v", topic, p, s.leader, s.replicas, s.isr))
				}
			}
		}
		return len(off) == 0
	}, func() string { return strings.Join(off, "; ") })
}

// settle ends a fault: every partition of topics, and of the internal
// topics that exist, is moved back to its preferred replica, so that no
// leadership changes after it (the controller's rebalance has nothing
// left to move), and the logs are marked a second later, once the passes
// the last elections interrupted are over. An upload that fails after the
// mark fails with the cluster healthy: a stuck upload fails at every pass.
func (c *cluster) settle(adm *kadm.Client, topics ...string) logMark {
	c.t.Helper()
	for _, internal := range []string{"__transaction_state", "__consumer_offsets"} {
		if _, err := c.partitions(internal); err == nil {
			topics = append(topics, internal)
		}
	}
	c.electPreferred(adm, topics...)
	time.Sleep(time.Second)
	return c.markLogs()
}

// TestClusterZombieLeader (issue 20, item 1): under acks=all load, with
// uploads running, the node leading the most partitions is paused
// (SIGSTOP) past the session timeout: the controller fences it and moves
// its leaderships while it still believes it leads; then it is resumed
// (SIGCONT), twice (STRATA_FAULT_ROUNDS). An idempotent load and a transactional one (a
// transaction in four aborted, a read_committed consumer following) run
// side by side. Whatever the deposed leader uploaded or deleted in its
// old epoch, once it leads again every acknowledged record is read back
// once, at its offset, from the bucket alone, no aborted record is ever
// seen read_committed, and no upload fails or falls behind.
func TestClusterZombieLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("pauses nodes past the session timeout: not under -short")
	}
	// Uploads once a second of segments that roll several times a second:
	// a leader always has closed segments below its high watermark that
	// are not in the bucket yet, which the first pass after SIGCONT, due
	// at once, uploads before the node hears that it was deposed.
	c := startCluster(t, 3, clusterSettings{sharedBucket: true, replicationFactor: 3,
		sessionTimeout: 3 * time.Second, heartbeat: 500 * time.Millisecond,
		extra: []string{"--tier-upload-interval", "1s", "--tier-idle-upload", "1s"}})
	const plain, txn = "zombie", "zombie-txn"
	c.createTopic(plain, 3, 3, tieredConfigs(1024, "min.insync.replicas", "2"))
	c.createTopic(txn, 3, 3, tieredConfigs(1024, "min.insync.replicas", "2"))
	rng := newRand(t)
	b := openBucket(t, c.bucketDir)
	adm := kadm.NewClient(c.client())

	l := startLoad(t, c, plain, 3, 2, 100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ledger, waitTxns := txnLoad(ctx, t, c.kafka, txn, 2)
	watch := watchCommitted(t, c.kafka, txn)
	l.waitAcked(c, 300, 30*time.Second)
	waitCommitted(t, ledger, 10, time.Minute, "before the first pause")
	for _, topic := range []string{plain, txn} {
		id := c.topicID(c.up()[0], topic)
		var last tierProgress
		c.waitFor(topic+" uploading", 30*time.Second, func() bool {
			p, err := progress(adm, b, topic, id)
			if err != nil {
				return false
			}
			last = p
			for _, e := range p.bucketEnd {
				if e == 0 {
					return false
				}
			}
			return true
		}, func() string { return last.String() })
	}

	above := watchLocalStarts(t, c, b, map[string]int32{plain: 3, txn: 3})
	for round := range faultRounds(t, 2, 2) {
		victim := mostLeader(c.leadersOf(plain, txn), rng)
		c.pause(victim)
		at := time.Now()
		var state string
		c.waitFor(fmt.Sprintf("node %d's leaderships moved while it is paused", victim), 30*time.Second, func() bool {
			for _, topic := range []string{plain, txn} {
				ps, err := c.partitions(topic, victim)
				if err != nil {
					state = err.Error()
					return false
				}
				for p, s := range ps {
					if s.leader == victim || s.leader < 0 {
						state = fmt.Sprintf("%s-%d led by %d", topic, p, s.leader)
						return false
					}
				}
			}
			return true
		}, func() string { return state })
		// The new leaders upload under their epochs while the old one
		// sleeps, its manifests and its local log those of its epoch.
		time.Sleep(2 * time.Second)
		c.resume(victim)
		t.Logf("round %d: node %d paused %s, past the session timeout, and resumed", round+1, victim, time.Since(at).Round(time.Millisecond))
		c.waitISR(plain, time.Minute)
		c.waitISR(txn, time.Minute)
		l.waitResumed(c, at, time.Minute)
	}
	// The deposed leaders lead again, on the local logs their zombie
	// passes left.
	mark := c.settle(adm, plain, txn)
	l.waitAcked(c, 300, time.Minute)
	waitCommitted(t, ledger, ledger.committed()+10, time.Minute, "after the pauses")
	cancel()
	waitTxns()
	l.stop()
	waitStable(t, c.client(), txn, 3, time.Minute)

	drainToBucket(t, c, adm, b, plain, 30*time.Second)
	drainToBucket(t, c, adm, b, txn, 30*time.Second)
	res := check(l.historyCopy(), readBack(t, c, plain))
	if res.ok() {
		t.Logf("idempotent load, read back from the bucket: %s", res)
	} else {
		t.Errorf("%s: the log read back does not hold what was acknowledged: %s", plain, res)
	}
	tres := checkTxns(ledger, readTxnTopic(t, c.kafka, txn, true), watch())
	if tres.ok() {
		t.Logf("transactional load, read back read_committed from the bucket: %s", tres)
	} else {
		t.Errorf("%s, read back read_committed from the bucket: %s", txn, tres)
	}
	if failed := c.uploadFailuresSince(mark); len(failed) > 0 {
		t.Errorf("%d upload passes failed after the deposed leaders led again, want none:\n%s", len(failed), sample(failed, 5))
	}
	if found := above(); len(found) > 0 {
		t.Errorf("%d local logs started above the bucket's end: records deleted that the bucket's current manifest does not hold:\n%s", len(found), sample(found, 5))
	}
}

// watchLocalStarts samples, until stop, the first local offset of every
// partition of topics on every running node against the end of the
// bucket's current manifest. A node deletes a local segment only once
// the bucket holds it, so no local log may start above the bucket's end;
// one that does deleted records on the strength of a manifest that is
// not the bucket's current one (a deposed leader's), and those records
// are on none of its disks and not in the bucket. stop returns each
// violation, once per node and partition.
func watchLocalStarts(t *testing.T, c *cluster, b *bucketReader, topics map[string]int32) (stop func() []string) {
	t.Helper()
	type part struct {
		tp    format.TopicPartition
		index int
	}
	var parts []part
	for topic, n := range topics {
		id := c.topicID(c.up()[0], topic)
		for p := range n {
			parts = append(parts, part{format.TopicPartition{Topic: topic, TopicID: id, Partition: p}, int(p)})
		}
	}
	done := make(chan struct{})
	result := make(chan []string)
	go func() {
		seen := map[string]bool{}
		var found []string
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				result <- found
				return
			case <-tick.C:
			}
			for _, id := range c.up() {
				for _, p := range parts {
					// Local start first: the bucket's end only grows.
					start := localStart(t, c.dirs[id-1], p.tp.Topic, p.index)
					end, err := b.end(p.tp)
					key := fmt.Sprintf("%d %s-%d", id, p.tp.Topic, p.index)
					if err != nil || end == 0 || start <= end || seen[key] {
						continue
					}
					seen[key] = true
					found = append(found, fmt.Sprintf("%s: node %d's local log of %s-%d starts at %d, above the bucket's end %d",
						time.Now().Format("15:04:05.000"), id, p.tp.Topic, p.index, start, end))
				}
			}
		}
	}()
	return func() []string {
		close(done)
		return <-result
	}
}
