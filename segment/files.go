package segment

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// File name suffixes (docs/format.md §1).
const (
	logSuffix       = ".log"
	indexSuffix     = ".index"
	timeIndexSuffix = ".timeindex"
	snapshotSuffix  = ".snapshot"
	tmpSuffix       = ".tmp"
	// A rewrite's output until its swap, and the swap intent (§13).
	cleanedSuffix = ".cleaned"
	swapSuffix    = ".swap"

	epochCheckpointName = "leader-epoch-checkpoint"
	cleanShutdownName   = "clean-shutdown"
	restartName         = "restart-offset"
)

func offsetName(dir string, offset int64, suffix string) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", offset, suffix))
}

// parseOffsetName splits "<20 digits><suffix>" into its offset and suffix.
func parseOffsetName(name string) (int64, string, bool) {
	if len(name) <= 20 || name[20] != '.' {
		return 0, "", false
	}
	off, err := strconv.ParseInt(name[:20], 10, 64)
	if err != nil || off < 0 {
		return 0, "", false
	}
	return off, name[20:], true
}

// writeFileAtomic writes data to path via path.tmp, fsync and rename, then
// fsyncs the directory, so a crash leaves either the old or the new file.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err = syncAndClose(f, err); err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := syncAndClose(d, nil); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

// syncAndClose fsyncs f unless err (from writing it) is already set, closes
// it, and returns the first error.
func syncAndClose(f *os.File, err error) error {
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// removeIfExists removes path, ignoring its absence.
func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

func isTemp(name string) bool { return strings.HasSuffix(name, tmpSuffix) }

// encodeCheckpoint encodes a small checkpoint file (docs/format.md): 4
// magic bytes, the fields as big-endian int64s, and a CRC-32C of the bytes
// before it.
func encodeCheckpoint(magic [4]byte, fields ...int64) []byte {
	b := append(make([]byte, 0, 4+8*len(fields)+4), magic[:]...)
	for _, f := range fields {
		b = binary.BigEndian.AppendUint64(b, uint64(f))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// decodeCheckpoint returns the n fields of a checkpoint encodeCheckpoint
// wrote with magic; ok is false for anything else, or a negative field.
func decodeCheckpoint(b []byte, magic [4]byte, n int) (fields []int64, ok bool) {
	size := 4 + 8*n
	if len(b) != size+4 || [4]byte(b[:4]) != magic || binary.BigEndian.Uint32(b[size:]) != crc32.Checksum(b[:size], castagnoli) {
		return nil, false
	}
	fields = make([]int64, n)
	for i := range fields {
		if fields[i] = int64(binary.BigEndian.Uint64(b[4+8*i:])); fields[i] < 0 {
			return nil, false
		}
	}
	return fields, true
}
