package group

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/segment"
)

// txnCommit sends a TxnOffsetCommit (v4) of t-partition at offset for
// producer pid at epoch, as member name (generation -1 and no member for
// ""), and returns the partition's error.
func (h *harness) txnCommit(name string, pid int64, epoch int16, partition int32, offset int64) string {
	h.t.Helper()
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.Version = 4
	req.TransactionalID, req.Group = "tx", testGroup
	req.ProducerID, req.ProducerEpoch = pid, epoch
	if name != "" {
		req.MemberID, req.Generation = h.ids[name], h.gens[name]
		if inst, ok := h.instances[name]; ok {
			req.InstanceID = kmsg.StringPtr(inst)
		}
	}
	p := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	p.Partition, p.Offset, p.LeaderEpoch = partition, offset, 4
	req.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{p}}}
	resp := h.c.TxnOffsetCommit(context.Background(), req)
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		h.t.Fatalf("TxnOffsetCommit answered %+v", resp.Topics)
	}
	return code(resp.Topics[0].Partitions[0].ErrorCode)
}

// fetchAt returns what OffsetFetch says of t-partition, in the v7 and the
// v8 layouts (which must agree), as "offset:code".
func (h *harness) fetchAt(partition int32, requireStable bool) string {
	h.t.Helper()
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Version, req.Group, req.RequireStable = 7, testGroup, requireStable
	req.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "t", Partitions: []int32{partition}}}
	r7 := h.c.OffsetFetch(req)
	if r7.ErrorCode != 0 {
		return "group:" + code(r7.ErrorCode)
	}
	p7 := r7.Topics[0].Partitions[0]
	v7 := fmt.Sprintf("%d:%s", p7.Offset, code(p7.ErrorCode))

	req = kmsg.NewPtrOffsetFetchRequest()
	req.Version, req.RequireStable = 8, requireStable
	req.Groups = []kmsg.OffsetFetchRequestGroup{{Group: testGroup, Topics: []kmsg.OffsetFetchRequestGroupTopic{{Topic: "t", Partitions: []int32{partition}}}}}
	g8 := h.c.OffsetFetch(req).Groups[0]
	p8 := g8.Topics[0].Partitions[0]
	if v8 := fmt.Sprintf("%d:%s", p8.Offset, code(p8.ErrorCode)); v8 != v7 || g8.ErrorCode != 0 {
		h.t.Fatalf("OffsetFetch v7 says %s, v8 says %s (group %s)", v7, v8, code(g8.ErrorCode))
	}
	return v7
}

// markerBatch is the END_TXN control batch a partition leader writes
// (WriteTxnMarkers) for producer pid.
func markerBatch(pid int64, epoch int16, commit bool) []byte {
	key := make([]byte, 4)
	if commit {
		key[3] = 1
	}
	b := buildBatch([]record{{key: key, value: make([]byte, 6)}}, time.Now().UnixMilli())
	return setProducer(b, pid, epoch, 0x30, -1)
}

// setProducer sets a built batch's producer fields and attributes.
func setProducer(b []byte, pid int64, epoch int16, attrs int16, seq int32) []byte {
	be := binary.BigEndian
	be.PutUint16(b[batchAttrsAt:], uint16(attrs))
	be.PutUint64(b[43:], uint64(pid))
	be.PutUint16(b[51:], uint16(epoch))
	be.PutUint32(b[53:], uint32(seq))
	return fixBatchCRC(b)
}

func fixBatchCRC(b []byte) []byte {
	binary.BigEndian.PutUint32(b[batchCRCAt:], crc32.Checksum(b[batchAttrsAt:], castagnoli))
	return b
}

// endTxn does what the broker does once a marker on the group's offsets
// partition is committed: the marker is in the log, then CompleteTxn.
func (h *harness) endTxn(pid int64, commit bool) {
	h.t.Helper()
	p := Partition(testGroup, 3)
	if _, err := h.log.Append(context.Background(), p, markerBatch(pid, 0, commit)); err != nil {
		h.t.Fatal(err)
	}
	h.c.CompleteTxn(p, pid, commit)
}

