package segment

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// testRec is one record of a batch built by compactedBatch.
type testRec struct {
	off   int64  // offset delta
	ts    int64  // timestamp delta
	key   []byte // nil: null key
	value []byte // nil: tombstone
}

// keyed returns n records with offset deltas 0..n-1, keys k0..k{n-1},
// values v0..., and timestamp deltas that do not grow with the offset.
func keyed(n int) []testRec {
	recs := make([]testRec, n)
	for i := range recs {
		recs[i] = testRec{off: int64(i), ts: int64((i * 7) % 5), key: fmt.Appendf(nil, "k%d", i), value: fmt.Appendf(nil, "v%d", i)}
	}
	return recs
}

// compactedBatch encodes recs as one batch shaped by spec (codec,
// attributes, producer fields, firstTs, lastDelta), stamped at base with
// leader epoch; offset deltas need not be contiguous.
func compactedBatch(t testing.TB, spec batchSpec, base int64, epoch int32, recs []testRec) []byte {
	t.Helper()
	var raw []byte
	maxTs, last := int64(-1), int32(-1)
	for _, r := range recs {
		raw = appendRecord(raw, r.ts, r.off, r.key, r.value, spec.withHeader)
		maxTs = max(maxTs, spec.firstTs+r.ts)
		last = max(last, int32(r.off))
	}
	spec.values = nil
	spec.payload = compressFor(t, spec.codec, spec.xerial, raw)
	if spec.payload == nil {
		spec.payload = []byte{}
	}
	spec.count = int32(len(recs))
	if spec.lastDelta == nil {
		spec.lastDelta = &last
	}
	if spec.maxTs == nil {
		spec.maxTs = &maxTs
	}
	return stamped(encodeBatch(t, spec), base, epoch)
}

// clientRecords decodes batches as a franz-go consumer does, control
// records included.
func clientRecords(t testing.TB, batches []byte) []*kgo.Record {
	t.Helper()
	fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{KeepControlRecords: true, Topic: "t"},
		&kmsg.FetchResponseTopicPartition{HighWatermark: math.MaxInt64, LastStableOffset: math.MaxInt64, RecordBatches: batches},
		kgo.DefaultDecompressor(), nil)
	if fp.Err != nil {
		t.Fatalf("client decoding: %v", fp.Err)
	}
	return fp.Records
}

// sameRecords fails unless got are want's records at the same offsets,
// with the same timestamps, keys, values and headers.
func sameRecords(t testing.TB, got, want []*kgo.Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("client sees %d records, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Offset != w.Offset || !g.Timestamp.Equal(w.Timestamp) || !bytes.Equal(g.Key, w.Key) ||
			!bytes.Equal(g.Value, w.Value) || (g.Value == nil) != (w.Value == nil) || len(g.Headers) != len(w.Headers) ||
			g.ProducerID != w.ProducerID || g.ProducerEpoch != w.ProducerEpoch || g.LeaderEpoch != w.LeaderEpoch {
			t.Fatalf("record %d: got offset %d ts %v key %q value %q pid %d/%d epoch %d, want offset %d ts %v key %q value %q pid %d/%d epoch %d",
				i, g.Offset, g.Timestamp.UnixMilli(), g.Key, g.Value, g.ProducerID, g.ProducerEpoch, g.LeaderEpoch,
				w.Offset, w.Timestamp.UnixMilli(), w.Key, w.Value, w.ProducerID, w.ProducerEpoch, w.LeaderEpoch)
		}
	}
}

// keepWhere returns the records of want at the offsets keep accepts.
func keepWhere(want []*kgo.Record, keep func(int64) bool) []*kgo.Record {
	var out []*kgo.Record
	for _, r := range want {
		if keep(r.Offset) {
			out = append(out, r)
		}
	}
	return out
}

func keepOffsets(offs ...int64) func(*Record) bool {
	return func(r *Record) bool {
		for _, o := range offs {
			if r.Offset == o {
				return true
			}
		}
		return false
	}
}

