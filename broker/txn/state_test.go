package txn

import "testing"

// TestTransitionTable pins the validity table of Kafka's TransactionMetadata
// (prepareTransitionTo), including KIP-890 part 2's aborts of a transaction
// that never added a partition (Empty and Complete* → PrepareAbort).
func TestTransitionTable(t *testing.T) {
	allowed := map[State][]State{
		Empty:             {Empty, CompleteCommit, CompleteAbort},
		Ongoing:           {Ongoing, Empty, CompleteCommit, CompleteAbort},
		PrepareCommit:     {Ongoing},
		PrepareAbort:      {Ongoing, PrepareEpochFence, Empty, CompleteCommit, CompleteAbort},
		CompleteCommit:    {PrepareCommit},
		CompleteAbort:     {PrepareAbort},
		Dead:              {Empty, CompleteCommit, CompleteAbort},
		PrepareEpochFence: {Ongoing},
	}
	for to := Empty; to <= PrepareEpochFence; to++ {
		for from := Empty; from <= PrepareEpochFence; from++ {
			want := false
			for _, s := range allowed[to] {
				want = want || s == from
			}
			if got := CanTransition(from, to); got != want {
				t.Errorf("CanTransition(%s, %s) = %v, want %v", from, to, got, want)
			}
		}
	}
	if CanTransition(State(9), Empty) || CanTransition(Empty, State(-1)) {
		t.Error("a state outside Kafka's ids is a valid transition")
	}
}

// TestStateNames: DescribeTransactions and ListTransactions carry the state
// by name, and the log by id; both must be Kafka's.
func TestStateNames(t *testing.T) {
	names := []string{"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"}
	for id, name := range names {
		s := State(id)
		if s.String() != name {
			t.Errorf("State(%d) = %q, want %q", id, s, name)
		}
		if p, ok := ParseState(name); !ok || p != s {
			t.Errorf("ParseState(%q) = %v, %v", name, p, ok)
		}
	}
	if _, ok := ParseState("ongoing"); ok {
		t.Error("ParseState accepts a name Kafka does not use")
	}
	if s := State(8).String(); s != "Unknown(8)" {
		t.Errorf("State(8) = %q", s)
	}
}

func tp(topic string, p int32) TopicPartition { return TopicPartition{Topic: topic, Partition: p} }

// TestCheckTransition pins completeTransitionTo's guards: what a prepared
// transition may change for each target state.
func TestCheckTransition(t *testing.T) {
	base := Metadata{
		TransactionalID: "t", ProducerID: 7, LastProducerID: -1, NextProducerID: -1,
		ProducerEpoch: 3, LastProducerEpoch: -1, TimeoutMs: 60000, State: Empty,
		StartTime: -1, LastUpdate: 100,
	}
	ongoing := base
	ongoing.State, ongoing.StartTime, ongoing.Partitions = Ongoing, 100, []TopicPartition{tp("a", 0)}
	with := func(m Metadata, f func(*Metadata)) Metadata { f(&m); return m }
	tests := []struct {
		name     string
		from, to Metadata
		ok       bool
	}{
		{"init bumps epoch", base, with(base, func(m *Metadata) { m.ProducerEpoch = 4 }), true},
		{"init keeps epoch", base, base, true},
		{"init skips epochs", base, with(base, func(m *Metadata) { m.ProducerEpoch = 5 }), false},
		{"init new id epoch 0", base, with(base, func(m *Metadata) { m.ProducerID, m.ProducerEpoch = 8, 0 }), true},
		{"init new id epoch 1", base, with(base, func(m *Metadata) { m.ProducerID, m.ProducerEpoch = 8, 1 }), false},
		{"empty with partitions", base, with(base, func(m *Metadata) { m.Partitions = []TopicPartition{tp("a", 0)} }), false},
		{"add partitions", base, with(ongoing, func(m *Metadata) { m.LastUpdate = 200 }), true},
		{"add drops a partition", with(ongoing, func(m *Metadata) { m.Partitions = []TopicPartition{tp("a", 0), tp("b", 1)} }), ongoing, false},
		{"add changes epoch", base, with(ongoing, func(m *Metadata) { m.ProducerEpoch = 4 }), false},
		{"add changes timeout", base, with(ongoing, func(m *Metadata) { m.TimeoutMs = 1 }), false},
		{"commit", ongoing, with(ongoing, func(m *Metadata) { m.State = PrepareCommit }), true},
		{"commit v5 bumps epoch", ongoing, with(ongoing, func(m *Metadata) { m.State, m.ProducerEpoch, m.LastProducerEpoch = PrepareCommit, 4, 3 }), true},
		{"fence bumps by two", ongoing, with(ongoing, func(m *Metadata) { m.State, m.ProducerEpoch = PrepareAbort, 5 }), true},
		{"commit bumps by two", ongoing, with(ongoing, func(m *Metadata) { m.State, m.ProducerEpoch = PrepareCommit, 5 }), false},
		{"abort bumps by three", ongoing, with(ongoing, func(m *Metadata) { m.State, m.ProducerEpoch = PrepareAbort, 6 }), false},
		{"commit changes partitions", ongoing, with(ongoing, func(m *Metadata) { m.State, m.Partitions = PrepareCommit, nil }), false},
		{"commit from empty", base, with(base, func(m *Metadata) { m.State = PrepareCommit }), false},
		{"time goes back", ongoing, with(ongoing, func(m *Metadata) { m.State, m.LastUpdate = PrepareAbort, 99 }), false},
		{"complete", with(ongoing, func(m *Metadata) { m.State = PrepareCommit }), with(ongoing, func(m *Metadata) { m.State, m.Partitions = CompleteCommit, nil }), true},
		{"complete without start", with(ongoing, func(m *Metadata) { m.State = PrepareAbort }), with(ongoing, func(m *Metadata) { m.State, m.Partitions, m.StartTime = CompleteAbort, nil, -1 }), false},
		{"complete keeps partitions", with(ongoing, func(m *Metadata) { m.State = PrepareCommit }), with(ongoing, func(m *Metadata) { m.State = CompleteCommit }), false},
		{"complete rotates id", with(ongoing, func(m *Metadata) { m.State, m.ProducerEpoch, m.NextProducerID = PrepareCommit, 32767, 9 }), with(ongoing, func(m *Metadata) { m.State, m.Partitions, m.ProducerID, m.ProducerEpoch = CompleteCommit, nil, 9, 0 }), true},
		{"complete to another id", with(ongoing, func(m *Metadata) { m.State = PrepareCommit }), with(ongoing, func(m *Metadata) { m.State, m.Partitions, m.ProducerID, m.ProducerEpoch = CompleteCommit, nil, 9, 0 }), false},
		{"fence is never completed", ongoing, with(ongoing, func(m *Metadata) { m.State, m.ProducerEpoch = PrepareEpochFence, 4 }), false},
		{"dead", base, with(base, func(m *Metadata) { m.State = Dead }), true},
		{"ongoing to empty", ongoing, with(base, func(m *Metadata) { m.ProducerEpoch = 4 }), false},
		{"other id", base, with(base, func(m *Metadata) { m.TransactionalID = "u" }), false},
	}
	for _, tt := range tests {
		err := checkTransition(tt.from, tt.to)
		if (err == nil) != tt.ok {
			t.Errorf("%s: checkTransition = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestEpochExhausted(t *testing.T) {
	for e, want := range map[int16]bool{0: false, 32765: false, 32766: true, 32767: true} {
		if got := epochExhausted(e); got != want {
			t.Errorf("epochExhausted(%d) = %v", e, got)
		}
	}
}
