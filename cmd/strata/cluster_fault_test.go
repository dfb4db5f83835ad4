package main

import (
	"context"
	be "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
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
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The process tests of issue 11 ("Done when"): a cluster of real strata
// serve processes, real Kafka clients, and faults a machine suffers. What
// each asserts is what a user checks after the fault: every acknowledged
// record is there, once, at its offset, in order (cluster_check_test.go),
// and the cluster serves again on its own.

// load is a steady stream of records from idempotent acks=all producers,
// each record's value naming its producer and sequence, spread over the
// partitions in turn. It keeps every record's fate for the checker and
// every acknowledgement's time for the stall measurement.
type load struct {
	t          *testing.T
	partitions int32
	cancel     context.CancelFunc
	wg         sync.WaitGroup
	clients    []*kgo.Client

	mu      sync.Mutex
	history map[string][]sentRecord
	acks    map[int32][]time.Time // acknowledgement times per partition, in order
	failed  []error               // produce errors, in the order seen
}

// startLoad starts producers each sending perSecond records a second to
// topic through cluster c.
func startLoad(t *testing.T, c *cluster, topic string, partitions int32, producers, perSecond int, opts ...kgo.Opt) *load {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{t: t, partitions: partitions, cancel: cancel, history: map[string][]sentRecord{}, acks: map[int32][]time.Time{}}
	t.Cleanup(l.stopSending)
	for p := range producers {
		name := fmt.Sprintf("p%d", p)
		cl := c.client(append([]kgo.Opt{
			kgo.DefaultProduceTopic(topic),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.ProducerLinger(5 * time.Millisecond),
			// franz-go refreshes metadata at most every 5 s by default,
			// which would be most of every stall measured here; Kafka's
			// Java client refreshes after retry.backoff.ms (100 ms).
			kgo.MetadataMinAge(250 * time.Millisecond),
		}, opts...)...)
		l.clients = append(l.clients, cl)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(time.Second / time.Duration(perSecond))
			defer tick.Stop()
			for seq := 0; ; seq++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				r := &kgo.Record{Partition: int32(seq) % partitions, Value: fmt.Appendf(nil, "%s-%08d", name, seq)}
				l.mu.Lock()
				l.history[name] = append(l.history[name], sentRecord{partition: r.Partition, value: string(r.Value), offset: -1})
				l.mu.Unlock()
				// The producer's own context: records still buffered when
				// sending stops are flushed, not failed.
				cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
					l.mu.Lock()
					defer l.mu.Unlock()
					now := time.Now() // under the lock, so each partition's times are in order
					s := &l.history[name][seq]
					if err != nil {
						s.err = err
						l.failed = append(l.failed, fmt.Errorf("%s partition %d: %w", s.value, s.partition, err))
						return
					}
					s.acked, s.offset = true, r.Offset
					l.acks[r.Partition] = append(l.acks[r.Partition], now)
				})
			}
		}()
	}
	return l
}

func (l *load) stopSending() {
	l.cancel()
	l.wg.Wait()
}

// stop stops sending, waits up to a minute for the records in flight and
// closes the producers, which fails whatever is still unanswered.
func (l *load) stop() {
	l.t.Helper()
	l.stopSending()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, cl := range l.clients {
		if err := cl.Flush(ctx); err != nil {
			l.t.Logf("flushing a producer: %v", err)
		}
		cl.Close()
	}
}

// acked counts the acknowledged records so far.
func (l *load) acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ts := range l.acks {
		n += len(ts)
	}
	return n
}

// waitAcked waits until n more records than now are acknowledged.
func (l *load) waitAcked(c *cluster, n int, timeout time.Duration) {
	l.t.Helper()
	want := l.acked() + n
	c.waitFor(fmt.Sprintf("%d records acknowledged", want), timeout, func() bool { return l.acked() >= want },
		func() string { return fmt.Sprintf("%d acknowledged, errors %v", l.acked(), l.errors(3)) })
}

// waitResumed waits until every partition has acknowledged a record
// after at.
func (l *load) waitResumed(c *cluster, at time.Time, timeout time.Duration) {
	l.t.Helper()
	stalled := func() []int32 {
		l.mu.Lock()
		defer l.mu.Unlock()
		var ps []int32
		for p := range l.partitions {
			if ts := l.acks[p]; len(ts) == 0 || !ts[len(ts)-1].After(at) {
				ps = append(ps, p)
			}
		}
		return ps
	}
	c.waitFor("every partition acknowledging again", timeout, func() bool { return len(stalled()) == 0 },
		func() string {
			return fmt.Sprintf("no acknowledgement on partitions %v; errors %v", stalled(), l.errors(3))
		})
}

// errors returns up to n of the produce errors seen.
func (l *load) errors(n int) []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.failed[:min(n, len(l.failed))]...)
}

