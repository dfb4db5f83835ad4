package archive

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/segment"
	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

const ts0 = int64(1_760_000_000_000)

// rec is one record a test writes, and expects back.
type rec struct {
	key, value []byte
	headers    []kgo.RecordHeader
	ts         int64
}

// batch encodes records as a v2 batch from producer pid (-1: none) with
// attributes attrs (0x10: transactional), compressed with codec.
func batch(t testing.TB, pid int64, seq int32, attrs int16, codec kgo.CompressionCodec, recs ...rec) []byte {
	t.Helper()
	rb := kmsg.RecordBatch{Magic: 2, LastOffsetDelta: int32(len(recs) - 1), NumRecords: int32(len(recs)),
		FirstTimestamp: recs[0].ts, MaxTimestamp: recs[0].ts, ProducerID: pid, ProducerEpoch: -1, FirstSequence: -1, Attributes: attrs}
	if pid >= 0 {
		rb.ProducerEpoch, rb.FirstSequence = 0, seq
	}
	var raw []byte
	for i, r := range recs {
		rb.MaxTimestamp = max(rb.MaxTimestamp, r.ts)
		kr := kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: r.ts - recs[0].ts, Key: r.key, Value: r.value}
		for _, h := range r.headers {
			kr.Headers = append(kr.Headers, kmsg.Header{Key: h.Key, Value: h.Value})
		}
		kr.Length = int32(len(kr.AppendTo(nil)) - 1)
		raw = kr.AppendTo(raw)
	}
	if c := compressor(t, codec); c != nil {
		var buf bytes.Buffer
		out, used := c.Compress(&buf, raw)
		raw = append([]byte(nil), out...)
		rb.Attributes |= int16(used)
	}
	rb.Records = raw
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// compressors are built once per codec: a zstd encoder is costly to set
// up, the more so under the race detector.
var compressors sync.Map // kgo.CompressionCodec -> kgo.Compressor

func compressor(t testing.TB, codec kgo.CompressionCodec) kgo.Compressor {
	if v, ok := compressors.Load(codec); ok {
		c, _ := v.(kgo.Compressor) // nil for no compression
		return c
	}
	c, err := kgo.DefaultCompressor(codec)
	if err != nil {
		t.Fatal(err)
	}
	compressors.Store(codec, c)
	return c
}

var tp = format.TopicPartition{Topic: "orders", TopicID: [16]byte{0xab, 1}, Partition: 0}

// bucket is a directory store with one partition uploaded to it.
type bucket struct {
	dir  string
	st   objstore.Store
	want []rec // every record, in offset order, committed or not
	// aborted are the offsets of the records of aborted transactions.
	aborted map[int64]bool
}

