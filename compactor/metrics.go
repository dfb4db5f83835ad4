package compactor

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	bytesRead, bytesWritten *prometheus.CounterVec // tier
	keysSeen, keysKept      *prometheus.CounterVec // tier
	tombstones              *prometheus.CounterVec // tier
	aborted, markers        *prometheus.CounterVec // tier
	passes                  *prometheus.CounterVec // tier, result
	duration                *prometheus.HistogramVec
	requests                *prometheus.CounterVec // op
	dirty                   *prometheus.GaugeVec   // tier, topic, partition
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		bytesRead: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_compactor_bytes_read_total",
			Help: "Log bytes compaction read, from local disk or the bucket."}, []string{"tier"}),
		bytesWritten: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_compactor_bytes_written_total",
			Help: "Log bytes compaction wrote."}, []string{"tier"}),
		keysSeen: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_compactor_keys_seen_total",
			Help: "Keyed records compaction filtered."}, []string{"tier"}),
		keysKept: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_compactor_keys_kept_total",
			Help: "Keyed records compaction kept."}, []string{"tier"}),
		tombstones: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_compactor_tombstones_removed_total",
			Help: "Tombstones removed after delete.retention.ms."}, []string{"tier"}),
		aborted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_compactor_aborted_records_removed_total",
			Help: "Records of aborted transactions removed."}, []string{"tier"}),
		markers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_compactor_markers_removed_total",
			Help: "Transaction markers removed after delete.retention.ms, their transactions' records gone."}, []string{"tier"}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_compactor_passes_total",
			Help: "Compaction passes by result (ok, abandoned, error)."}, []string{"tier", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "strata_compactor_pass_seconds",
			Help: "Duration of compaction passes.", Buckets: prometheus.ExponentialBuckets(0.01, 4, 10)}, []string{"tier"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "strata_compactor_requests_total",
			Help: "Object-store requests of cold-tier compaction passes."}, []string{"op"}),
		dirty: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "strata_compactor_dirty_ratio",
			Help: "Dirty bytes over cleanable bytes, per partition, as last checked."}, []string{"tier", "topic", "partition"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.bytesRead, m.bytesWritten, m.keysSeen, m.keysKept, m.tombstones, m.aborted, m.markers, m.passes, m.duration, m.requests, m.dirty} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// observe counts a pass whose result is "ok", "abandoned" or "error".
func (m *metrics) observe(tier string, st Stats, result string) {
	m.passes.WithLabelValues(tier, result).Inc()
	m.bytesRead.WithLabelValues(tier).Add(float64(st.BytesRead))
	m.bytesWritten.WithLabelValues(tier).Add(float64(st.BytesWritten))
	m.keysSeen.WithLabelValues(tier).Add(float64(st.KeysSeen))
	m.keysKept.WithLabelValues(tier).Add(float64(st.KeysKept))
	m.tombstones.WithLabelValues(tier).Add(float64(st.TombstonesRemoved))
	m.aborted.WithLabelValues(tier).Add(float64(st.AbortedRemoved))
	m.markers.WithLabelValues(tier).Add(float64(st.MarkersRemoved))
	m.requests.WithLabelValues("get").Add(float64(st.Gets))
	m.requests.WithLabelValues("put").Add(float64(st.Puts))
	if result == "ok" {
		m.duration.WithLabelValues(tier).Observe(st.Duration.Seconds())
	}
}
