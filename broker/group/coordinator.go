package group

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf16"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/segment"
)

// OffsetLog stores the coordinator's records: partition i of
// __consumer_offsets. Methods may be called concurrently for different
// partitions, and for the same one.
type OffsetLog interface {
	// Append appends batch, one uncompressed v2 record batch, to partition
	// and returns its base offset once the batch is committed (covered by
	// the high watermark: acks=all). It returns when ctx ends. An error
	// wrapping ErrNotLeader means this node no longer leads the partition.
	// A transactional batch (TxnOffsetCommit) is the coordinator's own
	// write for its producer: the log checks its producer epoch, not its
	// sequence (segment.Batches.FromCoordinator); an error wrapping
	// segment.ErrInvalidProducerEpoch means the producer is fenced, one
	// wrapping kerr.InvalidTxnState that its transaction ended after the
	// commit was verified (KIP-890) and the batch would open a new one.
	// It is called with a group's lock held and must never call back into
	// the Coordinator.
	Append(ctx context.Context, partition int32, batch []byte) (int64, error)
	// Read appends to dst whole committed batches of partition, starting
	// with the one that contains offset (or the first one, if offset is
	// below the log start), and returns dst unchanged once offset reaches
	// the high watermark.
	Read(dst []byte, partition int32, offset int64) ([]byte, error)
}

// ErrNotLeader is what an OffsetLog wraps when this node does not lead the
// partition; requests then get NOT_COORDINATOR.
var ErrNotLeader = errors.New("group: not the leader of the offsets partition")

// Config configures a Coordinator. Zero durations take Kafka's defaults,
// except InitialRebalanceDelay, where zero means none.
type Config struct {
	// Partitions is the partition count of __consumer_offsets (Kafka's
	// offsets.topic.num.partitions); it fixes which partition owns a group.
	Partitions int32
	Log        OffsetLog
	Clock      Clock // nil: SystemClock
	Logger     *slog.Logger

	// MinSessionTimeout and MaxSessionTimeout bound a member's session
	// timeout (group.min/max.session.timeout.ms: 6 s and 30 min).
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// InitialRebalanceDelay holds the first rebalance of an empty group
	// open for more members (group.initial.rebalance.delay.ms).
	InitialRebalanceDelay time.Duration
	// OffsetsRetention is how long the offsets of a group stay after it
	// became empty, or after their commit for groups that never had
	// members (offsets.retention.minutes: 7 days).
	OffsetsRetention time.Duration
	// MaxGroupSize is group.max.size; zero is unlimited.
	MaxGroupSize int
	// MaxMemberMetadataBytes bounds the protocol metadata of one join. A
	// group's metadata record has to fit one batch of __consumer_offsets,
	// so the default is that topic's max.message.bytes (1 MiB).
	MaxMemberMetadataBytes int
	// OffsetMetadataMaxBytes is offset.metadata.max.bytes (4096).
	OffsetMetadataMaxBytes int
	// PartitionExists reports whether a topic partition exists; commits to
	// one that does not get UNKNOWN_TOPIC_OR_PARTITION. Nil accepts all.
	PartitionExists func(topic string, partition int32) bool
}