func TestFilterBatchAllKeptIsByteIdentical(t *testing.T) {
	b := compactedBatch(t, batchSpec{firstTs: 1_000, idem: true, pid: 9, pepoch: 2, seq: 40, withHeader: true}, 100, 3, keyed(5))
	dst := []byte("prefix")
	out, res, err := FilterBatch(dst, b, func(*Record) bool { return true }, FilterOptions{DeleteHorizonMs: 5_000})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, append([]byte("prefix"), b...)) {
		t.Fatal("a batch whose records are all kept was not appended byte for byte")
	}
	if res != (FilterResult{Kept: 5}) {
		t.Fatalf("result %+v", res)
	}
}

// Offsets never change and compacted logs have gaps: the kept records
// keep their offsets and timestamps as a consumer reads them.
func TestFilterBatchRemovesRecordsKeepingOffsetsAndTimestamps(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec batchSpec
	}{
		{"plain", batchSpec{firstTs: 1_700_000_000_000, withHeader: true}},
		{"idempotent", batchSpec{firstTs: 1_700_000_000_000, idem: true, pid: 77, pepoch: 4, seq: 1_000}},
		{"transactional", batchSpec{firstTs: 5, idem: true, pid: 78, pepoch: 1, seq: 0, attrs: attrTransactional}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := compactedBatch(t, tc.spec, 1_000, 12, keyed(6))
			orig := clientRecords(t, b)
			keepAt := map[int64]bool{1_001: true, 1_002: true, 1_004: true}
			out, res, err := FilterBatch(nil, b, func(r *Record) bool { return keepAt[r.Offset] }, FilterOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res != (FilterResult{Kept: 3, Removed: 3, Rewritten: true}) {
				t.Fatalf("result %+v", res)
			}
			sameRecords(t, clientRecords(t, out), keepWhere(orig, func(o int64) bool { return keepAt[o] }))

			h, err := checkStoredBatch(out)
			if err != nil {
				t.Fatalf("rewritten batch does not check: %v", err)
			}
			oh := decodeHeader(b)
			if h.BaseOffset != oh.BaseOffset || h.LastOffsetDelta != oh.LastOffsetDelta || h.LeaderEpoch != oh.LeaderEpoch ||
				h.Attributes != oh.Attributes || h.ProducerID != oh.ProducerID || h.ProducerEpoch != oh.ProducerEpoch ||
				h.BaseSequence != oh.BaseSequence || h.NumRecords != 3 {
				t.Fatalf("header %+v, from %+v", h, oh)
			}
			var wantMax int64 = -1
			for _, r := range keepWhere(orig, func(o int64) bool { return keepAt[o] }) {
				wantMax = max(wantMax, r.Timestamp.UnixMilli())
			}
			if first := orig[1].Timestamp.UnixMilli(); h.FirstTimestamp != first || h.MaxTimestamp != wantMax {
				t.Fatalf("timestamps first %d max %d, want %d and %d", h.FirstTimestamp, h.MaxTimestamp, first, wantMax)
			}
			// The last offset of the batch stays where it was, so the
			// next batch still follows it.
			if h.LastOffset() != oh.LastOffset() {
				t.Fatalf("last offset %d, want %d", h.LastOffset(), oh.LastOffset())
			}
		})
	}
}

