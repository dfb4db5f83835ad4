// Package objstore owns Strata's view of an S3-like object store: the Store
// contract that the tier uploader, the remote reader and the orphan collector
// are written against, its two backends (a local directory, which is the
// embedded default, and S3 through aws-sdk-go-v2), and the decorators that add
// a key prefix, request metrics, retries and injected faults around any Store.
//
// Backends classify their own errors (ErrNotFound, ErrInvalidRange,
// ErrInvalidKey, IsRetryable); everything else that is not storage (logging,
// metrics, prefixes, retries, fault injection) is a decorator with the same
// interface, never a flag inside a backend.
//
// Keys are the same for every backend: non-empty UTF-8 of at most 1024 bytes,
// '/'-separated segments none of which is empty, "." or "..", no leading or
// trailing '/', no NUL. A key may not also be a directory-like prefix of
// another key ("a" and "a/b" cannot both exist): the directory backend maps
// segments to directories, and Strata's key layout never needs both.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// Store is an S3-like object store. Implementations are safe for concurrent
// use by any number of goroutines. Every method honours ctx: once ctx is done
// the call returns an error that wraps ctx.Err() (and is not retryable).
//
// Objects are immutable blobs replaced whole: a reader sees either the old or
// the new content of an overwritten key, never a mix.
type Store interface {
	// Put stores bytes [0, size) of r under key, replacing any previous
	// object. It uses ONE request whatever the size (S3 allows a single PUT
	// of up to 5 GiB), so a segment object costs one PUT.
	//
	// r is an io.ReaderAt rather than a stream so that a retry, a checksum
	// pass or the SDK's payload signing can re-read it from any offset
	// without shared cursor state: an *os.File or a *bytes.Reader can be
	// passed directly, and Concat joins parts (log bytes, indexes, footer)
	// without copying. r must not change while Put runs and is not retained
	// after Put returns. Reading fewer than size bytes from r is an error.
	Put(ctx context.Context, key string, r io.ReaderAt, size int64) error

	// Create is Put that never replaces: it stores the object only if key
	// does not exist, atomically, and otherwise changes nothing and returns
	// ErrExists. Of concurrent Creates of one key at most one succeeds.
	// This is what publishes a partition's manifest: two writers can never
	// replace each other's version (S3's PUT with If-None-Match: *).
	//
	// ErrExists does not prove that someone else wrote the key: a retried
	// Create whose first attempt was applied but whose reply was lost meets
	// its own object. A caller that must know reads the object back and
	// compares.
	Create(ctx context.Context, key string, r io.ReaderAt, size int64) error

	// GetRange returns a reader of n bytes of key starting at off; n < 0
	// reads to the end of the object. The caller must Close the reader; ctx
	// governs the reads through it too. A missing key is ErrNotFound; a
	// range that does not lie within the object (off > size, or off+n >
	// size) is ErrInvalidRange. off == size with n <= 0 is an empty read.
	GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)

	// Stat returns the attributes of key, or ErrNotFound.
	Stat(ctx context.Context, key string) (Attrs, error)

	// List calls fn for every object whose key starts with prefix, in
	// lexicographic (byte) order of key. An error from fn stops the listing
	// and is returned as is. Objects put or deleted during a List may or may
	// not be seen.
	List(ctx context.Context, prefix string, fn func(Attrs) error) error

	// Delete removes key. Deleting a missing key is not an error (S3
	// semantics), so a retried or repeated delete is harmless.
	Delete(ctx context.Context, key string) error
}

// Lister is a Store that lists from a key on, as S3's ListObjectsV2 does
// with StartAfter: ListAfter is List restricted to keys above startAfter,
// at the cost of what it returns rather than of everything under prefix.
type Lister interface {
	ListAfter(ctx context.Context, prefix, startAfter string, fn func(Attrs) error) error
}

// ListAfter calls fn for every object of s whose key starts with prefix
// and sorts above startAfter, in key order: with s's own ListAfter if it
// has one, else by skipping what List returns up to startAfter.
func ListAfter(ctx context.Context, s Store, prefix, startAfter string, fn func(Attrs) error) error {
	if l, ok := s.(Lister); ok {
		return l.ListAfter(ctx, prefix, startAfter, fn)
	}
	return s.List(ctx, prefix, func(a Attrs) error {
		if a.Key <= startAfter {
			return nil
		}
		return fn(a)
	})
}

// Attrs describes one stored object.
type Attrs struct {
	Key          string
	Size         int64
	LastModified time.Time
}

