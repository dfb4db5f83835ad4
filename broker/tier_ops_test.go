package broker

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/tier/objstore"
)

// gaugeValue reads one series of a gauge from reg, as a scrape would; ok is
// false while the series does not exist.
func gaugeValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (v float64, ok bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue series
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestUploadLagGrowsDuringOutage: docs/tiered-storage.md promises that
// strata_tier_upload_lag_offsets grows while the store is down. Records
// produced during an outage are not in the bucket, so the lag must count
// them.
func TestUploadLagGrowsDuringOutage(t *testing.T) {
	reg := prometheus.NewRegistry()
	faulty := objstore.WithFaults(tierStores[0].open(t), objstore.FaultConfig{})
	b := tieredBroker(t, "", faulty, func(c *Config) { c.Registerer, c.Gatherer = reg, reg })
	createTopic(t, testAdmin(t, b), "out", 1, map[string]*string{"segment.bytes": ptr("16384")})
	produceKeyed(t, b, "out", 100, 1000, kgo.ProducerBatchMaxBytes(4096))
	waitUploaded(t, b, "out", 1)
	p := b.partition("out", 0)
	lag := func() (float64, bool) {
		return gaugeValue(t, reg, "strata_tier_upload_lag_offsets", map[string]string{"topic": "out", "partition": "0"})
	}
	waitFor(t, 10*time.Second, "the lag of the uploaded partition", func() bool { _, ok := lag(); return ok })

	faulty.SetConfig(objstore.FaultConfig{FailRate: 1})
	uploaded := p.remoteEnd.Load()
	produceKeyed(t, b, "out", 200, 1000, kgo.ProducerBatchMaxBytes(4096))
	want := float64(p.log.EndOffset() - uploaded)
	waitFor(t, 10*time.Second, "the lag to count what the outage holds back (want "+strconv.FormatFloat(want, 'f', -1, 64)+")", func() bool {
		v, _ := lag()
		return v == want
	})
	if p.remoteEnd.Load() != uploaded {
		t.Fatalf("remote end moved from %d to %d while every store call failed", uploaded, p.remoteEnd.Load())
	}
}
