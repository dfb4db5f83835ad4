package segment

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"sync"
)

// ErrRangeCut is a FileRange's bytes no longer being the file's: the
// segment was truncated (TruncateTo) below the range's end after the
// range was taken. What was already sent of it was the range's; the rest
// cannot be.
var ErrRangeCut = errors.New("segment: truncated under a file range")

// A FileRange is a run of whole record batches in one segment's file,
// found and checked by their headers as Read checks them, without
// reading the batches themselves: a zero-copy send hands the file's
// bytes to the kernel (SendTo), so they never enter user space. Their
// CRCs are checked all the same, once per process: bytes this process
// wrote were checked before it wrote them, and others are read and
// checked the first time a range covers them (spans), so a corrupt batch
// is refused exactly as Read refuses it.
//
// A range holds its segment's file open until Release, so a segment that
// retention deletes, or a compaction replaces, keeps its bytes for the
// send. The bytes of a published range never change, except by
// truncation, and truncation changes nothing below its cut: a range below
// the cut is sent whole. Each system call of a send holds a truncation
// off, and a send that finds the segment cut below the range's end since
// it was taken stops there with ErrRangeCut.
//
// What the socket has already queued stays the range's too. sendfile
// queues references to page-cache pages, not copies, and a truncation
// into the middle of a page would zero its tail in place, where the next
// append writes; so a truncation drops whole pages and writes back what
// lies below its cut (cutFile). A follower's fetch of a log end that is
// then truncated sends the old bytes, as a fetch answered a moment
// earlier would have.
type FileRange struct {
	s         *segment
	pos, size int64
	cuts      int // len(s.cuts) when the range was taken
	// Next is the offset after the range's last batch; Transactional
	// reports whether any of its batches is a transactional data batch.
	Next          int64
	Transactional bool
}

// Len is the range's size in bytes.
func (r *FileRange) Len() int { return int(r.size) }

// cutLocked reports whether the segment was cut below the range's end
// since the range was taken. Call it with s.cut held shared.
func (r *FileRange) cutLocked() bool {
	for _, c := range r.s.cuts[r.cuts:] {
		if c < r.pos+r.size {
			return true
		}
	}
	return false
}

// Release lets the segment's file go; the range is empty after it.
func (r *FileRange) Release() {
	if r.s != nil {
		r.s.release()
	}
	*r = FileRange{}
}

// AppendTo appends the range's bytes to dst, read from the file: the
// copying path's answer for the same batches.
func (r *FileRange) AppendTo(dst []byte) ([]byte, error) {
	if r.size == 0 {
		return dst, nil
	}
	n0 := len(dst)
	dst = slices.Grow(dst, int(r.size))[:n0+int(r.size)]
	r.s.cut.RLock()
	defer r.s.cut.RUnlock()
	if r.cutLocked() {
		return dst[:n0], ErrRangeCut
	}
	if _, err := r.s.f.ReadAt(dst[n0:], r.pos); err != nil {
		return dst[:n0], fmt.Errorf("reading %s: %w", r.s.logPath(), err)
	}
	return dst, nil
}

// ReadRange is Read's zero-copy sibling: the batches Read would return
// for the same arguments, as a FileRange of one segment (the one holding
// offset; Read also returns batches of one segment only). An empty range
// means nothing to read. The caller must Release a non-empty range.
func (l *Log) ReadRange(offset, maxOffset int64, maxBytes int) (FileRange, error) {
	for {
		at, err := l.pinAt(offset, maxOffset)
		if err != nil || at.s == nil {
			return FileRange{}, err
		}
		s := at.s
		r, found, err := s.readRange(offset, maxOffset, maxBytes, at.limit, at.end, at.interval, l.logger)
		if r.size > 0 {
			s.acquire()                  // the range's own reference
			r.s, r.cuts = s, len(s.cuts) // under pin: cut held shared
		}
		s.unpin()
		if err != nil || found || at.next < 0 {
			return r, err
		}
		offset = at.next // nothing at or after offset in that segment
	}
}

// rangeWindow is how much of the file a range's scan reads at a time to
// see batch headers: small batches share one pread, large ones cost one
// each, and no batch's records are read.
const rangeWindow = 4 << 10

