package meta

import (
	"errors"
	"reflect"
	"testing"
)

func restoreCmd(name string, b byte, epochs ...int32) restoreTopicCmd {
	return restoreTopicCmd{
		Topic:        createTopicCmd{Name: name, ID: id(b), Partitions: int32(len(epochs)), ReplicationFactor: 1, Configs: map[string]string{"retention.ms": "-1"}},
		LeaderEpochs: epochs,
	}
}

// TestRestoreTopicKeepsIDAndEpochs: a restored topic has the id it is
// given (its bucket keys carry it) and starts each partition at the
// leader epoch asked, so that its leaders' manifests fence the old ones;
// the producer-id allocator only ever moves up.
func TestRestoreTopicKeepsIDAndEpochs(t *testing.T) {
	h := newHarness(t)
	h.brokers(1, 2)
	h.must(kindAllocateProducerIDs, allocateProducerIDsCmd{Count: 10})
	c := restoreCmd("orders", 9, 3, 7)
	c.MinProducerID = 5000
	res := h.must(kindRestoreTopic, c)
	st := h.f.state()
	got, ok := st.Topics["orders"]
	if !ok || got.ID != id(9) || res.topic.ID != id(9) {
		t.Fatalf("topic %+v, want id %x", got, id(9))
	}
	if got.Configs["retention.ms"] != "-1" {
		t.Errorf("configs %v", got.Configs)
	}
	for i, want := range []int32{3, 7} {
		p := got.Partitions[i]
		if p.LeaderEpoch != want || p.Leader == NoLeader || len(p.ISR) != 1 {
			t.Errorf("partition %d: %+v, want leader epoch %d with a leader", i, p, want)
		}
	}
	if st.NextProducerID != 5000 {
		t.Errorf("next producer id %d, want 5000", st.NextProducerID)
	}
	// Lower than the allocator: it stays where it is.
	c2 := restoreCmd("small", 10, 0)
	c2.MinProducerID = 1
	h.must(kindRestoreTopic, c2)
	if n := h.f.state().NextProducerID; n != 5000 {
		t.Errorf("next producer id moved back to %d", n)
	}

	// The same restore again changes nothing.
	before := h.f.state()
	if res := h.must(kindRestoreTopic, c); res.topic.ID != id(9) {
		t.Fatalf("retry answered %+v", res.topic)
	}
	if h.f.state() != before {
		t.Fatal("a retried restore published a new state")
	}
}

// TestRestoreTopicReplaces: an existing topic of the same name is replaced
// only when asked, and only while it is the one the caller looked at.
func TestRestoreTopicReplaces(t *testing.T) {
	h := newHarness(t)
	h.brokers(1)
	own := topicCmd("__consumer_offsets", 1, 2, 1)
	own.Internal = true
	h.must(kindCreateTopic, own)

	c := restoreCmd("__consumer_offsets", 2, 4, 4)
	c.Topic.Internal = true
	h.wantErr(ErrTopicExists, kindRestoreTopic, c)

	c.Replace, c.ReplaceID = true, id(3) // not the id there
	h.wantErr(ErrTopicExists, kindRestoreTopic, c)

	c.ReplaceID = id(1)
	h.must(kindRestoreTopic, c)
	st := h.f.state()
	if got := st.Topics["__consumer_offsets"]; got.ID != id(2) || !got.Internal || got.Partitions[0].LeaderEpoch != 4 {
		t.Fatalf("after replace: %+v", got)
	}
	if _, ok := st.TopicByID(id(1)); ok {
		t.Fatal("the replaced topic is still known by its id")
	}

	gone := restoreCmd("nothing", 5, 1)
	gone.Replace, gone.ReplaceID = true, id(6)
	h.wantErr(ErrUnknownTopic, kindRestoreTopic, gone)
}

