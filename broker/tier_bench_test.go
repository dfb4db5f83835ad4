package broker

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/localstack"
	"strata/segment"
	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

var tierBenchMB = flag.Int("tier-bench-mb", 1024, "MB of history BenchmarkTier produces and replays from the bucket")

// BenchmarkTier measures the cold tier against the issue-4 targets, on one
// bucket served by the in-process S3 server (objects on disk), or by the
// S3 that STRATA_S3_* name:
//
//   - cold-replay/strata: a franz-go consumer from the earliest offset
//     reads the history that is only in the bucket, through a broker
//     restarted with a cold chunk cache. cold-replay/strata-wire: the same
//     with a bare Kafka-protocol consumer that discards what it fetches.
//     cold-replay/raw: parallel ranged GETs of the same bytes (same chunk
//     size, ReadWorkers at once) from the same server, discarded. Target:
//     strata >= 80% of raw.
//   - local-replay/strata and local-replay/strata-wire: the same consumers
//     reading the same amount of history kept wholly on local disk (in the
//     page cache): the ceiling of any replay through a broker on this
//     machine. With the CPU time each mode costs per GiB, this bounds what
//     a cold replay can reach when the S3 server, the broker and the
//     consumer share the machine's cores.
//   - the object-store requests of uploading and of replaying, from
//     objstore.Metrics (PUTs per segment, GETs per GiB).
//   - hot-latency: produce-to-consume latency of a long-poll consumer
//     tailing a hot topic (a producer at 500 records/s), idle and during
//     each kind of replay.
//
// The broker's GOMAXPROCS floor (RaiseProcs) applies, as in the strata
// binary; set GOMAXPROCS to measure without it. Run with -benchtime=Nx:
// each iteration of a replay sub-benchmark replays the whole history once.
// The fixture (producing and uploading the history) is built once per
// run, outside the timings.
//
//	go test ./broker -run '^$' -bench BenchmarkTier -benchtime=5x
func BenchmarkTier(b *testing.B) {
	const (
		partitions = 6
		valueSize  = 4096
		chunkBytes = tier.DefaultChunkBytes
	)
	// 16 MiB segments, or smaller for a small -tier-bench-mb so that each
	// partition still has several segments in the bucket.
	segBytes := min(16<<20, *tierBenchMB<<20/partitions/4)
	workers := tier.DefaultReadWorkers
	b.Logf("GOMAXPROCS %d on %d CPUs", RaiseProcs(), runtime.NumCPU())
	// The testing package sets GOMAXPROCS (to -cpu) for every
	// sub-benchmark; each raises it again, as the strata binary does.
	ctx := context.Background()
	dir := b.TempDir()
	// The S3 named by STRATA_S3_* (e.g. `strata localstack s3` in a
	// process of its own, or MinIO), else the in-process server.
	s3, external := localstack.FromEnv()
	if !external {
		var stop func() error
		var err error
		s3, stop, err = localstack.StartS3(ctx, filepath.Join(dir, "s3"), "bench")
		if err != nil {
			b.Fatal(err)
		}
		defer stop()
	}
	rawStore, err := objstore.NewS3(ctx, s3.Config())
	if err != nil {
		b.Fatal(err)
	}
	if external {
		if rawStore, err = objstore.WithPrefix(rawStore, fmt.Sprintf("bench-%d", time.Now().UnixNano())); err != nil {
			b.Fatal(err)
		}
	}
	metrics := objstore.NewMetrics()
	store := objstore.WithMetrics(rawStore, metrics)
	brokerDir := filepath.Join(dir, "broker")
	start := func() *Broker {
		return testBroker(b, brokerDir, func(c *Config) {
			c.Tier = TierConfig{Store: store, UploadInterval: 50 * time.Millisecond, ChunkBytes: chunkBytes, ReadWorkers: workers}
		})
	}

	// The fixture: history produced, uploaded and deleted locally (the
	// active segment of each partition stays local).
	br := start()
	createTopic(b, testAdmin(b, br), "history", partitions, map[string]*string{
		"segment.bytes":         ptr(fmt.Sprint(segBytes)),
		"local.retention.bytes": ptr("0"),
	})
	createTopic(b, testAdmin(b, br), "hot", 1, nil)
	n := *tierBenchMB << 20 / valueSize
	before := metrics.Counts()
	t0 := time.Now()
	produceKeyed(b, br, "history", n, valueSize, kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(8<<10), kgo.ProducerBatchMaxBytes(1<<20))
	waitUploadedWithin(b, br, "history", partitions, 10*time.Minute)
	upload := metrics.Counts().Sub(before)
	b.Logf("fixture: %d records of %d bytes produced and uploaded in %v", n, valueSize, time.Since(t0).Round(time.Millisecond))

	var segs []format.RemoteSegment
	var logBytes int64
	for i := range int32(partitions) {
		m, err := br.tier.Manifest(ctx, br.partition("history", i).BucketName())
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range remoteSegments(b, br.tier, m) {
			segs = append(segs, s)
			logBytes += s.Log.Len
		}
	}
	gb := float64(upload[objstore.OpPut].Bytes) / (1 << 30)
	b.Logf("upload: %d segments, %.1f MiB put; %d PUTs (%.2f per segment, %.0f per GiB), %d GETs, %d LISTs, %d errors",
		len(segs), float64(upload[objstore.OpPut].Bytes)/(1<<20), upload[objstore.OpPut].Requests,
		float64(upload[objstore.OpPut].Requests)/float64(len(segs)), float64(upload[objstore.OpPut].Requests)/gb,
		upload[objstore.OpGet].Requests, upload[objstore.OpList].Requests, upload[objstore.OpPut].Errors)
	if err := br.Close(); err != nil {
		b.Fatal(err)
	}
	b.Logf("history in the bucket: %d segments, %.1f MiB of log bytes", len(segs), float64(logBytes)/(1<<20))

	// The same history kept wholly local (remote.storage.enable=false),
	// in the page cache: what the same consumers get from a broker when
	// no bucket is involved, the ceiling for any cold replay.
	br = start()
	createTopic(b, testAdmin(b, br), "history-local", partitions, map[string]*string{
		"segment.bytes":         ptr(fmt.Sprint(segBytes)),
		"remote.storage.enable": ptr("false"),
	})
	produceKeyed(b, br, "history-local", n, valueSize, kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(8<<10), kgo.ProducerBatchMaxBytes(1<<20))
	localEnds := map[int32]int64{}
	var localBytes int64
	for i := range int32(partitions) {
		p := br.partition("history-local", i)
		localEnds[i] = p.HighWatermark()
		localBytes += p.Log().Size()
	}
	if err := br.Close(); err != nil {
		b.Fatal(err)
	}

	// Write the fixture's dirty pages out now, so that the kernel's
	// writeback does not compete with the measurements.
	syscall.Sync()

	type consumer func(testing.TB, *Broker, string, map[int32]int64)
	speed, cpu := map[string][]float64{}, map[string][]float64{} // MiB/s, CPU seconds per GiB
	// measure runs f once and records its speed and the CPU time the
	// whole process (S3 server, broker and clients) spent per GiB.
	measure := func(b *testing.B, name string, bytes int64, f func()) {
		t0, c0 := time.Now(), processCPU()
		b.StartTimer()
		f()
		b.StopTimer()
		el, used := time.Since(t0), processCPU()-c0
		speed[name] = append(speed[name], float64(bytes)/(1<<20)/el.Seconds())
		cpu[name] = append(cpu[name], used.Seconds()/(float64(bytes)/(1<<30)))
		b.Logf("%s: %.0f MiB/s, %.2f CPU seconds per GiB (%.2f cores busy)", name,
			speed[name][len(speed[name])-1], cpu[name][len(cpu[name])-1], used.Seconds()/el.Seconds())
	}
	replay := func(name, topic string, bytes int64, consume consumer) {
		b.Run(name, func(b *testing.B) {
			RaiseProcs()
			b.SetBytes(bytes)
			b.StopTimer()
			for range b.N {
				br := start() // empty chunk cache
				ends := localEnds
				if topic == "history" {
					ends = remoteEnds(b, br, topic, partitions)
				}
				before := metrics.Counts()
				measure(b, name, bytes, func() { consume(b, br, topic, ends) })
				if got := metrics.Counts().Sub(before); got[objstore.OpGet].Requests > 0 {
					gb := float64(bytes) / (1 << 30)
					b.Logf("  %d GETs (%.0f per GiB, floor %.0f chunk GETs per GiB), %.1f MiB read, %d LISTs",
						got[objstore.OpGet].Requests, float64(got[objstore.OpGet].Requests)/gb,
						float64(1<<30)/chunkBytes, float64(got[objstore.OpGet].Bytes)/(1<<20), got[objstore.OpList].Requests)
				}
				if err := br.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(medianOf(speed[name]), "median-MiB/s")
		})
	}
	replay("cold-replay/strata", "history", logBytes, replayTo)
	replay("cold-replay/strata-wire", "history", logBytes, wireReplayTo)
	replay("local-replay/strata", "history-local", localBytes, replayTo)
	replay("local-replay/strata-wire", "history-local", localBytes, wireReplayTo)
	b.Run("cold-replay/raw", func(b *testing.B) {
		RaiseProcs()
		b.SetBytes(logBytes)
		b.StopTimer()
		for range b.N {
			measure(b, "raw", logBytes, func() { parallelGets(b, rawStore, segs, chunkBytes, workers) })
		}
		b.ReportMetric(medianOf(speed["raw"]), "median-MiB/s")
	})
	if raw := medianOf(speed["raw"]); raw > 0 {
		b.Logf("median speed, least CPU: %-24s %5.0f MiB/s, %.2f CPU s/GiB (%d runs)", "raw GETs", raw, slices.Min(cpu["raw"]), len(speed["raw"]))
		for _, name := range []string{"cold-replay/strata", "cold-replay/strata-wire", "local-replay/strata", "local-replay/strata-wire"} {
			if len(speed[name]) > 0 {
				b.Logf("                         %-24s %5.0f MiB/s, %.2f CPU s/GiB (%d runs): %3.0f%% of raw", name,
					medianOf(speed[name]), slices.Min(cpu[name]), len(speed[name]), 100*medianOf(speed[name])/raw)
			}
		}
		for _, c := range []string{"strata", "strata-wire"} {
			cold, local := medianOf(speed["cold-replay/"+c]), medianOf(speed["local-replay/"+c])
			if cold == 0 || local == 0 {
				continue
			}
			// A cold replay does the raw reader's work (the S3 server
			// and the GETs) and the local replay's (serving the bytes
			// to the consumer), on the same cores: with the least CPU
			// each was seen to need, it cannot beat this.
			bound := float64(runtime.NumCPU()) / (slices.Min(cpu["raw"]) + slices.Min(cpu["local-replay/"+c])) * 1024
			b.Logf("  %s: cold replay at %.0f%% of local replay; the CPU bound of a cold replay on %d cores is %.0f MiB/s, %.0f%% of raw",
				c, 100*cold/local, runtime.NumCPU(), bound, 100*bound/raw)
		}
	}

	// The hot consumer's latency alone, then during a replay of the
	// history: from the bucket (cold) and, for comparison, the same
	// bytes from local disk, with either consumer.
	b.Run("hot-latency", func(b *testing.B) {
		RaiseProcs()
		lat := map[string][]time.Duration{}
		for range b.N {
			br := start()
			coldEnds := remoteEnds(b, br, "history", partitions)
			lat["idle"] = append(lat["idle"], hotLatencies(b, br, "hot", 5*time.Second, nil)...)
			for _, r := range []struct {
				name    string
				topic   string
				ends    map[int32]int64
				consume consumer
			}{
				{"cold-replay/strata", "history", coldEnds, replayTo},
				{"local-replay/strata", "history-local", localEnds, replayTo},
				{"cold-replay/strata-wire", "history", coldEnds, wireReplayTo},
				{"local-replay/strata-wire", "history-local", localEnds, wireReplayTo},
			} {
				var replayed time.Duration
				during := hotLatencies(b, br, "hot", 0, func() {
					t0 := time.Now()
					r.consume(b, br, r.topic, r.ends)
					replayed = time.Since(t0)
				})
				lat[r.name] = append(lat[r.name], during...)
				b.Logf("hot consumer during a %v %s: p50 %v p99 %v max %v (%d records)", replayed.Round(time.Millisecond), r.name,
					pct(during, 50), pct(during, 99), pct(during, 100), len(during))
				if r.name == "cold-replay/strata" {
					// The chunk cache is warm now; start cold again.
					if err := br.Close(); err != nil {
						b.Fatal(err)
					}
					br = start()
				}
			}
			if err := br.Close(); err != nil {
				b.Fatal(err)
			}
		}
		for _, name := range []string{"idle", "cold-replay/strata", "local-replay/strata", "cold-replay/strata-wire", "local-replay/strata-wire"} {
			l := lat[name]
			b.Logf("hot consumer, all runs, %-25s p50 %v p99 %v max %v (%d records)", name+":", pct(l, 50), pct(l, 99), pct(l, 100), len(l))
		}
		b.ReportMetric(float64(pct(lat["idle"], 50).Microseconds())/1000, "idle-p50-ms")
		b.ReportMetric(float64(pct(lat["idle"], 99).Microseconds())/1000, "idle-p99-ms")
		b.ReportMetric(float64(pct(lat["cold-replay/strata"], 50).Microseconds())/1000, "replay-p50-ms")
		b.ReportMetric(float64(pct(lat["cold-replay/strata"], 99).Microseconds())/1000, "replay-p99-ms")
	})

}

// remoteEnds returns the bucket's end offset of each partition of topic.
func remoteEnds(tb testing.TB, b *Broker, topic string, partitions int32) map[int32]int64 {
	ends := map[int32]int64{}
	for i := range partitions {
		m, err := b.tier.Manifest(context.Background(), b.partition(topic, i).BucketName())
		if err != nil {
			tb.Fatal(err)
		}
		ends[i] = m.EndOffset()
	}
	return ends
}

// replayTo consumes topic from the earliest offset until every partition
// has delivered the offsets below ends[partition]: the part of the log
// that is only in the bucket.
func replayTo(tb testing.TB, b *Broker, topic string, ends map[int32]int64) {
	cl := testClient(tb, b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(16<<20))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	left := len(ends)
	done := map[int32]bool{}
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			tb.Fatal("replay did not finish in 10 minutes")
		}
		fs.EachError(func(t string, p int32, err error) { tb.Fatalf("fetch %s-%d: %v", t, p, err) })
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) > 0 && !done[p.Partition] && p.Records[len(p.Records)-1].Offset >= ends[p.Partition]-1 {
				done[p.Partition] = true
				left--
			}
		})
	}
}

