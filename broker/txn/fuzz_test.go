package txn

import (
	"bytes"
	"testing"
)

// FuzzDecodeValue: no input panics the decoder, and whatever it accepts
// re-encodes to a value that decodes to the same state.
func FuzzDecodeValue(f *testing.F) {
	f.Add(EncodeValue(ongoingMeta()))
	f.Add(encodeValue(ongoingMeta(), 0))
	m := ongoingMeta()
	m.State, m.Partitions, m.StartTime, m.NextProducerID = Empty, nil, -1, 9
	f.Add(EncodeValue(m))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeValue("id", b)
		if err != nil {
			return
		}
		for _, v := range []int16{0, 1} {
			again, err := DecodeValue("id", encodeValue(m, v))
			if err != nil {
				t.Fatalf("re-encoded v%d value does not decode: %v", v, err)
			}
			if v == 0 {
				// v0 has no tagged fields.
				m2 := m.Clone()
				m2.LastProducerID, m2.NextProducerID, m2.ClientTxnVersion = -1, -1, 0
				if !sameMeta(again, m2) {
					t.Fatalf("v0 round trip: %+v != %+v", again, m2)
				}
				continue
			}
			if !sameMeta(again, m) {
				t.Fatalf("v1 round trip: %+v != %+v", again, m)
			}
		}
	})
}

// FuzzDecodeKey: no input panics, and an accepted key re-encodes to the
// same bytes.
func FuzzDecodeKey(f *testing.F) {
	f.Add(EncodeKey("payments-1"))
	f.Add(EncodeKey(""))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := DecodeKey(b)
		if err != nil {
			return
		}
		if got := EncodeKey(id); !bytes.Equal(got, b) {
			t.Fatalf("EncodeKey(DecodeKey(% x)) = % x", b, got)
		}
	})
}

// FuzzReadBatches: no input panics the reader of __transaction_state's
// batches (a loader reads whatever the log holds), and whatever records it
// returns re-encode, a batch each, to bytes it reads back the same.
func FuzzReadBatches(f *testing.F) {
	one := EncodeBatch(Record{Key: EncodeKey("payments-1"), Value: EncodeValue(ongoingMeta())}, 1700000000000)
	gone := EncodeBatch(Record{Key: EncodeKey("gone")}, 1700000000001)
	f.Add(one)
	f.Add(append(append([]byte(nil), one...), gone...))
	f.Add(withAttrs(0x20, one))
	f.Add(withRecordCount(2, one))
	f.Add(one[:len(one)-1])
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, _, err := ReadBatches(b, nil)
		if err != nil {
			return
		}
		var again []byte
		for i, r := range recs {
			again = append(again, at(int64(i), EncodeBatch(r, 0))...)
		}
		back, next, err := ReadBatches(again, nil)
		if err != nil {
			t.Fatalf("re-encoded records do not read: %v", err)
		}
		if len(recs) > 0 && next != int64(len(recs)) {
			t.Fatalf("re-encoded %d records end at %d", len(recs), next)
		}
		if len(back) != len(recs) {
			t.Fatalf("read back %d records of %d", len(back), len(recs))
		}
		for i := range recs {
			if !bytes.Equal(back[i].Key, recs[i].Key) || !bytes.Equal(back[i].Value, recs[i].Value) || (back[i].Value == nil) != (recs[i].Value == nil) {
				t.Fatalf("record %d read back as %q, was %q", i, back[i], recs[i])
			}
		}
	})
}
