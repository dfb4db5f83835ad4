package segment

import (
	"fmt"
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