var (
	// ErrNotFound reports a key that does not exist: errors.Is(err,
	// objstore.ErrNotFound).
	ErrNotFound = errors.New("objstore: object not found")
	// ErrInvalidRange reports a ranged read that does not lie within the
	// object. It is a caller bug or a stale size, never transient.
	ErrInvalidRange = errors.New("objstore: range outside object")
	// ErrInvalidKey reports a key that breaks the rules in the package doc.
	ErrInvalidKey = errors.New("objstore: invalid key")
	// ErrExists reports a Create of a key that already exists. It is final,
	// never retryable.
	ErrExists = errors.New("objstore: object already exists")
)

// maxKeyLen is S3's limit on a key's UTF-8 length.
const maxKeyLen = 1024

// validateKey enforces the key rules shared by every backend, so that code
// that works against the directory store also works against S3.
func validateKey(key string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w %q: %s", ErrInvalidKey, key, why)
	}
	switch {
	case key == "":
		return bad("empty")
	case len(key) > maxKeyLen:
		return bad(fmt.Sprintf("longer than %d bytes", maxKeyLen))
	case !utf8.ValidString(key):
		return bad("not valid UTF-8")
	case strings.IndexByte(key, 0) >= 0:
		return bad("contains NUL")
	case key[0] == '/':
		return bad("absolute (leading '/')")
	case key[len(key)-1] == '/':
		return bad("trailing '/'")
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch seg {
		case "":
			return bad("empty segment ('//')")
		case ".", "..":
			return bad("'.' or '..' segment")
		}
	}
	return nil
}

// validateRange rejects arguments no backend could satisfy.
func validateRange(key string, off int64) error {
	if off < 0 {
		return fmt.Errorf("%w: %q: negative offset %d", ErrInvalidRange, key, off)
	}
	return nil
}

// checkRange reports whether [off, off+n) (n < 0: to the end) lies within an
// object of the given size, and returns the length to read.
func checkRange(key string, off, n, size int64) (int64, error) {
	if off > size || (n >= 0 && off+n > size) {
		end := "end"
		if n >= 0 {
			end = fmt.Sprint(off + n)
		}
		return 0, fmt.Errorf("%w: %q: [%d, %s) past the end of a %d-byte object",
			ErrInvalidRange, key, off, end, size)
	}
	if n < 0 {
		n = size - off
	}
	return n, nil
}

// transferBudget is how long a transfer of n bytes may take: base, plus n
// at minThroughput bytes per second.
func transferBudget(base time.Duration, n, minThroughput int64) time.Duration {
	return base + time.Duration(float64(n)/float64(minThroughput)*float64(time.Second))
}

// retryableError marks an error that a retry may cure: a throttle, a 5xx, a
// connection reset, a per-attempt timeout, an injected fault.
type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// markRetryable wraps err so that IsRetryable reports true.
func markRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &retryableError{err}
}

// IsRetryable reports whether repeating the failed call may succeed. Callers
// (the uploader's loop, the retry decorator) use it to tell an outage from a
// bug. Not found, invalid keys and ranges, and a cancelled or expired caller
// context are never retryable; throttling, server errors, connection
// failures, truncated bodies and per-attempt timeouts are.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	var re *retryableError
	if errors.As(err, &re) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalidRange) || errors.Is(err, ErrInvalidKey) ||
		errors.Is(err, ErrExists) {
		return false
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	var oe *net.OpError
	return errors.As(err, &oe)
}

// ctxErr returns a wrapped ctx error once ctx is done, so every backend
// reports cancellation the same way.
func ctxErr(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("objstore: %s %q: %w", op, key, err)
	}
	return nil
}

// Concat joins parts into one io.ReaderAt of their total size, without
// copying: the uploader puts a segment's log file, its indexes and its footer
// as one object with a single Put(ctx, key, c, c.Size()).
func Concat(parts ...*io.SectionReader) *io.SectionReader {
	m := &multiReaderAt{parts: parts, offs: make([]int64, len(parts))}
	var total int64
	for i, p := range parts {
		m.offs[i] = total
		total += p.Size()
	}
	return io.NewSectionReader(m, 0, total)
}

type multiReaderAt struct {
	parts []*io.SectionReader
	offs  []int64 // offs[i] is where parts[i] starts
}

func (m *multiReaderAt) ReadAt(p []byte, off int64) (int, error) {
	var n int
	for i, part := range m.parts {
		if len(p) == 0 {
			break
		}
		start, size := m.offs[i], part.Size()
		if off >= start+size {
			continue
		}
		k, err := part.ReadAt(p[:min(int64(len(p)), start+size-off)], off-start)
		n += k
		off += int64(k)
		p = p[k:]
		if err != nil && err != io.EOF {
			return n, err
		}
		if k == 0 {
			return n, io.ErrUnexpectedEOF // a part shorter than it claimed
		}
	}
	if len(p) > 0 {
		return n, io.EOF
	}
	return n, nil
}

// ctxReader fails reads once ctx is done, so a long read of a local file or
// an in-memory body stops when the caller gives up, like an S3 body does.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
