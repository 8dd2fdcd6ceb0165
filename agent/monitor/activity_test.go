package monitor

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
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
		{"blind", cpuRead{valid: true, at: t0, activity: idle, blindAt: t0}, t0.Add(100 * time.Millisecond), idle, true},
		{"blind, just under the hold", cpuRead{valid: true, at: t0.Add(blindHold - 2*time.Millisecond), activity: idle, blindAt: t0},
			t0.Add(blindHold - time.Nanosecond), idle, true},
		{"blind mark expired", cpuRead{valid: true, at: t0.Add(blindHold), activity: idle, blindAt: t0},
			t0.Add(blindHold + 100*time.Millisecond), idle, false},
		{"idle since a read between boundaries, before the next", cpuRead{valid: true, at: t0.Add(300 * time.Millisecond), activity: idle},
			t0.Add(refreshInterval - time.Nanosecond), idle, false},
		{"idle since a read between boundaries, at the next", cpuRead{valid: true, at: t0.Add(300 * time.Millisecond), activity: idle},
			t0.Add(refreshInterval), idle, true},
		{"blind mark after now (clock went back)", cpuRead{valid: true, at: t0.Add(-time.Second), activity: idle, blindAt: t0},
			t0.Add(-500 * time.Millisecond), idle, true},
	} {
		if got := cpuReadDue(tc.last, tc.now, tc.a, refreshInterval); got != tc.want {
			t.Errorf("%s: cpuReadDue = %v, want %v", tc.name, got, tc.want)
		}
	}
	// A longer safety net (Config.IdleRefresh) only spaces the idle
	// container's reads: blind, running or unseen containers are read.
	const slow = 5 * time.Second
	for _, tc := range []struct {
		name string
		last cpuRead
		now  time.Time
		a    activity
		want bool
	}{
		{"idle, past refreshInterval, under the idle refresh", read, t0.Add(slow - time.Nanosecond), idle, false},
		{"idle, idle refresh due", read, t0.Add(slow), idle, true},
		{"no eBPF figures", read, t0.Add(100 * time.Millisecond), activity{}, true},
		{"running", read, t0.Add(100 * time.Millisecond), with(func(a *activity) { a.running = true }), true},
		{"blind", cpuRead{valid: true, at: t0, activity: idle, blindAt: t0}, t0.Add(100 * time.Millisecond), idle, true},
	} {
		if got := cpuReadDue(tc.last, tc.now, tc.a, slow); got != tc.want {
			t.Errorf("refresh %v, %s: cpuReadDue = %v, want %v", slow, tc.name, got, tc.want)
		}
	}
}

// TestCPUReadOnlyWhenRan: with eBPF figures, a container's cpu.stat is read
// when eBPF says it may have run since the last read, repeated otherwise,
// re-read once a second regardless, and read at every pass once such a
// refresh found CPU time eBPF had not seen, for as long as reads keep
// finding such time (the mark's expiry: TestCPUReadBlindExpires). Each pass's file says a
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
	st := EBPFStats{Sched: true}
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
		{999 * time.Millisecond, nil, false, 8},
		{1000 * time.Millisecond, nil, false, 11}, // the grid's second since pass 8's read: it finds CPU time eBPF missed
		{1100 * time.Millisecond, nil, false, 12}, // blind from then on
		{1200 * time.Millisecond, nil, false, 13},
		{1000*time.Millisecond + blindHold, nil, false, 14}, // still blind: every read since found unseen CPU time (renewed)
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