// readRange is read without the data: the same scan and header checks
// over a small sliding window, returning where the batches are.
func (s *segment) readRange(offset, maxOffset int64, maxBytes int, limit, endOffset int64, interval int, logger *slog.Logger) (FileRange, bool, error) {
	pos, indexed, err := s.position(offset, limit, interval, logger)
	if err != nil {
		return FileRange{}, false, err
	}
	var win []byte
	var winAt int64 = -1 // relative position of win[0]
	buf := make([]byte, rangeWindow)
	sc := &batchScan{s: s, pos: pos, limit: limit, end: endOffset, indexed: indexed, prevLast: s.base - 1, checked: -1,
		at: func(p, n int64) ([]byte, error) {
			if winAt >= 0 && p >= winAt && p+n <= winAt+int64(len(win)) {
				return win[p-winAt:], nil
			}
			want := min(int64(len(buf)), limit-pos-p)
			got, err := s.f.ReadAt(buf[:want], pos+p)
			if int64(got) < min(want, n) {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return nil, fmt.Errorf("reading %s: %w", s.logPath(), err)
			}
			win, winAt = buf[:got], p
			return win, nil
		}}
	fail := func(err error) (FileRange, bool, error) {
		if errors.Is(err, ErrCorruptSegment) {
			s.reportCorrupt(logger, err)
		}
		return FileRange{}, false, err
	}
	first, found, err := sc.skipTo(offset)
	if err != nil {
		return fail(err)
	}
	if !found {
		return FileRange{}, false, nil
	}
	sp := sc.take(first, maxOffset, maxBytes)
	if sp.end == first {
		if sp.stop != nil {
			return fail(sp.stop)
		}
		return FileRange{}, true, nil // the batch holding offset is at or beyond maxOffset
	}
	if sp.stop != nil && errors.Is(sp.stop, ErrCorruptSegment) {
		s.reportCorrupt(logger, sp.stop)
	}
	r := FileRange{pos: pos + first, size: sp.end - first, Next: sp.next, Transactional: sp.transactional}
	if !s.verified.covers(r.pos, r.pos+r.size) {
		if err := s.verify(&r, logger); err != nil {
			return fail(err)
		}
	}
	return r, true, nil
}

// verify reads r's batches and checks their CRCs, as Read does for every
// read and a zero-copy send cannot: r is cut back to the batches before
// the first that fails, and a failing first batch is the error. What
// passes is recorded, so it is read only this once.
func (s *segment) verify(r *FileRange, logger *slog.Logger) error {
	buf := make([]byte, r.size)
	if n, err := s.f.ReadAt(buf, r.pos); int64(n) < r.size {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("reading %s: %w", s.logPath(), err)
	}
	valid, err := s.checkCRCs(buf, r.pos)
	if err != nil {
		s.reportCorrupt(logger, err)
		if valid == 0 {
			return err
		}
	}
	// What is left of the range: its end and kind, from its headers.
	r.Next, r.Transactional = 0, false
	for b := buf[:valid]; len(b) > 0; {
		h := decodeHeader(b)
		r.Next = h.LastOffset() + 1
		r.Transactional = r.Transactional || (h.IsTransactional() && !h.IsControl())
		b = b[h.Size():]
	}
	r.size = int64(valid)
	s.verified.add(r.pos, r.pos+r.size)
	return nil
}

// spans is the parts of a segment's file whose batches passed their
// CRC-32C check in this process: written by it (Append and AppendReplica
// check every batch before writing) or read and checked once by
// readRange. A zero-copy send never reads the bytes, so it sends only
// checked ones: a range not wholly checked yet is read and checked first,
// once, and a corrupt batch is refused as Read refuses it.
type spans struct {
	mu sync.Mutex
	iv [][2]int64 // sorted, disjoint and merged [start, end)
}

// covers reports whether [a, b) is checked.
func (v *spans) covers(a, b int64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	i := sort.Search(len(v.iv), func(i int) bool { return v.iv[i][1] >= b })
	return i < len(v.iv) && v.iv[i][0] <= a
}

// add records [a, b) as checked.
func (v *spans) add(a, b int64) {
	if a >= b {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	// The spans that touch [a, b) merge with it.
	i := sort.Search(len(v.iv), func(i int) bool { return v.iv[i][1] >= a })
	j := i
	for j < len(v.iv) && v.iv[j][0] <= b {
		a, b = min(a, v.iv[j][0]), max(b, v.iv[j][1])
		j++
	}
	v.iv = slices.Replace(v.iv, i, j, [2]int64{a, b})
}

// trim forgets what lies at or past cut, which a truncation removed.
func (v *spans) trim(cut int64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := v.iv[:0]
	for _, s := range v.iv {
		if s[0] < cut {
			out = append(out, [2]int64{s[0], min(s[1], cut)})
		}
	}
	v.iv = out
}
