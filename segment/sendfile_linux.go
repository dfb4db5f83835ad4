package segment

import (
	"io"
	"syscall"
)

// ZeroCopy reports whether FileRange.SendTo sends with sendfile(2) on
// this platform.
const ZeroCopy = true

// sendChunk bounds one sendfile call, and so how long it holds a
// truncation of the segment off; a non-blocking socket takes less anyway.
const sendChunk = 1 << 20

// SendTo sends the range's bytes to the socket rc with sendfile(2), from
// the file's page cache to the socket without a copy through user space.
// It waits for the socket as rc.Write does (its write deadline applies),
// and returns the bytes sent. A send whose range was cut (FileRange)
// stops with ErrRangeCut.
func (r *FileRange) SendTo(rc syscall.RawConn) (int64, error) {
	if r.size == 0 {
		return 0, nil
	}
	fc, err := r.s.f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var sent int64
	var serr error
	cerr := fc.Control(func(src uintptr) {
		off := r.pos
		werr := rc.Write(func(dst uintptr) bool {
			for sent < r.size {
				// Under cut, shared: a truncation waits for this call,
				// and one that came before it is seen.
				r.s.cut.RLock()
				if r.cutLocked() {
					r.s.cut.RUnlock()
					serr = ErrRangeCut
					return true
				}
				n, err := syscall.Sendfile(int(dst), int(src), &off, int(min(r.size-sent, sendChunk)))
				r.s.cut.RUnlock()
				if n > 0 {
					sent += int64(n)
				}
				switch {
				case err == syscall.EAGAIN:
					return false // wait until the socket takes more
				case err == syscall.EINTR:
				case err != nil:
					serr = err
					return true
				case n == 0:
					serr = io.ErrUnexpectedEOF // the file is shorter than the range
					return true
				}
			}
			return true
		})
		if serr == nil {
			serr = werr
		}
	})
	if serr == nil {
		serr = cerr
	}
	return sent, serr
}