// stall is the longest gap in acknowledgements over at, across the
// partitions: from the last acknowledgement before at to the first after.
// A partition that never acknowledged again after at counts as a stall up
// to the end of the run, and ok is false.
func (l *load) stall(at, end time.Time) (worst time.Duration, partition int32, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ok = true
	for p := range l.partitions {
		ts := l.acks[p]
		i := sort.Search(len(ts), func(i int) bool { return ts[i].After(at) })
		from := at
		if i > 0 {
			from = ts[i-1]
		}
		to := end
		if i < len(ts) {
			to = ts[i]
		} else {
			ok = false
		}
		if d := to.Sub(from); d > worst {
			worst, partition = d, p
		}
	}
	return worst, partition, ok
}

// historyCopy is the history for the checker.
func (l *load) historyCopy() map[string][]sentRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string][]sentRecord{}
	for k, v := range l.history {
		out[k] = append([]sentRecord(nil), v...)
	}
	return out
}

// readBack reads every partition of topic from the start up to its end
// offsets (read_uncommitted, from the leaders).
func readBack(t *testing.T, c *cluster, topic string) []readRecord {
	t.Helper()
	var out []readRecord
	// readAll's client learns the other nodes from the first running one.
	up := c.up()
	if len(up) == 0 {
		t.Fatal("no node running to read from")
	}
	for p, recs := range readAll(t, c.addr(up[0]), topic, c.clientOpts...) {
		for _, r := range recs {
			out = append(out, readRecord{partition: p, offset: r.Offset, value: string(r.Value)})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].partition != out[j].partition {
			return out[i].partition < out[j].partition
		}
		return out[i].offset < out[j].offset
	})
	return out
}

// checkLoad stops l, reads topic back and checks it, printing the counts.
func checkLoad(t *testing.T, c *cluster, l *load, topic string) checkResult {
	t.Helper()
	l.stop()
	res := check(l.historyCopy(), readBack(t, c, topic))
	t.Logf("checker: %s", res)
	if res.acked == 0 {
		t.Errorf("no record was acknowledged")
	}
	if !res.ok() {
		t.Errorf("the log read back does not hold what was acknowledged: %s", res)
	}
	return res
}

// mostLeader is a node leading the most partitions of ps.
func mostLeader(ps map[int32]partitionState, rng *rand.Rand) int32 {
	counts := leaders(ps)
	var best []int32
	most := 0
	for id, n := range counts {
		switch {
		case n > most:
			best, most = []int32{id}, n
		case n == most:
			best = append(best, id)
		}
	}
	sort.Slice(best, func(i, j int) bool { return best[i] < best[j] })
	if len(best) == 0 {
		return -1
	}
	return best[rng.IntN(len(best))]
}

func newRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("STRATA_FAULT_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("random seed %d (STRATA_FAULT_SEED repeats it)", seed)
	return rand.New(rand.NewPCG(seed, seed))
}

func configs(kv ...string) map[string]*string {
	m := map[string]*string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kadm.StringPtr(kv[i+1])
	}
	return m
}

// TestClusterKillLeaderLosesNothing: idempotent acks=all producers write
// steadily to 6 partitions (RF 3, min.insync.replicas 2) while a broker
// leading partitions is killed with SIGKILL and restarted on its data,
// over and over. Every acknowledged record is read back exactly once, at
// the offset its acknowledgement named, in order; the longest produce
// stall of each kill is printed.
func TestClusterKillLeaderLosesNothing(t *testing.T) {
	rounds := faultRounds(t, 10, 2)
	rng := newRand(t)
	c := startCluster(t, 3, clusterSettings{})
	const topic = "kill"
	c.createTopic(topic, 6, 3, configs("min.insync.replicas", "2"))
	l := startLoad(t, c, topic, 6, 2, 150)
	l.waitAcked(c, 300, 30*time.Second)

	type kill struct {
		node int32
		at   time.Time
	}
	var kills []kill
	for round := range rounds {
		ps := c.waitISR(topic, time.Minute)
		victim := mostLeader(ps, rng)
		k := kill{victim, time.Now()}
		c.kill(victim)
		kills = append(kills, k)
		down := time.Second + time.Duration(rng.Int64N(int64(4*time.Second)))
		t.Logf("round %d: killed node %d (leading %d of 6 partitions), restarting it in %s", round+1, victim, leaders(ps)[victim], down.Round(time.Millisecond))
		time.Sleep(down)
		c.restart(victim)
		c.waitISR(topic, time.Minute)
		// Each kill's stall ends before the next kill.
		l.waitResumed(c, k.at, time.Minute)
	}
	end := time.Now()
	for i, k := range kills {
		worst, p, resumed := l.stall(k.at, end)
		t.Logf("kill %d (node %d): longest produce stall %s (partition %d)", i+1, k.node, worst.Round(time.Millisecond), p)
		if !resumed {
			t.Errorf("kill %d (node %d): partition %d acknowledged nothing after it", i+1, k.node, p)
		}
	}
	checkLoad(t, c, l, topic)
}

