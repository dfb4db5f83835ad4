package format

import (
	"bytes"
	"context"
	"reflect"
	"testing"
)

// The paged manifest's decoders take bytes from the bucket: they never
// panic, and what they accept re-encodes to the same value, stably.

func FuzzDecodeRoot(f *testing.F) {
	src := newMemPages()
	r := buildRoot(f, src, 9, testPaging)
	b, err := EncodeRoot(r)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	empty, _ := EncodeRoot(&Root{TopicPartition: testTP, LogStartOffset: 3})
	f.Add(empty)
	compacted := *r
	compacted.CleanedOffset, compacted.LastCompactionMs = 40, 1_700_000_000_000
	if b, err := EncodeRoot(&compacted); err == nil {
		f.Add(b)
	}
	v1, _ := EncodeManifest(testManifest(f))
	f.Add(v1)
	f.Add(b[:len(b)-trailerSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		checkRoot(t, b)
		checkRoot(t, withCRC(string(b)))
	})
}

func checkRoot(t *testing.T, b []byte) {
	r, err := DecodeRoot(b)
	if err != nil {
		return
	}
	if r.V1 && len(r.Tail) > MaxPageEntries {
		return // a version 1 manifest this large is paged before it is written again
	}
	enc, err := EncodeRoot(r)
	if err != nil {
		t.Fatalf("decoded root does not encode: %v", err)
	}
	r2, err := DecodeRoot(enc)
	if err != nil {
		t.Fatalf("re-encoded root does not decode: %v", err)
	}
	r.V1 = false
	if !reflect.DeepEqual(r, r2) {
		t.Fatalf("round trip:\n%+v\n%+v", r, r2)
	}
	if enc2, _ := EncodeRoot(r2); !bytes.Equal(enc, enc2) {
		t.Fatal("encoding is not stable")
	}
	// Lookups that need no page must not fail on what decodes.
	if len(r.Pages) == 0 {
		for _, o := range []int64{r.LogStartOffset, r.EndOffset() - 1} {
			if s, ok, err := r.Find(context.Background(), nil, o); err != nil || ok && (o < s.BaseOffset || o > s.LastOffset) {
				t.Fatalf("Find(%d) returned [%d, %d], %v", o, s.BaseOffset, s.LastOffset, err)
			}
		}
	}
	_ = r.Totals()
}

func FuzzDecodePage(f *testing.F) {
	src := newMemPages()
	r := buildRoot(f, src, 40, testPaging)
	for _, p := range r.Pages {
		f.Add(src.objects[p.Key])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkPage(t, b)
		checkPage(t, withCRC(string(b)))
	})
}

func checkPage(t *testing.T, b []byte) {
	p, err := DecodePage(b)
	if err != nil {
		return
	}
	po, err := summarise(p, [16]byte{1})
	if err != nil {
		t.Fatalf("decoded page does not encode: %v", err)
	}
	p2, err := OpenPage(po.Ref, po.Data)
	if err != nil {
		t.Fatalf("re-encoded page does not open: %v", err)
	}
	if !reflect.DeepEqual(p, p2) {
		t.Fatalf("round trip:\n%+v\n%+v", p, p2)
	}
	if enc, _ := EncodePage(p2); !bytes.Equal(enc, po.Data) {
		t.Fatal("encoding is not stable")
	}
}

func FuzzParsePageKey(f *testing.F) {
	f.Add(PageKey{TopicPartition: testTP, BaseOffset: 42, LeaderEpoch: 3, UID: [16]byte{9}}.String())
	f.Add(SegmentKey{TopicPartition: testTP, BaseOffset: 42}.String())
	f.Fuzz(func(t *testing.T, key string) {
		k, err := ParsePageKey(key)
		if err != nil {
			return
		}
		if k.String() != key {
			t.Fatalf("%q re-encodes as %q", key, k.String())
		}
	})
}
