package partition

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/segment"
)

// FetchPart is one partition's part of a fetch: what was asked and, once
// Fetch has returned, the answer. The caller sets the first group of
// fields; a part refused before the read (an unknown partition, a fenced
// epoch) has P nil or Err set and is answered as it is.
type FetchPart struct {
	P         *Partition
	Offset    int64
	MaxBytes  int
	Replica   bool // a follower's fetch: up to the log end, local only
	Committed bool // read_committed: up to the last stable offset
	// ZeroCopy lets a read of the local log answer with Range rather
	// than bytes in the buffer, for the caller to send with sendfile.
	// A follower's range may reach past the high watermark, where a
	// truncation may cut it: what the socket has queued stays the
	// range's, and the rest is not sent (segment.FileRange).
	ZeroCopy bool

	// Err is the part's error; set, nothing is read for it.
	Err error
	// HighWatermark, LastStableOffset and LogStartOffset are the
	// partition's as of the read; -1 when not known.
	HighWatermark, LastStableOffset, LogStartOffset int64
	// Diverging is set when a follower's log diverges from the leader's:
	// DivergingEpoch and DivergingEnd then say where it must truncate to.
	Diverging      bool
	DivergingEpoch int32
	DivergingEnd   int64
	// Aborted lists the aborted transactions overlapping the records read,
	// for a read_committed fetch; nil until the partition is read.
	Aborted []segment.AbortedTxn
	// Start and End are the span of the part's records in the buffer
	// Fetch returns.
	Start, End int
	// Range holds the part's records instead, when the read took them as
	// a file range (ZeroCopy). The caller releases it (ReleaseRanges)
	// once it has sent it.
	Range segment.FileRange

	done bool // answered: do not read again
}

// NewFetchPart is a part asking for p's records from offset on.
func NewFetchPart(p *Partition, offset int64, maxBytes int, replica, committed bool) FetchPart {
	return FetchPart{P: p, Offset: offset, MaxBytes: maxBytes, Replica: replica, Committed: committed,
		HighWatermark: -1, LastStableOffset: -1, LogStartOffset: -1}
}

// Refuse answers the part with err, reading nothing.
func (fp *FetchPart) Refuse(err error) {
	fp.Err = err
	fp.done = true
	fp.Start, fp.End = 0, 0
	fp.Range.Release()
}

// ReleaseRanges releases the file ranges parts still hold.
func ReleaseRanges(parts []*FetchPart) {
	for _, fp := range parts {
		fp.Range.Release()
	}
}

