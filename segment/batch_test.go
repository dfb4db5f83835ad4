package segment

import (
	"encoding/binary"
	"errors"
	"testing"
)

func i32(v int32) *int32 { return &v }
func i64(v int64) *int64 { return &v }

func TestValidateBatch(t *testing.T) {
	vals := values(5, 100, 1)
	mutate := func(s batchSpec, f func(b []byte) []byte) []byte {
		return f(encodeBatch(t, s))
	}
	plain := batchSpec{values: vals, firstTs: 1000}
	tests := []struct {
		name    string
		batch   []byte
		max     int
		wantErr error
	}{
		{name: "plain", batch: encodeBatch(t, plain)},
		{name: "gzip", batch: encodeBatch(t, batchSpec{codec: codecGzip, values: vals})},
		{name: "snappy raw", batch: encodeBatch(t, batchSpec{codec: codecSnappy, values: vals})},
		{name: "snappy xerial", batch: encodeBatch(t, batchSpec{codec: codecSnappy, xerial: true, values: values(40, 100, 2)})},
		{name: "lz4", batch: encodeBatch(t, batchSpec{codec: codecLz4, values: vals})},
		{name: "zstd", batch: encodeBatch(t, batchSpec{codec: codecZstd, values: vals})},
		{name: "keys, headers, null value", batch: encodeBatch(t, batchSpec{values: [][]byte{nil, {1}}, keyPrefix: "k", withHeader: true})},
		{name: "idempotent", batch: encodeBatch(t, batchSpec{values: vals, idem: true, pid: 7, seq: 3})},

		{name: "empty input", batch: nil, wantErr: ErrCorruptMessage},
		{name: "short header", batch: encodeBatch(t, plain)[:40], wantErr: ErrCorruptMessage},
		{name: "truncated", batch: encodeBatch(t, plain)[:100], wantErr: ErrCorruptMessage},
		{name: "extra bytes after batch", batch: append(encodeBatch(t, plain), 0), wantErr: ErrCorruptMessage},
		{name: "batchLength too small", batch: mutate(plain, func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[offLength:], 10)
			return b
		}), wantErr: ErrCorruptMessage},
		{name: "magic 1", batch: mutate(plain, func(b []byte) []byte { b[offMagic] = 1; return b }), wantErr: ErrUnsupportedMagic},
		{name: "too large", batch: encodeBatch(t, plain), max: 200, wantErr: ErrMessageTooLarge},
		{name: "bad crc", batch: mutate(plain, func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), wantErr: ErrCorruptMessage},
		{name: "count says more", batch: encodeBatch(t, batchSpec{values: vals, count: 6, lastDelta: i32(5)}), wantErr: ErrCorruptMessage},
		{name: "count says fewer", batch: encodeBatch(t, batchSpec{values: vals, count: 4, lastDelta: i32(3)}), wantErr: ErrCorruptMessage},
		{name: "negative count", batch: encodeBatch(t, batchSpec{values: vals, count: -2}), wantErr: ErrCorruptMessage},
		{name: "no records", batch: encodeBatch(t, batchSpec{}), wantErr: ErrInvalidRecord},
		{name: "lastOffsetDelta mismatch", batch: encodeBatch(t, batchSpec{values: vals, lastDelta: i32(7)}), wantErr: ErrInvalidRecord},
		{name: "offset deltas not 0..n-1", batch: encodeBatch(t, batchSpec{values: vals[:3], offDeltas: []int64{0, 2, 1}}), wantErr: ErrInvalidRecord},
		{name: "trailing bytes in records", batch: encodeBatch(t, batchSpec{values: vals, trailing: []byte{0, 0}}), wantErr: ErrCorruptMessage},
		{name: "trailing bytes in compressed records", batch: encodeBatch(t, batchSpec{codec: codecZstd, values: vals, trailing: []byte{2}}), wantErr: ErrCorruptMessage},
		{name: "garbage compressed payload", batch: mutate(batchSpec{codec: codecLz4, values: vals}, func(b []byte) []byte {
			for i := headerSize; i < len(b); i++ {
				b[i] = 0xAB
			}
			fixCRC(b)
			return b
		}), wantErr: ErrCorruptMessage},
		{name: "unknown codec", batch: encodeBatch(t, batchSpec{values: vals, attrs: 6}), wantErr: ErrCorruptMessage},
		{name: "transactional without producer", batch: encodeBatch(t, batchSpec{values: vals, attrs: attrTransactional}), wantErr: ErrInvalidRecord},
		{name: "idempotent negative sequence", batch: encodeBatch(t, batchSpec{values: vals, idem: true, pid: 1, seq: -1}), wantErr: ErrInvalidRecord},
		{name: "record length past end", batch: mutate(batchSpec{values: vals[:1]}, func(b []byte) []byte {
			b[headerSize] = 0x7e // length 63: longer than what follows
			fixCRC(b)
			return b
		}), wantErr: ErrCorruptMessage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ValidateBatch(tt.batch, tt.max)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("ValidateBatch: %v", err)
				}
				if h.Size() != len(tt.batch) {
					t.Fatalf("header size %d, batch %d", h.Size(), len(tt.batch))
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ValidateBatch error = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestParseBatchHeader(t *testing.T) {
	b := encodeBatch(t, batchSpec{values: values(3, 10, 0), idem: true, pid: 42, pepoch: 3, seq: 9, firstTs: 500})
	h, err := ParseBatchHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.ProducerID != 42 || h.ProducerEpoch != 3 || h.BaseSequence != 9 || h.NumRecords != 3 ||
		h.LastOffsetDelta != 2 || h.FirstTimestamp != 500 || h.MaxTimestamp != 502 || h.Magic != 2 ||
		h.Size() != len(b) || h.lastSequence() != 11 {
		t.Fatalf("unexpected header %+v", h)
	}
}

// Kafka's sequence numbers wrap from MaxInt32 to 0.
func TestIncrementSequenceWraps(t *testing.T) {
	if got := incrementSequence(1<<31-2, 3); got != 1 {
		t.Fatalf("got %d, want 1", got)
	}
	if got := incrementSequence(5, 3); got != 8 {
		t.Fatalf("got %d, want 8", got)
	}
}

// Validation of uncompressed batches walks records in place.
func TestValidateBatchDoesNotAllocate(t *testing.T) {
	b := encodeBatch(t, batchSpec{values: values(16, 1024, 3)})
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := validateBatch(b, 0, &tsBounds{}); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per validation", allocs)
	}
}
