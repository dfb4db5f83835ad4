package loadtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Produce writes records to cfg.Topic until cfg's bound and reports the
// throughput of acknowledged records and their acknowledgement latency.
//
// Cancelling ctx stops the run early: records already handed to the client
// get a few seconds to be acknowledged, and the figures so far are returned
// with a nil error. The error is for runs that could not be carried out
// (bad configuration, unreachable brokers, missing topic); records that
// failed are counted in Result.Errors, see Result.Err.
func Produce(ctx context.Context, cfg ProduceConfig) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, fmt.Errorf("loadtest produce: %w", err)
	}
	nparts, err := prepareTopic(ctx, &cfg)
	if err != nil {
		return Result{}, fmt.Errorf("loadtest produce: %w", err)
	}
	p := newProducer(&cfg, nparts)
	stop := startProgress(cfg.OnProgress, cfg.ProgressEvery, time.Now(), &p.m, cfg.Records, cfg.Duration)
	d, err := p.run(ctx)
	stop()
	if err != nil {
		return Result{}, fmt.Errorf("loadtest produce: %w", err)
	}
	return p.m.result(d, p.lat), nil
}

// flushGrace is how long records already handed to the client may take to
// be acknowledged once a run is interrupted.
const flushGrace = 5 * time.Second

// stickyBytes is how much a producer without keys writes to one partition
// before moving to the next, like Kafka's sticky partitioner with its
// default batch.size (KIP-480, KIP-794): batches fill the same way.
const stickyBytes = 16 << 10

// producer is the producing half of Produce and E2E.
type producer struct {
	cfg     *ProduceConfig
	nparts  int32
	runID   uint64 // tells this run's records from other runs' in a shared topic
	payload []byte // the value of every record when values are not derived

	budget atomic.Int64 // records left to hand out when bounded by count
	m      meter
	lat    *latencies
}

func newProducer(cfg *ProduceConfig, nparts int32) *producer {
	if cfg.Producers == 0 {
		cfg.Producers = 1
	}
	p := &producer{
		cfg:    cfg,
		nparts: nparts,
		runID:  rand.Uint64(),
		lat:    newLatencies(),
	}
	if !cfg.Verify {
		// One random payload for every record: generating values must
		// not cost the producer the throughput it is measuring, and
		// random bytes keep compression honest.
		p.payload = make([]byte, cfg.Size)
		fillValue(p.payload, cfg.Seed, 0, 0, 0)
	}
	p.budget.Store(cfg.Records)
	return p
}

// run produces until the bound or ctx's end and returns how long the data
// records took, from the first send to the last acknowledgement.
func (p *producer) run(ctx context.Context) (time.Duration, error) {
	clients := make([]*kgo.Client, p.cfg.Producers)
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				cl.Close()
			}
		}
	}()
	for i := range clients {
		cl, err := kgo.NewClient(p.cfg.producerOpts(i)...)
		if err != nil {
			return 0, fmt.Errorf("producer client: %w", err)
		}
		clients[i] = cl
	}

	// Records are sent under sendCtx, which outlives ctx by flushGrace so
	// that an interrupted run still learns the fate of what it sent.
	sendCtx, cancelSend := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelSend()
	finished := make(chan struct{})
	var graceWG sync.WaitGroup
	graceWG.Go(func() {
		select {
		case <-finished:
		case <-ctx.Done():
			select {
			case <-finished:
			case <-time.After(flushGrace):
				cancelSend()
			}
		}
	})
	defer graceWG.Wait()
	defer close(finished)

	rate := p.cfg.Rate
	if p.cfg.RateMB > 0 {
		perRecord := float64(p.cfg.Size)
		if p.cfg.KeySpace > 0 {
			perRecord += float64(len(keyFor(uint64(p.cfg.KeySpace / 2))))
		}
		rate = p.cfg.RateMB * MiB / max(perRecord, 1)
	}
	rate /= float64(p.cfg.Producers)

	start := time.Now()
	var deadline time.Time
	if p.cfg.Duration > 0 {
		deadline = start.Add(p.cfg.Duration)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		lastAck time.Time
	)
	for i, cl := range clients {
		wg.Go(func() {
			s := &stream{p: p, cl: cl, id: uint32(i), seqs: make([]uint64, p.nparts)}
			if p.cfg.TransactionalID != "" {
				s.txn = &txnBatch{}
				s.abortSeqs = make([]uint64, p.nparts)
			}
			s.send(ctx, sendCtx, start, deadline, rate)
			if s.txn != nil {
				s.endTxn(sendCtx)
			} else {
				_ = cl.Flush(sendCtx) // unflushed records fail and are counted
			}
			now := time.Now()
			mu.Lock()
			if now.After(lastAck) {
				lastAck = now
			}
			mu.Unlock()
			if p.cfg.Verify {
				s.writeMarkers(sendCtx)
			}
		})
	}
	wg.Wait()
	return lastAck.Sub(start), nil
}

