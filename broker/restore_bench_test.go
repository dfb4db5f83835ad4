package broker

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"strata/tier/objstore"
)

// BenchmarkRestore1000Partitions measures a restore of 10 topics of 100
// partitions each from the directory store (docs/benchmarks.md; the
// target is under 30 s): the plan (a checkpoint and 1,000 manifests
// read), the restore (1,000 partitions created in the metadata and opened
// at the bucket's end), and the time until every partition serves (its
// leader knows the bucket's end and its high watermark is there). Cluster
// A, which wrote the bucket, is set up once; each iteration restores into
// a fresh node.
func BenchmarkRestore1000Partitions(b *testing.B) {
	const topics, parts = 10, 100
	store, err := objstore.NewDir(filepath.Join(b.TempDir(), "bucket"))
	if err != nil {
		b.Fatal(err)
	}
	a := restoreBrokerTB(b, store, func(c *Config) { c.Tier.UploadInterval = 200 * time.Millisecond })
	adm := testAdmin(b, a)
	for i := range topics {
		createTopic(b, adm, fmt.Sprintf("t%02d", i), parts, map[string]*string{"remote.storage.enable": ptr("true")})
	}
	for i := range topics {
		produceKeyed(b, a, fmt.Sprintf("t%02d", i), 3*parts, 200)
	}
	for i := range topics {
		waitAllInBucket(b, a, fmt.Sprintf("t%02d", i), parts)
	}
	clusterID := a.node.ClusterID()
	writeCheckpoint(b, a, store)
	if err := a.Close(); err != nil {
		b.Fatal(err)
	}

	var plan, restore, serve time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		n := restoreBrokerTB(b, store, func(c *Config) { c.ClusterID = clusterID })
		b.StartTimer()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		began := time.Now()
		p, err := n.node.PlanRestore(ctx, nil, "")
		if err != nil {
			b.Fatal(err)
		}
		if r := p.Refused(); len(r) > 0 {
			b.Fatalf("refused: %+v", r)
		}
		planned := time.Now()
		if err := n.node.Restore(ctx, p, nil); err != nil {
			b.Fatal(err)
		}
		restored := time.Now()
		waitFor(b, 5*time.Minute, "every partition to serve", func() bool {
			for _, tr := range p.Topics {
				for _, pr := range tr.Partitions {
					pp := n.partition(tr.Name, pr.Partition)
					if pp == nil || pp.CheckRemoteKnown() != nil || pp.HighWatermark() < pr.End {
						return false
					}
				}
			}
			return true
		})
		cancel()
		plan += planned.Sub(began)
		restore += restored.Sub(planned)
		serve += time.Since(began)
		b.StopTimer()
		n.Close()
		b.StartTimer()
	}
	b.ReportMetric(plan.Seconds()/float64(b.N), "plan-s")
	b.ReportMetric(restore.Seconds()/float64(b.N), "restore-s")
	b.ReportMetric(serve.Seconds()/float64(b.N), "serving-s")
}

// restoreBrokerTB is restoreBroker for a benchmark.
func restoreBrokerTB(tb testing.TB, store objstore.Store, mutate ...func(*Config)) *Broker {
	return testBroker(tb, "", append([]func(*Config){func(c *Config) {
		c.Tier = TierConfig{Store: store, UploadInterval: 20 * time.Millisecond, ChunkBytes: 1 << 20, CacheBytes: 8 << 20, IdleUpload: 100 * time.Millisecond}
		c.OffsetsPartitions = 2
		c.GroupInitialRebalanceDelay = -1
	}}, mutate...)...)
}
