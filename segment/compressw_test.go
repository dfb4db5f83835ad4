package segment

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A rewritten compressed batch goes out with its producer's codec, in a
// form a Kafka client decompresses: the kept records are what a consumer
// read before, at the same offsets.
func TestFilterBatchRecompressesWithTheSameCodec(t *testing.T) {
	for _, tc := range []struct {
		name   string
		codec  int
		xerial bool
	}{
		{"gzip", codecGzip, false},
		{"snappy", codecSnappy, false},
		{"snappy-xerial", codecSnappy, true},
		{"lz4", codecLz4, false},
		{"zstd", codecZstd, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Enough bytes for several xerial chunks.
			recs := keyed(60)
			for i := range recs {
				recs[i].value = bytes.Repeat(fmt.Appendf(nil, "value %d;", i), 150)
			}
			recs[10].value = nil
			spec := batchSpec{codec: tc.codec, xerial: tc.xerial, firstTs: 1_700_000_000_000, withHeader: true,
				idem: true, pid: 21, pepoch: 2, seq: 300}
			b := compactedBatch(t, spec, 7_000, 5, recs)
			orig := clientRecords(t, b)
			keep := func(o int64) bool { return o%3 != 0 }
			out, res, err := FilterBatch(nil, b, func(r *Record) bool { return keep(r.Offset) }, FilterOptions{DeleteHorizonMs: 1_800_000_000_000})
			if err != nil {
				t.Fatal(err)
			}
			if res != (FilterResult{Kept: 40, Removed: 20, Rewritten: true}) {
				t.Fatalf("result %+v", res)
			}
			h, err := checkStoredBatch(out)
			if err != nil {
				t.Fatal(err)
			}
			if h.Codec() != tc.codec {
				t.Fatalf("codec %d, want %d", h.Codec(), tc.codec)
			}
			payload := out[headerSize:]
			if got := isXerial(codecSnappy, payload); tc.codec == codecSnappy && got != tc.xerial {
				t.Fatalf("xerial framing %v, the input's was %v", got, tc.xerial)
			}
			// The client's own decompressor reads the payload, and it is
			// compressed: far smaller than the records it holds.
			raw, err := kgo.DefaultDecompressor().Decompress(payload, kgo.CompressionCodecType(tc.codec))
			if err != nil {
				t.Fatalf("client decompressor: %v", err)
			}
			if len(payload)*2 > len(raw) {
				t.Fatalf("%d bytes of records took %d compressed", len(raw), len(payload))
			}
			sameRecords(t, clientRecords(t, out), keepWhere(orig, keep))
			if _, ok := h.DeleteHorizon(); !ok {
				t.Fatal("kept tombstone without a delete horizon")
			}
		})
	}
}

// Rewriting many batches concurrently shares the pooled encoders safely.
func TestFilterBatchConcurrentRecompression(t *testing.T) {
	batches := make([][]byte, 0, 8)
	for i := range 8 {
		batches = append(batches, compactedBatch(t, batchSpec{codec: 1 + i%4, firstTs: 1}, int64(i)*100, 0, keyed(20)))
	}
	done := make(chan error, len(batches))
	for _, b := range batches {
		go func() {
			for range 20 {
				out, _, err := FilterBatch(nil, b, func(r *Record) bool { return r.Offset%2 == 0 }, FilterOptions{})
				if err == nil {
					err = ForEachRecord(out, func(r *Record) error {
						if r.Offset%2 != 0 {
							return fmt.Errorf("offset %d survived", r.Offset)
						}
						return nil
					})
				}
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range batches {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
