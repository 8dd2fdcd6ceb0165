package monitor

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

func TestCPUReadDue(t *testing.T) {
	t.Parallel()
	idle := activity{known: true, onCPU: time.Second, wakeups: 10, runqSum: time.Millisecond}
	read := cpuRead{valid: true, at: t0, activity: idle}
	with := func(f func(*activity)) activity {
		a := idle
		f(&a)
		return a
	}
	for _, tc := range []struct {
		name string
		last cpuRead
		now  time.Time
		a    activity
		want bool
	}{
		{"never read", cpuRead{}, t0, idle, true},
		{"no eBPF figures now", read, t0.Add(100 * time.Millisecond), activity{}, true},
		{"no eBPF figures at the last read", cpuRead{valid: true, at: t0}, t0.Add(100 * time.Millisecond), idle, true},
		{"idle since", read, t0.Add(100 * time.Millisecond), idle, false},
		{"idle since, just under the refresh", read, t0.Add(refreshInterval - time.Nanosecond), idle, false},
		{"idle since, refresh due", read, t0.Add(refreshInterval), idle, true},
		{"running now", read, t0.Add(100 * time.Millisecond), with(func(a *activity) { a.running = true }), true},
		{"a run ended since", read, t0.Add(100 * time.Millisecond), with(func(a *activity) { a.onCPU += time.Microsecond }), true},
		{"slept since", read, t0.Add(100 * time.Millisecond), with(func(a *activity) { a.wakeups++ }), true},
		{"waited for a CPU since", read, t0.Add(100 * time.Millisecond), with(func(a *activity) { a.runqSum++ }), true},
		{"eBPF entry recreated (counters back)", read, t0.Add(100 * time.Millisecond), with(func(a *activity) { a.onCPU = 0 }), true},
		{"clock went back", read, t0.Add(-time.Millisecond), idle, true},
		{"same time", read, t0, idle, true},
		{"blind", cpuRead{valid: true, at: t0, activity: idle, blind: true}, t0.Add(100 * time.Millisecond), idle, true},
	} {
		if got := cpuReadDue(tc.last, tc.now, tc.a); got != tc.want {
			t.Errorf("%s: cpuReadDue = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCPUReadOnlyWhenRan: with eBPF figures, a container's cpu.stat is read
// when eBPF says it may have run since the last read, repeated otherwise,
// re-read once a second regardless, and read at every pass once such a
// refresh found CPU time eBPF had not seen. Each pass's file says a
// different usage: what a pass shows tells which pass last read it.
func TestCPUReadOnlyWhenRan(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ebpf := &fakeEBPF{}
	m := newTestMonitor(t, "v2", dir, ebpf, 100)
	root := filepath.Join(dir, "cgroup")
	rel := "slackline/c1"
	v2Container(t, root, rel, 0)
	m.SetTargets([]Target{{ID: "c1", CgroupPath: rel, CgroupID: 1}})
	var st EBPFStats
	for i, step := range []struct {
		at      time.Duration
		change  func(*EBPFStats) // what eBPF saw before the pass; nil: nothing
		missing bool             // the eBPF lookup fails
		read    int              // the pass whose cpu.stat it shows
	}{
		{0, nil, false, 0}, // first pass
		{100 * time.Millisecond, nil, false, 0},
		{200 * time.Millisecond, func(s *EBPFStats) { s.OnCPU += time.Millisecond }, false, 2},
		{300 * time.Millisecond, func(s *EBPFStats) { s.Running = true }, false, 3},
		{400 * time.Millisecond, func(s *EBPFStats) { s.Running = false }, false, 3}, // nothing moved since pass 3
		{500 * time.Millisecond, func(s *EBPFStats) { s.Wakeups++ }, false, 5},
		{600 * time.Millisecond, func(s *EBPFStats) { s.RunqSum += time.Microsecond }, false, 6},
		{700 * time.Millisecond, nil, true, 7},  // no eBPF figures: read
		{800 * time.Millisecond, nil, false, 8}, // figures again, but none at the last read: read
		{900 * time.Millisecond, nil, false, 8},
		{1799 * time.Millisecond, nil, false, 8},
		{1800 * time.Millisecond, nil, false, 11}, // a second since pass 8's read: it finds CPU time eBPF missed
		{1900 * time.Millisecond, nil, false, 12}, // blind from then on
		{2000 * time.Millisecond, nil, false, 13},
	} {
		if step.change != nil {
			step.change(&st)
		}
		ebpf.mu.Lock()
		if step.missing {
			delete(ebpf.stats, 1)
		} else {
			if ebpf.stats == nil {
				ebpf.stats = map[uint64]EBPFStats{}
			}
			ebpf.stats[1] = st
		}
		ebpf.mu.Unlock()
		writeFiles(t, root, map[string]string{rel + "/cpu.stat": fmt.Sprintf("usage_usec %d\nnr_periods %d\n", 1000*(i+1), i)})
		m.Sample(t0.Add(step.at))
		u, _ := m.Latest("c1")
		want := float64(1000*(step.read+1)) / 1e6
		if got := u.Stats.GetCpusUsageSecs(); got != want || u.Stats.GetCpusNrPeriods() != uint64(step.read) {
			t.Errorf("pass %d at %v: cpu %v s, %d periods; want pass %d's %v s", i, step.at, got, u.Stats.GetCpusNrPeriods(), step.read, want)
		}
	}
}
