package monitor

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// nodeFiles are the node's procfs files, kept open between node samples
// and re-read from offset 0 like the containers' control files (procfs
// regenerates a seq_file's content at offset 0), and parsed for the
// figures the node sample keeps only. They were opened, read and closed
// at every node sample through github.com/prometheus/procfs, which also
// parsed every other field (/proc/stat's interrupt counts included): the
// node sample cost as much as the rest of an idle agent's pass (#29). The
// parsing is procfs's for the fields kept (the same values to the bit).
type nodeFiles struct {
	stat, meminfo, loadavg controlFile
	// pressure are /proc/pressure/{cpu,memory,io}; a kernel without PSI
	// has none (absent: not retried).
	pressure [3]controlFile
}

func newNodeFiles(procRoot string) nodeFiles {
	n := nodeFiles{stat: controlFileIn(procRoot, "stat"), meminfo: controlFileIn(procRoot, "meminfo"),
		loadavg: controlFileIn(procRoot, "loadavg")}
	for i, resource := range []string{"cpu", "memory", "io"} {
		n.pressure[i] = controlFileIn(filepath.Join(procRoot, "pressure"), resource)
	}
	return n
}

func (n *nodeFiles) close() {
	for _, f := range []*controlFile{&n.stat, &n.meminfo, &n.loadavg, &n.pressure[0], &n.pressure[1], &n.pressure[2]} {
		f.close()
	}
}

// readNodeFile reads one of the node's files (errNotExist: it has none).
func readNodeFile(f *controlFile, buf *[]byte) ([]byte, error) {
	data, err := f.read(buf)
	if errors.Is(err, errVanished) { // read failing as a removed cgroup's would
		return nil, fmt.Errorf("read %s: %w", f.path, err)
	}
	return data, err
}

// sampleNode reads the node's figures from procfs: CPU time from
// /proc/stat, memory from /proc/meminfo, load from /proc/loadavg and PSI
// from /proc/pressure (absent on kernels without PSI: left unset). Called
// with sampleMu held. What could be read is returned even with an error.
func (m *Monitor) sampleNode(now time.Time) (Usage, error) {
	st := &slacklinev1.ResourceStatistics{Timestamp: timestamppb.New(now)}
	u := Usage{Time: now, Stats: st}
	var errs []error
	files, buf := &m.nodeFiles, &m.scratch.buf

	if data, err := readNodeFile(&files.stat, buf); err != nil {
		errs = append(errs, fmt.Errorf("node cpu: %w", err))
	} else if c, cpus, err := parseProcStat(data); err != nil {
		errs = append(errs, fmt.Errorf("node cpu: %w", err))
	} else {
		// Guest time is already part of user time; idle and iowait are not usage.
		st.CpusUserTimeSecs = c.user + c.nice
		st.CpusSystemTimeSecs = c.system + c.irq + c.softIRQ
		st.CpusUsageSecs = st.CpusUserTimeSecs + st.CpusSystemTimeSecs + c.steal
		st.CpusLimit = float64(cpus)
		if b := m.prevNode; b.valid && now.After(b.time) && st.CpusUsageSecs >= b.usageSecs {
			u.CPURate = (st.CpusUsageSecs - b.usageSecs) / now.Sub(b.time).Seconds()
			st.CpusRate = u.CPURate
		}
		m.prevNode = baseline{valid: true, time: now, usageSecs: st.CpusUsageSecs}
	}

	if data, err := readNodeFile(&files.meminfo, buf); err != nil {
		errs = append(errs, fmt.Errorf("node memory: %w", err))
	} else if total, available, err := parseMeminfo(data); err != nil {
		errs = append(errs, fmt.Errorf("node memory: %w", err))
	} else {
		if total != nil {
			st.MemLimitBytes = *total
		}
		if available != nil {
			st.MemAvailableBytes = *available
			u.MemUsage = st.MemLimitBytes - min(st.MemLimitBytes, st.MemAvailableBytes)
		}
	}

	if err := m.boundNodeMemory(now, &u); err != nil { // the agent's cgroup root's memory limit (nodebound.go)
		errs = append(errs, err)
	}

	if data, err := readNodeFile(&files.loadavg, buf); err != nil {
		errs = append(errs, fmt.Errorf("node load: %w", err))
	} else if load, err := parseLoadAvg(data); err != nil {
		errs = append(errs, fmt.Errorf("node load: %w", err))
	} else {
		st.LoadAvg_1, st.LoadAvg_5, st.LoadAvg_15 = load[0], load[1], load[2]
	}

	for i, p := range []struct {
		resource string
		dst      **slacklinev1.Pressure
	}{{"cpu", &st.CpuPressure}, {"memory", &st.MemoryPressure}, {"io", &st.IoPressure}} {
		f := &files.pressure[i]
		data, err := readNodeFile(f, buf)
		if errors.Is(err, errNotExist) {
			f.absent = true // no PSI: not looked for again
			continue
		}
		if err == nil && data == nil {
			continue // absent
		}
		var some, full psiLine
		if err == nil {
			some, full, err = parseNodePressure(data)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s pressure: %w", p.resource, err))
			continue
		}
		*p.dst = pressure(some, full)
	}
	return u, errors.Join(errs...)
}

