package monitor

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// sampleNode reads the node's figures from procfs: CPU time from
// /proc/stat, memory from /proc/meminfo, load from /proc/loadavg and PSI
// from /proc/pressure (absent on kernels without PSI: left unset); a
// cgroup bounding the node's memory replaces the memory figures and the
// memory pressure (boundNodeMemory). Called with sampleMu held. What could
// be read is returned even with an error.
func (m *Monitor) sampleNode(now time.Time) (Usage, error) {
	st := &slacklinev1.ResourceStatistics{Timestamp: timestamppb.New(now)}
	u := Usage{Time: now, Stats: st}
	var errs []error

	files := m.nodeFiles
	if data, err := files.read(&files.stat); err != nil {
		errs = append(errs, fmt.Errorf("node cpu: %w", err))
	} else if c, err := parseProcStat(data); err != nil {
		errs = append(errs, fmt.Errorf("node cpu: %w", err))
	} else {
		// Guest time is already part of user time; idle and iowait are not usage.
		st.CpusUserTimeSecs = c.user + c.nice
		st.CpusSystemTimeSecs = c.system + c.irq + c.softirq
		st.CpusUsageSecs = st.CpusUserTimeSecs + st.CpusSystemTimeSecs + c.steal
		st.CpusLimit = float64(c.cpus)
		if b := m.prevNode; b.valid && now.After(b.time) && st.CpusUsageSecs >= b.usageSecs {
			u.CPURate = (st.CpusUsageSecs - b.usageSecs) / now.Sub(b.time).Seconds()
			st.CpusRate = u.CPURate
		}
		m.prevNode = baseline{valid: true, time: now, usageSecs: st.CpusUsageSecs}
	}

	if data, err := files.read(&files.meminfo); err != nil {
		errs = append(errs, fmt.Errorf("node memory: %w", err))
	} else if mem, err := parseMeminfo(data); err != nil {
		errs = append(errs, fmt.Errorf("node memory: %w", err))
	} else {
		if mem.hasTotal {
			st.MemLimitBytes = mem.total
		}
		if mem.hasAvailable {
			st.MemAvailableBytes = mem.available
			u.MemUsage = st.MemLimitBytes - min(st.MemLimitBytes, st.MemAvailableBytes)
		}
	}

	if data, err := files.read(&files.loadavg); err != nil {
		errs = append(errs, fmt.Errorf("node load: %w", err))
	} else if l1, l5, l15, err := parseLoadavg(data); err != nil {
		errs = append(errs, fmt.Errorf("node load: %w", err))
	} else {
		st.LoadAvg_1, st.LoadAvg_5, st.LoadAvg_15 = l1, l5, l15
	}

	for i, dst := range []**slacklinev1.Pressure{&st.CpuPressure, &st.MemoryPressure, &st.IoPressure} {
		f := &files.pressure[i]
		data, err := files.read(f)
		if errors.Is(err, errNotExist) {
			f.absent = true // PSI is on or off from boot
			continue
		}
		if f.absent {
			continue
		}
		if err == nil {
			var some, full psiLine
			if some, full, err = parseNodePressure(data); err == nil {
				*dst = pressure(some, full)
				continue
			}
		}
		errs = append(errs, fmt.Errorf("node %s pressure: %w", pressureResources[i], err))
	}

	// The agent's cgroup root's memory limit (nodebound.go): after the
	// host's memory pressure, which the bounding cgroup's replaces.
	if err := m.boundNodeMemory(now, &u); err != nil {
		errs = append(errs, err)
	}
	return u, errors.Join(errs...)
}
