package badgerstore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func openTest(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func entry(i uint64) *raft.Log {
	return &raft.Log{
		Index:      i,
		Term:       i/10 + 1,
		Type:       raft.LogCommand,
		Data:       []byte{byte(i), 'd'},
		Extensions: []byte("ext"),
		AppendedAt: time.Unix(1700000000, int64(i)),
	}
}

func storeRange(t *testing.T, s *Store, from, to uint64) {
	t.Helper()
	var logs []*raft.Log
	for i := from; i <= to; i++ {
		logs = append(logs, entry(i))
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatalf("StoreLogs: %v", err)
	}
}

func wantBounds(t *testing.T, s *Store, first, last uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	if err != nil {
		t.Fatalf("FirstIndex: %v", err)
	}
	l, err := s.LastIndex()
	if err != nil {
		t.Fatalf("LastIndex: %v", err)
	}
	if f != first || l != last {
		t.Fatalf("bounds = [%d, %d], want [%d, %d]", f, l, first, last)
	}
}

func sameLog(t *testing.T, got, want *raft.Log) {
	t.Helper()
	if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type ||
		!bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Extensions, want.Extensions) ||
		!got.AppendedAt.Equal(want.AppendedAt) {
		t.Fatalf("log = %+v, want %+v", got, want)
	}
}

// raft.LogStore: "FirstIndex returns the first index written. 0 for no
// entries." and likewise LastIndex.
func TestEmptyLogHasZeroBounds(t *testing.T) {
	s := openTest(t, t.TempDir())
	wantBounds(t, s, 0, 0)
	var l raft.Log
	if err := s.GetLog(1, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog on empty = %v, want ErrLogNotFound", err)
	}
}

func TestStoreGetRoundTripsEveryField(t *testing.T) {
	s := openTest(t, t.TempDir())
	want := entry(7)
	if err := s.StoreLog(want); err != nil {
		t.Fatal(err)
	}
	var got raft.Log
	if err := s.GetLog(7, &got); err != nil {
		t.Fatal(err)
	}
	sameLog(t, &got, want)

	// Empty payloads and the zero time survive as such.
	bare := &raft.Log{Index: 8, Term: 3, Type: raft.LogNoop}
	if err := s.StoreLog(bare); err != nil {
		t.Fatal(err)
	}
	if err := s.GetLog(8, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, bare) {
		t.Fatalf("bare log = %+v, want %+v", got, bare)
	}
}

func TestBoundsFollowStoresAndDeletes(t *testing.T) {
	s := openTest(t, t.TempDir())
	storeRange(t, s, 1, 300)
	wantBounds(t, s, 1, 300)

	// Compaction deletes a prefix; truncation after a conflict deletes a suffix.
	if err := s.DeleteRange(1, 100); err != nil {
		t.Fatal(err)
	}
	wantBounds(t, s, 101, 300)
	if err := s.DeleteRange(251, 300); err != nil {
		t.Fatal(err)
	}
	wantBounds(t, s, 101, 250)

	var l raft.Log
	for _, gone := range []uint64{1, 100, 251, 300} {
		if err := s.GetLog(gone, &l); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("GetLog(%d) after delete = %v, want ErrLogNotFound", gone, err)
		}
	}
	for _, kept := range []uint64{101, 180, 250} {
		if err := s.GetLog(kept, &l); err != nil {
			t.Fatalf("GetLog(%d): %v", kept, err)
		}
		sameLog(t, &l, entry(kept))
	}

	// A range wider than the log, and an inverted one, are harmless.
	if err := s.DeleteRange(300, 200); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(0, ^uint64(0)); err != nil {
		t.Fatal(err)
	}
	wantBounds(t, s, 0, 0)
}

// DeleteRange works in chunks; a range spanning several chunks must still
// delete exactly the range.
func TestDeleteRangeAcrossChunks(t *testing.T) {
	s := openTest(t, t.TempDir())
	n := uint64(2*deleteChunk + 17)
	storeRange(t, s, 1, n)
	if err := s.DeleteRange(1, n-5); err != nil {
		t.Fatal(err)
	}
	wantBounds(t, s, n-4, n)
}

