package meta

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// fsmHarness applies commands to an fsm the way raft would, with
// increasing log indexes.
type fsmHarness struct {
	t     *testing.T
	f     *fsm
	index uint64
}

func newHarness(t *testing.T) *fsmHarness { return &fsmHarness{t: t, f: newFSM()} }

func (h *fsmHarness) do(k kind, payload any) result {
	h.t.Helper()
	data, err := encodeCommand(k, payload)
	if err != nil {
		h.t.Fatal(err)
	}
	h.index++
	res, ok := h.f.Apply(&raft.Log{Index: h.index, Type: raft.LogCommand, Data: data}).(result)
	if !ok {
		h.t.Fatal("Apply did not return a result")
	}
	return res
}

func (h *fsmHarness) must(k kind, payload any) result {
	h.t.Helper()
	res := h.do(k, payload)
	if res.err != nil {
		h.t.Fatalf("command %d: %v", k, res.err)
	}
	return res
}

func (h *fsmHarness) wantErr(want error, k kind, payload any) {
	h.t.Helper()
	before := h.f.state()
	res := h.do(k, payload)
	if !errors.Is(res.err, want) {
		h.t.Fatalf("command %d: err = %v, want %v", k, res.err, want)
	}
	if h.f.state() != before {
		h.t.Fatalf("failed command %d published a new state", k)
	}
}

func (h *fsmHarness) brokers(ids ...int32) {
	for _, id := range ids {
		h.must(kindRegisterBroker, registerBrokerCmd{Broker{ID: id, Host: "localhost", Port: 9000 + id}})
	}
}

func id(b byte) [16]byte { return [16]byte{0: 0, 1: 0, 2: 0, 3: 0, 15: b} }

func topicCmd(name string, b byte, parts int32, rf int16) createTopicCmd {
	return createTopicCmd{Name: name, ID: id(b), Partitions: parts, ReplicationFactor: rf}
}

func TestRegisterBrokerUpserts(t *testing.T) {
	h := newHarness(t)
	h.brokers(1)
	s1 := h.f.state()
	if got := s1.Brokers[1]; !reflect.DeepEqual(got, Broker{ID: 1, Host: "localhost", Port: 9001, Epoch: 1}) {
		t.Fatalf("broker 1 = %+v", got)
	}

	// An identical registration is not a change: no new state, no wake-up.
	ch := h.f.changed()
	h.brokers(1)
	if h.f.state() != s1 {
		t.Fatal("identical re-registration published a new state")
	}
	select {
	case <-ch:
		t.Fatal("identical re-registration fired Changed")
	default:
	}

	h.must(kindRegisterBroker, registerBrokerCmd{Broker{ID: 1, Host: "moved", Port: 1, Rack: "r1"}})
	<-ch
	if got := h.f.state().Brokers[1]; got.Host != "moved" || got.Rack != "r1" {
		t.Fatalf("re-registered broker = %+v", got)
	}
	if s1.Brokers[1].Host != "localhost" {
		t.Fatal("an older State changed under its reader")
	}
}

func TestCreateTopicAssignsRoundRobin(t *testing.T) {
	h := newHarness(t)
	h.brokers(3, 1, 2) // registration order must not matter
	// The topic ID's first four bytes pick the starting broker: 0 here.
	res := h.must(kindCreateTopic, createTopicCmd{
		Name: "t", ID: id(1), Partitions: 4, ReplicationFactor: 2,
		Configs: map[string]string{"cleanup.policy": "compact"},
	})
	want := []Partition{
		{Index: 0, Replicas: []int32{1, 2}, ISR: []int32{1, 2}, Leader: 1},
		{Index: 1, Replicas: []int32{2, 3}, ISR: []int32{2, 3}, Leader: 2},
		{Index: 2, Replicas: []int32{3, 1}, ISR: []int32{3, 1}, Leader: 3},
		{Index: 3, Replicas: []int32{1, 2}, ISR: []int32{1, 2}, Leader: 1},
	}
	got := h.f.state().Topics["t"]
	if !reflect.DeepEqual(got.Partitions, want) {
		t.Fatalf("partitions = %+v, want %+v", got.Partitions, want)
	}
	if got != res.topic || got.ID != id(1) || got.Configs["cleanup.policy"] != "compact" {
		t.Fatalf("topic = %+v, result %+v", got, res.topic)
	}
	if byID, ok := h.f.state().TopicByID(id(1)); !ok || byID != got {
		t.Fatal("TopicByID does not find the topic")
	}

	// Another ID starts elsewhere, so leaders of different topics spread.
	other := [16]byte{0, 0, 0, 1, 15: 2}
	h.must(kindCreateTopic, createTopicCmd{Name: "u", ID: other, Partitions: 1, ReplicationFactor: 3})
	if p := h.f.state().Topics["u"].Partitions[0]; !slices.Equal(p.Replicas, []int32{2, 3, 1}) {
		t.Fatalf("u replicas = %v, want [2 3 1]", p.Replicas)
	}
	if names := h.f.state().SortedTopicNames(); !slices.Equal(names, []string{"t", "u"}) {
		t.Fatalf("SortedTopicNames = %v", names)
	}
}

