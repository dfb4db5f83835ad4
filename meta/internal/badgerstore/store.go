// Package badgerstore keeps a hashicorp/raft log and stable store in one
// Badger database. It owns the on-disk layout of the metadata quorum's raft
// log; the snapshots live beside it in raft's own FileSnapshotStore.
//
// # Layout
//
// Every key starts with a one-byte namespace so the two stores share one
// database without colliding, and so a prefix iterator visits exactly one of
// them:
//
//	'l' + uint64 index, big-endian   -> encoded raft.Log (below)
//	's' + caller's key bytes         -> caller's value bytes, verbatim
//
// Big-endian indexes sort numerically under Badger's bytewise order, which
// makes FirstIndex and LastIndex a single seek each.
//
// A log value is self-describing: a format byte, then the fields of
// raft.Log except Index, which the key already holds.
//
//	byte     format (1)
//	byte     raft.LogType
//	uvarint  Term
//	varint   AppendedAt as Unix nanoseconds (0 = zero time)
//	uvarint  len(Data), Data bytes
//	uvarint  len(Extensions), Extensions bytes
//
// A new field gets a new format byte; decoding rejects formats it does not
// know instead of guessing.
package badgerstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/hashicorp/raft"
)

const (
	logPrefix    = 'l'
	stablePrefix = 's'
	formatV1     = 1

	// deleteChunk bounds how many keys DeleteRange holds in memory at once.
	deleteChunk = 4096
)

// ErrClosed is returned by every method called after Close.
var ErrClosed = errors.New("badgerstore: closed")

// Store is a raft.LogStore and raft.StableStore. All methods are safe for
// concurrent use; writes are synced to disk before they return.
type Store struct {
	db *badger.DB

	mu struct {
		sync.RWMutex
		closed bool // guarded by mu; readers hold RLock for the whole call
	}
}

var (
	_ raft.LogStore    = (*Store)(nil)
	_ raft.StableStore = (*Store)(nil)
	_ io.Closer        = (*Store)(nil)
)

// Open opens or creates the store in dir. A directory already held by
// another open Store (in this or another process) is an error, not a wait.
// logger may be nil.
func Open(dir string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	// Metadata is kilobytes to a few megabytes: Badger's defaults (64 MiB
	// memtables, 1 GiB value log files, 256 MiB block cache) would make an
	// almost empty directory cost hundreds of megabytes of address space and
	// disk. Values stay under ValueThreshold, so they live in the LSM tree and
	// the value log never needs garbage collection (the threshold must stay
	// under 15% of the memtable, Badger's largest batch).
	opts := badger.DefaultOptions(dir).
		WithLogger(badgerLogger{logger}).
		WithSyncWrites(true).
		WithMetricsEnabled(false).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithBaseTableSize(1 << 20).
		WithBaseLevelSize(4 << 20).
		WithValueLogFileSize(16 << 20).
		WithNumCompactors(2).
		WithCompression(options.None).
		WithBlockCacheSize(0).
		WithDetectConflicts(false)
	db, err := badger.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("badgerstore: open %s: %w", dir, err)
	}
	return &Store{db: db}, nil
}

// Close closes the database. It is idempotent; calls on a closed Store
// return ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return nil
	}
	s.mu.closed = true
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("badgerstore: close: %w", err)
	}
	return nil
}

// use runs fn with the database guaranteed open for the duration.
func (s *Store) use(fn func(db *badger.DB) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		return ErrClosed
	}
	return fn(s.db)
}

func logKey(index uint64) []byte {
	var k [9]byte
	k[0] = logPrefix
	binary.BigEndian.PutUint64(k[1:], index)
	return k[:]
}

func stableKey(key []byte) []byte {
	k := make([]byte, 1+len(key))
	k[0] = stablePrefix
	copy(k[1:], key)
	return k
}

