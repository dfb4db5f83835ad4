package loadtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Consume reads cfg.Topic until cfg's bound and reports throughput and the
// end-to-end latency of what it read; with cfg.Verify it also checks every
// record against the seed and reports in Result.Verify.
//
// Cancelling ctx stops the run early with the figures so far and a nil
// error; the error is for runs that could not be carried out.
func Consume(ctx context.Context, cfg ConsumeConfig) (Result, error) {
	res, err := consume(ctx, &cfg)
	if err != nil {
		return Result{}, fmt.Errorf("loadtest consume: %w", err)
	}
	return res, nil
}

func consume(ctx context.Context, cfg *ConsumeConfig) (Result, error) {
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	from, _ := parseFrom(cfg.From)
	readCommitted, _ := parseIsolation(cfg.Isolation)

	a, err := openAdmin(cfg.Bootstrap, cfg.ClientOpts)
	if err != nil {
		return Result{}, err
	}
	nparts, err := a.partitions(ctx, cfg.Topic, 0, false)
	var unread, starts map[int32]int64
	if err == nil && cfg.Verify {
		unread, starts, err = a.unread(ctx, cfg.Topic, from, cfg.Group, readCommitted)
	}
	a.close()
	if err != nil {
		return Result{}, err
	}

	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Bootstrap...),
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(from.offset()),
		isolationOpt(readCommitted),
	}
	if cfg.Group != "" {
		opts = append(opts, kgo.ConsumerGroup(cfg.Group))
	}
	if cfg.Verify {
		// A partition that keeps failing must be seen failing, to be
		// given up on (see consumer.giveUp); the client retries either way.
		opts = append(opts, kgo.KeepRetryableFetchErrors())
		// A transaction's marker may be the last offset of a partition;
		// only the marker itself shows the consumer has got there.
		opts = append(opts, kgo.KeepControlRecords())
	}
	cl, err := kgo.NewClient(append(opts, cfg.ClientOpts...)...)
	if err != nil {
		return Result{}, fmt.Errorf("consumer client: %w", err)
	}
	defer cl.Close()

	c := &consumer{cl: cl, limit: cfg.Records, pending: unread, next: starts, lat: newLatencies()}
	if cfg.Verify {
		c.ver = newVerifier(cfg.Seed, nparts)
		c.ver.readCommitted = readCommitted
		c.unreadableAfter = cfg.UnreadableAfter
		if c.unreadableAfter == 0 {
			c.unreadableAfter = defaultUnreadable
		}
		c.failing = make(map[int32]time.Time)
	}
	start := time.Now()
	var deadline time.Time
	if cfg.Duration > 0 {
		deadline = start.Add(cfg.Duration)
	}
	stop := startProgress(cfg.OnProgress, cfg.ProgressEvery, start, &c.m, cfg.Records, cfg.Duration)
	// Records were there at start: once they are all read, a topic that
	// held no loadtest run (only other clients' records) is done too.
	hadUnread := len(unread) > 0
	err = c.loop(ctx, func() bool {
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return true
		}
		return c.ver != nil && len(c.pending) == 0 && (c.ver.complete() || hadUnread && !c.ver.sawRun())
	})
	stop()
	if err != nil {
		return Result{}, err
	}
	return c.result(start), nil
}

// pollSlice bounds one poll, so that stop conditions that change without
// a record arriving (a deadline, the producer of an E2E run finishing) are
// noticed promptly.
const pollSlice = 200 * time.Millisecond

// consumer is the consuming half of Consume and E2E. Its fields other than
// m are owned by the goroutine running loop.
type consumer struct {
	cl      *kgo.Client
	limit   int64           // data records to read; 0 for no limit
	ver     *verifier       // nil when not verifying
	pending map[int32]int64 // partitions not yet read up to the offset they map to
	next    map[int32]int64 // for pending partitions, the next offset to read

	// failing holds, for partitions that answered errors and no record
	// since, when the first of those errors came; a pending partition
	// failing for unreadableAfter is given up on. Nil when not verifying.
	failing         map[int32]time.Time
	unreadableAfter time.Duration

	m    meter
	lat  *latencies
	last time.Time // when the last data record arrived
}

// loop consumes until ctx ends, the record limit is reached or done
// returns true. It returns an error only for a fetch error the client
// cannot recover from.
func (c *consumer) loop(ctx context.Context, done func() bool) error {
	for ctx.Err() == nil && !done() && (c.limit == 0 || c.m.records.Load() < c.limit) {
		pctx, cancel := context.WithTimeout(ctx, pollSlice)
		fs := c.cl.PollFetches(pctx)
		cancel()
		now := time.Now()
		if err := c.fetchErrs(fs, now); err != nil {
			return err
		}
		for it := fs.RecordIter(); !it.Done(); {
			if !c.take(it.Next(), now) {
				break
			}
		}
		c.giveUp(now)
	}
	return nil
}

// fetchErrs returns the first error of fs that ends the run; when
// verifying, errors the client retries by itself are noted against their
// partition instead (see giveUp).
func (c *consumer) fetchErrs(fs kgo.Fetches, now time.Time) error {
	for _, e := range fs.Errors() {
		switch {
		case c.failing != nil && kerr.IsRetriable(e.Err):
			if _, ok := c.failing[e.Partition]; !ok {
				c.failing[e.Partition] = now
			}
		case fatalFetchErr(e.Err):
			return fmt.Errorf("fetch %s[%d]: %w", e.Topic, e.Partition, e.Err)
		}
	}
	return nil
}

// giveUp stops waiting for pending partitions that have answered nothing
// but errors for unreadableAfter: what they hold up to the end offset is
// counted as missing, since nothing else will read it, and the run can
// end without them instead of waiting for its duration.
func (c *consumer) giveUp(now time.Time) {
	for p, since := range c.failing {
		end, pending := c.pending[p]
		if !pending || now.Sub(since) < c.unreadableAfter {
			continue
		}
		c.ver.unreadable(p, end-c.next[p])
		delete(c.pending, p)
		delete(c.failing, p)
	}
}

// take accounts for one record received at now and reports whether the
// loop may take more.
func (c *consumer) take(r *kgo.Record, now time.Time) bool {
	if end, ok := c.pending[r.Partition]; ok {
		c.next[r.Partition] = r.Offset + 1
		if r.Offset+1 >= end {
			delete(c.pending, r.Partition)
		}
	}
	delete(c.failing, r.Partition)
	if r.Attrs.IsControl() {
		return true // a transaction marker: nobody's record
	}
	h, err := findHeader(r)
	data := err != nil || h.kind != kindEnd
	if c.ver != nil {
		data = c.ver.check(r, h, err)
	}
	if !data {
		return true
	}
	if err == nil {
		c.lat.record(now.Sub(time.Unix(0, h.sendNanos)))
	}
	c.last = now
	c.m.bytes.Add(int64(len(r.Key) + len(r.Value)))
	n := c.m.records.Add(1)
	return c.limit == 0 || n < c.limit
}

func (c *consumer) result(start time.Time) Result {
	end := c.last
	if end.IsZero() {
		end = time.Now()
	}
	res := c.m.result(end.Sub(start), c.lat)
	if c.ver != nil {
		res.Verify = c.ver.report()
	}
	return res
}

// fatalFetchErr reports whether a fetch error ends the run: neither the
// end of a poll nor data loss, which is for verification to count, not a
// reason to stop reading.
func fatalFetchErr(err error) bool {
	var loss *kgo.ErrDataLoss
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, kgo.ErrClientClosed), errors.As(err, &loss):
		return false
	}
	return true
}
