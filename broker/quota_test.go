package broker

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// throttleHook counts the throttles a client was told about
// (throttle_time_ms > 0 in a response).
type throttleHook struct {
	n   atomic.Int64
	max atomic.Int64 // the longest, in ms
}

func (h *throttleHook) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, _ bool) {
	if d > 0 {
		h.n.Add(1)
		for ms := d.Milliseconds(); ; {
			cur := h.max.Load()
			if ms <= cur || h.max.CompareAndSwap(cur, ms) {
				break
			}
		}
	}
}

// quotaEntity builds a kadm entity from type, name pairs; a name of
// "<default>" is the default entity.
func quotaEntity(kv ...string) kadm.ClientQuotaEntity {
	var e kadm.ClientQuotaEntity
	for i := 0; i < len(kv); i += 2 {
		c := kadm.ClientQuotaEntityComponent{Type: kv[i]}
		if kv[i+1] != "<default>" {
			c.Name = ptr(kv[i+1])
		}
		e = append(e, c)
	}
	return e
}

func setQuota(t testing.TB, adm *kadm.Client, e kadm.ClientQuotaEntity, ops ...kadm.AlterClientQuotaOp) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{Entity: e, Ops: ops}})
	if err != nil {
		t.Fatalf("alter client quotas %s: %v", e, err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("alter client quotas %s: %v: %s", r.Entity, r.Err, r.ErrMessage)
		}
	}
}

// describeQuotas renders DescribeClientQuotas' answer as
// "{entity} key=value ..." lines.
func describeQuotas(t testing.TB, adm *kadm.Client, strict bool, cs ...kadm.DescribeClientQuotaComponent) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qs, err := adm.DescribeClientQuotas(ctx, strict, cs)
	if err != nil {
		t.Fatalf("describe client quotas: %v", err)
	}
	var out []string
	for _, q := range qs {
		s := q.Entity.String()
		for _, v := range q.Values {
			s += fmt.Sprintf(" %s=%g", v.Key, v.Value)
		}
		out = append(out, s)
	}
	return out
}

// KIP-546 through kadm: entries answered one by one, defaults as null
// names, validate-only, removal, and DescribeClientQuotas' filters.
func TestClientQuotasRoundTrip(t *testing.T) {
	b := testBroker(t, "")
	adm := testAdmin(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	res, err := adm.AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{
		{Entity: quotaEntity("user", "alice"), Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1024}, {Key: "request_percentage", Value: 12.5}}},
		{Entity: quotaEntity("user", "<default>"), Ops: []kadm.AlterClientQuotaOp{{Key: "consumer_byte_rate", Value: 2048}}},
		{Entity: quotaEntity("user", "alice", "client-id", "<default>"), Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 4096}}},
		{Entity: quotaEntity("client-id", "app"), Ops: []kadm.AlterClientQuotaOp{{Key: "controller_mutation_rate", Value: 3}}},
		// Refused one by one, without stopping the others.
		{Entity: quotaEntity("user", "bob"), Ops: []kadm.AlterClientQuotaOp{{Key: "bytes_per_fortnight", Value: 1}}},
		{Entity: quotaEntity("user", "bob"), Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: -1}}},
		{Entity: quotaEntity("user", "bob"), Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1.5}}},
		{Entity: quotaEntity("user", "bob", "user", "carol"), Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1}}},
		{Entity: quotaEntity("group", "g"), Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1}}},
		{Entity: nil, Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if want := i >= 4; (r.Err != nil) != want || want && !errors.Is(r.Err, kerr.InvalidRequest) {
			t.Errorf("entry %d (%s): err %v (%s)", i, r.Entity, r.Err, r.ErrMessage)
		}
	}
	if res[4].Entity.String() != "{user=bob}" {
		t.Errorf("a refused entry is answered for %s, want its own entity", res[4].Entity)
	}

	// Validate-only writes nothing.
	res, err = adm.ValidateAlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{Entity: quotaEntity("user", "dave"), Ops: []kadm.AlterClientQuotaOp{{Key: "producer_byte_rate", Value: 1}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("validate only: %v %v", err, res)
	}

	all := []string{
		"{user=<default>} consumer_byte_rate=2048",
		"{user=alice} producer_byte_rate=1024 request_percentage=12.5",
		"{user=alice, client-id=<default>} producer_byte_rate=4096",
		"{client-id=app} controller_mutation_rate=3",
	}
	if got := describeQuotas(t, adm, false); !reflect.DeepEqual(got, all) {
		t.Fatalf("all quotas:\n got %q\nwant %q", got, all)
	}
	exact := kadm.DescribeClientQuotaComponent{Type: "user", MatchName: ptr("alice"), MatchType: 0}
	for _, tc := range []struct {
		strict bool
		cs     []kadm.DescribeClientQuotaComponent
		want   []string
	}{
		{false, []kadm.DescribeClientQuotaComponent{exact}, all[1:3]},
		{true, []kadm.DescribeClientQuotaComponent{exact}, all[1:2]},
		{true, []kadm.DescribeClientQuotaComponent{{Type: "user", MatchType: 1}}, all[:1]},
		{false, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchType: 2}}, all[2:]},
		{true, []kadm.DescribeClientQuotaComponent{{Type: "client-id", MatchType: 2}}, all[3:]},
		{false, []kadm.DescribeClientQuotaComponent{exact, {Type: "client-id", MatchType: 1}}, all[2:3]},
		{false, []kadm.DescribeClientQuotaComponent{{Type: "user", MatchName: ptr("nobody")}}, nil},
	} {
		if got := describeQuotas(t, adm, tc.strict, tc.cs...); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("strict=%v %+v:\n got %q\nwant %q", tc.strict, tc.cs, got, tc.want)
		}
	}
	// A malformed filter is refused whole.
	if _, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "user", MatchType: 0}}); !errors.Is(err, kerr.InvalidRequest) {
		t.Errorf("exact match without a name: %v, want INVALID_REQUEST", err)
	}
	if _, err := adm.DescribeClientQuotas(ctx, false, []kadm.DescribeClientQuotaComponent{{Type: "group", MatchType: 2}}); !errors.Is(err, kerr.UnsupportedVersion) {
		t.Errorf("unknown entity type: %v, want UNSUPPORTED_VERSION", err)
	}

	// Removing a key leaves the others; removing the last drops the entity.
	setQuota(t, adm, quotaEntity("user", "alice"), kadm.AlterClientQuotaOp{Key: "producer_byte_rate", Remove: true})
	setQuota(t, adm, quotaEntity("client-id", "app"), kadm.AlterClientQuotaOp{Key: "controller_mutation_rate", Remove: true})
	want := []string{all[0], "{user=alice} request_percentage=12.5", all[2]}
	if got := describeQuotas(t, adm, false); !reflect.DeepEqual(got, want) {
		t.Fatalf("after removals:\n got %q\nwant %q", got, want)
	}

	// The quotas live in the metadata: they survive a restart.
	dir := b.cfg.DataDir
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = testBroker(t, dir)
	if got := describeQuotas(t, testAdmin(t, b), false); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a restart:\n got %q\nwant %q", got, want)
	}
}

