package monitor

import (
	"path/filepath"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/tick"
)

// userHZ is the unit of cpuacct.stat (USER_HZ, 100 on every Linux ABI).
const userHZ = 100

// activity is what the eBPF figures of one pass say of a container's
// scheduling: enough to tell that it has not run between two passes.
type activity struct {
	known   bool // the pass has eBPF scheduler figures for the container (EBPFStats.Sched)
	running bool // a task of it held a CPU when they were read
	onCPU   time.Duration
	wakeups uint64
	runqSum time.Duration
}

// ranSince reports whether a container may have run between an earlier
// activity and a: it is running, or a run (OnCPU), a sleep (Wakeups) or a
// wait for a CPU (RunqSum) was counted since. Without eBPF figures on
// either side it may have.
func (a activity) ranSince(earlier activity) bool {
	if !a.known || !earlier.known {
		return true
	}
	return a.running || a.onCPU != earlier.onCPU || a.wakeups != earlier.wakeups || a.runqSum != earlier.runqSum
}

// blindHold is how long a container stays blind after the last read that
// found CPU time eBPF did not see. The blind mark must expire: eBPF's
// figures are read at the start of a pass (EBPFPass.BeginPass, or the
// fetch before the container's samplers) and cpu.stat later in it, so a
// task that runs in between shows in cpu.stat while eBPF's figures look
// unchanged. No tolerance on the amount tells that race from a real blind
// spot (the task may run for the whole window, which a loaded machine
// stretches without bound; a child cgroup's tasks may run for as little),
// so the mark is a hold instead: a real blind spot (tasks in a child
// cgroup that keep running) renews it at every read that finds unseen CPU
// time again, while a race, rare per read, costs a container a minute of
// reads at every pass before it goes back to reads only when eBPF says it
// ran. Once expired, a real blind spot is found again by the next refresh:
// its CPU time is then reported up to refreshInterval late once, not
// every time.
const blindHold = time.Minute

// cpuRead is what a container's CPU files said at their last read.
type cpuRead struct {
	valid    bool
	at       time.Time
	activity activity // eBPF's then
	// blindAt is when a read last found CPU time that eBPF did not see
	// (tasks in a child cgroup, which eBPF counts as that cgroup's; or a
	// run between eBPF's read and the file's, see blindHold); zero: never.
	// The files are read at every pass for blindHold from then (blind).
	blindAt                        time.Time
	usage, user, system, throttled float64
	periods, nrThrottled           uint64
}

// blind reports whether the files must be read at every pass at now: a
// read found CPU time eBPF missed less than blindHold ago (or after now:
// the clock went back, and reading is always safe).
func (r *cpuRead) blind(now time.Time) bool {
	return !r.blindAt.IsZero() && (now.Before(r.blindAt) || now.Sub(r.blindAt) < blindHold)
}

// cpuReadDue reports whether a container's CPU files must be read at now,
// given their last read and the container's activity: always without eBPF
// scheduler figures (activity.known), when it may have run since (activity.ranSince), when a
// boundary of refresh's grid (Config.IdleRefresh, default refreshInterval;
// tick.Crossed) passed since last (a safety net: a blind spot of eBPF is
// found within refresh; every container's net falls in the same pass) or
// the clock went back, and while the container is blind
// (eBPF missed its CPU time less than blindHold ago). Otherwise the
// container has not run: cpu.stat cannot have moved (usage, and
// throttling, which counts periods in which it was runnable).
func cpuReadDue(last cpuRead, now time.Time, a activity, refresh time.Duration) bool {
	return !last.valid || last.blind(now) || a.ranSince(last.activity) || !now.After(last.at) || tick.Crossed(last.at, now, refresh)
}

// cpuRepeatsUntil is when cpuReadDue, false at some now after last's
// read, may turn true again for the same activity: at the next boundary of
// refresh's grid (tick.Crossed). Its other terms cannot turn true at a
// later now: a container not blind at now is not blind later, and
// activity and last do not change.
func cpuRepeatsUntil(last cpuRead, refresh time.Duration) time.Time {
	return tick.Next(last.at, refresh)
}

