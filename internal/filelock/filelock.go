// Package filelock takes the exclusive advisory locks (flock) that keep two
// processes off one store file or work dir.
package filelock

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// ErrLocked is the failure to lock a file another process holds.
var ErrLocked = errors.New("locked by another process (is another process using this --work-dir?)")

// Lock takes an exclusive flock on f (a file or a directory), retrying
// until timeout; zero tries once. It fails with ErrLocked when another
// open file holds the lock, in this process or another. The lock lasts
// until f is closed.
func Lock(f *os.File, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("lock: %w", err)
		}
		if !time.Now().Before(deadline) {
			return ErrLocked
		}
		time.Sleep(min(50*time.Millisecond, time.Until(deadline)))
	}
}

// Locked runs fn holding an exclusive flock on the lock file at path
// (created mode 0600 if missing, never through a symbolic link), taken
// as Lock takes it, and lets it go when fn returns.
func Locked(path string, timeout time.Duration, fn func() error) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := Lock(f, timeout); err != nil {
		return fmt.Errorf("lock %s: %w", path, err)
	}
	return fn()
}
