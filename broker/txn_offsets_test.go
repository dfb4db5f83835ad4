package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// txnOffsetsClient sends raw group requests for group g.
type txnOffsetsClient struct {
	t   *testing.T
	b   *Broker
	cl  *kgo.Client
	ctx context.Context
	g   string
}

func newTxnOffsetsClient(t *testing.T, b *Broker, g string) *txnOffsetsClient {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &txnOffsetsClient{t: t, b: b, cl: testClient(t, b), ctx: ctx, g: g}
}

// producerID gets a fresh producer id from InitProducerId.
func (c *txnOffsetsClient) producerID() int64 {
	c.t.Helper()
	resp, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(c.ctx, c.cl)
	if err != nil || resp.ErrorCode != 0 {
		c.t.Fatalf("InitProducerId: %v %v", err, kerr.ErrorForCode(resp.ErrorCode))
	}
	return resp.ProducerID
}

// commit sends a TxnOffsetCommit v3 of topic-partition at offset, without
// a generation (a producer outside the group's membership), and returns
// the partition's error.
func (c *txnOffsetsClient) commit(pid int64, epoch int16, topic string, partition int32, offset int64) error {
	c.t.Helper()
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.Version = 3
	req.TransactionalID, req.Group, req.ProducerID, req.ProducerEpoch = "tx-"+c.g, c.g, pid, epoch
	p := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	p.Partition, p.Offset = partition, offset
	req.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: topic, Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{p}}}
	resp, err := req.RequestWith(c.ctx, c.cl)
	if err != nil {
		c.t.Fatalf("TxnOffsetCommit: %v", err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		c.t.Fatalf("TxnOffsetCommit answered %+v", resp.Topics)
	}
	return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
}

// fetch returns the group's committed offset of topic-partition (-1 for
// none) and the partition's error, with OffsetFetch v7.
func (c *txnOffsetsClient) fetch(topic string, partition int32, requireStable bool) (int64, error) {
	c.t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version, req.Group, req.RequireStable = 7, c.g, requireStable
	req.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: topic, Partitions: []int32{partition}}}
	resp, err := req.RequestWith(c.ctx, c.cl)
	if err != nil || resp.ErrorCode != 0 {
		c.t.Fatalf("OffsetFetch: %v %v", err, kerr.ErrorForCode(resp.ErrorCode))
	}
	p := resp.Topics[0].Partitions[0]
	return p.Offset, kerr.ErrorForCode(p.ErrorCode)
}

func (c *txnOffsetsClient) wantOffset(what, topic string, partition int32, requireStable bool, want int64, wantErr error) {
	c.t.Helper()
	got, err := c.fetch(topic, partition, requireStable)
	if got != want || err != wantErr {
		c.t.Errorf("%s: OffsetFetch %s-%d (require stable %v) = %d, %v; want %d, %v", what, topic, partition, requireStable, got, err, want, wantErr)
	}
}

// endTxn does what the WriteTxnMarkers handler does on the group's
// offsets partition: the marker, appended by the leader and committed,
// then CompleteTxn.
func (c *txnOffsetsClient) endTxn(pid int64, epoch int16, commit bool) {
	c.t.Helper()
	index := c.b.groups.PartitionFor(c.g)
	p := c.b.partition(offsetsTopic, index)
	if p == nil {
		c.t.Fatalf("%s-%d is not open here", offsetsTopic, index)
	}
	info, leaderEpoch, err := p.appendMarker(pid, epoch, commit, 0)
	if err != nil {
		c.t.Fatalf("marker: %v", err)
	}
	if err := c.b.waitCommitted(c.ctx, p, info.LastOffset, leaderEpoch); err != nil {
		c.t.Fatalf("marker commit: %v", err)
	}
	c.b.groups.CompleteTxn(index, pid, commit)
}

