package loadtest

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestHeaderRoundTrip(t *testing.T) {
	h := header{kind: kindEnd, run: 1 << 60, stream: 3, streams: 4, seq: 1<<40 + 5, sendNanos: -7, size: 1 << 20}
	b := h.appendTo(nil)
	if len(b) != headerLen {
		t.Fatalf("header is %d bytes, want %d", len(b), headerLen)
	}
	got, err := parseHeader(b)
	if err != nil || got != h {
		t.Fatalf("parseHeader = %+v, %v; want %+v", got, err, h)
	}
	for name, bad := range map[string][]byte{
		"short":          b[:headerLen-1],
		"long":           append(b[:headerLen:headerLen], 0),
		"version":        append([]byte{2}, b[1:]...),
		"kind":           append([]byte{headerVersion, 9}, b[2:]...),
		"stream>streams": header{stream: 4, streams: 4}.appendTo(nil),
		"no streams":     header{}.appendTo(nil),
	} {
		if _, err := parseHeader(bad); err == nil {
			t.Errorf("%s: parseHeader accepted %x", name, bad)
		}
	}
}

// Values are byte-identical for the same inputs, differ when any input
// differs, and valueMatches agrees with fillValue at every length,
// including those that are not a multiple of the generator's 8 bytes.
func TestDerivedValues(t *testing.T) {
	for size := range 40 {
		v := make([]byte, size)
		fillValue(v, 1, 2, 3, 4)
		if !valueMatches(v, uint32(size), 1, 2, 3, 4) {
			t.Fatalf("size %d: value does not match itself", size)
		}
		if size == 0 {
			continue
		}
		for i := range size {
			v[i] ^= 0x80
			if valueMatches(v, uint32(size), 1, 2, 3, 4) {
				t.Fatalf("size %d: flipping byte %d went unnoticed", size, i)
			}
			v[i] ^= 0x80
		}
		if valueMatches(v[:size-1], uint32(size), 1, 2, 3, 4) || valueMatches(v, uint32(size+1), 1, 2, 3, 4) {
			t.Fatalf("size %d: a length mismatch went unnoticed", size)
		}
		for _, other := range [][4]int64{{9, 2, 3, 4}, {1, 9, 3, 4}, {1, 2, 9, 4}, {1, 2, 3, 9}} {
			if size >= 8 && valueMatches(v, uint32(size), other[0], uint32(other[1]), int32(other[2]), uint64(other[3])) {
				t.Fatalf("size %d: value also matches inputs %v", size, other)
			}
		}
	}
}

// rec builds what a producer of the given run would have written.
func rec(partition int32, stream, streams uint32, seq uint64, kind byte) *kgo.Record {
	const seed, size = 5, 16
	h := header{kind: kind, run: 77, stream: stream, streams: streams, seq: seq, sendNanos: time.Now().UnixNano()}
	r := &kgo.Record{Partition: partition, Value: []byte{}}
	if kind == kindData {
		h.size = size
		r.Value = make([]byte, size)
		fillValue(r.Value, seed, stream, partition, seq)
	}
	r.Headers = []kgo.RecordHeader{{Key: headerKey, Value: h.appendTo(nil)}}
	return r
}

