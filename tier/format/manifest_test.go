package format

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"
)

var testTP = TopicPartition{Topic: "orders.v1", TopicID: testID, Partition: 5}

// seg returns a valid entry for a segment covering [base, last], of 100
// bytes of log and the given max timestamp.
func seg(base, last, maxTs int64, epoch int32) RemoteSegment {
	f := Footer{BaseOffset: base, LastOffset: last, FirstTimestamp: maxTs - 10, MaxTimestamp: maxTs, RecordCount: -1, LeaderEpoch: epoch,
		Log: Part{0, 100, 1}, Index: Part{100, 16, 2}, TimeIndex: Part{116, 24, 3}, ProducerSnapshot: Part{140, 10, 4}}
	return f.Segment(SegmentKey{testTP, base, epoch, [16]byte{byte(base), byte(last)}}.String(), uint32(base*7+last))
}

func testManifest(t testing.TB) *Manifest {
	m := &Manifest{TopicPartition: testTP}
	var err error
	for _, s := range []RemoteSegment{seg(0, 99, 1000, 0), seg(100, 199, 900, 1), seg(200, 299, 3000, 1), seg(300, 300, 4000, 2)} {
		if m, err = m.With(s); err != nil {
			t.Fatal(err)
		}
	}
	m.Segments[1].LeaderEpochs = []EpochStart{{0, 100}, {1, 150}}
	return m
}

func TestManifestRoundTrip(t *testing.T) {
	for _, m := range []*Manifest{
		testManifest(t),
		{TopicPartition: testTP, LogStartOffset: 1234, Seq: 9, LeaderEpoch: 3},
	} {
		b, err := EncodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeManifest(b)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("decoded %+v\nwant %+v", got, m)
		}
		b2, _ := EncodeManifest(got)
		if !bytes.Equal(b, b2) {
			t.Fatal("re-encoding differs")
		}
	}
}

