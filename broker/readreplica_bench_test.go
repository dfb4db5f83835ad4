package broker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/broker/node"
	"strata/tier"
	"strata/tier/objstore"
)

// BenchmarkReadReplicaLag measures what a consumer of a read replica
// waits for a record (issue 23): each iteration produces one record at
// the source, notes when the source's manifest first names it (its
// upload) and when the replica's end offset first passes it. It reports
// the medians of upload to visibility (the replica's poll; its worst
// case too), and of produce to visibility (the source's upload
// interval added), on the directory store, for two poll intervals.
//
//	go test ./broker -run '^$' -bench ReadReplicaLag -benchtime 20x
func BenchmarkReadReplicaLag(b *testing.B) {
	for _, poll := range []time.Duration{100 * time.Millisecond, time.Second} {
		b.Run(fmt.Sprintf("poll=%s", poll), func(b *testing.B) { benchReadReplicaLag(b, poll) })
	}
}

func benchReadReplicaLag(b *testing.B, poll time.Duration) {
	srcBucket := filepath.Join(b.TempDir(), "source-bucket")
	srcStore, err := objstore.NewDir(srcBucket)
	if err != nil {
		b.Fatal(err)
	}
	// The source uploads an idle active segment after 50 ms, checked
	// every 20 ms: its share of the lag is small and steady.
	src := restoreBrokerTB(b, srcStore, func(c *Config) { c.Tier.IdleUpload = 50 * time.Millisecond })
	repStore, err := objstore.NewDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	rep := restoreBrokerTB(b, repStore, func(c *Config) { c.ReadReplica.PollInterval = poll })
	createTopic(b, testAdmin(b, src), "lag", 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	uri := "file://" + srcBucket
	prod := testClient(b, src, kgo.DefaultProduceTopic("lag"), kgo.ProducerLinger(0))
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("first")}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	sourceEnd := func() int64 {
		p := src.partition("lag", 0)
		m, ok, err := tier.ReadManifest(ctx, srcStore, p.BucketName())
		if err != nil || !ok {
			return 0
		}
		return m.EndOffset()
	}
	waitUntil := func(what string, cond func() bool) time.Time {
		for !cond() {
			if ctx.Err() != nil {
				b.Fatalf("%s: %v", what, ctx.Err())
			}
			time.Sleep(2 * time.Millisecond)
		}
		return time.Now()
	}
	waitUntil("the first upload", func() bool { return sourceEnd() >= 1 })
	adm := kadm.NewClient(testClient(b, rep))
	if resp, err := adm.CreateTopic(ctx, -1, -1, map[string]*string{node.ReadReplicaSourceKey: &uri}, "lag"); err != nil || resp.Err != nil {
		b.Fatalf("create the read replica: %v %v", err, resp.Err)
	}
	replicaEnd := func() int64 {
		ends, err := adm.ListEndOffsets(ctx, "lag")
		if err != nil {
			return -1
		}
		o, ok := ends.Lookup("lag", 0)
		if !ok || o.Err != nil {
			return -1
		}
		return o.Offset
	}
	var pollShare, total []time.Duration
	b.ResetTimer()
	for i := range b.N {
		// Records arrive at random moments of the replica's poll cycle,
		// not just after a poll, as the previous iteration's would.
		time.Sleep(rand.N(poll))
		sent := time.Now()
		r := &kgo.Record{Value: fmt.Appendf(nil, "record %d", i)}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			b.Fatal(err)
		}
		uploaded := waitUntil("the upload", func() bool { return sourceEnd() > r.Offset })
		visible := waitUntil("the replica", func() bool { return replicaEnd() > r.Offset })
		pollShare = append(pollShare, visible.Sub(uploaded))
		total = append(total, visible.Sub(sent))
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	slices.Sort(pollShare)
	slices.Sort(total)
	b.ReportMetric(ms(pollShare[len(pollShare)/2]), "upload-to-visible-ms")
	b.ReportMetric(ms(pollShare[len(pollShare)-1]), "max-upload-to-visible-ms")
	b.ReportMetric(ms(total[len(total)/2]), "produce-to-visible-ms")
	b.ReportMetric(0, "ns/op")
}
