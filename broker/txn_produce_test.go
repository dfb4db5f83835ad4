package broker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/partition"
	"strata/broker/txn"
)

// produceTxn sends a Produce request at version with the transactional id
// (nil: none) on a connection of its own, batches[i] to partition i of
// topic (none for a nil one), and returns the partitions' answers in that
// order.
func produceTxn(t *testing.T, b *Broker, version int16, txnID *string, topic string, batches ...[]byte) []kmsg.ProduceResponseTopicPartition {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.SetVersion(version)
	req.TransactionID = txnID
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	for i, batch := range batches {
		if batch == nil {
			continue
		}
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition = int32(i)
		rp.Records = batch
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp := kmsg.NewPtrProduceResponse()
	resp.SetVersion(version)
	if err := resp.ReadFrom(rawRoundTrip(t, b, req)); err != nil {
		t.Fatalf("produce response: %v", err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != len(rt.Partitions) {
		t.Fatalf("produce response: %+v", resp)
	}
	return resp.Topics[0].Partitions
}

func wantCodes(t *testing.T, what string, got []kmsg.ProduceResponseTopicPartition, want ...*kerr.Error) {
	t.Helper()
	for i, sp := range got {
		var w int16
		if want[i] != nil {
			w = want[i].Code
		}
		if sp.ErrorCode != w {
			t.Errorf("%s: partition %d got %v (%v), want %v", what, sp.Partition, kerr.ErrorForCode(sp.ErrorCode), deref(sp.ErrorMessage), want[i])
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// fakeVerify stands in for the transaction coordinator's verification
// until the test ends.
func fakeVerify(t *testing.T, fn verifyTxnFunc) {
	testVerifyTxn.Store(&fn)
	t.Cleanup(func() { testVerifyTxn.Store(nil) })
}

// verifyEverything makes the coordinator's verification say yes to every
// partition until the test ends: for tests of what the partition (or the
// group coordinator) does with transactional data, written without a
// transaction run through the coordinator.
func verifyEverything(t *testing.T) {
	fakeVerify(t, func(_ *Broker, _ context.Context, _ string, _ int64, _ int16, parts []txn.TopicPartition) map[txn.TopicPartition]error {
		out := make(map[txn.TopicPartition]error, len(parts))
		for _, p := range parts {
			out[p] = nil
		}
		return out
	})
}

// Kafka's rules for who may write what (KafkaApis.handleProduceRequest,
// ReplicaManager.handleProduceAppend, LogValidator): transactional
// batches need a transactional id in the request
// (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), may come from one producer
// only (INVALID_PRODUCER_ID_MAPPING), and no client writes control
// batches (INVALID_RECORD). A request with a transactional id takes
// transactional batches, and idempotent ones as Kafka does.
func TestTxnProduceWhoMayWrite(t *testing.T) {
	verifyEverything(t)
	b := testBroker(t, "")
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "who", 2, nil)
	id := ptr("app-1")
	now := time.Now().UnixMilli()

	wantCodes(t, "transactional batch without a transactional id",
		produceTxn(t, b, 12, nil, "who", txnRawBatch(7, 0, 0, now, "x")),
		kerr.TransactionalIDAuthorizationFailed)
	wantCodes(t, "a control batch from a client",
		produceTxn(t, b, 12, id, "who", withAttributes(rawBatch(7, 0, 0, now, "x"), partition.AttrTransactional|partition.AttrControl)),
		kerr.InvalidRecord)
	wantCodes(t, "transactional batches of two producers in one request",
		produceTxn(t, b, 12, id, "who", txnRawBatch(7, 0, 0, now, "x"), txnRawBatch(8, 0, 0, now, "y")),
		kerr.InvalidProducerIDMapping, kerr.InvalidProducerIDMapping)
	if end := listOffset(t, cl, "who", -1); end != 0 {
		t.Fatalf("log end %d after refused requests", end)
	}

	wantCodes(t, "transactional batches with a transactional id",
		produceTxn(t, b, 12, id, "who", txnRawBatch(7, 0, 0, now, "a", "b"), txnRawBatch(7, 0, 0, now, "c")),
		nil, nil)
	// Producer 7's transaction is open on both partitions: the last stable
	// offset stays at its start until a marker lands.
	for i := range int32(2) {
		if lso := b.partition("who", i).LastStableOffset(); lso != 0 {
			t.Errorf("partition %d: last stable offset %d with a transaction open at 0", i, lso)
		}
	}
	// A non-transactional batch from a producer in a transaction is
	// INVALID_TXN_STATE (ProducerAppendInfo); from another producer, in a
	// request with a transactional id, it is taken as Kafka takes it.
	wantCodes(t, "idempotent batch of the producer in a transaction",
		produceTxn(t, b, 12, id, "who", rawBatch(7, 0, 2, now, "d")),
		kerr.InvalidTxnState)
	wantCodes(t, "idempotent batch of another producer",
		produceTxn(t, b, 12, id, "who", rawBatch(9, 0, 0, now, "e")),
		nil)
}

// Bad epochs, sequences and markers get Kafka's codes: an older producer
// epoch INVALID_PRODUCER_EPOCH, a sequence gap
// OUT_OF_ORDER_SEQUENCE_NUMBER, a marker from an older coordinator epoch
// TRANSACTION_COORDINATOR_FENCED. A producer id the partition has never
// seen starts at any sequence (KIP-360: Kafka no longer answers
// UNKNOWN_PRODUCER_ID to a produce).
func TestTxnProduceBadEpochAndSequence(t *testing.T) {
	verifyEverything(t)
	b := testBroker(t, "")
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "bad", 1, nil)
	id := ptr("app-2")
	now := time.Now().UnixMilli()
	p := b.partition("bad", 0)

	wantCodes(t, "first batch", produceTxn(t, b, 12, id, "bad", txnRawBatch(5, 3, 0, now, "a")), nil)
	wantCodes(t, "older epoch", produceTxn(t, b, 12, id, "bad", txnRawBatch(5, 2, 1, now, "b")), kerr.InvalidProducerEpoch)
	wantCodes(t, "sequence gap", produceTxn(t, b, 12, id, "bad", txnRawBatch(5, 3, 5, now, "b")), kerr.OutOfOrderSequenceNumber)
	wantCodes(t, "unknown producer at sequence 40", produceTxn(t, b, 12, id, "bad", txnRawBatch(6, 0, 40, now, "c")), nil)

	if n := guardsLeft(p); n != 0 {
		t.Fatalf("%d verification guards left after refused appends", n)
	}

	if _, _, err := p.AppendMarker(5, 3, true, 4); err != nil {
		t.Fatal(err)
	}
	_, _, err := p.AppendMarker(5, 3, false, 2)
	if code := errorCode(err); code != kerr.TransactionCoordinatorFenced.Code {
		t.Fatalf("marker from an older coordinator: %v (%v), want TRANSACTION_COORDINATOR_FENCED", kerr.ErrorForCode(code), err)
	}
	_, _, err = p.AppendMarker(5, 1, false, 4)
	if code := errorCode(err); code != kerr.InvalidProducerEpoch.Code {
		t.Fatalf("marker at an older producer epoch: %v (%v), want INVALID_PRODUCER_EPOCH", kerr.ErrorForCode(code), err)
	}
}

// guardsLeft counts p's verification guards: they must not pile up.
func guardsLeft(p *partition.Partition) int {
	return p.Verifications()
}

// verifyCall is what a fake verification was asked.
type verifyCall struct {
	txnID string
	pid   int64
	epoch int16
	parts []txn.TopicPartition
}

// recordingVerify answers each call with answer's error for every
// partition and records the calls.
type recordingVerify struct {
	mu     sync.Mutex
	calls  []verifyCall
	answer error
	// between, when set, runs after the verification and before the
	// answer: what lands in the log while the answer travels back.
	between func()
}

func (v *recordingVerify) verify(_ *Broker, _ context.Context, txnID string, pid int64, epoch int16, parts []txn.TopicPartition) map[txn.TopicPartition]error {
	v.mu.Lock()
	v.calls = append(v.calls, verifyCall{txnID, pid, epoch, slices.Clone(parts)})
	answer, between := v.answer, v.between
	v.between = nil
	v.mu.Unlock()
	if between != nil {
		between()
	}
	out := make(map[txn.TopicPartition]error, len(parts))
	for _, tp := range parts {
		out[tp] = answer
	}
	return out
}

func (v *recordingVerify) took() []verifyCall {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.calls)
}

// KIP-890 part 1: the first transactional batch of a transaction on a
// partition is verified with the coordinator, all such partitions of a
// request in one call; a partition where the producer's transaction is
// already ongoing at that epoch is not asked about again.
func TestTxnProduceVerifiesFirstBatch(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "ver", 3, nil)
	v := &recordingVerify{}
	fakeVerify(t, v.verify)
	id := ptr("app-3")
	now := time.Now().UnixMilli()

	wantCodes(t, "first batches", produceTxn(t, b, 12, id, "ver", txnRawBatch(11, 2, 0, now, "a"), txnRawBatch(11, 2, 0, now, "b")), nil, nil)
	calls := v.took()
	want := []txn.TopicPartition{{Topic: "ver", Partition: 0}, {Topic: "ver", Partition: 1}}
	if len(calls) != 1 || calls[0].txnID != "app-3" || calls[0].pid != 11 || calls[0].epoch != 2 || !slices.Equal(sortedParts(calls[0].parts), want) {
		t.Fatalf("verification calls %+v, want one for partitions %v", calls, want)
	}
	// Partition 0 has the transaction; partition 2 joins it now.
	wantCodes(t, "next batches", produceTxn(t, b, 12, id, "ver", txnRawBatch(11, 2, 1, now, "c"), nil, txnRawBatch(11, 2, 0, now, "d")), nil, nil)
	calls = v.took()
	if len(calls) != 2 || !slices.Equal(calls[1].parts, []txn.TopicPartition{{Topic: "ver", Partition: 2}}) {
		t.Fatalf("verification calls %+v, want a second one for partition 2 only", calls)
	}
	// Idempotent batches are never verified.
	wantCodes(t, "idempotent", produceTxn(t, b, 12, id, "ver", rawBatch(12, 0, 0, now, "e")), nil)
	if n := len(v.took()); n != 2 {
		t.Fatalf("%d verification calls after an idempotent produce, want still 2", n)
	}
}

func sortedParts(parts []txn.TopicPartition) []txn.TopicPartition {
	out := slices.Clone(parts)
	slices.SortFunc(out, func(a, b txn.TopicPartition) int { return int(a.Partition - b.Partition) })
	return out
}

// A failed verification refuses the partition's batch with the code the
// client's produce version knows (ReplicaManager and
// AddPartitionsToTxnManager): TRANSACTION_ABORTABLE from v11 (KIP-890),
// INVALID_TXN_STATE before; PRODUCER_FENCED as INVALID_PRODUCER_EPOCH; a
// coordinator that could not answer as NOT_ENOUGH_REPLICAS, which every
// client retries without a metadata refresh; a producer id the
// coordinator does not know keeps INVALID_PRODUCER_ID_MAPPING.
func TestTxnProduceVerificationErrors(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "verr", 1, nil)
	v := &recordingVerify{}
	fakeVerify(t, v.verify)
	id := ptr("app-4")
	now := time.Now().UnixMilli()
	for _, c := range []struct {
		answer  error
		version int16
		want    *kerr.Error
	}{
		{kerr.TransactionAbortable, 12, kerr.TransactionAbortable},
		{kerr.TransactionAbortable, 11, kerr.TransactionAbortable},
		{kerr.TransactionAbortable, 10, kerr.InvalidTxnState},
		{fmt.Errorf("%w: producer 21 epoch 0 fenced", kerr.ProducerFenced), 12, kerr.InvalidProducerEpoch},
		{kerr.NotCoordinator, 12, kerr.NotEnoughReplicas},
		{kerr.CoordinatorNotAvailable, 9, kerr.NotEnoughReplicas},
		{kerr.ConcurrentTransactions, 12, kerr.NotEnoughReplicas},
		{kerr.InvalidProducerIDMapping, 12, kerr.InvalidProducerIDMapping},
	} {
		v.mu.Lock()
		v.answer = c.answer
		v.mu.Unlock()
		wantCodes(t, fmt.Sprintf("%v at v%d", c.answer, c.version),
			produceTxn(t, b, c.version, id, "verr", txnRawBatch(21, 0, 0, now, "x")), c.want)
	}
	if end := listOffset(t, cl, "verr", -1); end != 0 {
		t.Fatalf("log end %d: a batch that failed verification was written", end)
	}
	if calls := v.took(); len(calls) != 8 {
		t.Fatalf("%d verification calls, want one per produce (8)", len(calls))
	}
	if n := guardsLeft(b.partition("verr", 0)); n != 0 {
		t.Fatalf("%d verification guards left after failed verifications", n)
	}
}

// The verification guard (KIP-890's VerificationGuard): a marker that
// ends the producer's transaction on the partition between the
// coordinator's answer and the append voids the answer. The late batch
// is refused with INVALID_TXN_STATE instead of opening a transaction the
// coordinator will never end (a hanging transaction that would hold the
// last stable offset forever); the producer's next produce is verified
// afresh.
func TestTxnProduceGuardVoidedByMarker(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "guard", 1, nil)
	p := b.partition("guard", 0)
	v := &recordingVerify{}
	fakeVerify(t, v.verify)
	id := ptr("app-5")
	now := time.Now().UnixMilli()

	v.between = func() {
		// The coordinator aborts the transaction meanwhile (its timeout,
		// or the producer's EndTxn) and writes the marker.
		if _, _, err := p.AppendMarker(31, 0, false, 0); err != nil {
			t.Errorf("marker: %v", err)
		}
	}
	wantCodes(t, "a batch whose verification a marker overtook", produceTxn(t, b, 12, id, "guard", txnRawBatch(31, 0, 0, now, "late")), kerr.InvalidTxnState)
	if end := p.Log().EndOffset(); end != 1 {
		t.Fatalf("log end %d, want 1 (the marker alone)", end)
	}
	if _, open := p.Log().FirstUnstableOffset(); open {
		t.Fatal("the refused batch left a transaction open")
	}
	if lso, hw := p.LastStableOffset(), p.HighWatermark(); lso != hw {
		t.Fatalf("last stable offset %d held below the high watermark %d", lso, hw)
	}

	wantCodes(t, "the next produce", produceTxn(t, b, 12, id, "guard", txnRawBatch(31, 0, 0, now, "next")), nil)
	if n := len(v.took()); n != 2 {
		t.Fatalf("%d verification calls, want 2: the next produce is verified again", n)
	}
}

