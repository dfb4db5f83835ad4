package broker

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/meta"
	"strata/segment"
)

// Fetch: v4-17
//
// Serves record batches below the high watermark straight from the log's
// file bytes, never re-encoded. Honours MaxWaitMillis and MinBytes (the
// request long-polls until enough bytes are committed, the wait expires or
// the broker shuts down), MaxBytes for the response and PartitionMaxBytes
// per partition; as KIP-74 requires, the first batch of the first
// non-empty partition is returned whole even when it is larger than both.
// The response limit is also capped by the broker's FetchMaxBytes (Kafka's
// fetch.max.bytes, 55 MiB), and a limit of 0 or less means that first
// batch only, so no request can make one response hold a whole segment.
// Topics are named (v4-12) or identified by topic id (v13+, KIP-516).
//
// Version notes: v4 isolation level and LastStableOffset; v5
// LogStartOffset; v7 fetch sessions (KIP-227); v9 CurrentLeaderEpoch
// (KIP-320); v11 rack-aware preferred replica (KIP-392); v12 flexible, and
// CurrentLeader (KIP-951: a partition refused with NOT_LEADER_OR_FOLLOWER
// or FENCED_LEADER_EPOCH names the leader and epoch this node knows); v13
// topic ids; v15 ReplicaState (KIP-903); v16 NodeEndpoints, those
// leaders' addresses (KIP-951); v17 no change for consumers.
//
// Followers fetch too (ReplicaID, or ReplicaState from v15): only the
// leader answers them, only for a replica of the partition (and, from
// v15, only the incarnation registered: an older ReplicaState epoch gets
// STALE_BROKER_EPOCH, KIP-903), with the
// records up to its log end rather than the high watermark; the fetch
// offset is the follower's log end as far as the leader is concerned
// (docs/replication.md). From v12 a follower names the epoch of its last
// batch (LastFetchedEpoch) and the leader answers a log that diverges from
// its own with DivergingEpoch, where the follower truncates. A follower
// below the leader's local log start (older data is in the bucket) gets
// OFFSET_MOVED_TO_TIERED_STORAGE and the local start, and starts there.
//
// Transactions (KIP-98): a read_committed fetch (IsolationLevel 1) reads
// up to the last stable offset, the first offset of the earliest
// transaction still open, and gets the aborted transactions whose records
// overlap what it returns (producer id and first offset), from the local
// log's .txnindex files and, for a read below the local log start, the
// bucket's; the consumer drops those records. LastStableOffset is sent at
// every isolation level, as Kafka does. A read_committed long poll waits
// for the last stable offset to move: the marker that ends a transaction
// wakes it.
//
// Not done: fetch sessions are declined (SessionID 0 in every response, a
// choice the protocol allows: clients then send full fetches); consumers
// fetch from the leader only (no KIP-392 follower fetching).
func init() { register(kmsg.Fetch, 4, 17, (*Broker).handleFetch) }

// noRecords is the record set of a partition answered without data:
// empty, not null. Shared and never written to.
var noRecords = []byte{}

// fetchPart is one requested partition's place in the response.
type fetchPart struct {
	p         *partition
	offset    int64
	maxBytes  int
	resp      *kmsg.FetchResponseTopicPartition
	replica   bool // a follower's fetch: up to the log end, local only
	committed bool // read_committed: up to the last stable offset
	start     int  // span of the partition's bytes in conn.scratch
	end       int
	errorDone bool // answered with an error; do not read again
}

