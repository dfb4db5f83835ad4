package loadtest

import (
	"errors"
	"math/bits"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
)

// verifier checks consumed records against what producers derived from the
// seed. It is owned by one consumer loop and is not safe for concurrent use.
//
// Order and completeness are judged per (run, stream, partition), the unit
// in which a producer numbers its records and in which Kafka promises order.
type verifier struct {
	seed   int64
	nparts int32
	// readCommitted makes records of aborted transactions faults.
	readCommitted bool

	streams map[streamKey]*streamState
	runs    map[uint64]*runState
	parts   map[int32]*PartitionReport
	foreign int64 // records without a loadtest header
	aborted int64 // records of aborted transactions
	// unreadableParts were given up on: their end markers cannot come.
	unreadableParts map[int32]bool
}

type streamKey struct {
	run       uint64
	stream    uint32
	partition int32
}

type streamState struct {
	seen []uint64 // bitset of the sequences seen
	max  int64    // highest sequence seen, -1 before any
	end  int64    // count from the end marker, -1 until it arrives
}

type runState struct {
	streams uint32 // producer streams of the run, from its headers
	ends    int64  // distinct end markers seen
}

func newVerifier(seed int64, nparts int32) *verifier {
	return &verifier{
		seed:    seed,
		nparts:  nparts,
		streams: make(map[streamKey]*streamState),
		runs:    make(map[uint64]*runState),
		parts:   make(map[int32]*PartitionReport),

		unreadableParts: make(map[int32]bool),
	}
}

// unreadable records that partition p could not be read past some point,
// with n records below the end offset still unread: they count as
// missing, and the end markers in them are no longer waited for.
func (v *verifier) unreadable(p int32, n int64) {
	v.part(p).Missing += max(n, 0)
	v.unreadableParts[p] = true
}

// endsDue returns, for a run, how many end markers can still come (one per
// stream and readable partition) and how many of those arrived.
func (v *verifier) endsDue(id uint64, r *runState) (want, got int64) {
	readable := int64(v.nparts) - int64(len(v.unreadableParts))
	if len(v.unreadableParts) == 0 {
		return int64(r.streams) * readable, r.ends
	}
	for k, s := range v.streams {
		if k.run == id && s.end >= 0 && !v.unreadableParts[k.partition] {
			got++
		}
	}
	return int64(r.streams) * readable, got
}

func (v *verifier) part(p int32) *PartitionReport {
	r := v.parts[p]
	if r == nil {
		r = &PartitionReport{Partition: p}
		v.parts[p] = r
	}
	return r
}

func (v *verifier) stream(k streamKey) *streamState {
	s := v.streams[k]
	if s == nil {
		s = &streamState{max: -1, end: -1}
		v.streams[k] = s
	}
	return s
}

func (v *verifier) run(id uint64, streams uint32) *runState {
	r := v.runs[id]
	if r == nil {
		r = &runState{streams: streams}
		v.runs[id] = r
	}
	return r
}

func (s *streamState) has(seq uint64) bool {
	i := seq / 64
	return i < uint64(len(s.seen)) && s.seen[i]&(1<<(seq%64)) != 0
}

func (s *streamState) set(seq uint64) {
	i := seq / 64
	if i >= uint64(len(s.seen)) {
		s.seen = slices.Grow(s.seen, int(i+1)-len(s.seen))[:i+1]
	}
	s.seen[i] |= 1 << (seq % 64)
}

// countBelow returns how many sequences below n were seen.
func (s *streamState) countBelow(n uint64) int64 {
	var c int
	for i, w := range s.seen {
		lo := uint64(i) * 64
		if lo >= n {
			break
		}
		if n-lo < 64 {
			w &= 1<<(n-lo) - 1
		}
		c += bits.OnesCount64(w)
	}
	return int64(c)
}