// rawProduce sends one batch of one record to node id, and only to it,
// with the given acks, and returns the partition's error and the offset.
func rawProduce(c *cluster, id int32, topic string, topicID [16]byte, partition int32, acks int16, value string) (int64, error) {
	// kgo writes its own acks setting into a raw ProduceRequest.
	opts := []kgo.Opt{kgo.SeedBrokers(c.addr(id)), kgo.RequestRetries(0)}
	if acks != -1 {
		opts = append(opts, kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return -1, err
	}
	defer cl.Close()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = acks
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic, rt.TopicID = topic, topicID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = nowBatch(value)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := req.RequestWith(ctx, cl.SeedBrokers()[0])
	if err != nil {
		return -1, err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return -1, fmt.Errorf("produce response for %d topics", len(resp.Topics))
	}
	p := resp.Topics[0].Partitions[0]
	return p.BaseOffset, kerr.ErrorForCode(p.ErrorCode)
}

// nowBatch encodes a v2 record batch of one record stamped now, so that
// time retention leaves it alone.
func nowBatch(value string) []byte {
	now := time.Now().UnixMilli()
	rb := kmsg.RecordBatch{Magic: 2, NumRecords: 1, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, FirstTimestamp: now, MaxTimestamp: now}
	r := kmsg.Record{Value: []byte(value)}
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	rb.Records = r.AppendTo(nil)
	raw := rb.AppendTo(nil)
	be.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	be.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

// topicID is topic's id as node id's metadata shows it.
func (c *cluster) topicID(id int32, topic string) [16]byte {
	c.t.Helper()
	resp, err := c.tryMetadata(id)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, tp := range resp.Topics {
		if tp.Topic != nil && *tp.Topic == topic {
			return tp.TopicID
		}
	}
	c.t.Fatalf("node %d has no topic %s", id, topic)
	return [16]byte{}
}

func followersOf(s partitionState) []int32 {
	var f []int32
	for _, r := range s.replicas {
		if r != s.leader {
			f = append(f, r)
		}
	}
	return f
}

// TestClusterPauseAndHeal: a follower paused (SIGSTOP) past
// replica.lag.time.max.ms leaves the ISR while acks=all keeps working;
// with both followers out acks=all is refused with NOT_ENOUGH_REPLICAS
// (min.insync.replicas 2); after SIGCONT both catch up and rejoin, and
// every acknowledged record is there.
//
// Five voters, so that the quorum survives two paused nodes and the
// controller can take the paused followers out of the ISR; a session
// timeout well above the lag time, so that the lag takes them out, not
// fencing.
func TestClusterPauseAndHeal(t *testing.T) {
	c := startCluster(t, 5, clusterSettings{replicaLag: 2 * time.Second, sessionTimeout: 20 * time.Second, heartbeat: time.Second})
	const topic = "pause"
	ps := c.createTopic(topic, 1, 3, configs("min.insync.replicas", "2"))
	leader := ps[0].leader
	followers := followersOf(ps[0])
	if len(followers) != 2 {
		t.Fatalf("partition 0: leader %d replicas %v", leader, ps[0].replicas)
	}
	id := c.topicID(leader, topic)

	history := map[string][]sentRecord{}
	seq := 0
	produce := func() error {
		v := fmt.Sprintf("pause-%04d", seq)
		seq++
		off, err := rawProduce(c, leader, topic, id, 0, -1, v)
		history["raw"] = append(history["raw"], sentRecord{partition: 0, value: v, acked: err == nil, offset: off, err: err})
		return err
	}
	isrOf := func() []int32 {
		ps, err := c.partitionsOf(leader, topic)
		if err != nil {
			return nil
		}
		return ps[0].isr
	}
	waitISR := func(want []int32) {
		t.Helper()
		sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
		c.waitFor(fmt.Sprintf("ISR %v", want), 30*time.Second, func() bool { return fmt.Sprint(isrOf()) == fmt.Sprint(want) },
			func() string { return fmt.Sprint(isrOf()) })
	}
	for range 10 {
		if err := produce(); err != nil {
			t.Fatalf("acks=all with every replica in sync: %v", err)
		}
	}

	c.pause(followers[0])
	waitISR([]int32{leader, followers[1]})
	t.Logf("node %d paused: out of the ISR", followers[0])
	for range 10 {
		if err := produce(); err != nil {
			t.Fatalf("acks=all with one follower out of the ISR: %v", err)
		}
	}

	c.pause(followers[1])
	waitISR([]int32{leader})
	t.Logf("node %d paused too: the ISR is the leader alone", followers[1])
	if err := produce(); !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("acks=all with the ISR below min.insync.replicas: %v, want NOT_ENOUGH_REPLICAS", err)
	}

	c.resume(followers[0])
	c.resume(followers[1])
	waitISR([]int32{leader, followers[0], followers[1]})
	t.Logf("both resumed: back in the ISR")
	for range 10 {
		if err := produce(); err != nil {
			t.Fatalf("acks=all after the followers rejoined: %v", err)
		}
	}
	res := check(history, readBack(t, c, topic))
	t.Logf("checker: %s", res)
	if !res.ok() {
		t.Errorf("%s", res)
	}
}

// TestClusterRollingRestart: each node in turn is stopped with SIGTERM (a
// controlled shutdown moves its leaderships away first), restarted, and
// waited for until it is back in every ISR, under steady acks=all load.
// Producers see no error that is not retriable, nothing is lost, and
// leadership ends on the preferred replicas.
func TestClusterRollingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts every node: not under -short")
	}
	c := startCluster(t, 3, clusterSettings{})
	const topic = "roll"
	c.createTopic(topic, 6, 3, configs("min.insync.replicas", "2"))
	l := startLoad(t, c, topic, 6, 2, 150)
	l.waitAcked(c, 300, 30*time.Second)
	for id := int32(1); id <= 3; id++ {
		start := time.Now()
		c.term(id)
		c.restart(id)
		c.waitISR(topic, time.Minute)
		t.Logf("node %d: stopped, restarted and back in every ISR in %s", id, time.Since(start).Round(time.Millisecond))
		l.waitAcked(c, 100, 30*time.Second)
	}
	checkLoad(t, c, l, topic)
	for _, err := range l.errors(len(l.failed)) {
		var ke *kerr.Error
		if !errors.As(err, &ke) || !ke.Retriable {
			t.Errorf("producer error that is not retriable: %v", err)
		}
	}

	preferred := func() (bool, string) {
		ps, err := c.partitions(topic)
		if err != nil {
			return false, err.Error()
		}
		var off []string
		for p, s := range ps {
			if len(s.replicas) == 0 || s.leader != s.replicas[0] {
				off = append(off, fmt.Sprintf("partition %d led by %d, replicas %v", p, s.leader, s.replicas))
			}
		}
		sort.Strings(off)
		return len(off) == 0, strings.Join(off, "; ")
	}
	balanced := func(within time.Duration) (bool, string) {
		var state string
		for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			ok, s := preferred()
			if ok {
				return true, ""
			}
			state = s
		}
		return false, state
	}
	// auto.leader.rebalance.enable is on by default; failing that, an
	// operator asks for it.
	if ok, state := balanced(15 * time.Second); !ok {
		t.Logf("not on the preferred replicas 15s after the last restart (%s): running strata cluster elect-leaders", state)
		code, stdout, stderr := runCLI(t, nil, "cluster", "elect-leaders", "--bootstrap", c.bootstrap())
		if code != 0 {
			t.Errorf("strata cluster elect-leaders: exit %d\n%s%s", code, stdout, stderr)
		}
		if ok, state := balanced(15 * time.Second); !ok {
			t.Fatalf("leadership not on the preferred replicas: %s", state)
		}
	}
	ps, _ := c.partitions(topic)
	t.Logf("leaders per node at the end: %v", leaders(ps))
}

