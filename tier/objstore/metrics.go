package objstore

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Op names a Store operation in metrics.
type Op int

const (
	OpPut Op = iota
	OpGet
	OpStat
	OpList
	OpDelete
	numOps
)

var opNames = [numOps]string{"put", "get", "stat", "list", "delete"}

func (o Op) String() string {
	if o < 0 || o >= numOps {
		return fmt.Sprintf("Op(%d)", int(o))
	}
	return opNames[o]
}

// OpCounts are the counters of one operation.
type OpCounts struct {
	Requests int64 // calls made, failed or not
	Errors   int64 // calls (or, for gets, body reads) that failed
	Bytes    int64 // bytes put, or read from get bodies
}

// Counts is a snapshot of Metrics, indexed by Op.
type Counts [numOps]OpCounts

// Sub returns c minus an earlier snapshot, for per-phase figures such as
// "PUTs per GB uploaded" in a benchmark.
func (c Counts) Sub(prev Counts) Counts {
	for i := range c {
		c[i].Requests -= prev[i].Requests
		c[i].Errors -= prev[i].Errors
		c[i].Bytes -= prev[i].Bytes
	}
	return c
}

// Metrics counts requests, errors and bytes per operation of the Stores
// wrapped with WithMetrics. It is a prometheus.Collector: register it to
// export strata_objstore_{requests,errors,bytes}_total{op}.
type Metrics struct {
	c [numOps]struct{ requests, errors, bytes atomic.Int64 }
}

// NewMetrics returns zeroed counters.
func NewMetrics() *Metrics { return &Metrics{} }

// Counts returns a snapshot of the counters.
func (m *Metrics) Counts() Counts {
	var out Counts
	for i := range m.c {
		out[i] = OpCounts{m.c[i].requests.Load(), m.c[i].errors.Load(), m.c[i].bytes.Load()}
	}
	return out
}

var (
	descRequests = prometheus.NewDesc("strata_objstore_requests_total", "Object store calls by operation.", []string{"op"}, nil)
	descErrors   = prometheus.NewDesc("strata_objstore_errors_total", "Failed object store calls by operation.", []string{"op"}, nil)
	descBytes    = prometheus.NewDesc("strata_objstore_bytes_total", "Bytes put or read by operation.", []string{"op"}, nil)
)

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- descRequests
	ch <- descErrors
	ch <- descBytes
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for i, c := range m.Counts() {
		op := Op(i).String()
		ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(c.Requests), op)
		ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(c.Errors), op)
		ch <- prometheus.MustNewConstMetric(descBytes, prometheus.CounterValue, float64(c.Bytes), op)
	}
}

func (m *Metrics) record(op Op, bytes int64, err error) {
	c := &m.c[op]
	c.requests.Add(1)
	c.bytes.Add(bytes)
	if err != nil {
		c.errors.Add(1)
	}
}

type metricsStore struct {
	inner Store
	m     *Metrics
}

// WithMetrics returns a Store that counts the calls made to s in m. Several
// Stores may share one Metrics. Put bytes count the object size when the put
// succeeds; get bytes count what callers actually read from bodies.
func WithMetrics(s Store, m *Metrics) Store { return &metricsStore{s, m} }

func (s *metricsStore) String() string { return fmt.Sprint(s.inner) }

func (s *metricsStore) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return s.recordPut(size, s.inner.Put(ctx, key, r, size))
}

// Create counts as a put: it is one PUT request.
func (s *metricsStore) Create(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return s.recordPut(size, s.inner.Create(ctx, key, r, size))
}

// recordPut counts one PUT of size bytes that ended with err; its bytes
// count only when it succeeded.
func (s *metricsStore) recordPut(size int64, err error) error {
	var n int64
	if err == nil {
		n = size
	}
	s.m.record(OpPut, n, err)
	return err
}

func (s *metricsStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := s.inner.GetRange(ctx, key, off, n)
	s.m.record(OpGet, 0, err)
	if err != nil {
		return nil, err
	}
	return &countingReader{rc, &s.m.c[OpGet].bytes, &s.m.c[OpGet].errors}, nil
}

type countingReader struct {
	io.ReadCloser
	bytes, errors *atomic.Int64
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.bytes.Add(int64(n))
	if err != nil && err != io.EOF {
		r.errors.Add(1)
	}
	return n, err
}

func (s *metricsStore) Stat(ctx context.Context, key string) (Attrs, error) {
	a, err := s.inner.Stat(ctx, key)
	s.m.record(OpStat, 0, err)
	return a, err
}

func (s *metricsStore) List(ctx context.Context, prefix string, fn func(Attrs) error) error {
	err := s.inner.List(ctx, prefix, fn)
	s.m.record(OpList, 0, err)
	return err
}

func (s *metricsStore) ListAfter(ctx context.Context, prefix, startAfter string, fn func(Attrs) error) error {
	err := ListAfter(ctx, s.inner, prefix, startAfter, fn)
	s.m.record(OpList, 0, err)
	return err
}

func (s *metricsStore) Delete(ctx context.Context, key string) error {
	err := s.inner.Delete(ctx, key)
	s.m.record(OpDelete, 0, err)
	return err
}
