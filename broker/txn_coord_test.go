package broker

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/group"
	"strata/broker/node"
	"strata/segment"
)

// txnClient sends the transaction APIs as raw frames on one connection,
// at the version each request names (a client library would pick its
// own), so tests see the coordinator's answers as they are.
type txnClient struct {
	t    *testing.T
	addr string
}

func newTxnClient(t *testing.T, b *Broker) txnClient { return txnClient{t, b.Addr().String()} }

func (c txnClient) req(r kmsg.Request) kmsg.Response {
	c.t.Helper()
	if r.GetVersion() == 0 {
		// A request that names no version goes at the highest a client
		// sends (v4 and up of some of these are broker-only).
		r.SetVersion(min(r.MaxVersion(), 3))
	}
	nc, err := net.DialTimeout("tcp", c.addr, 5*time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(30 * time.Second))
	writeFrames(c.t, nc, 1, r)
	frame := readFrame(c.t, nc)
	body := frame[4:] // correlation id
	if r.IsFlexible() {
		body = body[1:] // no tagged fields in the header
	}
	resp := r.ResponseKind()
	resp.SetVersion(r.GetVersion())
	if err := resp.ReadFrom(body); err != nil {
		c.t.Fatalf("%s v%d response: %v", kmsg.NameForKey(r.Key()), r.GetVersion(), err)
	}
	return resp
}

func (c txnClient) init(id string, timeoutMs int32, pid int64, epoch int16) (int64, int16, error) {
	c.t.Helper()
	r := kmsg.NewPtrInitProducerIDRequest()
	r.TransactionalID, r.TransactionTimeoutMillis, r.ProducerID, r.ProducerEpoch = kmsg.StringPtr(id), timeoutMs, pid, epoch
	resp := c.req(r).(*kmsg.InitProducerIDResponse)
	return resp.ProducerID, resp.ProducerEpoch, kerr.ErrorForCode(resp.ErrorCode)
}

