package format_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/segment"
	"strata/tier/format"
)

// rawBatch encodes a v2 record batch the way a producer would.
func rawBatch(pid int64, seq int32, ts int64, values ...string) []byte {
	rb := kmsg.RecordBatch{
		Magic: 2, LastOffsetDelta: int32(len(values) - 1), FirstTimestamp: ts, MaxTimestamp: ts,
		ProducerID: pid, FirstSequence: seq, NumRecords: int32(len(values)), PartitionLeaderEpoch: -1,
	}
	var recs []byte
	for i, v := range values {
		r := kmsg.Record{OffsetDelta: int32(i), Value: []byte(v)}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	rb.Records = recs
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[17:], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))
	return raw
}

type batch struct{ base, last, maxTs int64 }

// TestRealSegmentObjects writes a real local log with the segment package,
// turns each closed segment's files into a segment object, lists them in a
// manifest, and then reads every offset and timestamp back the way a
// remote reader does: manifest -> segment -> index part -> log position ->
// batch headers. It proves the layout fits the files the log writes.
func TestRealSegmentObjects(t *testing.T) {
	dir := t.TempDir()
	l, err := segment.Open(dir, segment.Config{SegmentBytes: 8 << 10, IndexIntervalBytes: 512})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().UnixMilli() - 10_000
	var batches []batch
	var seq int32
	for i := range 200 {
		epoch := int32(i / 80) // leader epochs 0, 1, 2
		ts := start + int64(i)*10
		n := 1 + i%5
		vals := make([]string, n)
		for j := range vals {
			vals[j] = fmt.Sprintf("record %d.%d %s", i, j, bytes.Repeat([]byte{'x'}, i%50))
		}
		info, err := l.Append(rawBatch(7, seq, ts, vals...), epoch)
		if err != nil {
			t.Fatal(err)
		}
		seq += int32(n)
		batches = append(batches, batch{info.BaseOffset, info.LastOffset, ts})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	slices.Sort(logs)
	if len(logs) < 4 {
		t.Fatalf("only %d segments", len(logs))
	}
	tp := format.TopicPartition{Topic: "real.topic_name-1", TopicID: [16]byte{1, 2, 3}, Partition: 2}
	m := &format.Manifest{TopicPartition: tp}
	objects := map[string][]byte{}            // the "bucket"
	for i, path := range logs[:len(logs)-1] { // closed segments only
		base := offsetOf(t, path)
		next := offsetOf(t, logs[i+1])
		logBytes := read(t, path)
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		parts := format.SegmentParts{
			Log: f, LogSize: int64(len(logBytes)),
			Index:            read(t, trim(path)+".index"),
			TimeIndex:        read(t, trim(path)+".timeindex"),
			ProducerSnapshot: read(t, filepath.Join(dir, fmt.Sprintf("%020d.snapshot", next))),
			BaseOffset:       base, LastOffset: next - 1, RecordCount: 0,
		}
		// Facts a real uploader takes from the log; here, from the headers.
		for pos := 0; pos < len(logBytes); {
			h, err := segment.ParseBatchHeader(logBytes[pos:])
			if err != nil {
				t.Fatal(err)
			}
			if pos == 0 {
				parts.FirstTimestamp, parts.MaxTimestamp = h.FirstTimestamp, h.MaxTimestamp
			}
			parts.MaxTimestamp = max(parts.MaxTimestamp, h.MaxTimestamp)
			parts.RecordCount += int64(h.NumRecords)
			parts.LeaderEpoch = max(parts.LeaderEpoch, h.LeaderEpoch)
			pos += h.Size()
		}
		key := format.SegmentKey{TopicPartition: tp, BaseOffset: base, LeaderEpoch: parts.LeaderEpoch, UID: format.NewUID()}.String()
		var obj bytes.Buffer
		footer, crc, err := format.WriteSegmentObject(&obj, parts)
		if err != nil {
			t.Fatalf("segment %d: %v", base, err)
		}
		if !bytes.Equal(obj.Bytes()[:len(logBytes)], logBytes) {
			t.Fatal("log part is not the .log file")
		}
		objects[key] = obj.Bytes()
		if m, err = m.With(footer.Segment(key, crc)); err != nil {
			t.Fatal(err)
		}
	}

	// Publish and re-read the manifest.
	enc, err := format.EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	m, err = format.DecodeManifest(enc)
	if err != nil {
		t.Fatal(err)
	}
	end := m.EndOffset()
	if end != offsetOf(t, logs[len(logs)-1]) {
		t.Fatalf("manifest ends at %d", end)
	}

	for _, s := range m.Segments {
		if err := s.VerifyObject(bytes.NewReader(objects[s.Key])); err != nil {
			t.Fatal(err)
		}
		if f, err := format.ParseFooter(objects[s.Key][s.Size-format.FooterSize:]); err != nil || f != s.Footer {
			t.Fatalf("footer %+v, %v", f, err)
		}
	}

	// Every offset: one ranged GET for the index, then the log bytes.
	for o := int64(0); o < end; o++ {
		s, ok := m.Find(o)
		if !ok {
			t.Fatalf("offset %d not found", o)
		}
		obj := objects[s.Key]
		index := obj[s.Index.Offset:s.Index.End()] // GET Range: bytes=Offset-(End-1)
		if err := s.Index.Check(index); err != nil {
			t.Fatal(err)
		}
		pos, err := format.LookupOffset(index, s.BaseOffset, o)
		if err != nil {
			t.Fatal(err)
		}
		h := scan(t, obj[:s.Log.End()], pos, func(h segment.BatchHeader) bool { return h.LastOffset() >= o })
		if h.BaseOffset > o || h.LastOffset() < o {
			t.Fatalf("offset %d: found batch [%d, %d]", o, h.BaseOffset, h.LastOffset())
		}
	}

	// Timestamps: the first batch with maxTimestamp >= ts.
	for _, ts := range []int64{0, start, start + 1, start + 555, start + 1000, start + 1990} {
		want := slices.IndexFunc(batches, func(b batch) bool { return b.maxTs >= ts && b.last < end })
		s, ok := m.FindTimestamp(ts)
		if !ok {
			if want >= 0 {
				t.Fatalf("ts %d: no segment, want batch at %d", ts, batches[want].base)
			}
			continue
		}
		obj := objects[s.Key]
		ti := obj[s.TimeIndex.Offset:s.TimeIndex.End()]
		if err := s.TimeIndex.Check(ti); err != nil {
			t.Fatal(err)
		}
		from, ok, err := format.LookupTimestamp(ti, s.BaseOffset, ts)
		if err != nil || !ok {
			t.Fatalf("ts %d: %d %v %v", ts, from, ok, err)
		}
		pos, _ := format.LookupOffset(obj[s.Index.Offset:s.Index.End()], s.BaseOffset, from)
		h := scan(t, obj[:s.Log.End()], pos, func(h segment.BatchHeader) bool { return h.LastOffset() >= from && h.MaxTimestamp >= ts })
		if h.BaseOffset != batches[want].base {
			t.Fatalf("ts %d: batch at %d, want %d", ts, h.BaseOffset, batches[want].base)
		}
	}
}

// scan walks batch headers of log from pos to the first satisfying stop.
func scan(t *testing.T, log []byte, pos int64, stop func(segment.BatchHeader) bool) segment.BatchHeader {
	t.Helper()
	for pos < int64(len(log)) {
		h, err := segment.ParseBatchHeader(log[pos:])
		if err != nil {
			t.Fatal(err)
		}
		if stop(h) {
			return h
		}
		pos += int64(h.Size())
	}
	t.Fatal("ran off the end of the log")
	return segment.BatchHeader{}
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func trim(path string) string { return path[:len(path)-len(filepath.Ext(path))] }

func offsetOf(t *testing.T, path string) int64 {
	t.Helper()
	var o int64
	if _, err := fmt.Sscanf(filepath.Base(path), "%020d.log", &o); err != nil {
		t.Fatal(err)
	}
	return o
}
