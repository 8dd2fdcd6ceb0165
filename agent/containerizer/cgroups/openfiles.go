package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/internal/tick"
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
//
// One made by NewHeldFiles also holds what it read (see there).
type OpenFiles struct {
	mu        sync.Mutex
	files     map[string]*File
	buf       []byte
	overflows atomic.Uint64

	hold time.Duration // NewHeldFiles's period; 0: every read reads
	now  func() time.Time
	held map[string]heldRead // at most MaxOpenFiles paths
}

// heldRead is what a read of a held path found: its content, or that it
// does not exist (err), at a time.
type heldRead struct {
	data []byte
	err  error
	at   time.Time
}

// NewHeldFiles returns an OpenFiles that also holds what each read found,
// the content or that the file does not exist, and answers later reads of
// the path from it until the first read after the next multiple of period
// on now's clock (tick.Crossed) or until Forget (#29). It is for files
// whose value only the agent's own writes change, which call Forget (the
// QoS controllers' levers in the revocable subtree), and files that stay
// absent (the cpuset file of a root the cpuset controller does not cover,
// which otherwise cost a failed open at every read): a change made by
// anyone else shows at the next boundary, at most period later. Other
// errors are not held. Up to MaxOpenFiles paths are held; reads of the
// others are counted in Overflows and read every time.
func NewHeldFiles(period time.Duration, now func() time.Time) *OpenFiles {
	return &OpenFiles{hold: period, now: now, held: map[string]heldRead{}}
}

// Forget drops what is held: the next read of every path reads the file.
// Call it after writing a held file.
func (o *OpenFiles) Forget() {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	clear(o.held)
}

// Overflows returns how many reads found MaxOpenFiles files kept already
// and read their path with os.ReadFile, or (NewHeldFiles) MaxOpenFiles
// paths held already and did not hold theirs.
func (o *OpenFiles) Overflows() uint64 { return o.overflows.Load() }

// ReadFile returns the content of the file at path.
func (o *OpenFiles) ReadFile(path string) ([]byte, error) {
	if o == nil {
		return os.ReadFile(path)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.hold <= 0 {
		return o.read(path)
	}
	now := o.now()
	if h, ok := o.held[path]; ok && !now.Before(h.at) && !tick.Crossed(h.at, now, o.hold) {
		return bytes.Clone(h.data), h.err
	}
	data, err := o.read(path)
	_, was := o.held[path]
	switch {
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		delete(o.held, path)
	case was || len(o.held) < MaxOpenFiles:
		o.held[path] = heldRead{data: bytes.Clone(data), err: err, at: now}
	default:
		o.overflows.Add(1)
	}
	return data, err
}

// read reads the file at path, kept open. o.mu is held.
func (o *OpenFiles) read(path string) ([]byte, error) {
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
	f, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	data, err := o.readAt(f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if o.files == nil {
		o.files = map[string]*File{}
	}
	o.files[path] = f
	return data, nil
}

// readAt reads f whole from offset 0 into a copy. o.mu is held.
func (o *OpenFiles) readAt(f *File) ([]byte, error) {
	if o.buf == nil {
		o.buf = make([]byte, 4096)
	}
	for {
		n, err := f.ReadAt(o.buf, 0)
		if err != nil {
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
	clear(o.held)
	return err
}

// File is a control file kept open and read with one pread(2) per read
// (ReadAt), where (*os.File).ReadAt reads again until its buffer is full
// or the file ends: for a control file, whose content is shorter than the
// buffer, that is a second system call at every read, which returns
// nothing (#29). A cgroupfs file is a seq_file whose whole content a read
// at offset 0 formats and copies as far as the buffer holds, so a read
// that returns less than the buffer has the whole content (a regular
// file's, likewise, up to its end); a full buffer means the content may
// be longer. Not safe for concurrent use with Close.
type File struct {
	f  *os.File
	fd int // f's descriptor, taken once: (*os.File).Fd makes a system call (fcntl) at every call on a pollable file such as cgroupfs's
}

// OpenFile opens the file at path for reading with File.ReadAt.
func OpenFile(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	// Fd puts the descriptor in blocking mode (a cgroupfs read never
	// waits) and keeps it so.
	return &File{f: f, fd: int(f.Fd())}, nil
}

// ReadAt reads the file at off with one pread(2) (retried on EINTR): a
// short count when the content ends first, 0 at or past its end, never
// io.EOF. It fails with a *fs.PathError naming the file.
func (f *File) ReadAt(buf []byte, off int64) (int, error) {
	for {
		n, err := unix.Pread(f.fd, buf, off)
		if err == unix.EINTR {
			continue
		}
		runtime.KeepAlive(f.f)
		if err != nil {
			return 0, &fs.PathError{Op: "pread", Path: f.f.Name(), Err: err}
		}
		return n, nil
	}
}

// Name returns the path the file was opened with.
func (f *File) Name() string { return f.f.Name() }

// Close closes the file; later reads fail.
func (f *File) Close() error {
	f.fd = -1
	return f.f.Close()
}
