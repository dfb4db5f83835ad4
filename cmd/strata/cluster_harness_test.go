package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/internal/loopback"
)

// The cluster harness runs `strata serve` processes on loopback as an
// operator would run them on three machines, and does to them what
// machines suffer: kill -9, a pause (SIGSTOP, as a long GC or a frozen VM),
// a controlled shutdown (SIGTERM) and a restart on the same data dir and
// ports. Every process is killed when the test ends, whatever happened, and
// a failed test logs each process's stderr under its node id.

// clusterSettings are the settings of issue 11 that the scenarios tune.
// Zero leaves a setting at the broker's default, and its flag off the
// command line.
type clusterSettings struct {
	replicationFactor int           // default.replication.factor
	sessionTimeout    time.Duration // broker.session.timeout.ms
	heartbeat         time.Duration // broker.heartbeat.interval.ms
	replicaLag        time.Duration // replica.lag.time.max.ms
	sharedBucket      bool          // one directory bucket for every node
	offsetsPartitions int
	topicDefaults     []string // key=value
	extra             []string // flags that exist on main, as given
	secure            bool     // TLS and SCRAM on every door (secure_cluster_test.go)
}

// clusterFlags writes the settings as `strata serve` flags. The cluster
// flags were added while these tests were written: this is the one place
// that names them.
func clusterFlags(s clusterSettings, bucketDir string) []string {
	var f []string
	if s.replicationFactor > 0 {
		f = append(f, "--default-replication-factor", strconv.Itoa(s.replicationFactor))
	}
	if s.sessionTimeout > 0 {
		f = append(f, "--broker-session-timeout", s.sessionTimeout.String())
	}
	if s.heartbeat > 0 {
		f = append(f, "--broker-heartbeat-interval", s.heartbeat.String())
	}
	if s.replicaLag > 0 {
		f = append(f, "--replica-lag-time-max", s.replicaLag.String())
	}
	if s.sharedBucket {
		f = append(f, bucketFlags(bucketDir)...)
	}
	if s.offsetsPartitions > 0 {
		f = append(f, "--offsets-partitions", strconv.Itoa(s.offsetsPartitions))
	}
	for _, kv := range s.topicDefaults {
		f = append(f, "--topic-default", kv)
	}
	return append(f, s.extra...)
}

// bucketFlags point a node or a tier verb at the shared directory bucket.
func bucketFlags(dir string) []string { return []string{"--bucket-dir", dir} }

// cluster is a set of strata serve processes started by one test. Node i
// (1-based) keeps its raft and Kafka addresses and its data dir across
// restarts, as a machine would.
type cluster struct {
	t         *testing.T
	settings  clusterSettings
	raft      []string // raft listen address of node i+1
	kafka     []string // Kafka listen address of node i+1
	dirs      []string
	bucketDir string
	voters    string // --voters value
	// security is the secured cluster's certificates and password, and
	// clientOpts what every client of the harness connects with (TLS
	// and SCRAM when secure, nothing otherwise).
	security   *clusterSecurity
	clientOpts []kgo.Opt

	mu    sync.Mutex
	procs []*node // the running process of node i+1, nil when down
	lives []int   // processes started per node, for the logs
}

// freeAddrs picks n loopback addresses that were free a moment ago. The
// voters must know each other's addresses before any of them listens.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	return loopback.Addrs(t, n)
}

