package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/segment"
)

// Log is what a follower does to its partition's local log.
type Log interface {
	StartOffset() int64
	EndOffset() int64
	LatestEpoch() int32
	EndOffsetForEpoch(epoch int32) (endOffset int64, found int32)
	AppendReplica(records []byte) (segment.AppendInfo, error)
	TruncateTo(offset int64) (int64, error)
	TruncateFullyAndStartAt(offset int64, h segment.History) error
	DeleteRecordsBefore(offset int64) (int64, error)
}

// Client sends a request to the leader the fetcher copies from.
type Client interface {
	Request(ctx context.Context, req kmsg.Request) (kmsg.Response, error)
}

// Partition is one partition a follower copies from its leader.
type Partition struct {
	Topic       string
	TopicID     [16]byte
	Index       int32
	LeaderEpoch int32
	Log         Log
	// Fetched is told the leader's high watermark after every fetch that
	// answered for the partition without error; the caller caps it by its
	// own log end (a follower's high watermark is never above its log).
	Fetched func(leaderHW int64)
	// Lock serialises the fetcher's writes to Log with whatever else
	// changes the partition's role; nil for none.
	Lock sync.Locker
	// LogStartBound, if set, caps how far the follower moves its log
	// start after its leader's. On a tiered topic it is what the bucket's
	// current manifest holds: a deposed leader may have raised its own log
	// start on the strength of a manifest a newer one hides, and a
	// follower that copied it would delete the last copies of records the
	// bucket does not have.
	LogStartBound func() int64
	// HistoryBelow, for a partition whose older records are in a bucket,
	// says where a log that must start at or above offset (the leader's
	// local log start) starts and what the bucket knows of the records
	// below that (tier.Tier.HistoryBelow); ok false when it knows nothing.
	// nil for a partition that does not tier.
	HistoryBelow func(ctx context.Context, offset int64) (start int64, h segment.History, ok bool, err error)
}

// Key names a partition.
type Key struct {
	Topic string
	Index int32
}

// Fetcher copies every partition a follower follows from one leader, with
// one Fetch request for all of them at a time, as Kafka's replica fetcher
// thread does. Its goroutine is Run's; Set changes the partitions while it
// runs.
type Fetcher struct {
	self     int32
	leader   int32
	client   Client
	log      *slog.Logger
	maxWait  time.Duration
	maxBytes int32
	// brokerEpoch is this broker's registration epoch, sent with every
	// fetch so the leader can tell a restarted follower from its previous
	// life.
	brokerEpoch func() int64

	mu    sync.Mutex
	parts map[Key]*fetchState
	wake  chan struct{}
}

type fetchState struct {
	Partition
	retryAt time.Time
}

// FetcherConfig configures a Fetcher.
type FetcherConfig struct {
	Self, Leader int32
	Client       Client
	Logger       *slog.Logger
	// MaxWait is how long the leader may hold a fetch that finds nothing
	// new; it bounds how late a follower notices a new partition.
	MaxWait time.Duration
	// MaxBytes bounds one response; each partition gets at most a quarter.
	MaxBytes    int32
	BrokerEpoch func() int64
}

// NewFetcher returns a fetcher with no partitions; start it with Run.
func NewFetcher(c FetcherConfig) *Fetcher {
	if c.MaxWait <= 0 {
		c.MaxWait = 500 * time.Millisecond
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 16 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.BrokerEpoch == nil {
		c.BrokerEpoch = func() int64 { return -1 }
	}
	return &Fetcher{
		self: c.Self, leader: c.Leader, client: c.Client, log: c.Logger,
		maxWait: c.MaxWait, maxBytes: c.MaxBytes, brokerEpoch: c.BrokerEpoch,
		parts: make(map[Key]*fetchState), wake: make(chan struct{}, 1),
	}
}

// Set adds p, or updates its leader epoch.
func (f *Fetcher) Set(p Partition) {
	f.mu.Lock()
	k := Key{p.Topic, p.Index}
	if s, ok := f.parts[k]; ok && s.Log == p.Log {
		s.LeaderEpoch, s.TopicID, s.Fetched, s.Lock, s.LogStartBound, s.HistoryBelow = p.LeaderEpoch, p.TopicID, p.Fetched, p.Lock, p.LogStartBound, p.HistoryBelow
		s.retryAt = time.Time{}
	} else {
		f.parts[k] = &fetchState{Partition: p}
	}
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Remove stops copying k. When it returns, no write of the fetcher's to
// k's log is in progress or will start.
func (f *Fetcher) Remove(k Key) {
	f.mu.Lock()
	delete(f.parts, k)
	f.mu.Unlock()
}

// Len returns the number of partitions fetched.
func (f *Fetcher) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.parts)
}

