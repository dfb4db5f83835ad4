package partition

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"

	"strata/segment"
	"strata/tier/format"
	"strata/tier/objstore"
)

// ReadReplica names what a read-replica partition serves: a partition of
// another cluster's topic, read from that cluster's bucket
// (docs/operations.md, Read replicas). Such a partition takes no
// appends: its local log stays empty, restarted at the source's end as
// the source uploads, and every read below it goes to the source's
// bucket, at the source's offsets, with the source's bytes.
type ReadReplica struct {
	// URI names the source bucket, for messages.
	URI string
	// Name is the source partition in that bucket (its topic's name and id
	// there, not this cluster's).
	Name format.TopicPartition
}

// source is a read replica's state on this node.
type source struct {
	ReadReplica
	// bucket is the source's cold tier, set by the first PollSource; nil
	// until then.
	bucket atomic.Pointer[bucketRef]
	// known is set once a manifest of the source has been read: until then
	// the partition cannot say where its log starts or ends.
	known atomic.Bool
	// found is set once the source's bucket held a manifest of the
	// partition; gone once it then held none (SourceGone).
	found, gone atomic.Bool
}

type bucketRef struct{ SourceBucket }

// SourceBucket is the bucket of a read replica's source (*tier.Tier): a
// Bucket that also tells a partition without a manifest any more
// (RefreshSource).
type SourceBucket interface {
	Bucket
	RefreshSource(ctx context.Context, tp format.TopicPartition) (m *format.Root, found bool, err error)
}

// SourceGone reports whether the source's bucket no longer holds the
// partition it once held: the source topic (that incarnation, named by
// its id) was deleted. The partition then serves nothing below its end.
func (p *Partition) SourceGone() bool { return p.source != nil && p.source.gone.Load() }

// ReadReplicaOf returns what the partition serves when it is a read
// replica, nil otherwise.
func (p *Partition) ReadReplicaOf() *ReadReplica {
	if p.source == nil {
		return nil
	}
	return &p.source.ReadReplica
}

// remote returns the bucket the partition's reads below its local log go
// to, and the partition's name there: the node's own tier, or a read
// replica's source (nil until its first poll).
func (p *Partition) remote() (Bucket, format.TopicPartition) {
	if s := p.source; s != nil {
		if b := s.bucket.Load(); b != nil {
			return b.SourceBucket, s.Name
		}
		return nil, s.Name
	}
	return p.host.Bucket, p.BucketName()
}

// errReadReplica refuses a write to a read replica.
func (p *Partition) errReadReplica(what string) error {
	return fmt.Errorf("%w: topic %q is a read replica of %s (topic %q there): it takes no %s",
		kerr.PolicyViolation, p.topic, p.source.URI, p.source.Name.Topic, what)
}

// PollSource reads the source's newest manifest from b and makes it the
// partition's: its log start, its high watermark and its last stable
// offset are the manifest's log start and end (what the source uploads is
// committed and holds no open transaction). The local log, which stays
// empty, restarts at the new end with the producer state and leader
// epochs of the last object, so that OffsetForLeaderEpoch answers with
// the source's epochs. It returns the manifest read.
//
// A source whose bucket holds no manifest of the partition any more,
// though it did, deleted the topic: the partition's bounds in the bucket
// go, and its log start becomes its end (the local log's start, where
// the last poll left it), so a fetch below answers OFFSET_OUT_OF_RANGE
// and the latest offset stays where it was. A topic created again at the
// source under the name has another id, and is not followed.
//
// Reads never see the high watermark ahead of the manifest they read
// from: the tier's manifest moves first, then the bounds, then the local
// log, then the high watermark.
func (p *Partition) PollSource(ctx context.Context, b SourceBucket) (*format.Root, error) {
	s := p.source
	if s == nil {
		return nil, fmt.Errorf("%s-%d is not a read replica", p.topic, p.index)
	}
	// The upload lock, which a read replica has no other use for,
	// serialises polls (the loop's and one after a missing object).
	p.tier.mu.Lock()
	defer p.tier.mu.Unlock()
	if p.tier.ctx.Err() != nil {
		return nil, nil
	}
	m, found, err := b.RefreshSource(ctx, s.Name)
	if err != nil {
		return nil, fmt.Errorf("read the manifest of %s-%d in %s: %w", s.Name.Topic, s.Name.Partition, s.URI, err)
	}
	s.bucket.Store(&bucketRef{b})
	if found {
		// (A manifest back after the source's deletion, put back by
		// hand, is followed again.)
		s.found.Store(true)
		s.gone.Store(false)
	} else if s.found.Load() {
		s.gone.Store(true)
	}
	end := m.EndOffset()
	if s.gone.Load() {
		// Deleted at the source: nothing in the bucket, and the ends stay
		// (they never move down).
		p.remoteStart.Store(-1)
		p.remoteEnd.Store(-1)
		s.known.Store(true)
		p.remoteKnown.Store(true)
		p.Wake()
		return m, nil
	}
	p.uploadedEnd.Store(end)
	if m.Empty() {
		p.remoteStart.Store(-1)
		p.remoteEnd.Store(-1)
	} else {
		// End first: a reader that sees the new start also sees an end.
		p.remoteEnd.Store(end)
		p.remoteStart.Store(m.LogStartOffset)
	}
	if p.log.EndOffset() < end {
		start, h, ok, err := b.HistoryBelow(ctx, s.Name, end)
		if err != nil {
			return nil, fmt.Errorf("history of %s-%d below %d in %s: %w", s.Name.Topic, s.Name.Partition, end, s.URI, err)
		}
		if !ok || start != end {
			// Retention emptied the bucket (or moved on meanwhile):
			// nothing below the end to carry state from.
			h = segment.History{}
		}
		p.appendMu.Lock()
		err = p.log.TruncateFullyAndStartAt(end, h)
		if err == nil {
			p.logEnd.Set(float64(end))
		}
		p.appendMu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("move the local log of read replica %s-%d to %d: %w", p.topic, p.index, end, err)
		}
	}
	for {
		cur := p.hw.Load()
		if cur >= p.log.EndOffset() || p.hw.CompareAndSwap(cur, p.log.EndOffset()) {
			break
		}
	}
	s.known.Store(true)
	p.remoteKnown.Store(true)
	p.Wake()
	return m, nil
}

// readSource is ReadRemote for a read replica: an object the source's
// retention or compaction deleted since the manifest was read is not a
// failure but a stale manifest, so the partition reads the source's
// manifest again and retries once. The offset is then below the new log
// start (OFFSET_OUT_OF_RANGE) or in a replacement object; a hole is
// never served as data.
func (p *Partition) readSource(ctx context.Context, b Bucket, name format.TopicPartition, dst []byte, offset, maxOffset int64, maxBytes int) ([]byte, error) {
	out, err := b.ReadBelow(ctx, name, dst, offset, maxOffset, maxBytes)
	if err == nil || !errors.Is(err, objstore.ErrNotFound) {
		return out, err
	}
	sb := p.source.bucket.Load() // set: b is its bucket
	if _, perr := p.PollSource(ctx, sb.SourceBucket); perr != nil {
		return dst, err
	}
	return b.ReadBelow(ctx, name, dst, offset, min(maxOffset, p.HighWatermark()), maxBytes)
}
