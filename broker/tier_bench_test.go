package broker

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/localstack"
	"strata/tier"
	"strata/tier/format"
	"strata/tier/objstore"
)

var tierBenchMB = flag.Int("tier-bench-mb", 512, "MB of history BenchmarkTier produces and replays from the bucket")

// BenchmarkTier measures the cold tier against the issue-4 targets, on one
// bucket served by the in-process S3 server (objects on disk):
//
//   - cold-replay/strata: a consumer from the earliest offset reads the
//     history that is only in the bucket, through a broker restarted with
//     a cold chunk cache; cold-replay/raw: parallel ranged GETs of the
//     same bytes (same chunk size, ReadWorkers at once) from the same
//     server. Target: strata >= 80% of raw.
//   - the object-store requests of uploading and of replaying, from
//     objstore.Metrics (PUTs per segment, GETs per GB).
//   - hot-latency: end-to-end latency of a long-poll consumer tailing a
//     hot topic (a producer at 500 records/s) with and without a
//     concurrent cold replay of the history.
//
// Run with -benchtime=Nx: each iteration of a cold-replay sub-benchmark
// replays the whole history once. The fixture (producing and uploading
// the history) is built once per run, outside the timings.
//
//	go test ./broker -run '^$' -bench BenchmarkTier -benchtime=3x -tier-bench-mb=512
func BenchmarkTier(b *testing.B) {
	const (
		partitions = 6
		valueSize  = 4096
		chunkBytes = tier.DefaultChunkBytes
		workers    = tier.DefaultReadWorkers
	)
	// 16 MiB segments, or smaller for a small -tier-bench-mb so that each
	// partition still has several segments in the bucket.
	segBytes := min(16<<20, *tierBenchMB<<20/partitions/4)
	ctx := context.Background()
	dir := b.TempDir()
	s3, stop, err := localstack.StartS3(ctx, filepath.Join(dir, "s3"), "bench")
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	rawStore, err := objstore.NewS3(ctx, s3.Config())
	if err != nil {
		b.Fatal(err)
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
	benchWaitUploaded(b, br, "history", partitions)
	upload := metrics.Counts().Sub(before)
	b.Logf("fixture: %d records of %d bytes produced and uploaded in %v", n, valueSize, time.Since(t0).Round(time.Millisecond))

	var segs []format.RemoteSegment
	var logBytes int64
	for i := range int32(partitions) {
		m, err := br.tier.Manifest(ctx, br.partition("history", i).bucketName())
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range m.Segments {
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

	var strataMBs, rawMBs []float64
	b.Run("cold-replay/strata", func(b *testing.B) {
		b.SetBytes(logBytes)
		for range b.N {
			b.StopTimer()
			br := start() // empty chunk cache
			ends := remoteEnds(b, br, "history", partitions)
			before := metrics.Counts()
			b.StartTimer()
			t0 := time.Now()
			replayTo(b, br, "history", ends)
			el := time.Since(t0)
			b.StopTimer()
			replay := metrics.Counts().Sub(before)
			strataMBs = append(strataMBs, float64(logBytes)/(1<<20)/el.Seconds())
			gb := float64(logBytes) / (1 << 30)
			b.Logf("replay: %.0f MiB/s; %d GETs (%.0f per GiB, floor %.0f chunk GETs per GiB), %.1f MiB read, %d LISTs",
				strataMBs[len(strataMBs)-1], replay[objstore.OpGet].Requests, float64(replay[objstore.OpGet].Requests)/gb,
				float64(1<<30)/chunkBytes, float64(replay[objstore.OpGet].Bytes)/(1<<20), replay[objstore.OpList].Requests)
			if err := br.Close(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(medianOf(strataMBs), "median-MiB/s")
	})
	b.Run("cold-replay/raw", func(b *testing.B) {
		b.SetBytes(logBytes)
		for range b.N {
			t0 := time.Now()
			parallelGets(b, rawStore, segs, chunkBytes, workers)
			rawMBs = append(rawMBs, float64(logBytes)/(1<<20)/time.Since(t0).Seconds())
			b.Logf("raw: %.0f MiB/s", rawMBs[len(rawMBs)-1])
		}
		b.ReportMetric(medianOf(rawMBs), "median-MiB/s")
	})
	if len(strataMBs) > 0 && len(rawMBs) > 0 {
		b.Logf("cold replay: strata %.0f MiB/s, raw %.0f MiB/s (medians of %d and %d runs): %.0f%% of raw",
			medianOf(strataMBs), medianOf(rawMBs), len(strataMBs), len(rawMBs), 100*medianOf(strataMBs)/medianOf(rawMBs))
	}

	b.Run("hot-latency", func(b *testing.B) {
		for range b.N {
			br := start()
			ends := remoteEnds(b, br, "history", partitions)
			idle := hotLatencies(b, br, "hot", 5*time.Second, nil)
			var replayed time.Duration
			during := hotLatencies(b, br, "hot", 0, func() {
				t0 := time.Now()
				replayTo(b, br, "history", ends)
				replayed = time.Since(t0)
			})
			if err := br.Close(); err != nil {
				b.Fatal(err)
			}
			b.Logf("hot consumer: idle p50 %v p99 %v max %v (%d records); during a %v cold replay p50 %v p99 %v max %v (%d records)",
				pct(idle, 50), pct(idle, 99), pct(idle, 100), len(idle), replayed.Round(time.Millisecond),
				pct(during, 50), pct(during, 99), pct(during, 100), len(during))
			b.ReportMetric(float64(pct(idle, 50).Microseconds())/1000, "idle-p50-ms")
			b.ReportMetric(float64(pct(idle, 99).Microseconds())/1000, "idle-p99-ms")
			b.ReportMetric(float64(pct(during, 50).Microseconds())/1000, "replay-p50-ms")
			b.ReportMetric(float64(pct(during, 99).Microseconds())/1000, "replay-p99-ms")
		}
	})
}

// benchWaitUploaded waits until every closed segment of topic is in the
// bucket.
func benchWaitUploaded(tb testing.TB, b *Broker, topic string, partitions int32) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		settled := true
		for i := range partitions {
			p := b.partition(topic, i)
			segs, err := p.log.ClosedSegments(0)
			if err != nil {
				tb.Fatal(err)
			}
			// Uploaded segments are deleted locally (local.retention.bytes=0).
			if p.remoteEnd.Load() <= 0 || len(segs) > 0 && p.remoteEnd.Load() < segs[len(segs)-1].EndOffset {
				settled = false
			}
		}
		if settled {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatal("uploads did not settle in 10 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// remoteEnds returns the bucket's end offset of each partition of topic.
func remoteEnds(tb testing.TB, b *Broker, topic string, partitions int32) map[int32]int64 {
	ends := map[int32]int64{}
	for i := range partitions {
		m, err := b.tier.Manifest(context.Background(), b.partition(topic, i).bucketName())
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
