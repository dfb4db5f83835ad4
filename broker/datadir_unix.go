//go:build unix

package broker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes an exclusive lock on dir for the life of the process
// (the kernel drops it if the process dies, so a crash never leaves a
// stale lock). Two brokers on one data dir would append to the same logs;
// Badger's own lock on the metadata would stop the second one, but in
// words about Badger, after the Kafka listener was already open.
func lockDataDir(dir string) (unlock func() error, err error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another strata process", dir)
		}
		return nil, fmt.Errorf("data dir %s: lock: %w", dir, err)
	}
	return f.Close, nil // closing the file releases the lock
}
