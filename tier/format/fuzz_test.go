package format

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
)

// Decoders of untrusted bytes: never panic, and whatever they accept
// re-encodes to the same bytes (footer, keys) or the same value (manifest).

func FuzzParseFooter(f *testing.F) {
	p, _ := testParts()
	obj, _, _ := writeObject(f, p)
	f.Add(obj[len(obj)-FooterSize:])
	f.Add(make([]byte, FooterSize))
	// A version 1 footer: no txn index part.
	ft, _ := ParseFooter(obj[len(obj)-FooterSize:])
	ft.TxnIndex = OptionalPart{}
	f.Add(appendFooter(nil, ft))
	f.Fuzz(func(t *testing.T, b []byte) {
		ft, err := ParseFooter(b)
		if err != nil {
			return
		}
		if got := appendFooter(nil, ft); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded footer differs:\n%x\n%x", got, b)
		}
		if ft.ObjectSize() < int64(len(b)) {
			t.Fatalf("object size %d", ft.ObjectSize())
		}
	})
}

func FuzzDecodeManifest(f *testing.F) {
	b, err := EncodeManifest(testManifest(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	empty, _ := EncodeManifest(&Manifest{TopicPartition: testTP, LogStartOffset: 3})
	f.Add(empty)
	f.Add(b[:len(b)-trailerSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		// Also re-seal the input, so that the fuzzer explores the decoder
		// behind the checksum.
		checkDecoded(t, b)
		checkDecoded(t, withCRC(string(b)))
	})
}

func checkDecoded(t *testing.T, b []byte) {
	m, err := DecodeManifest(b)
	if err != nil {
		return
	}
	enc, err := EncodeManifest(m)
	if err != nil {
		t.Fatalf("decoded manifest does not encode: %v", err)
	}
	m2, err := DecodeManifest(enc)
	if err != nil || !reflect.DeepEqual(m, m2) {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, m, m2)
	}
	if enc2, _ := EncodeManifest(m2); !bytes.Equal(enc, enc2) {
		t.Fatal("encoding is not stable")
	}
	for _, o := range []int64{m.LogStartOffset, m.EndOffset() - 1} {
		if s, ok := m.Find(o); ok && (o < s.BaseOffset || o > s.LastOffset) {
			t.Fatalf("Find(%d) returned [%d, %d]", o, s.BaseOffset, s.LastOffset)
		}
	}
}

func FuzzLookupOffset(f *testing.F) {
	p, _ := testParts()
	f.Add(p.Index, int64(100), int64(150))
	f.Add(p.TimeIndex, int64(100), int64(1200))
	f.Add([]byte{1, 2, 3}, int64(0), int64(-1))
	f.Fuzz(func(t *testing.T, index []byte, base, target int64) {
		pos, err := LookupOffset(index, base, target)
		if err == nil && (pos < 0 || pos > 1<<32-1) {
			t.Fatalf("position %d", pos)
		}
		off, ok, err := LookupTimestamp(index, base, target)
		if err == nil && !ok && off != 0 {
			t.Fatalf("not found but offset %d", off)
		}
		// On well-formed indexes the answers agree with a linear scan.
		span := int64(1 << 32)
		if checkOffsetIndex(index, 1<<32, span) == nil {
			var want int64
			for i := 0; i < len(index); i += OffsetEntrySize {
				if base+int64(binary.BigEndian.Uint32(index[i:])) <= target {
					want = int64(binary.BigEndian.Uint32(index[i+4:]))
				}
			}
			if pos != want {
				t.Fatalf("LookupOffset = %d, linear scan %d", pos, want)
			}
		}
	})
}

func FuzzParseKeys(f *testing.F) {
	f.Add(SegmentKey{testTP, 4096, 3, [16]byte{1}}.String())
	f.Add(ManifestKey{testTP, 3, 17}.String())
	f.Fuzz(func(t *testing.T, key string) {
		if k, err := ParseSegmentKey(key); err == nil && k.String() != key {
			t.Fatalf("segment key %q re-encodes as %q", key, k.String())
		}
		if k, err := ParseManifestKey(key); err == nil && k.String() != key {
			t.Fatalf("manifest key %q re-encodes as %q", key, k.String())
		}
	})
}