// repeat sets st's CPU figures to the last read's.
func (r *cpuRead) repeat(st *slacklinev1.ResourceStatistics) {
	st.CpusUsageSecs, st.CpusUserTimeSecs, st.CpusSystemTimeSecs = r.usage, r.user, r.system
	st.CpusThrottledTimeSecs, st.CpusNrPeriods, st.CpusNrThrottled = r.throttled, r.periods, r.nrThrottled
}

// record notes a read that found st at now with activity a. A read that
// eBPF said was not needed (the refresh, or any read while blind) and
// found CPU time changed makes the container blind from now on for
// blindHold.
func (r *cpuRead) record(st *slacklinev1.ResourceStatistics, now time.Time, a activity) {
	blindAt := r.blindAt
	if r.valid && !a.ranSince(r.activity) && st.CpusUsageSecs != r.usage {
		blindAt = now
	}
	*r = cpuRead{valid: true, at: now, activity: a, blindAt: blindAt,
		usage: st.CpusUsageSecs, user: st.CpusUserTimeSecs, system: st.CpusSystemTimeSecs,
		throttled: st.CpusThrottledTimeSecs, periods: st.CpusNrPeriods, nrThrottled: st.CpusNrThrottled}
}

// v2CPU reads CPU time and CFS throttling from a pure v2 cgroup's
// cpu.stat (microseconds).
type v2CPU struct {
	unified string // the cgroup's directory: the witness of its existence
	stat    controlFile
	last    cpuRead
	refresh time.Duration // the safety net's cadence (host.idleRefreshInterval)
}

func newV2CPU(h *host, rel string) sampler {
	dir := h.layout.PathsOf(rel).Unified
	return &v2CPU{unified: dir, stat: controlFileIn(dir, "cpu.stat"), refresh: h.idleRefreshInterval()}
}

func (c *v2CPU) files() []*controlFile { return []*controlFile{&c.stat} }

func (c *v2CPU) sample(s *scratch, _ *Target, u *Usage) error {
	if !cpuReadDue(c.last, u.Time, s.activity, c.refresh) {
		c.last.repeat(u.Stats)
		return nil
	}
	data, err := s.read(&c.stat, c.unified)
	if err != nil {
		c.last.valid = false
		return err
	}
	parseCPUStat(data, u.Stats)
	c.last.record(u.Stats, u.Time, s.activity)
	return nil
}

// repeats implements repeater.
func (c *v2CPU) repeats(now time.Time, _ *Usage, a activity) bool {
	return !cpuReadDue(c.last, now, a, c.refresh)
}

// repeatsUntil implements repeater: the safety net's next boundary.
func (c *v2CPU) repeatsUntil(time.Time, *Usage, activity) time.Time {
	return cpuRepeatsUntil(c.last, c.refresh)
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
	last         cpuRead
	refresh      time.Duration // the safety net's cadence (host.idleRefreshInterval)
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
		refresh:      h.idleRefreshInterval(),
	}
}

func (c *hybridCPU) files() []*controlFile {
	return []*controlFile{&c.coreStat, &c.cpuacctUsage, &c.cpuacctStat, &c.v1Stat}
}

func (c *hybridCPU) sample(s *scratch, _ *Target, u *Usage) error {
	st := u.Stats
	if !cpuReadDue(c.last, u.Time, s.activity, c.refresh) {
		c.last.repeat(st)
		return nil
	}
	if err := c.read(s, st); err != nil {
		c.last.valid = false
		return err
	}
	c.last.record(st, u.Time, s.activity)
	return nil
}

// repeats implements repeater.
func (c *hybridCPU) repeats(now time.Time, _ *Usage, a activity) bool {
	return !cpuReadDue(c.last, now, a, c.refresh)
}

// repeatsUntil implements repeater: the safety net's next boundary.
func (c *hybridCPU) repeatsUntil(time.Time, *Usage, activity) time.Time {
	return cpuRepeatsUntil(c.last, c.refresh)
}

// read reads the CPU files into st.
func (c *hybridCPU) read(s *scratch, st *slacklinev1.ResourceStatistics) error {
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