// value returns a copy of the value stored under the database key k, or
// badger.ErrKeyNotFound.
func (s *Store) value(k []byte) ([]byte, error) {
	var val []byte
	err := s.use(func(db *badger.DB) error {
		return db.View(func(txn *badger.Txn) error {
			item, err := txn.Get(k)
			if err != nil {
				return err
			}
			val, err = item.ValueCopy(nil)
			return err
		})
	})
	return val, err
}

// FirstIndex returns the lowest stored log index, 0 when the log is empty.
func (s *Store) FirstIndex() (uint64, error) {
	return s.edgeIndex(false)
}

// LastIndex returns the highest stored log index, 0 when the log is empty.
func (s *Store) LastIndex() (uint64, error) {
	return s.edgeIndex(true)
}

func (s *Store) edgeIndex(last bool) (uint64, error) {
	var idx uint64
	err := s.use(func(db *badger.DB) error {
		return db.View(func(txn *badger.Txn) error {
			opts := badger.IteratorOptions{Prefix: []byte{logPrefix}, Reverse: last}
			it := txn.NewIterator(opts)
			defer it.Close()
			seek := logKey(0)
			if last {
				// In reverse mode Seek lands on the largest key <= seek.
				seek = logKey(^uint64(0))
			}
			it.Seek(seek)
			if !it.Valid() {
				return nil
			}
			k := it.Item().Key()
			if len(k) != 9 {
				return fmt.Errorf("badgerstore: malformed log key %x", k)
			}
			idx = binary.BigEndian.Uint64(k[1:])
			return nil
		})
	})
	if err != nil {
		return 0, fmt.Errorf("badgerstore: index lookup: %w", err)
	}
	return idx, nil
}

// GetLog reads the entry at index into out, or returns raft.ErrLogNotFound.
func (s *Store) GetLog(index uint64, out *raft.Log) error {
	val, err := s.value(logKey(index))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("badgerstore: get log %d: %w", index, err)
	}
	if err := decodeLog(val, out); err != nil {
		return fmt.Errorf("badgerstore: log %d: %w", index, err)
	}
	out.Index = index
	return nil
}

// StoreLog stores one entry.
func (s *Store) StoreLog(l *raft.Log) error {
	return s.StoreLogs([]*raft.Log{l})
}

// StoreLogs stores entries in one transaction when they fit in one, and
// otherwise in consecutive transactions in order, so that a crash can only
// lose a suffix of the batch; raft has not acknowledged any of it yet.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	err := s.use(func(db *badger.DB) error {
		txn := db.NewTransaction(true)
		defer func() { txn.Discard() }()
		for _, l := range logs {
			k, v := logKey(l.Index), encodeLog(l)
			err := txn.Set(k, v)
			if errors.Is(err, badger.ErrTxnTooBig) {
				if err := txn.Commit(); err != nil {
					return err
				}
				txn = db.NewTransaction(true)
				err = txn.Set(k, v)
			}
			if err != nil {
				return err
			}
		}
		return txn.Commit()
	})
	if err != nil {
		return fmt.Errorf("badgerstore: store %d logs: %w", len(logs), err)
	}
	return nil
}

// DeleteRange deletes the entries with min <= index <= max. It visits only
// keys that exist, in chunks, so a wide range over a short log is cheap and
// a long log does not need one huge transaction.
func (s *Store) DeleteRange(min, max uint64) error {
	if min > max {
		return nil
	}
	err := s.use(func(db *badger.DB) error {
		from := min
		for {
			keys, next, more, err := collectLogKeys(db, from, max, deleteChunk)
			if err != nil {
				return err
			}
			if len(keys) > 0 {
				wb := db.NewWriteBatch()
				for _, k := range keys {
					if err := wb.Delete(k); err != nil {
						wb.Cancel()
						return err
					}
				}
				if err := wb.Flush(); err != nil {
					return err
				}
			}
			if !more {
				return nil
			}
			from = next
		}
	})
	if err != nil {
		return fmt.Errorf("badgerstore: delete logs [%d, %d]: %w", min, max, err)
	}
	return nil
}

