package broker

import (
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/broker/node"
	"strata/broker/partition"
	"strata/internal/build"
	"strata/tier"
)

// metrics are the broker's Prometheus series. Label values are bounded:
// API names come from kmsg, error codes from the protocol, and partition
// series are removed when their topic is deleted.
type metrics struct {
	// reg is kept for collectors registered later (groups.go).
	reg prometheus.Registerer

	requests        *prometheus.CounterVec   // api
	requestLatency  *prometheus.HistogramVec // api
	errors          *prometheus.CounterVec   // api, code
	bytesIn         prometheus.Counter
	bytesOut        prometheus.Counter
	zeroCopyOut     prometheus.Counter
	connections     prometheus.Gauge
	badRequests     prometheus.Counter
	authentications *prometheus.CounterVec // mechanism, result, reauthentication
	produceLatency  prometheus.Histogram
	fetchLatency    prometheus.Histogram
	recordsIn       prometheus.Counter
	logEnd          *prometheus.GaugeVec // topic, partition

	// Tiered storage.
	tierUploads        prometheus.Counter
	tierUploadBytes    prometheus.Counter
	tierUploadErrors   prometheus.Counter
	tierUploadSeconds  prometheus.Histogram
	tierReadBytes      prometheus.Counter
	tierOrphansDeleted prometheus.Counter
	uploadLag          *prometheus.GaugeVec // topic, partition

	// Metadata checkpoints (node/checkpoint.go).
	checkpointWrites      prometheus.Counter
	checkpointFailures    prometheus.Counter
	checkpointLastSuccess prometheus.Gauge

	leaderElections prometheus.Counter
	isrShrinks      prometheus.Counter
	isrExpands      prometheus.Counter

	// perAPI holds each API's requests and requestLatency series, looked
	// up on first use: WithLabelValues hashes and locks on every call, too
	// much for every request.
	perAPI [kmsg.MaxKey + 1]atomic.Pointer[apiSeries]
}

func newMetrics(reg prometheus.Registerer) *metrics {
	registerProcessMetrics(reg)
	f := promauto.With(reg)
	buckets := prometheus.ExponentialBuckets(0.0001, 2, 18) // 100µs .. ~13s
	return &metrics{
		reg: reg,
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_requests_total", Help: "Kafka requests handled, by API.",
		}, []string{"api"}),
		requestLatency: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "strata_request_duration_seconds", Help: "Time to handle a Kafka request, by API.", Buckets: buckets,
		}, []string{"api"}),
		errors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_request_errors_total", Help: "Error codes returned, by API, Kafka error code and its name (per partition where the API answers per partition).",
		}, []string{"api", "code", "error"}),
		bytesIn: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_network_received_bytes_total", Help: "Bytes of Kafka requests received.",
		}),
		bytesOut: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_network_sent_bytes_total", Help: "Bytes of Kafka responses sent.",
		}),
		zeroCopyOut: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_network_sent_zero_copy_bytes_total", Help: "Record bytes of fetch responses sent from segment files with sendfile(2), never copied through the broker's memory (part of strata_network_sent_bytes_total).",
		}),
		connections: f.NewGauge(prometheus.GaugeOpts{
			Name: "strata_connections", Help: "Open Kafka client connections.",
		}),
		badRequests: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_connections_closed_bad_request_total", Help: "Connections closed because a frame was malformed, oversized or unsupported.",
		}),
		authentications: f.NewCounterVec(prometheus.CounterOpts{
			Name: "strata_sasl_authentications_total", Help: "SASL authentications and re-authentications (KIP-368), by mechanism and result (success or failure); Kafka's successful- and failed-(re)authentication-total.",
		}, []string{"mechanism", "result", "reauthentication"}),
		produceLatency: f.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_produce_duration_seconds", Help: "Produce request latency, from decode to response.", Buckets: buckets,
		}),
		fetchLatency: f.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_fetch_duration_seconds", Help: "Fetch request latency, including long-poll waits.", Buckets: buckets,
		}),
		recordsIn: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_produced_records_total", Help: "Records appended to logs.",
		}),
		logEnd: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_log_end_offset", Help: "Log end offset of each hosted partition.",
		}, []string{"topic", "partition"}),
		tierUploads: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_tier_uploaded_segments_total", Help: "Segments copied to the object store.",
		}),
		tierUploadBytes: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_tier_uploaded_bytes_total", Help: "Log bytes copied to the object store.",
		}),
		tierUploadErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_tier_upload_errors_total", Help: "Upload passes that failed and will be retried.",
		}),
		tierUploadSeconds: f.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_tier_upload_duration_seconds", Help: "Time to upload one segment and publish its manifest.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}),
		tierReadBytes: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_tier_read_bytes_total", Help: "Record bytes served to consumers from the object store.",
		}),
		tierOrphansDeleted: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_tier_orphans_deleted_total", Help: "Unreferenced objects deleted by the collector.",
		}),
		uploadLag: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "strata_tier_upload_lag_offsets", Help: "Offsets of each hosted partition not yet in the object store.",
		}, []string{"topic", "partition"}),
		checkpointWrites: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_metadata_checkpoints_written_total", Help: "Metadata checkpoints this node wrote to the object store as the controller.",
		}),
		checkpointFailures: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_metadata_checkpoint_failures_total", Help: "Metadata checkpoint rounds that failed (manifest reads, the write or the pruning) and will be retried.",
		}),
		checkpointLastSuccess: f.NewGauge(prometheus.GaugeOpts{
			Name: "strata_metadata_checkpoint_last_success_timestamp_seconds", Help: "When this node, as the controller, last left the object store's newest metadata checkpoint current (written, or found unchanged); 0 if never.",
		}),
		leaderElections: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_leader_elections_total", Help: "Times this broker became the leader of a partition.",
		}),
		isrShrinks: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_isr_shrinks_total", Help: "ISR shrinks of partitions this broker leads, as the controller committed them, whoever asked (this leader, or the controller fencing a replica).",
		}),
		isrExpands: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_isr_expands_total", Help: "ISR expansions of partitions this broker leads, as the controller committed them, whoever asked.",
		}),
	}
}

