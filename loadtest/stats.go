package loadtest

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// meter counts a run's progress; it is read live by the progress loop.
type meter struct {
	records atomic.Int64
	bytes   atomic.Int64
	errors  atomic.Int64

	txns           atomic.Int64 // committed
	abortedTxns    atomic.Int64 // aborted on purpose
	abortedRecords atomic.Int64

	firstErrOnce sync.Once
	firstErr     atomic.Pointer[string]
}

func (m *meter) fail(err error) { m.failN(1, err) }

// failN counts n records failed for err.
func (m *meter) failN(n int64, err error) {
	m.errors.Add(n)
	m.firstErrOnce.Do(func() {
		s := err.Error()
		m.firstErr.Store(&s)
	})
}

// Latencies are recorded in microseconds from 1µs to one hour with three
// significant digits: 0.1% error across the whole range in ~200 KB.
const (
	latencyMinMicros = 1
	latencyMaxMicros = int64(time.Hour / time.Microsecond)
)

// latencies is an HDR histogram safe for concurrent recording.
type latencies struct {
	mu struct {
		sync.Mutex
		h *hdrhistogram.Histogram
	}
}

func newLatencies() *latencies {
	l := &latencies{}
	l.mu.h = hdrhistogram.New(latencyMinMicros, latencyMaxMicros, 3)
	return l
}

// record adds one latency, clamped to the trackable range: a clock step
// between hosts can make an end-to-end latency negative or huge, and such a
// value still belongs in the count.
func (l *latencies) record(d time.Duration) {
	us := min(max(d.Microseconds(), latencyMinMicros), latencyMaxMicros)
	l.mu.Lock()
	_ = l.mu.h.RecordValue(us) // in range by construction
	l.mu.Unlock()
}

func (l *latencies) percentiles() Percentiles {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.mu.h
	if h.TotalCount() == 0 {
		return Percentiles{}
	}
	ms := func(us int64) float64 { return float64(us) / 1e3 }
	return Percentiles{
		P50:  ms(h.ValueAtQuantile(50)),
		P90:  ms(h.ValueAtQuantile(90)),
		P99:  ms(h.ValueAtQuantile(99)),
		P999: ms(h.ValueAtQuantile(99.9)),
		Max:  ms(h.Max()),
	}
}

// result turns the final counts into figures over d.
func (m *meter) result(d time.Duration, lat *latencies) Result {
	r := Result{
		Records:  m.records.Load(),
		Bytes:    m.bytes.Load(),
		Errors:   m.errors.Load(),
		Duration: d,

		Transactions:        m.txns.Load(),
		AbortedTransactions: m.abortedTxns.Load(),
		AbortedRecords:      m.abortedRecords.Load(),
	}
	if p := m.firstErr.Load(); p != nil {
		r.FirstError = *p
	}
	if s := d.Seconds(); s > 0 {
		r.RecordsPerSec = float64(r.Records) / s
		r.MBPerSec = float64(r.Bytes) / MiB / s
	}
	if lat != nil {
		r.Latency = lat.percentiles()
	}
	return r
}

// startProgress calls fn every interval until the returned stop is called;
// stop waits for the loop to exit and then calls fn a last time, so that a
// display ends on the final figures.
func startProgress(fn func(Progress), every time.Duration, start time.Time, m *meter, records int64, d time.Duration) (stop func()) {
	if fn == nil {
		return func() {}
	}
	if every <= 0 {
		every = defaultProgressEvery
	}
	snap := func() Progress {
		return Progress{
			Elapsed:        time.Since(start),
			Records:        m.records.Load(),
			Bytes:          m.bytes.Load(),
			Errors:         m.errors.Load(),
			TargetRecords:  records,
			TargetDuration: d,
		}
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fn(snap())
			}
		}
	}()
	return func() {
		close(done)
		<-exited
		fn(snap())
	}
}