func TestFilterBatchNothingKept(t *testing.T) {
	spec := batchSpec{firstTs: 2_000, idem: true, pid: 5, pepoch: 3, seq: 17, attrs: attrTransactional}
	b := compactedBatch(t, spec, 50, 2, keyed(4))
	oh := decodeHeader(b)
	none := func(*Record) bool { return false }

	out, res, err := FilterBatch([]byte("x"), b, none, FilterOptions{})
	if err != nil || string(out) != "x" || res != (FilterResult{Removed: 4, Dropped: true}) {
		t.Fatalf("without RetainEmpty: %q, %+v, %v", out, res, err)
	}

	out, res, err = FilterBatch(nil, b, none, FilterOptions{RetainEmpty: true, DeleteHorizonMs: 9_999})
	if err != nil || res != (FilterResult{Removed: 4, Rewritten: true}) {
		t.Fatalf("with RetainEmpty: %+v, %v", res, err)
	}
	h, err := checkStoredBatch(out)
	if err != nil {
		t.Fatalf("empty batch does not check: %v", err)
	}
	want := oh
	want.Length, want.CRC, want.NumRecords = minBatchLength, h.CRC, 0
	want.FirstTimestamp = oh.MaxTimestamp
	if h != want || len(out) != headerSize {
		t.Fatalf("empty batch header %+v (%d bytes), want %+v", h, len(out), want)
	}
	if recs := clientRecords(t, out); len(recs) != 0 {
		t.Fatalf("client sees %d records in an empty batch", len(recs))
	}
	// Filtering it again keeps it as it is, or drops it.
	again, res, err := FilterBatch(nil, out, none, FilterOptions{RetainEmpty: true})
	if err != nil || !bytes.Equal(again, out) || res.Rewritten {
		t.Fatalf("empty batch filtered again: %+v, %v", res, err)
	}
	if _, res, err := FilterBatch(nil, out, none, FilterOptions{}); err != nil || !res.Dropped {
		t.Fatalf("empty batch without RetainEmpty: %+v, %v", res, err)
	}
}

func TestFilterBatchEmptyHeaderDropsCompression(t *testing.T) {
	b := compactedBatch(t, batchSpec{codec: codecGzip, firstTs: 10}, 0, 0, keyed(3))
	out, _, err := FilterBatch(nil, b, func(*Record) bool { return false }, FilterOptions{RetainEmpty: true})
	if err != nil {
		t.Fatal(err)
	}
	if h := decodeHeader(out); h.Codec() != codecNone || len(out) != headerSize {
		t.Fatalf("empty batch kept codec %d and %d bytes", h.Codec(), len(out))
	}
}

// KIP-534: the first cleaning of a batch holding a kept tombstone stamps
// its delete horizon, without changing any record's timestamp.
func TestFilterBatchStampsDeleteHorizon(t *testing.T) {
	recs := keyed(4)
	recs[2].value = nil // a tombstone
	b := compactedBatch(t, batchSpec{firstTs: 1_700_000_000_000}, 10, 1, recs)
	orig := clientRecords(t, b)
	if _, ok := decodeHeader(b).DeleteHorizon(); ok {
		t.Fatal("a fresh batch has a delete horizon")
	}
	const horizon = 1_700_000_086_400
	all := func(*Record) bool { return true }
	out, res, err := FilterBatch(nil, b, all, FilterOptions{DeleteHorizonMs: horizon})
	if err != nil {
		t.Fatal(err)
	}
	if res != (FilterResult{Kept: 4, Rewritten: true}) {
		t.Fatalf("result %+v", res)
	}
	h, err := checkStoredBatch(out)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := h.DeleteHorizon(); !ok || got != horizon || h.Attributes&0x40 == 0 {
		t.Fatalf("delete horizon %d, %v (attributes %#x)", got, ok, h.Attributes)
	}
	sameRecords(t, clientRecords(t, out), orig)
	var seen []int64
	if err := ForEachRecord(out, func(r *Record) error { seen = append(seen, r.Timestamp); return nil }); err != nil {
		t.Fatal(err)
	}
	for i, r := range orig {
		if seen[i] != r.Timestamp.UnixMilli() {
			t.Fatalf("record %d timestamp %d after stamping, want %d", i, seen[i], r.Timestamp.UnixMilli())
		}
	}

	// A horizon is stamped once: a later cleaning keeps it.
	again, res, err := FilterBatch(nil, out, all, FilterOptions{DeleteHorizonMs: horizon + 1_000})
	if err != nil || !bytes.Equal(again, out) || res.Rewritten {
		t.Fatalf("restamped: %+v, %v", res, err)
	}
	// Removing records from a batch with a horizon keeps the horizon
	// and the timestamps.
	keepAt := map[int64]bool{11: true, 12: true}
	fewer, res, err := FilterBatch(nil, out, func(r *Record) bool { return keepAt[r.Offset] }, FilterOptions{DeleteHorizonMs: horizon + 1_000})
	if err != nil || res != (FilterResult{Kept: 2, Removed: 2, Rewritten: true}) {
		t.Fatalf("%+v, %v", res, err)
	}
	if got, ok := decodeHeader(fewer).DeleteHorizon(); !ok || got != horizon {
		t.Fatalf("horizon %d, %v after removing records", got, ok)
	}
	sameRecords(t, clientRecords(t, fewer), keepWhere(orig, func(o int64) bool { return keepAt[o] }))

	// Without a kept tombstone there is nothing to stamp.
	live := func(r *Record) bool { return !r.Tombstone }
	noTomb, res, err := FilterBatch(nil, b, live, FilterOptions{DeleteHorizonMs: horizon})
	if err != nil || res.Removed != 1 {
		t.Fatalf("%+v, %v", res, err)
	}
	if _, ok := decodeHeader(noTomb).DeleteHorizon(); ok {
		t.Fatal("horizon stamped on a batch without tombstones")
	}
}

