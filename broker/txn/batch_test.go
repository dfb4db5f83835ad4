package txn

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"

	"strata/segment"
)

// at returns a copy of batch with base offset base (outside the CRC).
func at(base int64, batch []byte) []byte {
	out := append([]byte(nil), batch...)
	binary.BigEndian.PutUint64(out, uint64(base))
	return out
}

// withAttrs returns a copy of batch with attributes attrs and its CRC
// recomputed.
func withAttrs(attrs uint16, batch []byte) []byte {
	out := append([]byte(nil), batch...)
	binary.BigEndian.PutUint16(out[21:], attrs)
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}

// withRecordCount returns a copy of batch claiming n records, CRC
// recomputed.
func withRecordCount(n uint32, batch []byte) []byte {
	out := append([]byte(nil), batch...)
	binary.BigEndian.PutUint32(out[57:], n)
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}

func concat(bs ...[]byte) []byte {
	var out []byte
	for _, b := range bs {
		out = append(out, b...)
	}
	return out
}

// TestEncodeBatch: the batch is one the log stores as it is (CRC and
// lengths check), a single record with no producer, the leader epoch and
// offset left for the log to stamp.
func TestEncodeBatch(t *testing.T) {
	for _, r := range []Record{
		{Key: EncodeKey("payments-1"), Value: EncodeValue(ongoingMeta())},
		{Key: EncodeKey("gone")}, // tombstone
		{Key: []byte{}, Value: []byte{}},
	} {
		b := EncodeBatch(r, 1700000000123)
		h, err := segment.ParseBatchHeader(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.Size() != len(b) || !h.CRCMatches(b) {
			t.Fatalf("batch of %d bytes: size %d, CRC matches %v", len(b), h.Size(), h.CRCMatches(b))
		}
		want := segment.BatchHeader{
			Length: h.Length, CRC: h.CRC, Magic: 2, LeaderEpoch: -1,
			FirstTimestamp: 1700000000123, MaxTimestamp: 1700000000123,
			ProducerID: -1, ProducerEpoch: -1, BaseSequence: -1, NumRecords: 1,
		}
		if h != want {
			t.Fatalf("header %+v, want %+v", h, want)
		}
		var n int
		err = segment.ForEachRecord(b, func(rec *segment.Record) error {
			n++
			if string(rec.Key) != string(r.Key) || rec.Tombstone != (r.Value == nil) || rec.Timestamp != 1700000000123 {
				t.Errorf("record %+v, want key %q tombstone %v", rec, r.Key, r.Value == nil)
			}
			return nil
		})
		if err != nil || n != 1 {
			t.Fatalf("ForEachRecord: %d records, %v", n, err)
		}
	}
}

func TestReadBatches(t *testing.T) {
	a := Record{Key: EncodeKey("a"), Value: EncodeValue(ongoingMeta())}
	b := Record{Key: EncodeKey("b"), Value: []byte("v")}
	gone := Record{Key: EncodeKey("gone")}
	ba := at(5, EncodeBatch(a, 1))
	bb := at(6, EncodeBatch(b, 2))
	bgone := at(7, EncodeBatch(gone, 3))
	badMagic := append([]byte(nil), ba...)
	badMagic[16] = 1
	badLength := at(6, EncodeBatch(b, 2))
	// The record's varint length (right after the 61-byte header) claims
	// more bytes than the batch holds.
	badLength[61] = 0x7e
	badLength = withAttrs(0, badLength)

	for _, tc := range []struct {
		name     string
		buf      []byte
		want     []Record
		wantNext int64
		wantErr  error // errors.Is target; errAny for any error
	}{
		{name: "empty", buf: nil, wantNext: -1},
		{name: "shorter than a header", buf: ba[:60], wantNext: -1},
		{name: "one", buf: ba, want: []Record{a}, wantNext: 6},
		{name: "three with a tombstone", buf: concat(ba, bb, bgone), want: []Record{a, b, gone}, wantNext: 8},
		{name: "last cut short", buf: concat(ba, bb[:len(bb)-1]), want: []Record{a}, wantNext: 6},
		{name: "last header cut short", buf: concat(ba, bb[:61]), want: []Record{a}, wantNext: 6},
		{name: "control batch skipped", buf: concat(withAttrs(0x20, ba), bb), want: []Record{b}, wantNext: 7},
		{name: "empty batch skipped", buf: concat(withRecordCount(0, ba), bb), want: []Record{b}, wantNext: 7},
		{name: "compressed", buf: concat(ba, withAttrs(1, bb)), want: []Record{a}, wantNext: 7, wantErr: errAny},
		{name: "magic 1", buf: concat(bb, badMagic), want: []Record{b}, wantNext: 7, wantErr: segment.ErrUnsupportedMagic},
		{name: "record length past the batch", buf: badLength, wantNext: 7, wantErr: segment.ErrCorruptMessage},
		{name: "fewer records than counted", buf: withRecordCount(2, bb), want: []Record{b}, wantNext: 7, wantErr: segment.ErrCorruptMessage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, next, err := ReadBatches(tc.buf, nil)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("error %v", err)
			case tc.wantErr == errAny && err == nil, tc.wantErr != nil && tc.wantErr != errAny && !errors.Is(err, tc.wantErr):
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if next != tc.wantNext {
				t.Errorf("next %d, want %d", next, tc.wantNext)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("records %q, want %q", got, tc.want)
			}
		})
	}
}

var errAny = errors.New("any error")

// TestReadBatchesAppendsAndCopies: records are appended after those given,
// and do not alias the buffer, which the loader reuses for the next read.
func TestReadBatchesAppendsAndCopies(t *testing.T) {
	first := Record{Key: []byte("k0"), Value: []byte("v0")}
	buf := EncodeBatch(Record{Key: []byte("k1"), Value: []byte("v1")}, 0)
	got, _, err := ReadBatches(buf, []Record{first})
	if err != nil {
		t.Fatal(err)
	}
	for i := range buf {
		buf[i] = 0
	}
	want := []Record{first, {Key: []byte("k1"), Value: []byte("v1")}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("records %q, want %q", got, want)
	}
}
