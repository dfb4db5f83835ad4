package segment

import (
	"bytes"
	"errors"
	"testing"
)

func FuzzValidateBatch(f *testing.F) {
	for codec := range 5 {
		f.Add(encodeBatch(f, batchSpec{codec: codec, values: values(3, 30, byte(codec)), keyPrefix: "k", withHeader: true}))
	}
	f.Add(encodeBatch(f, batchSpec{codec: codecSnappy, xerial: true, values: values(4, 600, 1)}))
	f.Add(encodeBatch(f, batchSpec{values: values(2, 5, 0), idem: true, pid: 3, seq: 9}))
	f.Add(encodeBatch(f, batchSpec{values: values(1, 0, 0), attrs: attrControl}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ValidateBatch(b, 1<<20)
		if err != nil {
			for _, want := range []error{ErrCorruptMessage, ErrInvalidRecord, ErrUnsupportedMagic, ErrMessageTooLarge} {
				if errors.Is(err, want) {
					return
				}
			}
			t.Fatalf("unclassified error: %v", err)
		}
		// A valid batch is self-consistent and stays valid once the log
		// stamps it.
		if h.Size() != len(b) || h.NumRecords != h.LastOffsetDelta+1 || h.Magic != 2 {
			t.Fatalf("accepted an inconsistent header %+v for %d bytes", h, len(b))
		}
		if _, err := ValidateBatch(stamped(b, 12345, 7), 1<<20); err != nil {
			t.Fatalf("stamping broke a valid batch: %v", err)
		}
		if ph, err := ParseBatchHeader(b); err != nil || ph != h {
			t.Fatalf("ParseBatchHeader disagrees: %+v, %v", ph, err)
		}
	})
}

// BenchmarkAppend appends ~16 KiB batches of 1 KiB records.
func BenchmarkAppend(b *testing.B) {
	for _, codec := range []struct {
		name string
		id   int
	}{{"none", codecNone}, {"zstd", codecZstd}} {
		b.Run(codec.name, func(b *testing.B) {
			l := mustOpen(b, b.TempDir(), Config{TimestampAfterMax: -1})
			defer l.Close()
			batch := encodeBatch(b, batchSpec{codec: codec.id, values: values(16, 1024, 0), firstTs: 1})
			b.SetBytes(int64(len(batch)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := l.Append(batch, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRead reads 1 MiB fetches from a log of 16 KiB batches, as a
// consumer catching up would.
func BenchmarkRead(b *testing.B) {
	l := mustOpen(b, b.TempDir(), Config{SegmentBytes: 64 << 20, TimestampAfterMax: -1})
	defer l.Close()
	batch := encodeBatch(b, batchSpec{values: values(16, 1024, 0), firstTs: 1})
	for range 4096 { // 64 MiB
		if _, err := l.Append(batch, 0); err != nil {
			b.Fatal(err)
		}
	}
	end := l.EndOffset()
	buf := make([]byte, 0, 2<<20)
	b.SetBytes(1 << 20)
	b.ReportAllocs()
	b.ResetTimer()
	var off int64
	for b.Loop() {
		out, err := l.Read(buf[:0], off, end, 1<<20)
		if err != nil {
			b.Fatal(err)
		}
		off += 16 * int64(len(out)/len(batch))
		if off >= end {
			off = 0
		}
	}
}

// FuzzAppendReplica feeds AppendReplica what a leader's Fetch response
// could hold, bytes from the network: it must never panic, every refusal
// is classified, and what it accepts reads back byte for byte, also after
// a restart.
func FuzzAppendReplica(f *testing.F) {
	one := stamped(encodeBatch(f, batchSpec{values: values(3, 20, 1), idem: true, pid: 4, seq: 0}), 0, 2)
	two := stamped(encodeBatch(f, batchSpec{codec: codecZstd, values: values(2, 30, 2)}), 3, 5)
	f.Add(one)
	f.Add(append(bytes.Clone(one), two...))
	f.Add(append(bytes.Clone(one), two[:40]...))
	f.Add(stamped(encodeBatch(f, batchSpec{values: values(1, 0, 0), attrs: attrControl, idem: true, pid: 1}), 0, 0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		l := mustOpen(t, dir, Config{SegmentBytes: 4 << 10})
		info, err := l.AppendReplica(b)
		if err != nil {
			for _, want := range []error{ErrCorruptMessage, ErrInvalidRecord, ErrUnsupportedMagic, ErrMessageTooLarge, ErrOffsetMismatch} {
				if errors.Is(err, want) {
					l.Close()
					return
				}
			}
			t.Fatalf("unclassified error: %v", err)
		}
		if info.Bytes > len(b) || l.EndOffset() != info.LastOffset+1 || l.Size() != int64(info.Bytes) {
			t.Fatalf("accepted %+v of %d bytes: end %d size %d", info, len(b), l.EndOffset(), l.Size())
		}
		check := func() {
			t.Helper()
			got, err := l.Read(nil, 0, l.EndOffset(), len(b)+1)
			if err != nil || !bytes.Equal(got, b[:info.Bytes]) {
				t.Fatalf("read back %d bytes (%v), appended %d", len(got), err, info.Bytes)
			}
		}
		check()
		crash(l)
		l = mustOpen(t, dir, Config{SegmentBytes: 4 << 10})
		defer l.Close()
		check()
	})
}