// parallelGets reads the log bytes of segs with ranged GETs of chunk bytes,
// workers at a time, and discards them: what a reader of the bucket could
// get from the server without Strata.
func parallelGets(tb testing.TB, s objstore.Store, segs []format.RemoteSegment, chunk int64, workers int) {
	type job struct {
		key    string
		off, n int64
	}
	jobs := make(chan job)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				rc, err := s.GetRange(context.Background(), j.key, j.off, j.n)
				if err == nil {
					_, err = io.Copy(io.Discard, rc)
					rc.Close()
				}
				if err != nil {
					errs <- err
					for range jobs {
					}
					return
				}
			}
		})
	}
	for _, sg := range segs {
		for off := int64(0); off < sg.Log.Len; off += chunk {
			jobs <- job{sg.Key, off, min(chunk, sg.Log.Len-off)}
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		tb.Fatal(err)
	default:
	}
}

// hotLatencies produces to topic at 500 records/s and consumes it with a
// long-poll consumer, returning each record's produce-to-consume latency.
// It runs for d, or, when during is not nil, for as long as during runs.
func hotLatencies(tb testing.TB, b *Broker, topic string, d time.Duration, during func()) []time.Duration {
	prod := testClient(tb, b, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0))
	defer prod.Close()
	cons := testClient(tb, b, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()), kgo.FetchMaxWait(5*time.Second))
	defer cons.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Let the consumer find its position before measuring.
	warm, wcancel := context.WithTimeout(ctx, 2*time.Second)
	cons.PollFetches(warm)
	wcancel()

	var lats []time.Duration
	var cwg sync.WaitGroup
	cwg.Go(func() {
		for {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				sent := time.Unix(0, int64(binary.BigEndian.Uint64(r.Value)))
				lats = append(lats, now.Sub(sent))
			})
		}
	})
	stopProd := make(chan struct{})
	var pwg sync.WaitGroup
	pwg.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopProd:
				return
			case <-tick.C:
			}
			v := make([]byte, 256)
			binary.BigEndian.PutUint64(v, uint64(time.Now().UnixNano()))
			prod.Produce(ctx, &kgo.Record{Value: v}, nil)
		}
	})
	if during != nil {
		during()
	} else {
		time.Sleep(d)
	}
	close(stopProd)
	pwg.Wait()
	if err := prod.Flush(ctx); err != nil {
		tb.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // the last records reach the consumer
	cancel()
	cwg.Wait()
	return lats
}