// TestRestoreTopicRejects: bad restores change nothing.
func TestRestoreTopicRejects(t *testing.T) {
	h := newHarness(t)
	h.brokers(1)
	h.must(kindCreateTopic, topicCmd("a", 1, 1, 1))

	h.wantErr(ErrTopicExists, kindRestoreTopic, restoreCmd("b", 1, 1)) // a's id
	h.wantErr(errBadCommand, kindRestoreTopic, restoreCmd("c", 0, 1))  // zero id
	short := restoreCmd("d", 4, 1, 1)
	short.LeaderEpochs = short.LeaderEpochs[:1]
	h.wantErr(errBadCommand, kindRestoreTopic, short)
	h.wantErr(errBadCommand, kindRestoreTopic, restoreCmd("e", 5, -1))
	rf := restoreCmd("f", 6, 1)
	rf.Topic.ReplicationFactor = 2
	h.wantErr(ErrInvalidReplicationFactor, kindRestoreTopic, rf)
	neg := restoreCmd("g", 7, 1)
	neg.MinProducerID = -1
	h.wantErr(errBadCommand, kindRestoreTopic, neg)
}

// TestRestoredTopicSurvivesSnapshot: what a restore leaves (id, epochs,
// producer ids, the replaced topic gone) is in the snapshot, and a node
// restored from it carries on like the original.
func TestRestoredTopicSurvivesSnapshot(t *testing.T) {
	src := newHarness(t)
	src.brokers(1, 2)
	own := topicCmd("__transaction_state", 1, 1, 1)
	own.Internal = true
	src.must(kindCreateTopic, own)
	c := restoreCmd("__transaction_state", 2, 6)
	c.Topic.Internal, c.Replace, c.ReplaceID, c.MinProducerID = true, true, id(1), 77
	src.must(kindRestoreTopic, c)
	src.must(kindRestoreTopic, restoreCmd("events", 3, 2, 5, 9))

	snap, err := src.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	dst := newHarness(t)
	if err := dst.f.Restore(sink.reader()); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dst.f.state(), src.f.state()) {
		t.Fatalf("restored state differs:\n got %+v\nwant %+v", dst.f.state(), src.f.state())
	}
	st := dst.f.state()
	if st.NextProducerID != 77 || st.Topics["events"].Partitions[2].LeaderEpoch != 9 || st.Topics["__transaction_state"].ID != id(2) {
		t.Fatalf("snapshot lost the restore: %+v", st)
	}
	// A retry applied after the snapshot is still recognised.
	dst.index = src.index
	if res := dst.do(kindRestoreTopic, restoreCmd("events", 3, 2, 5, 9)); res.err != nil || res.topic.ID != id(3) {
		t.Fatalf("retry after snapshot: %v", res.err)
	}
	if res := dst.do(kindRestoreTopic, restoreCmd("events", 4, 1, 1, 1)); !errors.Is(res.err, ErrTopicExists) {
		t.Fatalf("another id under a restored name: %v", res.err)
	}
}

// TestStoreRestoreTopic goes through raft.
func TestStoreRestoreTopic(t *testing.T) {
	s := openStore(t, t.TempDir())
	ctx := testCtx(t)
	if _, err := s.RegisterBroker(ctx, Registration{ID: 1, Host: "h", Port: 1, Incarnation: NewIncarnation()}); err != nil {
		t.Fatal(err)
	}
	spec := RestoreSpec{
		Topic:         TopicSpec{Name: "t", ID: id(7), Partitions: 2, ReplicationFactor: 1, Configs: map[string]string{"cleanup.policy": "compact"}},
		LeaderEpochs:  []int32{1, 2},
		MinProducerID: 1 << 20,
	}
	got, err := s.RestoreTopic(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != id(7) || got.Partitions[1].LeaderEpoch != 2 || s.State().NextProducerID != 1<<20 {
		t.Fatalf("restored %+v, next producer id %d", got, s.State().NextProducerID)
	}
	if _, err := s.RestoreTopic(ctx, RestoreSpec{Topic: TopicSpec{Name: "u", Partitions: 1, ReplicationFactor: 1}, LeaderEpochs: []int32{0}}); err == nil {
		t.Fatal("a restore without an id succeeded")
	}
}
