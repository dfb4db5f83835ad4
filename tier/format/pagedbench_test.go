package format

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkPagedManifest measures, at several history lengths, what one
// upload costs (manifest bytes written and CPU for the transition and its
// encoding), how long decoding a root takes (opening a partition), and
// what a first lookup after a restart fetches (pages, one per level) and
// costs with the pages decoded from their bytes. The figures are in
// docs/benchmarks.md:
//
//	go test -run XXX -bench BenchmarkPagedManifest -benchtime 200x ./tier/format/
func BenchmarkPagedManifest(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("segments=%d", n), func(b *testing.B) {
			tail := make([]RemoteSegment, n)
			for i := range tail {
				tail[i] = pseg(int64(i)*10, int64(i)*10+9, int64(i), 1, byte(i>>24))
			}
			src := newMemPages()
			ch, err := (&Root{TopicPartition: testTP, LeaderEpoch: 1, Tail: tail[:n-1], V1: true}).Append(tail[n-1], 1, DefaultPaging)
			if err != nil {
				b.Fatal(err)
			}
			for _, p := range ch.Pages {
				src.objects[p.Ref.Key] = p.Data
			}
			root := ch.Root
			raw, _ := EncodeRoot(root)
			ctx := context.Background()

			next := make([]RemoteSegment, b.N)
			for i := range next {
				base := int64(n+i) * 10
				next[i] = pseg(base, base+9, int64(n+i), 1, byte(i))
			}
			b.ReportAllocs()
			b.ResetTimer()
			written := 0
			r := root
			for i := range b.N {
				ch, err := r.Append(next[i], 1, DefaultPaging)
				if err != nil {
					b.Fatal(err)
				}
				enc, err := EncodeRoot(ch.Root)
				if err != nil {
					b.Fatal(err)
				}
				written += len(enc)
				for _, p := range ch.Pages {
					written += len(p.Data)
				}
				r = ch.Root
			}
			b.StopTimer()
			b.ReportMetric(float64(written)/float64(b.N), "manifest-B/upload")
			b.ReportMetric(float64(len(raw)), "root-B")

			// Open: decode the root alone.
			const opens = 50
			t0 := nowNanos()
			for range opens {
				if _, err := DecodeRoot(raw); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(nowNanos()-t0)/opens/1e3, "open-µs")

			// First lookups after a restart, at both ends: the pages on the
			// way are read from their bytes (no cache).
			t0 = nowNanos()
			src.resetFetches()
			for _, o := range []int64{0, int64(n)*10 - 1} {
				if _, ok, err := root.Find(ctx, src, o); err != nil || !ok {
					b.Fatalf("find %d: %v %v", o, ok, err)
				}
			}
			b.ReportMetric(float64(nowNanos()-t0)/2/1e3, "first-find-µs")
			b.ReportMetric(float64(src.fetches)/2, "pages/first-find")
		})
	}
}

func nowNanos() int64 { return time.Now().UnixNano() }
