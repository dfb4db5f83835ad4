package tier

import (
	"bytes"
	"testing"

	"strata/segment"
)

// FuzzTxnIndexPart feeds the decoder of an object's txn index part
// untrusted bytes: it never panics, and what it accepts re-encodes to the
// same bytes, every entry's marker inside the object's offsets and after
// the one before.
func FuzzTxnIndexPart(f *testing.F) {
	f.Add(segment.EncodeTxnIndex([]segment.AbortedTxn{{ProducerID: 1, FirstOffset: 5, LastOffset: 10, LastStableOffset: 11}, {ProducerID: 2, FirstOffset: 0, LastOffset: 12, LastStableOffset: 3}}), int64(0), int64(20))
	f.Add([]byte{}, int64(0), int64(0))
	f.Add(make([]byte, 34), int64(0), int64(1))
	f.Add(make([]byte, 35), int64(0), int64(1))
	f.Fuzz(func(t *testing.T, b []byte, base, last int64) {
		entries, err := parseTxnIndex(b, base, last)
		if err != nil {
			return
		}
		if got := segment.EncodeTxnIndex(entries); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded part differs:\n%x\n%x", got, b)
		}
		prev := base - 1
		for i, a := range entries {
			if a.LastOffset <= prev || a.LastOffset > last || a.FirstOffset < 0 || a.FirstOffset > a.LastOffset || a.ProducerID < 0 || a.LastStableOffset < 0 {
				t.Fatalf("entry %d %+v accepted in an object of [%d, %d]", i, a, base, last)
			}
			prev = a.LastOffset
		}
	})
}