// collectLogKeys returns up to limit log keys in [from, max], and whether
// keys may remain, starting at next.
func collectLogKeys(db *badger.DB, from, max uint64, limit int) (keys [][]byte, next uint64, more bool, err error) {
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{logPrefix}})
		defer it.Close()
		for it.Seek(logKey(from)); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			idx := binary.BigEndian.Uint64(k[1:])
			if idx > max {
				return nil
			}
			if len(keys) == limit {
				next, more = idx, true
				return nil
			}
			keys = append(keys, k)
		}
		return nil
	})
	return keys, next, more, err
}

// Set stores val under key.
func (s *Store) Set(key, val []byte) error {
	err := s.use(func(db *badger.DB) error {
		return db.Update(func(txn *badger.Txn) error {
			return txn.Set(stableKey(key), val)
		})
	})
	if err != nil {
		return fmt.Errorf("badgerstore: set %q: %w", key, err)
	}
	return nil
}

// Get returns the value under key, or nil and no error when there is none,
// as raft.StableStore documents.
func (s *Store) Get(key []byte) ([]byte, error) {
	val, err := s.value(stableKey(key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("badgerstore: get %q: %w", key, err)
	}
	return val, nil
}

// SetUint64 stores val under key as 8 big-endian bytes.
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns the value under key, or 0 and no error when there is
// none.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	val, err := s.Get(key)
	if err != nil || val == nil {
		return 0, err
	}
	if len(val) != 8 {
		return 0, fmt.Errorf("badgerstore: %q holds %d bytes, not a uint64", key, len(val))
	}
	return binary.BigEndian.Uint64(val), nil
}

func encodeLog(l *raft.Log) []byte {
	b := make([]byte, 0, 2+3*binary.MaxVarintLen64+len(l.Data)+len(l.Extensions))
	b = append(b, formatV1, byte(l.Type))
	b = binary.AppendUvarint(b, l.Term)
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.AppendVarint(b, at)
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	b = append(b, l.Extensions...)
	return b
}

// decodeLog fills out from b; out's byte slices alias b.
func decodeLog(b []byte, out *raft.Log) error {
	if len(b) < 2 {
		return fmt.Errorf("entry too short (%d bytes)", len(b))
	}
	if b[0] != formatV1 {
		return fmt.Errorf("unknown entry format %d", b[0])
	}
	d := decoder{b: b[2:]}
	typ := raft.LogType(b[1])
	term := d.uvarint()
	at := d.varint()
	data := d.bytes()
	ext := d.bytes()
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return fmt.Errorf("%d trailing bytes", len(d.b))
	}
	*out = raft.Log{Type: typ, Term: term, Data: data, Extensions: ext}
	if at != 0 {
		out.AppendedAt = time.Unix(0, at)
	}
	return nil
}

// decoder consumes b and records the first error; later reads return zero
// values so callers check once at the end.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 { return readVarint(d, binary.Uvarint, "uvarint") }
func (d *decoder) varint() int64   { return readVarint(d, binary.Varint, "varint") }

// readVarint consumes one number that read decodes.
func readVarint[T uint64 | int64](d *decoder, read func([]byte) (T, int), name string) T {
	if d.err != nil {
		return 0
	}
	v, n := read(d.b)
	if n <= 0 {
		d.err = errors.New("truncated or overlong " + name)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("field of %d bytes, %d left", n, len(d.b))
		return nil
	}
	if n == 0 {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// badgerLogger sends Badger's printf-style logs to slog. Badger reports
// routine progress at info (tables opened, compactions), which belongs at
// debug for a store this small.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.log(slog.LevelError, f, a) }
func (b badgerLogger) Warningf(f string, a ...any) { b.log(slog.LevelWarn, f, a) }
func (b badgerLogger) Infof(f string, a ...any)    { b.log(slog.LevelDebug, f, a) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.log(slog.LevelDebug-4, f, a) }

func (b badgerLogger) log(level slog.Level, f string, a []any) {
	ctx := context.Background()
	if !b.l.Enabled(ctx, level) {
		return
	}
	b.l.Log(ctx, level, strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}
