package txn

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"testing"
)

// golden builds record bytes field by field from Kafka's schemas
// (TransactionLogKey.json, TransactionLogValue.json), independently of the
// encoder under test.
type golden []byte

func (g golden) i8(v int8) golden   { return append(g, byte(v)) }
func (g golden) i16(v int16) golden { return binary.BigEndian.AppendUint16(g, uint16(v)) }
func (g golden) i32(v int32) golden { return binary.BigEndian.AppendUint32(g, uint32(v)) }
func (g golden) i64(v int64) golden { return binary.BigEndian.AppendUint64(g, uint64(v)) }
func (g golden) raw(b ...byte) golden {
	return append(g, b...)
}

// str is a non-flexible STRING: int16 length, bytes.
func (g golden) str(s string) golden { return append(g.i16(int16(len(s))), s...) }

// cstr is a COMPACT_STRING: uvarint length+1 (every test string is short).
func (g golden) cstr(s string) golden { return append(g.raw(byte(len(s)+1)), s...) }

func TestKeyGolden(t *testing.T) {
	want := golden{}.i16(0).str("payments-1")
	got := EncodeKey("payments-1")
	if !bytes.Equal(got, want) {
		t.Fatalf("EncodeKey = % x, want % x", got, want)
	}
	id, err := DecodeKey(want)
	if err != nil || id != "payments-1" {
		t.Fatalf("DecodeKey = %q, %v", id, err)
	}
	// Version 1 of the key does not exist in Kafka: keys of other record
	// kinds a future Kafka may add must be told apart, not misread.
	if _, err := DecodeKey(golden{}.i16(1).str("x")); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("DecodeKey(version 1) = %v, want ErrUnknownKey", err)
	}
	for _, bad := range [][]byte{nil, {0}, golden{}.i16(0).i16(5).raw('a')} {
		if _, err := DecodeKey(bad); err == nil {
			t.Errorf("DecodeKey(% x) accepted", bad)
		}
	}
}

func ongoingMeta() Metadata {
	return Metadata{
		TransactionalID: "tx", ProducerID: 4000, LastProducerID: 3999, NextProducerID: -1,
		ProducerEpoch: 5, LastProducerEpoch: -1, TimeoutMs: 60000, State: Ongoing,
		Partitions: []TopicPartition{tp("a", 0), tp("a", 2), tp("bb", 1)},
		StartTime:  1700000000000, LastUpdate: 1700000000500, ClientTxnVersion: TV2,
	}
}

func TestValueGoldenV1(t *testing.T) {
	m := ongoingMeta()
	want := golden{}.i16(1).i64(4000).i16(5).i32(60000).i8(1).
		raw(3).cstr("a").raw(3).i32(0).i32(2).raw(0).cstr("bb").raw(2).i32(1).raw(0).
		i64(1700000000500).i64(1700000000000).
		raw(2).              // two tagged fields
		raw(0, 8).i64(3999). // tag 0 PreviousProducerId
		raw(2, 2).i16(2)     // tag 2 ClientTransactionVersion
	got := EncodeValue(m)
	if !bytes.Equal(got, want) {
		t.Fatalf("EncodeValue =\n% x\nwant\n% x", got, want)
	}
	back, err := DecodeValue("tx", want)
	if err != nil {
		t.Fatal(err)
	}
	if !sameMeta(back, m) {
		t.Fatalf("DecodeValue = %+v, want %+v", back, m)
	}
}

// TestValueGoldenEmpty: Kafka writes an Empty transaction's partitions as a
// null array, and the next producer id of a KIP-890 rotation as tag 1.
func TestValueGoldenEmpty(t *testing.T) {
	m := Metadata{TransactionalID: "tx", ProducerID: 7, LastProducerID: -1, NextProducerID: 8,
		ProducerEpoch: 0, LastProducerEpoch: -1, TimeoutMs: 1000, State: Empty, StartTime: -1, LastUpdate: 42}
	want := golden{}.i16(1).i64(7).i16(0).i32(1000).i8(0).raw(0).i64(42).i64(-1).
		raw(1).raw(1, 8).i64(8)
	got := EncodeValue(m)
	if !bytes.Equal(got, want) {
		t.Fatalf("EncodeValue =\n% x\nwant\n% x", got, want)
	}
	back, err := DecodeValue("tx", want)
	if err != nil || !sameMeta(back, m) {
		t.Fatalf("DecodeValue = %+v, %v", back, err)
	}
}

// TestValueGoldenV0: records written by Kafka before 4.0 (and by a 4.x
// coordinator at transaction version 0) have no tagged fields.
func TestValueGoldenV0(t *testing.T) {
	v0 := golden{}.i16(0).i64(4000).i16(5).i32(60000).i8(2).
		i32(2).str("bb").i32(1).i32(1).str("a").i32(2).i32(2).i32(0).
		i64(1700000000500).i64(1700000000000)
	m, err := DecodeValue("tx", v0)
	if err != nil {
		t.Fatal(err)
	}
	want := ongoingMeta()
	want.State, want.LastProducerID, want.ClientTxnVersion = PrepareCommit, -1, TV0
	if !sameMeta(m, want) {
		t.Fatalf("DecodeValue(v0) = %+v, want %+v", m, want)
	}
	if got := encodeValue(m, 0); !bytes.Equal(got, golden{}.i16(0).i64(4000).i16(5).i32(60000).i8(2).
		i32(2).str("a").i32(2).i32(0).i32(2).str("bb").i32(1).i32(1).
		i64(1700000000500).i64(1700000000000)) {
		t.Fatalf("encodeValue(v0) = % x", got)
	}
}

func TestValueRejects(t *testing.T) {
	good := EncodeValue(ongoingMeta())
	badState := bytes.Clone(good)
	badState[2+8+2+4] = 9
	emptyWithParts := bytes.Clone(good)
	emptyWithParts[2+8+2+4] = byte(Empty)
	v2 := bytes.Clone(good)
	v2[1] = 2
	for name, b := range map[string][]byte{
		"truncated":        good[:len(good)-1],
		"unknown state":    badState,
		"empty with parts": emptyWithParts,
		"version 2":        v2,
		"nothing":          nil,
	} {
		if m, err := DecodeValue("tx", b); err == nil {
			t.Errorf("%s: DecodeValue accepted: %+v", name, m)
		}
	}
}

func TestTombstone(t *testing.T) {
	r := Tombstone("tx")
	if r.Value != nil || !bytes.Equal(r.Key, EncodeKey("tx")) {
		t.Fatalf("Tombstone = %+v", r)
	}
}

// sameMeta compares what a record carries (the last epoch is not in it).
func sameMeta(a, b Metadata) bool {
	if !slices.Equal(a.Partitions, b.Partitions) {
		return false
	}
	a.Partitions, b.Partitions = nil, nil
	a.LastProducerEpoch, b.LastProducerEpoch = 0, 0
	return reflect.DeepEqual(a, b)
}
