package meta

import (
	"bytes"
	"reflect"
	"testing"
)

// fuzzBase is a state with brokers in every condition and a few topics,
// for commands to act on.
func fuzzBase(t testing.TB) *State {
	f := newFSM()
	var index uint64
	for _, c := range []struct {
		k kind
		p any
	}{
		{kindRegisterBroker, registerBrokerCmd{Broker{ID: 1, Rack: "a", Incarnation: "x"}}},
		{kindRegisterBroker, registerBrokerCmd{Broker{ID: 2, Rack: "b", Incarnation: "x"}}},
		{kindRegisterBroker, registerBrokerCmd{Broker{ID: 3, Rack: "a", Incarnation: "x"}}},
		{kindRegisterBroker, registerBrokerCmd{Broker{ID: 4, Rack: "b", Incarnation: "x"}}},
		{kindCreateTopic, createTopicCmd{Name: "t", ID: id(1), Partitions: 4, ReplicationFactor: 3}},
		{kindCreateTopic, createTopicCmd{Name: "u", ID: id(2), Partitions: 2, ReplicationFactor: 1, Configs: map[string]string{configUncleanElection: "true"}}},
		{kindFenceBroker, brokerEpochCmd{ID: 4, Epoch: 4}},
	} {
		data, err := encodeCommand(c.k, c.p)
		if err != nil {
			t.Fatal(err)
		}
		index++
		if res := f.apply(index, data); res.err != nil {
			t.Fatal(res.err)
		}
	}
	return f.state()
}

// Commands come from the raft log: whatever bytes are there, Apply must
// not panic, a refused command changes nothing, and an accepted one leaves
// a state that survives a snapshot.
func FuzzApplyCommand(f *testing.F) {
	seeds := []struct {
		k kind
		p any
	}{
		{kindRegisterBroker, registerBrokerCmd{Broker{ID: 4, Incarnation: "y"}}},
		{kindFenceBroker, brokerEpochCmd{ID: 1, Epoch: 1}},
		{kindUnfenceBroker, brokerEpochCmd{ID: 4, Epoch: 4}},
		{kindCreatePartitions, createPartitionsCmd{Name: "t", Count: 9}},
		{kindAlterConfigs, alterConfigsCmd{Name: "u", Delete: []string{configUncleanElection}}},
		{kindAlterPartition, alterPartitionCmd{Topic: "t", BrokerID: 1, BrokerEpoch: 1, ISR: []int32{1, 2}}},
		{kindControlledShutdown, brokerEpochCmd{ID: 2, Epoch: 2}},
		{kindElectLeaders, electLeadersCmd{All: true}},
		{kindElectLeaders, electLeadersCmd{Unclean: true, Partitions: []TopicPartition{{"u", 0}, {"t", 9}}}},
	}
	for _, s := range seeds {
		data, err := encodeCommand(s.k, s.p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	base := fuzzBase(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		next, res := applyCommand(base, 100, data)
		if res.err != nil && next != nil {
			t.Fatalf("refused command (%v) returned a state", res.err)
		}
		if next == nil {
			return
		}
		next.Index = 100
		var buf bytes.Buffer
		if err := encodeSnapshot(&buf, next); err != nil {
			t.Fatal(err)
		}
		got, err := decodeSnapshot(&buf)
		if err != nil {
			t.Fatalf("state after %q does not survive a snapshot: %v", data, err)
		}
		if !reflect.DeepEqual(got, next) {
			t.Fatalf("state after %q changes in a snapshot round trip", data)
		}
	})
}

// A snapshot from disk or a peer: decoding never panics, and what decodes
// re-encodes to a state that decodes the same.
func FuzzDecodeSnapshot(f *testing.F) {
	var buf bytes.Buffer
	if err := encodeSnapshot(&buf, fuzzBase(f)); err != nil {
		f.Fatal(err)
	}
	f.Add(buf.Bytes())
	f.Add([]byte(`{"Format":1,"Brokers":[{"ID":1}],"Topics":[{"Name":"t","ID":[1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0],"Partitions":[{"Index":0,"Replicas":[1],"Leader":1}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := decodeSnapshot(bytes.NewReader(data))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := encodeSnapshot(&out, s); err != nil {
			t.Fatal(err)
		}
		again, err := decodeSnapshot(&out)
		if err != nil {
			t.Fatalf("re-encoded snapshot does not decode: %v", err)
		}
		if !reflect.DeepEqual(again, s) {
			t.Fatal("snapshot round trip changes the state")
		}
	})
}