// pct returns the p-th percentile of ds (p = 100: the maximum).
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p/100))]
}

func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// wireReplayTo reads topic from the earliest offset up to ends, like
// replayTo, but as a bare Kafka-protocol consumer on one connection:
// Fetch v12 requests built and responses decoded with kmsg, responses read
// into one reused buffer, the record batches walked by header and then
// discarded, as the raw reader discards its GETs. It measures what Strata
// adds to the bytes' way from the bucket to a client, without the cost of
// a client library allocating every response and turning every record
// into an object.
func wireReplayTo(tb testing.TB, b *Broker, topic string, ends map[int32]int64) {
	conn, err := net.Dial("tcp", b.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Minute))
	next := map[int32]int64{}
	for p := range ends {
		next[p] = 0
	}
	f := kmsg.NewRequestFormatter(kmsg.FormatterClientID("wire-replay"))
	var out, in []byte
	for corr := int32(0); len(next) > 0; corr++ {
		req := kmsg.NewPtrFetchRequest()
		req.Version = 12
		req.ReplicaID = -1
		req.MaxWaitMillis = 500
		req.MaxBytes = 64 << 20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = topic
		for p, off := range next {
			rp := kmsg.NewFetchRequestTopicPartition()
			rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, off, 16<<20
			rp.CurrentLeaderEpoch, rp.LogStartOffset = -1, -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		out = f.AppendRequest(out[:0], req, corr)
		if _, err := conn.Write(out); err != nil {
			tb.Fatal(err)
		}
		var size [4]byte
		if _, err := io.ReadFull(conn, size[:]); err != nil {
			tb.Fatal(err)
		}
		n := int(binary.BigEndian.Uint32(size[:]))
		in = slices.Grow(in[:0], n)[:n]
		if _, err := io.ReadFull(conn, in); err != nil {
			tb.Fatal(err)
		}
		// Response header v1: correlation id and empty tagged fields.
		if n < 5 || int32(binary.BigEndian.Uint32(in)) != corr {
			tb.Fatalf("response %d: bad header", corr)
		}
		resp := kmsg.NewPtrFetchResponse()
		resp.Version = 12
		if err := resp.ReadFrom(in[5:]); err != nil {
			tb.Fatal(err)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			tb.Fatal(err)
		}
		for _, t := range resp.Topics {
			for _, rp := range t.Partitions {
				if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
					tb.Fatalf("fetch %s-%d at %d: %v", topic, rp.Partition, next[rp.Partition], err)
				}
				for rec := rp.RecordBatches; len(rec) >= 61; {
					h, err := segment.ParseBatchHeader(rec)
					if err != nil || h.Size() > len(rec) {
						break // a partial batch at the end
					}
					next[rp.Partition] = h.LastOffset() + 1
					rec = rec[h.Size():]
				}
				if next[rp.Partition] >= ends[rp.Partition] {
					delete(next, rp.Partition)
				}
			}
		}
	}
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