func (b *Broker) handleFetch(req *request) (kmsg.Response, error) {
	start := time.Now()
	defer func() { b.metrics.fetchLatency.Observe(time.Since(start).Seconds()) }()
	r := req.kreq.(*kmsg.FetchRequest)
	resp := r.ResponseKind().(*kmsg.FetchResponse)

	if r.SessionID != 0 {
		// We never hand out sessions, so a client naming one is confused;
		// this error makes it start over with a full fetch.
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		b.metrics.countError(kmsg.Fetch, resp.ErrorCode)
		return resp, nil
	}

	replicaID, replicaEpoch := r.ReplicaID, int64(-1)
	if r.Version >= 15 {
		replicaID, replicaEpoch = r.ReplicaState.ID, r.ReplicaState.Epoch
	}
	st := b.meta.State()
	staleErr := staleReplica(st, replicaID, replicaEpoch)
	// One allocation for every partition's state, not one each.
	n := 0
	for i := range r.Topics {
		n += len(r.Topics[i].Partitions)
	}
	all := make([]fetchPart, n)
	parts := make([]*fetchPart, 0, n)
	resp.Topics = make([]kmsg.FetchResponseTopic, 0, len(r.Topics))
	for i := range r.Topics {
		rt := &r.Topics[i]
		name, id := rt.Topic, rt.TopicID
		var topicErr error
		if r.Version >= 13 {
			if t, ok := st.TopicByID(id); ok {
				name = t.Name
			} else {
				topicErr = kerr.UnknownTopicID
			}
		} else if t, ok := st.Topics[name]; ok {
			id = t.ID
		} else {
			topicErr = kerr.UnknownTopicOrPartition
		}
		ft := kmsg.NewFetchResponseTopic()
		ft.Topic, ft.TopicID = name, id
		ft.Partitions = make([]kmsg.FetchResponseTopicPartition, len(rt.Partitions))
		resp.Topics = append(resp.Topics, ft)
		rtResp := &resp.Topics[len(resp.Topics)-1]
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			sp := &rtResp.Partitions[j]
			*sp = kmsg.NewFetchResponseTopicPartition()
			sp.Partition = rp.Partition
			sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
			fp := &all[len(parts)]
			*fp = fetchPart{offset: rp.FetchOffset, maxBytes: int(rp.PartitionMaxBytes), resp: sp, replica: replicaID >= 0}
			fp.committed = r.IsolationLevel == 1 && !fp.replica
			parts = append(parts, fp)
			err := topicErr
			if err == nil && fp.replica {
				fp.p, err = b.ledNow(name, rp.Partition)
			} else if err == nil {
				fp.p, err = b.led(name, rp.Partition)
			}
			if err == nil {
				err = checkLeaderEpoch(fp.p, rp.CurrentLeaderEpoch)
			}
			if err == nil && fp.replica {
				err = staleErr
			}
			if err == nil && fp.replica {
				err = b.followerFetch(fp, replicaID, replicaEpoch, rp)
			}
			if err != nil {
				fp.setError(err)
			}
		}
	}

	// The broker's cap applies whatever the client asks for; a limit of 0
	// or less still returns the first batch (below), as in Kafka.
	maxBytes := min(max(int(r.MaxBytes), 0), int(b.cfg.FetchMaxBytes))
	minBytes := int(r.MinBytes)
	wait := time.Duration(r.MaxWaitMillis) * time.Millisecond

	b.prefetchRemote(parts)
	var waiter chan struct{}
	var timer *time.Timer
	for {
		total, anyErr := b.readFetch(req.conn, parts, maxBytes)
		if total >= minBytes || anyErr || wait <= 0 {
			break
		}
		if waiter == nil {
			waiter = make(chan struct{}, 1)
			for _, fp := range parts {
				if fp.p != nil && !fp.errorDone {
					fp.p.addWaiter(waiter)
					defer fp.p.removeWaiter(waiter)
				}
			}
			timer = time.NewTimer(wait)
			defer timer.Stop()
			// Data may have arrived between the read and the registration.
			continue
		}
		select {
		case <-waiter:
			continue
		case <-timer.C:
		case <-b.ctx.Done():
		}
		b.readFetch(req.conn, parts, maxBytes)
		break
	}

	for _, fp := range parts {
		// Never nil: Kafka always sends a record set, empty or not, and
		// nil encodes as null (length -1 before v12), which librdkafka
		// refuses and kafka-python crashes on. A slice of the scratch
		// buffer is nil when nothing was read on a connection whose
		// buffer was never allocated or was let go, so an empty answer
		// takes a non-nil empty slice instead.
		fp.resp.RecordBatches = noRecords
		if fp.end > fp.start {
			fp.resp.RecordBatches = req.conn.scratch[fp.start:fp.end:fp.end]
		}
		b.metrics.countError(kmsg.Fetch, fp.resp.ErrorCode)
	}
	if r.Version >= 12 {
		b.fetchLeaderHints(resp)
	}
	return resp, nil
}

