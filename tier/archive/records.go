package archive

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/segment"
)

// Isolation is a reader's isolation level, as a Kafka consumer's.
type Isolation int8

const (
	// ReadCommitted drops the records of aborted transactions and stops
	// at the bucket's stable end (the first transaction whose outcome the
	// bucket does not hold yet).
	ReadCommitted Isolation = iota
	// ReadUncommitted returns every record, aborted ones too.
	ReadUncommitted
)

func (i Isolation) String() string {
	if i == ReadUncommitted {
		return "read_uncommitted"
	}
	return "read_committed"
}

// ParseIsolation parses "read_committed" or "read_uncommitted".
func ParseIsolation(s string) (Isolation, error) {
	switch s {
	case "read_committed":
		return ReadCommitted, nil
	case "read_uncommitted":
		return ReadUncommitted, nil
	}
	return 0, fmt.Errorf("isolation %q: want read_committed or read_uncommitted", s)
}

// decompressor is franz-go's, shared: it pools its codecs' decoders,
// which are costly to set up (zstd's above all).
var decompressor = kgo.DefaultDecompressor()

// Range bounds a read. The zero Range reads everything the bucket holds.
type Range struct {
	// From is the first offset to read (clamped to the log start).
	From int64
	// FromTime, when set (HasFromTime), starts at the first record whose
	// timestamp is at or after it (Unix ms), as ListOffsets finds it;
	// From is then ignored.
	FromTime    int64
	HasFromTime bool
	// To ends the read before this offset; 0 means no bound.
	To int64
	// ToTime, when set (HasToTime), ends the read before the first
	// record, from the start on, whose timestamp is at or after it.
	ToTime    int64
	HasToTime bool
}

// ReadOptions are a record read's.
type ReadOptions struct {
	Range
	Isolation Isolation
	Fetch     Fetch

	// after, if set, is called once a run's records are handed on with
	// the offset the read has then reached (see recordRuns).
	after func(next int64) error
}

// start returns the offset to walk from.
func (a *Archive) start(ctx context.Context, p Partition, r Range) (int64, error) {
	if !r.HasFromTime {
		return max(r.From, p.LogStart), nil
	}
	s, ok, err := p.root.FindTimestamp(ctx, a.pages, r.FromTime)
	if err != nil {
		return 0, fmt.Errorf("manifest %s: %w", p.Manifest, err)
	}
	if !ok {
		return p.End, nil // no record that late
	}
	return max(s.BaseOffset, p.LogStart), nil
}

// end returns the offset before which to stop, before time bounds.
func (r Range) end(p Partition) int64 {
	if r.To > 0 {
		return min(r.To, p.End)
	}
	return p.End
}

// Records calls fn for each record of p in r, in offset order: each
// batch CRC-checked (walk), then decoded and decompressed by franz-go's
// own fetch processing (kgo.ProcessFetchPartition), control records
// skipped, and with
// ReadCommitted the records of aborted transactions dropped using the
// bucket's txn index, exactly as a consumer would get them from a broker.
// The record and its byte slices are valid only during fn. An error from
// fn stops the read and is returned.
func (a *Archive) Records(ctx context.Context, p Partition, o ReadOptions, fn func(*kgo.Record) error) error {
	from, err := a.start(ctx, p, o.Range)
	if err != nil {
		return err
	}
	to := o.end(p)
	var aborts []segment.AbortedTxn
	iso := kgo.ReadUncommitted()
	if o.Isolation == ReadCommitted {
		iso = kgo.ReadCommitted()
		stable, err := a.stableEnd(ctx, p)
		if err != nil {
			return err
		}
		to = min(to, stable)
		if aborts, err = a.aborted(ctx, p, from, to); err != nil {
			return err
		}
	}
	var (
		active  []segment.AbortedTxn
		next    int // aborts[next:] begin after the runs so far
		started = !o.HasFromTime
	)
	return a.walk(ctx, p, from, to, o.Fetch, func(r run) error {
		// The aborted transactions overlapping this run, as a broker
		// lists them in a Fetch response for the range it returns.
		active = slices.DeleteFunc(active, func(t segment.AbortedTxn) bool { return t.LastOffset < r.first })
		for next < len(aborts) && aborts[next].FirstOffset <= r.last {
			if aborts[next].LastOffset >= r.first {
				active = append(active, aborts[next])
			}
			next++
		}
		list := make([]kmsg.FetchResponseTopicPartitionAbortedTransaction, len(active))
		for i, t := range active {
			list[i] = kmsg.NewFetchResponseTopicPartitionAbortedTransaction()
			list[i].ProducerID, list[i].FirstOffset = t.ProducerID, t.FirstOffset
		}
		rp := kmsg.NewFetchResponseTopicPartition()
		rp.Partition = p.Partition
		rp.RecordBatches = r.bytes
		rp.AbortedTransactions = list
		rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = p.End, to, p.LogStart
		// walk has checked every batch's CRC-32C already: a second
		// pass over the bytes would only cost.
		fp, _ := kgo.ProcessFetchPartition(kgo.ProcessFetchPartitionOpts{
			Offset: from, IsolationLevel: iso, Topic: p.Topic, Partition: p.Partition,
			DisableCRCValidation: true,
		}, &rp, decompressor, nil)
		if fp.Err != nil {
			return fmt.Errorf("%w: segment %s: offsets %d-%d: %v", ErrCorrupt, r.seg.Key, r.first, r.last, fp.Err)
		}
		for _, rec := range fp.Records {
			if rec.Offset >= to {
				if o.after != nil {
					if err := o.after(to); err != nil {
						return err
					}
				}
				return errStop
			}
			ts := rec.Timestamp.UnixMilli()
			if !started {
				if ts < o.FromTime {
					continue
				}
				started = true
			}
			if o.HasToTime && ts >= o.ToTime {
				return errStop
			}
			if err := fn(rec); err != nil {
				return err
			}
		}
		if o.after != nil {
			return o.after(min(r.last+1, to))
		}
		return nil
	})
}

func sortByFirst(txns []segment.AbortedTxn) {
	slices.SortStableFunc(txns, func(a, b segment.AbortedTxn) int { return cmp.Compare(a.FirstOffset, b.FirstOffset) })
}

// Batch is a run of whole record batches as the bucket stores them
// (Kafka's v2 format, compressed as the producer compressed them), each
// CRC-checked, in offset order. Bytes are valid only during the callback.
type Batch struct {
	Bytes []byte
	// First is the first batch's base offset and Last the last batch's
	// last offset.
	First, Last int64
}

// Batches calls fn with the stored batches of p holding offsets in
// [From, To) (Range's offsets; its times are ignored), unfiltered:
// control batches and aborted transactions included, as a raw copy of
// the log keeps them.
func (a *Archive) Batches(ctx context.Context, p Partition, o ReadOptions, fn func(Batch) error) error {
	from := max(o.From, p.LogStart)
	return a.walk(ctx, p, from, o.end(p), o.Fetch, func(r run) error {
		return fn(Batch{Bytes: r.bytes, First: r.first, Last: r.last})
	})
}
