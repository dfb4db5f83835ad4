package segment

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// bombPayload compresses, streaming, one record whose value is valueSize
// zero bytes: a few KB that decompress to valueSize.
func bombPayload(t *testing.T, codec int, valueSize int) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch codec {
	case codecGzip:
		w = gzip.NewWriter(&buf)
	case codecLz4:
		w = lz4.NewWriter(&buf)
	case codecZstd:
		zw, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	default:
		t.Fatalf("codec %d", codec)
	}
	var head []byte
	head = append(head, 0)               // attributes
	head = binary.AppendVarint(head, 0)  // timestamp delta
	head = binary.AppendVarint(head, 0)  // offset delta
	head = binary.AppendVarint(head, -1) // null key
	head = binary.AppendVarint(head, int64(valueSize))
	rec := binary.AppendVarint(nil, int64(len(head)+valueSize+1))
	rec = append(rec, head...)
	if _, err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	zeros := make([]byte, 1<<20)
	for left := valueSize; left > 0; left -= len(zeros) {
		if _, err := w.Write(zeros[:min(left, len(zeros))]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Write([]byte{0}); err != nil { // no headers
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A small compressed batch that inflates far beyond what its record count
// and max.message.bytes allow is refused while it streams, without
// allocating anything like its inflated size.
func TestAppendBoundsDecompression(t *testing.T) {
	const inflated = 64 << 20
	for _, codec := range []int{codecGzip, codecLz4, codecZstd} {
		clock := newClock()
		l := mustOpen(t, t.TempDir(), Config{Now: clock.Now, MaxBatchBytes: 1 << 20})
		b := encodeBatch(t, batchSpec{codec: codec, payload: bombPayload(t, codec, inflated), count: 1, firstTs: clock.Millis()})
		if len(b) > 1<<20 {
			t.Fatalf("codec %d: bomb of %d bytes is over the batch limit itself", codec, len(b))
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := l.Append(b, 0)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrMessageTooLarge) {
			t.Fatalf("codec %d: %d-byte batch inflating to %d: err = %v, want %v", codec, len(b), inflated, err, ErrMessageTooLarge)
		}
		alloc := after.TotalAlloc - before.TotalAlloc
		if alloc > inflated/4 {
			t.Fatalf("codec %d: validating a %d-byte batch allocated %d bytes", codec, len(b), alloc)
		}
		t.Logf("codec %d: %d-byte batch refused after allocating %d bytes", codec, len(b), alloc)
		if l.EndOffset() != 0 {
			t.Fatalf("codec %d: written", codec)
		}
		l.Close()
	}
}

// Kafka checks max.message.bytes against the batch as sent: a few records
// of 1 MiB each, which compress to a few KB, are accepted although they
// decompress to several times the limit (franz-go's
// TestConsumeMaxDecompressBatchBytes produces three), and validating them
// streams: it allocates the decoder's buffers, not what they inflate to.
func TestAppendLargeRecordsCompressedSmall(t *testing.T) {
	const maxBytes = 1 << 20
	big := make([]byte, maxBytes)
	for _, n := range []int{3, 12} {
		for _, codec := range []int{codecGzip, codecLz4, codecZstd, codecSnappy} {
			clock := newClock()
			l := mustOpen(t, t.TempDir(), Config{Now: clock.Now, MaxBatchBytes: maxBytes})
			vals := make([][]byte, n)
			for i := range vals {
				vals[i] = big
			}
			b := encodeBatch(t, batchSpec{codec: codec, values: vals, firstTs: clock.Millis()})
			if len(b) > maxBytes {
				t.Fatalf("codec %d: batch of %d bytes is over the limit itself", codec, len(b))
			}
			info, err := l.Append(b, 0)
			if err != nil {
				t.Fatalf("codec %d: %d-byte batch of %d MiB of records: %v", codec, len(b), n, err)
			}
			if info.LastOffset != int64(n-1) || l.EndOffset() != int64(n) {
				t.Fatalf("codec %d: appended up to %d, log end %d; want %d records", codec, info.LastOffset, l.EndOffset(), n)
			}
			l.Close()
			if codec == codecSnappy {
				// A snappy block does not stream; its expansion is
				// bounded by the format (maxSnappyRatio) instead.
				continue
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err = ValidateBatch(b, maxBytes)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatalf("codec %d: validate: %v", codec, err)
			}
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("codec %d: %d-byte batch of %d MiB of records validated with %d bytes allocated", codec, len(b), n, alloc)
			// At most the decoder's own buffers (zstd's 8 MiB window,
			// lz4's 4 MiB block), whatever the records inflate to.
			if alloc > 10<<20 {
				t.Fatalf("codec %d: validating a batch of %d MiB of records allocated %d bytes", codec, n, alloc)
			}
		}
	}
}

// Validation, decompression included, runs before the log's write lock, so
// a slow batch never holds up the partition's appends.
func TestPrepareOutsideWriteLock(t *testing.T) {
	clock := newClock()
	l := mustOpen(t, t.TempDir(), Config{Now: clock.Now})
	defer l.Close()
	b := encodeBatch(t, batchSpec{codec: codecZstd, values: values(3, 100, 0), firstTs: clock.Millis()})
	l.writeMu.Lock()
	done := make(chan error, 1)
	go func() {
		_, err := l.Prepare(b)
		done <- err
	}()
	select {
	case err := <-done:
		l.writeMu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		l.writeMu.Unlock()
		t.Fatal("Prepare waited for the write lock")
	}
}

// A snappy block cannot stream, so the length it claims is checked against
// the bound (16 × max.message.bytes for one record) before anything is
// allocated; a claim snappy cannot reach from that many bytes is corrupt.
func TestSnappyClaimBounded(t *testing.T) {
	var rec []byte
	rec = appendRecord(rec, 0, 0, nil, make([]byte, 2<<20), false)
	b := encodeBatch(t, batchSpec{codec: codecSnappy, payload: s2.EncodeSnappy(nil, rec), count: 1})
	const limit = 120 << 10 // the bound is 1.875 MiB, below the 2 MiB record
	if len(b) > limit {
		t.Fatalf("%d-byte batch is over the limit itself", len(b))
	}
	if _, err := ValidateBatch(b, limit); !errors.Is(err, ErrMessageTooLarge) {
		t.Fatalf("%d-byte snappy batch of a 2 MiB record, %d-byte limit: %v, want %v", len(b), limit, err, ErrMessageTooLarge)
	}
	if _, err := ValidateBatch(b, 4<<20); err != nil {
		t.Fatalf("same batch under a 4 MiB limit: %v", err)
	}
	claim := binary.AppendUvarint(nil, 1<<24) // 16 MiB from a few bytes
	b = encodeBatch(t, batchSpec{codec: codecSnappy, payload: append(claim, 0, 0, 0, 0), count: 1})
	if _, err := ValidateBatch(b, 1<<30); !errors.Is(err, ErrCorruptMessage) {
		t.Fatalf("impossible snappy claim: %v, want %v", err, ErrCorruptMessage)
	}
}
