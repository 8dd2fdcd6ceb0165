package filelock

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestLock checks that a second open file cannot take a held lock (and
// waits for it until its timeout), and takes it once the first is closed.
func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	open := func() *os.File {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	first, second := open(), open()
	defer second.Close()
	if err := Lock(first, 0); err != nil {
		t.Fatal(err)
	}
	if err := Lock(second, 100*time.Millisecond); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock while the first holds it = %v, want ErrLocked", err)
	}
	released := make(chan error, 1)
	go func() { released <- Lock(second, time.Minute) }()
	first.Close()
	if err := <-released; err != nil {
		t.Fatalf("lock once the first was closed: %v", err)
	}
}
