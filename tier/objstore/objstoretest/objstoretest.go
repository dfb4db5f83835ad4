// Package objstoretest is the acceptance suite of the objstore.Store
// contract. Every implementation (the directory store, S3 against the
// in-process server, S3 against MinIO or AWS when configured, and any
// decorator) must pass Run, so code written against one backend behaves the
// same on the others.
package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"strata/tier/objstore"
)

// Run runs the suite. newStore must return an empty store for each call; it
// is called once per subtest, with the subtest's t, so it may register
// cleanups. The subtests run in parallel, so newStore must be safe to call
// concurrently.
func Run(t *testing.T, newStore func(t *testing.T) objstore.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s objstore.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Ranges", testRanges},
		{"NotFound", testNotFound},
		{"Overwrite", testOverwrite},
		{"ListOrderAndPrefix", testListOrder},
		{"ListAfter", testListAfter},
		{"ListManyKeys", testListMany},
		{"ListStopsOnCallbackError", testListCallbackError},
		{"Delete", testDelete},
		{"ConcurrentPuts", testConcurrentPuts},
		{"ContextCancelled", testContextCancelled},
		{"OddKeys", testOddKeys},
		{"InvalidKeys", testInvalidKeys},
		{"ShortBody", testShortBody},
		{"CreateExclusive", testCreateExclusive},
		{"CreateRace", testCreateRace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newStore(t))
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func randBytes(seed uint64, n int) []byte {
	var s [32]byte
	s[0], s[1] = byte(seed), byte(seed>>8)
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(s).Read(b)
	return b
}

func put(t *testing.T, s objstore.Store, key string, b []byte) {
	t.Helper()
	if err := s.Put(ctxFor(t), key, bytes.NewReader(b), int64(len(b))); err != nil {
		t.Fatalf("Put(%q, %d bytes): %v", key, len(b), err)
	}
}

func get(t *testing.T, s objstore.Store, key string, off, n int64) ([]byte, error) {
	t.Helper()
	rc, err := s.GetRange(ctxFor(t), key, off, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func mustGet(t *testing.T, s objstore.Store, key string, off, n int64) []byte {
	t.Helper()
	b, err := get(t, s, key, off, n)
	if err != nil {
		t.Fatalf("GetRange(%q, %d, %d): %v", key, off, n, err)
	}
	return b
}

func testRoundTrip(t *testing.T, s objstore.Store) {
	for _, size := range []int{0, 1, 1000, 20 << 20} {
		key := fmt.Sprintf("roundtrip/%d", size)
		want := randBytes(uint64(size), size)
		before := time.Now().Add(-time.Minute) // servers' clocks and mtime granularity
		put(t, s, key, want)
		if got := mustGet(t, s, key, 0, -1); !bytes.Equal(got, want) {
			t.Fatalf("%s: got %d bytes back, want the %d put (equal=%v)", key, len(got), len(want), false)
		}
		a, err := s.Stat(ctxFor(t), key)
		if err != nil {
			t.Fatalf("Stat(%q): %v", key, err)
		}
		if a.Key != key || a.Size != int64(size) {
			t.Fatalf("Stat(%q) = %+v, want key %q size %d", key, a, key, size)
		}
		if a.LastModified.Before(before) || a.LastModified.After(time.Now().Add(time.Minute)) {
			t.Fatalf("Stat(%q).LastModified = %v, not about now", key, a.LastModified)
		}
	}
}

func testRanges(t *testing.T, s objstore.Store) {
	const size = 100_000
	data := randBytes(7, size)
	put(t, s, "ranges/obj", data)
	for _, c := range []struct{ off, n int64 }{
		{0, 1}, {0, 4096}, {50_000, 1234}, {size - 10, 10}, {size - 1, 1},
		{0, size}, {0, -1}, {99_000, -1}, {size - 1, -1},
		{size, -1}, {size, 0}, {10, 0}, // empty reads inside or at the end
	} {
		got := mustGet(t, s, "ranges/obj", c.off, c.n)
		end := int64(size)
		if c.n >= 0 {
			end = c.off + c.n
		}
		if !bytes.Equal(got, data[c.off:end]) {
			t.Fatalf("GetRange(%d, %d): %d bytes, want data[%d:%d]", c.off, c.n, len(got), c.off, end)
		}
	}
	for _, c := range []struct{ off, n int64 }{
		{size - 10, 11}, {size, 1}, {size + 1, -1}, {size + 1, 0}, {size + 100, 10}, {-1, 10},
	} {
		_, err := get(t, s, "ranges/obj", c.off, c.n)
		if !errors.Is(err, objstore.ErrInvalidRange) {
			t.Fatalf("GetRange(%d, %d) past the end: err = %v, want ErrInvalidRange", c.off, c.n, err)
		}
		if objstore.IsRetryable(err) {
			t.Fatalf("GetRange(%d, %d): invalid range %v classified retryable", c.off, c.n, err)
		}
	}
	// Ranges of an empty object.
	put(t, s, "ranges/empty", nil)
	if got := mustGet(t, s, "ranges/empty", 0, -1); len(got) != 0 {
		t.Fatalf("empty object read %d bytes", len(got))
	}
	if got := mustGet(t, s, "ranges/empty", 0, 0); len(got) != 0 {
		t.Fatalf("empty object read %d bytes", len(got))
	}
	if _, err := get(t, s, "ranges/empty", 0, 1); !errors.Is(err, objstore.ErrInvalidRange) {
		t.Fatalf("GetRange(empty, 0, 1): err = %v, want ErrInvalidRange", err)
	}
}

func testNotFound(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	put(t, s, "nf/present", []byte("x"))
	for _, key := range []string{"nf/missing", "nf", "nf/present/below", "other"} {
		if _, err := s.GetRange(ctx, key, 0, -1); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("GetRange(%q) = %v, want ErrNotFound", key, err)
		}
		if _, err := s.GetRange(ctx, key, 0, 1); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("GetRange(%q, 0, 1) = %v, want ErrNotFound", key, err)
		}
		_, err := s.Stat(ctx, key)
		if !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("Stat(%q) = %v, want ErrNotFound", key, err)
		}
		if objstore.IsRetryable(err) {
			t.Fatalf("Stat(%q): not found classified retryable: %v", key, err)
		}
	}
}

