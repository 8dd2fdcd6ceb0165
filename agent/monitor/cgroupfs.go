package monitor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"golang.org/x/sys/unix"
)

// errVanished reports that a container's cgroup is gone (its files return
// ENOENT or ENODEV): the container is dropped from the pass, not an error.
var errVanished = errors.New("cgroup vanished")

// controlFile is one cgroup control file, kept open between passes and
// re-read from offset 0 (pread): cgroupfs regenerates the content of a
// seq_file on every read at offset 0, so one open per container life is
// enough and each pass costs one system call per file.
type controlFile struct {
	path   string
	f      openFile // nil until opened
	absent bool     // the cgroup exists but has no such file (kernel, layout): not retried
}

// read returns the file's current content in buf (grown if needed; the
// returned slice aliases it). A file that does not exist while its cgroup
// does is remembered as absent and returns (nil, nil). errVanished is
// returned when the file's cgroup was removed.
func (c *controlFile) read(buf *[]byte) ([]byte, error) {
	if c.absent || c.path == "" {
		return nil, nil
	}
	if c.f == nil {
		f, err := cgroups.OpenFile(c.path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) {
				return nil, errNotExist
			}
			return nil, fmt.Errorf("open %s: %w", c.path, err)
		}
		c.f = f
	}
	for {
		n, err := c.f.ReadAt(*buf, 0)
		if err != nil && err != io.EOF {
			c.close()
			if errors.Is(err, unix.ENODEV) || errors.Is(err, fs.ErrNotExist) {
				return nil, errVanished
			}
			return nil, fmt.Errorf("read %s: %w", c.path, err)
		}
		if n < len(*buf) {
			return (*buf)[:n], nil
		}
		// The content may be longer than the buffer: grow and read again.
		*buf = make([]byte, 2*len(*buf))
	}
}

// openFile is what controlFile needs of an open *os.File (tests substitute
// a file that fails like a removed cgroup's): a *cgroups.File, which
// reads with one pread(2). A read shorter than its buffer must have the
// whole content.
type openFile interface {
	io.ReaderAt
	io.Closer
}

// errNotExist is returned by controlFile.read when the file cannot be
// opened because it does not exist; the caller decides whether the file or
// the whole cgroup is missing.
var errNotExist = errors.New("control file does not exist")

func (c *controlFile) close() {
	if c.f != nil {
		c.f.Close()
		c.f = nil
	}
}

// forEachKey calls fn for every "key value" line of a flat-keyed cgroup
// file (cpu.stat, memory.stat, memory.events, memory.oom_control). It does
// not allocate: key aliases data.
func forEachKey(data []byte, fn func(key []byte, value uint64)) {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		sp := bytes.IndexByte(line, ' ')
		if sp <= 0 {
			continue
		}
		if v, ok := parseUint(line[sp+1:]); ok {
			fn(line[:sp], v)
		}
	}
}

// parseUint parses a decimal unsigned integer, ignoring surrounding blanks.
func parseUint(b []byte) (uint64, bool) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (1<<64-1-d)/10 {
			return 0, false // overflow
		}
		v = v*10 + d
	}
	return v, true
}

// parseDecimal parses a non-negative decimal number such as "12.34" (the
// PSI averages) without allocating.
func parseDecimal(b []byte) (float64, bool) {
	var whole, frac, scale float64 = 0, 0, 1
	seenDot, digits := false, 0
	for _, c := range b {
		switch {
		case c == '.' && !seenDot:
			seenDot = true
		case c >= '0' && c <= '9':
			digits++
			if seenDot {
				scale *= 10
				frac = frac*10 + float64(c-'0')
			} else {
				whole = whole*10 + float64(c-'0')
			}
		default:
			return 0, false
		}
	}
	return whole + frac/scale, digits > 0
}

// psiLine is one line of a PSI file: averages in percent, total in
// microseconds.
type psiLine struct {
	avg10, avg60, avg300 float64
	totalUsec            uint64
}

// parsePressure parses a PSI file ("some avg10=.. avg60=.. avg300=..
// total=..", and an optional "full" line).
func parsePressure(data []byte) (some, full psiLine) {
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		var dst *psiLine
		switch {
		case bytes.HasPrefix(line, []byte("some ")):
			dst = &some
		case bytes.HasPrefix(line, []byte("full ")):
			dst = &full
		default:
			continue
		}
		rest := line[5:]
		for len(rest) > 0 {
			field := rest
			if sp := bytes.IndexByte(rest, ' '); sp >= 0 {
				field, rest = rest[:sp], rest[sp+1:]
			} else {
				rest = nil
			}
			eq := bytes.IndexByte(field, '=')
			if eq < 0 {
				continue
			}
			value := field[eq+1:]
			switch string(field[:eq]) {
			case "avg10":
				dst.avg10, _ = parseDecimal(value)
			case "avg60":
				dst.avg60, _ = parseDecimal(value)
			case "avg300":
				dst.avg300, _ = parseDecimal(value)
			case "total":
				dst.totalUsec, _ = parseUint(value)
			}
		}
	}
	return some, full
}

// parseLimit parses a memory limit file: v2 memory.max ("max" or bytes) or
// v1 memory.limit_in_bytes (bytes; a value near 2^63 means unlimited).
// Unlimited returns 0.
func parseLimit(data []byte) uint64 {
	v, ok := parseUint(data)
	if !ok || v >= 1<<62 {
		return 0
	}
	return v
}
