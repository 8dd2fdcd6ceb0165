package monitor

import slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"

// pressureSampler reads a container's PSI files from the v2 tree (in both
// layouts): cpu.pressure, memory.pressure and io.pressure. A kernel
// without PSI, or a cgroup without one of the files, leaves that pressure
// unset.
type pressureSampler struct {
	unified         string
	cpu, memory, io controlFile
}

func newPressureSampler(h *host, rel string) sampler {
	dir := h.layout.PathsOf(rel).Unified
	return &pressureSampler{unified: dir, cpu: controlFileIn(dir, "cpu.pressure"),
		memory: controlFileIn(dir, "memory.pressure"), io: controlFileIn(dir, "io.pressure")}
}

func (p *pressureSampler) files() []*controlFile { return []*controlFile{&p.cpu, &p.memory, &p.io} }

func (p *pressureSampler) sample(s *scratch, _ *Target, u *Usage) error {
	st := u.Stats
	var err error
	if st.CpuPressure, err = p.read(s, &p.cpu); err != nil {
		return err
	}
	if st.MemoryPressure, err = p.read(s, &p.memory); err != nil {
		return err
	}
	st.IoPressure, err = p.read(s, &p.io)
	return err
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
