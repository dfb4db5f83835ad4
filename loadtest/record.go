package loadtest

import (
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The record format written by producers and read by consumers.
//
// Every record carries one header, headerKey, whose value is this fixed
// big-endian layout (version 1, 38 bytes):
//
//	off size field
//	  0    1 version    (1)
//	  1    1 kind       (kindData, kindEnd or kindAborted)
//	  2    8 run        random per produce run, so runs sharing a topic are told apart
//	 10    4 stream     the producer client that wrote it, 0..streams-1
//	 14    4 streams    how many producer clients the run had
//	 18    8 seq        data: sequence within (run, stream, partition), from 0
//	                    end:  how many data records the stream sent to the partition
//	                    aborted: sequence within the stream's aborted records
//	 26    8 sendNanos  Unix nanoseconds when the record was due to be sent
//	 34    4 size       length of the value
//
// A data record's value is derived from (seed, stream, partition, seq, size)
// alone, so a consumer given the same seed checks every byte without any
// state shared with the producer. Keeping the partition in the derivation
// catches a record served from the wrong partition. The send time lives in
// the header rather than the record timestamp because Kafka timestamps have
// millisecond resolution, too coarse for latencies on a loopback.
//
// After its last data record is acknowledged, each stream writes one end
// marker (kind kindEnd, empty value) to every partition; the count it
// carries is what lets a consumer see records lost at the tail of a
// partition, where no later record reveals the gap.
//
// A transactional producer decides before it writes a transaction whether
// it will abort it (ProduceConfig.TxnAbortEvery), and writes that
// transaction's records as kindAborted, numbered apart from its data
// records: a consumer knows every record it must never see read_committed
// without asking the producer, and the data records' sequences stay
// gapless for the completeness check.
const (
	headerKey     = "strata-loadtest"
	headerVersion = 1
	headerLen     = 38

	kindData    = 0
	kindEnd     = 1
	kindAborted = 2
)

// header is the decoded value of a record's headerKey header.
type header struct {
	kind      byte
	run       uint64
	stream    uint32
	streams   uint32
	seq       uint64
	sendNanos int64
	size      uint32
}

func (h header) appendTo(b []byte) []byte {
	b = append(b, headerVersion, h.kind)
	b = binary.BigEndian.AppendUint64(b, h.run)
	b = binary.BigEndian.AppendUint32(b, h.stream)
	b = binary.BigEndian.AppendUint32(b, h.streams)
	b = binary.BigEndian.AppendUint64(b, h.seq)
	b = binary.BigEndian.AppendUint64(b, uint64(h.sendNanos))
	return binary.BigEndian.AppendUint32(b, h.size)
}

var (
	errBadHeader = errors.New("loadtest header malformed")
	// errNoHeader marks a record loadtest did not write: another client's,
	// in a topic a run shares.
	errNoHeader = errors.New("no loadtest header")
)

func parseHeader(b []byte) (header, error) {
	if len(b) != headerLen || b[0] != headerVersion {
		return header{}, errBadHeader
	}
	h := header{
		kind:      b[1],
		run:       binary.BigEndian.Uint64(b[2:]),
		stream:    binary.BigEndian.Uint32(b[10:]),
		streams:   binary.BigEndian.Uint32(b[14:]),
		seq:       binary.BigEndian.Uint64(b[18:]),
		sendNanos: int64(binary.BigEndian.Uint64(b[26:])),
		size:      binary.BigEndian.Uint32(b[34:]),
	}
	if h.kind > kindAborted || h.streams == 0 || h.stream >= h.streams {
		return header{}, errBadHeader
	}
	return h, nil
}

// splitmix64 is the finalizer of SplitMix64: a cheap bijective mixer whose
// output passes as random, which is all the derived values need.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// valueState is the generator state for the value of one record.
func valueState(seed int64, stream uint32, partition int32, seq uint64) uint64 {
	s := splitmix64(uint64(seed))
	s = splitmix64(s ^ uint64(stream))
	s = splitmix64(s ^ uint64(uint32(partition)))
	return splitmix64(s ^ seq)
}

// fillValue writes the derived value of a record into dst.
func fillValue(dst []byte, seed int64, stream uint32, partition int32, seq uint64) {
	s := valueState(seed, stream, partition, seq)
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		s = splitmix64(s)
		binary.LittleEndian.PutUint64(dst[i:], s)
	}
	if i < len(dst) {
		s = splitmix64(s)
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], s)
		copy(dst[i:], tail[:])
	}
}

// valueMatches reports whether v is the derived value of a record, without
// materializing the expected bytes.
func valueMatches(v []byte, size uint32, seed int64, stream uint32, partition int32, seq uint64) bool {
	if uint64(len(v)) != uint64(size) {
		return false
	}
	s := valueState(seed, stream, partition, seq)
	i := 0
	for ; i+8 <= len(v); i += 8 {
		s = splitmix64(s)
		if binary.LittleEndian.Uint64(v[i:]) != s {
			return false
		}
	}
	if i < len(v) {
		s = splitmix64(s)
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], s)
		for j := range len(v) - i {
			if v[i+j] != tail[j] {
				return false
			}
		}
	}
	return true
}

// keyFor names key k of the key space; readable keys keep kcat output useful.
func keyFor(k uint64) []byte {
	return strconv.AppendUint([]byte("key-"), k, 10)
}

// IsAborted reports whether r was written by a loadtest producer in a
// transaction it aborted on purpose (ProduceConfig.TxnAbortEvery): a record
// no read_committed consumer may be given. Benchmarks that read a run's
// records with a client of their own use it to check what they read.
func IsAborted(r *kgo.Record) bool {
	h, err := findHeader(r)
	return err == nil && h.kind == kindAborted
}