// CheckLeaderEpoch applies KIP-320: a client that knows a newer epoch than
// ours is ahead of us (UNKNOWN_LEADER_EPOCH, retry); one that knows an
// older one is fenced (FENCED_LEADER_EPOCH, refresh metadata).
func (p *Partition) CheckLeaderEpoch(epoch int32) error {
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

// FollowerFetch checks a follower's fetch of fp and records its position
// on the leader: the fetch offset is the follower's log end, and id's
// incarnation is brokerEpoch. A log that diverges from the leader's (its
// last epoch, lastFetchedEpoch, ends earlier here) is answered with where
// it diverges and no records; an offset outside the leader's local log
// gets the error with the leader's local start and high watermark, which
// the follower needs to know where to go.
func (fp *FetchPart) FollowerFetch(id int32, brokerEpoch int64, lastFetchedEpoch int32) error {
	p := fp.P
	if lastFetchedEpoch >= 0 {
		end, epoch := p.log.EndOffsetForEpoch(lastFetchedEpoch)
		if end >= 0 && (end < fp.Offset || epoch < lastFetchedEpoch) {
			fp.Diverging, fp.DivergingEpoch, fp.DivergingEnd = true, epoch, end
			fp.HighWatermark = p.HighWatermark()
			fp.LogStartOffset = p.log.StartOffset()
			fp.done = true // answered: nothing to read
			return nil
		}
	}
	if start, end := p.log.StartOffset(), p.log.EndOffset(); fp.Offset < start || fp.Offset > end {
		fp.HighWatermark = p.HighWatermark()
		fp.LogStartOffset = start
		if fp.Offset < start && p.Tiered() {
			return kerr.OffsetMovedToTieredStorage
		}
		return kerr.OffsetOutOfRange
	}
	return p.ReplicaFetched(id, brokerEpoch, fp.Offset)
}

// Fetch reads the parts' records into buf, and, until minBytes are there
// or wait has passed (or ctx ends), waits for more: any part's high
// watermark moving (its log end, for a follower's part) reads them all
// again. maxBytes bounds the whole answer. It returns buf, which the
// parts' spans index.
func Fetch(ctx context.Context, parts []*FetchPart, buf []byte, maxBytes, minBytes int, wait time.Duration) []byte {
	prefetch(parts)
	var waiter chan struct{}
	var timer *time.Timer
	for {
		var total int
		var anyErr bool
		buf, total, anyErr = read(parts, buf, maxBytes)
		if total >= minBytes || anyErr || wait <= 0 {
			return buf
		}
		if waiter == nil {
			waiter = make(chan struct{}, 1)
			for _, fp := range parts {
				if fp.P != nil && !fp.done && fp.Err == nil {
					if fp.Replica {
						fp.P.AddLogEndWaiter(waiter)
					} else {
						fp.P.AddWaiter(waiter)
					}
					defer fp.P.RemoveWaiter(waiter)
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
		case <-ctx.Done():
		}
		buf, _, _ = read(parts, buf, maxBytes)
		return buf
	}
}

// prefetch starts the bucket reads of every part that is below its
// partition's local log start, so that their GETs run side by side on the
// tier's worker pool while the fetch reads partitions in order.
func prefetch(parts []*FetchPart) {
	for _, fp := range parts {
		p := fp.P
		if p == nil || fp.done || fp.Err != nil {
			continue
		}
		if b, name := p.remote(); b != nil && fp.Offset < p.log.StartOffset() && fp.Offset < p.remoteEnd.Load() {
			b.Prefetch(name, fp.Offset)
		}
	}
}

// read reads every part's committed bytes into buf, honouring the
// response and partition byte limits. It returns the bytes read and
// whether any part has an error (which ends a long poll, as in Kafka).
//
// The buffer grows with the data found, never to the limits up front: a
// consumer asking for 50 MiB from caught-up partitions gets a few bytes,
// and must not cost 50 MiB each time it polls. It is the connection's, so
// a steady consumer reuses the same memory fetch after fetch.
func read(parts []*FetchPart, buf []byte, maxBytes int) (out []byte, total int, anyErr bool) {
	buf = buf[:0]
	first := true
	for _, fp := range parts {
		if fp.done || fp.P == nil || fp.Err != nil {
			anyErr = true
			continue
		}
		p := fp.P
		// The last stable offset first: the high watermark read after it
		// is at least the one it was bounded by.
		lso := p.LastStableOffset()
		hw := p.HighWatermark()
		fp.HighWatermark = hw
		fp.LastStableOffset = lso
		fp.LogStartOffset = p.LogStartOffset()
		limit := hw
		if fp.Committed {
			limit = lso
			// Kafka sends read_committed consumers a list, empty or
			// not, once their partition is read.
			if fp.Aborted == nil {
				fp.Aborted = []segment.AbortedTxn{}
			}
			fp.Aborted = fp.Aborted[:0]
		}
		fp.Start, fp.End = len(buf), len(buf)
		fp.Range.Release() // a long poll reads again
		budget := min(fp.MaxBytes, maxBytes-total)
		if budget <= 0 && !first {
			continue
		}
		rangeEnd := limit
		if fp.Replica {
			// A follower copies the local log up to its end; older data
			// is in the bucket, where followers do not go.
			rangeEnd = p.log.EndOffset()
			fp.LogStartOffset = p.log.StartOffset()
		}
		if fp.ZeroCopy && fp.Offset < rangeEnd && fp.Offset >= p.log.StartOffset() {
			r, err := p.log.ReadRange(fp.Offset, rangeEnd, max(budget, 1))
			switch {
			case err == nil:
				if !first && r.Len() > budget {
					// Only the first non-empty partition may exceed the
					// limits (KIP-74); a later one's range is its first
					// batch only when that batch is over the budget.
					r.Release()
					continue
				}
				if fp.Committed {
					if err := fp.abortedIn(r.Next, r.Transactional); err != nil {
						p.host.Logger.Warn("fetch aborted transactions", "topic", p.topic, "partition", p.index, "offset", fp.Offset, "err", err)
						r.Release()
						fp.Refuse(err)
						anyErr = true
						continue
					}
				}
				fp.Range = r
				total += r.Len()
				if r.Len() > 0 {
					first = false
				}
				continue
			case errors.Is(err, segment.ErrOffsetOutOfRange):
				// Retention moved the log start past offset since it was
				// looked at: the copying read below goes to the bucket.
			default:
				fp.readFailed(err)
				anyErr = true
				continue
			}
		}
		n := len(buf)
		var err error
		if fp.Replica {
			buf, err = p.log.Read(buf, fp.Offset, rangeEnd, max(budget, 1))
		} else {
			if fp.Offset == limit {
				continue
			}
			if fp.Offset > limit && fp.Offset <= p.log.EndOffset() {
				// Between the high watermark (or last stable offset) and
				// the log end: not readable yet, so nothing to return but
				// not out of range either.
				continue
			}
			buf, err = p.ReadAt(buf, fp.Offset, limit, max(budget, 1))
		}
		if err != nil && len(buf) == n {
			// Corrupt data is logged where it is found, once per segment or
			// object and interval: a consumer retries it many times a second.
			fp.readFailed(err)
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
		if fp.Committed {
			if err := fp.abortedIn(batchesSpan(got)); err != nil {
				// Without the list the consumer would take aborted
				// records for committed ones: no records rather than those.
				p.host.Logger.Warn("fetch aborted transactions", "topic", p.topic, "partition", p.index, "offset", fp.Offset, "err", err)
				buf = buf[:n]
				fp.Refuse(err)
				anyErr = true
				continue
			}
		}
		fp.End = len(buf)
		total += len(got)
		if len(got) > 0 {
			first = false
		}
	}
	return buf, total, anyErr
}

// readFailed refuses the part with the error its read met, logging what
// is a failure: not an offset out of range or corrupt data (logged where
// it is found), and a partition deleted or moved mid-read only at debug
// level, for the client is just told to refresh its metadata.
func (fp *FetchPart) readFailed(err error) {
	p := fp.P
	switch {
	case errors.Is(err, segment.ErrOffsetOutOfRange), errors.Is(err, segment.ErrCorruptSegment):
	case errors.Is(err, segment.ErrClosed):
		p.host.Logger.Debug("fetch read", "topic", p.topic, "partition", p.index, "offset", fp.Offset, "err", err)
	default:
		p.host.Logger.Error("fetch read", "topic", p.topic, "partition", p.index, "offset", fp.Offset, "err", err)
	}
	fp.Refuse(err)
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

// abortedIn fills in fp's Aborted for the batches read, from fp.Offset
// to upTo, of which transactional says whether any is a transactional
// data batch: every aborted transaction whose records overlap them
// (Kafka's collectAbortedTransactions), from the local log's indexes and,
// for a read below the local log start, the bucket's. A consumer drops
// the aborted producers' transactional records from each entry's first
// offset until it meets the producer's ABORT marker.
func (fp *FetchPart) abortedIn(upTo int64, transactional bool) error {
	if !transactional {
		// Only transactional data batches can be aborted: a range without
		// any needs no list, and costs no index read.
		return nil
	}
	p := fp.P
	list := p.log.AbortedTransactions(fp.Offset, upTo)
	if b, name := p.remote(); b != nil && fp.Offset < p.log.StartOffset() {
		ctx, cancel := context.WithTimeout(p.host.Context, 30*time.Second)
		remote, err := b.AbortedTransactions(ctx, name, fp.Offset, upTo)
		cancel()
		if err != nil {
			return fmt.Errorf("aborted transactions of %s-%d in the bucket: %w", p.topic, p.index, StorageError(err))
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
	fp.Aborted = append(fp.Aborted, list...)
	return nil
}

// Record batch attribute bits (the low byte of the int16 at byte 21).
const (
	AttrTransactional = 0x10
	AttrControl       = 0x20
)

// batchesSpan returns the offset after the last batch in b (which may end
// with a partial batch whose header is whole) and whether any is a
// transactional data batch.
func batchesSpan(b []byte) (end int64, transactional bool) {
	for len(b) >= 27 {
		base := int64(binary.BigEndian.Uint64(b))
		attrs := b[22]
		end = base + int64(int32(binary.BigEndian.Uint32(b[23:]))) + 1
		transactional = transactional || attrs&(AttrTransactional|AttrControl) == AttrTransactional
		size := 12 + int(binary.BigEndian.Uint32(b[8:]))
		if size > len(b) {
			break
		}
		b = b[size:]
	}
	return end, transactional
}