// The documented shape: a JSON document, then "crc32c:<8 hex>\n".
func TestManifestEncoding(t *testing.T) {
	m := &Manifest{TopicPartition: TopicPartition{Topic: "orders", TopicID: testID}, LeaderEpoch: 3, Seq: 17}
	m, _ = m.With(Footer{BaseOffset: 0, LastOffset: 9, FirstTimestamp: 1, MaxTimestamp: 2, RecordCount: 10, LeaderEpoch: 3,
		Log: Part{0, 100, 1}, Index: Part{100, 8, 2}, TimeIndex: Part{108, 12, 3}, ProducerSnapshot: Part{120, 10, 4},
	}.Segment(SegmentKey{m.TopicPartition, 0, 3, [16]byte{15: 1}}.String(), 5))
	b, err := EncodeManifest(m)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"format":"strata.manifest","version":1,"topic":"orders","topicId":"0f1e2d3c4b5a69788796a5b4c3d2e1f0","partition":0,` +
		`"leaderEpoch":3,"seq":18,"logStartOffset":0,"segments":[{"key":"63ed/orders-0f1e2d3c4b5a69788796a5b4c3d2e1f0/0/segments/` +
		`00000000000000000000-0000000003-00000000000000000000000000000001.seg","size":266,"crc32c":5,"baseOffset":0,"lastOffset":9,` +
		`"firstTimestamp":1,"maxTimestamp":2,"recordCount":10,"leaderEpoch":3,"log":{"offset":0,"length":100,"crc32c":1},` +
		`"index":{"offset":100,"length":8,"crc32c":2},"timeIndex":{"offset":108,"length":12,"crc32c":3},` +
		`"producerSnapshot":{"offset":120,"length":10,"crc32c":4}}]}` + "\n"
	want := body + fmt.Sprintf("crc32c:%08x\n", crc32.Checksum([]byte(body), castagnoli))
	if string(b) != want {
		t.Fatalf("encoded\n%s\nwant\n%s", b, want)
	}
	if m.Key() != "63ed/orders-0f1e2d3c4b5a69788796a5b4c3d2e1f0/0/manifests/0000000003-00000000000000000018.manifest" {
		t.Fatalf("key %s", m.Key())
	}
}

// Every single-bit flip anywhere in an encoded manifest is detected.
func TestManifestBitFlips(t *testing.T) {
	b, err := EncodeManifest(testManifest(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(b) * 8 {
		c := bytes.Clone(b)
		c[i/8] ^= 1 << (i % 8)
		if _, err := DecodeManifest(c); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("flip of bit %d (byte %q): %v", i, b[i/8], err)
		}
	}
	for n := range len(b) {
		if _, err := DecodeManifest(b[:n]); err == nil {
			t.Fatalf("torn at %d: no error", n)
		}
	}
}

// withCRC re-seals a hand-edited body, to test the checks behind the CRC.
func withCRC(body string) []byte {
	return fmt.Appendf([]byte(body), "crc32c:%08x\n", crc32.Checksum([]byte(body), castagnoli))
}

func TestDecodeManifestRejects(t *testing.T) {
	b, _ := EncodeManifest(testManifest(t))
	body := string(b[:len(b)-trailerSize])
	for name, c := range map[string]string{
		"unknown field": strings.Replace(body, `"seq"`, `"extra":1,"seq"`, 1),
		"version 2":     strings.Replace(body, `"version":1`, `"version":2`, 1),
		"other format":  strings.Replace(body, `strata.manifest`, `other`, 1),
		"trailing data": body + "{}\n",
		"bad topic id":  strings.Replace(body, `0f1e2d`, `0F1E2D`, 1),
		"float":         strings.Replace(body, `"seq":4`, `"seq":4.5`, 1),
		"overflow":      strings.Replace(body, `"partition":5`, `"partition":4294967296`, 1),
		"invalid":       strings.Replace(body, `"logStartOffset":0`, `"logStartOffset":-1`, 1),
		"not json":      "hello\n",
		"empty":         "",
		"uppercase crc": "",
	} {
		in := withCRC(c)
		if name == "uppercase crc" {
			in = []byte(strings.ToUpper(string(b[len(b)-trailerSize:])))
		}
		if m, err := DecodeManifest(in); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %+v, %v", name, m, err)
		}
	}
}

func TestManifestValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*Manifest)
	}{
		{"bad topic", func(m *Manifest) { m.Topic = "a/b" }},
		{"negative epoch", func(m *Manifest) { m.LeaderEpoch = -1 }},
		{"negative seq", func(m *Manifest) { m.Seq = -1 }},
		{"start below first segment", func(m *Manifest) { m.WithLogStart(0); m.Segments = m.Segments[1:] }},
		{"start beyond first segment", func(m *Manifest) { m.LogStartOffset = 100 }},
		{"gap", func(m *Manifest) { m.Segments = append(m.Segments[:1], m.Segments[2:]...) }},
		{"overlap", func(m *Manifest) { m.Segments[2] = seg(150, 299, 3000, 1) }},
		{"unsorted", func(m *Manifest) { m.Segments[1], m.Segments[2] = m.Segments[2], m.Segments[1] }},
		{"duplicate", func(m *Manifest) { m.Segments[1] = m.Segments[0] }},
		{"segment epoch above manifest", func(m *Manifest) { m.LeaderEpoch = 1 }},
		{"key of another partition", func(m *Manifest) {
			m.Segments[0].Key = SegmentKey{TopicPartition{testTP.Topic, testID, 6}, 0, 0, [16]byte{}}.String()
		}},
		{"key with another base", func(m *Manifest) { m.Segments[1].Key = m.Segments[0].Key }},
		{"key with another epoch", func(m *Manifest) { m.Segments[0].LeaderEpoch = 1 }},
		{"bad key", func(m *Manifest) { m.Segments[0].Key = "x" }},
		{"size", func(m *Manifest) { m.Segments[0].Size++ }},
		{"parts", func(m *Manifest) { m.Segments[0].Index.Offset++ }},
		{"epochs start", func(m *Manifest) { m.Segments[1].LeaderEpochs[0].StartOffset = 101 }},
		{"epochs order", func(m *Manifest) { m.Segments[1].LeaderEpochs[1].Epoch = 0 }},
		{"epochs above segment", func(m *Manifest) { m.Segments[1].LeaderEpochs[1].Epoch = 2 }},
		{"epochs past end", func(m *Manifest) { m.Segments[1].LeaderEpochs[1].StartOffset = 200 }},
	} {
		m := testManifest(t)
		if err := m.Validate(); err != nil {
			t.Fatal(err)
		}
		c.edit(m)
		if err := m.Validate(); err == nil {
			t.Errorf("%s: valid", c.name)
		}
		if _, err := EncodeManifest(m); err == nil {
			t.Errorf("%s: encoded", c.name)
		}
	}
}

func TestManifestFind(t *testing.T) {
	m := testManifest(t).WithLogStart(50)
	for _, c := range []struct {
		offset int64
		base   int64 // -1: not found
	}{{-1, -1}, {0, -1}, {49, -1}, {50, 0}, {99, 0}, {100, 100}, {250, 200}, {300, 300}, {301, -1}} {
		s, ok := m.Find(c.offset)
		if ok != (c.base >= 0) || ok && s.BaseOffset != c.base {
			t.Errorf("Find(%d) = %d, %v; want %d", c.offset, s.BaseOffset, ok, c.base)
		}
	}
	// Max timestamps are 1000, 900, 3000, 4000: not monotonic.
	for _, c := range []struct {
		ts   int64
		base int64
	}{{0, 0}, {1000, 0}, {1001, 200}, {3000, 200}, {4000, 300}, {4001, -1}} {
		s, ok := m.FindTimestamp(c.ts)
		if ok != (c.base >= 0) || ok && s.BaseOffset != c.base {
			t.Errorf("FindTimestamp(%d) = %d, %v; want %d", c.ts, s.BaseOffset, ok, c.base)
		}
	}
	if m.EndOffset() != 301 {
		t.Fatalf("EndOffset %d", m.EndOffset())
	}
	if e := (&Manifest{LogStartOffset: 7}).EndOffset(); e != 7 {
		t.Fatalf("empty EndOffset %d", e)
	}
}