func TestCreateTopicRejects(t *testing.T) {
	h := newHarness(t)
	h.wantErr(ErrInvalidReplicationFactor, kindCreateTopic, topicCmd("t", 1, 1, 1)) // no brokers yet
	h.brokers(1, 2)
	h.must(kindCreateTopic, topicCmd("t", 1, 1, 1))

	h.wantErr(ErrTopicExists, kindCreateTopic, topicCmd("t", 2, 1, 1))
	h.wantErr(ErrTopicExists, kindCreateTopic, topicCmd("other", 1, 1, 1)) // same ID
	h.wantErr(ErrInvalidReplicationFactor, kindCreateTopic, topicCmd("u", 3, 1, 3))
	h.wantErr(ErrInvalidReplicationFactor, kindCreateTopic, topicCmd("u", 3, 1, 0))
	h.wantErr(ErrInvalidReplicationFactor, kindCreateTopic, topicCmd("u", 3, 1, -1))
	h.wantErr(ErrInvalidPartitions, kindCreateTopic, topicCmd("u", 3, 0, 1))
	h.wantErr(errBadCommand, kindCreateTopic, topicCmd("u", 0, 1, 1)) // zero ID: proposer bug
}

// KIP-516: a topic deleted and re-created under its name is a new topic.
func TestDeleteTopicThenRecreate(t *testing.T) {
	h := newHarness(t)
	h.brokers(1)
	h.must(kindCreateTopic, topicCmd("t", 1, 2, 1))
	h.wantErr(ErrUnknownTopic, kindDeleteTopic, deleteTopicCmd{Name: "nope"})

	res := h.must(kindDeleteTopic, deleteTopicCmd{Name: "t"})
	if res.topic == nil || res.topic.ID != id(1) || len(res.topic.Partitions) != 2 {
		t.Fatalf("deleted topic = %+v", res.topic)
	}
	s := h.f.state()
	if _, ok := s.Topics["t"]; ok {
		t.Fatal("topic still present")
	}
	if _, ok := s.TopicByID(id(1)); ok {
		t.Fatal("topic still found by ID")
	}
	h.must(kindCreateTopic, topicCmd("t", 2, 1, 1))
	if got := h.f.state().Topics["t"].ID; got != id(2) {
		t.Fatalf("re-created topic ID = %x", got)
	}
}

func TestCreatePartitions(t *testing.T) {
	h := newHarness(t)
	h.brokers(1, 2, 3)
	h.must(kindCreateTopic, topicCmd("t", 1, 2, 2))
	before := h.f.state().Topics["t"]

	h.wantErr(ErrInvalidPartitions, kindCreatePartitions, createPartitionsCmd{Name: "t", Count: 2})
	h.wantErr(ErrInvalidPartitions, kindCreatePartitions, createPartitionsCmd{Name: "t", Count: 1})
	h.wantErr(ErrUnknownTopic, kindCreatePartitions, createPartitionsCmd{Name: "nope", Count: 5})

	h.must(kindCreatePartitions, createPartitionsCmd{Name: "t", Count: 5})
	after := h.f.state().Topics["t"]
	if len(after.Partitions) != 5 {
		t.Fatalf("%d partitions, want 5", len(after.Partitions))
	}
	if !reflect.DeepEqual(after.Partitions[:2], before.Partitions) {
		t.Fatal("existing partitions changed")
	}
	if len(before.Partitions) != 2 {
		t.Fatal("the previous State's topic was modified in place")
	}
	for i, p := range after.Partitions {
		if p.Index != int32(i) || len(p.Replicas) != 2 || p.Leader != p.Replicas[0] {
			t.Fatalf("partition %d = %+v", i, p)
		}
	}
	if !slices.Equal(after.Partitions[4].Replicas, []int32{2, 3}) {
		t.Fatalf("partition 4 replicas = %v, want [2 3]", after.Partitions[4].Replicas)
	}
}