func testOverwrite(t *testing.T, s objstore.Store) {
	put(t, s, "ow/k", randBytes(1, 5000))
	want := randBytes(2, 300)
	put(t, s, "ow/k", want)
	if got := mustGet(t, s, "ow/k", 0, -1); !bytes.Equal(got, want) {
		t.Fatalf("after overwrite read %d bytes, want the second put's %d", len(got), len(want))
	}
	if a, err := s.Stat(ctxFor(t), "ow/k"); err != nil || a.Size != int64(len(want)) {
		t.Fatalf("Stat after overwrite = %+v, %v; want size %d", a, err, len(want))
	}
}

func list(t *testing.T, s objstore.Store, prefix string) []objstore.Attrs {
	t.Helper()
	var out []objstore.Attrs
	if err := s.List(ctxFor(t), prefix, func(a objstore.Attrs) error {
		out = append(out, a)
		return nil
	}); err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return out
}

func keysOf(as []objstore.Attrs) []string {
	ks := make([]string, len(as))
	for i, a := range as {
		ks[i] = a.Key
	}
	return ks
}

func testListOrder(t *testing.T, s objstore.Store) {
	// Byte order across '/' is the trap for directory-backed stores:
	// "l/a-c" < "l/a/b" < "l/a0" because '-' < '/' < '0'.
	keys := []string{"l/a/b", "l/a-c", "l/a0", "l/a/c/d", "l/b", "l/A", "l/a!", "l/a/b0", "m/x", "k"}
	for i, k := range keys {
		put(t, s, k, randBytes(uint64(i), i))
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	got := list(t, s, "")
	if !slices.Equal(keysOf(got), want) {
		t.Fatalf("List(\"\") = %q, want %q", keysOf(got), want)
	}
	for _, a := range got {
		i := slices.Index(keys, a.Key)
		if a.Size != int64(i) {
			t.Fatalf("List: %q size %d, want %d", a.Key, a.Size, i)
		}
	}
	for _, c := range []struct {
		prefix string
		want   []string
	}{
		{"l/", []string{"l/A", "l/a!", "l/a-c", "l/a/b", "l/a/b0", "l/a/c/d", "l/a0", "l/b"}},
		{"l/a", []string{"l/a!", "l/a-c", "l/a/b", "l/a/b0", "l/a/c/d", "l/a0"}},
		{"l/a/", []string{"l/a/b", "l/a/b0", "l/a/c/d"}},
		{"l/a/b", []string{"l/a/b", "l/a/b0"}},
		{"l/a/c/d", []string{"l/a/c/d"}},
		{"l/z", nil},
		{"nothing/", nil},
	} {
		if got := keysOf(list(t, s, c.prefix)); !slices.Equal(got, c.want) {
			t.Fatalf("List(%q) = %q, want %q", c.prefix, got, c.want)
		}
	}
}

// testListAfter checks objstore.ListAfter, the store's own (S3's
// StartAfter) or the fallback: keys above the start only, in order, within
// the prefix.
func testListAfter(t *testing.T, s objstore.Store) {
	keys := []string{"l/a/b", "l/a-c", "l/a0", "l/a/c/d", "l/b", "l/A", "m/x"}
	for i, k := range keys {
		put(t, s, k, randBytes(uint64(i), i))
	}
	for _, c := range []struct {
		prefix, after string
		want          []string
	}{
		{"l/", "", []string{"l/A", "l/a-c", "l/a/b", "l/a/c/d", "l/a0", "l/b"}},
		{"l/", "l/a-c", []string{"l/a/b", "l/a/c/d", "l/a0", "l/b"}},
		{"l/", "l/a/b0", []string{"l/a/c/d", "l/a0", "l/b"}},
		{"l/a/", "l/a/b", []string{"l/a/c/d"}},
		{"l/", "l/b", nil},
		{"l/", "l/zz", nil},
	} {
		var got []string
		if err := objstore.ListAfter(ctxFor(t), s, c.prefix, c.after, func(a objstore.Attrs) error {
			got = append(got, a.Key)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, c.want) {
			t.Fatalf("ListAfter(%q, %q) = %q, want %q", c.prefix, c.after, got, c.want)
		}
	}
}

func testListMany(t *testing.T, s objstore.Store) {
	// More than S3's 1000-key page, so pagination is exercised.
	const n = 1100
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("many/%04d", (i*7919)%n) // put out of order
	}
	parallel(t, 16, n, func(i int) error {
		return s.Put(ctxFor(t), want[i], bytes.NewReader([]byte{byte(i)}), 1)
	})
	put(t, s, "manz", nil) // just past the prefix
	slices.Sort(want)
	if got := keysOf(list(t, s, "many/")); !slices.Equal(got, want) {
		t.Fatalf("List(many/): %d keys, want %d in order", len(got), len(want))
	}
}

func parallel(t *testing.T, workers, n int, fn func(i int) error) {
	t.Helper()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func testListCallbackError(t *testing.T, s objstore.Store) {
	for i := range 5 {
		put(t, s, fmt.Sprintf("cb/%d", i), nil)
	}
	stop := errors.New("stop here")
	var seen int
	err := s.List(ctxFor(t), "cb/", func(objstore.Attrs) error {
		seen++
		if seen == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || seen != 2 {
		t.Fatalf("List with failing callback: err = %v after %d calls, want the callback's error after 2", err, seen)
	}
}

func testDelete(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	if err := s.Delete(ctx, "del/never"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	put(t, s, "del/a/b/c", []byte("abc"))
	put(t, s, "del/a/x", []byte("x"))
	for range 2 {
		if err := s.Delete(ctx, "del/a/b/c"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	if _, err := s.Stat(ctx, "del/a/b/c"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat after Delete = %v, want ErrNotFound", err)
	}
	if got := keysOf(list(t, s, "del/")); !slices.Equal(got, []string{"del/a/x"}) {
		t.Fatalf("List after Delete = %q", got)
	}
	// The deleted key's former prefix is usable as a key of its own again.
	put(t, s, "del/a/b", []byte("b"))
	if got := mustGet(t, s, "del/a/b", 0, -1); string(got) != "b" {
		t.Fatalf("read %q", got)
	}
}

func testConcurrentPuts(t *testing.T, s objstore.Store) {
	const n = 64
	parallel(t, 16, n, func(i int) error {
		b := randBytes(uint64(i), 10_000+i)
		return s.Put(ctxFor(t), fmt.Sprintf("conc/%d/obj", i), bytes.NewReader(b), int64(len(b)))
	})
	parallel(t, 16, n, func(i int) error {
		got, err := get(t, s, fmt.Sprintf("conc/%d/obj", i), 0, -1)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, randBytes(uint64(i), 10_000+i)) {
			return fmt.Errorf("conc/%d: wrong content", i)
		}
		return nil
	})
	if got := len(list(t, s, "conc/")); got != n {
		t.Fatalf("List: %d objects, want %d", got, n)
	}
}

func testContextCancelled(t *testing.T, s objstore.Store) {
	data := randBytes(3, 4<<20)
	put(t, s, "ctx/obj", data)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%s with a cancelled context: err = %v, want context.Canceled", op, err)
		}
		if objstore.IsRetryable(err) {
			t.Fatalf("%s: cancellation classified retryable: %v", op, err)
		}
	}
	check("Put", s.Put(ctx, "ctx/new", bytes.NewReader(data), int64(len(data))))
	_, err := s.GetRange(ctx, "ctx/obj", 0, -1)
	check("GetRange", err)
	_, err = s.Stat(ctx, "ctx/obj")
	check("Stat", err)
	check("List", s.List(ctx, "ctx/", func(objstore.Attrs) error { return nil }))
	check("Delete", s.Delete(ctx, "ctx/obj"))
	if _, err := s.Stat(ctxFor(t), "ctx/new"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a Put with a cancelled context left an object: Stat = %v", err)
	}

	// Cancelling while a body is being read ends the read.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	rc, err := s.GetRange(ctx, "ctx/obj", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.Copy(io.Discard, rc); err == nil {
		t.Fatal("reading a body after cancelling its context succeeded to the end")
	}
}

func testOddKeys(t *testing.T, s objstore.Store) {
	keys := []string{
		"odd/with space/and+plus",
		"odd/percent%20encoded%2F",
		"odd/unicode/ünïcödé/日本語/😀",
		"odd/punct/!$&'()*,;=@:~-_.",
		"odd/query?x=1&y=2#frag",
		"odd/.hidden/..dots../...",
		"odd/back\\slash",
		"odd/deep/" + string(bytes.Repeat([]byte("d/"), 40)) + "leaf",
	}
	for i, k := range keys {
		put(t, s, k, []byte(k))
		if got := mustGet(t, s, k, 0, -1); string(got) != k {
			t.Fatalf("key %d %q read back %q", i, k, got)
		}
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	if got := keysOf(list(t, s, "odd/")); !slices.Equal(got, want) {
		t.Fatalf("List(odd/) = %q, want %q", got, want)
	}
	for _, k := range keys {
		if err := s.Delete(ctxFor(t), k); err != nil {
			t.Fatalf("Delete(%q): %v", k, err)
		}
	}
	if got := list(t, s, "odd/"); len(got) != 0 {
		t.Fatalf("List after deleting all = %q", keysOf(got))
	}
}

func testInvalidKeys(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	for _, k := range []string{"", "/abs", "a//b", "a/", "..", "a/../b", "./a", "a/.", "nul\x00", "\xff\xfe", string(bytes.Repeat([]byte("k"), 1025))} {
		if err := s.Put(ctx, k, bytes.NewReader(nil), 0); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Fatalf("Put(%q) = %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.GetRange(ctx, k, 0, -1); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Fatalf("GetRange(%q) = %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Stat(ctx, k); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Fatalf("Stat(%q) = %v, want ErrInvalidKey", k, err)
		}
		if err := s.Delete(ctx, k); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Fatalf("Delete(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

// shortReaderAt holds fewer bytes than the size a Put claims.
type shortReaderAt struct{ b []byte }

func (r shortReaderAt) ReadAt(p []byte, off int64) (int, error) {
	return bytes.NewReader(r.b).ReadAt(p, off)
}

func testShortBody(t *testing.T, s objstore.Store) {
	err := s.Put(ctxFor(t), "short", shortReaderAt{[]byte("abc")}, 10)
	if err == nil {
		t.Fatal("Put of a body shorter than its size succeeded")
	}
	if _, serr := s.Stat(ctxFor(t), "short"); !errors.Is(serr, objstore.ErrNotFound) {
		t.Fatalf("a failed Put (%v) left an object: Stat = %v", err, serr)
	}
}

// testCreateExclusive: Create writes a key that does not exist and refuses,
// changing nothing, one that does; the refusal is ErrExists and is final.
func testCreateExclusive(t *testing.T, s objstore.Store) {
	ctx := ctxFor(t)
	first, second := randBytes(11, 3000), randBytes(12, 200)
	if err := s.Create(ctx, "cr/k", bytes.NewReader(first), int64(len(first))); err != nil {
		t.Fatalf("Create of a new key: %v", err)
	}
	if got := mustGet(t, s, "cr/k", 0, -1); !bytes.Equal(got, first) {
		t.Fatalf("Create stored %d bytes, want the %d given", len(got), len(first))
	}
	err := s.Create(ctx, "cr/k", bytes.NewReader(second), int64(len(second)))
	if !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("Create of an existing key = %v, want ErrExists", err)
	}
	if objstore.IsRetryable(err) {
		t.Fatalf("ErrExists classified retryable: %v", err)
	}
	if got := mustGet(t, s, "cr/k", 0, -1); !bytes.Equal(got, first) {
		t.Fatalf("a refused Create changed the object: %d bytes, want the first %d", len(got), len(first))
	}
	// A deleted key can be created again.
	if err := s.Delete(ctx, "cr/k"); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, "cr/k", bytes.NewReader(second), int64(len(second))); err != nil {
		t.Fatalf("Create after Delete: %v", err)
	}
	if got := mustGet(t, s, "cr/k", 0, -1); !bytes.Equal(got, second) {
		t.Fatalf("re-created object: %d bytes, want %d", len(got), len(second))
	}
	if err := s.Create(ctx, "cr/", bytes.NewReader(nil), 0); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("Create(cr/) = %v, want ErrInvalidKey", err)
	}
	if err := s.Create(ctx, "cr/short", shortReaderAt{[]byte("abc")}, 10); err == nil {
		t.Fatal("Create of a body shorter than its size succeeded")
	}
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Create(cctx, "cr/cancelled", bytes.NewReader(first), int64(len(first))); !errors.Is(err, context.Canceled) {
		t.Fatalf("Create with a cancelled context = %v, want context.Canceled", err)
	}
	for _, k := range []string{"cr/short", "cr/cancelled"} {
		if _, err := s.Stat(ctx, k); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("a failed Create left %s: Stat = %v", k, err)
		}
	}
}

// testCreateRace: of writers that Create one key at the same moment,
// exactly one succeeds and the object holds its bytes. This is what lets
// two writers of a partition never replace each other's manifest.
func testCreateRace(t *testing.T, s objstore.Store) {
	const keys, writers = 8, 8
	for k := range keys {
		key := fmt.Sprintf("race/%d", k)
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []int
			errs    []error
		)
		start := make(chan struct{})
		for w := range writers {
			wg.Go(func() {
				b := randBytes(uint64(100*k+w), 1000+w)
				<-start
				err := s.Create(ctxFor(t), key, bytes.NewReader(b), int64(len(b)))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					winners = append(winners, w)
				case !errors.Is(err, objstore.ErrExists):
					errs = append(errs, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		if len(winners) != 1 {
			t.Fatalf("%s: %d concurrent Creates succeeded (writers %v), want exactly 1", key, len(winners), winners)
		}
		w := winners[0]
		if got := mustGet(t, s, key, 0, -1); !bytes.Equal(got, randBytes(uint64(100*k+w), 1000+w)) {
			t.Fatalf("%s holds %d bytes, not the winner's", key, len(got))
		}
	}
}