// TestClusterKillController: after SIGKILL of the controller, the others
// elect a new one within seconds; every topic created before is there,
// under the same id, and creating topics works again.
func TestClusterKillController(t *testing.T) {
	c := startCluster(t, 3, clusterSettings{})
	before := map[string][16]byte{}
	for i := range 5 {
		name := fmt.Sprintf("before-%d", i)
		c.createTopic(name, 3, 1, nil)
		before[name] = [16]byte{}
	}
	ctrl := c.waitController()
	for name := range before {
		before[name] = c.topicID(ctrl, name)
	}
	start := time.Now()
	c.kill(ctrl)
	next := c.waitController()
	took := time.Since(start)
	t.Logf("controller %d killed: node %d is controller after %s", ctrl, next, took.Round(time.Millisecond))
	if next == ctrl {
		t.Fatalf("the dead node %d is still named controller", ctrl)
	}
	if took > 15*time.Second {
		t.Errorf("a new controller took %s, want under 15s", took)
	}
	for _, id := range c.up() {
		resp, err := c.tryMetadata(id)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string][16]byte{}
		for _, tp := range resp.Topics {
			if tp.Topic != nil {
				got[*tp.Topic] = tp.TopicID
			}
		}
		for name, want := range before {
			if got[name] != want {
				t.Errorf("node %d: topic %s has id %x, want %x (created before the kill)", id, name, got[name], want)
			}
		}
	}
	// Two replicas: the dead node may not be fenced yet, and a partition
	// placed on it alone would have no leader until it comes back.
	c.create("after", 3, 2, nil)
	var state string
	c.waitFor("topic after led by running nodes", 30*time.Second, func() bool {
		for _, id := range c.up() {
			ps, err := c.partitionsOf(id, "after")
			if err != nil {
				state = err.Error()
				return false
			}
			for p, s := range ps {
				if !contains(c.up(), s.leader) {
					state = fmt.Sprintf("node %d: partition %d led by %d", id, p, s.leader)
					return false
				}
			}
		}
		return true
	}, func() string { return state })
	c.restart(ctrl)
	c.waitController()
	if _, err := c.partitionsOf(ctrl, "after"); err != nil {
		t.Errorf("the old controller, restarted: %v", err)
	}
}

