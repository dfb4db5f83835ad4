//go:build unix

package broker

import "syscall"

// diskSpace returns the size of the volume holding path and the bytes an
// unprivileged process may still write there.
func diskSpace(path string) (total, usable int64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	bs := int64(st.Bsize)
	return int64(st.Blocks) * bs, int64(st.Bavail) * bs, nil
}
