package cgroups

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
)

// MaxOpenFiles bounds the control files an OpenFiles keeps open.
const MaxOpenFiles = 16

// maxOpenFileSize bounds what OpenFiles reads of one file.
const maxOpenFileSize = 1 << 20

// OpenFiles keeps up to MaxOpenFiles control files open and re-reads them
// with pread at offset 0 (cgroupfs regenerates a file's content on every
// read from offset 0), where os.ReadFile opens, stats, reads twice and
// closes: a file polled several times a second (the agent's QoS loop reads
// the revocable subtree's limits at every evaluation) costs one system
// call instead of five (#29). A read that fails on a kept file (its cgroup
// removed, perhaps recreated) closes it and opens the path afresh, so what
// is read is always the path's current file. Paths past the bound are read
// with os.ReadFile and counted (Overflows). A nil *OpenFiles reads every
// file with os.ReadFile. Safe for concurrent use; Close releases the
// files.
type OpenFiles struct {
	mu        sync.Mutex
	files     map[string]*os.File
	buf       []byte
	overflows atomic.Uint64
}

// Overflows returns how many reads found MaxOpenFiles files kept already
// and read their path with os.ReadFile.
func (o *OpenFiles) Overflows() uint64 { return o.overflows.Load() }

// ReadFile returns the content of the file at path.
func (o *OpenFiles) ReadFile(path string) ([]byte, error) {
	if o == nil {
		return os.ReadFile(path)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if f := o.files[path]; f != nil {
		if data, err := o.readAt(f); err == nil {
			return data, nil
		}
		_ = f.Close()
		delete(o.files, path)
	}
	if len(o.files) >= MaxOpenFiles {
		o.overflows.Add(1)
		return os.ReadFile(path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	data, err := o.readAt(f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if o.files == nil {
		o.files = map[string]*os.File{}
	}
	o.files[path] = f
	return data, nil
}

// readAt reads f whole from offset 0 into a copy. o.mu is held.
func (o *OpenFiles) readAt(f *os.File) ([]byte, error) {
	if o.buf == nil {
		o.buf = make([]byte, 4096)
	}
	for {
		n, err := f.ReadAt(o.buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if n < len(o.buf) {
			return append([]byte(nil), o.buf[:n]...), nil
		}
		if len(o.buf) >= maxOpenFileSize {
			return nil, fmt.Errorf("read %s: larger than %d bytes", f.Name(), maxOpenFileSize)
		}
		o.buf = make([]byte, 2*len(o.buf))
	}
}

// Close closes the files kept open; later reads open them again.
func (o *OpenFiles) Close() error {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var err error
	for path, f := range o.files {
		err = errors.Join(err, f.Close())
		delete(o.files, path)
	}
	return err
}