// registerProcessMetrics adds what is the same for every Go service (the
// runtime's and the process's figures) and strata_build_info, whose labels
// say which build runs: a constant 1, joined in queries, as Prometheus's
// own *_build_info series are. A registry that has them already (one
// shared by several brokers in a process) keeps its own.
func registerProcessMetrics(reg prometheus.Registerer) {
	in := build.Current()
	info := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "strata_build_info",
		Help: "Always 1; the labels name the running build's release, commit and Go version.",
		ConstLabels: prometheus.Labels{
			"version":   in.Version,
			"revision":  in.ShortRevision(),
			"goversion": in.GoVersion,
		},
	})
	info.Set(1)
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		info,
	} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if !errors.As(err, &are) {
				panic(err) // a programming error, as promauto treats it
			}
		}
	}
}

// watchTierCache exports the chunk cache's figures, read when scraped.
func (m *metrics) watchTierCache(stats func() tier.CacheStats) {
	gauge := func(name, help string, v func(tier.CacheStats) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(v(stats())) })
	}
	counter := func(name, help string, v func(tier.CacheStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v(stats())) })
	}
	m.reg.MustRegister(
		gauge("strata_tier_cache_memory_bytes", "Bytes of remote chunks held in memory, downloads under way included.",
			func(s tier.CacheStats) int64 { return s.MemoryBytes }),
		gauge("strata_tier_cache_disk_bytes", "Bytes of remote chunks in the on-disk cache.",
			func(s tier.CacheStats) int64 { return s.DiskBytes }),
		counter("strata_tier_cache_hits_total", "Remote chunk reads served from the chunk cache.",
			func(s tier.CacheStats) int64 { return s.Hits }),
		counter("strata_tier_cache_misses_total", "Remote chunk reads that waited for the chunk to be downloaded.",
			func(s tier.CacheStats) int64 { return s.Misses }),
		counter("strata_tier_cache_disk_writes_total", "Chunks written to the on-disk cache (downloaded a second time).",
			func(s tier.CacheStats) int64 { return s.DiskWrites }),
		counter("strata_tier_cache_disk_evictions_total", "Chunks evicted from the on-disk cache.",
			func(s tier.CacheStats) int64 { return s.DiskEvictions }),
		counter("strata_tier_corrupt_reads_total", "Remote reads that found bytes failing their checks (CRC-32C, batch structure or offsets), whether or not a fresh download healed them.",
			func(s tier.CacheStats) int64 { return s.CorruptReads }),
	)
}

type apiSeries struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

// observeRequest counts one request of a registered API and its latency.
func (m *metrics) observeRequest(key int16, d time.Duration) {
	if key < 0 || int(key) >= len(m.perAPI) {
		// An extension's key (broker/extension), far above Kafka's and
		// rare: looked up by label each time.
		name := apiName(key)
		m.requests.WithLabelValues(name).Inc()
		m.requestLatency.WithLabelValues(name).Observe(d.Seconds())
		return
	}
	s := m.perAPI[key].Load()
	if s == nil {
		// Racing first requests store equal values: the vectors hand out
		// the same series for the same label.
		name := apiName(key)
		s = &apiSeries{m.requests.WithLabelValues(name), m.requestLatency.WithLabelValues(name)}
		m.perAPI[key].Store(s)
	}
	s.requests.Inc()
	s.latency.Observe(d.Seconds())
}