func TestVerifier(t *testing.T) {
	data := func(p int32, seq uint64) *kgo.Record { return rec(p, 0, 1, seq, kindData) }
	end := func(p int32, n uint64) *kgo.Record { return rec(p, 0, 1, n, kindEnd) }
	corrupt := func(r *kgo.Record) *kgo.Record { r.Value[0] ^= 1; return r }

	for _, tc := range []struct {
		name     string
		records  []*kgo.Record
		want     VerifyReport // totals only
		complete bool
	}{{
		name:     "clean",
		records:  []*kgo.Record{data(0, 0), data(1, 0), data(0, 1), end(0, 2), end(1, 1)},
		complete: true,
	}, {
		name:     "gap",
		records:  []*kgo.Record{data(0, 0), data(0, 2), end(0, 3), end(1, 0)},
		want:     VerifyReport{Missing: 1},
		complete: true,
	}, {
		name:     "tail lost, seen through the end marker",
		records:  []*kgo.Record{data(0, 0), end(0, 3), end(1, 0)},
		want:     VerifyReport{Missing: 2},
		complete: true,
	}, {
		name:    "no end marker",
		records: []*kgo.Record{data(0, 0), data(0, 1), end(0, 2)},
		want:    VerifyReport{Unterminated: 1},
	}, {
		name:     "duplicate",
		records:  []*kgo.Record{data(0, 0), data(0, 1), data(0, 1), data(0, 0), end(0, 2), end(1, 0)},
		want:     VerifyReport{Duplicated: 2},
		complete: true,
	}, {
		name:     "out of order",
		records:  []*kgo.Record{data(0, 0), data(0, 2), data(0, 1), end(0, 3), end(1, 0)},
		want:     VerifyReport{OutOfOrder: 1},
		complete: true,
	}, {
		name:     "corrupt value counts once, not also as missing",
		records:  []*kgo.Record{data(0, 0), corrupt(data(0, 1)), data(0, 2), end(0, 3), end(1, 0)},
		want:     VerifyReport{Corrupt: 1},
		complete: true,
	}, {
		name:     "corrupt first record",
		records:  []*kgo.Record{corrupt(data(0, 0)), data(0, 1), end(0, 2), end(1, 0)},
		want:     VerifyReport{Corrupt: 1},
		complete: true,
	}, {
		name:     "record from the wrong partition",
		records:  []*kgo.Record{func() *kgo.Record { r := data(0, 0); r.Partition = 1; return r }(), end(0, 0), end(1, 0)},
		want:     VerifyReport{Corrupt: 1},
		complete: true,
	}, {
		// Another client's record, in a topic the run shares: skipped and
		// counted as such, not a fault.
		name:     "foreign record",
		records:  []*kgo.Record{{Partition: 1, Value: []byte("hello")}, end(0, 0), end(1, 0)},
		want:     VerifyReport{Foreign: 1},
		complete: true,
	}, {
		name: "malformed loadtest header",
		records: []*kgo.Record{{Partition: 1, Value: []byte("hello"), Headers: []kgo.RecordHeader{{Key: headerKey, Value: []byte{headerVersion, 1}}}},
			end(0, 0), end(1, 0)},
		want:     VerifyReport{Corrupt: 1},
		complete: true,
	}, {
		name: "two streams are judged apart",
		records: []*kgo.Record{
			rec(0, 0, 2, 0, kindData), rec(0, 1, 2, 0, kindData), rec(0, 1, 2, 1, kindData), rec(0, 0, 2, 1, kindData),
			rec(0, 0, 2, 2, kindEnd), rec(0, 1, 2, 2, kindEnd), rec(1, 0, 2, 0, kindEnd), rec(1, 1, 2, 0, kindEnd),
		},
		complete: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVerifier(5, 2)
			var records int64
			for _, r := range tc.records {
				h, err := findHeader(r)
				if v.check(r, h, err) {
					records++
				}
			}
			if v.complete() != tc.complete {
				t.Errorf("complete() = %v, want %v", v.complete(), tc.complete)
			}
			got := v.report()
			var perPartition int64
			for _, p := range got.Partitions {
				perPartition += p.Records
			}
			if len(got.Partitions) != 2 || perPartition != records {
				t.Errorf("partitions %+v do not add up to %d records", got.Partitions, records)
			}
			type totals struct{ missing, duplicated, corrupt, outOfOrder, unterminated, foreign int64 }
			sum := func(r *VerifyReport) totals {
				return totals{r.Missing, r.Duplicated, r.Corrupt, r.OutOfOrder, r.Unterminated, r.Foreign}
			}
			if sum(got) != sum(&tc.want) {
				t.Fatalf("report %+v, want %+v", sum(got), sum(&tc.want))
			}
			if faults := (totals{foreign: sum(&tc.want).foreign}); (got.Err() == nil) != (sum(&tc.want) == faults) {
				t.Fatalf("Err() = %v for %+v", got.Err(), *got)
			}
		})
	}
}

func TestCountBelow(t *testing.T) {
	s := &streamState{max: -1, end: -1}
	for _, seq := range []uint64{0, 1, 63, 64, 65, 200} {
		s.set(seq)
	}
	for n, want := range map[uint64]int64{0: 0, 1: 1, 2: 2, 63: 2, 64: 3, 65: 4, 66: 5, 200: 5, 201: 6, 1000: 6} {
		if got := s.countBelow(n); got != want {
			t.Errorf("countBelow(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	ok := ProduceConfig{Bootstrap: []string{"h:1"}, Topic: "t", Records: 1}
	if err := ok.validate(); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	for want, mut := range map[string]func(*ProduceConfig){
		"unbounded":          func(c *ProduceConfig) { c.Records = 0 },
		"no bootstrap":       func(c *ProduceConfig) { c.Bootstrap = nil },
		"not host:port":      func(c *ProduceConfig) { c.Bootstrap = []string{"h"} },
		"no topic":           func(c *ProduceConfig) { c.Topic = "" },
		"records -1":         func(c *ProduceConfig) { c.Records = -1 },
		"size":               func(c *ProduceConfig) { c.Size = -1 },
		"not both":           func(c *ProduceConfig) { c.Rate, c.RateMB = 1, 1 },
		"is not 0, 1 or all": func(c *ProduceConfig) { c.Acks = "2" },
		"requires acks=all":  func(c *ProduceConfig) { c.Acks, c.Idempotent = "1", true },
		"compression":        func(c *ProduceConfig) { c.Compression = "brotli" },
	} {
		c := ok
		mut(&c)
		if err := c.validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: validate() = %v", want, err)
		}
	}
	cc := ConsumeConfig{Bootstrap: []string{"h:1"}, Topic: "t", Duration: time.Second, From: "2026-01-02T03:04:05Z"}
	if err := cc.validate(); err != nil {
		t.Fatalf("consume config with a time: %v", err)
	}
	cc.From = "yesterday"
	if err := cc.validate(); err == nil {
		t.Fatal("consume config accepted from=yesterday")
	}
}