func TestManifestWith(t *testing.T) {
	m := testManifest(t)
	if m.Seq != 4 || m.LeaderEpoch != 2 || m.LogStartOffset != 0 {
		t.Fatalf("after 4 appends: seq %d epoch %d start %d", m.Seq, m.LeaderEpoch, m.LogStartOffset)
	}
	before, _ := EncodeManifest(m)
	// The last is uploaded by a leader of an older epoch than the
	// manifest's: a deposed leader's segment never follows a newer one's.
	for _, s := range []RemoteSegment{seg(300, 400, 1, 2), seg(302, 400, 1, 2), seg(200, 299, 1, 2), {Key: "x"}, seg(301, 400, 1, 1)} {
		if _, err := m.With(s); err == nil {
			t.Errorf("With(%d..%d) accepted", s.BaseOffset, s.LastOffset)
		}
	}
	next, err := m.With(seg(301, 400, 5000, 7))
	if err != nil {
		t.Fatal(err)
	}
	if next.Seq != 5 || next.LeaderEpoch != 7 || len(next.Segments) != 5 || next.EndOffset() != 401 {
		t.Fatalf("next: %+v", next)
	}
	if after, _ := EncodeManifest(m); !bytes.Equal(before, after) {
		t.Fatal("With modified its receiver")
	}

	// An empty manifest: the first segment sets the remote log start.
	empty := &Manifest{TopicPartition: testTP, LogStartOffset: 500}
	for _, c := range []struct {
		s         RemoteSegment
		wantStart int64 // -1: rejected
	}{
		{seg(500, 599, 1, 0), 500},
		{seg(700, 799, 1, 0), 700}, // nothing below 700 is in the bucket
		{seg(400, 599, 1, 0), 500}, // straddles the start
		{seg(400, 499, 1, 0), -1},  // wholly deleted already
	} {
		got, err := empty.With(c.s)
		if (err == nil) != (c.wantStart >= 0) || err == nil && got.LogStartOffset != c.wantStart {
			t.Errorf("empty.With(%d..%d): %v, %v", c.s.BaseOffset, c.s.LastOffset, got, err)
		}
		if err == nil {
			if err := got.Validate(); err != nil {
				t.Error(err)
			}
		}
	}
}

func TestManifestWithLogStart(t *testing.T) {
	m := testManifest(t)
	before, _ := EncodeManifest(m)
	for _, c := range []struct {
		start, wantStart int64
		wantBases        []int64
	}{
		{-5, 0, []int64{0, 100, 200, 300}},
		{0, 0, []int64{0, 100, 200, 300}},
		{99, 99, []int64{0, 100, 200, 300}},
		{100, 100, []int64{100, 200, 300}},
		{250, 250, []int64{200, 300}},
		{300, 300, []int64{300}},
		{301, 301, nil},
		{1000, 1000, nil},
	} {
		got := m.WithLogStart(c.start)
		var bases []int64
		for _, s := range got.Segments {
			bases = append(bases, s.BaseOffset)
		}
		if got.LogStartOffset != c.wantStart || !reflect.DeepEqual(bases, c.wantBases) || got.Seq != m.Seq+1 {
			t.Errorf("WithLogStart(%d): start %d, bases %v, seq %d", c.start, got.LogStartOffset, bases, got.Seq)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("WithLogStart(%d): %v", c.start, err)
		}
		if got.EndOffset() != max(301, c.wantStart) {
			t.Errorf("WithLogStart(%d): end %d", c.start, got.EndOffset())
		}
	}
	if after, _ := EncodeManifest(m); !bytes.Equal(before, after) {
		t.Fatal("WithLogStart modified its receiver")
	}
	// The start never moves down.
	if got := m.WithLogStart(250).WithLogStart(120); got.LogStartOffset != 250 {
		t.Fatalf("start moved down to %d", got.LogStartOffset)
	}
}

func TestManifestWithReplaced(t *testing.T) {
	m := testManifest(t)
	before, _ := EncodeManifest(m)
	merged := seg(100, 299, 3000, 3)
	got, err := m.WithReplaced([]RemoteSegment{merged})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Segments) != 3 || !reflect.DeepEqual(got.Segments[1], merged) || got.LeaderEpoch != 3 || got.Seq != m.Seq+1 {
		t.Fatalf("replaced: %+v", got)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	if after, _ := EncodeManifest(m); !bytes.Equal(before, after) {
		t.Fatal("WithReplaced modified its receiver")
	}
	for _, segs := range [][]RemoteSegment{
		nil,
		{seg(100, 250, 1, 1)}, // ends inside a segment
		{seg(150, 299, 1, 1)}, // starts inside one
		{seg(100, 149, 1, 1), seg(151, 299, 1, 1)}, // not contiguous
		{seg(301, 400, 1, 1)},                      // beyond the end
	} {
		if _, err := m.WithReplaced(segs); err == nil {
			t.Errorf("WithReplaced(%v) accepted", segs)
		}
	}
}
