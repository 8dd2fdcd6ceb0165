package monitor

import (
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
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
	if l := p.last; !psiReadDue(l, u.Time, st.CpusUsageSecs, s.nodeStall) {
		st.CpuPressure, st.MemoryPressure, st.IoPressure = l.cpu, l.memory, l.io
		return nil
	}
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
	p.last = pressureRead{valid: true, at: u.Time, cpuSecs: st.CpusUsageSecs, nodeStall: s.nodeStall,
		cpu: st.CpuPressure, memory: st.MemoryPressure, io: st.IoPressure}
	return nil
}

// pressureRead is what one read of the PSI files found.
type pressureRead struct {
	valid           bool
	at              time.Time
	cpuSecs         float64     // the container's cpus_usage_secs then
	nodeStall       stallTotals // the node's stall totals then
	cpu, memory, io *slacklinev1.Pressure
}

// stallTotals are the node's cumulative I/O and memory stall times (PSI
// "some" totals of /proc/pressure/io and /proc/pressure/memory, in
// seconds; a "full" stall counts in "some" too). They move whenever any
// task on the node is stalled on I/O or memory, running or not.
type stallTotals struct{ io, memory float64 }

// update returns t with the totals of a node sample; a pressure the
// sample lacks (a kernel without PSI, a failed read) keeps its last value,
// so that it does not read as a move.
func (t stallTotals) update(node *slacklinev1.ResourceStatistics) stallTotals {
	if p := node.GetIoPressure(); p != nil {
		t.io = p.GetSomeTotalSecs()
	}
	if p := node.GetMemoryPressure(); p != nil {
		t.memory = p.GetSomeTotalSecs()
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
// read just before by the CPU sampler) and the node's stall totals as of
// its last sample. They are read at the first sample, when the clock went
// back, and every statRefreshInterval (5 s) at least; never sooner than
// refreshInterval (1 s) after the last read (the kernel moves the averages
// every 2 s); and in between only when the container ran since (its CPU
// time moved: its stall totals may have grown), the last read's 10 s
// averages were not all 0 (they decay every 2 s even when nothing else
// moves; see quiet), or the node's I/O or memory stall total moved since
// the last read. An idle container without recent pressure on a node
// without I/O or memory stalls is read every 5 s instead of every second
// (#29). A task blocked on I/O or reclaim uses no CPU: the node's totals,
// read at every node sample, are what show that such a stall may be the
// container's, so it shows within refreshInterval (plus a pass) of the
// node sample that saw it rather than within statRefreshInterval. A task
// starved of CPU for seconds shows within statRefreshInterval.
func psiReadDue(last pressureRead, now time.Time, cpuSecs float64, nodeStall stallTotals) bool {
	if !last.valid || !now.After(last.at) {
		return true
	}
	age := now.Sub(last.at)
	switch {
	case age < refreshInterval:
		return false
	case age >= statRefreshInterval:
		return true
	}
	return cpuSecs != last.cpuSecs || !last.quiet() || nodeStall != last.nodeStall
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