// tierLs lists a partition's current manifest in the shared bucket.
func tierLs(t *testing.T, c *cluster, topic string, partition int32) (listedManifest, bool) {
	t.Helper()
	args := append([]string{"tier", "ls", topic, fmt.Sprint(partition), "--json", "--bootstrap", c.bootstrap(), "--timeout", "5s"}, bucketFlags(c.bucketDir)...)
	code, stdout, stderr := runCLI(t, nil, args...)
	if code != 0 {
		if strings.Contains(stderr, "no manifest") {
			return listedManifest{}, false
		}
		t.Fatalf("strata %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	}
	var m listedManifest
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatalf("tier ls --json: %v\n%s", err, stdout)
	}
	return m, true
}

// TestClusterComeBackStale: the leader takes acks=1 writes its (paused)
// followers never get and is killed; a follower, still in the ISR, is
// elected and takes other writes at the same offsets; the old leader
// restarts, truncates what it alone had and catches up, so that made
// leader again it serves the new leader's records at the same offsets.
// Nothing it uploaded to the shared bucket after being deposed is in the
// current manifest.
func TestClusterComeBackStale(t *testing.T) {
	c := startCluster(t, 3, clusterSettings{
		// Long enough that the paused followers stay in the ISR, so one of
		// them is elected cleanly.
		replicaLag:   time.Minute,
		sharedBucket: true,
		extra:        []string{"--tier-upload-interval", "200ms"},
	})
	const topic = "stale"
	ps := c.createTopic(topic, 1, 3, configs("min.insync.replicas", "2", "segment.bytes", "4096"))
	old := ps[0].leader
	if old != ps[0].replicas[0] {
		t.Fatalf("new partition led by %d, not its preferred replica %v", old, ps[0].replicas)
	}
	followers := followersOf(ps[0])
	oldEpoch := ps[0].epoch
	id := c.topicID(old, topic)
	history := map[string][]sentRecord{}
	// notAppended are the errors a leader answers before appending, so a
	// retry cannot duplicate the record.
	notAppended := []error{kerr.NotLeaderForPartition, kerr.LeaderNotAvailable, kerr.NotEnoughReplicas, kerr.UnknownTopicOrPartition}
	send := func(to int32, acks int16, prefix string, n int) {
		t.Helper()
		for i := range n {
			v := fmt.Sprintf("%s-%04d-%s", prefix, i, strings.Repeat("x", 100))
			off, err := rawProduce(c, to, topic, id, 0, acks, v)
			for try := 0; err != nil && try < 50 && slices.ContainsFunc(notAppended, func(e error) bool { return errors.Is(err, e) }); try++ {
				time.Sleep(200 * time.Millisecond)
				if ps, perr := c.partitions(topic); perr == nil && ps[0].leader >= 0 {
					to = ps[0].leader
				}
				off, err = rawProduce(c, to, topic, id, 0, acks, v)
			}
			if err != nil {
				t.Fatalf("produce %s to node %d (acks=%d): %v", v, to, acks, err)
			}
			if acks == -1 {
				history[prefix] = append(history[prefix], sentRecord{partition: 0, value: v, acked: true, offset: off})
			} else {
				// acks=1 to a leader nobody follows: allowed to be lost.
				history[prefix] = append(history[prefix], sentRecord{partition: 0, value: v, err: errors.New("acks=1 only")})
			}
		}
	}
	send(old, -1, "first", 200)

	for _, f := range followers {
		c.pause(f)
	}
	send(old, 1, "only-old", 200)
	c.kill(old)
	for _, f := range followers {
		c.resume(f)
	}
	var now partitionState
	c.waitFor("a follower elected", 30*time.Second, func() bool {
		ps, err := c.partitions(topic)
		if err != nil {
			return false
		}
		now = ps[0]
		return contains(followers, now.leader) && now.epoch > oldEpoch
	}, func() string { return fmt.Sprintf("%+v", now) })
	t.Logf("node %d killed after 200 acks=1 records its paused followers had not fetched; node %d leads at epoch %d", old, now.leader, now.epoch)
	send(now.leader, -1, "new", 300)
	want := readBack(t, c, topic)
	// A follower may still take the first of the old leader's last
	// records: a fetch answer sent as it was paused waits in its socket.
	// The rest are the old leader's alone, and the new leader's history
	// begins after what it took.
	diverge := history["new"][0].offset
	shared := 0
	for _, r := range want {
		if strings.HasPrefix(r.value, "only-old") {
			shared++
		}
	}
	t.Logf("the new leader had %d of the old leader's 200 acks=1 records; its epoch starts at offset %d", shared, diverge)
	if shared == 200 {
		t.Fatalf("the new leader has every record the old one took alone: nothing diverged, the scenario tested nothing")
	}

	c.restart(old)
	c.waitISR(topic, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := kadm.NewClient(c.client())
	c.waitFor(fmt.Sprintf("node %d leading again", old), 30*time.Second, func() bool {
		adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, kadm.TopicsSet{topic: {0: {}}})
		ps, err := c.partitions(topic)
		return err == nil && ps[0].leader == old
	}, func() string { ps, err := c.partitions(topic); return fmt.Sprint(ps, err) })

	got := readBack(t, c, topic)
	res := check(history, got)
	t.Logf("checker (read from the old leader, leading again): %s", res)
	if !res.ok() {
		t.Errorf("%s", res)
	}
	// The old leader truncated what only it had and copied the new
	// leader's records: the same log, record for record.
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			t.Fatalf("the old leader serves %d records, the new leader served %d: %+v is missing", len(got), len(want), want[i])
		case i >= len(want):
			t.Fatalf("the old leader serves %d records, the new leader served %d: %+v is extra", len(got), len(want), got[i])
		case got[i] != want[i]:
			t.Fatalf("the old leader serves %+v where the new leader served %+v", got[i], want[i])
		}
	}

	// What the bucket says: no segment of the old leader's epoch reaches
	// past the point where the new leader's history begins.
	var m listedManifest
	c.waitFor("the new leader's records in the bucket", 30*time.Second, func() bool {
		var ok bool
		m, ok = tierLs(t, c, topic, 0)
		return ok && m.EndOffset > diverge
	}, func() string { return fmt.Sprintf("manifest %+v", m) })
	for _, s := range m.Segments {
		if s.LeaderEpoch <= oldEpoch && s.LastOffset >= diverge {
			t.Errorf("the current manifest holds %s (offsets %d-%d, epoch %d): uploaded by the deposed leader past offset %d",
				s.Key, s.BaseOffset, s.LastOffset, s.LeaderEpoch, diverge)
		}
	}
}