// check judges one consumed record, whose header findHeader returned as h
// and hdrErr, and reports whether it is a data record (end markers are not
// counted as records of the run).
func (v *verifier) check(r *kgo.Record, h header, hdrErr error) (data bool) {
	if errors.Is(hdrErr, errNoHeader) {
		// Not ours to judge: another client wrote it. It is counted once,
		// as such, and is not a fault of the broker.
		v.foreign++
		return false
	}
	pr := v.part(r.Partition)
	if hdrErr != nil {
		pr.Records++
		pr.Corrupt++
		return true
	}
	k := streamKey{run: h.run, stream: h.stream, partition: r.Partition}
	if h.kind == kindEnd {
		if len(r.Value) != 0 || h.size != 0 {
			pr.Corrupt++
			return false
		}
		s := v.stream(k)
		if s.end < 0 {
			s.end = int64(h.seq)
			v.run(h.run, h.streams).ends++
		}
		return false
	}

	pr.Records++
	if h.kind == kindAborted {
		// Their value is checked, but not their order or completeness:
		// an aborted transaction promises nothing about either.
		if !valueMatches(r.Value, h.size, v.seed, h.stream, r.Partition, h.seq) {
			pr.Corrupt++
		}
		pr.Aborted++
		v.aborted++
		v.run(h.run, h.streams)
		return true
	}
	if !valueMatches(r.Value, h.size, v.seed, h.stream, r.Partition, h.seq) {
		pr.Corrupt++
		// Count the damaged record as arrived, so that one fault is not
		// reported twice, but only where its header is plausible: a
		// corrupt sequence must not grow the bitset without bound.
		if s := v.stream(k); h.seq <= uint64(s.max+1) && !s.has(h.seq) {
			s.set(h.seq)
			s.max = max(s.max, int64(h.seq))
		}
		return true
	}
	v.run(h.run, h.streams)
	s := v.stream(k)
	switch {
	case s.has(h.seq):
		pr.Duplicated++
	case int64(h.seq) < s.max:
		pr.OutOfOrder++
		s.set(h.seq)
	default:
		s.set(h.seq)
		s.max = int64(h.seq)
	}
	return true
}

// sawRun reports whether any record of a loadtest run has been seen.
func (v *verifier) sawRun() bool { return len(v.runs) > 0 }

// complete reports whether every run seen has delivered all its end markers,
// one per stream and partition: past that, nothing more of them can come.
func (v *verifier) complete() bool {
	if len(v.runs) == 0 {
		return false
	}
	for id, r := range v.runs {
		if want, got := v.endsDue(id, r); got < want {
			return false
		}
	}
	return true
}

func (v *verifier) report() *VerifyReport {
	for k, s := range v.streams {
		expected := s.end
		if expected < 0 {
			expected = s.max + 1
		}
		if expected <= 0 {
			continue
		}
		if missing := expected - s.countBelow(uint64(expected)); missing > 0 {
			v.part(k.partition).Missing += missing
		}
	}
	rep := &VerifyReport{Foreign: v.foreign}
	if v.readCommitted {
		rep.AbortedRead = v.aborted
	} else {
		rep.Aborted = v.aborted
	}
	for id, r := range v.runs {
		// An unreadable partition's unread records, end markers among
		// them, are already counted as missing.
		if want, got := v.endsDue(id, r); got < want {
			rep.Unterminated += want - got
		}
	}
	for p := range v.nparts {
		v.part(p)
	}
	for _, pr := range v.parts {
		rep.Partitions = append(rep.Partitions, *pr)
		rep.Missing += pr.Missing
		rep.Duplicated += pr.Duplicated
		rep.Corrupt += pr.Corrupt
		rep.OutOfOrder += pr.OutOfOrder
	}
	slices.SortFunc(rep.Partitions, func(a, b PartitionReport) int { return int(a.Partition) - int(b.Partition) })
	return rep
}

// findHeader decodes a record's loadtest header.
func findHeader(r *kgo.Record) (header, error) {
	for _, h := range r.Headers {
		if h.Key == headerKey {
			return parseHeader(h.Value)
		}
	}
	return header{}, errNoHeader
}
