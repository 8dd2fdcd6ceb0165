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
	last            pressureRead // repeated for refreshInterval
}

func newPressureSampler(h *host, rel string) sampler {
	dir := h.layout.PathsOf(rel).Unified
	return &pressureSampler{unified: dir, cpu: controlFileIn(dir, "cpu.pressure"),
		memory: controlFileIn(dir, "memory.pressure"), io: controlFileIn(dir, "io.pressure")}
}

func (p *pressureSampler) files() []*controlFile { return []*controlFile{&p.cpu, &p.memory, &p.io} }

func (p *pressureSampler) sample(s *scratch, _ *Target, u *Usage) error {
	st := u.Stats
	// The averages move every 2 s (the kernel's PSI period): the last read
	// is repeated for refreshInterval. Its messages are never modified, so
	// successive samples may share them.
	if l := p.last; l.valid && u.Time.After(l.at) && u.Time.Sub(l.at) < refreshInterval {
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
	p.last = pressureRead{valid: true, at: u.Time, cpu: st.CpuPressure, memory: st.MemoryPressure, io: st.IoPressure}
	return nil
}

// pressureRead is what one read of the PSI files found.
type pressureRead struct {
	valid           bool
	at              time.Time
	cpu, memory, io *slacklinev1.Pressure
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