// stream is one producer client and the sequences it has handed out.
type stream struct {
	p    *producer
	cl   *kgo.Client
	id   uint32
	seqs []uint64 // next sequence per partition

	// Transactional streams only (nil otherwise): the open transaction,
	// and the next sequence per partition of records written in
	// transactions to be aborted.
	txn       *txnBatch
	abortSeqs []uint64

	part      int32 // current partition without keys
	partBytes int   // bytes written to part since the last switch
}

// send hands records to the client until the bound, paced to rate
// (records/s, 0 for none).
func (s *stream) send(ctx, sendCtx context.Context, start, deadline time.Time, rate float64) {
	p := s.p
	s.part = int32(s.id % uint32(p.nparts))
	var interval time.Duration
	if rate > 0 {
		interval = time.Duration(float64(time.Second) / rate)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for i := uint64(0); ; i++ {
		if ctx.Err() != nil {
			return
		}
		if p.cfg.Records > 0 && p.budget.Add(-1) < 0 {
			return
		}
		now := time.Now()
		if !deadline.IsZero() && !now.Before(deadline) {
			return
		}
		due := now
		if interval > 0 {
			// Open-loop pacing: record i is due at start+i*interval
			// whatever happened to earlier ones, and its latency
			// counts from then, so a stalled broker cannot hide its
			// stall by slowing the sender (coordinated omission).
			due = start.Add(time.Duration(i) * interval)
			if !deadline.IsZero() && !due.Before(deadline) {
				return
			}
			// Sleeping for less than a millisecond is too imprecise
			// to be worth it; being that early is harmless.
			if wait := due.Sub(now); wait > time.Millisecond {
				timer.Reset(wait)
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
				now = time.Now()
			}
			if now.Before(due) {
				due = now
			}
		}
		if s.txn != nil && s.txn.n == 0 && !s.beginTxn() {
			return
		}
		r := s.next(i, due)
		payload := int64(len(r.Key) + len(r.Value))
		if s.txn != nil {
			s.produceInTxn(sendCtx, r, due, payload)
			if s.txn.n >= p.cfg.txnRecords() && !s.endTxn(sendCtx) {
				return
			}
			continue
		}
		s.cl.Produce(sendCtx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				p.m.fail(err)
				return
			}
			p.lat.record(time.Since(due))
			p.m.records.Add(1)
			p.m.bytes.Add(payload)
		})
	}
}

// next builds the stream's i'th record.
func (s *stream) next(i uint64, due time.Time) *kgo.Record {
	p := s.p
	r := &kgo.Record{}
	if p.cfg.KeySpace > 0 {
		k := splitmix64(p.runID^uint64(s.id)<<40^i) % uint64(p.cfg.KeySpace)
		r.Key = keyFor(k)
		r.Partition = int32(k % uint64(p.nparts))
	} else {
		r.Partition = s.part
		s.partBytes += p.cfg.Size + headerLen
		if s.partBytes >= stickyBytes {
			s.part = (s.part + 1) % p.nparts
			s.partBytes = 0
		}
	}
	kind, seqs := byte(kindData), s.seqs
	if s.txn != nil && s.txn.abort {
		kind, seqs = kindAborted, s.abortSeqs
	}
	seq := seqs[r.Partition]
	seqs[r.Partition]++
	if p.cfg.Verify {
		r.Value = make([]byte, p.cfg.Size)
		fillValue(r.Value, p.cfg.Seed, s.id, r.Partition, seq)
	} else {
		r.Value = p.payload
	}
	h := header{
		kind:      kind,
		run:       p.runID,
		stream:    s.id,
		streams:   uint32(p.cfg.Producers),
		seq:       seq,
		sendNanos: due.UnixNano(),
		size:      uint32(p.cfg.Size),
	}
	r.Headers = []kgo.RecordHeader{{Key: headerKey, Value: h.appendTo(make([]byte, 0, headerLen))}}
	return r
}

