package txn

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/broker/group"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// counterIDs hands out 1000, 1001, ... or fails when err is set.
type counterIDs struct {
	next int64
	err  error
}

func (a *counterIDs) NextProducerID(context.Context) (int64, error) {
	if a.err != nil {
		return -1, a.err
	}
	a.next++
	return 999 + a.next, nil
}

type harness struct {
	t     *testing.T
	c     *Coordinator
	clock *fakeClock
	ids   *counterIDs
	// log holds the records completed transitions wrote, per partition of
	// __transaction_state, so a test can reload a partition from them.
	log map[int32][]Record
}

const testTimeoutMs = 60000

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{t: t, clock: &fakeClock{now: time.UnixMilli(1_700_000_000_000)}, ids: &counterIDs{}, log: map[int32][]Record{}}
	c, err := New(Config{Partitions: 4, Clock: h.clock, ProducerIDs: h.ids})
	if err != nil {
		t.Fatal(err)
	}
	h.c = c
	for p := int32(0); p < 4; p++ {
		if _, err := c.Load(p, 3, nil); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// complete commits t as the broker would once its record is written, and
// checks that the record decodes to what the coordinator now holds.
func (h *harness) complete(t *Transition) {
	h.t.Helper()
	if t == nil {
		h.t.Fatal("no transition to complete")
	}
	if err := h.c.Complete(t); err != nil {
		h.t.Fatalf("Complete: %v", err)
	}
	rec := t.Record()
	h.log[t.Partition] = append(h.log[t.Partition], rec)
	id, err := DecodeKey(rec.Key)
	if err != nil || id != t.To.TransactionalID {
		h.t.Fatalf("record key %q, %v", id, err)
	}
	if t.To.State == Dead {
		if rec.Value != nil {
			h.t.Fatal("expiry wrote a value, not a tombstone")
		}
		return
	}
	m, err := DecodeValue(id, rec.Value)
	if err != nil || !sameMeta(m, t.To) {
		h.t.Fatalf("record value %+v, %v; want %+v", m, err, t.To)
	}
}

func (h *harness) init(id string, pid int64, epoch int16, version int16) InitProducerIDResult {
	h.t.Helper()
	r := h.c.InitProducerID(context.Background(), InitProducerIDRequest{TransactionalID: id, TimeoutMs: testTimeoutMs, ProducerID: pid, ProducerEpoch: epoch, Version: version})
	if r.Err == nil {
		h.complete(r.Transition)
	}
	return r
}

func (h *harness) mustInit(id string) (int64, int16) {
	h.t.Helper()
	r := h.init(id, -1, -1, 5)
	if r.Err != nil {
		h.t.Fatalf("InitProducerID(%q) = %v", id, r.Err)
	}
	return r.ProducerID, r.ProducerEpoch
}

func (h *harness) add(id string, pid int64, epoch int16, version int16, parts ...TopicPartition) *kerr.Error {
	h.t.Helper()
	r := h.c.AddPartitions(AddPartitionsRequest{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, Partitions: parts, Version: version})
	if r.Err == nil && r.Transition != nil {
		h.complete(r.Transition)
	}
	return r.Err
}

func (h *harness) state(id string) Metadata {
	h.t.Helper()
	m, err := h.c.Describe(id)
	if err != nil {
		h.t.Fatalf("Describe(%q) = %v", id, err)
	}
	return m
}

// end runs EndTxn and, when it decides an end, completes it; markers are
// returned unwritten.
func (h *harness) end(id string, pid int64, epoch int16, commit bool, version int16) (EndTxnResult, *Markers) {
	h.t.Helper()
	r := h.c.EndTxn(context.Background(), EndTxnRequest{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, Commit: commit, Version: version})
	if r.Err != nil || r.Transition == nil {
		return r, nil
	}
	h.complete(r.Transition)
	return r, r.Transition.Markers()
}

// written reports markers m as written and completes the transaction.
func (h *harness) written(m *Markers) {
	h.t.Helper()
	t, err := h.c.CompleteMarkers(m)
	if err != nil {
		h.t.Fatalf("CompleteMarkers: %v", err)
	}
	h.complete(t)
}

func wantErr(t *testing.T, what string, got, want *kerr.Error) {
	t.Helper()
	if got != want {
		t.Errorf("%s: error %v, want %v", what, got, want)
	}
}

func TestConfigValidate(t *testing.T) {
	ids := &counterIDs{}
	for name, cfg := range map[string]Config{
		"no allocator":        {},
		"negative parts":      {Partitions: -1, ProducerIDs: ids},
		"negative offsets":    {OffsetsPartitions: -2, ProducerIDs: ids},
		"max timeout 0.5ms":   {MaxTimeout: time.Microsecond * 500, ProducerIDs: ids},
		"max timeout too big": {MaxTimeout: 1 << 31 * time.Millisecond, ProducerIDs: ids},
		"negative expiry":     {IDExpiration: -time.Second, ProducerIDs: ids},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	if _, err := New(Config{ProducerIDs: ids}); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
}

// TestPartitionFor: the partition of a transactional id is Kafka's
// abs(hashCode) % partitions, like a group's.
func TestPartitionFor(t *testing.T) {
	c, err := New(Config{ProducerIDs: &counterIDs{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "payments", "ünïcode-𝄞"} {
		if got, want := c.PartitionFor(id), group.Partition(id, 50); got != want {
			t.Errorf("PartitionFor(%q) = %d, want %d", id, got, want)
		}
	}
}

// TestInitProducerIDFencesZombie: a second producer with the same
// transactional id gets the next epoch, and the first one's requests are
// fenced, with INVALID_PRODUCER_EPOCH for clients older than KIP-588.
func TestInitProducerIDFencesZombie(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	if pid != 1000 || epoch != 0 {
		t.Fatalf("first InitProducerID = %d/%d, want 1000/0", pid, epoch)
	}
	pid2, epoch2 := h.mustInit("tx")
	if pid2 != pid || epoch2 != 1 {
		t.Fatalf("second InitProducerID = %d/%d, want %d/1", pid2, epoch2, pid)
	}
	wantErr(t, "zombie AddPartitions v3", h.add("tx", pid, epoch, 3, tp("a", 0)), kerr.ProducerFenced)
	wantErr(t, "zombie AddPartitions v1", h.add("tx", pid, epoch, 1, tp("a", 0)), kerr.InvalidProducerEpoch)
	r, _ := h.end("tx", pid, epoch, true, 3)
	wantErr(t, "zombie EndTxn v3", r.Err, kerr.ProducerFenced)
	r, _ = h.end("tx", pid, epoch, true, 1)
	wantErr(t, "zombie EndTxn v1", r.Err, kerr.InvalidProducerEpoch)
	wantErr(t, "current producer", h.add("tx", pid2, epoch2, 3, tp("a", 0)), nil)
}

func TestInitProducerIDErrors(t *testing.T) {
	h := newHarness(t)
	req := func(f func(*InitProducerIDRequest)) InitProducerIDRequest {
		r := InitProducerIDRequest{TransactionalID: "tx", TimeoutMs: 1000, ProducerID: -1, ProducerEpoch: -1, Version: 5}
		f(&r)
		return r
	}
	for _, tt := range []struct {
		name string
		req  InitProducerIDRequest
		want *kerr.Error
	}{
		{"empty id", req(func(r *InitProducerIDRequest) { r.TransactionalID = "" }), kerr.InvalidRequest},
		{"zero timeout", req(func(r *InitProducerIDRequest) { r.TimeoutMs = 0 }), kerr.InvalidTransactionTimeout},
		{"negative timeout", req(func(r *InitProducerIDRequest) { r.TimeoutMs = -5 }), kerr.InvalidTransactionTimeout},
		{"timeout above transaction.max.timeout.ms", req(func(r *InitProducerIDRequest) { r.TimeoutMs = 15*60*1000 + 1 }), kerr.InvalidTransactionTimeout},
		{"id without epoch", req(func(r *InitProducerIDRequest) { r.ProducerID = 5 }), kerr.InvalidRequest},
		{"epoch without id", req(func(r *InitProducerIDRequest) { r.ProducerEpoch = 5 }), kerr.InvalidRequest},
	} {
		r := h.c.InitProducerID(context.Background(), tt.req)
		wantErr(t, tt.name, r.Err, tt.want)
		if r.Transition != nil || r.ProducerID != -1 || r.ProducerEpoch != -1 {
			t.Errorf("%s: failed InitProducerID returned %+v", tt.name, r)
		}
	}
	if r := h.c.InitProducerID(context.Background(), req(func(r *InitProducerIDRequest) { r.TimeoutMs = 15 * 60 * 1000 })); r.Err != nil {
		t.Errorf("timeout at the maximum: %v", r.Err)
	}

	h.c.Unload(h.c.PartitionFor("other"))
	r := h.c.InitProducerID(context.Background(), req(func(r *InitProducerIDRequest) { r.TransactionalID = "other" }))
	wantErr(t, "unloaded partition", r.Err, kerr.NotCoordinator)

	if _, err := h.c.Load(h.c.PartitionFor("other"), 3, nil); err != nil {
		t.Fatal(err)
	}
	h.ids.err = errors.New("metadata log unavailable")
	r = h.c.InitProducerID(context.Background(), req(func(r *InitProducerIDRequest) { r.TransactionalID = "other" }))
	wantErr(t, "allocator failing", r.Err, kerr.CoordinatorNotAvailable)
}

// TestInitProducerIDAbortsOpenTransaction: a new producer arriving while
// the old one's transaction is open aborts it with a bumped epoch (so the
// old producer cannot commit it) and is told to retry until the abort is
// complete.
func TestInitProducerIDAbortsOpenTransaction(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	wantErr(t, "add", h.add("tx", pid, epoch, 3, tp("a", 1), tp("a", 0)), nil)

	r := h.c.InitProducerID(context.Background(), InitProducerIDRequest{TransactionalID: "tx", TimeoutMs: 1000, ProducerID: -1, ProducerEpoch: -1, Version: 5})
	wantErr(t, "InitProducerID during a transaction", r.Err, kerr.ConcurrentTransactions)
	if r.Transition == nil || r.Transition.To.State != PrepareAbort {
		t.Fatalf("no abort decided: %+v", r.Transition)
	}
	h.complete(r.Transition)
	m := r.Transition.Markers()
	want := &Markers{TransactionalID: "tx", ProducerID: pid, ProducerEpoch: epoch + 2, CoordinatorEpoch: 3, Commit: false, Partitions: []TopicPartition{tp("a", 0), tp("a", 1)}}
	if !sameMarkers(m, want) {
		t.Fatalf("markers %+v, want %+v", m, want)
	}

	er, _ := h.end("tx", pid, epoch, true, 3)
	wantErr(t, "old producer commits after the fence", er.Err, kerr.ProducerFenced)
	r = h.c.InitProducerID(context.Background(), InitProducerIDRequest{TransactionalID: "tx", TimeoutMs: 1000, ProducerID: -1, ProducerEpoch: -1, Version: 5})
	wantErr(t, "InitProducerID while markers are written", r.Err, kerr.ConcurrentTransactions)
	if r.Transition != nil {
		t.Fatal("a second decision while markers are written")
	}

	h.written(m)
	if s := h.state("tx"); s.State != CompleteAbort || len(s.Partitions) != 0 {
		t.Fatalf("after markers: %+v", s)
	}
	_, e2 := h.mustInit("tx")
	if e2 != epoch+3 {
		t.Fatalf("retried InitProducerID epoch %d, want %d", e2, epoch+3)
	}
}

// TestInitProducerIDPending: while a decision's record is being written,
// others wait (Kafka's pending state).
func TestInitProducerIDPending(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	ar := h.c.AddPartitions(AddPartitionsRequest{TransactionalID: "tx", ProducerID: pid, ProducerEpoch: epoch, Partitions: []TopicPartition{tp("a", 0)}, Version: 3})
	if ar.Err != nil || ar.Transition == nil {
		t.Fatalf("AddPartitions = %+v", ar)
	}
	r := h.c.InitProducerID(context.Background(), InitProducerIDRequest{TransactionalID: "tx", TimeoutMs: 1000, ProducerID: -1, ProducerEpoch: -1, Version: 5})
	wantErr(t, "InitProducerID while a write is pending", r.Err, kerr.ConcurrentTransactions)
	er, _ := h.end("tx", pid, epoch, true, 3)
	wantErr(t, "EndTxn while a write is pending", er.Err, kerr.ConcurrentTransactions)

	// The write fails: nothing changed, and the retry decides again.
	h.c.Abandon(ar.Transition)
	if s := h.state("tx"); s.State != Empty || len(s.Partitions) != 0 {
		t.Fatalf("abandoned add changed the state: %+v", s)
	}
	if err := h.c.Complete(ar.Transition); err == nil {
		t.Fatal("an abandoned transition completed")
	}
	wantErr(t, "retried add", h.add("tx", pid, epoch, 3, tp("a", 0)), nil)
}

// TestInitProducerIDRecovery pins KIP-360: a producer that names its id
// and epoch gets a bump if it is the holder, the same answer again if it
// retries a bump, and PRODUCER_FENCED once another producer took over.
func TestInitProducerIDRecovery(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")

	r := h.init("tx", pid, epoch, 4)
	if r.Err != nil || r.ProducerID != pid || r.ProducerEpoch != epoch+1 {
		t.Fatalf("recovery = %+v, want %d/%d", r, pid, epoch+1)
	}
	r = h.init("tx", pid, epoch, 4)
	if r.Err != nil || r.ProducerEpoch != epoch+1 {
		t.Fatalf("retried recovery = %+v, want the same epoch %d", r, epoch+1)
	}
	r = h.init("tx", pid+7, epoch+1, 4)
	wantErr(t, "recovery with another producer id", r.Err, kerr.ProducerFenced)

	_, taken := h.mustInit("tx") // another producer, with no id
	r = h.init("tx", pid, epoch+1, 4)
	wantErr(t, "recovery after another producer took over", r.Err, kerr.ProducerFenced)
	r = h.init("tx", pid, epoch, 3)
	wantErr(t, "retry of a bump after another producer took over, v3", r.Err, kerr.InvalidProducerEpoch)
	if s := h.state("tx"); s.ProducerEpoch != taken {
		t.Fatalf("fenced recoveries moved the epoch to %d", s.ProducerEpoch)
	}
}

// TestInitProducerIDEpochExhausted: at epoch 32766 there is no epoch left
// to fence with, so the producer gets a new producer id at epoch 0, and a
// KIP-360 retry with the old id gets the same answer.
func TestInitProducerIDEpochExhausted(t *testing.T) {
	h := newHarness(t)
	m := Metadata{TransactionalID: "tx", ProducerID: 77, LastProducerID: 77, NextProducerID: -1, ProducerEpoch: 32766,
		LastProducerEpoch: -1, TimeoutMs: testTimeoutMs, State: CompleteCommit, StartTime: 1, LastUpdate: 2}
	loadOne(t, h, m)

	r := h.init("tx", 77, 32766, 4)
	if r.Err != nil || r.ProducerID != 1000 || r.ProducerEpoch != 0 {
		t.Fatalf("InitProducerID at an exhausted epoch = %+v, want 1000/0", r)
	}
	if s := h.state("tx"); s.LastProducerID != 77 {
		t.Fatalf("last producer id %d, want 77", s.LastProducerID)
	}
	r = h.init("tx", 77, 32766, 4)
	if r.Err != nil || r.ProducerID != 1000 || r.ProducerEpoch != 0 {
		t.Fatalf("retry across the rotation = %+v, want 1000/0", r)
	}
	r = h.init("tx", 77, 32765, 4)
	wantErr(t, "old id at an older epoch", r.Err, kerr.ProducerFenced)
}

func loadOne(t *testing.T, h *harness, m Metadata) {
	t.Helper()
	p := h.c.PartitionFor(m.TransactionalID)
	// As a new leader of the partition would: under the next epoch.
	epoch, _ := h.c.Loaded(p)
	if _, err := h.c.Load(p, epoch+1, []Record{{Key: EncodeKey(m.TransactionalID), Value: EncodeValue(m)}}); err != nil {
		t.Fatal(err)
	}
}

func TestAddPartitions(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	wantErr(t, "unknown id", h.add("nope", pid, epoch, 3, tp("a", 0)), kerr.InvalidProducerIDMapping)
	wantErr(t, "empty id", h.add("", pid, epoch, 3, tp("a", 0)), kerr.InvalidRequest)
	wantErr(t, "other producer id", h.add("tx", pid+1, epoch, 3, tp("a", 0)), kerr.InvalidProducerIDMapping)
	wantErr(t, "newer epoch", h.add("tx", pid, epoch+1, 3, tp("a", 0)), kerr.ProducerFenced)

	start := h.clock.Now().UnixMilli()
	wantErr(t, "first add", h.add("tx", pid, epoch, 3, tp("b", 1), tp("a", 0), tp("a", 0)), nil)
	h.clock.Advance(time.Second)
	r := h.c.AddPartitions(AddPartitionsRequest{TransactionalID: "tx", ProducerID: pid, ProducerEpoch: epoch, Partitions: []TopicPartition{tp("a", 0)}, Version: 3})
	if r.Err != nil || r.Transition != nil {
		t.Fatalf("re-adding a partition = %+v, want no write", r)
	}
	wantErr(t, "second add", h.add("tx", pid, epoch, 3, tp("a", 5)), nil)
	s := h.state("tx")
	if s.State != Ongoing || !slices.Equal(s.Partitions, []TopicPartition{tp("a", 0), tp("a", 5), tp("b", 1)}) {
		t.Fatalf("after adds: %+v", s)
	}
	if s.StartTime != start || s.LastUpdate != start+1000 {
		t.Fatalf("start %d update %d, want %d and %d", s.StartTime, s.LastUpdate, start, start+1000)
	}

	_, m := h.end("tx", pid, epoch, true, 3)
	wantErr(t, "add while committing", h.add("tx", pid, epoch, 3, tp("c", 0)), kerr.ConcurrentTransactions)
	h.written(m)
	h.clock.Advance(time.Second)
	wantErr(t, "add after the commit", h.add("tx", pid, epoch, 3, tp("c", 0)), nil)
	if s := h.state("tx"); s.StartTime != start+2000 || !slices.Equal(s.Partitions, []TopicPartition{tp("c", 0)}) {
		t.Fatalf("the next transaction: %+v", s)
	}
}

// TestVerifyPartitions pins KIP-890 part 1: a partition leader asks before
// appending a transactional batch, and only partitions of the producer's
// ongoing transaction pass (others get TRANSACTION_ABORTABLE, as in Kafka
// 3.8+), so a late retry of a produce cannot open a hanging transaction
// after the producer ended it.
func TestVerifyPartitions(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	wantErr(t, "add", h.add("tx", pid, epoch, 3, tp("a", 0)), nil)

	got, err := h.c.VerifyPartitions("tx", pid, epoch, []TopicPartition{tp("a", 0), tp("a", 1)})
	if err != nil || got[tp("a", 0)] != nil || got[tp("a", 1)] != kerr.TransactionAbortable || len(got) != 2 {
		t.Fatalf("VerifyPartitions = %v, %v", got, err)
	}
	_, err = h.c.VerifyPartitions("tx", pid, epoch+1, []TopicPartition{tp("a", 0)})
	wantErr(t, "other epoch", err, kerr.ProducerFenced)
	_, err = h.c.VerifyPartitions("tx", pid+1, epoch, []TopicPartition{tp("a", 0)})
	wantErr(t, "other producer id", err, kerr.InvalidProducerIDMapping)
	_, err = h.c.VerifyPartitions("nope", pid, epoch, []TopicPartition{tp("a", 0)})
	wantErr(t, "unknown id", err, kerr.InvalidProducerIDMapping)

	_, m := h.end("tx", pid, epoch, true, 3)
	_, err = h.c.VerifyPartitions("tx", pid, epoch, []TopicPartition{tp("a", 0)})
	wantErr(t, "while committing", err, kerr.ConcurrentTransactions)
	h.written(m)
	got, err = h.c.VerifyPartitions("tx", pid, epoch, []TopicPartition{tp("a", 0)})
	if err != nil || got[tp("a", 0)] != kerr.TransactionAbortable {
		t.Fatalf("a late produce after the commit: %v, %v", got, err)
	}
	// Kafka does not wait for a pending add: the partition is in the
	// transaction only once its record is written.
	ar := h.c.AddPartitions(AddPartitionsRequest{TransactionalID: "tx", ProducerID: pid, ProducerEpoch: epoch, Partitions: []TopicPartition{tp("b", 0)}, Version: 3})
	got, err = h.c.VerifyPartitions("tx", pid, epoch, []TopicPartition{tp("b", 0)})
	if err != nil || got[tp("b", 0)] != kerr.TransactionAbortable {
		t.Fatalf("verify during a pending add: %v, %v", got, err)
	}
	h.complete(ar.Transition)
	got, err = h.c.VerifyPartitions("tx", pid, epoch, []TopicPartition{tp("b", 0)})
	if err != nil || got[tp("b", 0)] != nil {
		t.Fatalf("verify after the add: %v, %v", got, err)
	}
}

func TestAddOffsets(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	r := h.c.AddOffsets(AddOffsetsRequest{TransactionalID: "tx", ProducerID: pid, ProducerEpoch: epoch, Group: "g1", Version: 3})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	h.complete(r.Transition)
	want := tp("__consumer_offsets", group.Partition("g1", 50))
	if s := h.state("tx"); s.State != Ongoing || !slices.Equal(s.Partitions, []TopicPartition{want}) {
		t.Fatalf("after AddOffsets: %+v", s)
	}
	r = h.c.AddOffsets(AddOffsetsRequest{TransactionalID: "tx", ProducerID: pid, ProducerEpoch: epoch - 1, Group: "g1", Version: 1})
	wantErr(t, "fenced AddOffsets v1", r.Err, kerr.InvalidProducerEpoch)
}

// TestEndTxn pins EndTxn before KIP-890 part 2 (v0-4): the epoch stays,
// markers carry it, and a retry of a completed end is answered again.
func TestEndTxn(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	r, _ := h.end("tx", pid, epoch, true, 3)
	wantErr(t, "commit with nothing open", r.Err, kerr.InvalidTxnState)
	r, _ = h.end("tx", pid+1, epoch, true, 3)
	wantErr(t, "other producer id", r.Err, kerr.InvalidProducerIDMapping)
	r, _ = h.end("nope", pid, epoch, true, 3)
	wantErr(t, "unknown id", r.Err, kerr.InvalidProducerIDMapping)

	wantErr(t, "add", h.add("tx", pid, epoch, 3, tp("a", 0), tp("b", 0)), nil)
	r, m := h.end("tx", pid, epoch, true, 3)
	if r.Err != nil || m == nil {
		t.Fatalf("commit = %+v", r)
	}
	want := &Markers{TransactionalID: "tx", ProducerID: pid, ProducerEpoch: epoch, CoordinatorEpoch: 3, Commit: true, Partitions: []TopicPartition{tp("a", 0), tp("b", 0)}}
	if !sameMarkers(m, want) {
		t.Fatalf("markers %+v, want %+v", m, want)
	}
	r, _ = h.end("tx", pid, epoch, true, 3)
	wantErr(t, "commit retried while markers are written", r.Err, kerr.ConcurrentTransactions)
	r, _ = h.end("tx", pid, epoch, false, 3)
	wantErr(t, "abort while committing", r.Err, kerr.InvalidTxnState)

	h.written(m)
	r, _ = h.end("tx", pid, epoch, true, 3)
	if r.Err != nil || r.Transition != nil {
		t.Fatalf("commit retried after completion = %+v, want success and no write", r)
	}
	r, _ = h.end("tx", pid, epoch, false, 3)
	wantErr(t, "abort after a commit", r.Err, kerr.InvalidTxnState)

	wantErr(t, "add", h.add("tx", pid, epoch, 3, tp("a", 0)), nil)
	r, m = h.end("tx", pid, epoch, false, 3)
	if r.Err != nil || m == nil || m.Commit || m.ProducerEpoch != epoch {
		t.Fatalf("abort = %+v, markers %+v", r, m)
	}
	h.written(m)
	r, _ = h.end("tx", pid, epoch, false, 3)
	if r.Err != nil || r.Transition != nil {
		t.Fatalf("abort retried after completion = %+v", r)
	}
	if s := h.state("tx"); s.ProducerEpoch != epoch || s.State != CompleteAbort {
		t.Fatalf("v3 ends moved the epoch: %+v", s)
	}
}

// TestEndTxnV5BumpsEpoch pins KIP-890 part 2: every end bumps the epoch,
// markers carry the new one, the client continues with it, anything still
// in flight at the old epoch is fenced, and a retried end is recognised by
// its epoch being one behind.
func TestEndTxnV5BumpsEpoch(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	wantErr(t, "add", h.add("tx", pid, epoch, 5, tp("a", 0)), nil)
	r, m := h.end("tx", pid, epoch, true, 5)
	if r.Err != nil || r.ProducerID != pid || r.ProducerEpoch != epoch+1 {
		t.Fatalf("v5 commit = %+v, want %d/%d", r, pid, epoch+1)
	}
	if m == nil || m.ProducerEpoch != epoch+1 || !m.Commit {
		t.Fatalf("markers %+v", m)
	}
	r, _ = h.end("tx", pid, epoch, true, 5)
	wantErr(t, "retry while markers are written", r.Err, kerr.ConcurrentTransactions)
	h.written(m)

	_, err := h.c.VerifyPartitions("tx", pid, epoch, []TopicPartition{tp("a", 0)})
	wantErr(t, "a produce at the ended epoch", err, kerr.ProducerFenced)
	r, _ = h.end("tx", pid, epoch, true, 5)
	if r.Err != nil || r.Transition != nil || r.ProducerEpoch != epoch+1 {
		t.Fatalf("retried commit = %+v, want the current epoch %d", r, epoch+1)
	}
	r, _ = h.end("tx", pid, epoch, false, 5)
	wantErr(t, "abort retried after a commit", r.Err, kerr.InvalidTxnState)
	r, _ = h.end("tx", pid, epoch+1, true, 5)
	wantErr(t, "commit with nothing open", r.Err, kerr.InvalidTxnState)
	r, _ = h.end("tx", pid, epoch-1, true, 5)
	wantErr(t, "an older epoch", r.Err, kerr.ProducerFenced)

	// A client may abort with no transaction open (it failed before adding
	// anything): the epoch still moves, and there is no marker to write.
	r, m = h.end("tx", pid, epoch+1, false, 5)
	if r.Err != nil || r.ProducerEpoch != epoch+2 || m == nil || len(m.Partitions) != 0 {
		t.Fatalf("abort with nothing open = %+v, markers %+v", r, m)
	}
	h.written(m)
	if s := h.state("tx"); s.State != CompleteAbort || s.ProducerEpoch != epoch+2 || s.ClientTxnVersion != TV2 {
		t.Fatalf("after the empty abort: %+v", s)
	}
}

// TestEndTxnV5Rotation: a KIP-890 end at epoch 32766 writes its markers at
// 32767 and moves the producer to a new id at epoch 0, which the reply and
// a retry of the end both carry.
func TestEndTxnV5Rotation(t *testing.T) {
	h := newHarness(t)
	loadOne(t, h, Metadata{TransactionalID: "tx", ProducerID: 77, LastProducerID: 77, NextProducerID: -1, ProducerEpoch: 32766,
		LastProducerEpoch: -1, TimeoutMs: testTimeoutMs, State: Ongoing, Partitions: []TopicPartition{tp("a", 0)},
		StartTime: 1, LastUpdate: 2, ClientTxnVersion: TV2})
	r, m := h.end("tx", 77, 32766, true, 5)
	if r.Err != nil || r.ProducerID != 1000 || r.ProducerEpoch != 0 {
		t.Fatalf("commit at an exhausted epoch = %+v, want 1000/0", r)
	}
	if m.ProducerID != 77 || m.ProducerEpoch != 32767 {
		t.Fatalf("markers at %d/%d, want 77/32767", m.ProducerID, m.ProducerEpoch)
	}
	h.written(m)
	s := h.state("tx")
	if s.ProducerID != 1000 || s.ProducerEpoch != 0 || s.LastProducerID != 77 || s.NextProducerID != -1 {
		t.Fatalf("after the rotation: %+v", s)
	}
	r, _ = h.end("tx", 77, 32766, true, 5)
	if r.Err != nil || r.Transition != nil || r.ProducerID != 1000 || r.ProducerEpoch != 0 {
		t.Fatalf("retried commit across the rotation = %+v", r)
	}
	wantErr(t, "the new id", h.add("tx", 1000, 0, 5, tp("a", 0)), nil)

	// A fence at 32766 leaves 32767, which no end may bump past.
	loadOne(t, h, Metadata{TransactionalID: "fenced", ProducerID: 88, LastProducerID: 88, NextProducerID: -1, ProducerEpoch: 32767,
		LastProducerEpoch: -1, TimeoutMs: testTimeoutMs, State: CompleteAbort, StartTime: 1, LastUpdate: 2, ClientTxnVersion: TV2})
	r, _ = h.end("fenced", 88, 32767, false, 5)
	wantErr(t, "abort at the last epoch", r.Err, kerr.ProducerFenced)
	if s := h.state("fenced"); s.ProducerEpoch != 32767 {
		t.Fatalf("epoch overflowed to %d", s.ProducerEpoch)
	}
	if r := h.init("fenced", -1, -1, 5); r.Err != nil || r.ProducerEpoch != 0 || r.ProducerID == 88 {
		t.Fatalf("InitProducerID after the last epoch = %+v", r)
	}
}

// TestAbortTimedOut: a transaction open longer than its timeout is aborted
// by the coordinator with the epoch bumped, so its producer is fenced and
// the partitions' last stable offset can move on.
func TestAbortTimedOut(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	wantErr(t, "add", h.add("tx", pid, epoch, 3, tp("a", 0)), nil)
	h.mustInit("idle")

	h.clock.Advance(testTimeoutMs * time.Millisecond)
	if ts := h.c.AbortTimedOut(); len(ts) != 0 {
		t.Fatalf("aborted at exactly the timeout: %+v", ts)
	}
	h.clock.Advance(time.Millisecond)
	ts := h.c.AbortTimedOut()
	if len(ts) != 1 || ts[0].To.TransactionalID != "tx" || ts[0].To.State != PrepareAbort || ts[0].To.ProducerEpoch != epoch+2 {
		t.Fatalf("AbortTimedOut = %+v", ts)
	}
	if again := h.c.AbortTimedOut(); len(again) != 0 {
		t.Fatal("the same transaction aborted twice")
	}
	// The write fails; the next pass must not bump the epoch again.
	h.c.Abandon(ts[0])
	ts = h.c.AbortTimedOut()
	if len(ts) != 1 || ts[0].To.ProducerEpoch != epoch+2 {
		t.Fatalf("after a failed fence, AbortTimedOut = %+v", ts)
	}
	h.complete(ts[0])
	m := ts[0].Markers()
	if m == nil || m.Commit || m.ProducerEpoch != epoch+2 || !slices.Equal(m.Partitions, []TopicPartition{tp("a", 0)}) {
		t.Fatalf("markers %+v", m)
	}
	r, _ := h.end("tx", pid, epoch, true, 3)
	wantErr(t, "the timed-out producer commits", r.Err, kerr.ProducerFenced)
	h.written(m)
	if s := h.state("tx"); s.State != CompleteAbort {
		t.Fatalf("after the abort: %+v", s)
	}
	// A new epoch after the fence: bumped once more, never reused.
	if _, e := h.mustInit("tx"); e != epoch+3 {
		t.Fatalf("InitProducerID after the timeout gave epoch %d, want %d", e, epoch+3)
	}
}

// TestAbortTimedOutFencesV5Producer: a KIP-890 part 2 client whose
// transaction timed out must be fenced, not taken for a retry of an end
// (which a client one epoch behind is): the fence moves the epoch by two,
// as Kafka's fence followed by its TV2 abort does.
func TestAbortTimedOutFencesV5Producer(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	wantErr(t, "add", h.add("tx", pid, epoch, 5, tp("a", 0)), nil)
	h.clock.Advance(testTimeoutMs*time.Millisecond + time.Millisecond)
	ts := h.c.AbortTimedOut()
	if len(ts) != 1 {
		t.Fatalf("AbortTimedOut = %+v", ts)
	}
	h.complete(ts[0])
	h.written(ts[0].Markers())
	for _, commit := range []bool{false, true} {
		r, _ := h.end("tx", pid, epoch, commit, 5)
		wantErr(t, "the timed-out producer ends its transaction", r.Err, kerr.ProducerFenced)
	}
	_, err := h.c.VerifyPartitions("tx", pid, epoch+1, []TopicPartition{tp("a", 0)})
	wantErr(t, "a produce at the epoch after the timed-out one", err, kerr.ProducerFenced)
}

// TestAbortTimedOutLastEpoch: at epoch 32766 only one bump is left; the
// fence takes it, and the next InitProducerId moves to a new producer id.
func TestAbortTimedOutLastEpoch(t *testing.T) {
	h := newHarness(t)
	loadOne(t, h, Metadata{TransactionalID: "tx", ProducerID: 77, LastProducerID: 77, NextProducerID: -1, ProducerEpoch: 32766,
		LastProducerEpoch: -1, TimeoutMs: 1000, State: Ongoing, Partitions: []TopicPartition{tp("a", 0)},
		StartTime: h.clock.Now().UnixMilli(), LastUpdate: h.clock.Now().UnixMilli(), ClientTxnVersion: TV2})
	h.clock.Advance(2 * time.Second)
	ts := h.c.AbortTimedOut()
	if len(ts) != 1 || ts[0].To.ProducerEpoch != 32767 {
		t.Fatalf("AbortTimedOut = %+v", ts)
	}
	h.complete(ts[0])
	h.written(ts[0].Markers())
	if r := h.init("tx", -1, -1, 5); r.Err != nil || r.ProducerID == 77 || r.ProducerEpoch != 0 {
		t.Fatalf("InitProducerID after the last epoch = %+v", r)
	}
}

// TestPreviousProducerID: like Kafka, every record names the producer id
// it replaces (PreviousProducerId), so the field means "the id before this
// record" in both implementations' logs.
func TestPreviousProducerID(t *testing.T) {
	h := newHarness(t)
	loadOne(t, h, Metadata{TransactionalID: "tx", ProducerID: 77, LastProducerID: 60, NextProducerID: -1, ProducerEpoch: 3,
		LastProducerEpoch: -1, TimeoutMs: testTimeoutMs, State: CompleteCommit, StartTime: 1, LastUpdate: 2})
	r := h.c.AddPartitions(AddPartitionsRequest{TransactionalID: "tx", ProducerID: 77, ProducerEpoch: 3, Partitions: []TopicPartition{tp("a", 0)}, Version: 3})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if r.Transition.To.LastProducerID != 77 {
		t.Fatalf("AddPartitions record has previous producer id %d, want 77", r.Transition.To.LastProducerID)
	}
}

// TestExpireIDs: an idle transactional id is removed with a tombstone
// after transactional.id.expiration.ms; an open transaction never is.
func TestExpireIDs(t *testing.T) {
	h := newHarness(t)
	h.mustInit("idle")
	pid, epoch := h.mustInit("open")
	wantErr(t, "add", h.add("open", pid, epoch, 3, tp("a", 0)), nil)

	h.clock.Advance(7*24*time.Hour - time.Millisecond)
	if ts := h.c.ExpireIDs(); len(ts) != 0 {
		t.Fatalf("expired early: %+v", ts)
	}
	h.clock.Advance(time.Millisecond)
	ts := h.c.ExpireIDs()
	if len(ts) != 1 || ts[0].To.TransactionalID != "idle" || ts[0].Record().Value != nil {
		t.Fatalf("ExpireIDs = %+v", ts)
	}
	r := h.c.InitProducerID(context.Background(), InitProducerIDRequest{TransactionalID: "idle", TimeoutMs: 1000, ProducerID: -1, ProducerEpoch: -1, Version: 5})
	wantErr(t, "InitProducerID while the id expires", r.Err, kerr.ConcurrentTransactions)
	h.complete(ts[0])
	if _, err := h.c.Describe("idle"); err != kerr.TransactionalIDNotFound {
		t.Fatalf("Describe(expired) = %v", err)
	}
	if pid2, _ := h.mustInit("idle"); pid2 == pid {
		t.Fatal("an expired id came back with a used producer id")
	}
}

func TestListDescribe(t *testing.T) {
	h := newHarness(t)
	p1, e1 := h.mustInit("one")
	h.mustInit("two")
	wantErr(t, "add", h.add("one", p1, e1, 3, tp("a", 0)), nil)
	h.clock.Advance(time.Minute)

	names := func(s []Summary) []string {
		var out []string
		for _, x := range s {
			out = append(out, x.TransactionalID+"/"+x.State.String())
		}
		return out
	}
	if got := names(h.c.List(ListFilter{})); !slices.Equal(got, []string{"one/Ongoing", "two/Empty"}) {
		t.Errorf("List = %v", got)
	}
	if got := names(h.c.List(ListFilter{States: []State{Ongoing}})); !slices.Equal(got, []string{"one/Ongoing"}) {
		t.Errorf("List(Ongoing) = %v", got)
	}
	if got := names(h.c.List(ListFilter{ProducerIDs: []int64{p1 + 1}})); !slices.Equal(got, []string{"two/Empty"}) {
		t.Errorf("List(producer %d) = %v", p1+1, got)
	}
	if got := names(h.c.List(ListFilter{MinDuration: time.Minute})); !slices.Equal(got, []string{"one/Ongoing"}) {
		t.Errorf("List(running 1m) = %v", got)
	}
	if got := h.c.List(ListFilter{MinDuration: time.Hour}); len(got) != 0 {
		t.Errorf("List(running 1h) = %v", got)
	}
	if got := names(h.c.List(ListFilter{IDPattern: regexp.MustCompile("^t")})); !slices.Equal(got, []string{"two/Empty"}) {
		t.Errorf("List(pattern ^t) = %v", got)
	}
	if got := names(h.c.List(ListFilter{IDPattern: regexp.MustCompile("o"), States: []State{Empty}})); !slices.Equal(got, []string{"two/Empty"}) {
		t.Errorf("List(pattern o, Empty) = %v", got)
	}
	d := h.state("one")
	if d.ProducerID != p1 || d.TimeoutMs != testTimeoutMs || !slices.Equal(d.Partitions, []TopicPartition{tp("a", 0)}) {
		t.Errorf("Describe = %+v", d)
	}
	if _, err := h.c.Describe("none"); err != kerr.TransactionalIDNotFound {
		t.Errorf("Describe(unknown) = %v", err)
	}
	h.c.Unload(h.c.PartitionFor("one"))
	if _, err := h.c.Describe("one"); err != kerr.NotCoordinator {
		t.Errorf("Describe(unloaded) = %v", err)
	}
}

// TestCompleteAfterUnload: a decision made before the partition moved
// cannot be applied after; the new leader rebuilds from the log.
func TestCompleteAfterUnload(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	r := h.c.AddPartitions(AddPartitionsRequest{TransactionalID: "tx", ProducerID: pid, ProducerEpoch: epoch, Partitions: []TopicPartition{tp("a", 0)}})
	part := h.c.PartitionFor("tx")
	h.c.Unload(part)
	if err := h.c.Complete(r.Transition); !errors.Is(err, ErrNotCoordinator) {
		t.Fatalf("Complete after Unload = %v", err)
	}
	if _, err := h.c.Load(part, 4, nil); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Complete(r.Transition); !errors.Is(err, ErrNotCoordinator) {
		t.Fatalf("Complete under a newer coordinator epoch = %v", err)
	}
}

// TestCoordinates: markers are the coordinator's to write while it holds
// their transactional id's partition at their coordinator epoch, and no
// longer once the partition is unloaded or loaded again at a newer epoch.
func TestCoordinates(t *testing.T) {
	h := newHarness(t)
	pid, epoch := h.mustInit("tx")
	wantErr(t, "add", h.add("tx", pid, epoch, 3, tp("a", 0)), nil)
	_, m := h.end("tx", pid, epoch, true, 3)
	if m == nil {
		t.Fatal("EndTxn asked for no markers")
	}
	if !h.c.Coordinates(m) {
		t.Fatal("Coordinates = false at the epoch the markers were decided under")
	}
	other := *m
	other.CoordinatorEpoch++
	if h.c.Coordinates(&other) {
		t.Error("Coordinates = true for markers of another coordinator epoch")
	}
	part := h.c.PartitionFor("tx")
	if _, err := h.c.Load(part, m.CoordinatorEpoch+1, h.log[part]); err != nil {
		t.Fatal(err)
	}
	if h.c.Coordinates(m) {
		t.Error("Coordinates = true after the partition was loaded at a newer epoch")
	}
	if !h.c.Coordinates(&other) {
		t.Error("Coordinates = false for markers of the newer epoch it loaded at")
	}
	h.c.Unload(part)
	if h.c.Coordinates(&other) {
		t.Error("Coordinates = true after the partition was unloaded")
	}
}

func sameMarkers(a, b *Markers) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.TransactionalID == b.TransactionalID && a.ProducerID == b.ProducerID && a.ProducerEpoch == b.ProducerEpoch &&
		a.CoordinatorEpoch == b.CoordinatorEpoch && a.Commit == b.Commit && slices.Equal(a.Partitions, b.Partitions)
}

// lockedIDs is counterIDs safe for concurrent callers.
type lockedIDs struct {
	mu sync.Mutex
	counterIDs
}

func (a *lockedIDs) NextProducerID(ctx context.Context) (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.counterIDs.NextProducerID(ctx)
}

// TestConcurrentProducers: the coordinator serves many connections at
// once; run under -race. Each producer commits its own transactions while
// the timeout pass and the listing run beside them.
func TestConcurrentProducers(t *testing.T) {
	clock := &fakeClock{now: time.UnixMilli(1_700_000_000_000)}
	c, err := New(Config{Partitions: 4, Clock: clock, ProducerIDs: &lockedIDs{}})
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 4; p++ {
		if _, err := c.Load(p, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	const producers, rounds = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for i := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("p%d", i)
			must := func(what string, err *kerr.Error, t *Transition) {
				if err == nil && t != nil {
					if cerr := c.Complete(t); cerr != nil {
						errs <- fmt.Errorf("%s %s: %v", id, what, cerr)
					}
				} else if err != nil {
					errs <- fmt.Errorf("%s %s: %v", id, what, err)
				}
			}
			r := c.InitProducerID(ctx, InitProducerIDRequest{TransactionalID: id, TimeoutMs: testTimeoutMs, ProducerID: -1, ProducerEpoch: -1, Version: 5})
			must("init", r.Err, r.Transition)
			pid, epoch := r.ProducerID, r.ProducerEpoch
			for n := range rounds {
				a := c.AddPartitions(AddPartitionsRequest{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, Partitions: []TopicPartition{{Topic: id, Partition: int32(n % 3)}}, Version: 3})
				must("add", a.Err, a.Transition)
				e := c.EndTxn(ctx, EndTxnRequest{TransactionalID: id, ProducerID: pid, ProducerEpoch: epoch, Commit: true, Version: 5})
				must("end", e.Err, e.Transition)
				if e.Transition == nil {
					return
				}
				ct, err := c.CompleteMarkers(e.Transition.Markers())
				if err != nil {
					errs <- err
					return
				}
				must("complete", nil, ct)
				epoch = e.ProducerEpoch
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 100 {
			c.AbortTimedOut()
			c.List(ListFilter{})
		}
	}()
	wg.Wait()
	<-done
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range producers {
		m, err := c.Describe(fmt.Sprintf("p%d", i))
		if err != nil || m.State != CompleteCommit || m.ProducerEpoch != rounds {
			t.Errorf("p%d: %+v, %v", i, m, err)
		}
	}
}