func TestFilterBatchControlBatchUnchanged(t *testing.T) {
	// A commit marker: key version 0, type 1.
	ctl := compactedBatch(t, batchSpec{idem: true, pid: 3, pepoch: 1, seq: -1, attrs: attrControl | attrTransactional},
		30, 0, []testRec{{key: []byte{0, 0, 0, 1}, value: []byte{0, 0, 0, 0, 0, 0}}})
	called := false
	out, res, err := FilterBatch(nil, ctl, func(*Record) bool { called = true; return false }, FilterOptions{DeleteHorizonMs: 1})
	if err != nil || called || !bytes.Equal(out, ctl) || res != (FilterResult{Kept: 1}) {
		t.Fatalf("control batch: %+v, keep called %v, %v", res, called, err)
	}
	var keys [][]byte
	if err := ForEachRecord(ctl, func(r *Record) error { keys = append(keys, bytes.Clone(r.Key)); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 || !bytes.Equal(keys[0], []byte{0, 0, 0, 1}) {
		t.Fatalf("control keys %q", keys)
	}
}

// LogAppendTime batches: a consumer sees the header's maxTimestamp for
// every record, before and after.
func TestFilterBatchLogAppendTime(t *testing.T) {
	maxTs := int64(1_800_000_000_000)
	b := compactedBatch(t, batchSpec{firstTs: 3, attrs: attrLogAppendTime, maxTs: &maxTs}, 0, 0, keyed(3))
	orig := clientRecords(t, b)
	out, _, err := FilterBatch(nil, b, keepOffsets(0, 2), FilterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := decodeHeader(out); h.MaxTimestamp != maxTs || h.Attributes&attrLogAppendTime == 0 {
		t.Fatalf("header %+v", h)
	}
	sameRecords(t, clientRecords(t, out), keepWhere(orig, func(o int64) bool { return o != 1 }))
	if err := ForEachRecord(out, func(r *Record) error {
		if r.Timestamp != maxTs {
			return fmt.Errorf("record %d timestamp %d", r.Offset, r.Timestamp)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestForEachRecord(t *testing.T) {
	recs := []testRec{
		{off: 0, ts: 4, key: []byte("a"), value: []byte("1")},
		{off: 3, ts: 1, key: nil, value: []byte("2")},
		{off: 7, ts: 9, key: []byte("c"), value: nil},
	}
	b := compactedBatch(t, batchSpec{firstTs: 500, withHeader: true}, 40, 0, recs)
	var got []Record
	if err := ForEachRecord(b, func(r *Record) error {
		c := *r
		c.Key = bytes.Clone(r.Key)
		got = append(got, c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	client := clientRecords(t, b)
	if len(got) != len(client) {
		t.Fatalf("%d records, client sees %d", len(got), len(client))
	}
	for i, c := range client {
		g := got[i]
		if g.Offset != c.Offset || g.Timestamp != c.Timestamp.UnixMilli() || !bytes.Equal(g.Key, c.Key) ||
			(g.Key == nil) != (c.Key == nil) || g.Tombstone != (c.Value == nil) {
			t.Fatalf("record %d: %+v, client %d %d %q %q", i, g, c.Offset, c.Timestamp.UnixMilli(), c.Key, c.Value)
		}
	}
	stop := errors.New("stop")
	n := 0
	if err := ForEachRecord(b, func(*Record) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("fn's error: %v after %d records", err, n)
	}
}

func TestFilterBatchRefusesBadBatches(t *testing.T) {
	good := compactedBatch(t, batchSpec{firstTs: 1}, 0, 0, keyed(3))
	flip := bytes.Clone(good)
	flip[len(flip)-1] ^= 1
	backwards := compactedBatch(t, batchSpec{}, 0, 0, []testRec{{off: 1, key: []byte("a")}, {off: 0, key: []byte("b")}})
	beyond := compactedBatch(t, batchSpec{lastDelta: new(int32(1))}, 0, 0, []testRec{{off: 0}, {off: 2}})
	tooMany := compactedBatch(t, batchSpec{lastDelta: new(int32(0))}, 0, 0, []testRec{{off: 0}, {off: 1}})
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"crc", flip, ErrCorruptMessage},
		{"truncated", good[:len(good)-2], ErrCorruptMessage},
		{"offset deltas going back", backwards, ErrInvalidRecord},
		{"offset delta beyond lastOffsetDelta", beyond, ErrInvalidRecord},
		{"more records than offsets", tooMany, ErrInvalidRecord},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := FilterBatch([]byte("d"), tc.b, func(*Record) bool { return true }, FilterOptions{})
			if !errors.Is(err, tc.want) || string(out) != "d" {
				t.Fatalf("FilterBatch: %q, %v; want %v", out, err, tc.want)
			}
			if err := ForEachRecord(tc.b, func(*Record) error { return nil }); !errors.Is(err, tc.want) {
				t.Fatalf("ForEachRecord: %v; want %v", err, tc.want)
			}
		})
	}
}

// FuzzFilterBatch: arbitrary bytes never panic and fail with a
// classified error; a valid batch filters to a valid stored batch holding
// exactly the kept records, at the same offsets with the same timestamps,
// keys and tombstones, under the same header fields.
func FuzzFilterBatch(f *testing.F) {
	for codec := range 5 {
		f.Add(compactedBatch(f, batchSpec{codec: codec, firstTs: 1_000, withHeader: true}, 10, 2, keyed(6)), uint64(0b101101), int64(0), false, true)
	}
	tomb := keyed(4)
	tomb[1].value = nil
	f.Add(compactedBatch(f, batchSpec{codec: codecSnappy, xerial: true, firstTs: 5, idem: true, pid: 4, seq: 8}, 0, 0, tomb), uint64(0b0110), int64(99_999), true, true)
	f.Add(compactedBatch(f, batchSpec{attrs: attrLogAppendTime, maxTs: i64(77)}, 3, 1, keyed(3)), uint64(0), int64(0), true, true)
	f.Add(compactedBatch(f, batchSpec{attrs: attrControl | attrTransactional, idem: true, pid: 1, seq: -1}, 0, 0,
		[]testRec{{key: []byte{0, 0, 0, 1}, value: []byte{0, 0, 0, 0, 0, 0}}}), uint64(0), int64(0), false, true)
	gappy := compactedBatch(f, batchSpec{lastDelta: new(int32(9)), firstTs: 50}, 100, 0, []testRec{{off: 2, key: []byte("a")}, {off: 7, ts: -3, key: []byte("b")}})
	f.Add(gappy, ^uint64(0), int64(1), false, true)
	f.Add(appendEmptyBatch(nil, &BatchHeader{BaseOffset: 5, LastOffsetDelta: 3, ProducerID: 2, BaseSequence: 4, MaxTimestamp: 9}), uint64(1), int64(0), true, true)
	f.Add([]byte{}, uint64(0), int64(0), false, true)
	f.Fuzz(func(t *testing.T, b []byte, mask uint64, horizon int64, retain, recrc bool) {
		if recrc && len(b) >= headerSize {
			// Past the checksum, to reach the records.
			b = bytes.Clone(b)
			fixCRC(b)
		}
		keepRec := func(i int) bool { return mask>>(uint(i)%64)&1 == 1 }
		i := 0
		out, res, err := FilterBatch([]byte("d"), b, func(*Record) bool { k := keepRec(i); i++; return k }, FilterOptions{RetainEmpty: retain, DeleteHorizonMs: horizon})
		var in []Record
		walkErr := ForEachRecord(b, func(r *Record) error {
			c := *r
			c.Key = bytes.Clone(r.Key)
			in = append(in, c)
			return nil
		})
		if err != nil {
			if string(out) != "d" {
				t.Fatalf("failed, yet changed dst: %v", err)
			}
			for _, want := range []error{ErrCorruptMessage, ErrInvalidRecord, ErrUnsupportedMagic, ErrMessageTooLarge} {
				if errors.Is(err, want) {
					if walkErr == nil {
						t.Fatalf("FilterBatch refused what ForEachRecord walks: %v", err)
					}
					return
				}
			}
			t.Fatalf("unclassified error: %v", err)
		}
		ih := decodeHeader(b)
		if !ih.IsControl() && walkErr != nil {
			t.Fatalf("FilterBatch accepted what ForEachRecord refuses: %v", walkErr)
		}
		if !ih.IsControl() && res.Kept+res.Removed != len(in) {
			t.Fatalf("kept %d + removed %d of %d records", res.Kept, res.Removed, len(in))
		}
		nb := out[1:]
		if res.Dropped {
			if len(nb) != 0 || res.Kept != 0 || retain {
				t.Fatalf("dropped: %+v, %d bytes appended", res, len(nb))
			}
			return
		}
		h, err := checkStoredBatch(nb)
		if err != nil {
			t.Fatalf("output is not a valid stored batch: %v", err)
		}
		if h.BaseOffset != ih.BaseOffset || h.LastOffsetDelta != ih.LastOffsetDelta || h.LeaderEpoch != ih.LeaderEpoch ||
			h.ProducerID != ih.ProducerID || h.ProducerEpoch != ih.ProducerEpoch || h.BaseSequence != ih.BaseSequence ||
			h.IsControl() != ih.IsControl() || h.IsTransactional() != ih.IsTransactional() ||
			h.Attributes&attrLogAppendTime != ih.Attributes&attrLogAppendTime || int(h.NumRecords) != res.Kept {
			t.Fatalf("header %+v from %+v (%+v)", h, ih, res)
		}
		if !res.Rewritten && !bytes.Equal(nb, b) {
			t.Fatal("not rewritten, yet not the input's bytes")
		}
		if ih.IsControl() {
			return
		}
		var got []Record
		if err := ForEachRecord(nb, func(r *Record) error {
			c := *r
			c.Key = bytes.Clone(r.Key)
			got = append(got, c)
			return nil
		}); err != nil {
			t.Fatalf("output records: %v", err)
		}
		var want []Record
		for j, r := range in {
			if keepRec(j) {
				want = append(want, r)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%d records out, want %d", len(got), len(want))
		}
		for j := range want {
			g, w := got[j], want[j]
			if g.Offset != w.Offset || g.Timestamp != w.Timestamp || g.Tombstone != w.Tombstone ||
				!bytes.Equal(g.Key, w.Key) || (g.Key == nil) != (w.Key == nil) {
				t.Fatalf("record %d: %+v, want %+v", j, g, w)
			}
		}
	})
}