// KIP-98 through the wire: offsets a transaction commits for a group are
// written to __consumer_offsets at once but reach the group only with the
// transaction's commit marker; until then OffsetFetch with RequireStable
// (KIP-447) answers UNSTABLE_OFFSET_COMMIT. A producer fenced by a newer
// epoch has its commit refused by the log with INVALID_PRODUCER_EPOCH.
func TestTxnOffsetCommitVisibleAfterMarker(t *testing.T) {
	verifyEverything(t)
	dir := t.TempDir()
	b := groupBroker(t, dir)
	createTopic(t, testAdmin(t, b), "in", 2, nil)
	c := newTxnOffsetsClient(t, b, "txn-group")
	pid := c.producerID()

	if err := c.commit(pid, 0, "in", 0, 10); err != nil {
		t.Fatalf("TxnOffsetCommit: %v", err)
	}
	c.wantOffset("pending", "in", 0, false, -1, nil)
	c.wantOffset("pending", "in", 0, true, -1, kerr.UnstableOffsetCommit)
	// A second commit in the same transaction: the coordinator's batches
	// carry no sequence a client's retry check would trip over.
	if err := c.commit(pid, 0, "in", 1, 20); err != nil {
		t.Fatalf("second TxnOffsetCommit of the transaction: %v", err)
	}
	c.endTxn(pid, 0, true)
	c.wantOffset("committed", "in", 0, true, 10, nil)
	c.wantOffset("committed", "in", 1, true, 20, nil)

	// The next transaction, after an epoch bump, aborts.
	if err := c.commit(pid, 1, "in", 0, 30); err != nil {
		t.Fatalf("TxnOffsetCommit at epoch 1: %v", err)
	}
	// A zombie at the old epoch is fenced by the log.
	if err := c.commit(pid, 0, "in", 0, 99); err != kerr.InvalidProducerEpoch {
		t.Fatalf("TxnOffsetCommit of a fenced epoch: %v, want INVALID_PRODUCER_EPOCH", err)
	}
	c.endTxn(pid, 1, false)
	c.wantOffset("aborted", "in", 0, true, 10, nil)

	// Bad input gets a Kafka error.
	if err := c.commit(-1, 0, "in", 0, 1); err != kerr.InvalidProducerIDMapping {
		t.Errorf("TxnOffsetCommit without a producer id: %v", err)
	}
	if err := c.commit(pid, 2, "no-such-topic", 0, 1); err != kerr.UnknownTopicOrPartition {
		t.Errorf("TxnOffsetCommit of an unknown partition: %v", err)
	}

	// Every commit answered was written: the log holds both of the
	// first transaction's.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	c = newTxnOffsetsClient(t, groupBroker(t, dir), "txn-group")
	c.wantOffset("replayed", "in", 0, true, 10, nil)
	c.wantOffset("replayed", "in", 1, true, 20, nil)
}

// A restart in the middle of transactions: the loader applies the offsets
// of a committed transaction, keeps those of one still open pending, and
// the open one's marker, written after the restart, completes it.
func TestTxnOffsetsSurviveRestart(t *testing.T) {
	verifyEverything(t)
	dir := t.TempDir()
	b := groupBroker(t, dir)
	createTopic(t, testAdmin(t, b), "in", 2, nil)
	c := newTxnOffsetsClient(t, b, "txn-restart")
	committed, open := c.producerID(), c.producerID()
	if err := c.commit(committed, 0, "in", 0, 10); err != nil {
		t.Fatal(err)
	}
	if err := c.commit(open, 0, "in", 1, 20); err != nil {
		t.Fatal(err)
	}
	c.endTxn(committed, 0, true)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = groupBroker(t, dir)
	c = newTxnOffsetsClient(t, b, "txn-restart")
	c.wantOffset("committed before the restart", "in", 0, true, 10, nil)
	c.wantOffset("open across the restart", "in", 1, false, -1, nil)
	c.wantOffset("open across the restart", "in", 1, true, -1, kerr.UnstableOffsetCommit)
	c.endTxn(open, 0, true)
	c.wantOffset("committed after the restart", "in", 1, true, 20, nil)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = groupBroker(t, dir)
	c = newTxnOffsetsClient(t, b, "txn-restart")
	c.wantOffset("after a second restart", "in", 0, true, 10, nil)
	c.wantOffset("after a second restart", "in", 1, true, 20, nil)
}

// A TxnOffsetCommit the transaction coordinator does not verify (KIP-890
// part 1) is answered with the codes Kafka's group coordinator gives a
// v0-4 client: the fencing and state errors it acts on, and a retriable
// error when the transaction coordinator could not answer.
func TestTxnOffsetsVerifyCodes(t *testing.T) {
	for _, c := range []struct {
		err  error
		want *kerr.Error
	}{
		{kerr.ProducerFenced, kerr.InvalidProducerEpoch},
		{fmt.Errorf("txn coordinator: %w", kerr.TransactionAbortable), kerr.InvalidTxnState},
		{kerr.InvalidProducerIDMapping, kerr.InvalidProducerIDMapping},
		{kerr.NotCoordinator, kerr.CoordinatorNotAvailable},
		{kerr.CoordinatorLoadInProgress, kerr.CoordinatorNotAvailable},
		{errors.New("connection refused"), kerr.CoordinatorNotAvailable},
	} {
		if got := txnOffsetsVerifyCode(c.err); got != c.want {
			t.Errorf("verification error %v answered %v, want %v", c.err, got, c.want)
		}
	}
}