// TestClusterGroupSurvivesFailover: a consumer group consumes while the
// node coordinating it is killed and restarted; its committed offsets
// survive and no record is skipped.
func TestClusterGroupSurvivesFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("not under -short")
	}
	c := startCluster(t, 3, clusterSettings{offsetsPartitions: 3})
	const topic, group = "groups", "failover"
	c.createTopic(topic, 3, 3, configs("min.insync.replicas", "2"))
	l := startLoad(t, c, topic, 3, 1, 200)

	var mu sync.Mutex
	seen := map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	consumer := c.client(kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitInterval(500*time.Millisecond))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			fs := consumer.PollFetches(ctx)
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
			mu.Unlock()
		}
	}()
	stopConsumer := sync.OnceFunc(func() { cancel(); wg.Wait(); consumer.Close() })
	t.Cleanup(stopConsumer)
	consumed := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	c.waitFor("the group consuming", 30*time.Second, func() bool { return consumed() >= 500 }, func() string { return fmt.Sprint(consumed()) })

	adm := kadm.NewClient(c.client())
	var fetchErr error // the last committed call's, for the failure message
	// A new client each time, as each run of an admin tool is: a client
	// that knew the dead coordinator keeps dialling it until its metadata
	// is refreshed, which says nothing about the cluster.
	committed := func() map[int32]int64 {
		actx, acancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer acancel()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.kafka...))
		if fetchErr = err; err != nil {
			return nil
		}
		defer cl.Close()
		out := map[int32]int64{}
		offs, err := kadm.NewClient(cl).FetchOffsets(actx, group)
		if fetchErr = err; err != nil {
			return nil
		}
		offs.Each(func(o kadm.OffsetResponse) {
			if o.Err != nil {
				fetchErr = o.Err
			} else if o.Topic == topic {
				out[o.Partition] = o.At
			}
		})
		return out
	}
	var before map[int32]int64
	c.waitFor("committed offsets", 30*time.Second, func() bool { before = committed(); return len(before) == 3 },
		func() string { return fmt.Sprintf("%v (error %v)", before, fetchErr) })
	fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer fcancel()
	coord := adm.FindGroupCoordinators(fctx, group)[group]
	if coord.Err != nil {
		t.Fatalf("FindCoordinator: %v", coord.Err)
	}
	t.Logf("group coordinator: node %d; committed before the kill: %v", coord.NodeID, before)
	c.kill(coord.NodeID)
	// The new coordinator answers once it has loaded the group's offsets:
	// never older ones than were committed before.
	var after map[int32]int64
	c.waitFor("committed offsets from a new coordinator", 30*time.Second, func() bool { after = committed(); return len(after) == 3 },
		func() string {
			fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer fcancel()
			co := adm.FindGroupCoordinators(fctx, group)[group]
			ps, err := c.partitions("__consumer_offsets")
			return fmt.Sprintf("%v (error %v); FindCoordinator: node %d (%v); __consumer_offsets: %+v %v", after, fetchErr, co.NodeID, co.Err, ps, err)
		})
	for p, off := range before {
		if after[p] < off {
			t.Errorf("partition %d: committed offset %d after the coordinator's death, %d before", p, after[p], off)
		}
	}
	l.waitAcked(c, 500, time.Minute)
	c.restart(coord.NodeID)
	c.waitISR(topic, time.Minute)
	l.waitAcked(c, 300, 30*time.Second)
	l.stop()

	hist := l.historyCopy()
	missing := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var m []string
		for _, rs := range hist {
			for _, s := range rs {
				if s.acked && seen[s.value] == 0 {
					m = append(m, s.value)
				}
			}
		}
		return m
	}
	c.waitFor("every acknowledged record consumed", time.Minute, func() bool { return len(missing()) == 0 },
		func() string {
			m := missing()
			return fmt.Sprintf("%d not consumed, e.g. %v", len(m), m[:min(5, len(m))])
		})
	stopConsumer() // commits what was consumed as the member leaves
	ectx, ecancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ecancel()
	ends, err := kadm.NewClient(c.client()).ListEndOffsets(ectx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	final := committed()
	ends.Each(func(o kadm.ListedOffset) {
		if final[o.Partition] != o.Offset {
			t.Errorf("partition %d: committed %d at the end, the log ends at %d", o.Partition, final[o.Partition], o.Offset)
		}
	})
	res := check(hist, readBack(t, c, topic))
	t.Logf("checker: %s", res)
	if !res.ok() {
		t.Errorf("%s", res)
	}
}

