package main

import (
	"context"
	be "encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// These tests kill and damage a real strata process: what a user checks
// after a crash is that every acknowledged record is there, once, in order
// and byte-identical, and that damaged bytes are never served.

func crashValue(i uint64) []byte {
	return fmt.Appendf(nil, "record %d %s", i, strings.Repeat(string(rune('a'+i%26)), int(100+i%400)))
}

func newClient(t *testing.T, bootstrap string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(bootstrap)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func mustCreate(t *testing.T, bootstrap, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	adm := kadm.NewClient(newClient(t, bootstrap))
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

// readAll consumes topic from the start until every partition's end
// offset, returning the records by partition. opts are the clients'
// security settings, if any.
func readAll(t *testing.T, bootstrap, topic string, opts ...kgo.Opt) map[int32][]*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adm := kadm.NewClient(newClient(t, bootstrap, opts...))
	// A partition that answers with an error (its leader still loading it)
	// is asked again, never taken for an empty one.
	var ends kadm.ListedOffsets
	var err error
	for {
		ends, err = adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("end offsets of %s: %v", topic, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { want[o.Partition] = o.Offset })
	cl := newClient(t, bootstrap, append([]kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	out := map[int32][]*kgo.Record{}
	done := func() bool {
		for p, end := range want {
			if n := len(out[p]); end > 0 && (n == 0 || out[p][n-1].Offset < end-1) {
				return false
			}
		}
		return true
	}
	for !done() {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s back: timed out", topic)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) { out[r.Partition] = append(out[r.Partition], r) })
	}
	return out
}

// TestCrashKeepsAcknowledgedRecords kills strata with SIGKILL while an
// acks=all idempotent producer is mid-stream, restarts it on the same data
// directory, and checks every acknowledged record.
func TestCrashKeepsAcknowledgedRecords(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, nil, "dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "off")
	mustCreate(t, n.bootstrap, "crash", 3, nil)

	type ack struct {
		partition int32
		offset    int64
	}
	var (
		mu    sync.Mutex
		acked = map[uint64]ack{}
	)
	prod := newClient(t, n.bootstrap,
		kgo.DefaultProduceTopic("crash"),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordRetries(2),
		kgo.RecordDeliveryTimeout(5*time.Second),
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(0); ctx.Err() == nil; i++ {
			key := be.BigEndian.AppendUint64(nil, i)
			prod.Produce(ctx, &kgo.Record{Key: key, Value: crashValue(i)}, func(r *kgo.Record, err error) {
				if err == nil {
					mu.Lock()
					acked[be.BigEndian.Uint64(r.Key)] = ack{r.Partition, r.Offset}
					mu.Unlock()
				}
			})
		}
	}()
	// Kill once a good number of records is acknowledged, mid-stream.
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := len(acked)
		mu.Unlock()
		if got >= 30000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d records acknowledged in 30s", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := n.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-n.exited
	cancel()
	prod.Close()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("killed strata with %d records acknowledged", len(acked))

	n = startNode(t, nil, "dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "off")
	got := readAll(t, n.bootstrap, "crash")
	present := map[uint64]bool{}
	for p, recs := range got {
		for i, r := range recs {
			if r.Offset != int64(i) {
				t.Fatalf("partition %d: record %d has offset %d: a gap or reorder", p, i, r.Offset)
			}
			k := be.BigEndian.Uint64(r.Key)
			if present[k] {
				t.Fatalf("record %d is in the log twice", k)
			}
			present[k] = true
			if string(r.Value) != string(crashValue(k)) {
				t.Fatalf("record %d: value differs", k)
			}
		}
	}
	for k, a := range acked {
		recs := got[a.partition]
		if a.offset >= int64(len(recs)) || be.BigEndian.Uint64(recs[a.offset].Key) != k {
			t.Fatalf("acknowledged record %d (partition %d offset %d) is missing after the crash", k, a.partition, a.offset)
		}
	}
	n.stop(t)
}

// partitionDir finds the log directory of topic's partition under dataDir.
func partitionDir(t *testing.T, dataDir, topic string, partition int) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dataDir, "logs", fmt.Sprintf("%s-%d.*", topic, partition)))
	if len(m) != 1 {
		t.Fatalf("log dirs for %s-%d: %v", topic, partition, m)
	}
	return m[0]
}

func segmentsOf(t *testing.T, dir string) []string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	sort.Strings(m)
	return m
}

// batchStarts returns the file positions of the batches in a .log file.
func batchStarts(t *testing.T, path string) []int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pos []int64
	for off := 0; off+12 <= len(b); {
		pos = append(pos, int64(off))
		off += 12 + int(be.BigEndian.Uint32(b[off+8:]))
	}
	return pos
}

func produceN(t *testing.T, bootstrap, topic string, from, n int) {
	t.Helper()
	cl := newClient(t, bootstrap, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1),
		kgo.ProducerBatchCompression(kgo.NoCompression())) // so byte positions are predictable
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := from; i < from+n; i++ {
		r := &kgo.Record{Key: be.BigEndian.AppendUint64(nil, uint64(i)), Value: crashValue(uint64(i))}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	cl.Close()
}

// TestTornTailRecovered cuts the active segment in the middle of its last
// batch, as a crash during a write would: on restart the log ends at the
// last whole batch and everything before it reads back intact.
func TestTornTailRecovered(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, nil, "dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "off")
	mustCreate(t, n.bootstrap, "torn", 1, nil)
	produceN(t, n.bootstrap, "torn", 0, 50) // 50 batches of one record
	n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited

	segs := segmentsOf(t, partitionDir(t, dir, "torn", 0))
	active := segs[len(segs)-1]
	starts := batchStarts(t, active)
	if len(starts) != 50 {
		t.Fatalf("%d batches on disk, want 50", len(starts))
	}
	fi, _ := os.Stat(active)
	cut := starts[49] + (fi.Size()-starts[49])/2
	if err := os.Truncate(active, cut); err != nil {
		t.Fatal(err)
	}

	n = startNode(t, nil, "dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "off")
	got := readAll(t, n.bootstrap, "torn")[0]
	if len(got) != 49 {
		t.Fatalf("%d records after recovery, want the 49 whole batches", len(got))
	}
	for i, r := range got {
		if r.Offset != int64(i) || string(r.Value) != string(crashValue(uint64(i))) {
			t.Fatalf("record %d damaged after recovery", i)
		}
	}
	// The log takes new writes at the recovered end.
	produceN(t, n.bootstrap, "torn", 49, 1)
	if got := readAll(t, n.bootstrap, "torn")[0]; len(got) != 50 || got[49].Offset != 49 {
		t.Fatalf("after a new write: %d records", len(got))
	}
	n.stop(t)
}

// TestFlippedByteDetected flips one byte inside a closed segment: fetching
// that range is refused (KAFKA_STORAGE_ERROR) and logged, never served,
// while the rest of the partition stays readable.
func TestFlippedByteDetected(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, nil, "dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "off")
	mustCreate(t, n.bootstrap, "flip", 1, map[string]*string{"segment.bytes": kadm.StringPtr("8192")})
	produceN(t, n.bootstrap, "flip", 0, 100)
	n.stop(t)

	pdir := partitionDir(t, dir, "flip", 0)
	segs := segmentsOf(t, pdir)
	if len(segs) < 3 {
		t.Fatalf("%d segments, want several", len(segs))
	}
	first := segs[0]
	starts := batchStarts(t, first)
	raw, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	// Flip a byte in the value of the second batch of the first segment.
	victim := starts[1] + 70
	raw[victim] ^= 0x20
	if err := os.WriteFile(first, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	secondBase := int64(len(starts)) // offsets of the second segment start here

	n = startNode(t, nil, "dev", "--data-dir", dir, "--listen", "127.0.0.1:0", "--http-listen", "off")
	cl := newClient(t, n.bootstrap)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topics, err := kadm.NewClient(cl).ListTopics(ctx, "flip")
	if err != nil {
		t.Fatal(err)
	}
	topicID := topics["flip"].ID
	fetch := func(offset int64) (int16, []byte) {
		req := kmsg.NewPtrFetchRequest()
		req.MaxBytes = 1 << 20
		req.MaxWaitMillis = 0
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "flip"
		rt.TopicID = topicID // the client picks the version; v13+ names topics by id
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset = offset
		rp.PartitionMaxBytes = 1 << 20
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		return p.ErrorCode, p.RecordBatches
	}
	// From offset 1, the damaged batch is the first one: refused.
	code, data := fetch(1)
	if code != kerr.KafkaStorageError.Code || len(data) != 0 {
		t.Fatalf("fetch of the damaged batch: error %v with %d bytes, want KAFKA_STORAGE_ERROR and nothing", kerr.ErrorForCode(code), len(data))
	}
	// From offset 0, only the intact batch before it is served.
	code, data = fetch(0)
	if code != 0 || len(data) != int(starts[1]) {
		t.Fatalf("fetch from 0: error %v with %d bytes, want the %d intact bytes", kerr.ErrorForCode(code), len(data), starts[1])
	}
	// Later segments are unaffected.
	code, data = fetch(secondBase)
	if code != 0 || len(data) == 0 {
		t.Fatalf("fetch from the next segment: error %v with %d bytes", kerr.ErrorForCode(code), len(data))
	}
	if !strings.Contains(strings.ToLower(n.stderr.String()), "corrupt") {
		t.Fatalf("the damage was not reported in the log:\n%s", n.stderr.String())
	}
	n.stop(t)
}