func (h *harness) restart() {
	h.c.Close()
	h.start(Config{})
}

func wantFetch(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s: OffsetFetch says %s, want %s", what, got, want)
	}
}

// KIP-98: offsets committed in a transaction are the group's only once
// the transaction commits. Until then OffsetFetch answers the offset
// committed before, and, with RequireStable (KIP-447),
// UNSTABLE_OFFSET_COMMIT, so that a new member does not start from an
// offset that may yet change.
func TestTxnOffsetsVisibleOnlyOnCommit(t *testing.T) {
	h := newHarness(t, Config{})
	h.commit("", 5)
	if got := h.txnCommit("", 1, 0, 0, 10); got != "OK" {
		t.Fatalf("TxnOffsetCommit: %s", got)
	}
	wantFetch(t, "pending", h.fetchAt(0, false), "5:OK")
	wantFetch(t, "pending, require stable", h.fetchAt(0, true), "-1:"+kerr.UnstableOffsetCommit.Message)
	wantFetch(t, "another partition, require stable", h.fetchAt(1, true), "-1:OK")

	// A marker of another producer, or on another partition, changes
	// nothing.
	h.endTxn(2, true)
	h.c.CompleteTxn((Partition(testGroup, 3)+1)%3, 1, true)
	wantFetch(t, "other markers", h.fetchAt(0, true), "-1:"+kerr.UnstableOffsetCommit.Message)

	h.endTxn(1, true)
	wantFetch(t, "committed", h.fetchAt(0, true), "10:OK")
	h.restart()
	wantFetch(t, "committed, replayed", h.fetchAt(0, true), "10:OK")
}

// An aborted transaction's offsets are dropped: the group keeps what it
// had, and a group that had nothing keeps nothing.
func TestTxnOffsetsAbortDropped(t *testing.T) {
	h := newHarness(t, Config{})
	h.commit("", 5)
	h.txnCommit("", 1, 0, 0, 10)
	h.txnCommit("", 1, 0, 1, 20)
	wantFetch(t, "pending", h.fetchAt(1, true), "-1:"+kerr.UnstableOffsetCommit.Message)
	h.endTxn(1, false)
	wantFetch(t, "aborted", h.fetchAt(0, true), "5:OK")
	wantFetch(t, "aborted, no earlier commit", h.fetchAt(1, true), "-1:OK")
	h.restart()
	wantFetch(t, "aborted, replayed", h.fetchAt(0, true), "5:OK")
	wantFetch(t, "aborted, no earlier commit, replayed", h.fetchAt(1, true), "-1:OK")
}

// Kafka's rule when transactional and plain commits mix: a committed
// transaction's offset applies only if it was written after the group's
// current one (GroupMetadata.completePendingTxnOffsetCommit), in memory
// and on replay alike.
func TestTxnOffsetsLaterPlainCommitWins(t *testing.T) {
	h := newHarness(t, Config{})
	h.txnCommit("", 1, 0, 0, 10)
	h.commit("", 7) // written after the transactional one
	h.endTxn(1, true)
	wantFetch(t, "plain commit after the transactional one", h.fetchAt(0, true), "7:OK")
	h.restart()
	wantFetch(t, "replayed", h.fetchAt(0, true), "7:OK")

	h.commit("", 3)
	h.txnCommit("", 2, 0, 0, 12) // written after the plain one
	h.endTxn(2, true)
	wantFetch(t, "transactional commit after the plain one", h.fetchAt(0, true), "12:OK")
	h.restart()
	wantFetch(t, "replayed", h.fetchAt(0, true), "12:OK")
}

