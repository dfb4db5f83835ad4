package broker

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The side-by-side benchmarks run the same franz-go producer and consumer
// against franz-go's in-memory fake broker (kfake) and against Strata, in
// one process, so their ratio is meaningful on a noisy machine:
//
//	go test ./broker -run '^$' -bench 'Produce|Consume' -benchtime 200000x -count 5
//
// Strata writes every byte to its segment files; kfake keeps them in
// memory.

const (
	benchPartitions = 6
	benchValueSize  = 1024
)

type benchTarget struct {
	name  string
	start func(b *testing.B) (addr string, stop func())
}

var benchTargets = []benchTarget{
	{"kfake", func(b *testing.B) (string, func()) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(benchPartitions, "bench"))
		if err != nil {
			b.Fatal(err)
		}
		return c.ListenAddrs()[0], c.Close
	}},
	{"strata", func(b *testing.B) (string, func()) {
		br := testBroker(b, "")
		cl := testClient(b, br)
		createTopic(b, kadmFor(cl), "bench", benchPartitions, nil)
		cl.Close()
		return br.Addr().String(), func() {}
	}},
}

// benchValues are incompressible, so neither broker gets an easy ride from
// compression.
func benchValues(n int) [][]byte {
	vals := make([][]byte, n)
	buf := make([]byte, n*benchValueSize)
	rand.Read(buf)
	for i := range vals {
		vals[i] = buf[i*benchValueSize : (i+1)*benchValueSize]
	}
	return vals
}

func benchProduce(b *testing.B, addr string, n int, vals [][]byte) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addr),
		kgo.DefaultProduceTopic("bench"),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(time.Millisecond),
		kgo.MaxBufferedRecords(32<<10),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
	)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	var once sync.Once
	var perr error
	wg.Add(n)
	for i := 0; i < n; i++ {
		cl.Produce(ctx, &kgo.Record{Value: vals[i%len(vals)]}, func(_ *kgo.Record, err error) {
			if err != nil {
				once.Do(func() { perr = err })
			}
			wg.Done()
		})
	}
	wg.Wait()
	if perr != nil {
		b.Fatal(perr)
	}
}

func benchConsume(b *testing.B, addr string, n int) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addr),
		kgo.ConsumeTopics("bench"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(50<<20),
	)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	got := 0
	for got < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			b.Fatalf("consumed %d of %d", got, n)
		}
		fs.EachError(func(t string, p int32, err error) { b.Fatalf("fetch %s-%d: %v", t, p, err) })
		got += fs.NumRecords()
	}
}

// BenchmarkProduce: 1 KiB incompressible values, 6 partitions, acks=all,
// idempotent (franz-go's default), as fast as the producer goes.
func BenchmarkProduce(b *testing.B) {
	vals := benchValues(4096)
	for _, tgt := range benchTargets {
		b.Run(tgt.name, func(b *testing.B) {
			addr, stop := tgt.start(b)
			defer stop()
			b.SetBytes(benchValueSize)
			b.ResetTimer()
			benchProduce(b, addr, b.N, vals)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}

// BenchmarkConsume reads back b.N records produced before the timer starts.
func BenchmarkConsume(b *testing.B) {
	vals := benchValues(4096)
	for _, tgt := range benchTargets {
		b.Run(tgt.name, func(b *testing.B) {
			addr, stop := tgt.start(b)
			defer stop()
			benchProduce(b, addr, b.N, vals)
			b.SetBytes(benchValueSize)
			b.ResetTimer()
			benchConsume(b, addr, b.N)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