// A leader change between the verification and the append voids it too:
// the new leadership knows nothing of what the old one verified.
func TestTxnProduceGuardVoidedByLeaderChange(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "lead", 1, nil)
	p := b.partition("lead", 0)
	guard, err := p.StartTxnVerification(41, 0)
	if err != nil || guard == nil {
		t.Fatalf("start verification: %v %v", guard, err)
	}
	// The partition's leader epoch moves (as the metadata of a new
	// election would set it).
	self := []int32{b.cfg.NodeID}
	p.SetRole(partition.Role{LeaderEpoch: p.LeaderEpoch() + 1, Leader: b.cfg.NodeID, Replicas: self, ISR: self, PartitionEpoch: p.PartitionEpoch()})
	_, _, err = p.AppendTxn(txnRawBatch(41, 0, 0, time.Now().UnixMilli(), "x"), &partition.TxnAppend{PID: 41, Epoch: 0, Guard: guard})
	if code := errorCode(err); code != kerr.InvalidTxnState.Code {
		t.Fatalf("append after a leader change: %v (%v), want INVALID_TXN_STATE", kerr.ErrorForCode(code), err)
	}
}

// DescribeProducers (KIP-664), what kafka-transactions.sh find-hanging and
// abort and `strata txn abort` read: each active producer of a partition
// with its epoch, last sequence, coordinator epoch and the start offset
// of its ongoing transaction, -1 when none is.
func TestTxnDescribeProducers(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	createTopic(t, kadmFor(cl), "desc", 1, nil)
	p := b.partition("desc", 0)
	now := time.Now().UnixMilli()
	mustAppendTo(t, p, rawBatch(-1, -1, -1, now, "plain"))           // 0
	mustAppendTo(t, p, rawBatch(50, 1, 0, now, "i1", "i2"))          // 1-2, idempotent
	mustAppendTo(t, p, txnRawBatch(51, 4, 0, now, "t1"))             // 3, left open
	mustAppendTo(t, p, txnRawBatch(52, 0, 0, now, "c1", "c2", "c3")) // 4-6
	if _, _, err := p.AppendMarker(52, 0, true, 7); err != nil {     // 7
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	described, err := kadmFor(cl).DescribeProducers(ctx, kadm.TopicsSet{"desc": {0: {}}})
	if err != nil {
		t.Fatal(err)
	}
	dp, ok := described["desc"].Partitions[0]
	if !ok || dp.Err != nil {
		t.Fatalf("describe producers: %+v", dp)
	}
	got := dp.ActiveProducers.Sorted()
	type row struct {
		pid        int64
		epoch      int16
		lastSeq    int32
		coordEpoch int32
		txnStart   int64
	}
	var rows []row
	for _, a := range got {
		rows = append(rows, row{a.ProducerID, a.ProducerEpoch, a.LastSequence, a.CoordinatorEpoch, a.CurrentTxnStartOffset})
		if a.LastTimestamp < now-time.Minute.Milliseconds() || a.Leader != b.cfg.NodeID {
			t.Errorf("producer %d: last timestamp %d, leader %d", a.ProducerID, a.LastTimestamp, a.Leader)
		}
	}
	want := []row{{50, 1, 1, 0, -1}, {51, 4, 0, 0, 3}, {52, 0, 2, 7, -1}}
	if !slices.Equal(rows, want) {
		t.Fatalf("active producers %+v, want %+v", rows, want)
	}

	// A partition this broker does not have, and a topic nobody has.
	resp := describeProducersRaw(t, b, "desc", 5)
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("partition 5 of a one-partition topic: %v", kerr.ErrorForCode(code))
	}
	resp = describeProducersRaw(t, b, "nope", 0)
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("unknown topic: %v", kerr.ErrorForCode(code))
	}
}

func describeProducersRaw(t *testing.T, b *Broker, topic string, partition int32) *kmsg.DescribeProducersResponse {
	t.Helper()
	req := kmsg.NewPtrDescribeProducersRequest()
	rt := kmsg.NewDescribeProducersRequestTopic()
	rt.Topic = topic
	rt.Partitions = []int32{partition}
	req.Topics = append(req.Topics, rt)
	resp := kmsg.NewPtrDescribeProducersResponse()
	if err := resp.ReadFrom(rawRoundTrip(t, b, req)); err != nil {
		t.Fatalf("describe producers response: %v", err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		t.Fatalf("describe producers response: %+v", resp)
	}
	return resp
}