// KIP-447: a TxnOffsetCommit v3+ carries the member's generation, member
// id and instance id, and a zombie of an older generation is refused the
// way OffsetCommit refuses it. Generation -1 with no member id is a
// producer that does not use the group's membership: accepted, even by a
// group with members, as Kafka accepts it.
func TestTxnOffsetCommitMemberChecks(t *testing.T) {
	h := newHarness(t, Config{})
	h.instances["a"] = "ia"
	h.join("a", "ia", "consumer", "range")()
	h.sync("a", map[string]string{"a": "A"})()

	if got := h.txnCommit("a", 1, 0, 0, 10); got != "OK" {
		t.Errorf("member of the current generation: %s", got)
	}
	h.gens["a"]--
	if got := h.txnCommit("a", 1, 0, 0, 11); got != kerr.IllegalGeneration.Message {
		t.Errorf("older generation: %s, want ILLEGAL_GENERATION", got)
	}
	h.gens["a"]++
	id := h.ids["a"]
	h.ids["a"] = "zombie"
	delete(h.instances, "a")
	if got := h.txnCommit("a", 1, 0, 0, 12); got != kerr.UnknownMemberID.Message {
		t.Errorf("unknown member: %s, want UNKNOWN_MEMBER_ID", got)
	}
	h.instances["a"] = "ia"
	if got := h.txnCommit("a", 1, 0, 0, 13); got != kerr.FencedInstanceID.Message {
		t.Errorf("instance id of another member: %s, want FENCED_INSTANCE_ID", got)
	}
	h.ids["a"] = id
	if got := h.txnCommit("", 1, 0, 0, 14); got != "OK" {
		t.Errorf("generation -1, no member: %s", got)
	}
	h.endTxn(1, true)
	wantFetch(t, "after the refused commits", h.fetchAt(0, true), "14:OK")

	// A group the coordinator has never seen is created, as by a plain
	// commit without a generation.
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	req.Version, req.Group, req.TransactionalID, req.ProducerID = 4, "", "tx", 1
	req.Topics = []kmsg.TxnOffsetCommitRequestTopic{{Topic: "t", Partitions: []kmsg.TxnOffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1}}}}
	if got := code(h.c.TxnOffsetCommit(context.Background(), req).Topics[0].Partitions[0].ErrorCode); got != kerr.InvalidGroupID.Message {
		t.Errorf("empty group id: %s", got)
	}
}

// A producer fenced by a newer epoch (the log refuses its batch) gets
// INVALID_PRODUCER_EPOCH, as Kafka's coordinator answers, and nothing
// becomes pending.
func TestTxnOffsetCommitFenced(t *testing.T) {
	h := newHarness(t, Config{})
	h.log.fail = fmt.Errorf("append: %w", segment.ErrInvalidProducerEpoch)
	if got := h.txnCommit("", 1, 0, 0, 10); got != kerr.InvalidProducerEpoch.Message {
		t.Fatalf("fenced producer: %s, want INVALID_PRODUCER_EPOCH", got)
	}
	h.log.fail = nil
	wantFetch(t, "fenced", h.fetchAt(0, true), "-1:OK")
}

// The loader replays transactions: a committed one's offsets apply, an
// aborted one's are dropped, and one still open at the end of the log
// stays pending until its marker comes (CompleteTxn). Compaction leaves
// batches without records and markers without data; both are skipped.
func TestTxnOffsetsReplay(t *testing.T) {
	h := newHarness(t, Config{})
	h.commit("", 1)
	h.txnCommit("", 1, 0, 1, 10) // committed below
	h.txnCommit("", 2, 0, 2, 20) // aborted below
	h.txnCommit("", 3, 0, 3, 30) // left open
	h.txnCommit("", 1, 0, 4, 11)
	h.endTxn(1, true)
	h.endTxn(2, false)
	p := Partition(testGroup, 3)
	ctx := context.Background()
	// What compaction may leave: an emptied transactional batch, and a
	// marker whose data is gone.
	empty := setProducer(compactedBatch(0, 2, nil, nil), 4, 0, 0x10, 0)
	if _, err := h.log.Append(ctx, p, empty); err != nil {
		t.Fatal(err)
	}
	if _, err := h.log.Append(ctx, p, markerBatch(5, 0, true)); err != nil {
		t.Fatal(err)
	}
	emptyMarker := setProducer(compactedBatch(0, 0, nil, nil), 6, 0, 0x30, -1)
	if _, err := h.log.Append(ctx, p, emptyMarker); err != nil {
		t.Fatal(err)
	}

	h.restart()
	for _, c := range []struct {
		partition int32
		stable    bool
		want      string
	}{
		{0, true, "1:OK"},
		{1, true, "10:OK"},
		{4, true, "11:OK"},
		{2, true, "-1:OK"},
		{3, false, "-1:OK"},
		{3, true, "-1:" + kerr.UnstableOffsetCommit.Message},
	} {
		if got := h.fetchAt(c.partition, c.stable); got != c.want {
			t.Errorf("replayed t-%d (require stable %v): %s, want %s", c.partition, c.stable, got, c.want)
		}
	}
	h.endTxn(3, true)
	wantFetch(t, "open transaction committed after the load", h.fetchAt(3, true), "30:OK")
	h.restart()
	wantFetch(t, "and replayed", h.fetchAt(3, true), "30:OK")
}

