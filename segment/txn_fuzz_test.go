package segment

import (
	"bytes"
	"errors"
	"testing"
)

// Decoding a .txnindex never panics, and what it returns is the valid
// prefix of the file: re-encoded, it is the file's first bytes, and it
// decodes to itself.
func FuzzDecodeTxnIndex(f *testing.F) {
	var good []byte
	good = appendTxnEntry(good, AbortedTxn{ProducerID: 1, FirstOffset: 0, LastOffset: 4, LastStableOffset: 5})
	good = appendTxnEntry(good, AbortedTxn{ProducerID: 9, FirstOffset: 7, LastOffset: 20, LastStableOffset: 3})
	f.Add(good)
	f.Add(good[:len(good)-5])
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, txnEntrySize))
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, err := DecodeTxnIndex(b)
		if err != nil && !errors.Is(err, errBadTxnIndex) {
			t.Fatalf("unclassified error: %v", err)
		}
		var again []byte
		for _, a := range entries {
			again = appendTxnEntry(again, a)
		}
		if !bytes.HasPrefix(b, again) {
			t.Fatalf("decoded entries are not a prefix of the file")
		}
		if (err == nil) != (len(again) == len(b)) {
			t.Fatalf("err %v with %d of %d bytes decoded", err, len(again), len(b))
		}
		re, rerr := DecodeTxnIndex(again)
		if rerr != nil || len(re) != len(entries) {
			t.Fatalf("the valid prefix does not re-parse: %v", rerr)
		}
	})
}

// A stored control batch yields a marker or a classified error, never a
// panic; the batches AppendMarker builds decode to what was asked.
func FuzzTxnMarker(f *testing.F) {
	f.Add(encodeMarkerBatch(5, 2, TxnMarker{Commit: true, CoordinatorEpoch: 7}, 1000), int64(5), int16(2), true, int32(7))
	f.Add(encodeMarkerBatch(1, 0, TxnMarker{}, 0), int64(1), int16(0), false, int32(0))
	f.Add(encodeBatch(f, batchSpec{values: values(1, 6, 0), attrs: attrControl | attrTransactional, keyPrefix: "\x00\x00\x00\x01", idem: true, pid: 3}), int64(0), int16(0), false, int32(-1))
	f.Add([]byte{}, int64(0), int16(0), false, int32(0))
	f.Fuzz(func(t *testing.T, b []byte, pid int64, epoch int16, commit bool, coordEpoch int32) {
		if h, err := checkStoredBatch(b); err == nil {
			if _, _, err := markerOf(&h, b); err != nil && !errors.Is(err, ErrCorruptMessage) && !errors.Is(err, ErrInvalidRecord) {
				t.Fatalf("unclassified error: %v", err)
			}
		}
		want := TxnMarker{Commit: commit, CoordinatorEpoch: coordEpoch}
		mb := encodeMarkerBatch(pid, epoch, want, 1)
		h, err := checkStoredBatch(mb)
		if err != nil {
			t.Fatalf("AppendMarker's batch does not check: %v", err)
		}
		got, ok, err := markerOf(&h, mb)
		if err != nil || !ok || got != want || h.ProducerID != pid || h.ProducerEpoch != epoch {
			t.Fatalf("marker %+v ok=%v err=%v, header %+v; want %+v", got, ok, err, h, want)
		}
	})
}