// fetchLeaderHints applies KIP-951 to a Fetch answer: each partition
// refused with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH names the
// leader and epoch this node's metadata knows (v12+), and from v16 the
// response carries those leaders' endpoints, so that a consumer or a
// follower moves at once instead of waiting for a metadata refresh.
func (b *Broker) fetchLeaderHints(resp *kmsg.FetchResponse) {
	h := leaderHints{st: b.meta.State()}
	for i := range resp.Topics {
		ft := &resp.Topics[i]
		for j := range ft.Partitions {
			sp := &ft.Partitions[j]
			if sp.ErrorCode == kerr.NotLeaderForPartition.Code || sp.ErrorCode == kerr.FencedLeaderEpoch.Code {
				sp.CurrentLeader.LeaderID, sp.CurrentLeader.LeaderEpoch = h.leader(ft.Topic, sp.Partition)
			}
		}
	}
	if resp.Version < 16 {
		return
	}
	for _, br := range h.endpoints() {
		fb := kmsg.NewFetchResponseBroker()
		fb.NodeID, fb.Host, fb.Port, fb.Rack = br.ID, br.Host, br.Port, rack(br)
		resp.Brokers = append(resp.Brokers, fb)
	}
}

// followerFetch checks a follower's fetch and records its position: the
// fetch offset is the follower's log end. A log that diverges from the
// leader's (its last epoch ends earlier here) gets DivergingEpoch and no
// records; an offset outside the leader's local log gets the error with
// the leader's local start and high watermark, which the follower needs to
// know where to go.
func (b *Broker) followerFetch(fp *fetchPart, id int32, epoch int64, rp *kmsg.FetchRequestTopicPartition) error {
	p := fp.p
	if rp.LastFetchedEpoch >= 0 {
		end, epoch := p.log.EndOffsetForEpoch(rp.LastFetchedEpoch)
		if end >= 0 && (end < rp.FetchOffset || epoch < rp.LastFetchedEpoch) {
			fp.resp.DivergingEpoch.Epoch, fp.resp.DivergingEpoch.EndOffset = epoch, end
			fp.resp.HighWatermark = p.highWatermark()
			fp.resp.LogStartOffset = p.log.StartOffset()
			fp.errorDone = true // answered: nothing to read
			return nil
		}
	}
	if start, end := p.log.StartOffset(), p.log.EndOffset(); rp.FetchOffset < start || rp.FetchOffset > end {
		fp.resp.HighWatermark = p.highWatermark()
		fp.resp.LogStartOffset = start
		if rp.FetchOffset < start && b.remoteEnabled(p) {
			return kerr.OffsetMovedToTieredStorage
		}
		return kerr.OffsetOutOfRange
	}
	return b.replicaFetched(p, id, epoch, rp.FetchOffset)
}

