//go:build !unix

package broker

import "errors"

// diskSpace is not implemented here; DescribeLogDirs then reports -1.
func diskSpace(string) (total, usable int64, err error) {
	return 0, 0, errors.New("disk space: not supported on this platform")
}
