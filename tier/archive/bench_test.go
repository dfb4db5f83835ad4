package archive

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"strata/localstack"
	"strata/segment"
	"strata/tier/format"
	"strata/tier/objstore"
)

// benchBucket writes mib MiB of 1 KiB text records, 64 to a batch, in
// segments of 8 MiB, to st.
func benchBucket(b *testing.B, st objstore.Store, mib int) {
	b.Helper()
	l, err := segment.Open(b.TempDir(), segment.Config{SegmentBytes: 8 << 20, MaxBatchBytes: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	value := make([]byte, 1<<10)
	for i := range value {
		value[i] = 'a' + byte(i%26)
	}
	recs := make([]rec, 64)
	for n := 0; n < mib<<10; n += len(recs) {
		for i := range recs {
			recs[i] = rec{key: fmt.Appendf(nil, "key-%d", n+i), value: value, ts: ts0 + int64(n+i)}
		}
		if _, err := l.Append(batch(b, -1, 0, 0, kgo.NoCompression(), recs...), 0); err != nil {
			b.Fatal(err)
		}
	}
	upload(b, l, st, tp)
}

// BenchmarkExport compares, on one store in one run, the throughput of
// `bucket export` (JSON lines, and raw batches) with that of plain GETs
// of the same segments' log parts at the same parallelism: the figure
// docs/benchmarks.md reports. MB/s are of log bytes read. The directory
// store serves GETs from the page cache, at memory speed; the in-process
// S3 server (over loopback HTTP) is closer to what a real store costs.
func BenchmarkExport(b *testing.B) {
	b.Run("dir", func(b *testing.B) {
		st, err := objstore.NewDir(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		benchExport(b, st)
	})
	b.Run("s3", func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st, err := objstore.NewS3(ctx, localstack.TestS3(b).Config())
		if err != nil {
			b.Fatal(err)
		}
		benchExport(b, st)
	})
}

func benchExport(b *testing.B, st objstore.Store) {
	benchBucket(b, st, 64)
	a := Open(st)
	ctx := context.Background()
	p, ok, err := a.Partition(ctx, tp)
	if err != nil || !ok {
		b.Fatal(ok, err)
	}
	var segs []format.RemoteSegment
	var logBytes int64
	if err := p.root.Walk(ctx, a.pages, func(_ *format.PageRef, s *format.RemoteSegment) error {
		if s != nil {
			segs = append(segs, *s)
			logBytes += s.Log.Len
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	f := Fetch{}.withDefaults()
	get := func() {
		// The segments' log parts in chunks, Parallel GETs at a time:
		// what the export's fetches cost with nothing done with the bytes.
		sem := make(chan struct{}, f.Parallel)
		var wg sync.WaitGroup
		for _, s := range segs {
			for off := s.Log.Offset; off < s.Log.End(); off += f.ChunkBytes {
				n := min(f.ChunkBytes, s.Log.End()-off)
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					rc, err := st.GetRange(ctx, s.Key, off, n)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, rc)
					rc.Close()
				}()
			}
		}
		wg.Wait()
	}
	export := func(raw bool) {
		if _, err := a.Export(ctx, p, ExportOptions{Dir: b.TempDir(), Raw: raw}); err != nil {
			b.Fatal(err)
		}
	}
	get() // warm the page cache for every contender alike
	measure := func(fn func()) float64 {
		start := time.Now()
		fn()
		return float64(logBytes) / (1 << 20) / time.Since(start).Seconds()
	}
	// Medians, of the rates and of the ratios each iteration measured:
	// on a shared machine the load changes from one second to the next.
	var getMBs, jsonMBs, rawMBs, jsonRatio, rawRatio []float64
	b.SetBytes(logBytes)
	b.ResetTimer()
	for range b.N {
		g, j, r := measure(get), measure(func() { export(false) }), measure(func() { export(true) })
		getMBs, jsonMBs, rawMBs = append(getMBs, g), append(jsonMBs, j), append(rawMBs, r)
		jsonRatio, rawRatio = append(jsonRatio, j/g), append(rawRatio, r/g)
	}
	b.ReportMetric(median(getMBs), "get-MB/s")
	b.ReportMetric(median(jsonMBs), "export-json-MB/s")
	b.ReportMetric(median(rawMBs), "export-raw-MB/s")
	b.ReportMetric(median(jsonRatio), "json/get")
	b.ReportMetric(median(rawRatio), "raw/get")
}

func median(v []float64) float64 {
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}
