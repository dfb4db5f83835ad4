package partition

import (
	"context"
	"encoding/binary"
	"hash/crc32"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"strata/broker/replica"
	"strata/meta"
	"strata/segment"
)

// The partition is driven here as the broker drives it, without a
// network: a real segment.Log in a temporary directory, and a Host whose
// fetchers and controller are fakes that record what they are asked.

const self = int32(1) // the node under test

// batch encodes a v2 record batch the way a non-idempotent producer
// would: base offset 0, partition leader epoch -1, one record per value.
func batch(values ...string) []byte {
	return encodeBatch(0, -1, -1, -1, values...)
}

// txnBatch is a transactional producer's batch: producer pid at epoch,
// its first sequence seq.
func txnBatch(pid int64, epoch int16, seq int32, values ...string) []byte {
	return encodeBatch(AttrTransactional, pid, epoch, seq, values...)
}

// encodeBatch lays out a v2 batch (docs/format.md): a 61-byte header, then
// the records, with the CRC-32C over everything from the attributes on.
func encodeBatch(attrs int16, pid int64, epoch int16, seq int32, values ...string) []byte {
	ts := time.Now().UnixMilli()
	var recs []byte
	for i, v := range values {
		var r []byte
		r = append(r, 0)                          // attributes
		r = binary.AppendVarint(r, 0)             // timestamp delta
		r = binary.AppendVarint(r, int64(i))      // offset delta
		r = binary.AppendVarint(r, -1)            // no key
		r = binary.AppendVarint(r, int64(len(v))) // value
		r = append(r, v...)
		r = binary.AppendVarint(r, 0) // no headers
		recs = binary.AppendVarint(recs, int64(len(r)))
		recs = append(recs, r...)
	}
	be := binary.BigEndian
	b := make([]byte, 61, 61+len(recs))
	be.PutUint32(b[8:], uint32(61-12+len(recs)))
	be.PutUint32(b[12:], 0xffffffff) // partition leader epoch
	b[16] = 2                        // magic
	be.PutUint16(b[21:], uint16(attrs))
	be.PutUint32(b[23:], uint32(len(values)-1)) // last offset delta
	be.PutUint64(b[27:], uint64(ts))            // first timestamp
	be.PutUint64(b[35:], uint64(ts))            // max timestamp
	be.PutUint64(b[43:], uint64(pid))
	be.PutUint16(b[51:], uint16(epoch))
	be.PutUint32(b[53:], uint32(seq))
	be.PutUint32(b[57:], uint32(len(values)))
	b = append(b, recs...)
	be.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// batchBases returns the base offset of every whole batch in b.
func batchBases(t *testing.T, b []byte) []int64 {
	t.Helper()
	var out []int64
	for len(b) > 0 {
		if len(b) < 61 {
			t.Fatalf("%d bytes left: not a whole batch header", len(b))
		}
		size := 12 + int(binary.BigEndian.Uint32(b[8:]))
		if size > len(b) {
			t.Fatalf("batch of %d bytes, %d left: cut short", size, len(b))
		}
		out = append(out, int64(binary.BigEndian.Uint64(b)))
		b = b[size:]
	}
	return out
}

// follow is one Fetchers.Follow call.
type follow struct {
	leader int32
	p      replica.Partition
}

// fakeFetchers records what the partition asks of the node's fetchers.
type fakeFetchers struct {
	mu        sync.Mutex
	follows   []follow
	unfollows []replica.Key
}

func (f *fakeFetchers) Follow(leader int32, p replica.Partition) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.follows = append(f.follows, follow{leader, p})
}

func (f *fakeFetchers) Unfollow(key replica.Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unfollows = append(f.unfollows, key)
}

// reset forgets the calls so far, and returns them.
func (f *fakeFetchers) reset() ([]follow, []replica.Key) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fo, un := f.follows, f.unfollows
	f.follows, f.unfollows = nil, nil
	return fo, un
}

// fakeCluster is the controller as a leader sees it: it records every
// AlterPartition and answers with answer (the request's ISR at the next
// partition epoch when answer is nil).
type fakeCluster struct {
	brokerEpoch int64
	mu          sync.Mutex
	eligible    func(id int32, epoch int64) bool
	answer      func(r meta.AlterPartitionRequest) (meta.Partition, error)
	reqs        []meta.AlterPartitionRequest
}

func (c *fakeCluster) BrokerEpoch() int64 { return c.brokerEpoch }

func (c *fakeCluster) Eligibility() func(id int32, epoch int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eligible
}

func (c *fakeCluster) AlterPartition(_ context.Context, _ [16]byte, r meta.AlterPartitionRequest) (meta.Partition, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, r)
	answer := c.answer
	c.mu.Unlock()
	if answer == nil {
		return meta.Partition{ISR: slices.Clone(r.ISR), PartitionEpoch: r.PartitionEpoch + 1}, nil
	}
	return answer(r)
}