// gatedLog holds the first Read until gate is closed, so a test can act
// while a partition loads.
type gatedLog struct {
	*memLog
	gate    chan struct{}
	reading chan struct{}
	once    bool
}

func (l *gatedLog) Read(dst []byte, p int32, offset int64) ([]byte, error) {
	if !l.once {
		l.once = true
		close(l.reading)
		<-l.gate
	}
	return l.memLog.Read(dst, p, offset)
}

// A marker may be committed while the coordinator loads its partition,
// after the loader read past where it was written: the completion is kept
// and applied once the load is done, not lost.
func TestTxnCompletedWhileLoading(t *testing.T) {
	h := newHarness(t, Config{})
	h.txnCommit("", 1, 0, 0, 10)
	p := Partition(testGroup, 3)
	log := &gatedLog{memLog: h.log, gate: make(chan struct{}), reading: make(chan struct{})}
	c, err := New(Config{Partitions: 3, Log: log, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h.c.Close()
	h.c = c
	done := make(chan error, 1)
	go func() { done <- c.Load(context.Background(), p) }()
	<-log.reading
	// The worst case: the loader read the log before the marker was
	// written. The test stands for it by writing no marker at all.
	c.CompleteTxn(p, 1, true)
	close(log.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantFetch(t, "completed while loading", h.fetchAt(0, true), "10:OK")
}

// Offsets pending in a transaction are not expired (Kafka refuses to
// while a transaction may still commit them), and the group they belong
// to is not deleted by retention meanwhile. Deleting the group deletes
// them too: its later commit does not bring them back, in memory or on
// replay.
func TestTxnOffsetsRetentionAndDeletion(t *testing.T) {
	h := newHarness(t, Config{OffsetsRetention: time.Hour})
	h.commit("", 5)
	h.txnCommit("", 1, 0, 0, 10)
	h.txnCommit("", 1, 0, 1, 20)
	h.advance(2 * time.Hour)
	h.c.ExpireOffsets(context.Background())
	wantFetch(t, "retention with a pending offset", h.fetchAt(0, true), "-1:"+kerr.UnstableOffsetCommit.Message)
	h.endTxn(1, true)
	wantFetch(t, "committed after retention ran", h.fetchAt(0, true), "10:OK")
	if got := h.fetchAt(1, true); got != "20:OK" {
		t.Errorf("t-1 committed after retention ran: %s", got)
	}

	h.txnCommit("", 2, 0, 2, 30)
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{testGroup}
	if got := code(h.c.DeleteGroups(context.Background(), del).Groups[0].ErrorCode); got != "OK" {
		t.Fatalf("DeleteGroups: %s", got)
	}
	h.endTxn(2, true)
	if got := h.fetchAt(2, false); got != "-1:OK" {
		t.Errorf("pending offset of a deleted group, after its commit: %s", got)
	}
	h.restart()
	if got := h.fetchAt(2, false); got != "-1:OK" {
		t.Errorf("pending offset of a deleted group, replayed: %s", got)
	}
	for _, s := range h.c.Summaries(10) {
		if s.Group == testGroup {
			t.Errorf("deleted group replayed: %+v", s)
		}
	}
}

// A batch the log refuses because the producer's transaction ended after
// its verification (KIP-890) is answered INVALID_TXN_STATE, and nothing
// becomes pending.
func TestTxnOffsetCommitNotVerified(t *testing.T) {
	h := newHarness(t, Config{})
	h.log.fail = fmt.Errorf("append: %w", kerr.InvalidTxnState)
	if got := h.txnCommit("", 1, 0, 0, 10); got != kerr.InvalidTxnState.Message {
		t.Fatalf("commit of an ended transaction: %s, want INVALID_TXN_STATE", got)
	}
	h.log.fail = nil
	wantFetch(t, "refused", h.fetchAt(0, true), "-1:OK")
}

// hookLog runs after, once, right after the inner log appended a batch
// and before Append returns: what happens when a transaction marker is
// written and committed while a TxnOffsetCommit waits for its batch to be
// committed (acks=all), e.g. a fence or a timeout abort by the coordinator.
type hookLog struct {
	*memLog
	after func()
}

func (l *hookLog) Append(ctx context.Context, p int32, batch []byte) (int64, error) {
	base, err := l.memLog.Append(ctx, p, batch)
	if f := l.after; f != nil && err == nil {
		l.after = nil
		f()
	}
	return base, err
}

// TestMarkerDuringTxnOffsetCommit: the coordinator aborts a producer's
// transaction (a fence, a timeout) while that producer's TxnOffsetCommit
// waits for its batch to commit. The abort must end those offsets: not
// leave them pending (UNSTABLE_OFFSET_COMMIT for ever), nor let the
// producer's next commit apply them.
func TestMarkerDuringTxnOffsetCommit(t *testing.T) {
	h := newHarness(t, Config{})
	h.commit("", 5)
	h.c.Close()
	hl := &hookLog{memLog: h.log}
	c, err := New(Config{Partitions: 3, Clock: h.clock, Log: hl, MinSessionTimeout: h.c.cfg.MinSessionTimeout})
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(3) {
		if err := c.Load(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	h.c = c
	wantFetch(t, "before", h.fetchAt(0, true), "5:OK")

	// The coordinator aborts producer 1's transaction (fence, timeout)
	// while its TxnOffsetCommit of offset 10 is being committed: the
	// ABORT marker is written after the batch, then CompleteTxn runs.
	// The marker's CompleteTxn runs on its own goroutine, as the
	// WriteTxnMarkers handler's does, and may have to wait for the commit.
	done := make(chan struct{})
	hl.after = func() {
		p := Partition(testGroup, 3)
		if _, err := h.log.Append(context.Background(), p, markerBatch(1, 0, false)); err != nil {
			t.Error(err)
		}
		go func() {
			defer close(done)
			c.CompleteTxn(p, 1, false)
		}()
		// Give CompleteTxn the time to run ahead of the commit's end.
		time.Sleep(20 * time.Millisecond)
	}
	if got := h.txnCommit("", 1, 0, 0, 10); got != "OK" {
		t.Fatalf("TxnOffsetCommit: %s", got)
	}
	<-done
	// The transaction is over (aborted): the offset must be 5, stable.
	wantFetch(t, "after the abort", h.fetchAt(0, true), "5:OK")

	// The same producer id (epoch bumped by the fence) runs a new
	// transaction that commits an offset for another partition only.
	if got := h.txnCommit("", 1, 1, 1, 20); got != "OK" {
		t.Fatalf("TxnOffsetCommit: %s", got)
	}
	h.endTxn(1, true)
	wantFetch(t, "partition 0 after the next commit", h.fetchAt(0, true), "5:OK")
	wantFetch(t, "partition 1 after the next commit", h.fetchAt(1, true), "20:OK")
	h.restart()
	wantFetch(t, "replayed", h.fetchAt(0, true), "5:OK")
}