// upload rolls every segment of l and uploads the closed ones to a tier
// over st.
func upload(t testing.TB, l *segment.Log, st objstore.Store, tp format.TopicPartition) {
	t.Helper()
	if _, err := l.RollIfOlder(0); err != nil {
		t.Fatal(err)
	}
	segs, err := l.ClosedSegments(0)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := tier.Open(tier.Config{Store: st, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for _, s := range segs {
		if _, err := tr.Upload(context.Background(), tp, s, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// writeBucket writes n records in batches of up to 3, in segments of
// segBytes, keys and headers on some, compressed in turn with every
// codec; every 5th batch belongs to a transaction of producer 7, which
// commits or (every other time) aborts after two batches.
func writeBucket(t testing.TB, n int, segBytes int64) *bucket {
	t.Helper()
	l, err := segment.Open(t.TempDir(), segment.Config{SegmentBytes: segBytes, MaxBatchBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b := &bucket{dir: t.TempDir(), aborted: map[int64]bool{}}
	if b.st, err = objstore.NewDir(b.dir); err != nil {
		t.Fatal(err)
	}
	codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(), kgo.ZstdCompression()}
	codecOf := func(bi int) kgo.CompressionCodec {
		// lz4 now and then only: its reader takes a 4 MiB block per
		// batch, which the race detector makes very slow.
		if bi%40 == 3 {
			return kgo.Lz4Compression()
		}
		return codecs[bi%len(codecs)]
	}
	var (
		seq     int32
		inTxn   int // batches written in the open transaction
		txns    int
		pending []int64 // offsets of the open transaction's records
	)
	offset := int64(0)
	for i, bi := 0, 0; i < n; bi++ {
		k := min(1+bi%3, n-i)
		recs := make([]rec, k)
		for j := range recs {
			r := rec{value: fmt.Appendf(nil, "value %06d", i+j), ts: ts0 + int64(i+j)}
			if (i+j)%4 != 0 {
				r.key = fmt.Appendf(nil, "key-%d", (i+j)%10)
			}
			if (i+j)%3 == 0 {
				r.headers = []kgo.RecordHeader{{Key: "h", Value: []byte("v")}, {Key: "null", Value: nil}}
			}
			if (i+j)%50 == 7 {
				r.value = []byte{0xff, 0xfe, 0, 1} // not UTF-8
			}
			recs[j] = r
		}
		txn := bi%5 == 0 || inTxn > 0
		pid, attrs := int64(-1), int16(0)
		if txn {
			pid, attrs = 7, 0x10
		}
		if _, err := l.Append(batch(t, pid, seq, attrs, codecOf(bi), recs...), 0); err != nil {
			t.Fatal(err)
		}
		if txn {
			seq += int32(k)
			inTxn++
			for j := range k {
				pending = append(pending, offset+int64(j))
			}
		}
		offset += int64(k)
		b.want = append(b.want, recs...)
		i += k
		if inTxn == 2 {
			commit := txns%2 == 0
			if _, err := l.AppendMarker(7, 0, commit, 0, 0); err != nil {
				t.Fatal(err)
			}
			if !commit {
				for _, o := range pending {
					b.aborted[o] = true
				}
			}
			offset++ // the marker
			b.want = append(b.want, rec{ts: -1})
			txns++
			inTxn, pending = 0, nil
		}
	}
	if inTxn > 0 {
		if _, err := l.AppendMarker(7, 0, true, 0, 0); err != nil {
			t.Fatal(err)
		}
		b.want = append(b.want, rec{ts: -1})
	}
	upload(t, l, b.st, tp)
	return b
}

// records is how many records the bigger tests write: fewer under
// -short, which CI runs with the race detector.
func records() int {
	if testing.Short() {
		return 1200
	}
	return 3000
}

// expect returns the records a reader of isolation iso gets, by offset.
func (b *bucket) expect(iso Isolation, from, to int64) map[int64]rec {
	out := map[int64]rec{}
	for o, r := range b.want {
		if int64(o) < from || int64(o) >= to || r.ts < 0 || iso == ReadCommitted && b.aborted[int64(o)] {
			continue
		}
		out[int64(o)] = r
	}
	return out
}

func readAll(t *testing.T, a *Archive, p Partition, o ReadOptions) []*kgo.Record {
	t.Helper()
	var got []*kgo.Record
	err := a.Records(context.Background(), p, o, func(r *kgo.Record) error {
		c := *r
		c.Key, c.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
		c.Headers = nil
		for _, h := range r.Headers { // the record's bytes are valid only during the call
			c.Headers = append(c.Headers, kgo.RecordHeader{Key: h.Key, Value: bytes.Clone(h.Value)})
		}
		got = append(got, &c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func checkRecords(t *testing.T, got []*kgo.Record, want map[int64]rec) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records, want %d", len(got), len(want))
	}
	prev := int64(-1)
	for _, r := range got {
		w, ok := want[r.Offset]
		switch {
		case !ok:
			t.Fatalf("offset %d returned, not expected", r.Offset)
		case r.Offset <= prev:
			t.Fatalf("offset %d after %d: not in order", r.Offset, prev)
		case !bytes.Equal(r.Key, w.key) || (r.Key == nil) != (w.key == nil):
			t.Fatalf("offset %d: key %q, want %q", r.Offset, r.Key, w.key)
		case !bytes.Equal(r.Value, w.value):
			t.Fatalf("offset %d: value %q, want %q", r.Offset, r.Value, w.value)
		case r.Timestamp.UnixMilli() != w.ts:
			t.Fatalf("offset %d: timestamp %d, want %d", r.Offset, r.Timestamp.UnixMilli(), w.ts)
		case len(r.Headers) != len(w.headers):
			t.Fatalf("offset %d: %d headers, want %d", r.Offset, len(r.Headers), len(w.headers))
		}
		for i, h := range w.headers {
			if r.Headers[i].Key != h.Key || !bytes.Equal(r.Headers[i].Value, h.Value) || (r.Headers[i].Value == nil) != (h.Value == nil) {
				t.Fatalf("offset %d: header %d is %+v, want %+v", r.Offset, i, r.Headers[i], h)
			}
		}
		prev = r.Offset
	}
}

func openPartition(t *testing.T, st objstore.Store) (*Archive, Partition) {
	t.Helper()
	a := Open(st)
	p, ok, err := a.Partition(context.Background(), tp)
	if err != nil || !ok {
		t.Fatalf("partition: %v %v", ok, err)
	}
	return a, p
}

// Records come back in offset order, every codec decompressed, keys,
// values, headers and timestamps as written; read_committed drops the
// aborted transactions' records and read_uncommitted keeps them; control
// records never show.
func TestRecordsInOrderAndIsolation(t *testing.T) {
	b := writeBucket(t, records(), 16<<10)
	a, p := openPartition(t, b.st)
	if p.Segments < 5 {
		t.Fatalf("%d segments: the test needs several", p.Segments)
	}
	if p.LogStart != 0 || p.End != int64(len(b.want)) {
		t.Fatalf("partition holds [%d, %d), want [0, %d)", p.LogStart, p.End, len(b.want))
	}
	if len(b.aborted) == 0 {
		t.Fatal("no aborted record written")
	}
	for _, f := range []Fetch{{}, {Parallel: 3, ChunkBytes: 1000}} {
		t.Run(fmt.Sprintf("chunk%d", f.ChunkBytes), func(t *testing.T) {
			committed := readAll(t, a, p, ReadOptions{Fetch: f})
			checkRecords(t, committed, b.expect(ReadCommitted, 0, p.End))
			all := readAll(t, a, p, ReadOptions{Isolation: ReadUncommitted, Fetch: f})
			checkRecords(t, all, b.expect(ReadUncommitted, 0, p.End))
			if len(all) != len(committed)+len(b.aborted) {
				t.Fatalf("read_uncommitted %d records, read_committed %d, aborted %d", len(all), len(committed), len(b.aborted))
			}
		})
	}
	// A range inside, starting mid-segment and mid-transaction.
	from, to := p.End/3+1, 2*p.End/3
	got := readAll(t, a, p, ReadOptions{Range: Range{From: from, To: to}, Fetch: Fetch{ChunkBytes: 777}})
	checkRecords(t, got, b.expect(ReadCommitted, from, to))
	// By time: record i is stamped ts0+i (markers aside).
	got = readAll(t, a, p, ReadOptions{Range: Range{FromTime: ts0 + 1000, HasFromTime: true, ToTime: ts0 + 2000, HasToTime: true}, Isolation: ReadUncommitted})
	want := map[int64]rec{}
	for o, r := range b.expect(ReadUncommitted, 0, p.End) {
		if r.ts >= ts0+1000 && r.ts < ts0+2000 {
			want[o] = r
		}
	}
	checkRecords(t, got, want)
}

// A flipped bit in a segment's log part is an error that names the
// object, never records read from it as if nothing were wrong.
func TestCorruptSegmentDetected(t *testing.T) {
	b := writeBucket(t, 500, 16<<10)
	a, p := openPartition(t, b.st)
	var victim string
	if err := p.root.Walk(context.Background(), a.pages, func(_ *format.PageRef, s *format.RemoteSegment) error {
		if s != nil && victim == "" && s.BaseOffset > 0 {
			victim = s.Key
		}
		return nil
	}); err != nil || victim == "" {
		t.Fatalf("no segment to corrupt: %v", err)
	}
	path := filepath.Join(b.dir, filepath.FromSlash(victim))
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw[200] ^= 0x10 // inside the first batch's records
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	err = a.Records(context.Background(), p, ReadOptions{Isolation: ReadUncommitted}, func(*kgo.Record) error { return nil })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), victim) {
		t.Fatalf("read of a corrupt segment: %v; want ErrCorrupt naming %s", err, victim)
	}
}

// Topics come from the newest checkpoint when there is one, and from a
// listing of the bucket when there is none (a bucket from before
// checkpoints); a topic found by name either way.
func TestTopics(t *testing.T) {
	ctx := context.Background()
	b := writeBucket(t, 50, 1<<20)
	// A second topic, whose name shares a prefix, with two partitions.
	other := format.TopicPartition{Topic: "orders-eu", TopicID: [16]byte{0xcd}, Partition: 0}
	for p := range int32(2) {
		l, err := segment.Open(t.TempDir(), segment.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(batch(t, -1, 0, 0, kgo.NoCompression(), rec{value: []byte("x"), ts: ts0}), 0); err != nil {
			t.Fatal(err)
		}
		other.Partition = p
		upload(t, l, b.st, other)
		l.Close()
	}
	// A topic whose partition 0 never uploaded: its partition 1 lives
	// under another hash prefix, and is found all the same.
	lonely := format.TopicPartition{Topic: "lonely", TopicID: [16]byte{0xee}, Partition: 1}
	{
		l, err := segment.Open(t.TempDir(), segment.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append(batch(t, -1, 0, 0, kgo.NoCompression(), rec{value: []byte("x"), ts: ts0}), 0); err != nil {
			t.Fatal(err)
		}
		upload(t, l, b.st, lonely)
		l.Close()
	}
	a := Open(b.st)
	if got, err := a.FindTopic(ctx, "lonely", ""); err != nil || got.ID != lonely.TopicID || !slices.Equal(got.Partitions, []int32{1}) {
		t.Fatalf("FindTopic of a topic without partition 0: %+v %v", got, err)
	}
	topics, src, err := a.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	topics = slices.DeleteFunc(topics, func(x Topic) bool { return x.Name == "lonely" })
	if src.Checkpoint != "" || len(topics) != 2 || topics[0].Name != "orders" || topics[1].Name != "orders-eu" ||
		!slices.Equal(topics[1].Partitions, []int32{0, 1}) || topics[0].ID != tp.TopicID {
		t.Fatalf("listed %+v from %v", topics, src)
	}
	got, err := a.FindTopic(ctx, "orders-eu", "")
	if err != nil || got.ID != other.TopicID || len(got.Partitions) != 2 {
		t.Fatalf("FindTopic orders-eu: %+v %v", got, err)
	}
	if _, err := a.FindTopic(ctx, "nope", ""); !errors.Is(err, ErrNoTopic) {
		t.Fatalf("FindTopic of a missing topic: %v", err)
	}
	cp := &format.Checkpoint{Version: 1, ClusterID: "c", History: "0123456789abcdef0123456789abcdef", Index: 5, WrittenMs: time.Now().UnixMilli(), Topics: []format.CheckpointTopic{
		{Name: "orders", ID: format.HexID(tp.TopicID), ReplicationFactor: 1, Configs: map[string]string{}, Partitions: []format.CheckpointPartition{{Partition: 0, Replicas: []int32{1}}}},
	}}
	key, err := tier.WriteCheckpoint(ctx, b.st, cp)
	if err != nil {
		t.Fatal(err)
	}
	topics, src, err = a.Topics(ctx)
	if err != nil || src.Checkpoint != key || len(topics) != 1 || topics[0].Name != "orders" {
		t.Fatalf("with a checkpoint: %+v from %v, %v", topics, src, err)
	}
	// A topic newer than the checkpoint is still found by name.
	if got, err := a.FindTopic(ctx, "orders-eu", ""); err != nil || got.ID != other.TopicID {
		t.Fatalf("FindTopic of a topic the checkpoint lacks: %+v %v", got, err)
	}

	// An older metadata history (a cluster this bucket's later one
	// restored only orders from) names orders-eu too: listed as well.
	older := &format.Checkpoint{Version: 1, ClusterID: "c", History: "fedcba9876543210fedcba9876543210", Index: 90, WrittenMs: cp.WrittenMs - 1000, Topics: []format.CheckpointTopic{
		{Name: "orders", ID: format.HexID(tp.TopicID), ReplicationFactor: 1, Configs: map[string]string{}, Partitions: []format.CheckpointPartition{{Partition: 0, Replicas: []int32{1}}}},
		{Name: "orders-eu", ID: format.HexID(other.TopicID), ReplicationFactor: 1, Configs: map[string]string{}, Partitions: []format.CheckpointPartition{{Partition: 0, Replicas: []int32{1}}, {Partition: 1, Replicas: []int32{1}}}},
	}}
	if _, err := tier.WriteCheckpoint(ctx, b.st, older); err != nil {
		t.Fatal(err)
	}
	topics, src, err = a.Topics(ctx)
	if err != nil || src.Checkpoint != key || src.Others != 1 || len(topics) != 2 || topics[0].Name != "orders" || topics[1].Name != "orders-eu" ||
		!slices.Equal(topics[1].Partitions, []int32{0, 1}) {
		t.Fatalf("with an older history naming another topic: %+v from %v, %v", topics, src, err)
	}
}

// The format directives render as kcat renders them.
func TestFormat(t *testing.T) {
	r := &kgo.Record{Topic: "orders", Partition: 3, Offset: 42, Timestamp: time.UnixMilli(ts0), Key: []byte("k1"), Value: []byte("hello"),
		Headers: []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte{}}, {Key: "c"}}}
	null := &kgo.Record{Topic: "t", Offset: 1, Timestamp: time.UnixMilli(5)}
	for _, c := range []struct {
		format string
		r      *kgo.Record
		want   string
	}{
		{DefaultFormat, r, "hello\n"},
		{`%p %o %s\n`, r, "3 42 hello\n"},
		{`%t [%p] at offset %o: key %k: %s`, r, "orders [3] at offset 42: key k1: hello"},
		{`%T`, r, "1760000000000"},
		{`%K %S`, r, "2 5"},
		{`%K %S|%k|%s|`, null, "-1 -1|||"},
		{`%h`, r, "a=1,b=,c=NULL"},
		{`%h|`, null, "|"},
		{`100%%\t\r\\\x41\q`, r, "100%\t\r\\Aq"},
		{`no directives`, r, "no directives"},
	} {
		f, err := ParseFormat(c.format)
		if err != nil {
			t.Fatalf("%q: %v", c.format, err)
		}
		if got := string(f.Append(nil, c.r)); got != c.want {
			t.Errorf("%q renders %q, want %q", c.format, got, c.want)
		}
	}
	for _, bad := range []string{"%", "%x", `\x`, "abc%"} {
		if _, err := ParseFormat(bad); err == nil {
			t.Errorf("%q parses; want an error", bad)
		}
	}
}

// The hand-written JSON line decodes to the same JSONRecord that
// encoding/json would write: UTF-8 as is, other bytes in base64 with the
// marker field.
func TestJSON(t *testing.T) {
	for _, r := range []*kgo.Record{
		{Topic: "t", Partition: 1, Offset: 2, Timestamp: time.UnixMilli(3), Key: []byte("k\"\\\n\x01<é>"), Value: []byte{0xff, 0}, Headers: []kgo.RecordHeader{{Key: "h", Value: []byte{0x80}}, {Key: "n"}}},
		{Topic: "t", Offset: 9, Timestamp: time.UnixMilli(3)},
	} {
		line := AppendJSON(nil, r)
		if !bytes.HasSuffix(line, []byte("\n")) || bytes.Count(line, []byte("\n")) != 1 {
			t.Fatalf("not one line: %q", line)
		}
		var got JSONRecord
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		want := NewJSONRecord(r)
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if !bytes.Equal(gb, wb) {
			t.Fatalf("decoded %s, want %s", gb, wb)
		}
		v, err := DecodeBytes(got.Value, got.ValueEncoding)
		if err != nil || !bytes.Equal(v, r.Value) || (v == nil) != (r.Value == nil) {
			t.Fatalf("value decodes to %q (%v), want %q", v, err, r.Value)
		}
	}
}

// An export interrupted after a chunk, with a partial line written after
// its last state, resumes to exactly what an uninterrupted export writes.
func TestExportResumes(t *testing.T) {
	b := writeBucket(t, records(), 16<<10)
	a, p := openPartition(t, b.st)
	ctx := context.Background()
	full := t.TempDir()
	res, err := a.Export(ctx, p, ExportOptions{Dir: full})
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(len(b.expect(ReadCommitted, 0, p.End))); res.Records != want || res.TotalRecords != want {
		t.Fatalf("export wrote %d records (%d in the file), want %d", res.Records, res.TotalRecords, want)
	}
	defer func(n int64, m int) { exportChunkBytes, exportBufferBytes = n, m }(exportChunkBytes, exportBufferBytes)
	exportChunkBytes, exportBufferBytes = 4<<10, 1000 // lines written mid-run too
	part := t.TempDir()
	cctx, cancel := context.WithCancel(ctx)
	chunks := 0
	_, err = a.Export(cctx, p, ExportOptions{Dir: part, Fetch: Fetch{ChunkBytes: 2000}, Progress: func(ExportProgress) {
		if chunks++; chunks == 3 {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted export: %v", err)
	}
	data, _ := ExportFiles(part, p.TopicPartition, false)
	f, err := os.OpenFile(data, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"topic":"orders","partition":0,"off`) // a crash mid-line
	f.Close()
	res, err = a.Export(ctx, p, ExportOptions{Dir: part})
	if err != nil {
		t.Fatal(err)
	}
	if res.Resumed <= 0 {
		t.Fatalf("the second run did not resume (from %d)", res.Resumed)
	}
	want, _ := os.ReadFile(filepath.Join(full, "orders-0.jsonl"))
	got, _ := os.ReadFile(data)
	if !bytes.Equal(got, want) {
		t.Fatalf("resumed export (%d bytes) differs from a full one (%d bytes)", len(got), len(want))
	}
	// A third run finds nothing new and changes nothing.
	if res, err = a.Export(ctx, p, ExportOptions{Dir: part}); err != nil || res.Records != 0 {
		t.Fatalf("a re-run of a finished export: %+v %v", res, err)
	}
	if again, _ := os.ReadFile(data); !bytes.Equal(again, want) {
		t.Fatal("a re-run of a finished export changed the file")
	}
}

// A raw export is the stored batches, byte for byte.
func TestExportRaw(t *testing.T) {
	b := writeBucket(t, 800, 16<<10)
	a, p := openPartition(t, b.st)
	dir := t.TempDir()
	if _, err := a.Export(context.Background(), p, ExportOptions{Dir: dir, Raw: true}); err != nil {
		t.Fatal(err)
	}
	var want []byte
	if err := p.root.Walk(context.Background(), a.pages, func(_ *format.PageRef, s *format.RemoteSegment) error {
		if s != nil {
			raw, err := os.ReadFile(filepath.Join(b.dir, filepath.FromSlash(s.Key)))
			if err != nil {
				return err
			}
			want = append(want, raw[s.Log.Offset:s.Log.End()]...)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	data, _ := ExportFiles(dir, p.TopicPartition, true)
	if got, _ := os.ReadFile(data); !bytes.Equal(got, want) {
		t.Fatalf("raw export of %d bytes differs from the %d bytes of the log parts", len(got), len(want))
	}
}