// procCPU is /proc/stat's cpu line in seconds (USER_HZ ticks / 100).
type procCPU struct {
	user, nice, system, irq, softIRQ, steal float64
}

// parseProcStat returns /proc/stat's total CPU times (the "cpu" line) and
// how many CPUs it lists ("cpuN" lines), as procfs.FS.Stat's CPUTotal and
// len(CPU). Fields a kernel does not have are 0.
func parseProcStat(data []byte) (total procCPU, cpus int, err error) {
	seenTotal := false
	for line := range bytes.Lines(data) {
		if !bytes.HasPrefix(line, []byte("cpu")) {
			continue
		}
		name, rest, _ := bytes.Cut(bytes.TrimRight(line, "\n"), []byte(" "))
		if len(name) > 3 {
			cpus++
			continue
		}
		var v [8]float64 // user nice system idle iowait irq softirq steal
		i := 0
		for field := range bytes.FieldsSeq(rest) {
			if i == len(v) {
				break
			}
			f, err := strconv.ParseFloat(string(field), 64)
			if err != nil {
				return procCPU{}, 0, fmt.Errorf("parse %q: %w", line, err)
			}
			v[i] = f / userHZ
			i++
		}
		if i == 0 {
			return procCPU{}, 0, fmt.Errorf("parse %q: no times", line)
		}
		total = procCPU{user: v[0], nice: v[1], system: v[2], irq: v[5], softIRQ: v[6], steal: v[7]}
		seenTotal = true
	}
	if !seenTotal {
		return procCPU{}, 0, errors.New("no cpu line")
	}
	return total, cpus, nil
}

// parseMeminfo returns /proc/meminfo's MemTotal and MemAvailable in bytes
// (nil when absent), as procfs.FS.Meminfo's MemTotalBytes and
// MemAvailableBytes: a "kB" value times 1024, a value without a unit as
// it is.
func parseMeminfo(data []byte) (total, available *uint64, err error) {
	for line := range bytes.Lines(data) {
		var dst **uint64
		switch {
		case bytes.HasPrefix(line, []byte("MemTotal:")):
			dst = &total
		case bytes.HasPrefix(line, []byte("MemAvailable:")):
			dst = &available
		default:
			continue
		}
		fields := bytes.Fields(line)
		if len(fields) < 2 || len(fields) > 3 || len(fields) == 3 && string(fields[2]) != "kB" {
			return nil, nil, fmt.Errorf("malformed line %q", line)
		}
		v, err := strconv.ParseUint(string(fields[1]), 0, 64)
		if err != nil {
			return nil, nil, fmt.Errorf("parse %q: %w", line, err)
		}
		if len(fields) == 3 {
			v *= 1024
		}
		*dst = &v
	}
	return total, available, nil
}

// parseLoadAvg returns /proc/loadavg's 1, 5 and 15 minute averages.
func parseLoadAvg(data []byte) ([3]float64, error) {
	var load [3]float64
	fields := bytes.Fields(data)
	if len(fields) < 3 {
		return load, fmt.Errorf("malformed line %q", data)
	}
	for i := range load {
		var err error
		if load[i], err = strconv.ParseFloat(string(fields[i]), 64); err != nil {
			return load, fmt.Errorf("parse load %q: %w", fields[i], err)
		}
	}
	return load, nil
}

// parseNodePressure parses a /proc/pressure file as procfs does: its
// averages with strconv.ParseFloat (parsePressure's, for the containers'
// files read at every pass, may differ from it in the last bit).
func parseNodePressure(data []byte) (some, full psiLine, err error) {
	for line := range bytes.Lines(data) {
		var dst *psiLine
		switch {
		case bytes.HasPrefix(line, []byte("some ")):
			dst = &some
		case bytes.HasPrefix(line, []byte("full ")):
			dst = &full
		default:
			continue
		}
		fields := bytes.Fields(line[5:])
		if len(fields) != 4 {
			return some, full, fmt.Errorf("malformed line %q", line)
		}
		for i, key := range []string{"avg10=", "avg60=", "avg300=", "total="} {
			value, ok := bytes.CutPrefix(fields[i], []byte(key))
			if !ok {
				return some, full, fmt.Errorf("malformed line %q", line)
			}
			switch i {
			case 0:
				dst.avg10, err = strconv.ParseFloat(string(value), 64)
			case 1:
				dst.avg60, err = strconv.ParseFloat(string(value), 64)
			case 2:
				dst.avg300, err = strconv.ParseFloat(string(value), 64)
			case 3:
				dst.totalUsec, err = strconv.ParseUint(string(value), 10, 64)
			}
			if err != nil {
				return some, full, fmt.Errorf("parse %q: %w", line, err)
			}
		}
	}
	return some, full, nil
}
