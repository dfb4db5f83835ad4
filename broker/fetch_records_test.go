package broker

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestFetchEmptyRecordsNotNull: a partition answered with no data carries
// an empty record set, never a null one, at every Fetch version, on a
// fresh connection (whose scratch buffer was never allocated). Kafka
// never sends null records; before v12 null is length -1, on which
// kafka-python 2.0.2's consumer crashes (len(None) in MemoryRecords) and
// librdkafka refuses the response. The lengths are read from the raw
// response bytes, as a client's decoder sees them.
func TestFetchEmptyRecordsNotNull(t *testing.T) {
	b := testBroker(t, "")
	cl := testClient(t, b)
	id := createTopic(t, kadmFor(cl), "empty", 1, nil).ID
	lo, hi := apis[int16(kmsg.Fetch)].min, apis[int16(kmsg.Fetch)].max
	for v := lo; v <= hi; v++ {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			c, err := net.Dial("tcp", b.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			req := kmsg.NewPtrFetchRequest()
			req.SetVersion(v)
			req.ReplicaID = -1
			req.MaxBytes = 1 << 20
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = "empty", id
			// Partition 0 is empty; partition 5 does not exist and is
			// answered with an error, also without records.
			for _, part := range []int32{0, 5} {
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.Partition = part
				rp.PartitionMaxBytes = 1 << 20
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
			writeFrames(t, c, 7, req)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			frame := readFrame(t, bufio.NewReader(c))
			got, errs := fetchRecordsLengths(t, frame, v)
			if len(got) != 2 {
				t.Fatalf("%d partitions answered, want 2", len(got))
			}
			if errs[0] != 0 || errs[1] == 0 {
				t.Fatalf("partition error codes %v, want 0 for the empty partition and an error for the missing one", errs)
			}
			for i, n := range got {
				if n != 0 {
					t.Errorf("partition %d: records length %d, want 0 (an empty record set, not null)", i, n)
				}
			}
		})
	}
}

// fetchRecordsLengths walks a raw Fetch response frame (correlation id
// first) of the given version and returns each partition's records length
// field as sent (-1 for null) and its error code.
func fetchRecordsLengths(t *testing.T, frame []byte, version int16) (lengths []int, codes []int16) {
	t.Helper()
	r := &rawReader{t: t, b: frame, flex: version >= 12}
	r.int32() // correlation id
	r.tags()  // response header v1 when flexible
	r.int32() // ThrottleMillis
	if version >= 7 {
		r.int16() // ErrorCode
		r.int32() // SessionID
	}
	for range r.arrayLen() {
		if version >= 13 {
			r.skip(16) // TopicID
		} else {
			r.str()
		}
		for range r.arrayLen() {
			r.int32() // Partition
			codes = append(codes, r.int16())
			r.skip(8 + 8) // HighWatermark, LastStableOffset
			if version >= 5 {
				r.int64() // LogStartOffset
			}
			for range r.arrayLen() {
				r.skip(8 + 8) // ProducerID, FirstOffset
				r.tags()
			}
			if version >= 11 {
				r.int32() // PreferredReadReplica
			}
			var n int
			if r.flex {
				n = int(r.uvarint()) - 1
			} else {
				n = int(r.int32())
			}
			lengths = append(lengths, n)
			r.skip(max(n, 0))
			r.tags()
		}
		r.tags()
	}
	r.tags()
	if len(r.b) != 0 {
		t.Fatalf("%d bytes left after the response: the walk is off", len(r.b))
	}
	return lengths, codes
}

// rawReader reads Kafka's primitive types from a response, failing the
// test on a short read.
type rawReader struct {
	t    *testing.T
	b    []byte
	flex bool
}

func (r *rawReader) skip(n int) []byte {
	r.t.Helper()
	if n > len(r.b) {
		r.t.Fatalf("response ends %d bytes early", n-len(r.b))
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}

func (r *rawReader) int16() int16 { return int16(binary.BigEndian.Uint16(r.skip(2))) }
func (r *rawReader) int32() int32 { return int32(binary.BigEndian.Uint32(r.skip(4))) }
func (r *rawReader) int64() int64 { return int64(binary.BigEndian.Uint64(r.skip(8))) }

func (r *rawReader) uvarint() uint64 {
	r.t.Helper()
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.t.Fatal("bad uvarint in response")
	}
	r.b = r.b[n:]
	return v
}

// arrayLen returns an array's length, 0 for a null array.
func (r *rawReader) arrayLen() int {
	if r.flex {
		return max(int(r.uvarint())-1, 0)
	}
	return max(int(r.int32()), 0)
}

func (r *rawReader) str() {
	if r.flex {
		r.skip(max(int(r.uvarint())-1, 0))
		return
	}
	r.skip(max(int(r.int16()), 0))
}

// tags skips a tagged-field section; there is none before flexible
// versions.
func (r *rawReader) tags() {
	if !r.flex {
		return
	}
	for range r.uvarint() {
		r.uvarint()
		r.skip(int(r.uvarint()))
	}
}