// staleReplica refuses a follower's fetch from an incarnation older than
// the one registered (KIP-903): a process that lost its disk and
// restarted must not be kept in, or added to, the ISR on the strength of
// where its previous life had fetched to, and a paused previous life must
// not speak for the new one. A fetch that names no epoch (before v15, or
// -1) is taken as it is, as Kafka does. A newer epoch than this node's
// metadata knows is the new incarnation ahead of the metadata: its fetch
// offset is its own, and it joins the ISR only once the metadata shows
// its registration (maybeAlterISR).
func staleReplica(st *meta.State, id int32, epoch int64) error {
	if id < 0 || epoch < 0 {
		return nil
	}
	if br, ok := st.Brokers[id]; ok && epoch < br.Epoch {
		return fmt.Errorf("%w: broker %d fetched at epoch %d, registered at %d", kerr.StaleBrokerEpoch, id, epoch, br.Epoch)
	}
	return nil
}

func (fp *fetchPart) setError(err error) {
	fp.resp.ErrorCode = errorCode(err)
	fp.errorDone = true
	fp.start, fp.end = 0, 0
}

// checkLeaderEpoch applies KIP-320: a client that knows a newer epoch than
// ours is ahead of us (UNKNOWN_LEADER_EPOCH, retry); one that knows an
// older one is fenced (FENCED_LEADER_EPOCH, refresh metadata).
func checkLeaderEpoch(p *partition, epoch int32) error {
	if epoch < 0 {
		return nil
	}
	cur := p.leaderEpoch.Load()
	switch {
	case epoch > cur:
		return kerr.UnknownLeaderEpoch
	case epoch < cur:
		return kerr.FencedLeaderEpoch
	}
	return nil
}

// readFetch reads every partition's committed bytes into the connection's
// scratch buffer, honouring the response and partition byte limits. It
// returns the bytes read and whether any partition has an error (which
// ends a long poll, as in Kafka).
//
// The buffer grows with the data found, never to the limits up front: a
// consumer asking for 50 MiB from caught-up partitions gets a few bytes,
// and must not cost 50 MiB each time it polls. It is the connection's, so
// a steady consumer reuses the same memory fetch after fetch.
func (b *Broker) readFetch(c *conn, parts []*fetchPart, maxBytes int) (total int, anyErr bool) {
	buf := c.scratch[:0]
	first := true
	for _, fp := range parts {
		if fp.errorDone {
			anyErr = true
			continue
		}
		p := fp.p
		// The last stable offset first: the high watermark read after it
		// is at least the one it was bounded by.
		lso := p.lastStableOffset()
		hw := p.highWatermark()
		fp.resp.HighWatermark = hw
		fp.resp.LastStableOffset = lso
		fp.resp.LogStartOffset = p.logStartOffset()
		limit := hw
		if fp.committed {
			limit = lso
			// Kafka sends read_committed consumers a list, empty or not,
			// and the others none.
			fp.resp.AbortedTransactions = []kmsg.FetchResponseTopicPartitionAbortedTransaction{}
		}
		fp.start, fp.end = len(buf), len(buf)
		budget := min(fp.maxBytes, maxBytes-total)
		if budget <= 0 && !first {
			continue
		}
		n := len(buf)
		var err error
		if fp.replica {
			// A follower copies the local log up to its end; older data
			// is in the bucket, where followers do not go.
			fp.resp.LogStartOffset = p.log.StartOffset()
			buf, err = p.log.Read(buf, fp.offset, p.log.EndOffset(), max(budget, 1))
		} else {
			if fp.offset == limit {
				continue
			}
			if fp.offset > limit && fp.offset <= p.log.EndOffset() {
				// Between the high watermark (or last stable offset) and
				// the log end: not readable yet, so nothing to return but
				// not out of range either.
				continue
			}
			buf, err = b.readAt(p, buf, fp.offset, limit, max(budget, 1))
		}
		if err != nil && len(buf) == n {
			// Corrupt data is logged where it is found, once per segment or
			// object and interval: a consumer retries it many times a second.
			switch {
			case errors.Is(err, segment.ErrOffsetOutOfRange), errors.Is(err, segment.ErrCorruptSegment):
			case errors.Is(err, segment.ErrClosed):
				// The partition was deleted or moved away mid-read: the
				// client is told to refresh its metadata, nothing failed.
				b.log.Debug("fetch read", "topic", p.topic, "partition", p.index, "offset", fp.offset, "err", err)
			default:
				b.log.Error("fetch read", "topic", p.topic, "partition", p.index, "offset", fp.offset, "err", err)
			}
			fp.setError(err) // Fetch has no error message: only the code goes back
			anyErr = true
			continue
		}
		got := buf[n:]
		if !first && len(got) > budget {
			// Only the first non-empty partition may exceed the limits
			// (KIP-74); later ones are cut back to whole batches.
			got = got[:wholeBatches(got, budget)]
			buf = buf[:n+len(got)]
		}
		if fp.committed {
			if err := b.abortedIn(fp, got); err != nil {
				// Without the list the consumer would take aborted
				// records for committed ones: no records rather than those.
				b.log.Warn("fetch aborted transactions", "topic", p.topic, "partition", p.index, "offset", fp.offset, "err", err)
				buf = buf[:n]
				fp.setError(err)
				anyErr = true
				continue
			}
		}
		fp.end = len(buf)
		total += len(got)
		if len(got) > 0 {
			first = false
		}
	}
	c.scratch = buf
	return total, anyErr
}