// writeMarkers writes the stream's end marker to every partition. It runs
// after the stream's data is flushed, so each marker follows that data in
// its partition.
func (s *stream) writeMarkers(ctx context.Context) {
	p := s.p
	rs := make([]*kgo.Record, p.nparts)
	for part := range p.nparts {
		h := header{
			kind:      kindEnd,
			run:       p.runID,
			stream:    s.id,
			streams:   uint32(p.cfg.Producers),
			seq:       s.seqs[part],
			sendNanos: time.Now().UnixNano(),
		}
		rs[part] = &kgo.Record{
			Partition: part,
			Value:     []byte{},
			Headers:   []kgo.RecordHeader{{Key: headerKey, Value: h.appendTo(nil)}},
		}
	}
	// A transactional client writes nothing outside a transaction.
	if s.txn != nil {
		if err := s.cl.BeginTransaction(); err != nil {
			p.m.fail(fmt.Errorf("end marker: %w", err))
			return
		}
	}
	for _, res := range s.cl.ProduceSync(ctx, rs...) {
		if res.Err != nil {
			p.m.fail(fmt.Errorf("end marker: %w", res.Err))
		}
	}
	if s.txn != nil {
		if err := s.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			p.m.fail(fmt.Errorf("end marker: commit: %w", err))
		}
	}
}

// txnBatch is the transaction a transactional stream has open. Its fields
// but failed and firstErr are owned by the stream's goroutine; those two
// are written by the records' promises, which have all run once the
// client is flushed.
type txnBatch struct {
	number int64 // of the stream's transactions, from 1
	abort  bool  // to be aborted on purpose
	n      int   // records handed to the client
	bytes  int64 // keys and values of those records
	dues   []time.Time

	failed   atomic.Int64
	firstErr atomic.Pointer[error]
}

// beginTxn opens the stream's next transaction and reports whether the
// stream can go on.
func (s *stream) beginTxn() bool {
	t := s.txn
	if err := s.cl.BeginTransaction(); err != nil {
		s.p.m.fail(fmt.Errorf("begin transaction: %w", err))
		return false
	}
	t.number++
	every := int64(s.p.cfg.TxnAbortEvery)
	t.abort = every > 0 && t.number%every == 0
	return true
}

// produceInTxn hands r, due at due, to the client in the open transaction.
// Its fate is the transaction's, known at endTxn: a record's
// acknowledgement does not make it visible to a read_committed consumer.
func (s *stream) produceInTxn(ctx context.Context, r *kgo.Record, due time.Time, payload int64) {
	t := s.txn
	t.n++
	t.bytes += payload
	t.dues = append(t.dues, due)
	s.cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
		if err != nil {
			t.failed.Add(1)
			t.firstErr.CompareAndSwap(nil, &err)
		}
	})
}

// endTxn flushes the open transaction, if any, and commits it, or aborts
// it when that was planned or a record of it failed; it counts its records
// and reports whether the stream can go on. A committed record's latency
// runs from its due time to the commit's acknowledgement, when it becomes
// visible to read_committed consumers.
func (s *stream) endTxn(ctx context.Context) (ok bool) {
	t, p := s.txn, s.p
	if t.n == 0 {
		return true
	}
	ferr := s.cl.Flush(ctx)
	commit := !t.abort && t.failed.Load() == 0 && ferr == nil
	err := s.cl.EndTransaction(ctx, kgo.TransactionEndTry(commit))
	done := time.Now()
	// The stream goes on after a transaction that failed if it could
	// be aborted: the client is then in a state to begin another.
	ok = err == nil && ferr == nil
	if err != nil && commit {
		// The commit's outcome is unknown or refused; franz-go asks
		// for an abort, which fences whatever is left of it.
		if aerr := s.cl.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
			err = fmt.Errorf("%w; then abort: %w", err, aerr)
		} else {
			err = fmt.Errorf("%w (aborted)", err)
			ok = true
		}
	}
	n := int64(t.n)
	switch {
	case err != nil:
		p.m.failN(n, fmt.Errorf("end transaction: %w", err))
	case ferr != nil:
		p.m.failN(n, fmt.Errorf("flush transaction: %w", ferr))
	case t.failed.Load() > 0:
		p.m.failN(n, fmt.Errorf("transaction aborted: %w", *t.firstErr.Load()))
	case t.abort:
		p.m.abortedTxns.Add(1)
		p.m.abortedRecords.Add(n)
	default:
		for _, due := range t.dues {
			p.lat.record(done.Sub(due))
		}
		p.m.txns.Add(1)
		p.m.bytes.Add(t.bytes)
		p.m.records.Add(n)
	}
	t.n, t.bytes, t.dues = 0, 0, t.dues[:0]
	t.failed.Store(0)
	t.firstErr.Store(nil)
	return ok
}