// Indexes above 2^56 check that keys sort numerically, not by their low bytes.
func TestBoundsWithLargeIndexes(t *testing.T) {
	s := openTest(t, t.TempDir())
	for _, i := range []uint64{255, 256, 1 << 56, 1<<56 + 1} {
		if err := s.StoreLog(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	wantBounds(t, s, 255, 1<<56+1)
}

func TestStableStore(t *testing.T) {
	s := openTest(t, t.TempDir())

	// raft.StableStore: missing keys read as empty and 0, without error.
	if v, err := s.Get([]byte("missing")); err != nil || v != nil {
		t.Fatalf("Get(missing) = %q, %v", v, err)
	}
	if v, err := s.GetUint64([]byte("missing")); err != nil || v != 0 {
		t.Fatalf("GetUint64(missing) = %d, %v", v, err)
	}

	if err := s.Set([]byte("k"), []byte("v1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("k"), []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get([]byte("k")); err != nil || string(v) != "v2" {
		t.Fatalf("Get(k) = %q, %v", v, err)
	}
	if err := s.SetUint64([]byte("term"), 1<<40+3); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetUint64([]byte("term")); err != nil || v != 1<<40+3 {
		t.Fatalf("GetUint64(term) = %d, %v", v, err)
	}
	if _, err := s.GetUint64([]byte("k")); err == nil {
		t.Fatal("GetUint64 of a 2-byte value succeeded")
	}

	// The stable namespace never leaks into the log bounds.
	wantBounds(t, s, 0, 0)
}

func TestReopenPersists(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	storeRange(t, s, 5, 50)
	if err := s.SetUint64([]byte("CurrentTerm"), 9); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.LastIndex(); !errors.Is(err, ErrClosed) {
		t.Fatalf("LastIndex after Close = %v, want ErrClosed", err)
	}

	s = openTest(t, dir)
	wantBounds(t, s, 5, 50)
	var l raft.Log
	if err := s.GetLog(33, &l); err != nil {
		t.Fatal(err)
	}
	sameLog(t, &l, entry(33))
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 9 {
		t.Fatalf("GetUint64 after reopen = %d, %v", v, err)
	}
}

func TestOpenTwiceIsAnError(t *testing.T) {
	dir := t.TempDir()
	openTest(t, dir)
	if s, err := Open(dir, nil); err == nil {
		s.Close()
		t.Fatal("second Open of a held directory succeeded")
	}
}

func TestOpenOnFileIsAnError(t *testing.T) {
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(f, nil); err == nil {
		s.Close()
		t.Fatal("Open on a regular file succeeded")
	}
}

func TestDecodeRejectsDamage(t *testing.T) {
	good := encodeLog(entry(3))
	var l raft.Log
	if err := decodeLog(good, &l); err != nil {
		t.Fatalf("decode good: %v", err)
	}
	for i := range good {
		if err := decodeLog(good[:i], &l); err == nil {
			t.Fatalf("decode of %d-byte prefix succeeded", i)
		}
	}
	bad := append([]byte{}, good...)
	bad[0] = 2
	if err := decodeLog(bad, &l); err == nil {
		t.Fatal("decode of unknown format succeeded")
	}
	if err := decodeLog(append(good, 0), &l); err == nil {
		t.Fatal("decode with trailing byte succeeded")
	}
}

func FuzzDecodeLog(f *testing.F) {
	f.Add(encodeLog(entry(1)))
	f.Add(encodeLog(&raft.Log{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		var l raft.Log
		if decodeLog(b, &l) != nil {
			return
		}
		// Whatever decodes re-encodes to the same bytes, except that a
		// non-canonical varint may shrink; decoding again must agree.
		var again raft.Log
		if err := decodeLog(encodeLog(&l), &again); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(l, again) {
			t.Fatalf("round trip changed %+v to %+v", l, again)
		}
	})
}