// TestCPUReadBlindExpires: a sequence of reads (logical time) of one
// container: a refresh that finds CPU time eBPF did not see (a run between
// eBPF's read and the file's) makes it blind; reads that agree with eBPF
// do not renew the mark, which expires blindHold after the last
// disagreement; a disagreement while blind (a real blind spot: tasks in a
// child cgroup) renews it.
func TestCPUReadBlindExpires(t *testing.T) {
	t.Parallel()
	idle := activity{known: true, onCPU: time.Second, wakeups: 10}
	ran := activity{known: true, onCPU: 2 * time.Second, wakeups: 11}
	var r cpuRead
	usage := 1.0
	for i, step := range []struct {
		at        time.Duration
		a         activity
		grew      bool // cpu.stat's usage grew before the step
		due       bool // cpuReadDue before the read
		wantBlind bool // blind just after the step's read (if due)
	}{
		{0, idle, false, true, false}, // first read
		{100 * time.Millisecond, idle, false, false, false},
		{time.Second, idle, true, true, true},                                          // refresh: usage grew, eBPF saw nothing (the window race)
		{1100 * time.Millisecond, idle, false, true, true},                             // blind: read, agrees
		{1200 * time.Millisecond, ran, true, true, true},                               // ran, eBPF saw it: agrees
		{time.Second + blindHold - 100*time.Millisecond, ran, false, true, true},       // last read within the hold
		{time.Second + blindHold, ran, false, true, false},                             // hold over, and the grid's refresh: read, agrees
		{time.Second + blindHold + 100*time.Millisecond, ran, false, false, false},     // repeated
		{2*time.Second + blindHold - 100*time.Millisecond, ran, false, false, false},   // idle, refresh not due yet
		{2*time.Second + blindHold, ran, true, true, true},                             // refresh finds unseen CPU time: blind again
		{2*time.Second + blindHold + 100*time.Millisecond, ran, true, true, true},      // disagrees again (child cgroup): renewed
		{2*time.Second + 2*blindHold + 99*time.Millisecond, ran, false, true, true},    // past the first mark's hold, within the renewed one
		{2*time.Second + 2*blindHold + 100*time.Millisecond, ran, false, false, false}, // renewed hold over, the grid's second read at the step before
		{3*time.Second + 2*blindHold - time.Millisecond, ran, false, false, false},     // idle, refresh not due yet
		{3*time.Second + 2*blindHold, ran, false, true, false},                         // refresh agrees: not blind
	} {
		now := t0.Add(step.at)
		if step.grew {
			usage += 0.001
		}
		if got := cpuReadDue(r, now, step.a, refreshInterval); got != step.due {
			t.Fatalf("step %d at %v: cpuReadDue = %v, want %v", i, step.at, got, step.due)
		}
		if step.due {
			r.record(&slacklinev1.ResourceStatistics{CpusUsageSecs: usage}, now, step.a)
		}
		if got := r.blind(now); got != step.wantBlind {
			t.Errorf("step %d at %v: blind = %v, want %v", i, step.at, got, step.wantBlind)
		}
	}
}

// TestCPUReadWithoutSchedFigures: eBPF figures whose scheduler part is not
// measured (EBPFStats.Sched false: sched_switch not attached, OnCPU and the
// rest constant zeros) say nothing of whether the container ran: cpu.stat
// is read at every pass, and never marks it blind.
func TestCPUReadWithoutSchedFigures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ebpf := &fakeEBPF{}
	m := newTestMonitor(t, "v2", dir, ebpf, 100)
	root := filepath.Join(dir, "cgroup")
	rel := "slackline/c1"
	v2Container(t, root, rel, 0)
	m.SetTargets([]Target{{ID: "c1", CgroupPath: rel, CgroupID: 1}})
	ebpf.set(1, EBPFStats{NetRxBytes: 1}) // other eBPF figures, scheduler's unmeasured
	for i, at := range []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 900 * time.Millisecond,
		time.Second, 1100 * time.Millisecond, 1200 * time.Millisecond} {
		writeFiles(t, root, map[string]string{rel + "/cpu.stat": fmt.Sprintf("usage_usec %d\n", 1000*(i+1))})
		m.Sample(t0.Add(at))
		u, _ := m.Latest("c1")
		if got, want := u.Stats.GetCpusUsageSecs(), float64(1000*(i+1))/1e6; got != want {
			t.Errorf("pass %d at %v: cpu %v s, want %v (read every pass)", i, at, got, want)
		}
		if !u.EBPF {
			t.Errorf("pass %d: no eBPF figures merged", i)
		}
	}
}
