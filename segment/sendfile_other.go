//go:build !linux

package segment

import (
	"errors"
	"syscall"
)

// ZeroCopy reports whether FileRange.SendTo sends with sendfile(2) on
// this platform.
const ZeroCopy = false

// SendTo is not supported here: callers copy (AppendTo).
func (r *FileRange) SendTo(rc syscall.RawConn) (int64, error) {
	return 0, errors.ErrUnsupported
}