func (c Config) withDefaults() Config {
	if c.Clock == nil {
		c.Clock = SystemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MinSessionTimeout == 0 {
		c.MinSessionTimeout = 6 * time.Second
	}
	if c.MaxSessionTimeout == 0 {
		c.MaxSessionTimeout = 30 * time.Minute
	}
	if c.OffsetsRetention == 0 {
		c.OffsetsRetention = 7 * 24 * time.Hour
	}
	if c.MaxMemberMetadataBytes == 0 {
		c.MaxMemberMetadataBytes = 1 << 20
	}
	if c.OffsetMetadataMaxBytes == 0 {
		c.OffsetMetadataMaxBytes = 4096
	}
	if c.PartitionExists == nil {
		c.PartitionExists = func(string, int32) bool { return true }
	}
	return c
}

// Coordinator is the group coordinator of one node: it serves the groups
// whose __consumer_offsets partition this node leads (see Load).
type Coordinator struct {
	cfg   Config
	clock Clock
	log   *slog.Logger

	rebalances atomic.Uint64
	commits    atomic.Uint64

	// closed is closed by Close; waiting requests watch it.
	closed chan struct{}

	// mu guards the partition table and the group map. It is a leaf: see
	// the package documentation for the lock order.
	mu struct {
		sync.Mutex
		partitions map[int32]partitionState
		groups     map[string]*group
		closed     bool
		// producers indexes, by producer id, the groups (with their
		// offsets partition) where a transaction has offsets pending,
		// for CompleteTxn. An entry may outlive its group; CompleteTxn
		// drops it.
		producers map[int64]map[string]int32
		// ended are the transactions CompleteTxn ended on a partition
		// while it was loading, applied once the load is done.
		ended map[int32][]txnEnd
	}
}

type partitionState int8

const (
	partitionLoading partitionState = iota + 1
	partitionLoaded
)

// New returns a coordinator that leads no partition yet.
func New(cfg Config) (*Coordinator, error) {
	cfg = cfg.withDefaults()
	if cfg.Partitions < 1 {
		return nil, fmt.Errorf("group: offsets partitions %d: must be at least 1", cfg.Partitions)
	}
	if cfg.Log == nil {
		return nil, errors.New("group: no offset log")
	}
	if cfg.MinSessionTimeout > cfg.MaxSessionTimeout {
		return nil, fmt.Errorf("group: min session timeout %s above max %s", cfg.MinSessionTimeout, cfg.MaxSessionTimeout)
	}
	c := &Coordinator{cfg: cfg, clock: cfg.Clock, log: cfg.Logger, closed: make(chan struct{})}
	c.mu.partitions = make(map[int32]partitionState)
	c.mu.groups = make(map[string]*group)
	c.mu.producers = make(map[int64]map[string]int32)
	c.mu.ended = make(map[int32][]txnEnd)
	return c, nil
}

// Partition returns the __consumer_offsets partition that owns groupID:
// abs(Java's String.hashCode) mod partitions, Kafka's formula, so that
// every tool agrees on where a group lives.
func Partition(groupID string, partitions int32) int32 {
	var h int32
	for _, r := range groupID {
		// Java hashes UTF-16 code units: a rune outside the BMP counts as
		// its surrogate pair.
		if hi, lo := utf16.EncodeRune(r); hi != unicode.ReplacementChar {
			h = 31*(31*h+int32(hi)) + int32(lo)
		} else {
			h = 31*h + int32(r)
		}
	}
	if h == -1<<31 {
		h = 0 // Kafka's Utils.abs
	} else if h < 0 {
		h = -h
	}
	return h % partitions
}

// PartitionFor is Partition with the coordinator's partition count.
func (c *Coordinator) PartitionFor(groupID string) int32 {
	return Partition(groupID, c.cfg.Partitions)
}

// Leads reports whether partition is loaded or being loaded.
func (c *Coordinator) Leads(partition int32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.partitions[partition] != 0
}

// Load replays partition from the log and starts serving its groups. Until
// it returns, their requests get COORDINATOR_LOAD_IN_PROGRESS. Loading a
// partition already loaded does nothing.
func (c *Coordinator) Load(ctx context.Context, partition int32) error {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return errors.New("group: coordinator closed")
	}
	if c.mu.partitions[partition] != 0 {
		c.mu.Unlock()
		return nil
	}
	c.mu.partitions[partition] = partitionLoading
	c.mu.Unlock()

	groups, err := c.replay(ctx, partition)
	c.mu.Lock()
	defer c.mu.Unlock()
	ended := c.mu.ended[partition]
	delete(c.mu.ended, partition)
	if err != nil || c.mu.closed || c.mu.partitions[partition] != partitionLoading {
		if c.mu.partitions[partition] == partitionLoading {
			delete(c.mu.partitions, partition)
		}
		if err == nil {
			err = errors.New("group: partition unloaded while loading")
		}
		return fmt.Errorf("load __consumer_offsets-%d: %w", partition, err)
	}
	for _, g := range groups {
		// No transaction of the partition can have begun after a
		// marker that ended while it loaded: TxnOffsetCommit waits for
		// the load. So the ends apply to what the loader found open,
		// and to nothing newer. The groups are not published yet.
		for _, e := range ended {
			c.commits.Add(uint64(g.txns.complete(e.producerID, e.commit, g.offsets)))
		}
		c.mu.groups[g.id] = g
		for pid := range g.txns {
			m := c.mu.producers[pid]
			if m == nil {
				m = make(map[string]int32)
				c.mu.producers[pid] = m
			}
			m[g.id] = partition
		}
	}
	c.mu.partitions[partition] = partitionLoaded
	for _, g := range groups {
		g.mu.Lock()
		for _, m := range g.members {
			g.heartbeatLocked(m)
		}
		g.mu.Unlock()
	}
	c.log.Debug("offsets partition loaded", "partition", partition, "groups", len(groups)) // one per partition: the broker logs the summary
	return nil
}

