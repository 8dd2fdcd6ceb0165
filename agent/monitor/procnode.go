package monitor

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
)

// nodeFiles are the node's procfs files, kept open and re-read with one
// pread each (controlFile), as the containers' control files are (#29):
// opening each anew (procfs.FS) cost an open, two epoll registrations,
// two fcntl, two reads and a close per file, six files at every node
// sample. Parsed as prometheus/procfs parses them, for the fields the
// monitor uses. Touched only under Monitor.sampleMu.
type nodeFiles struct {
	stat, meminfo, loadavg controlFile
	pressure               [3]controlFile // cpu, memory, io
	buf                    []byte
}

// pressureResources are the node's PSI files, in nodeFiles.pressure's order.
var pressureResources = [3]string{"cpu", "memory", "io"}

func newNodeFiles(procRoot string) *nodeFiles {
	n := &nodeFiles{
		stat:    controlFile{path: filepath.Join(procRoot, "stat")},
		meminfo: controlFile{path: filepath.Join(procRoot, "meminfo")},
		loadavg: controlFile{path: filepath.Join(procRoot, "loadavg")},
		buf:     make([]byte, 8192),
	}
	for i, r := range pressureResources {
		n.pressure[i] = controlFile{path: filepath.Join(procRoot, "pressure", r)}
	}
	return n
}

// read returns f's content (aliasing n.buf until the next read);
// errNotExist when the file does not exist.
func (n *nodeFiles) read(f *controlFile) ([]byte, error) {
	data, err := f.read(&n.buf)
	if errors.Is(err, errVanished) {
		return nil, fmt.Errorf("read %s: %w", f.path, errNotExist)
	}
	return data, err
}

// close closes the files; a later read opens them again.
func (n *nodeFiles) close() {
	for _, f := range []*controlFile{&n.stat, &n.meminfo, &n.loadavg, &n.pressure[0], &n.pressure[1], &n.pressure[2]} {
		f.close()
	}
}

// procCPU is /proc/stat's aggregate "cpu" line in seconds (its unit is
// USER_HZ, userHZ, as procfs assumes), and the number
// of "cpuN" lines (the CPUs online).
type procCPU struct {
	user, nice, system, idle, iowait, irq, softirq, steal float64
	cpus                                                  int
}

// parseProcStat parses /proc/stat's cpu lines as procfs.Stat does.
func parseProcStat(data []byte) (procCPU, error) {
	var c procCPU
	total := false
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte("cpu")) {
			continue
		}
		fields := bytes.Fields(line)
		if len(fields) < 2 {
			continue
		}
		if !bytes.Equal(fields[0], []byte("cpu")) {
			if _, err := strconv.ParseInt(string(fields[0][3:]), 10, 64); err != nil {
				return procCPU{}, fmt.Errorf("parse /proc/stat line %q: %w", line, err)
			}
			c.cpus++
			continue
		}
		var v [8]float64
		for i := range min(len(v), len(fields)-1) {
			f, err := strconv.ParseFloat(string(fields[i+1]), 64)
			if err != nil {
				return procCPU{}, fmt.Errorf("parse /proc/stat line %q: %w", line, err)
			}
			v[i] = f / userHZ
		}
		c.user, c.nice, c.system, c.idle, c.iowait, c.irq, c.softirq, c.steal = v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
		total = true
	}
	if !total {
		return procCPU{}, errors.New("parse /proc/stat: no cpu line")
	}
	return c, nil
}

// procMem is /proc/meminfo's MemTotal and MemAvailable in bytes; has*
// say whether each was there.
type procMem struct {
	total, available       uint64
	hasTotal, hasAvailable bool
}

// parseMeminfo parses /proc/meminfo's MemTotal and MemAvailable as
// procfs.Meminfo does (kB, times 1024).
func parseMeminfo(data []byte) (procMem, error) {
	var m procMem
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		fields := bytes.Fields(line)
		if len(fields) < 2 {
			continue
		}
		var dst *uint64
		var has *bool
		switch string(fields[0]) {
		case "MemTotal:":
			dst, has = &m.total, &m.hasTotal
		case "MemAvailable:":
			dst, has = &m.available, &m.hasAvailable
		default:
			continue
		}
		v, err := strconv.ParseUint(string(fields[1]), 10, 64)
		if err != nil {
			return procMem{}, fmt.Errorf("parse /proc/meminfo line %q: %w", line, err)
		}
		if len(fields) == 3 {
			if !bytes.Equal(fields[2], []byte("kB")) {
				return procMem{}, fmt.Errorf("parse /proc/meminfo line %q: unit %q, want kB", line, fields[2])
			}
			v *= 1024
		}
		*dst, *has = v, true
	}
	return m, nil
}

// parseLoadavg parses /proc/loadavg's three averages.
func parseLoadavg(data []byte) (load1, load5, load15 float64, err error) {
	fields := bytes.Fields(data)
	if len(fields) < 3 {
		return 0, 0, 0, fmt.Errorf("parse /proc/loadavg %q: too few fields", data)
	}
	var v [3]float64
	for i := range v {
		if v[i], err = strconv.ParseFloat(string(fields[i]), 64); err != nil {
			return 0, 0, 0, fmt.Errorf("parse /proc/loadavg %q: %w", data, err)
		}
	}
	return v[0], v[1], v[2], nil
}

// parseNodePressure parses a /proc/pressure file ("some avg10=.. avg60=..
// avg300=.. total=..", and "full ...") as procfs.PSIStatsForResource
// does; a line missing is zero.
func parseNodePressure(data []byte) (some, full psiLine, err error) {
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		fields := bytes.Fields(line)
		if len(fields) == 0 {
			continue
		}
		var dst *psiLine
		switch string(fields[0]) {
		case "some":
			dst = &some
		case "full":
			dst = &full
		default:
			continue
		}
		for _, field := range fields[1:] {
			key, value, ok := bytes.Cut(field, []byte("="))
			if !ok {
				continue
			}
			var perr error
			switch string(key) {
			case "avg10":
				dst.avg10, perr = strconv.ParseFloat(string(value), 64)
			case "avg60":
				dst.avg60, perr = strconv.ParseFloat(string(value), 64)
			case "avg300":
				dst.avg300, perr = strconv.ParseFloat(string(value), 64)
			case "total":
				dst.totalUsec, perr = strconv.ParseUint(string(value), 10, 64)
			}
			if perr != nil {
				return psiLine{}, psiLine{}, fmt.Errorf("parse pressure line %q: %w", line, perr)
			}
		}
	}
	return some, full, nil
}