// startCluster starts n voters and waits until each serves Kafka and all
// name one controller.
func startCluster(t *testing.T, n int, s clusterSettings) *cluster {
	t.Helper()
	addrs := freeAddrs(t, 2*n)
	c := &cluster{
		t: t, settings: s,
		raft: addrs[:n], kafka: addrs[n:],
		bucketDir: filepath.Join(t.TempDir(), "bucket"),
		procs:     make([]*node, n), lives: make([]int, n),
	}
	var voters []string
	for i := range n {
		voters = append(voters, fmt.Sprintf("%d@%s", i+1, c.raft[i]))
		c.dirs = append(c.dirs, t.TempDir())
	}
	c.voters = strings.Join(voters, ",")
	if s.secure {
		c.secureAll()
	}
	if s.sharedBucket {
		if err := os.MkdirAll(c.bucketDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Voters print their bootstrap line only once a quorum elected a
	// controller, so all are launched before any is waited for.
	lines := make([]<-chan string, n)
	for i := range n {
		lines[i] = c.launch(int32(i + 1))
	}
	for i := range n {
		c.awaitStart(int32(i+1), lines[i])
	}
	c.waitController()
	return c
}

// args is node id's command line.
func (c *cluster) args(id int32) []string {
	i := id - 1
	listen := []string{"--listen", c.kafka[i]}
	if c.security != nil {
		listen = c.security.flags(id, c.kafka[i])
	}
	a := append([]string{"serve", "--node-id", fmt.Sprint(id), "--data-dir", c.dirs[i],
		"--http-listen", "off", "--raft-listen", c.raft[i], "--voters", c.voters}, listen...)
	return append(a, clusterFlags(c.settings, c.bucketDir)...)
}

// launch starts a process for node id without waiting for it.
func (c *cluster) launch(id int32) <-chan string {
	c.t.Helper()
	c.mu.Lock()
	c.lives[id-1]++
	life := c.lives[id-1]
	c.mu.Unlock()
	n, lines := launch(c.t, nil, c.args(id)...)
	// Cleanups run last-registered first: this header comes just before
	// the stderr that launch's own cleanup logs for this process.
	c.t.Cleanup(func() {
		if c.t.Failed() {
			c.t.Logf("---- node %d, process %d (pid %d), stderr follows", id, life, n.cmd.Process.Pid)
		}
	})
	c.mu.Lock()
	c.procs[id-1] = n
	c.mu.Unlock()
	return lines
}

// awaitStart waits for node id's bootstrap line.
func (c *cluster) awaitStart(id int32, lines <-chan string) {
	c.t.Helper()
	n := c.proc(id)
	n.readBootstrap(c.t, n.firstLine(c.t, lines))
	if n.bootstrap != c.kafka[id-1] {
		c.t.Fatalf("node %d announces %s, want its listener %s", id, n.bootstrap, c.kafka[id-1])
	}
}

func (c *cluster) proc(id int32) *node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[id-1]
}

// up lists the nodes whose process runs (paused ones included).
func (c *cluster) up() []int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []int32
	for i, n := range c.procs {
		if n != nil {
			ids = append(ids, int32(i+1))
		}
	}
	return ids
}

// addr is node id's Kafka address.
func (c *cluster) addr(id int32) string { return c.kafka[id-1] }

// bootstrap is every node's address, as the CLI takes them.
func (c *cluster) bootstrap() string { return strings.Join(c.kafka, ",") }

// signal sends sig to node id's process.
func (c *cluster) signal(id int32, sig syscall.Signal) *node {
	c.t.Helper()
	n := c.proc(id)
	if n == nil {
		c.t.Fatalf("node %d is not running", id)
	}
	if err := n.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("node %d: %s: %v", id, sig, err)
	}
	return n
}

// kill sends SIGKILL to node id and waits for the process to be gone.
func (c *cluster) kill(id int32) {
	c.t.Helper()
	n := c.signal(id, syscall.SIGKILL)
	<-n.exited
	c.mu.Lock()
	c.procs[id-1] = nil
	c.mu.Unlock()
}

// term sends SIGTERM to node id (a controlled shutdown) and checks it
// exits with status 0 within a minute.
func (c *cluster) term(id int32) {
	c.t.Helper()
	n := c.signal(id, syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(time.Minute):
		c.t.Fatalf("node %d still running a minute after SIGTERM", id)
	}
	if n.waitErr != nil {
		c.t.Fatalf("node %d: exit after SIGTERM: %v", id, n.waitErr)
	}
	c.mu.Lock()
	c.procs[id-1] = nil
	c.mu.Unlock()
}

// pause and resume freeze and thaw node id's process.
func (c *cluster) pause(id int32)  { c.signal(id, syscall.SIGSTOP) }
func (c *cluster) resume(id int32) { c.signal(id, syscall.SIGCONT) }

// restart starts node id again on its data dir and waits for its
// bootstrap line.
func (c *cluster) restart(id int32) {
	c.t.Helper()
	if c.proc(id) != nil {
		c.t.Fatalf("node %d is still running", id)
	}
	c.awaitStart(id, c.launch(id))
}

// client is a Kafka client of the whole cluster, closed with the test.
func (c *cluster) client(opts ...kgo.Opt) *kgo.Client {
	c.t.Helper()
	return newClient(c.t, c.kafka[0], slices.Concat([]kgo.Opt{kgo.SeedBrokers(c.kafka...)}, c.clientOpts, opts)...)
}

// tryMetadata asks node id, and only it, for the metadata of every topic.
// A dead or paused node is an error, not a failed test.
func (c *cluster) tryMetadata(id int32) (*kmsg.MetadataResponse, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.addr(id)), kgo.RequestRetries(0)}, c.clientOpts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl.SeedBrokers()[0])
}

// partitionState is one partition as a node's metadata shows it.
type partitionState struct {
	leader   int32
	epoch    int32
	replicas []int32
	isr      []int32
	err      int16
}

