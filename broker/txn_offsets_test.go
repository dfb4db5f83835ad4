package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/txn"
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
	info, leaderEpoch, err := p.AppendMarker(pid, epoch, commit, 0)
	if err != nil {
		c.t.Fatalf("marker: %v", err)
	}
	if err := p.WaitCommitted(c.ctx, info.LastOffset, leaderEpoch); err != nil {
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

// KIP-890 part 1 for offsets: if the transaction ends (its marker is
// written to the group's offsets partition) between the coordinator's
// "yes, it is in the transaction" and the append, the offsets are refused
// with INVALID_TXN_STATE instead of opening a transaction on
// __consumer_offsets that no coordinator will ever end (a hanging
// transaction, which would hold its last stable offset and keep the
// offsets pending for good).
func TestTxnOffsetCommitMarkerBetweenVerifyAndAppend(t *testing.T) {
	b := groupBroker(t, "")
	createTopic(t, testAdmin(t, b), "in", 1, nil)
	c := newTxnOffsetsClient(t, b, "txn-race")
	pid := c.producerID()
	index := b.groups.PartitionFor(c.g)
	p := b.partition(offsetsTopic, index)
	verified := 0
	fakeVerify(t, func(_ *Broker, _ context.Context, _ string, vpid int64, epoch int16, parts []txn.TopicPartition) map[txn.TopicPartition]error {
		verified++
		// The coordinator answered for the transaction, then ended it:
		// its marker reaches the partition before the commit's batch.
		if _, _, err := p.AppendMarker(vpid, epoch, false, 0); err != nil {
			t.Errorf("marker: %v", err)
		}
		out := make(map[txn.TopicPartition]error, len(parts))
		for _, tp := range parts {
			out[tp] = nil
		}
		return out
	})
	if err := c.commit(pid, 0, "in", 0, 10); err != kerr.InvalidTxnState {
		t.Errorf("TxnOffsetCommit whose transaction ended after its verification: %v, want INVALID_TXN_STATE", err)
	}
	if verified != 1 {
		t.Fatalf("verified %d times, want 1", verified)
	}
	if off, ok := p.Log().FirstUnstableOffset(); ok {
		t.Errorf("%s-%d has a transaction open at %d: the late commit opened one", offsetsTopic, index, off)
	}
	c.wantOffset("refused commit", "in", 0, true, -1, nil)

	// A commit joining a transaction already ongoing on the partition
	// needs no verification.
	verifyEverything(t)
	if err := c.commit(pid, 1, "in", 0, 20); err != nil {
		t.Fatalf("TxnOffsetCommit of the next transaction: %v", err)
	}
	fakeVerify(t, func(*Broker, context.Context, string, int64, int16, []txn.TopicPartition) map[txn.TopicPartition]error {
		t.Error("a commit joining an ongoing transaction was verified again")
		return nil
	})
	if err := c.commit(pid, 1, "in", 0, 21); err != nil {
		t.Fatalf("second TxnOffsetCommit of the transaction: %v", err)
	}
	c.endTxn(pid, 1, true)
	c.wantOffset("committed", "in", 0, true, 21, nil)
}

// With a real client (franz-go's GroupTransactSession, a
// consume-transform-produce loop): the input offsets a transaction commits
// reach the group only if the transaction commits; an aborted one leaves
// the group's offsets as they were, and the session reads its records
// again from there. In the end the group has committed every input record
// once and the output holds each exactly once (read_committed).
func TestTxnOffsetsGroupTransactSession(t *testing.T) {
	const n = 300
	b := txnBroker(t, "")
	adm := testAdmin(t, b)
	createTopic(t, adm, "gts-in", 2, nil)
	createTopic(t, adm, "gts-out", 1, nil)
	produceSeq(t, b, "gts-in", 0, n)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// The group starts from offsets committed the plain way: what the
	// session rewinds to after an abort (franz-go rewinds only partitions
	// that have a committed offset).
	start := kadm.Offsets{}
	start.Add(kadm.Offset{Topic: "gts-in", Partition: 0, At: 0, LeaderEpoch: -1})
	start.Add(kadm.Offset{Topic: "gts-in", Partition: 1, At: 0, LeaderEpoch: -1})
	if err := adm.CommitAllOffsets(ctx, "gts-group", start); err != nil {
		t.Fatalf("commit the starting offsets: %v", err)
	}

	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(b.Addr().String()),
		kgo.TransactionalID("gts-tx"),
		kgo.ConsumerGroup("gts-group"),
		kgo.ConsumeTopics("gts-in"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DefaultProduceTopic("gts-out"),
		kgo.TransactionTimeout(10*time.Second),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()

	// RequireStable: End returns once the commit is decided, and the
	// offsets are the group's once its marker reaches __consumer_offsets;
	// until then the partition answers UNSTABLE_OFFSET_COMMIT, and we ask
	// again, as a consumer does.
	committedTotal := func() int64 {
		t.Helper()
		for {
			offs, err := adm.FetchOffsets(kadm.RequireStable(ctx), "gts-group")
			if err != nil {
				t.Fatalf("fetch offsets: %v", err)
			}
			var sum int64
			unstable := false
			offs.Each(func(o kadm.OffsetResponse) {
				switch {
				case errors.Is(o.Err, kerr.UnstableOffsetCommit):
					unstable = true
				case o.Err != nil:
					t.Fatalf("offset of %s-%d: %v", o.Topic, o.Partition, o.Err)
				}
				sum += o.At
			})
			if !unstable {
				return sum
			}
			select {
			case <-ctx.Done():
				t.Fatalf("offsets still unstable: %v", ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}

	round := func(commit bool) int {
		t.Helper()
		var fs kgo.Fetches
		for fs.NumRecords() == 0 {
			if fs = sess.PollFetches(ctx); ctx.Err() != nil {
				t.Fatalf("poll: %v", ctx.Err())
			}
			fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s-%d: %v", topic, p, err) })
		}
		if err := sess.Begin(); err != nil {
			t.Fatalf("begin: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			sess.Produce(ctx, &kgo.Record{Value: r.Value}, func(_ *kgo.Record, err error) {
				if err != nil && commit { // an abort fails what is still buffered
					t.Errorf("produce: %v", err)
				}
			})
		})
		end := kgo.TryAbort
		if commit {
			end = kgo.TryCommit
		}
		committed, err := sess.End(ctx, end)
		if err != nil {
			t.Fatalf("end (commit %v): %v", commit, err)
		}
		if committed != commit {
			t.Fatalf("end (commit %v) committed %v", commit, committed)
		}
		return fs.NumRecords()
	}

	round(false)
	if got := committedTotal(); got != 0 {
		t.Fatalf("after an aborted transaction the group has committed %d records, want 0", got)
	}
	for committedTotal() < n {
		round(true)
	}
	if got := committedTotal(); got != n {
		t.Fatalf("the group committed %d records, want %d", got, n)
	}
	out := readIsolated(t, b, "gts-out", true)
	seen := map[string]int{}
	for _, r := range out[0] {
		seen[string(r.Value)]++
	}
	if len(seen) != n || len(out[0]) != n {
		t.Fatalf("output holds %d records, %d distinct, want %d once each", len(out[0]), len(seen), n)
	}
}
