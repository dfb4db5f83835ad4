package broker

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// groupBroker is a test broker with group timeouts short enough for tests.
func groupBroker(t testing.TB, dir string, mutate ...func(*Config)) *Broker {
	return testBroker(t, dir, append([]func(*Config){func(c *Config) {
		c.OffsetsPartitions = 5
		c.GroupInitialRebalanceDelay = -1
		c.GroupMinSessionTimeout = 500 * time.Millisecond
	}}, mutate...)...)
}

// produceSeq writes records 0..n-1 (the value is the big-endian index)
// round-robin over the topic's partitions and waits for every ack.
func produceSeq(t testing.TB, b *Broker, topic string, from, n int) {
	t.Helper()
	cl := testClient(t, b,
		kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(2*time.Millisecond),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := from; i < from+n; i++ {
		v := binary.BigEndian.AppendUint64(nil, uint64(i))
		wg.Add(1)
		cl.Produce(ctx, &kgo.Record{Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.Store(err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// tally counts how often each record index was processed.
type tally struct {
	mu    sync.Mutex
	seen  []int32
	total atomic.Int64
	done  chan struct{}
	once  sync.Once
}

func newTally(n int) *tally { return &tally{seen: make([]int32, n), done: make(chan struct{})} }

func (tl *tally) add(r *kgo.Record) { tl.addBy(r, nil) }

func (tl *tally) addBy(r *kgo.Record, by *atomic.Int64) {
	if by != nil {
		by.Add(1)
	}
	i := binary.BigEndian.Uint64(r.Value)
	tl.mu.Lock()
	tl.seen[i]++
	tl.mu.Unlock()
	if tl.total.Add(1) >= int64(len(tl.seen)) {
		tl.once.Do(func() { close(tl.done) })
	}
}

// check reports records never processed (missing) and processed more than
// once (dups).
func (tl *tally) check() (missing, dups int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for _, c := range tl.seen {
		switch {
		case c == 0:
			missing++
		case c > 1:
			dups++
		}
	}
	return missing, dups
}

// groupConsumer runs a consumer that processes each polled batch before
// allowing a rebalance, so that with commits on revoke nothing is
// processed twice.
func groupConsumer(ctx context.Context, t testing.TB, b *Broker, group, topic string, tl *tally, opts ...kgo.Opt) (*kgo.Client, chan struct{}) {
	return groupConsumerCounting(ctx, t, b, group, topic, tl, nil, opts...)
}

func groupConsumerCounting(ctx context.Context, t testing.TB, b *Broker, group, topic string, tl *tally, by *atomic.Int64, opts ...kgo.Opt) (*kgo.Client, chan struct{}) {
	t.Helper()
	opts = append([]kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.BlockRebalanceOnPoll(),
		kgo.SessionTimeout(3 * time.Second),
		kgo.HeartbeatInterval(300 * time.Millisecond),
		kgo.AutoCommitInterval(200 * time.Millisecond),
	}, opts...)
	cl := testClient(t, b, opts...)
	return cl, pollLoop(ctx, cl, 1000, func(fs kgo.Fetches) {
		fs.EachRecord(func(r *kgo.Record) { tl.addBy(r, by) })
	})
}

// pollLoop polls cl until ctx ends or cl is closed, hands each poll to
// process and only then allows a rebalance (cl blocks rebalances on poll).
// The returned channel is closed when the loop has stopped.
func pollLoop(ctx context.Context, cl *kgo.Client, maxRecords int, process func(kgo.Fetches)) chan struct{} {
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for ctx.Err() == nil {
			fs := cl.PollRecords(ctx, maxRecords)
			if fs.IsClientClosed() {
				return
			}
			process(fs)
			cl.AllowRebalance()
		}
	}()
	return stopped
}

// TestGroupSharesTopicExactlyOnce is the first promise: three
// group consumers share a 12-partition topic while a producer writes, and
// with no failures every record is processed exactly once across the
// group, with the eager range balancer and with cooperative-sticky.
func TestGroupSharesTopicExactlyOnce(t *testing.T) {
	n := 300_000
	if testing.Short() {
		n = 30_000
	}
	for _, bal := range []struct {
		name string
		b    kgo.GroupBalancer
	}{{"range", kgo.RangeBalancer()}, {"cooperative-sticky", kgo.CooperativeStickyBalancer()}} {
		t.Run(bal.name, func(t *testing.T) {
			b := groupBroker(t, "")
			createTopic(t, testAdmin(t, b), "shared", 12, nil)
			tl := newTally(n)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var consumers []*kgo.Client
			var stops []chan struct{}
			counts := make([]atomic.Int64, 3)
			for i := range 3 {
				cl, stop := groupConsumerCounting(ctx, t, b, "sharers", "shared", tl, &counts[i], kgo.Balancers(bal.b))
				consumers, stops = append(consumers, cl), append(stops, stop)
			}
			waitFor(t, 10*time.Second, "three stable members", func() bool {
				st, _, m := groupSummary(t, b, "sharers")
				return st == "Stable" && m == 3
			})
			start := time.Now()
			produceSeq(t, b, "shared", 0, n)
			select {
			case <-tl.done:
			case <-ctx.Done():
				t.Fatalf("consumed %d of %d records before the deadline", tl.total.Load(), n)
			}
			elapsed := time.Since(start)
			cancel()
			for i, cl := range consumers {
				cl.Close()
				<-stops[i]
			}
			if missing, dups := tl.check(); missing != 0 || dups != 0 {
				t.Fatalf("%d records never processed, %d processed more than once", missing, dups)
			}
			for i := range counts {
				if counts[i].Load() == 0 {
					t.Errorf("consumer %d processed nothing: the group did not share the topic", i)
				}
			}
			t.Logf("%d records through 3 %s consumers in %s (%.0f records/s), %d rebalances",
				n, bal.name, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), b.groups.Stats().Rebalances)
		})
	}
}

// committedOffsets fetches a group's offsets.
func committedOffsets(t testing.TB, adm *kadm.Client, group string) kadm.OffsetResponses {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	os, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetch offsets of %s: %v", group, err)
	}
	return os
}

func groupSummary(t testing.TB, b *Broker, id string) (state string, generation int32, members int) {
	t.Helper()
	for _, s := range b.groups.Summaries(0) {
		if s.Group == id {
			return s.State, s.Generation, s.Members
		}
	}
	return "Dead", -1, 0
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// TestGroupMetrics: the scrape reports groups by state, commits and the
// lag of each committed partition.
func TestGroupMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := groupBroker(t, "", func(c *Config) { c.Registerer, c.Gatherer = reg, reg })
	adm := testAdmin(t, b)
	createTopic(t, adm, "lagging", 2, nil)
	produceSeq(t, b, "lagging", 0, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: "lagging", Partition: 0, At: 20, LeaderEpoch: -1})
	if err := adm.CommitAllOffsets(ctx, "watched", os); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			found[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for key, want := range map[string]float64{
		"strata_consumer_group_lag,group=watched,partition=0,topic=lagging": 30,
		"strata_consumer_groups,state=Empty":                                1,
		"strata_consumer_group_offset_commits_total":                        1,
	} {
		if got, ok := found[key]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
		}
	}
}