// initRetrying retries CONCURRENT_TRANSACTIONS, as clients do.
func (c txnClient) initRetrying(id string, timeoutMs int32) (int64, int16) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		pid, epoch, err := c.init(id, timeoutMs, -1, -1)
		if err == nil {
			return pid, epoch
		}
		if err != kerr.ConcurrentTransactions || time.Now().After(deadline) {
			c.t.Fatalf("InitProducerId %q: %v", id, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c txnClient) addPartitions(version int16, id string, pid int64, epoch int16, topic string, partitions ...int32) error {
	c.t.Helper()
	r := kmsg.NewPtrAddPartitionsToTxnRequest()
	r.Version = version
	r.TransactionalID, r.ProducerID, r.ProducerEpoch = id, pid, epoch
	rt := kmsg.NewAddPartitionsToTxnRequestTopic()
	rt.Topic, rt.Partitions = topic, partitions
	r.Topics = append(r.Topics, rt)
	resp := c.req(r).(*kmsg.AddPartitionsToTxnResponse)
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c txnClient) endTxn(version int16, id string, pid int64, epoch int16, commit bool) (*kmsg.EndTxnResponse, error) {
	c.t.Helper()
	r := kmsg.NewPtrEndTxnRequest()
	r.Version = version
	r.TransactionalID, r.ProducerID, r.ProducerEpoch, r.Commit = id, pid, epoch, commit
	resp := c.req(r).(*kmsg.EndTxnResponse)
	return resp, kerr.ErrorForCode(resp.ErrorCode)
}

func (c txnClient) describe(id string) kmsg.DescribeTransactionsResponseTransactionState {
	c.t.Helper()
	r := kmsg.NewPtrDescribeTransactionsRequest()
	r.TransactionalIDs = []string{id}
	resp := c.req(r).(*kmsg.DescribeTransactionsResponse)
	if len(resp.TransactionStates) != 1 {
		c.t.Fatalf("DescribeTransactions: %d states", len(resp.TransactionStates))
	}
	return resp.TransactionStates[0]
}

// waitState waits until id's transaction is in state.
func (c txnClient) waitState(id, state string) kmsg.DescribeTransactionsResponseTransactionState {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := c.describe(id)
		if s.ErrorCode == 0 && s.State == state {
			return s
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%q: state %q (error %d), want %s", id, s.State, s.ErrorCode, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// markers returns the transaction markers in a partition's local log, in
// offset order.
func markers(t *testing.T, b *Broker, topic string, partition int32) []segment.TxnMarker {
	t.Helper()
	p := b.partition(topic, partition)
	if p == nil {
		t.Fatalf("%s-%d is not open", topic, partition)
	}
	buf, err := p.Log().Read(nil, p.Log().StartOffset(), p.Log().EndOffset(), 1<<20)
	if err != nil {
		t.Fatalf("read %s-%d: %v", topic, partition, err)
	}
	var out []segment.TxnMarker
	for len(buf) > 0 {
		h, err := segment.ParseBatchHeader(buf)
		if err != nil {
			t.Fatal(err)
		}
		batch := buf[:h.Size()]
		buf = buf[h.Size():]
		if !h.IsControl() {
			continue
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(batch); err != nil {
			t.Fatal(err)
		}
		var r kmsg.Record
		if _, err := readRecord(rb.Records, &r); err != nil {
			t.Fatal(err)
		}
		m, err := segment.DecodeTxnMarker(r.Key, r.Value)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// readRecord decodes one length-prefixed record from raw and returns its
// encoded size (as broker/txn reads the records of __transaction_state).
func readRecord(raw []byte, r *kmsg.Record) (int, error) {
	l, n := kbin.Varint(raw)
	if n <= 0 || l < 0 || int(l) > len(raw)-n {
		return 0, fmt.Errorf("%w: record length", segment.ErrCorruptMessage)
	}
	size := n + int(l)
	if err := r.ReadFrom(raw[:size]); err != nil {
		return 0, err
	}
	return size, nil
}

func TestTxnCoordinatorCommitAbortAndFencing(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "tx-a", 2, nil)
	c := newTxnClient(t, b)

	// FindCoordinator for a transactional id names this node.
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorType, fc.CoordinatorKey = 1, "tx1"
	if resp := c.req(fc).(*kmsg.FindCoordinatorResponse); resp.ErrorCode != 0 || resp.NodeID != b.cfg.NodeID {
		t.Fatalf("FindCoordinator: error %d, node %d", resp.ErrorCode, resp.NodeID)
	}

	pid, epoch := c.initRetrying("tx1", 60000)
	if epoch != 0 {
		t.Fatalf("first epoch %d", epoch)
	}
	if err := c.addPartitions(3, "tx1", pid, epoch, "tx-a", 0, 1); err != nil {
		t.Fatalf("AddPartitionsToTxn: %v", err)
	}
	s := c.describe("tx1")
	if s.State != "Ongoing" || s.ProducerID != pid || len(s.Topics) != 1 || len(s.Topics[0].Partitions) != 2 || s.TimeoutMillis != 60000 || s.StartTimestamp <= 0 {
		t.Fatalf("describe ongoing: %+v", s)
	}
	if _, err := c.endTxn(3, "tx1", pid, epoch, true); err != nil {
		t.Fatalf("EndTxn commit: %v", err)
	}
	c.waitState("tx1", "CompleteCommit")
	for p := int32(0); p < 2; p++ {
		if m := markers(t, b, "tx-a", p); len(m) != 1 || !m[0].Commit {
			t.Fatalf("tx-a-%d markers: %+v, want one commit", p, m)
		}
	}
	// A retried commit is answered again; an abort of it is a client bug.
	if _, err := c.endTxn(3, "tx1", pid, epoch, true); err != nil {
		t.Fatalf("retried EndTxn commit: %v", err)
	}
	if _, err := c.endTxn(3, "tx1", pid, epoch, false); err != kerr.InvalidTxnState {
		t.Fatalf("abort after commit: %v, want INVALID_TXN_STATE", err)
	}

	// A second producer with the same id fences the first.
	pid2, epoch2 := c.initRetrying("tx1", 60000)
	if pid2 != pid || epoch2 != epoch+1 {
		t.Fatalf("re-init: %d/%d, want %d/%d", pid2, epoch2, pid, epoch+1)
	}
	if err := c.addPartitions(3, "tx1", pid, epoch, "tx-a", 0); err != kerr.ProducerFenced {
		t.Fatalf("fenced add v3: %v, want PRODUCER_FENCED", err)
	}
	if err := c.addPartitions(1, "tx1", pid, epoch, "tx-a", 0); err != kerr.InvalidProducerEpoch {
		t.Fatalf("fenced add v1: %v, want INVALID_PRODUCER_EPOCH", err)
	}
	if err := c.addPartitions(3, "tx1", pid+1000, epoch2, "tx-a", 0); err != kerr.InvalidProducerIDMapping {
		t.Fatalf("add with another producer id: %v, want INVALID_PRODUCER_ID_MAPPING", err)
	}
	if err := c.addPartitions(3, "tx1", pid2, epoch2, "no-such-topic", 0); err != kerr.UnknownTopicOrPartition {
		t.Fatalf("add of an unknown topic: %v", err)
	}

	// Abort: an abort marker on the partition added.
	if err := c.addPartitions(3, "tx1", pid2, epoch2, "tx-a", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.endTxn(3, "tx1", pid, epoch, false); err != kerr.ProducerFenced {
		t.Fatalf("EndTxn by the fenced producer: %v", err)
	}
	if _, err := c.endTxn(3, "tx1", pid2, epoch2, false); err != nil {
		t.Fatal(err)
	}
	c.waitState("tx1", "CompleteAbort")
	if m := markers(t, b, "tx-a", 1); len(m) != 2 || m[1].Commit {
		t.Fatalf("tx-a-1 markers: %+v, want commit then abort", m)
	}
	if m := markers(t, b, "tx-a", 0); len(m) != 1 {
		t.Fatalf("tx-a-0 markers: %+v, want only the commit", m)
	}

	// ListTransactions finds it; a state filter Kafka does not know is
	// returned as such.
	lr := kmsg.NewPtrListTransactionsRequest()
	lr.StateFilters = []string{"CompleteAbort", "Nonsense"}
	lresp := c.req(lr).(*kmsg.ListTransactionsResponse)
	if len(lresp.TransactionStates) != 1 || lresp.TransactionStates[0].TransactionalID != "tx1" || len(lresp.UnknownStateFilters) != 1 {
		t.Fatalf("ListTransactions: %+v", lresp)
	}
	if s := c.describe("nobody"); s.ErrorCode != kerr.TransactionalIDNotFound.Code {
		t.Fatalf("describe unknown id: %d", s.ErrorCode)
	}
}

func TestTxnCoordinatorStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	b := testBroker(t, dir)
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "tx-r", 1, nil)
	c := newTxnClient(t, b)
	pid, epoch := c.initRetrying("txr", 60000)
	if err := c.addPartitions(3, "txr", pid, epoch, "tx-r", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.endTxn(3, "txr", pid, epoch, true); err != nil {
		t.Fatal(err)
	}
	c.waitState("txr", "CompleteCommit")
	// One more transaction left open across the restart.
	if err := c.addPartitions(3, "txr", pid, epoch, "tx-r", 0); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = testBroker(t, dir)
	c = newTxnClient(t, b)
	s := c.waitState("txr", "Ongoing")
	if s.ProducerID != pid || s.ProducerEpoch != epoch {
		t.Fatalf("after restart: %+v", s)
	}
	// The open transaction ends normally with the reloaded state.
	if _, err := c.endTxn(3, "txr", pid, epoch, true); err != nil {
		t.Fatal(err)
	}
	c.waitState("txr", "CompleteCommit")
	if m := markers(t, b, "tx-r", 0); len(m) != 2 || !m[1].Commit {
		t.Fatalf("markers: %+v", m)
	}
	// InitProducerId bumps from the reloaded epoch.
	if pid2, epoch2 := c.initRetrying("txr", 60000); pid2 != pid || epoch2 != epoch+1 {
		t.Fatalf("re-init after restart: %d/%d", pid2, epoch2)
	}
}

func TestTxnCoordinatorTimeoutAbortAndMetrics(t *testing.T) {
	b := testBroker(t, "", func(c *Config) {
		c.TransactionAbortInterval = 50 * time.Millisecond
		c.HTTPListen = "127.0.0.1:0"
	})
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "tx-t", 1, nil)
	c := newTxnClient(t, b)
	if _, _, err := c.init("txt", 0, -1, -1); err != kerr.InvalidTransactionTimeout {
		t.Fatalf("timeout 0: %v", err)
	}
	if _, _, err := c.init("txt", int32((16 * time.Minute).Milliseconds()), -1, -1); err != kerr.InvalidTransactionTimeout {
		t.Fatalf("timeout above the max: %v", err)
	}
	pid, epoch := c.initRetrying("txt", 3000)
	if err := c.addPartitions(3, "txt", pid, epoch, "tx-t", 0); err != nil {
		t.Fatal(err)
	}
	if m := scrape(t, b); !strings.Contains(m, `strata_transactions{state="Ongoing"} 1`) || strings.Contains(m, "strata_transaction_oldest_open_seconds 0\n") {
		t.Errorf("metrics while the transaction is open:\n%s", grepLines(m, "strata_transaction"))
	}
	s := c.waitState("txt", "CompleteAbort")
	if m := scrape(t, b); !strings.Contains(m, `strata_transactions{state="CompleteAbort"} 1`) || !strings.Contains(m, "strata_transaction_oldest_open_seconds 0\n") {
		t.Errorf("metrics after the timeout abort:\n%s", grepLines(m, "strata_transaction"))
	}
	if s.ProducerEpoch != epoch+2 {
		t.Fatalf("epoch after the timeout abort %d, want %d", s.ProducerEpoch, epoch+2)
	}
	if m := markers(t, b, "tx-t", 0); len(m) != 1 || m[0].Commit {
		t.Fatalf("markers %+v, want one abort", m)
	}
	if _, err := c.endTxn(3, "txt", pid, epoch, true); err != kerr.ProducerFenced {
		t.Fatalf("commit after the timeout: %v, want PRODUCER_FENCED", err)
	}
}

// txnCoordinator returns the node that coordinates id in c, once the
// transaction state topic exists and the partition's leader has loaded it.
func (c *cluster) txnCoordinator(id string) *Broker {
	c.t.Helper()
	var coord *Broker
	c.waitFor("a transaction coordinator for "+id, 20*time.Second, func() bool {
		t, ok := c.any().meta.State().Topics[node.TxnStateTopic]
		if !ok {
			return false
		}
		leader := t.Partitions[group.Partition(id, int32(len(t.Partitions)))].Leader
		if leader < 0 || c.node(leader) == nil || c.node(leader).txns == nil {
			return false
		}
		part := group.Partition(id, int32(len(t.Partitions)))
		if _, loaded := c.node(leader).txns.Loaded(part); !loaded {
			return false
		}
		coord = c.node(leader)
		return true
	})
	return coord
}

// TestTxnMarkersReachOtherBrokersAndSurviveFailover: the coordinator writes
// markers on partitions led by other brokers (WriteTxnMarkers), and when
// it dies its successor loads the open transaction from the replicated
// __transaction_state and ends it.
func TestTxnMarkersReachOtherBrokersAndSurviveFailover(t *testing.T) {
	c := testCluster(t, 3, func(cfg *Config) { cfg.TransactionStatePartitions = 3 })
	c.createTopic("tx-c", 3, 3, nil)
	coord := c.txnCoordinator("txc")
	tc := newTxnClient(t, coord)
	pid, epoch := tc.initRetrying("txc", 60000)
	if err := tc.addPartitions(3, "txc", pid, epoch, "tx-c", 0, 1, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.endTxn(3, "txc", pid, epoch, true); err != nil {
		t.Fatal(err)
	}
	tc.waitState("txc", "CompleteCommit")
	leaders := map[int32]bool{}
	for p := int32(0); p < 3; p++ {
		leader := c.partitionState("tx-c", p).Leader
		leaders[leader] = true
		if m := markers(t, c.node(leader), "tx-c", p); len(m) != 1 || !m[0].Commit {
			t.Fatalf("tx-c-%d at its leader %d: markers %+v", p, leader, m)
		}
	}
	if len(leaders) < 2 {
		t.Logf("all partitions led by one node; the remote path was not exercised")
	}

	// An open transaction survives the coordinator's death.
	if err := tc.addPartitions(3, "txc", pid, epoch, "tx-c", 0, 1, 2); err != nil {
		t.Fatal(err)
	}
	c.stop(coord.cfg.NodeID)
	next := c.txnCoordinator("txc")
	tc = newTxnClient(t, next)
	s := tc.waitState("txc", "Ongoing")
	if s.ProducerID != pid || s.ProducerEpoch != epoch {
		t.Fatalf("after failover: %+v", s)
	}
	if _, err := tc.endTxn(3, "txc", pid, epoch, false); err != nil {
		t.Fatal(err)
	}
	tc.waitState("txc", "CompleteAbort")
	for p := int32(0); p < 3; p++ {
		var ms []segment.TxnMarker
		c.waitFor("the abort marker on every partition", 20*time.Second, func() bool {
			leader := c.partitionState("tx-c", p).Leader
			if leader < 0 || c.node(leader) == nil {
				return false
			}
			ms = markers(t, c.node(leader), "tx-c", p)
			return len(ms) == 2
		})
		if ms[0].Commit != true || ms[1].Commit {
			t.Fatalf("tx-c-%d markers %+v, want commit then abort", p, ms)
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
