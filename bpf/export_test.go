package bpf

// WithWakeupHooks returns cfg set to load the scheduler's wakeup variant
// (sched_wakeup, sched_wakeup_new and sched_switch_wakeups, for kernels
// without sched_info) whatever the kernel has, so that tests cover it.
func WithWakeupHooks(cfg Config) Config {
	cfg.wakeupHooks = true
	return cfg
}

// DetachSchedSwitch detaches the sched_switch program until reattach is
// called (calling it again does nothing), so that the context switches
// meanwhile go unseen, as the kernel leaves some unseen (sched.c: "Missed
// switches"): the CPUs' states then describe the tasks that got them before.
func DetachSchedSwitch(m *Monitor) (reattach func() error, err error) {
	prog := m.programs["tp_btf/sched_switch"]
	if prog == nil {
		return nil, ErrUnavailable
	}
	info, err := prog.Info()
	if err != nil {
		return nil, err
	}
	id, _ := info.ID()
	for i, l := range m.links {
		li, err := l.Info()
		if err != nil {
			return nil, err
		}
		if li.Program != id {
			continue
		}
		if err := l.Close(); err != nil {
			return nil, err
		}
		attached := false
		return func() error {
			if attached {
				return nil
			}
			l, err := tracing(prog)
			if err != nil {
				return err
			}
			m.links[i], attached = l, true
			return nil
		}, nil
	}
	return nil, ErrUnavailable
}

// DetachAll detaches every program until reattach attaches them again
// (calling it again does nothing): the benchmarks alternate with and
// without the monitor without loading it again.
func DetachAll(m *Monitor) (reattach func() error, err error) {
	for _, l := range m.links {
		if err := l.Close(); err != nil {
			return nil, err
		}
	}
	attached := false
	return func() error {
		if attached {
			return nil
		}
		for i, p := range m.attached {
			l, err := p.attach(p.prog)
			if err != nil {
				return err
			}
			m.links[i] = l
		}
		attached = true
		return nil
	}, nil
}

// ChangedFlag is the flag of the changed marks a cgroup's counters set.
func ChangedFlag(cgroupID uint64) int { return changedFlag(cgroupID) }