// A quota set on a running broker applies to the next requests of
// connections already open, and removing it lifts it: no restart, no
// reconnect.
func TestQuotaChangeAppliesWithoutRestart(t *testing.T) {
	b := testBroker(t, "")
	adm := testAdmin(t, b)
	createTopic(t, adm, "q", 1, nil)
	var hook throttleHook
	cl := testClient(t, b, kgo.ClientID("changing"), kgo.DefaultProduceTopic("q"), kgo.WithHooks(&hook),
		kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(0))
	value := make([]byte, 64<<10)
	produce := func(n int) time.Duration {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		start := time.Now()
		for range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		return time.Since(start)
	}
	produce(64) // 4 MiB, no quota: no throttle
	if n := hook.n.Load(); n != 0 {
		t.Fatalf("throttled %d times without a quota", n)
	}

	// 256 KiB/s: the bucket holds 2.75 MiB, so 4 MiB more is ~5 s of
	// throttling.
	setQuota(t, adm, quotaEntity("client-id", "changing"), kadm.AlterClientQuotaOp{Key: "producer_byte_rate", Value: 256 << 10})
	took := produce(64)
	if hook.n.Load() == 0 {
		t.Fatal("no throttle_time_ms after the quota was set")
	}
	if took < 3*time.Second {
		t.Fatalf("4 MiB at a 256 KiB/s quota took %v", took)
	}

	setQuota(t, adm, quotaEntity("client-id", "changing"), kadm.AlterClientQuotaOp{Key: "producer_byte_rate", Remove: true})
	time.Sleep(time.Duration(hook.max.Load()) * time.Millisecond) // the last throttle runs out
	before := hook.n.Load()
	if took := produce(64); took > 3*time.Second || hook.n.Load() != before {
		t.Fatalf("after the quota was removed: 4 MiB took %v, %d more throttles", took, hook.n.Load()-before)
	}
}

