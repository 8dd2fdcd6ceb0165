package monitor

import (
	"path/filepath"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// userHZ is the unit of cpuacct.stat (USER_HZ, 100 on every Linux ABI).
const userHZ = 100

// v2CPU reads CPU time and CFS throttling from a pure v2 cgroup's
// cpu.stat (microseconds).
type v2CPU struct {
	unified string // the cgroup's directory: the witness of its existence
	stat    controlFile
}

func newV2CPU(h *host, rel string) sampler {
	dir := h.layout.PathsOf(rel).Unified
	return &v2CPU{unified: dir, stat: controlFileIn(dir, "cpu.stat")}
}

func (c *v2CPU) files() []*controlFile { return []*controlFile{&c.stat} }

func (c *v2CPU) sample(s *scratch, _ *Target, u *Usage) error {
	data, err := s.read(&c.stat, c.unified)
	if err != nil {
		return err
	}
	parseCPUStat(data, u.Stats)
	return nil
}

// hybridCPU reads CPU time on a hybrid host from the v2 tree's cpu.stat
// (core statistics need no controller), or, on kernels without it, from
// the v1 cpuacct.usage (ns) and cpuacct.stat (USER_HZ); and CFS throttling
// from the v1 cpu controller's cpu.stat (nanoseconds).
type hybridCPU struct {
	unified      string
	coreStat     controlFile // <unified>/<rel>/cpu.stat
	cpuacctUsage controlFile // <mnt>/cpuacct/<rel>/cpuacct.usage
	cpuacctStat  controlFile // <mnt>/cpuacct/<rel>/cpuacct.stat
	v1Stat       controlFile // <cpu>/<rel>/cpu.stat
}

func newHybridCPU(h *host, rel string) sampler {
	p := h.layout.PathsOf(rel)
	cpuacct := filepath.Join(h.layout.Mountpoint, "cpuacct", rel)
	return &hybridCPU{
		unified:      p.Unified,
		coreStat:     controlFileIn(p.Unified, "cpu.stat"),
		cpuacctUsage: controlFileIn(cpuacct, "cpuacct.usage"),
		cpuacctStat:  controlFileIn(cpuacct, "cpuacct.stat"),
		v1Stat:       controlFileIn(p.CPU, "cpu.stat"),
	}
}

func (c *hybridCPU) files() []*controlFile {
	return []*controlFile{&c.coreStat, &c.cpuacctUsage, &c.cpuacctStat, &c.v1Stat}
}

func (c *hybridCPU) sample(s *scratch, _ *Target, u *Usage) error {
	st := u.Stats
	data, err := s.read(&c.coreStat, c.unified)
	if err != nil {
		return err
	}
	parseCPUStat(data, st)
	if data == nil { // old kernel without core cpu.stat in the v2 tree
		if data, err = s.read(&c.cpuacctUsage, c.unified); err != nil {
			return err
		}
		if ns, ok := parseUint(data); ok {
			st.CpusUsageSecs = float64(ns) / 1e9
		}
		if data, err = s.read(&c.cpuacctStat, c.unified); err != nil {
			return err
		}
		forEachKey(data, func(key []byte, v uint64) {
			switch string(key) {
			case "user":
				st.CpusUserTimeSecs = float64(v) / userHZ
			case "system":
				st.CpusSystemTimeSecs = float64(v) / userHZ
			}
		})
	}
	if data, err = s.read(&c.v1Stat, c.unified); err != nil {
		return err
	}
	forEachKey(data, func(key []byte, v uint64) {
		switch string(key) {
		case "nr_periods":
			st.CpusNrPeriods = v
		case "nr_throttled":
			st.CpusNrThrottled = v
		case "throttled_time":
			st.CpusThrottledTimeSecs = float64(v) / 1e9
		}
	})
	return nil
}

// parseCPUStat sets st's CPU times and throttling from a v2 cpu.stat
// (microseconds). Absent keys (nil data: no such file) leave zeros.
func parseCPUStat(data []byte, st *slacklinev1.ResourceStatistics) {
	var usageUsec, userUsec, systemUsec uint64
	forEachKey(data, func(key []byte, v uint64) {
		switch string(key) {
		case "usage_usec":
			usageUsec = v
		case "user_usec":
			userUsec = v
		case "system_usec":
			systemUsec = v
		case "nr_periods":
			st.CpusNrPeriods = v
		case "nr_throttled":
			st.CpusNrThrottled = v
		case "throttled_usec":
			st.CpusThrottledTimeSecs = float64(v) / 1e6
		}
	})
	st.CpusUsageSecs = float64(usageUsec) / 1e6
	st.CpusUserTimeSecs = float64(userUsec) / 1e6
	st.CpusSystemTimeSecs = float64(systemUsec) / 1e6
}
