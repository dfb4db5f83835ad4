package loadtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// E2E produces as Produce does while a consumer in the same process reads
// every partition from the end offsets at start (read_committed when the
// producer is transactional), and reports what the consumer received: throughput and end-to-end latency (due send time to
// receipt). Result.Errors counts records the producer failed to write. The
// consumer stops once it has received as many records as were acknowledged
// (and, verifying, every end marker) or cfg.Drain after the producer
// finished.
func E2E(ctx context.Context, cfg E2EConfig) (Result, error) {
	res, err := e2e(ctx, &cfg)
	if err != nil {
		return Result{}, fmt.Errorf("loadtest e2e: %w", err)
	}
	return res, nil
}

func e2e(ctx context.Context, cfg *E2EConfig) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	if cfg.Drain <= 0 {
		cfg.Drain = defaultDrain
	}
	nparts, err := prepareTopic(ctx, &cfg.ProduceConfig)
	if err != nil {
		return Result{}, err
	}
	a, err := openAdmin(cfg.Bootstrap, cfg.ClientOpts)
	if err != nil {
		return Result{}, err
	}
	ends, err := a.endOffsets(ctx, cfg.Topic, false)
	a.close()
	if err != nil {
		return Result{}, err
	}

	// Reading from the end offsets taken before producing, rather than
	// from "latest", which a consumer resolves whenever it first fetches,
	// so that no record of the run can slip in before the consumer.
	offsets := make(map[int32]kgo.Offset, nparts)
	for p := range nparts {
		if end, ok := ends[p]; ok {
			offsets[p] = kgo.NewOffset().At(end)
		} else {
			offsets[p] = kgo.NewOffset().AtEnd()
		}
	}
	// A transactional run is read as its records become visible to the
	// applications it stands for: committed.
	readCommitted := cfg.TransactionalID != ""
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Bootstrap...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{cfg.Topic: offsets}),
		isolationOpt(readCommitted),
	}
	cl, err := kgo.NewClient(append(opts, cfg.ClientOpts...)...)
	if err != nil {
		return Result{}, fmt.Errorf("consumer client: %w", err)
	}
	defer cl.Close()

	c := &consumer{cl: cl, lat: newLatencies()}
	if cfg.Verify {
		c.ver = newVerifier(cfg.Seed, nparts)
		c.ver.readCommitted = readCommitted
	}
	p := newProducer(&cfg.ProduceConfig, nparts)

	var (
		produced atomic.Bool  // set once the producer has finished
		drainEnd atomic.Int64 // Unix nanoseconds; written before produced
		wg       sync.WaitGroup
		cerr     error
	)
	start := time.Now()
	stop := startProgress(cfg.OnProgress, cfg.ProgressEvery, start, &c.m, cfg.Records, cfg.Duration)
	wg.Go(func() {
		cerr = c.loop(ctx, func() bool {
			if !produced.Load() {
				return false
			}
			if c.m.records.Load() >= p.m.records.Load() && (c.ver == nil || c.ver.complete()) {
				return true
			}
			return time.Now().UnixNano() >= drainEnd.Load()
		})
	})
	_, perr := p.run(ctx)
	drain := cfg.Drain
	if perr != nil {
		drain = 0
	}
	drainEnd.Store(time.Now().Add(drain).UnixNano())
	produced.Store(true)
	wg.Wait()
	stop()
	if perr != nil {
		return Result{}, perr
	}
	if cerr != nil {
		return Result{}, cerr
	}
	res := c.result(start)
	res.Errors = p.m.errors.Load()
	if e := p.m.firstErr.Load(); e != nil {
		res.FirstError = *e
	}
	return res, nil
}