// The done-when promise of issue 24: a franz-go producer (acks=all,
// idempotent, as fast as it goes) whose client id is limited to 5 MB/s is
// held within 10% of it over 30 s, and sees throttle_time_ms. The first
// burst (the bucket's 11 s of quota) is excluded: the 30 s start at the
// first throttle.
func TestProducerHeldAtQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("30 s of throttled producing")
	}
	rate := producerHeldAtQuota(t, 30*time.Second)
	t.Logf("QUOTA_RESULT achieved %.3f MB/s against a quota of 5 MB/s (%.1f%%)", rate/1e6, 100*(rate-5e6)/5e6)
	if rate < 4.5e6 || rate > 5.5e6 {
		t.Fatalf("achieved %.3f MB/s, want 5 MB/s ± 10%%", rate/1e6)
	}
}

// producerHeldAtQuota produces as fast as it can for span after the
// first throttle and returns the bytes acknowledged per second over it.
func producerHeldAtQuota(t *testing.T, span time.Duration) float64 {
	const quota = 5_000_000
	b := testBroker(t, "")
	adm := testAdmin(t, b)
	createTopic(t, adm, "held", 4, nil)
	setQuota(t, adm, quotaEntity("client-id", "held-producer"), kadm.AlterClientQuotaOp{Key: "producer_byte_rate", Value: quota})

	var hook throttleHook
	cl := testClient(t, b, kgo.ClientID("held-producer"), kgo.DefaultProduceTopic("held"), kgo.WithHooks(&hook),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.MaxBufferedBytes(16<<20), kgo.ProducerBatchMaxBytes(1<<20))
	value := make([]byte, 10_000)

	// acks are counted by the second they arrive in.
	var mu sync.Mutex
	type ack struct {
		at    time.Time
		bytes int
	}
	var acks []ack
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var firstThrottle atomic.Pointer[time.Time]
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.Produce(ctx, &kgo.Record{Value: value}, func(r *kgo.Record, err error) {
				if err != nil {
					return
				}
				now := time.Now()
				if hook.n.Load() > 0 && firstThrottle.Load() == nil {
					firstThrottle.CompareAndSwap(nil, &now)
				}
				mu.Lock()
				acks = append(acks, ack{now, len(r.Value)})
				mu.Unlock()
			})
		}
	}()
	deadline := time.Now().Add(span + 60*time.Second)
	for firstThrottle.Load() == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	start := firstThrottle.Load()
	if start == nil {
		t.Fatal("the producer was never throttled")
	}
	time.Sleep(time.Until(start.Add(span)))
	cancel()
	<-done
	cl.Close()

	mu.Lock()
	defer mu.Unlock()
	end := start.Add(span)
	total := 0
	for _, a := range acks {
		if !a.at.Before(*start) && a.at.Before(end) {
			total += a.bytes
		}
	}
	t.Logf("%d throttles, longest %d ms", hook.n.Load(), hook.max.Load())
	return float64(total) / span.Seconds()
}