func TestAlterConfigs(t *testing.T) {
	h := newHarness(t)
	h.brokers(1)
	h.must(kindCreateTopic, createTopicCmd{Name: "t", ID: id(1), Partitions: 1, ReplicationFactor: 1,
		Configs: map[string]string{"a": "1", "b": "2"}})
	s0 := h.f.state()

	h.must(kindAlterConfigs, alterConfigsCmd{Name: "t", Set: map[string]string{"b": "20", "c": "3"}, Delete: []string{"a", "missing"}})
	if got := h.f.state().Topics["t"].Configs; !reflect.DeepEqual(got, map[string]string{"b": "20", "c": "3"}) {
		t.Fatalf("incremental: configs = %v", got)
	}
	h.must(kindAlterConfigs, alterConfigsCmd{Name: "t", Set: map[string]string{"z": "9"}, Replace: true})
	if got := h.f.state().Topics["t"].Configs; !reflect.DeepEqual(got, map[string]string{"z": "9"}) {
		t.Fatalf("replace: configs = %v", got)
	}
	h.must(kindAlterConfigs, alterConfigsCmd{Name: "t", Replace: true})
	if got := h.f.state().Topics["t"].Configs; got == nil || len(got) != 0 {
		t.Fatalf("replace with nothing: configs = %#v, want empty non-nil", got)
	}
	if got := s0.Topics["t"].Configs; !reflect.DeepEqual(got, map[string]string{"a": "1", "b": "2"}) {
		t.Fatalf("an older State changed under its reader: %v", got)
	}
	h.wantErr(ErrUnknownTopic, kindAlterConfigs, alterConfigsCmd{Name: "nope"})
}

func TestMalformedCommandsChangeNothing(t *testing.T) {
	h := newHarness(t)
	for _, data := range [][]byte{nil, {0}, {200}, {byte(kindCreateTopic)}, {byte(kindCreateTopic), '{'}, []byte("\x02[1,2]")} {
		before := h.f.state()
		h.index++
		res := h.f.Apply(&raft.Log{Index: h.index, Type: raft.LogCommand, Data: data}).(result)
		if !errors.Is(res.err, errBadCommand) {
			t.Errorf("Apply(%q) err = %v, want errBadCommand", data, res.err)
		}
		if h.f.state() != before {
			t.Errorf("Apply(%q) changed state", data)
		}
	}
	// Entries that are not commands (raft's own) pass through.
	if res := h.f.Apply(&raft.Log{Index: 99, Type: raft.LogNoop}).(result); res.err != nil {
		t.Fatal(res.err)
	}
	h.must(kindBarrier, nil)
	if h.f.state().Index != 0 {
		t.Fatal("barrier changed state")
	}
}

// script exercises every command kind, including failures.
func script(h *fsmHarness) {
	h.brokers(2, 1, 3)
	h.must(kindCreateTopic, createTopicCmd{Name: "orders", ID: id(1), Partitions: 3, ReplicationFactor: 3,
		Configs: map[string]string{"retention.ms": "-1"}})
	h.must(kindCreateTopic, createTopicCmd{Name: "__consumer_offsets", ID: [16]byte{9, 9, 9, 9, 15: 2}, Internal: true, Partitions: 5, ReplicationFactor: 1})
	h.must(kindCreateTopic, topicCmd("gone", 3, 1, 1))
	h.do(kindCreateTopic, topicCmd("orders", 4, 1, 1))
	h.must(kindCreatePartitions, createPartitionsCmd{Name: "orders", Count: 6})
	h.must(kindAlterConfigs, alterConfigsCmd{Name: "orders", Set: map[string]string{"cleanup.policy": "compact"}})
	h.must(kindDeleteTopic, deleteTopicCmd{Name: "gone"})
	h.must(kindBarrier, nil)
}

