package segment

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
)

// The aborted-transaction index (docs/format.md §14): per segment, a
// <base>.txnindex file of fixed-size entries, one per transaction aborted
// by a marker in that segment, in marker order. The layout is Kafka's
// AbortedTxn, so tools that read Kafka's files read ours.
const (
	txnIndexSuffix  = ".txnindex"
	txnEntrySize    = 2 + 8 + 8 + 8 + 8
	txnEntryVersion = 0
)

// AbortedTxn is an aborted transaction: its producer, its first data
// offset, the offset of its ABORT marker, and the last stable offset once
// it was complete (Kafka's AbortedTxn). A read_committed consumer drops
// the producer's records in [FirstOffset, LastOffset].
type AbortedTxn struct {
	ProducerID       int64
	FirstOffset      int64
	LastOffset       int64
	LastStableOffset int64
}

func appendTxnEntry(dst []byte, a AbortedTxn) []byte {
	dst = binary.BigEndian.AppendUint16(dst, txnEntryVersion)
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.ProducerID))
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.FirstOffset))
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.LastOffset))
	return binary.BigEndian.AppendUint64(dst, uint64(a.LastStableOffset))
}

var errBadTxnIndex = errors.New("malformed transaction index")

// DecodeTxnIndex decodes a .txnindex file. A length that is not a whole
// number of entries, an unknown version or an entry that does not have
// 0 <= FirstOffset <= LastOffset and LastStableOffset >= 0 (an earlier
// transaction still open may hold the stable offset below either) is an
// error: the entries
// before it are returned with it, which is what recovery keeps of a torn
// file.
func DecodeTxnIndex(b []byte) ([]AbortedTxn, error) {
	out := make([]AbortedTxn, 0, len(b)/txnEntrySize)
	for len(b) >= txnEntrySize {
		if v := int16(binary.BigEndian.Uint16(b)); v != txnEntryVersion {
			return out, fmt.Errorf("segment: %w: entry %d has version %d", errBadTxnIndex, len(out), v)
		}
		a := AbortedTxn{
			ProducerID:       int64(binary.BigEndian.Uint64(b[2:])),
			FirstOffset:      int64(binary.BigEndian.Uint64(b[10:])),
			LastOffset:       int64(binary.BigEndian.Uint64(b[18:])),
			LastStableOffset: int64(binary.BigEndian.Uint64(b[26:])),
		}
		if a.ProducerID < 0 || a.FirstOffset < 0 || a.FirstOffset > a.LastOffset || a.LastStableOffset < 0 {
			return out, fmt.Errorf("segment: %w: entry %d is %+v", errBadTxnIndex, len(out), a)
		}
		out = append(out, a)
		b = b[txnEntrySize:]
	}
	if len(b) != 0 {
		return out, fmt.Errorf("segment: %w: %d bytes after the last whole entry", errBadTxnIndex, len(b))
	}
	return out, nil
}

func (s *segment) txnIndexPath() string { return offsetName(s.dir, s.base, txnIndexSuffix) }

// readTxnIndex returns a segment's aborted transactions; a missing file
// means none.
func readTxnIndex(path string) ([]AbortedTxn, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return DecodeTxnIndex(b)
}

// appendTxnIndexLocked adds entries to the active segment's index. The
// file is created on the first abort: most segments never have one.
func (l *Log) appendTxnIndexLocked(s *segment, entries []AbortedTxn) error {
	var b []byte
	for _, a := range entries {
		b = appendTxnEntry(b, a)
	}
	f, err := os.OpenFile(s.txnIndexPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("segment: %w", err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("segment: appending to %s: %w", s.txnIndexPath(), err)
	}
	l.w.txnDirty = true
	return nil
}

// syncTxnIndexLocked makes the active segment's index durable with the
// segment (Sync, seal). The directory is synced too, as the file may be
// new: a closed segment's index must never go missing, since recovery
// reads a missing one as "no aborts".
func (l *Log) syncTxnIndexLocked(s *segment) error {
	if !l.w.txnDirty {
		return nil
	}
	f, err := os.OpenFile(s.txnIndexPath(), os.O_WRONLY, 0)
	if err == nil {
		err = syncAndClose(f, nil)
	}
	if err == nil {
		err = syncDir(s.dir)
	}
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("segment: syncing %s: %w", s.txnIndexPath(), err)
	}
	l.w.txnDirty = false
	return nil
}

// writeTxnIndex replaces a segment's index with entries (none: no file).
func writeTxnIndex(path string, entries []AbortedTxn) error {
	if len(entries) == 0 {
		return removeIfExists(path)
	}
	var b []byte
	for _, a := range entries {
		b = appendTxnEntry(b, a)
	}
	return writeFileAtomic(path, b)
}

// AbortedTransactions returns the aborted transactions that overlap
// [from, upTo), oldest marker first, for a read_committed fetch of that
// range (Kafka's collectAbortedTransactions). upTo is the fetch's upper
// bound, at most the last stable offset. A segment's index that cannot be
// read ends the list there: the consumer then sees too few aborts rather
// than the fetch failing, and the error is logged.
func (l *Log) AbortedTransactions(from, upTo int64) []AbortedTxn {
	l.mu.RLock()
	segs := l.mu.segs
	i := max(sort.Search(len(segs), func(i int) bool { return segs[i].base > from })-1, 0)
	segs = segs[i:]
	for _, s := range segs {
		s.pin()
	}
	l.mu.RUnlock()
	defer unpinAll(segs)
	var out []AbortedTxn
	// A transaction's entry sits with its marker, which may lie past upTo
	// while its data is in range: the walk goes on until an entry's
	// stable offset reaches upTo (everything before it was complete).
	for _, s := range segs {
		entries, err := readTxnIndex(s.txnIndexPath())
		if err != nil {
			l.logger.Warn("unreadable transaction index", "file", s.txnIndexPath(), "err", err)
		}
		for _, a := range entries {
			if a.LastOffset >= from && a.FirstOffset < upTo {
				out = append(out, a)
			}
			if a.LastStableOffset >= upTo {
				return out
			}
		}
		if err != nil {
			return out
		}
	}
	return out
}

// writeTxnIndexes gives each output of a rewrite the sources' index
// entries whose markers fall in its range, as <base>.txnindex.cleaned,
// which the swap renames with the output's other files. Compaction keeps
// offsets, so the entries stay true of the outputs, those whose marker
// the rewrite removed excepted (keepsMarker); a rewrite whose sources
// have none writes nothing.
func (rw *Rewrite) writeTxnIndexes() error {
	var all []AbortedTxn
	for _, s := range rw.srcs {
		entries, err := readTxnIndex(s.txnIndexPath())
		if err != nil && !errors.Is(err, errBadTxnIndex) {
			return fmt.Errorf("segment: rewriting %s: %w", rw.l.dir, err)
		}
		all = append(all, entries...)
	}
	if len(all) == 0 {
		return nil
	}
	for k, out := range rw.outs {
		end := rw.to
		if k+1 < len(rw.outs) {
			end = rw.outs[k+1].base
		}
		var b []byte
		for _, a := range all {
			if a.LastOffset >= out.base && a.LastOffset < end && rw.keepsMarker(a.LastOffset) {
				b = appendTxnEntry(b, a)
			}
		}
		// Written even empty: it must replace a source's file of the
		// same name.
		if err := writeFileAtomic(cleanedName(rw.l.dir, out.base, txnIndexSuffix), b); err != nil {
			return fmt.Errorf("segment: rewriting %s: %w", rw.l.dir, err)
		}
	}
	return nil
}