// localStart is the base offset of the first local segment of topic's
// partition in node id's data dir, or -1 if it has none.
func (c *cluster) localStart(id int32, topic string, partition int) int64 {
	m := segmentsOf(c.t, partitionDir(c.t, c.dirs[id-1], topic, partition))
	if len(m) == 0 {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSuffix(filepath.Base(m[0]), ".log"), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// TestClusterTiering: with a shared bucket and small segments, records
// produced across several leader changes are all read back from the
// beginning once no node keeps the start of the log locally.
func TestClusterTiering(t *testing.T) {
	if testing.Short() {
		t.Skip("not under -short")
	}
	rng := newRand(t)
	c := startCluster(t, 3, clusterSettings{
		sharedBucket: true,
		extra:        []string{"--tier-upload-interval", "200ms"},
	})
	const topic = "tiered"
	c.createTopic(topic, 2, 3, configs("min.insync.replicas", "2", "segment.bytes", "8192", "local.retention.bytes", "8192"))
	l := startLoad(t, c, topic, 2, 2, 100)
	l.waitAcked(c, 200, 30*time.Second)
	for round := range 3 {
		ps := c.waitISR(topic, time.Minute)
		victim := ps[int32(round%2)].leader
		c.kill(victim)
		t.Logf("round %d: killed node %d, leader of partition %d", round+1, victim, round%2)
		time.Sleep(time.Second + time.Duration(rng.Int64N(int64(2*time.Second))))
		c.restart(victim)
		l.waitAcked(c, 200, 30*time.Second)
	}
	c.waitISR(topic, time.Minute)
	l.stop()
	c.waitFor("the start of the log gone from every node's disk", time.Minute, func() bool {
		for id := int32(1); id <= 3; id++ {
			for p := range 2 {
				if c.localStart(id, topic, p) <= 0 {
					return false
				}
			}
		}
		return true
	}, func() string {
		var s []string
		for id := int32(1); id <= 3; id++ {
			s = append(s, fmt.Sprintf("node %d: %d, %d", id, c.localStart(id, topic, 0), c.localStart(id, topic, 1)))
		}
		return strings.Join(s, "; ")
	})
	res := check(l.historyCopy(), readBack(t, c, topic))
	t.Logf("checker: %s", res)
	if !res.ok() {
		t.Errorf("%s", res)
	}
}

// TestClusterBadInput: what an operator can get wrong about a cluster is
// refused in one line, and a replica fetch from a broker that holds no
// replica is refused.
func TestClusterBadInput(t *testing.T) {
	t.Run("voters", func(t *testing.T) {
		// Duplicate ids and a missing port are in TestUsageErrorsExitTwo.
		for _, tt := range []struct {
			voters string
			want   []string
		}{
			{"1@127.0.0.1:9093,2@127.0.0.1:9093", []string{"--voters", "address 127.0.0.1:9093 twice"}},
			{"-1@127.0.0.1:9093", []string{"--voters", "negative"}},
			{"1@127.0.0.1:9093,127.0.0.1:9094", []string{"--voters", "not ID@HOST:PORT"}},
			{"x@127.0.0.1:9093", []string{"--voters", `"x"`}},
		} {
			code, stdout, stderr := runCLI(t, nil, "serve", "--data-dir", t.TempDir(), "--voters", tt.voters, "--raft-listen", "127.0.0.1:9093")
			if code != 2 || stdout != "" {
				t.Errorf("--voters %s: exit %d, stdout %q", tt.voters, code, stdout)
			}
			assertOneLineError(t, stderr, tt.want...)
		}
	})

	c := startCluster(t, 3, clusterSettings{})
	// The cluster belongs to the whole test, so what follows is not in
	// subtests, which must not fail their parent.
	{
		ps := c.createTopic("bad-fetch", 1, 3, nil)
		leader := ps[0].leader
		if _, err := rawProduce(c, leader, "bad-fetch", c.topicID(leader, "bad-fetch"), 0, -1, "secret"); err != nil {
			t.Fatal(err)
		}
		cl := newClient(t, c.addr(leader))
		id := c.topicID(leader, "bad-fetch")
		fetchAs := func(replica int32) (*kmsg.FetchResponse, error) {
			req := kmsg.NewPtrFetchRequest()
			req.ReplicaID = replica // up to v14
			req.ReplicaState.ID = replica
			req.ReplicaState.Epoch = -1
			if replica >= 0 {
				req.ReplicaState.Epoch = 1
			}
			req.MaxBytes = 1 << 20
			req.MaxWaitMillis = 500
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = "bad-fetch", id
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.PartitionMaxBytes = 1 << 20
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return req.RequestWith(ctx, cl.SeedBrokers()[0])
		}
		// The same fetch as a consumer gets the record: what refuses the
		// next one is the replica id alone.
		resp, err := fetchAs(-1)
		if err != nil || resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 ||
			resp.Topics[0].Partitions[0].ErrorCode != 0 || len(resp.Topics[0].Partitions[0].RecordBatches) == 0 {
			t.Fatalf("a consumer's fetch from the leader: %v %+v", err, resp)
		}
		// Refused means a closed connection, an error for the request or
		// one for the partition, and no records in any case.
		resp, err = fetchAs(99)
		switch {
		case err != nil:
			t.Logf("fetch as replica 99: connection closed: %v", err)
		case resp.ErrorCode != 0:
			t.Logf("fetch as replica 99: refused with %v", kerr.ErrorForCode(resp.ErrorCode))
		case len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1:
			t.Errorf("fetch as replica 99: response for %d topics", len(resp.Topics))
		default:
			p := resp.Topics[0].Partitions[0]
			if p.ErrorCode == 0 || len(p.RecordBatches) > 0 {
				t.Errorf("a fetch as replica 99, which holds no replica: error %v and %d bytes of records, want it refused",
					kerr.ErrorForCode(p.ErrorCode), len(p.RecordBatches))
			} else {
				t.Logf("fetch as replica 99: refused with %v", kerr.ErrorForCode(p.ErrorCode))
			}
		}
	}
	{
		// A broker-only node 4 (not a voter) joins and registers; a second
		// process claiming id 4 is refused while the first is alive.
		addrs := freeAddrs(t, 4)
		first := startNode(t, nil, append([]string{"serve", "--node-id", "4", "--data-dir", t.TempDir(), "--listen", addrs[0],
			"--http-listen", "off", "--raft-listen", addrs[1], "--voters", c.voters}, clusterFlags(c.settings, c.bucketDir)...)...)
		c.waitFor("node 4 registered", 30*time.Second, func() bool {
			resp, err := c.tryMetadata(1)
			if err != nil {
				return false
			}
			for _, b := range resp.Brokers {
				if b.NodeID == 4 {
					return true
				}
			}
			return false
		}, func() string { return "not in node 1's broker list" })
		_, _, stderr := runFailsEnv(t, nil, append([]string{"serve", "--node-id", "4", "--data-dir", t.TempDir(), "--listen", addrs[2],
			"--http-listen", "off", "--raft-listen", addrs[3], "--voters", c.voters}, clusterFlags(c.settings, c.bucketDir)...)...)
		assertOneLineError(t, lastLine(t, stderr), "4")
		if !strings.Contains(strings.ToLower(stderr), "registered") {
			t.Errorf("the error does not say the id is registered: %s", lastLine(t, stderr))
		}
		first.stop(t)
	}
}