func (c *fakeCluster) setAnswer(f func(r meta.AlterPartitionRequest) (meta.Partition, error)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answer = f
}

// requests returns the AlterPartition requests so far.
func (c *fakeCluster) requests() []meta.AlterPartitionRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.reqs)
}

// isrChange is one Metrics.ISRChanged call.
type isrChange struct{ from, to []int32 }

// node is a Host with fakes, and what a test needs to look at them.
type node struct {
	host     *Host
	fetchers *fakeFetchers
	cluster  *fakeCluster
	// stop ends Host.Context, as the node closing does.
	stop context.CancelFunc
	// wg tracks the goroutines Host.Go started; idle waits for them.
	wg        sync.WaitGroup
	elections prometheus.Counter

	mu         sync.Mutex
	isrChanges []isrChange
}

// newNode is the host of node self, with replica.lag.time.max 30 s and a
// controller that grants every ISR change. Its goroutines are waited for
// at the end of the test.
func newNode(t *testing.T) *node {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	n := &node{
		fetchers:  &fakeFetchers{},
		cluster:   &fakeCluster{brokerEpoch: 42},
		stop:      stop,
		elections: prometheus.NewCounter(prometheus.CounterOpts{Name: "leader_elections_total"}),
	}
	n.host = &Host{
		NodeID:            self,
		Logger:            slog.New(slog.DiscardHandler),
		Fetchers:          n.fetchers,
		Cluster:           n.cluster,
		ReplicaLagTimeMax: 30 * time.Second,
		IdleUpload:        time.Hour,
		Metrics: Metrics{
			LeaderElections: n.elections,
			ISRChanged: func(from, to []int32) {
				n.mu.Lock()
				defer n.mu.Unlock()
				n.isrChanges = append(n.isrChanges, isrChange{slices.Clone(from), slices.Clone(to)})
			},
			Uploads:       prometheus.NewCounter(prometheus.CounterOpts{Name: "uploads_total"}),
			UploadBytes:   prometheus.NewCounter(prometheus.CounterOpts{Name: "upload_bytes_total"}),
			UploadSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "upload_seconds"}),
			ReadBytes:     prometheus.NewCounter(prometheus.CounterOpts{Name: "read_bytes_total"}),
		},
		Go: func(f func(ctx context.Context)) {
			n.wg.Add(1)
			go func() {
				defer n.wg.Done()
				f(ctx)
			}()
		},
		Context: ctx,
	}
	t.Cleanup(func() {
		stop()
		n.wg.Wait()
	})
	return n
}

// idle waits for every goroutine the partitions started (an
// AlterPartition and the handling of its answer).
func (n *node) idle() { n.wg.Wait() }

func (n *node) leaderElections() float64 {
	var m dto.Metric
	if err := n.elections.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func (n *node) isrChanged() []isrChange {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.isrChanges)
}

// open opens partition "t"-0 on a fresh log holding the given batches
// (appended at leader epoch 0), at leader epoch 0 and min.insync.replicas
// 1, with no role yet.
func (n *node) open(t *testing.T, batches ...[]byte) *Partition {
	t.Helper()
	return n.openWith(t, &Settings{MinISR: 1}, batches...)
}

func (n *node) openWith(t *testing.T, s *Settings, batches ...[]byte) *Partition {
	t.Helper()
	l, err := segment.Open(t.TempDir(), s.Log)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range batches {
		if _, err := l.Append(b, 0); err != nil {
			t.Fatalf("append before open: %v", err)
		}
	}
	p := New(n.host.Context, n.host, Opening{
		Topic: "t", TopicID: [16]byte{1}, Index: 0, Log: l, Settings: s,
		LogEnd: prometheus.NewGauge(prometheus.GaugeOpts{Name: "log_end_offset"}),
	})
	t.Cleanup(func() {
		n.idle() // an AlterPartition answer may still be applied to it
		p.Close()
	})
	return p
}

// leader makes the partition this node's to lead at epoch, with the
// given replicas and ISR, at partition epoch 1.
func leader(epoch int32, replicas, isr []int32) Role {
	return Role{LeaderEpoch: epoch, Leader: self, Replicas: replicas, ISR: isr, PartitionEpoch: 1}
}

// followerOf makes the partition this node's to follow from id at epoch.
func followerOf(id, epoch int32) Role {
	return Role{LeaderEpoch: epoch, Leader: id, Replicas: []int32{self, id}, ISR: []int32{self, id}, PartitionEpoch: 1}
}

func mustAppend(t *testing.T, p *Partition, records []byte) segment.AppendInfo {
	t.Helper()
	info, _, err := p.Append(records)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return info
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond for up to 5 s: for a goroutine to reach a wait.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// woken reports whether w got a Wake.
func woken(w chan struct{}) bool {
	select {
	case <-w:
		return true
	default:
		return false
	}
}
