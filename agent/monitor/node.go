package monitor

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/prometheus/procfs"
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

	if stat, err := m.proc.Stat(); err != nil {
		errs = append(errs, fmt.Errorf("node cpu: %w", err))
	} else {
		c := stat.CPUTotal
		// Guest time is already part of user time; idle and iowait are not usage.
		st.CpusUserTimeSecs = c.User + c.Nice
		st.CpusSystemTimeSecs = c.System + c.IRQ + c.SoftIRQ
		st.CpusUsageSecs = st.CpusUserTimeSecs + st.CpusSystemTimeSecs + c.Steal
		st.CpusLimit = float64(len(stat.CPU))
		if b := m.prevNode; b.valid && now.After(b.time) && st.CpusUsageSecs >= b.usageSecs {
			u.CPURate = (st.CpusUsageSecs - b.usageSecs) / now.Sub(b.time).Seconds()
			st.CpusRate = u.CPURate
		}
		m.prevNode = baseline{valid: true, time: now, usageSecs: st.CpusUsageSecs}
	}

	if mem, err := m.proc.Meminfo(); err != nil {
		errs = append(errs, fmt.Errorf("node memory: %w", err))
	} else {
		if mem.MemTotalBytes != nil {
			st.MemLimitBytes = *mem.MemTotalBytes
		}
		if mem.MemAvailableBytes != nil {
			st.MemAvailableBytes = *mem.MemAvailableBytes
			u.MemUsage = st.MemLimitBytes - min(st.MemLimitBytes, st.MemAvailableBytes)
		}
	}

	if load, err := m.proc.LoadAvg(); err != nil {
		errs = append(errs, fmt.Errorf("node load: %w", err))
	} else {
		st.LoadAvg_1, st.LoadAvg_5, st.LoadAvg_15 = load.Load1, load.Load5, load.Load15
	}

	for _, p := range []struct {
		resource string
		dst      **slacklinev1.Pressure
	}{{"cpu", &st.CpuPressure}, {"memory", &st.MemoryPressure}, {"io", &st.IoPressure}} {
		psi, err := m.proc.PSIStatsForResource(p.resource)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("node %s pressure: %w", p.resource, err))
			continue
		}
		*p.dst = pressure(psiLineOf(psi.Some), psiLineOf(psi.Full))
	}

	// The agent's cgroup root's memory limit (nodebound.go): after the
	// host's memory pressure, which the bounding cgroup's replaces.
	if err := m.boundNodeMemory(now, &u); err != nil {
		errs = append(errs, err)
	}
	return u, errors.Join(errs...)
}

func psiLineOf(l *procfs.PSILine) psiLine {
	if l == nil {
		return psiLine{}
	}
	return psiLine{avg10: l.Avg10, avg60: l.Avg60, avg300: l.Avg300, totalUsec: l.Total}
}
