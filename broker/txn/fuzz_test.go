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