// Unload stops serving partition (its leadership moved): its groups are
// forgotten and their waiting requests answered NOT_COORDINATOR.
func (c *Coordinator) Unload(partition int32) {
	c.mu.Lock()
	delete(c.mu.partitions, partition)
	delete(c.mu.ended, partition)
	for pid, m := range c.mu.producers {
		for id, p := range m {
			if p == partition {
				delete(m, id)
			}
		}
		if len(m) == 0 {
			delete(c.mu.producers, pid)
		}
	}
	var gone []*group
	for id, g := range c.mu.groups {
		if g.partition == partition {
			gone = append(gone, g)
			delete(c.mu.groups, id)
		}
	}
	c.mu.Unlock()
	for _, g := range gone {
		g.mu.Lock()
		g.shutdownLocked(kerr.NotCoordinator)
		g.mu.Unlock()
	}
}

// Close unloads every partition and wakes every waiting request.
func (c *Coordinator) Close() {
	c.mu.Lock()
	if c.mu.closed {
		c.mu.Unlock()
		return
	}
	c.mu.closed = true
	close(c.closed)
	var parts []int32
	for p := range c.mu.partitions {
		parts = append(parts, p)
	}
	c.mu.Unlock()
	for _, p := range parts {
		c.Unload(p)
	}
}

// lookup returns the group, creating it (Empty) when create is set. The
// error is NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS; a nil group
// with a nil error means the group does not exist. The group is returned
// locked and alive.
func (c *Coordinator) lookup(id string, create bool) (*group, *kerr.Error) {
	p := c.PartitionFor(id)
	for {
		c.mu.Lock()
		switch c.mu.partitions[p] {
		case partitionLoading:
			c.mu.Unlock()
			return nil, kerr.CoordinatorLoadInProgress
		case partitionLoaded:
		default:
			c.mu.Unlock()
			return nil, kerr.NotCoordinator
		}
		g := c.mu.groups[id]
		if g == nil {
			if !create {
				c.mu.Unlock()
				return nil, nil
			}
			g = c.newGroup(id, p)
			c.mu.groups[id] = g
		}
		c.mu.Unlock()
		g.mu.Lock()
		if !g.dead {
			return g, nil
		}
		g.mu.Unlock() // removed meanwhile: look again
	}
}

func (c *Coordinator) newGroup(id string, partition int32) *group {
	return &group{
		c:          c,
		id:         id,
		partition:  partition,
		state:      StateEmpty,
		stateSince: c.clock.Now(),
		members:    make(map[string]*member),
		pending:    make(map[string]*member),
		statics:    make(map[string]string),
		offsets:    make(offsetTable),
		txns:       make(txnOffsets),
	}
}

// removeGroupLocked forgets g, which must be locked, empty and without
// offsets.
func (c *Coordinator) removeGroupLocked(g *group) {
	g.dead = true
	g.stopRebalanceTimerLocked()
	c.mu.Lock()
	if c.mu.groups[g.id] == g {
		delete(c.mu.groups, g.id)
	}
	c.mu.Unlock()
}

