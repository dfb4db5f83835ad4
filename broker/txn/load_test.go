package txn

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func valueRec(m Metadata) Record {
	return Record{Key: EncodeKey(m.TransactionalID), Value: EncodeValue(m)}
}

// idsOnPartition returns n transactional ids owned by partition p.
func idsOnPartition(c *Coordinator, p int32, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		id := "tx-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if c.PartitionFor(id) == p {
			out = append(out, id)
		}
	}
	return out
}

// TestLoadRebuildsState: a coordinator that becomes the leader of a
// __transaction_state partition replays it: the last record of an id wins,
// a tombstone removes it, and transactions caught between their decision
// and their markers have their markers written again.
func TestLoadRebuildsState(t *testing.T) {
	h := newHarness(t)
	const part = 2
	ids := idsOnPartition(h.c, part, 4)
	a, b, gone, committing := ids[0], ids[1], ids[2], ids[3]
	meta := func(id string, epoch int16, s State, parts ...TopicPartition) Metadata {
		m := Metadata{TransactionalID: id, ProducerID: 500, LastProducerID: 500, NextProducerID: -1, ProducerEpoch: epoch,
			LastProducerEpoch: -1, TimeoutMs: testTimeoutMs, State: s, Partitions: parts, StartTime: -1, LastUpdate: 10}
		if s != Empty {
			m.StartTime = 5
		}
		return m
	}
	recs := []Record{
		valueRec(meta(a, 0, Empty)),
		valueRec(meta(b, 0, Empty)),
		valueRec(meta(a, 0, Ongoing, tp("x", 0))),
		valueRec(meta(gone, 3, CompleteCommit)),
		{Key: []byte{0, 9, 0, 1, 'z'}, Value: []byte("from a newer Kafka")},
		valueRec(meta(a, 0, Ongoing, tp("x", 0), tp("y", 1))),
		valueRec(meta(committing, 4, PrepareCommit, tp("z", 2), tp("z", 3))),
		Tombstone(gone),
		valueRec(meta(b, 1, Empty)),
	}
	resend, err := h.c.Load(part, 9, recs)
	if err != nil {
		t.Fatal(err)
	}
	want := []*Markers{{TransactionalID: committing, ProducerID: 500, ProducerEpoch: 4, CoordinatorEpoch: 9, Commit: true,
		Partitions: []TopicPartition{tp("z", 2), tp("z", 3)}}}
	if len(resend) != 1 || !sameMarkers(resend[0], want[0]) {
		t.Fatalf("markers to resend = %+v, want %+v", resend, want)
	}
	if s := h.state(a); s.State != Ongoing || !slices.Equal(s.Partitions, []TopicPartition{tp("x", 0), tp("y", 1)}) {
		t.Fatalf("%s loaded as %+v", a, s)
	}
	if s := h.state(b); s.ProducerEpoch != 1 {
		t.Fatalf("%s loaded at epoch %d, want the last record's 1", b, s.ProducerEpoch)
	}
	if _, err := h.c.Describe(gone); err != kerr.TransactionalIDNotFound {
		t.Fatalf("a tombstoned id is described: %v", err)
	}

	// Decisions go on from the loaded state, under the new epoch.
	wantErr(t, "add to the loaded transaction", h.add(a, 500, 0, 3, tp("x", 0)), nil)
	r, m := h.end(a, 500, 0, true, 3)
	if r.Err != nil || m.CoordinatorEpoch != 9 {
		t.Fatalf("commit after load = %+v, markers %+v", r, m)
	}
	h.written(m)
	h.written(resend[0])
	if s := h.state(committing); s.State != CompleteCommit {
		t.Fatalf("%s after its markers: %+v", committing, s)
	}
	if _, e := h.mustInit(b); e != 2 {
		t.Fatalf("InitProducerID after load gave epoch %d, want 2", e)
	}
}

// TestLoadReplaces: loading a partition again (a new leader epoch) drops
// what it held before, including ids no longer in its log, and markers of
// the old epoch can no longer complete a transaction.
func TestLoadReplaces(t *testing.T) {
	h := newHarness(t)
	const part = 1
	ids := idsOnPartition(h.c, part, 2)
	pid, epoch := h.mustInit(ids[0])
	wantErr(t, "add", h.add(ids[0], pid, epoch, 3, tp("a", 0)), nil)
	_, m := h.end(ids[0], pid, epoch, false, 3)

	other := h.state(ids[0])
	other.TransactionalID = ids[1]
	if _, err := h.c.Load(part, 4, []Record{valueRec(other)}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Describe(ids[0]); err != kerr.TransactionalIDNotFound {
		t.Fatalf("an id not in the reloaded log survived: %v", err)
	}
	if _, err := h.c.CompleteMarkers(m); err == nil {
		t.Fatal("markers of the old coordinator epoch completed a transaction")
	}
	if s := h.state(ids[1]); s.State != PrepareAbort {
		t.Fatalf("loaded %+v", s)
	}
}

// TestLoadKeepsNewerState: a second load of a partition under the epoch it
// is already loaded at (two loaders that overlapped) is refused: it read
// the log before changes the coordinator has decided and applied since.
func TestLoadKeepsNewerState(t *testing.T) {
	h := newHarness(t)
	id := idsOnPartition(h.c, 1, 1)[0]
	pid, epoch := h.mustInit(id)
	before := h.log[1]
	wantErr(t, "add", h.add(id, pid, epoch, 3, tp("a", 0)), nil)
	cepoch, _ := h.c.Loaded(1)
	if _, err := h.c.Load(1, cepoch, before); !errors.Is(err, ErrLoaded) {
		t.Fatalf("a second load at epoch %d: %v, want ErrLoaded", cepoch, err)
	}
	if s := h.state(id); s.State != Ongoing || !s.HasPartition(tp("a", 0)) {
		t.Fatalf("state after the refused load: %+v", s)
	}
	// A newer epoch (the partition moved away and back) does replace it.
	if _, err := h.c.Load(1, cepoch+1, before); err != nil {
		t.Fatal(err)
	}
	if s := h.state(id); s.State != Empty {
		t.Fatalf("state after a load at a newer epoch: %+v", s)
	}
}

func TestLoadRejectsCorruptLog(t *testing.T) {
	h := newHarness(t)
	good := valueRec(ongoingMeta())
	for name, recs := range map[string][]Record{
		"bad key":   {{Key: []byte{0, 0, 0}, Value: good.Value}},
		"bad value": {{Key: good.Key, Value: good.Value[:5]}},
	} {
		if _, err := h.c.Load(0, 1, recs); err == nil {
			t.Errorf("%s: Load accepted", name)
		}
	}
	if _, err := h.c.Load(4, 1, nil); err == nil {
		t.Error("Load of a partition beyond the partition count accepted")
	}
	// A failed load leaves what was loaded in place.
	if r := h.c.InitProducerID(context.Background(), InitProducerIDRequest{TransactionalID: idsOnPartition(h.c, 0, 1)[0], TimeoutMs: 1000, ProducerID: -1, ProducerEpoch: -1, Version: 5}); r.Err != nil {
		t.Fatalf("partition 0 after a failed load: %v", r.Err)
	}
}
