package broker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/internal/loopback"
	"strata/meta"
)

// cluster is a test cluster of in-process brokers on loopback, each its own
// raft voter, data dir and listener, as `strata serve` runs them.
type cluster struct {
	t     *testing.T
	cfgs  []Config
	nodes []*Broker // nil while a node is down
}

// freeLoopbackAddrs returns n free loopback addresses: the raft transport
// needs its address before it listens.
func freeLoopbackAddrs(t *testing.T, n int) []string {
	t.Helper()
	return loopback.Addrs(t, n)
}

// testCluster starts n brokers, ids 1..n, all voters, with short timeouts
// so that failover happens within a test's patience.
func testCluster(t *testing.T, n int, mutate ...func(*Config)) *cluster {
	return testClusterOf(t, n, n, mutate...)
}

// testClusterOf starts n brokers of which the first voters are raft
// voters and the rest broker-only nodes (raft non-voters).
func testClusterOf(t *testing.T, n, nvoters int, mutate ...func(*Config)) *cluster {
	t.Helper()
	raft := freeLoopbackAddrs(t, n)
	kafka := freeLoopbackAddrs(t, n)
	var voters []meta.Voter
	for i := range nvoters {
		voters = append(voters, meta.Voter{ID: int32(i + 1), Addr: raft[i]})
	}
	c := &cluster{t: t, nodes: make([]*Broker, n)}
	for i := range n {
		cfg := Config{
			NodeID:            int32(i + 1),
			DataDir:           t.TempDir(),
			Listen:            kafka[i],
			RaftListen:        raft[i],
			Voters:            voters,
			AutoCreateTopics:  true,
			OffsetsPartitions: 3,
			// As for the offsets: a test cluster needs no 50 partitions.
			TransactionStatePartitions: 3,
			SessionTimeout:             1500 * time.Millisecond,
			HeartbeatInterval:          250 * time.Millisecond,
			ReplicaLagTimeMax:          3 * time.Second,
			Logger:                     testLogger().With("node", i+1),

			GroupInitialRebalanceDelay: -1,
		}
		for _, m := range mutate {
			m(&cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.start(i)
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for i, b := range c.nodes {
			if b != nil {
				b.Close()
				c.nodes[i] = nil
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	return c
}

func (c *cluster) start(i int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := Start(ctx, c.cfgs[i])
	if err != nil {
		return fmt.Errorf("node %d: %w", i+1, err)
	}
	c.nodes[i] = b
	return nil
}

// stop closes node id without a controlled shutdown: to the others it is
// as if the process died.
func (c *cluster) stop(id int32) {
	c.t.Helper()
	b := c.nodes[id-1]
	if b == nil {
		return
	}
	c.nodes[id-1] = nil
	b.Close()
}

func (c *cluster) restart(id int32) {
	c.t.Helper()
	if err := c.start(int(id - 1)); err != nil {
		c.t.Fatal(err)
	}
}

func (c *cluster) node(id int32) *Broker { return c.nodes[id-1] }

// any returns a running node.
func (c *cluster) any() *Broker {
	for _, b := range c.nodes {
		if b != nil {
			return b
		}
	}
	c.t.Fatal("no node is running")
	return nil
}

func (c *cluster) seeds() []string {
	var s []string
	for _, b := range c.nodes {
		if b != nil {
			s = append(s, b.Addr().String())
		}
	}
	return s
}

func (c *cluster) client(opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(c.seeds()...), kgo.MetadataMinAge(100 * time.Millisecond)}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// partitionState is a partition as the metadata of a running node has it.
func (c *cluster) partitionState(topic string, p int32) meta.Partition {
	t, ok := c.any().meta.State().Topics[topic]
	if !ok || int(p) >= len(t.Partitions) {
		return meta.Partition{Leader: -1}
	}
	return t.Partitions[p]
}

// waitFor polls cond until it holds or the time runs out.
func (c *cluster) waitFor(what string, within time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("after %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// createTopic creates a topic through the controller and waits until every
// running replica has opened it and its leader leads it.
func (c *cluster) createTopic(name string, partitions int32, rf int16, configs map[string]*string) {
	c.t.Helper()
	adm := kadm.NewClient(c.client())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, rf, configs, name)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		c.t.Fatalf("create topic %s: %v", name, err)
	}
	c.waitFor("the topic's leaders to lead", 10*time.Second, func() bool {
		if !c.allKnow(name) {
			return false
		}
		for p := range partitions {
			st := c.partitionState(name, p)
			if st.Leader < 0 || c.node(st.Leader) == nil {
				return false
			}
			lp := c.node(st.Leader).partition(name, p)
			if lp == nil || !lp.Leading() {
				return false
			}
		}
		return true
	})
}

// createTopicOn creates a one-partition topic on the given replicas.
func (c *cluster) createTopicOn(name string, replicas []int32) {
	c.t.Helper()
	c.sendCreateTopicOn(name, replicas)
	c.waitFor("the topic's leader to lead", 10*time.Second, func() bool {
		if !c.allKnow(name) {
			return false
		}
		st := c.partitionState(name, 0)
		return st.Leader >= 0 && c.node(st.Leader) != nil && c.node(st.Leader).partition(name, 0) != nil &&
			c.node(st.Leader).partition(name, 0).Leading()
	})
}

// sendCreateTopicOn asks the controller for a one-partition topic on the
// given replicas, and waits for nothing more than its answer.
func (c *cluster) sendCreateTopicOn(name string, replicas []int32) {
	c.t.Helper()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, -1, -1
	ra := kmsg.NewCreateTopicsRequestTopicReplicaAssignment()
	ra.Partition, ra.Replicas = 0, replicas
	rt.ReplicaAssignment = append(rt.ReplicaAssignment, ra)
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10000
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	kresp, err := req.RequestWith(ctx, c.client())
	if err != nil {
		c.t.Fatal(err)
	}
	if err := kerr.ErrorForCode(kresp.Topics[0].ErrorCode); err != nil {
		c.t.Fatalf("create %s on %v: %v", name, replicas, err)
	}
}

// allKnow reports whether every running node's metadata has the topic, so
// that a client asking any of them finds it.
func (c *cluster) allKnow(topic string) bool {
	for _, b := range c.nodes {
		if b != nil {
			if _, ok := b.meta.State().Topics[topic]; !ok {
				return false
			}
		}
	}
	return true
}

// followerNotController returns a replica of st that neither leads it nor
// is the controller: stopping it costs neither the partition nor the
// quorum its leader.
func (c *cluster) followerNotController(st meta.Partition) int32 {
	c.t.Helper()
	ctrl := c.any().meta.ControllerID()
	for _, id := range st.Replicas {
		if id != st.Leader && id != ctrl {
			return id
		}
	}
	c.t.Fatalf("no follower that is not the controller in %v (leader %d)", st.Replicas, st.Leader)
	return -1
}

// rawProduce sends one record to broker id with acks and timeout, as a
// raw request, and returns the partition's error code.
func (c *cluster) rawProduce(id int32, topic string, acks int16, timeout time.Duration) int16 {
	c.t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks = acks
	req.TimeoutMillis = int32(timeout / time.Millisecond)
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = rawBatch(-1, -1, -1, time.Now().UnixMilli(), "x")
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer cancel()
	// franz-go rewrites a raw produce's acks to the client's setting.
	ack := kgo.AllISRAcks()
	if acks == 1 {
		ack = kgo.LeaderAck()
	}
	kresp, err := c.client(kgo.RequiredAcks(ack), kgo.DisableIdempotentWrite()).Broker(int(id)).Request(ctx, req)
	if err != nil {
		c.t.Fatal(err)
	}
	return kresp.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
}

// produceSync produces n records with acks=all and returns their offsets.
func produceN(t *testing.T, cl *kgo.Client, topic string, partition int32, prefix string, n int) []int64 {
	t.Helper()
	var offsets []int64
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: []byte(prefix + strconv.Itoa(i))}
		res := cl.ProduceSync(ctx, r)
		if err := res.FirstErr(); err != nil {
			t.Fatalf("produce %s%d: %v", prefix, i, err)
		}
		offsets = append(offsets, r.Offset)
	}
	return offsets
}

// readAll consumes topic's partition from the start to its end offset.
func readAll(t *testing.T, c *cluster, topic string, partition int32) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Right after a failover a client's metadata may still name the dead
	// leader: ask (with a fresh client) until a live one answers.
	var o kadm.ListedOffset
	c.waitFor("the end offset from a live leader", 15*time.Second, func() bool {
		adm := kadm.NewClient(c.client())
		defer adm.Close()
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return false
		}
		o, _ = ends.Lookup(topic, partition)
		return o.Err == nil
	})
	cl := c.client(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}))
	var out []*kgo.Record
	for len(out) == 0 || out[len(out)-1].Offset < o.Offset-1 {
		if o.Offset == 0 {
			break
		}
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s-%d: got up to %d of %d", topic, partition, len(out), o.Offset)
		}
		for _, e := range fs.Errors() {
			if !kerr.IsRetriable(e.Err) && !errors.Is(e.Err, context.DeadlineExceeded) {
				t.Fatalf("read %s-%d: %v", topic, partition, e.Err)
			}
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func TestClusterReplicatesByteForByte(t *testing.T) {
	c := testCluster(t, 3)
	c.createTopic("r", 1, 3, nil)
	cl := c.client(kgo.RequiredAcks(kgo.AllISRAcks()))
	offsets := produceN(t, cl, "r", 0, "v", 300)
	if !slices.IsSorted(offsets) || offsets[0] != 0 || offsets[299] != 299 {
		t.Fatalf("offsets %d..%d", offsets[0], offsets[len(offsets)-1])
	}
	st := c.partitionState("r", 0)
	leader := c.node(st.Leader).partition("r", 0)
	want, err := leader.Log().Read(nil, 0, leader.Log().EndOffset(), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range st.Replicas {
		p := c.node(id).partition("r", 0)
		c.waitFor(fmt.Sprintf("replica %d to reach 300", id), 10*time.Second, func() bool { return p.Log().EndOffset() == 300 })
		got, err := p.Log().Read(nil, 0, p.Log().EndOffset(), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("replica %d: its log differs from the leader's (%d bytes, leader %d)", id, len(got), len(want))
		}
	}
	if !slices.Equal(st.ISR, st.Replicas) {
		t.Errorf("ISR %v, want every replica %v", st.ISR, st.Replicas)
	}
}

func TestClusterLeaderFailoverKeepsAcknowledgedRecords(t *testing.T) {
	c := testCluster(t, 3)
	c.createTopic("f", 1, 3, map[string]*string{"min.insync.replicas": ptr("2")})
	cl := c.client(kgo.RequiredAcks(kgo.AllISRAcks()))
	before := produceN(t, cl, "f", 0, "a", 100)

	old := c.partitionState("f", 0)
	began := time.Now()
	c.stop(old.Leader)
	c.waitFor("a new leader", 10*time.Second, func() bool {
		st := c.partitionState("f", 0)
		return st.Leader >= 0 && st.Leader != old.Leader && st.LeaderEpoch > old.LeaderEpoch
	})
	t.Logf("new leader after %s", time.Since(began).Round(time.Millisecond))
	after := produceN(t, cl, "f", 0, "b", 100)
	if after[0] != before[len(before)-1]+1 {
		t.Fatalf("first offset after failover %d, want %d", after[0], before[len(before)-1]+1)
	}
	recs := readAll(t, c, "f", 0)
	if len(recs) != 200 {
		t.Fatalf("read %d records, want 200", len(recs))
	}
	for i, r := range recs {
		want := "a" + strconv.Itoa(i)
		if i >= 100 {
			want = "b" + strconv.Itoa(i-100)
		}
		if string(r.Value) != want || r.Offset != int64(i) {
			t.Fatalf("record %d: %q at %d, want %q at %d", i, r.Value, r.Offset, want, i)
		}
	}

	// The old leader comes back as a follower and catches up.
	c.restart(old.Leader)
	c.waitFor("the old leader back in the ISR", 15*time.Second, func() bool {
		return slices.Contains(c.partitionState("f", 0).ISR, old.Leader)
	})
	p := c.node(old.Leader).partition("f", 0)
	c.waitFor("the old leader to catch up", 10*time.Second, func() bool { return p.Log().EndOffset() == 200 })
}

func TestClusterAcksAllNeedsMinInsyncReplicas(t *testing.T) {
	c := testCluster(t, 3)
	c.createTopic("m", 1, 3, map[string]*string{"min.insync.replicas": ptr("3")})
	cl := c.client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordRetries(0), kgo.DisableIdempotentWrite())
	produceN(t, cl, "m", 0, "ok", 10)
	st := c.partitionState("m", 0)
	follower := c.followerNotController(st)
	c.stop(follower)
	c.waitFor("the stopped follower out of the ISR", 15*time.Second, func() bool {
		return !slices.Contains(c.partitionState("m", 0).ISR, follower)
	})
	c.waitFor("the leader to see the smaller ISR", 5*time.Second, func() bool {
		return c.node(st.Leader).partition("m", 0).ISRSize() == 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := cl.ProduceSync(ctx, &kgo.Record{Topic: "m", Partition: 0, Value: []byte("refused")}).FirstErr()
	if !errors.Is(err, kerr.NotEnoughReplicas) {
		t.Fatalf("acks=all with 2 of min.insync.replicas=3 in sync: %v, want NOT_ENOUGH_REPLICAS", err)
	}
	one := c.client(kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	produceN(t, one, "m", 0, "acks1", 1)
}

func TestClusterFollowerFetchFromUnknownReplicaIsRefused(t *testing.T) {
	c := testCluster(t, 3)
	c.createTopic("u", 1, 2, nil)
	st := c.partitionState("u", 0)
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = 99
	req.ReplicaState.ID = 99
	req.MaxWaitMillis = 10
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "u"
	rt.TopicID = c.any().meta.State().Topics["u"].ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.CurrentLeaderEpoch, rp.LastFetchedEpoch, rp.PartitionMaxBytes = 0, -1, -1, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	cl := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kresp, err := cl.Broker(int(st.Leader)).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	code := kresp.(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode
	if code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("fetch as replica 99: %v, want NOT_LEADER_OR_FOLLOWER", kerr.ErrorForCode(code))
	}
}

func TestClusterProduceToFollowerIsNotLeader(t *testing.T) {
	c := testCluster(t, 3)
	c.createTopic("n", 1, 3, nil)
	st := c.partitionState("n", 0)
	var follower int32
	for _, id := range st.Replicas {
		if id != st.Leader {
			follower = id
		}
	}
	if code := c.rawProduce(follower, "n", 1, time.Second); code != kerr.NotLeaderForPartition.Code {
		t.Fatalf("produce to follower %d: %v, want NOT_LEADER_OR_FOLLOWER", follower, kerr.ErrorForCode(code))
	}
}

func TestClusterNodeIDInUseIsRefused(t *testing.T) {
	c := testCluster(t, 3)
	ctrl := c.any().meta.ControllerID()
	req := kmsg.NewPtrBrokerRegistrationRequest()
	req.BrokerID = 2
	req.ClusterID = c.cfgs[0].WithDefaults().ClusterID
	rand.Read(req.IncarnationID[:]) // another incarnation than node 2's
	l := kmsg.NewBrokerRegistrationRequestListener()
	l.Name, l.Host, l.Port = "PLAINTEXT", "127.0.0.1", 1
	req.Listeners = append(req.Listeners, l)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kresp, err := c.client().Broker(int(ctrl)).Request(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if code := kresp.(*kmsg.BrokerRegistrationResponse).ErrorCode; code != kerr.DuplicateBrokerRegistration.Code {
		t.Fatalf("registering a second incarnation of live node 2: %v, want DUPLICATE_BROKER_REGISTRATION", kerr.ErrorForCode(code))
	}
	// Node 2's registration is undisturbed.
	incarnation := c.node(2).node.Incarnation()
	if got, want := c.node(ctrl).meta.State().Brokers[2].Incarnation, hex.EncodeToString(incarnation[:]); got != want {
		t.Fatalf("node 2's registration is incarnation %s, its process is %s", got, want)
	}
}

func TestClusterStaleLeaderTruncatesWhatTheNewLeaderNeverHad(t *testing.T) {
	// The partition's replicas are broker-only nodes, so that the quorum
	// outlives all three of them stopped.
	c := testClusterOf(t, 6, 3)
	c.createTopicOn("s", []int32{4, 5, 6})
	all := c.client(kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DisableIdempotentWrite())
	produceN(t, all, "s", 0, "old", 10)
	st := c.partitionState("s", 0)
	var followers []int32
	for _, id := range st.Replicas {
		if id != st.Leader {
			followers = append(followers, id)
		}
	}
	for _, id := range followers {
		c.stop(id)
	}
	c.waitFor("the ISR to be the leader alone", 15*time.Second, func() bool {
		return slices.Equal(c.partitionState("s", 0).ISR, []int32{st.Leader}) &&
			c.node(st.Leader).partition("s", 0).ISRSize() == 1
	})
	// Records only the old leader will ever have.
	one := c.client(kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite())
	produceN(t, one, "s", 0, "lost", 5)
	stale := st.Leader
	c.stop(stale)
	c.waitFor("the partition offline", 15*time.Second, func() bool { return c.partitionState("s", 0).Leader == -1 })
	for _, id := range followers {
		c.restart(id)
	}
	// The operator chooses availability: an unclean election.
	adm := kadm.NewClient(c.client())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "unclean.leader.election.enable", Value: ptr("true")}}, "s"); err != nil {
		t.Fatal(err)
	}
	c.waitFor("an unclean leader", 15*time.Second, func() bool {
		l := c.partitionState("s", 0).Leader
		return l >= 0 && l != stale && c.node(l) != nil && c.node(l).partition("s", 0).Leading()
	})
	produceN(t, one, "s", 0, "new", 3)

	c.restart(stale)
	p := c.node(stale).partition("s", 0)
	leader := c.node(c.partitionState("s", 0).Leader).partition("s", 0)
	c.waitFor("the stale leader to truncate and catch up", 15*time.Second, func() bool {
		return p.Log().EndOffset() == leader.Log().EndOffset() && p.Log().EndOffset() == 13
	})
	want, err := leader.Log().Read(nil, 0, 13, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Log().Read(nil, 0, 13, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatal("the stale leader's log differs from the new leader's after catching up")
	}
	recs := readAll(t, c, "s", 0)
	for i, r := range recs {
		want := "old" + strconv.Itoa(i)
		if i >= 10 {
			want = "new" + strconv.Itoa(i-10)
		}
		if string(r.Value) != want {
			t.Fatalf("offset %d: %q, want %q", r.Offset, r.Value, want)
		}
	}
}

func TestClusterControlledShutdownMovesLeadershipsFirst(t *testing.T) {
	c := testCluster(t, 3, func(cfg *Config) { cfg.LeaderRebalanceInterval = 500 * time.Millisecond })
	c.createTopic("c", 6, 3, map[string]*string{"min.insync.replicas": ptr("2")})
	var victim int32 = -1
	for p := range int32(6) {
		if l := c.partitionState("c", p).Leader; l != c.any().meta.ControllerID() {
			victim = l
			break
		}
	}
	if victim < 0 {
		t.Fatal("the controller leads every partition")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := c.node(victim)
	c.nodes[victim-1] = nil
	began := time.Now()
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// The leaderships moved before the broker stopped, not after its
	// session ran out: the controller's state says so at once.
	ctrl := c.any()
	for ctrl.meta.ControllerID() != ctrl.cfg.NodeID {
		ctrl = c.node(ctrl.meta.ControllerID())
	}
	for p := range int32(6) {
		if l := ctrl.meta.State().Topics["c"].Partitions[p].Leader; l == victim || l < 0 {
			t.Fatalf("partition %d: leader %d after the controlled shutdown of %d", p, l, victim)
		}
	}
	t.Logf("controlled shutdown took %s", time.Since(began).Round(time.Millisecond))
	cl := c.client(kgo.RequiredAcks(kgo.AllISRAcks()))
	for p := range int32(6) {
		produceN(t, cl, "c", p, "x", 5)
	}
	// Back, it gets its preferred leaderships back.
	c.restart(victim)
	c.waitFor("preferred leaders again", 20*time.Second, func() bool {
		for p := range int32(6) {
			st := c.partitionState("c", p)
			if st.Leader != st.Replicas[0] {
				return false
			}
		}
		return true
	})
}

// A controller stopped on purpose hands the quorum to another voter
// before it goes: when its Shutdown returns another node already leads,
// where without the hand-over the others would wait out an election
// timeout (500 ms, randomised up to twice that) of its silence, every
// voter logging about it meanwhile.
func TestClusterControllerShutdownHandsOverTheQuorum(t *testing.T) {
	c := testCluster(t, 3)
	old := c.any().meta.ControllerID()
	if old < 0 {
		t.Fatal("no controller")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := c.node(old)
	c.nodes[old-1] = nil
	if err := b.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	leader := func() int32 {
		for _, n := range c.nodes {
			if n != nil && n.meta.IsLeader() {
				return n.cfg.NodeID
			}
		}
		return -1
	}
	// Well inside the election timeout: only a hand-over gets there.
	for leader() < 0 {
		if time.Since(stopped) > 250*time.Millisecond {
			t.Fatalf("no voter leads %s after the controller's shutdown: it left the quorum to notice its silence", time.Since(stopped).Round(time.Millisecond))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if l := leader(); l == old {
		t.Fatalf("the stopped node %d still leads", l)
	}
}

func TestClusterGroupOffsetsSurviveCoordinatorFailover(t *testing.T) {
	c := testCluster(t, 3)
	c.waitFor("the offsets topic", 15*time.Second, func() bool {
		_, ok := c.any().meta.State().Topics[offsetsTopic]
		return ok
	})
	c.createTopic("g", 3, 3, nil)
	adm := kadm.NewClient(c.client())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var commit kadm.Offsets
	for p := range int32(3) {
		commit.Add(kadm.Offset{Topic: "g", Partition: p, At: int64(10 + p), LeaderEpoch: -1})
	}
	var coord int32 = -1
	c.waitFor("a committed offset", 15*time.Second, func() bool {
		resp, err := adm.CommitOffsets(ctx, "grp", commit)
		if err != nil || resp.Error() != nil {
			return false
		}
		for _, d := range adm.FindGroupCoordinators(ctx, "grp") {
			if d.Err == nil {
				coord = d.NodeID
			}
		}
		return coord >= 0
	})
	c.stop(coord)
	c.waitFor("the offsets from a new coordinator", 20*time.Second, func() bool {
		// A fresh client each time: kgo keeps a dead coordinator cached
		// while its dials fail.
		adm := kadm.NewClient(c.client())
		defer adm.Close()
		got, err := adm.FetchOffsets(ctx, "grp")
		if err == nil {
			err = got.Error()
		}
		if err != nil {
			t.Logf("fetch offsets: %v", err)
			return false
		}
		for p := range int32(3) {
			o, ok := got.Lookup("g", p)
			if !ok || o.At != int64(10+p) {
				t.Logf("partition %d: %+v (%v)", p, o, ok)
				return false
			}
		}
		return true
	})
}

func TestClusterOffsetForLeaderEpochAfterFailover(t *testing.T) {
	c := testCluster(t, 3)
	c.createTopic("e", 1, 3, nil)
	cl := c.client(kgo.RequiredAcks(kgo.AllISRAcks()))
	produceN(t, cl, "e", 0, "a", 20)
	first := c.partitionState("e", 0)
	c.stop(first.Leader)
	c.waitFor("a new leader", 10*time.Second, func() bool {
		st := c.partitionState("e", 0)
		return st.Leader >= 0 && st.Leader != first.Leader && c.node(st.Leader).partition("e", 0).Leading()
	})
	produceN(t, cl, "e", 0, "b", 5)
	now := c.partitionState("e", 0)

	ask := func(epoch int32) (int64, int32) {
		t.Helper()
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.ReplicaID = -1
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "e"
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition, rp.CurrentLeaderEpoch, rp.LeaderEpoch = 0, now.LeaderEpoch, epoch
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kresp, err := c.client().Broker(int(now.Leader)).Request(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		op := kresp.(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
		if err := kerr.ErrorForCode(op.ErrorCode); err != nil {
			t.Fatalf("OffsetForLeaderEpoch(%d): %v", epoch, err)
		}
		return op.EndOffset, op.LeaderEpoch
	}
	// The first leader's epoch ends where the new leader's records begin;
	// the current epoch ends at the log end.
	if end, epoch := ask(first.LeaderEpoch); end != 20 || epoch != first.LeaderEpoch {
		t.Errorf("epoch %d ends at %d (epoch %d), want 20", first.LeaderEpoch, end, epoch)
	}
	if end, epoch := ask(now.LeaderEpoch); end != 25 || epoch != now.LeaderEpoch {
		t.Errorf("epoch %d ends at %d (epoch %d), want 25", now.LeaderEpoch, end, epoch)
	}
}

func TestClusterAcksAllAfterTheISRShrankIsNotEnoughReplicasAfterAppend(t *testing.T) {
	// A longer session than the other tests': the produce must reach the
	// leader before the dead follower is fenced, however loaded the machine.
	c := testCluster(t, 3, func(cfg *Config) {
		cfg.SessionTimeout, cfg.HeartbeatInterval = 5*time.Second, 500*time.Millisecond
	})
	c.createTopic("a", 1, 3, map[string]*string{"min.insync.replicas": ptr("3")})
	st := c.partitionState("a", 0)
	follower := c.followerNotController(st)
	// The follower dies; until its session runs out the ISR still holds
	// it, so the append is taken, and then waits for a replica that never
	// fetches. The fence shrinks the ISR below min.insync.replicas.
	c.stop(follower)
	code := c.rawProduce(st.Leader, "a", -1, 15*time.Second)
	if code != kerr.NotEnoughReplicasAfterAppend.Code {
		t.Fatalf("acks=all while the ISR shrank below min.insync.replicas: %v, want NOT_ENOUGH_REPLICAS_AFTER_APPEND", kerr.ErrorForCode(code))
	}
}