// FSM.Apply "must be deterministic and produce the same result on all
// peers in the cluster."
func TestApplyIsDeterministic(t *testing.T) {
	a, b := newHarness(t), newHarness(t)
	script(a)
	script(b)
	if !reflect.DeepEqual(a.f.state(), b.f.state()) {
		t.Fatal("same commands, different states")
	}
	var ea, eb bytes.Buffer
	if err := encodeSnapshot(&ea, a.f.state()); err != nil {
		t.Fatal(err)
	}
	if err := encodeSnapshot(&eb, b.f.state()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ea.Bytes(), eb.Bytes()) {
		t.Fatal("same states, different snapshot bytes")
	}
}

type memSink struct {
	bytes.Buffer
	closed, canceled bool
}

func (s *memSink) ID() string            { return "mem" }
func (s *memSink) Close() error          { s.closed = true; return nil }
func (s *memSink) Cancel() error         { s.canceled = true; return nil }
func (s *memSink) reader() io.ReadCloser { return io.NopCloser(bytes.NewReader(s.Bytes())) }

func TestSnapshotRestoreReplacesState(t *testing.T) {
	src := newHarness(t)
	script(src)
	snap, err := src.f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Persist runs concurrently with Apply: later commands must not leak in.
	want := src.f.state()
	src.must(kindCreateTopic, topicCmd("late", 7, 1, 1))
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	if !sink.closed || sink.canceled {
		t.Fatalf("sink closed=%v canceled=%v", sink.closed, sink.canceled)
	}

	dst := newHarness(t)
	dst.brokers(42)
	dst.must(kindCreateTopic, topicCmd("stale", 8, 1, 1))
	ch := dst.f.changed()
	if err := dst.f.Restore(sink.reader()); err != nil {
		t.Fatal(err)
	}
	<-ch
	got := dst.f.state()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("restored state differs:\n got %+v\nwant %+v", got, want)
	}
	if _, ok := got.Brokers[42]; ok {
		t.Fatal("Restore merged instead of replacing: broker 42 survived")
	}
	if _, ok := got.TopicByID(id(8)); ok {
		t.Fatal("Restore merged instead of replacing: topic stale survived")
	}

	// The restored FSM carries on exactly like the original.
	dst.index = src.index - 1
	dst.must(kindCreateTopic, topicCmd("late", 7, 1, 1))
	if !reflect.DeepEqual(dst.f.state(), src.f.state()) {
		t.Fatal("restored FSM diverged on the next command")
	}
}

func TestRestoreRejectsDamage(t *testing.T) {
	h := newHarness(t)
	script(h)
	var good bytes.Buffer
	if err := encodeSnapshot(&good, h.f.state()); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"truncated":      good.String()[:good.Len()/2],
		"newer format":   strings.Replace(good.String(), `"Format":1`, `"Format":2`, 1),
		"duplicate name": `{"Format":1,"Topics":[{"Name":"a","ID":[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"Partitions":[{"Index":0,"Replicas":[1]}]},{"Name":"a","ID":[2,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"Partitions":[{"Index":0,"Replicas":[1]}]}]}`,
		"no partitions":  `{"Format":1,"Topics":[{"Name":"a","ID":[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"Partitions":[]}]}`,
		"zero id":        `{"Format":1,"Topics":[{"Name":"a","Partitions":[{"Index":0,"Replicas":[1]}]}]}`,
		"null topic":     `{"Format":1,"Topics":[null]}`,
	}
	for name, data := range cases {
		before := h.f.state()
		err := h.f.Restore(io.NopCloser(strings.NewReader(data)))
		if err == nil {
			t.Errorf("%s: Restore succeeded", name)
		}
		if h.f.state() != before {
			t.Errorf("%s: failed Restore changed state", name)
		}
	}
}