// groups returns the loaded groups, sorted by id.
func (c *Coordinator) groups() []*group {
	c.mu.Lock()
	gs := make([]*group, 0, len(c.mu.groups))
	for _, g := range c.mu.groups {
		gs = append(gs, g)
	}
	c.mu.Unlock()
	sort.Slice(gs, func(i, j int) bool { return gs[i].id < gs[j].id })
	return gs
}

// appendLocked writes recs to g's partition as one batch of producer p
// (noProducer but for TxnOffsetCommit), waits for the commit and returns
// the batch's base offset.
func (g *group) appendLocked(ctx context.Context, recs []record, p producer) (int64, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	batch := buildBatchFor(recs, g.c.clock.Now().UnixMilli(), p)
	base, err := g.c.cfg.Log.Append(ctx, g.partition, batch)
	if err != nil {
		if !errors.Is(err, segment.ErrInvalidProducerEpoch) && !errors.Is(err, kerr.InvalidTxnState) { // the client's affair
			g.c.log.Warn("write to __consumer_offsets", "group", g.id, "partition", g.partition, "err", err)
		}
		return 0, err
	}
	return base, nil
}

// writeErr maps an OffsetLog failure to a coordinator error, as Kafka's
// coordinator does: a lost leadership is NOT_COORDINATOR, a transactional
// producer fenced by a newer epoch INVALID_PRODUCER_EPOCH, a transaction
// that ended after its verification INVALID_TXN_STATE, anything else
// COORDINATOR_NOT_AVAILABLE (the client finds the coordinator again and
// retries).
func writeErr(err error) *kerr.Error {
	switch {
	case errors.Is(err, ErrNotLeader):
		return kerr.NotCoordinator
	case errors.Is(err, segment.ErrInvalidProducerEpoch):
		return kerr.InvalidProducerEpoch
	case errors.Is(err, kerr.InvalidTxnState):
		return kerr.InvalidTxnState
	}
	return kerr.CoordinatorNotAvailable
}

// newMemberID returns clientID plus a random suffix, as Kafka builds them.
func newMemberID(clientID string) string {
	var b [16]byte
	rand.Read(b[:])
	return clientID + "-" + hex.EncodeToString(b[:])
}

// Stats are the coordinator's counters since New.
type Stats struct {
	Rebalances    uint64 // rebalances started
	OffsetCommits uint64 // partition offsets committed
}

// Stats returns the counters.
func (c *Coordinator) Stats() Stats {
	return Stats{Rebalances: c.rebalances.Load(), OffsetCommits: c.commits.Load()}
}

// Summary is one group's state for metrics and tests.
type Summary struct {
	Group      string
	State      string
	Generation int32
	Members    int
	Offsets    []CommittedOffset
}

// CommittedOffset is one committed partition offset.
type CommittedOffset struct {
	Topic     string
	Partition int32
	Offset    int64
}

// Summaries describes every loaded group, sorted by id, with at most
// maxOffsets offsets in all (to bound metric series).
func (c *Coordinator) Summaries(maxOffsets int) []Summary {
	var out []Summary
	for _, g := range c.groups() {
		g.mu.Lock()
		if g.dead {
			g.mu.Unlock()
			continue
		}
		s := Summary{Group: g.id, State: g.state.String(), Generation: g.generation, Members: len(g.members)}
		for topic, ps := range g.offsets {
			for p, o := range ps {
				if maxOffsets <= 0 {
					break
				}
				maxOffsets--
				s.Offsets = append(s.Offsets, CommittedOffset{Topic: topic, Partition: p, Offset: o.offset})
			}
		}
		g.mu.Unlock()
		sort.Slice(s.Offsets, func(i, j int) bool {
			a, b := s.Offsets[i], s.Offsets[j]
			return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
		})
		out = append(out, s)
	}
	return out
}
