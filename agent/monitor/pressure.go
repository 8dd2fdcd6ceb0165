package monitor

import (
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/tick"
)

// pressureSampler reads a container's PSI files from the v2 tree (in both
// layouts): cpu.pressure, memory.pressure and io.pressure. A kernel
// without PSI, or a cgroup without one of the files, leaves that pressure
// unset.
type pressureSampler struct {
	unified         string
	cpu, memory, io controlFile
	last            pressureRead // repeated while psiReadDue says so
}

func newPressureSampler(h *host, rel string) sampler {
	dir := h.layout.PathsOf(rel).Unified
	return &pressureSampler{unified: dir, cpu: controlFileIn(dir, "cpu.pressure"),
		memory: controlFileIn(dir, "memory.pressure"), io: controlFileIn(dir, "io.pressure")}
}

func (p *pressureSampler) files() []*controlFile { return []*controlFile{&p.cpu, &p.memory, &p.io} }

func (p *pressureSampler) sample(s *scratch, _ *Target, u *Usage) error {
	st := u.Stats
	// The last read is repeated while psiReadDue says so. Its messages are
	// never modified, so successive samples may share them.
	if l := p.last; !psiReadDue(l, u.Time, st.CpusUsageSecs, s.activity) {
		st.CpuPressure, st.MemoryPressure, st.IoPressure = l.cpu, l.memory, l.io
		return nil
	}
	prev := p.last
	p.last.valid = false
	var err error
	if st.CpuPressure, err = p.read(s, &p.cpu); err != nil {
		return err
	}
	if st.MemoryPressure, err = p.read(s, &p.memory); err != nil {
		return err
	}
	if st.IoPressure, err = p.read(s, &p.io); err != nil {
		return err
	}
	p.last = pressureRead{valid: true, at: u.Time, cpuSecs: st.CpusUsageSecs, activity: s.activity,
		cpu: st.CpuPressure, memory: st.MemoryPressure, io: st.IoPressure}
	p.last.grew = !prev.valid || p.last.totals() != prev.totals()
	return nil
}

// repeats implements repeater.
func (p *pressureSampler) repeats(now time.Time, prev *Usage, a activity) bool {
	return !psiReadDue(p.last, now, prev.Stats.CpusUsageSecs, a)
}

// repeatsUntil implements repeater: psiReadDue, false at now, stays false
// until the next boundary of the grid it last crossed: refreshInterval's
// when now has not crossed it since the last read, else (the container
// neither ran nor had pressure: what psiReadDue then asks cannot change)
// statRefreshInterval's.
func (p *pressureSampler) repeatsUntil(now time.Time, _ *Usage, _ activity) time.Time {
	if !tick.Crossed(p.last.at, now, refreshInterval) {
		return tick.Next(p.last.at, refreshInterval)
	}
	return tick.Next(p.last.at, statRefreshInterval)
}

// pressureRead is what one read of the PSI files found.
type pressureRead struct {
	valid           bool
	at              time.Time
	cpuSecs         float64  // the container's cpus_usage_secs then
	activity        activity // eBPF's figures of the container then
	cpu, memory, io *slacklinev1.Pressure
	// grew is set when a stall total (some or full, of any file) differs
	// from the read before, or there was none: a task of the container
	// may still be stalled.
	grew bool
}

// stallTotals are a read's cumulative stall times (some and full totals
// of cpu, memory and io; 0 for a file the cgroup lacks).
type stallTotals [6]float64

// totals returns the read's stall totals.
func (r *pressureRead) totals() stallTotals {
	var t stallTotals
	for i, p := range []*slacklinev1.Pressure{r.cpu, r.memory, r.io} {
		t[2*i], t[2*i+1] = p.GetSomeTotalSecs(), p.GetFullTotalSecs()
	}
	return t
}

// quiet reports whether the read found no recent pressure: every 10 s
// average (some and full, of every file) is 0; a file the cgroup lacks
// counts as quiet. The 60 s and 300 s averages are not asked: they take
// minutes to decay to 0 after a container's start, and repeated for 5 s
// they are off by at most 1 - exp(-5/60) = 8% of their value, less than
// the 10 s average repeated for the 1 s between reads (1 - exp(-1/10) =
// 10%).
func (r *pressureRead) quiet() bool {
	for _, p := range []*slacklinev1.Pressure{r.cpu, r.memory, r.io} {
		if p.GetSomeAvg10() != 0 || p.GetFullAvg10() != 0 {
			return false
		}
	}
	return true
}

// psiReadDue reports whether a container's PSI files must be read at now,
// given their last read, the container's CPU time now (cpus_usage_secs,
// read just before by the CPU sampler) and what eBPF says of it in this
// pass (activity; unknown without eBPF scheduler figures). They are read
// at the first sample, when the clock went back, and every
// statRefreshInterval (5 s) at least; never sooner than refreshInterval
// (1 s) after the last read (the kernel moves the averages every 2 s);
// and in between only when the container may have run since (its CPU time
// moved, or eBPF counted a run, a wakeup or a wait for a CPU: its stall
// totals may have grown), the last read's 10 s averages were not all 0
// (they decay every 2 s even when nothing else moves; see quiet), or the
// last read found a stall total grown since the read before (grew: a task
// may still be stalled). A stall begins with a task of the container
// running (it blocks on I/O or enters reclaim) or being woken (it waits
// for a CPU), which eBPF counts, and a stall that goes on keeps its totals
// growing from read to read: so a container's stall shows within
// refreshInterval plus a pass of its start (without eBPF, a task starved
// of CPU from its wakeup on within statRefreshInterval), and reads stay
// every second while it lasts. An idle container without recent pressure
// is read every 5 s instead of every second (#29), whatever other
// containers' stalls do to the node's totals (which an earlier rule
// followed: on a busy node every idle container was read every second).
func psiReadDue(last pressureRead, now time.Time, cpuSecs float64, a activity) bool {
	if !last.valid || !now.After(last.at) {
		return true
	}
	switch {
	case !tick.Crossed(last.at, now, refreshInterval):
		return false
	case tick.Crossed(last.at, now, statRefreshInterval):
		return true
	}
	ran := cpuSecs != last.cpuSecs || a.known && last.activity.known && a.ranSince(last.activity)
	return ran || !last.quiet() || last.grew
}

// read returns the pressure in f, nil if the cgroup has no such file.
func (p *pressureSampler) read(s *scratch, f *controlFile) (*slacklinev1.Pressure, error) {
	data, err := s.read(f, p.unified)
	if err != nil || data == nil {
		return nil, err
	}
	return pressure(parsePressure(data)), nil
}

func pressure(some, full psiLine) *slacklinev1.Pressure {
	return &slacklinev1.Pressure{
		SomeAvg10: some.avg10, SomeAvg60: some.avg60, SomeAvg300: some.avg300, SomeTotalSecs: float64(some.totalUsec) / 1e6,
		FullAvg10: full.avg10, FullAvg60: full.avg60, FullAvg300: full.avg300, FullTotalSecs: float64(full.totalUsec) / 1e6,
	}
}