// partitionsOf reads topic's partitions from node id's metadata.
func (c *cluster) partitionsOf(id int32, topic string) (map[int32]partitionState, error) {
	resp, err := c.tryMetadata(id)
	if err != nil {
		return nil, err
	}
	for _, tp := range resp.Topics {
		if tp.Topic == nil || *tp.Topic != topic {
			continue
		}
		if tp.ErrorCode != 0 {
			return nil, fmt.Errorf("node %d: topic %s: error %d", id, topic, tp.ErrorCode)
		}
		out := map[int32]partitionState{}
		for _, p := range tp.Partitions {
			isr := append([]int32(nil), p.ISR...)
			sort.Slice(isr, func(i, j int) bool { return isr[i] < isr[j] })
			out[p.Partition] = partitionState{leader: p.Leader, epoch: p.LeaderEpoch, replicas: p.Replicas, isr: isr, err: p.ErrorCode}
		}
		return out, nil
	}
	return nil, fmt.Errorf("node %d has no topic %s", id, topic)
}

// partitions reads topic's partitions from the first running node that
// answers; skip names nodes not to ask (paused ones).
func (c *cluster) partitions(topic string, skip ...int32) (map[int32]partitionState, error) {
	var errs []error
	for _, id := range c.up() {
		if contains(skip, id) {
			continue
		}
		ps, err := c.partitionsOf(id, topic)
		if err == nil {
			return ps, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("no node answered: %w", errors.Join(errs...))
}

// controller is the controller named by node id's metadata.
func (c *cluster) controllerOf(id int32) (int32, error) {
	resp, err := c.tryMetadata(id)
	if err != nil {
		return -1, err
	}
	return resp.ControllerID, nil
}

// waitController waits until every running node names the same running
// controller, and returns it.
func (c *cluster) waitController(skip ...int32) int32 {
	c.t.Helper()
	var last string
	var ctrl int32
	c.waitFor("one controller named by every node", 30*time.Second, func() bool {
		ids := map[int32]bool{}
		for _, id := range c.up() {
			if contains(skip, id) {
				continue
			}
			ctl, err := c.controllerOf(id)
			if err != nil {
				last = err.Error()
				return false
			}
			ids[ctl] = true
			ctrl = ctl
		}
		last = fmt.Sprint(ids)
		return len(ids) == 1 && contains(c.up(), ctrl)
	}, func() string { return last })
	return ctrl
}

// waitFor polls cond until it holds, failing the test after timeout with
// what state says about the last attempt.
func (c *cluster) waitFor(what string, timeout time.Duration, cond func() bool, state func() string) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not within %s; last seen: %s", what, timeout, state())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitISR waits until every partition of topic has a leader and all its
// replicas in its ISR, as every running node but skip sees it.
func (c *cluster) waitISR(topic string, timeout time.Duration, skip ...int32) map[int32]partitionState {
	c.t.Helper()
	var ps map[int32]partitionState
	var last string
	c.waitFor("every replica of "+topic+" in the ISR", timeout, func() bool {
		for _, id := range c.up() {
			if contains(skip, id) {
				continue
			}
			got, err := c.partitionsOf(id, topic)
			if err != nil {
				last = err.Error()
				return false
			}
			for p, s := range got {
				if s.leader < 0 || len(s.isr) != len(s.replicas) {
					last = fmt.Sprintf("node %d: partition %d leader %d replicas %v isr %v", id, p, s.leader, s.replicas, s.isr)
					return false
				}
			}
			ps = got
		}
		return ps != nil
	}, func() string { return last })
	return ps
}

// createTopic creates topic with rf replicas and waits until every
// running node knows it and every replica is in sync.
func (c *cluster) createTopic(topic string, partitions int32, rf int16, configs map[string]*string) map[int32]partitionState {
	c.t.Helper()
	c.create(topic, partitions, rf, configs)
	return c.waitISR(topic, 30*time.Second)
}

// create creates topic through any node, which hands it to the
// controller.
func (c *cluster) create(topic string, partitions int32, rf int16, configs map[string]*string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(c.client()).CreateTopic(ctx, partitions, rf, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		c.t.Fatalf("create %s (%d partitions, RF %d): %v", topic, partitions, rf, err)
	}
}

// leaders counts the partitions of topic each node leads.
func leaders(ps map[int32]partitionState) map[int32]int {
	out := map[int32]int{}
	for _, s := range ps {
		if s.leader >= 0 {
			out[s.leader]++
		}
	}
	return out
}

func contains(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// faultRounds is how many faults a long scenario injects: def, or
// STRATA_FAULT_ROUNDS, or short under -short.
func faultRounds(t *testing.T, def, short int) int {
	t.Helper()
	if v := os.Getenv("STRATA_FAULT_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("STRATA_FAULT_ROUNDS=%q: want a positive number", v)
		}
		return n
	}
	if testing.Short() {
		return short
	}
	return def
}