// wholeBatches returns the length of the longest prefix of batches that
// fits in limit bytes.
func wholeBatches(b []byte, limit int) int {
	n := 0
	for len(b)-n >= 12 {
		size := 12 + int(binary.BigEndian.Uint32(b[n+8:]))
		if n+size > limit || n+size > len(b) {
			break
		}
		n += size
	}
	return n
}

// abortedIn fills in fp's AbortedTransactions for the batches read, got:
// every aborted transaction whose records overlap them (Kafka's
// collectAbortedTransactions), from the local log's indexes and, for a
// read below the local log start, the bucket's. A consumer drops the
// aborted producers' transactional records from each entry's first
// offset until it meets the producer's ABORT marker.
func (b *Broker) abortedIn(fp *fetchPart, got []byte) error {
	upTo, transactional := batchesSpan(got)
	if !transactional {
		// Only transactional data batches can be aborted: a range without
		// any needs no list, and costs no index read.
		return nil
	}
	p := fp.p
	list := p.log.AbortedTransactions(fp.offset, upTo)
	if b.tier != nil && fp.offset < p.log.StartOffset() {
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		remote, err := b.tier.AbortedTransactions(ctx, p.bucketName(), fp.offset, upTo)
		cancel()
		if err != nil {
			return fmt.Errorf("aborted transactions of %s-%d in the bucket: %w", p.topic, p.index, storageError(err))
		}
		// Segments still on local disk are in the bucket too: their
		// entries come from both.
		for _, a := range remote {
			if !slices.Contains(list, a) {
				list = append(list, a)
			}
		}
		slices.SortFunc(list, func(x, y segment.AbortedTxn) int { return cmp.Compare(x.FirstOffset, y.FirstOffset) })
	}
	for _, a := range list {
		at := kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
		at.ProducerID, at.FirstOffset = a.ProducerID, a.FirstOffset
		fp.resp.AbortedTransactions = append(fp.resp.AbortedTransactions, at)
	}
	return nil
}

// batchesSpan returns the offset after the last batch in b (which may end
// with a partial batch whose header is whole) and whether any is a
// transactional data batch.
func batchesSpan(b []byte) (end int64, transactional bool) {
	for len(b) >= 27 {
		base := int64(binary.BigEndian.Uint64(b))
		attrs := b[22]
		end = base + int64(int32(binary.BigEndian.Uint32(b[23:]))) + 1
		transactional = transactional || attrs&(attrTransactional|attrControl) == attrTransactional
		size := 12 + int(binary.BigEndian.Uint32(b[8:]))
		if size > len(b) {
			break
		}
		b = b[size:]
	}
	return end, transactional
}