// consumer_byte_rate: a consumer reading more than its bucket holds is
// held at its quota and told so; what it reads is whole and in order.
func TestConsumerByteRateQuota(t *testing.T) {
	const quota = 1 << 20
	b := testBroker(t, "")
	adm := testAdmin(t, b)
	createTopic(t, adm, "reads", 1, nil)
	p := testClient(t, b, kgo.DefaultProduceTopic("reads"), kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	value := make([]byte, 64<<10)
	const records = 224 // 14 MiB: the 11 MiB bucket, then 3 s at the quota
	for i := range records {
		if err := p.ProduceSync(ctx, &kgo.Record{Value: value, Key: fmt.Appendf(nil, "%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	setQuota(t, adm, quotaEntity("user", "<default>", "client-id", "reader"), kadm.AlterClientQuotaOp{Key: "consumer_byte_rate", Value: quota})

	var hook throttleHook
	c := testClient(t, b, kgo.ClientID("reader"), kgo.ConsumeTopics("reads"), kgo.WithHooks(&hook),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxPartitionBytes(1<<20))
	start := time.Now()
	var firstThrottle time.Time
	got, afterThrottle := 0, 0
	for got < records {
		fs := c.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) != fmt.Sprint(got) {
				t.Fatalf("record %d has key %s", got, r.Key)
			}
			got++
			if !firstThrottle.IsZero() {
				afterThrottle += len(r.Value)
			}
		})
		if firstThrottle.IsZero() && hook.n.Load() > 0 {
			firstThrottle = time.Now()
		}
	}
	took := time.Since(start)
	if hook.n.Load() == 0 {
		t.Fatal("the consumer was never throttled")
	}
	rate := float64(afterThrottle) / time.Since(firstThrottle).Seconds()
	t.Logf("14 MiB in %v; %.2f MiB/s after the first throttle, %d throttles", took, rate/(1<<20), hook.n.Load())
	if took < 2500*time.Millisecond || rate > 1.25*quota {
		t.Fatalf("read 14 MiB in %v, %.2f MiB/s after the first throttle; want about 3 s more than the 11 MiB burst, at 1 MiB/s", took, rate/(1<<20))
	}
}

// Produce before v6 predates KIP-219: its client does not back off, so
// the broker holds the throttled response back for the throttle time
// instead of sending it at once.
func TestOldProduceVersionsHeldBack(t *testing.T) {
	b := testBroker(t, "")
	adm := testAdmin(t, b)
	createTopic(t, adm, "old", 1, nil)
	setQuota(t, adm, quotaEntity("client-id", "old"), kadm.AlterClientQuotaOp{Key: "producer_byte_rate", Value: 256 << 10})
	vs := kversion.Stable()
	vs.SetMaxKeyVersion(int16(kmsg.Produce), 5)
	var before, after atomic.Int64 // throttles applied before / after the response
	hook := hookFunc(func(d time.Duration, afterResponse bool) {
		if d > 0 && afterResponse {
			after.Add(1)
		} else if d > 0 {
			before.Add(1)
		}
	})
	cl := testClient(t, b, kgo.ClientID("old"), kgo.MaxVersions(vs), kgo.DefaultProduceTopic("old"), kgo.WithHooks(hook),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	value := make([]byte, 64<<10)
	start := time.Now()
	for range 64 { // 4 MiB: the 2.75 MiB bucket, then about 5 s at 256 KiB/s
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	if before.Load() == 0 || after.Load() != 0 || took < 3*time.Second {
		t.Fatalf("4 MiB at 256 KiB/s with Produce v5: took %v, %d throttles before the response, %d after", took, before.Load(), after.Load())
	}
}

type hookFunc func(d time.Duration, afterResponse bool)

func (f hookFunc) OnBrokerThrottle(_ kgo.BrokerMetadata, d time.Duration, after bool) { f(d, after) }

// request_percentage: every API that has throttle_time_ms carries the
// request-time throttle, not only Produce and Fetch.
func TestRequestPercentageThrottlesEveryAPI(t *testing.T) {
	b := testBroker(t, "")
	adm := testAdmin(t, b)
	// 0.01% of a handler: the bucket holds 1.1 ms of handling.
	setQuota(t, adm, quotaEntity("client-id", "busy"), kadm.AlterClientQuotaOp{Key: "request_percentage", Value: 0.01})
	cl := testClient(t, b, kgo.ClientID("busy"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; ; i++ {
		req := kmsg.NewPtrMetadataRequest()
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ThrottleMillis > 0 {
			if resp.ThrottleMillis > 1000 {
				t.Fatalf("request-time throttle of %d ms, above Kafka's one-window cap", resp.ThrottleMillis)
			}
			break
		}
		if i == 1000 {
			t.Fatal("1,000 Metadata requests at 0.01% of a handler were never throttled")
		}
	}
	// Someone else's requests are not.
	other := testClient(t, b, kgo.ClientID("idle"))
	for range 20 {
		resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, other)
		if err != nil {
			t.Fatal(err)
		}
		if resp.ThrottleMillis != 0 {
			t.Fatalf("a client without a quota throttled %d ms", resp.ThrottleMillis)
		}
	}
}

// A quota altered through a node that is not the controller is
// forwarded, and every node describes it.
func TestClientQuotasForwarded(t *testing.T) {
	if testing.Short() {
		t.Skip("three nodes")
	}
	c := testCluster(t, 3)
	var follower *Broker
	for _, n := range c.nodes {
		if !n.meta.IsLeader() {
			follower = n
			break
		}
	}
	setQuota(t, testAdmin(t, follower), quotaEntity("user", "<default>"), kadm.AlterClientQuotaOp{Key: "producer_byte_rate", Value: 1 << 20})
	want := []string{"{user=<default>} producer_byte_rate=1.048576e+06"}
	// The node that forwarded has it at once; the others within a second
	// (issue 24), given five here.
	if got := describeQuotas(t, testAdmin(t, follower), false); !slices.Equal(got, want) {
		t.Errorf("node %d, which forwarded, describes %q, want %q", follower.cfg.NodeID, got, want)
	}
	for _, n := range c.nodes {
		adm := testAdmin(t, n)
		deadline := time.Now().Add(5 * time.Second)
		for got := describeQuotas(t, adm, false); !slices.Equal(got, want); got = describeQuotas(t, adm, false) {
			if time.Now().After(deadline) {
				t.Fatalf("node %d describes %q, want %q", n.cfg.NodeID, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