// Run fetches until ctx is done.
func (f *Fetcher) Run(ctx context.Context) {
	backoff := 50 * time.Millisecond
	var lastErr time.Time
	for ctx.Err() == nil {
		req, wait := f.build(time.Now())
		if req == nil {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
			case <-f.wake:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, f.maxWait+10*time.Second)
		kresp, err := f.client.Request(rctx, req)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if time.Since(lastErr) > 10*time.Second {
				f.log.Warn("replica fetch failed", "leader", f.leader, "err", err)
				lastErr = time.Now()
			}
			sleep(ctx, backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		resp := kresp.(*kmsg.FetchResponse)
		if resp.ErrorCode != 0 {
			f.log.Warn("replica fetch refused", "leader", f.leader, "err", kerr.ErrorForCode(resp.ErrorCode))
			sleep(ctx, backoff)
			continue
		}
		f.apply(req, resp)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// build returns the next Fetch request, or nil and how long to wait when no
// partition is ready.
func (f *Fetcher) build(now time.Time) (*kmsg.FetchRequest, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = f.self
	req.ReplicaState.ID = f.self
	req.ReplicaState.Epoch = f.brokerEpoch()
	req.MaxWaitMillis = int32(f.maxWait / time.Millisecond)
	req.MinBytes = 1
	req.MaxBytes = f.maxBytes
	req.SessionEpoch = -1
	byTopic := map[string]int{}
	wait := time.Second
	for k, s := range f.parts {
		if now.Before(s.retryAt) {
			wait = min(wait, s.retryAt.Sub(now))
			continue
		}
		i, ok := byTopic[k.Topic]
		if !ok {
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = k.Topic, s.TopicID
			req.Topics = append(req.Topics, rt)
			i = len(req.Topics) - 1
			byTopic[k.Topic] = i
		}
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition = k.Index
		rp.CurrentLeaderEpoch = s.LeaderEpoch
		rp.FetchOffset = s.Log.EndOffset()
		rp.LastFetchedEpoch = s.Log.LatestEpoch()
		rp.LogStartOffset = s.Log.StartOffset()
		rp.PartitionMaxBytes = max(f.maxBytes/4, 1<<20)
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	if len(req.Topics) == 0 {
		return nil, wait
	}
	return req, 0
}

// apply applies one response. It holds f.mu throughout, so Remove waits
// for a write in progress to its partition.
func (f *Fetcher) apply(req *kmsg.FetchRequest, resp *kmsg.FetchResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	asked := map[Key]int64{}
	for _, rt := range req.Topics {
		for _, rp := range rt.Partitions {
			asked[Key{rt.Topic, rp.Partition}] = rp.FetchOffset
		}
	}
	idNames := map[[16]byte]string{}
	for _, rt := range req.Topics {
		idNames[rt.TopicID] = rt.Topic
	}
	for _, rt := range resp.Topics {
		name := rt.Topic
		if name == "" {
			name = idNames[rt.TopicID]
		}
		for i := range rt.Partitions {
			rp := &rt.Partitions[i]
			k := Key{name, rp.Partition}
			s, ok := f.parts[k]
			offset, wasAsked := asked[k]
			if !ok || !wasAsked || s.Log.EndOffset() != offset {
				continue // removed, or changed under us: ask again
			}
			if s.Lock != nil {
				s.Lock.Lock()
			}
			err := f.applyPartition(s, offset, rp)
			if s.Lock != nil {
				s.Lock.Unlock()
			}
			if err != nil {
				d := retryDelay(err)
				level := slog.LevelWarn
				if d < 250*time.Millisecond {
					level = slog.LevelDebug // leadership is moving: routine
				}
				f.log.Log(context.Background(), level, "replica fetch", "leader", f.leader, "topic", k.Topic, "partition", k.Index, "offset", offset, "err", err)
				s.retryAt = time.Now().Add(d)
			}
		}
	}
}

// retryDelay is how long a partition waits after err. A leadership error
// mostly means the leader has not applied the metadata this follower has
// (or the other way round, and then Set ends the wait): a short wait.
func retryDelay(err error) time.Duration {
	if errors.Is(err, kerr.NotLeaderForPartition) || errors.Is(err, kerr.FencedLeaderEpoch) ||
		errors.Is(err, kerr.UnknownLeaderEpoch) || errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID) {
		return 100 * time.Millisecond
	}
	return 250 * time.Millisecond
}

func (f *Fetcher) applyPartition(s *fetchState, offset int64, rp *kmsg.FetchResponseTopicPartition) error {
	switch err := kerr.ErrorForCode(rp.ErrorCode); {
	case err == nil:
	case errors.Is(err, kerr.OffsetOutOfRange) || errors.Is(err, kerr.OffsetMovedToTieredStorage):
		return f.outOfRange(s, offset, rp)
	default:
		return err
	}
	if d := rp.DivergingEpoch; d.EndOffset >= 0 && d.Epoch >= 0 {
		return f.truncate(s, d.Epoch, d.EndOffset)
	}
	if len(rp.RecordBatches) > 0 {
		if _, err := s.Log.AppendReplica(rp.RecordBatches); err != nil {
			return fmt.Errorf("append at %d: %w", offset, err)
		}
	}
	// The leader's log start moved up (DeleteRecords, or its local
	// retention of what the bucket holds): so does this one, as far as
	// this log reaches and its bound allows.
	if ls := rp.LogStartOffset; ls > s.Log.StartOffset() {
		to := min(ls, s.Log.EndOffset())
		if s.LogStartBound != nil {
			to = min(to, s.LogStartBound())
		}
		if to > s.Log.StartOffset() {
			if _, err := s.Log.DeleteRecordsBefore(to); err != nil {
				return fmt.Errorf("follow the leader's log start %d: %w", ls, err)
			}
		}
	}
	if s.Fetched != nil {
		s.Fetched(rp.HighWatermark)
	}
	return nil
}

// truncate cuts the log where it diverges from the leader's, which ended
// its epoch at endOffset (Kafka's getOffsetTruncationState). When this log
// does not know that epoch, it cuts to the end of the largest epoch it has
// below it; the next fetch then checks again from there.
func (f *Fetcher) truncate(s *fetchState, epoch int32, endOffset int64) error {
	leo := s.Log.EndOffset()
	to := min(endOffset, leo)
	if fEnd, fEpoch := s.Log.EndOffsetForEpoch(epoch); fEnd >= 0 {
		if fEpoch == epoch {
			to = min(endOffset, fEnd)
		} else {
			to = min(fEnd, leo)
		}
	}
	to = max(to, s.Log.StartOffset())
	if to >= leo {
		return nil
	}
	newEnd, err := s.Log.TruncateTo(to)
	if err != nil {
		return fmt.Errorf("truncate to %d: %w", to, err)
	}
	f.log.Info("follower truncated its log to the leader's", "topic", s.Topic, "partition", s.Index, "from", leo, "to", newEnd, "epoch", epoch)
	return nil
}

// outOfRange handles a fetch offset the leader does not have: below its
// local log start (older data may be only in the bucket, which the
// follower does not copy), the follower starts over at the leader's local
// start, or, when the bucket holds the records below it, where the bucket
// object holding the record before it ends, with the producer state and
// leader epochs that object carries (Kafka's buildRemoteLogAuxState);
// above its end, it cuts back to the leader's high watermark.
func (f *Fetcher) outOfRange(s *fetchState, offset int64, rp *kmsg.FetchResponseTopicPartition) error {
	switch {
	case rp.LogStartOffset >= 0 && offset < rp.LogStartOffset:
		start, h, err := f.restartPoint(s, rp)
		if err != nil {
			return err
		}
		if err := s.Log.TruncateFullyAndStartAt(start, h); err != nil {
			return fmt.Errorf("restart log at %d: %w", start, err)
		}
		f.log.Info("follower restarted its log at the leader's log start", "topic", s.Topic, "partition", s.Index, "from", offset, "to", start,
			"leaderLogStart", rp.LogStartOffset, "producerState", len(h.ProducerSnapshot) > 0)
		return nil
	case rp.HighWatermark >= 0 && offset > rp.HighWatermark:
		to := max(rp.HighWatermark, s.Log.StartOffset())
		if _, err := s.Log.TruncateTo(to); err != nil {
			return fmt.Errorf("truncate to %d: %w", to, err)
		}
		return nil
	}
	return fmt.Errorf("offset %d out of the leader's range: %w", offset, kerr.OffsetOutOfRange)
}

// restartPoint is where a follower below its leader's local log start
// starts its log, and what it keeps of the history below: the leader's
// local start with nothing, unless the bucket holds the record before it.
// An object ending past the leader's high watermark (a deposed leader's
// upload the current one does not have) is not followed.
func (f *Fetcher) restartPoint(s *fetchState, rp *kmsg.FetchResponseTopicPartition) (int64, segment.History, error) {
	if s.HistoryBelow == nil {
		return rp.LogStartOffset, segment.History{}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start, h, ok, err := s.HistoryBelow(ctx, rp.LogStartOffset)
	if err != nil {
		return 0, segment.History{}, fmt.Errorf("history below the leader's log start %d from the bucket: %w", rp.LogStartOffset, err)
	}
	if !ok || start > rp.HighWatermark {
		return rp.LogStartOffset, segment.History{}, nil
	}
	return start, h, nil
}