// countError records a non-zero error code returned by api. The error
// label names the code (NOT_ENOUGH_REPLICAS for 19), as Kafka's
// ErrorsPerSec does, so that a dashboard need not know the numbers; it is
// a function of code, so it adds no series.
func (m *metrics) countError(key kmsg.Key, code int16) {
	if code == 0 {
		return
	}
	name := "UNKNOWN_SERVER_ERROR"
	if err := kerr.ErrorForCode(code); err != nil {
		var ke *kerr.Error
		if errors.As(err, &ke) {
			name = ke.Message
		} else {
			name = "UNKNOWN_CODE"
		}
	}
	m.errors.WithLabelValues(apiName(int16(key)), strconv.Itoa(int(code)), name).Inc()
}

// countISRChange counts a committed ISR change of a partition this broker
// leads, from old to isr.
func (m *metrics) countISRChange(old, isr []int32) {
	switch {
	case len(isr) < len(old):
		m.isrShrinks.Inc()
	case len(isr) > len(old):
		m.isrExpands.Inc()
	}
}

// metaCollector reports the metadata quorum as this node sees it: raft's
// progress, whether this node is the controller, and, on the controller,
// the partitions that have no live leader (Kafka's OfflinePartitionsCount
// and ActiveControllerCount, reported the same way: summed over the
// cluster, each is the cluster's figure).
type metaCollector struct{ b *Broker }

var (
	activeControllerDesc = prometheus.NewDesc("strata_active_controller",
		"1 on the node that is the controller (the raft leader), 0 elsewhere.", nil, nil)
	offlinePartitionsDesc = prometheus.NewDesc("strata_offline_partitions",
		"Partitions with no live leader, as the controller sees them; 0 on other nodes.", nil, nil)
	raftCommitIndexDesc = prometheus.NewDesc("strata_raft_commit_index",
		"Last metadata log entry this node knows to be committed.", nil, nil)
	raftAppliedIndexDesc = prometheus.NewDesc("strata_raft_applied_index",
		"Last metadata log entry this node applied to its state.", nil, nil)
	raftLastContactDesc = prometheus.NewDesc("strata_raft_last_contact_seconds",
		"Seconds since this node last heard from the raft leader (0 on the leader; since start if it never has).", nil, nil)
	raftLeaderChangesDesc = prometheus.NewDesc("strata_raft_leader_changes_total",
		"Raft leaders (controllers) this node saw elected since it started.", nil, nil)
)

func (c metaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{activeControllerDesc, offlinePartitionsDesc, raftCommitIndexDesc,
		raftAppliedIndexDesc, raftLastContactDesc, raftLeaderChangesDesc} {
		ch <- d
	}
}

func (c metaCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.b.meta
	active, offline := 0.0, 0.0
	if m.IsLeader() {
		active, offline = 1, float64(m.State().OfflinePartitions())
	}
	st := m.RaftStats()
	ch <- prometheus.MustNewConstMetric(activeControllerDesc, prometheus.GaugeValue, active)
	ch <- prometheus.MustNewConstMetric(offlinePartitionsDesc, prometheus.GaugeValue, offline)
	ch <- prometheus.MustNewConstMetric(raftCommitIndexDesc, prometheus.GaugeValue, float64(st.CommitIndex))
	ch <- prometheus.MustNewConstMetric(raftAppliedIndexDesc, prometheus.GaugeValue, float64(st.AppliedIndex))
	ch <- prometheus.MustNewConstMetric(raftLastContactDesc, prometheus.GaugeValue, st.SinceContact.Seconds())
	ch <- prometheus.MustNewConstMetric(raftLeaderChangesDesc, prometheus.CounterValue, float64(st.LeaderChanges))
}

func (m *metrics) logEndGauge(topic string, partition int32) prometheus.Gauge {
	return m.logEnd.WithLabelValues(topic, strconv.Itoa(int(partition)))
}

func (m *metrics) setUploadLag(topic string, partition int32, lag int64) {
	m.uploadLag.WithLabelValues(topic, strconv.Itoa(int(partition))).Set(float64(lag))
}

func (m *metrics) forgetPartition(topic string, partition int32) {
	m.logEnd.DeleteLabelValues(topic, strconv.Itoa(int(partition)))
	m.uploadLag.DeleteLabelValues(topic, strconv.Itoa(int(partition)))
}

// node is the series the node and its partitions update.
func (m *metrics) node() node.Metrics {
	return node.Metrics{
		Partition: partition.Metrics{
			LeaderElections: m.leaderElections,
			ISRChanged:      m.countISRChange,
			Uploads:         m.tierUploads,
			UploadBytes:     m.tierUploadBytes,
			UploadSeconds:   m.tierUploadSeconds,
			ReadBytes:       m.tierReadBytes,
		},
		LogEnd:         m.logEndGauge,
		Forget:         m.forgetPartition,
		UploadErrors:   m.tierUploadErrors,
		UploadLag:      m.setUploadLag,
		OrphansDeleted: m.tierOrphansDeleted,
		WatchTierCache: m.watchTierCache,
		Registerer:     m.reg,

		CheckpointWrites:      m.checkpointWrites,
		CheckpointFailures:    m.checkpointFailures,
		CheckpointLastSuccess: m.checkpointLastSuccess,
	}
}
