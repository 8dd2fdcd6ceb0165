package monitor

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestSlowFiguresRefresh: a container that has not run since its memory
// files were read has them repeated, not re-read, until the next boundary
// of refreshInterval's grid (tick.Crossed; t0 is on it); one that ran has
// them re-read at once. PSI files (under pressure here) are re-read at
// every boundary whatever the container did. CPU is read every pass.
func TestSlowFiguresRefresh(t *testing.T) {
	t.Parallel()
	m, _, root, rel := monitoredV2Container(t)
	usage := uint64(1_000_000)
	// Before pass i the memory files say 1000+i bytes and the PSI files
	// avg10 i: what a pass shows tells which pass last read them.
	for i, step := range []struct {
		at               time.Duration
		ran              bool // the container's CPU time grows before the pass
		memRead, psiRead int  // the pass whose files it shows
	}{
		{0, false, 0, 0},                        // first pass: everything read
		{100 * time.Millisecond, false, 0, 0},   // idle, within the interval: repeated
		{200 * time.Millisecond, true, 2, 0},    // ran: memory re-read, PSI repeated
		{900 * time.Millisecond, false, 2, 0},   // idle again: repeated
		{1000 * time.Millisecond, false, 4, 4},  // the grid's second: memory (read at 200 ms) and PSI re-read
		{1100 * time.Millisecond, false, 4, 4},  // idle
		{1200 * time.Millisecond, false, 4, 4},  // a second after memory's read at 200 ms, not at the grid's: repeated
		{1999 * time.Millisecond, false, 4, 4},  // idle
		{2000 * time.Millisecond, false, 8, 8},  // the grid's second
		{2100 * time.Millisecond, true, 9, 8},   // ran
		{2050 * time.Millisecond, false, 10, 8}, // before memory's last read (2100): re-read; after PSI's (2000): repeated
		{5 * time.Second, false, 11, 11},        // long gap
	} {
		if step.ran {
			usage += 50_000
		}
		writeFiles(t, root, map[string]string{
			rel + "/cpu.stat":       fmt.Sprintf("usage_usec %d\n", usage),
			rel + "/memory.current": fmt.Sprintf("%d\n", 1000+i),
			rel + "/cpu.pressure":   psi(float64(i), 0, 0, 0),
		})
		if err := m.Sample(t0.Add(step.at)); err != nil {
			t.Fatal(err)
		}
		u, _ := m.Latest("c1")
		if got, want := u.MemUsage, uint64(1000+step.memRead); got != want {
			t.Errorf("pass %d at %v: memory %d, want %d (read at pass %d)", i, step.at, got, want, step.memRead)
		}
		if got, want := u.Stats.GetCpuPressure().GetSomeAvg10(), float64(step.psiRead); got != want {
			t.Errorf("pass %d at %v: cpu PSI %v, want %v (read at pass %d)", i, step.at, got, want, step.psiRead)
		}
		if got := u.Stats.GetCpusUsageSecs(); got != float64(usage)/1e6 {
			t.Errorf("pass %d: cpu %v s, want %v (read every pass)", i, got, float64(usage)/1e6)
		}
	}
}

// TestPSIReadDue: the PSI files are read at most every refreshInterval,
// at least every statRefreshInterval, and in between only when the
// container may have run since the last read (its CPU time moved, or eBPF
// counted a run, a wakeup or a wait), that read found pressure, or it
// found a stall total grown since the read before. The node's stalls do
// not count.
func TestPSIReadDue(t *testing.T) {
	t.Parallel()
	quiet := &slacklinev1.Pressure{SomeTotalSecs: 3, FullTotalSecs: 1} // totals, but no recent pressure
	idle := activity{known: true, onCPU: time.Second, wakeups: 7, runqSum: time.Millisecond}
	read := pressureRead{valid: true, at: t0, cpuSecs: 10, activity: idle, cpu: quiet, memory: quiet, io: quiet}
	with := func(f func(*pressureRead)) pressureRead {
		r := read
		f(&r)
		return r
	}
	moved := func(f func(*activity)) activity {
		a := idle
		f(&a)
		return a
	}
	for _, tc := range []struct {
		name    string
		last    pressureRead
		now     time.Time
		cpuSecs float64
		a       activity // eBPF's figures now
		want    bool
	}{
		{"never read", pressureRead{}, t0, 10, idle, true},
		{"clock went back", read, t0.Add(-time.Millisecond), 10, idle, true},
		{"same time", read, t0, 10, idle, true},
		{"ran, under refreshInterval", read, t0.Add(refreshInterval - time.Nanosecond), 11, idle, false},
		{"idle and quiet at refreshInterval", read, t0.Add(refreshInterval), 10, idle, false},
		{"idle and quiet, just under statRefreshInterval", read, t0.Add(statRefreshInterval - time.Nanosecond), 10, idle, false},
		{"idle and quiet at statRefreshInterval", read, t0.Add(statRefreshInterval), 10, idle, true},
		{"ran, at refreshInterval", read, t0.Add(refreshInterval), 10.001, idle, true},
		{"idle, files missing (nil pressures)", pressureRead{valid: true, at: t0, cpuSecs: 10, activity: idle}, t0.Add(2 * time.Second), 10, idle, false},
		{"idle, cpu some avg10", with(func(r *pressureRead) { r.cpu = &slacklinev1.Pressure{SomeAvg10: 0.01} }), t0.Add(refreshInterval), 10, idle, true},
		{"idle, memory full avg10", with(func(r *pressureRead) { r.memory = &slacklinev1.Pressure{FullAvg10: 0.01} }), t0.Add(refreshInterval), 10, idle, true},
		{"idle, only the slow averages (quiet)", with(func(r *pressureRead) {
			r.io = &slacklinev1.Pressure{SomeAvg60: 0.5, SomeAvg300: 0.2, FullAvg60: 0.1, FullAvg300: 0.05}
		}), t0.Add(refreshInterval), 10, idle, false},
		{"idle, io full avg10", with(func(r *pressureRead) { r.io = &slacklinev1.Pressure{FullAvg10: 0.01} }), t0.Add(refreshInterval), 10, idle, true},
		{"pressure, under refreshInterval", with(func(r *pressureRead) { r.cpu = &slacklinev1.Pressure{SomeAvg10: 5} }), t0.Add(500 * time.Millisecond), 11, idle, false},
		// A stall that began under 2 s ago has no 10 s average yet: its
		// totals growing between the last two reads bring the read back
		// to every refreshInterval.
		{"idle and quiet, totals grew at the last read", with(func(r *pressureRead) { r.grew = true }), t0.Add(refreshInterval), 10, idle, true},
		{"totals grew, under refreshInterval", with(func(r *pressureRead) { r.grew = true }), t0.Add(refreshInterval - time.Nanosecond), 10, idle, false},
		// eBPF saw the container wake or run though its CPU time (not
		// read, or under a microsecond) did not move.
		{"eBPF: a wakeup", read, t0.Add(refreshInterval), 10, moved(func(a *activity) { a.wakeups++ }), true},
		{"eBPF: a wait for a CPU", read, t0.Add(refreshInterval), 10, moved(func(a *activity) { a.runqSum += time.Microsecond }), true},
		{"eBPF: running", read, t0.Add(refreshInterval), 10, moved(func(a *activity) { a.running = true }), true},
		{"eBPF: a wakeup, under refreshInterval", read, t0.Add(refreshInterval - time.Nanosecond), 10, moved(func(a *activity) { a.wakeups++ }), false},
		// Without eBPF figures (now or at the last read) only the CPU
		// time tells a run.
		{"no eBPF, idle", with(func(r *pressureRead) { r.activity = activity{} }), t0.Add(refreshInterval), 10, activity{}, false},
		{"no eBPF now, idle", read, t0.Add(refreshInterval), 10, activity{}, false},
		{"no eBPF, ran", with(func(r *pressureRead) { r.activity = activity{} }), t0.Add(refreshInterval), 10.5, activity{}, true},
	} {
		if got := psiReadDue(tc.last, tc.now, tc.cpuSecs, tc.a); got != tc.want {
			t.Errorf("%s: psiReadDue = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestIdleQuietPSIRefresh: an idle container without pressure has its PSI
// files read every statRefreshInterval, not every refreshInterval; a run
// or pressure found brings back the read every refreshInterval.
func TestIdleQuietPSIRefresh(t *testing.T) {
	t.Parallel()
	m, _, root, rel := monitoredV2Container(t)
	usage := uint64(1_000_000)
	// Before pass i the PSI files say a 60 s average of i, with avg10 1
	// when pressure is set: what a pass shows tells which pass last read
	// them. Their totals do not move (no stall goes on).
	for i, step := range []struct {
		at       time.Duration
		ran      bool // the container's CPU time grows before the pass
		pressure bool // avg10 is 1 before the pass
		psiRead  int  // the pass whose PSI files it shows
	}{
		{0, false, false, 0},                       // first pass: read
		{1000 * time.Millisecond, false, false, 1}, // the first read had none before it to compare: read
		{2000 * time.Millisecond, false, false, 1}, // idle, quiet, totals unmoved: repeated
		{4900 * time.Millisecond, false, false, 1}, // still before statRefreshInterval's boundary (5 s)
		{5000 * time.Millisecond, false, true, 4},  // the boundary: read, finds pressure
		{6000 * time.Millisecond, false, false, 5}, // pressure at the last read: read every second
		{6500 * time.Millisecond, false, false, 5}, // before the next second: repeated
		{6900 * time.Millisecond, true, false, 5},  // ran, before the next second
		{7000 * time.Millisecond, false, false, 8}, // ran since the last read: read
		{8000 * time.Millisecond, false, false, 8}, // idle and quiet: repeated
		{9000 * time.Millisecond, true, false, 10}, // ran: read
	} {
		if step.ran {
			usage += 50_000
		}
		avg := 0.0
		if step.pressure {
			avg = 1
		}
		// The slow averages do not count as recent pressure.
		cpuPSI := fmt.Sprintf("some avg10=%.2f avg60=%d.00 avg300=0.20 total=7000000\nfull avg10=0.00 avg60=0.10 avg300=0.05 total=0\n", avg, i)
		writeFiles(t, root, map[string]string{
			rel + "/cpu.stat":        fmt.Sprintf("usage_usec %d\n", usage),
			rel + "/cpu.pressure":    cpuPSI,
			rel + "/memory.pressure": quietPSI,
			rel + "/io.pressure":     quietPSI,
		})
		if err := m.Sample(t0.Add(step.at)); err != nil {
			t.Fatal(err)
		}
		u, _ := m.Latest("c1")
		if got, want := u.Stats.GetCpuPressure().GetSomeAvg60(), float64(step.psiRead); got != want {
			t.Errorf("pass %d at %v: cpu PSI avg60 %v, want %v (read at pass %d)", i, step.at, got, want, step.psiRead)
		}
	}
}

// TestStalledPSIRefresh: an idle container whose stall totals grow (a
// task blocked on I/O uses no CPU) has its PSI files read every
// refreshInterval, before any 10 s average shows it, until a read finds
// them unmoved; the node's stall totals moving alone reads nothing.
func TestStalledPSIRefresh(t *testing.T) {
	t.Parallel()
	m, dir, _, rel := monitoredV2Container(t)
	usage := uint64(1_000_000)
	nodeIO, stall := uint64(9_000_000), uint64(0)
	// Before pass i the container's io.pressure says a 60 s average of i,
	// its 10 s average 0 (a stall that began under 2 s ago): what a pass
	// shows tells which pass last read the files.
	for i, step := range []struct {
		at      time.Duration
		ran     bool // the container's CPU time grows before the pass
		stalled bool // its io stall total grows before the pass
		node    bool // the node's io stall total grows before the pass
		psiRead int  // the pass whose PSI files it shows
	}{
		{0, false, false, false, 0},                         // first pass: read
		{1000 * time.Millisecond, false, false, false, 1},   // nothing before the first read to compare: read
		{2000 * time.Millisecond, false, false, true, 1},    // unmoved at the last read; the node's stall moved: repeated
		{3000 * time.Millisecond, false, false, true, 1},    // the same
		{4000 * time.Millisecond, true, true, true, 4},      // a task ran and blocked on I/O: read, finds the stall
		{5000 * time.Millisecond, false, true, false, 5},    // grown at the last read: read, grown again
		{5500 * time.Millisecond, false, true, false, 5},    // under refreshInterval: repeated
		{6000 * time.Millisecond, false, true, false, 7},    // grown at the last read: read
		{7000 * time.Millisecond, false, false, false, 8},   // grown at the last read: read, unmoved now
		{8000 * time.Millisecond, false, false, true, 8},    // unmoved at the last read: repeated
		{9900 * time.Millisecond, false, false, true, 8},    // still before statRefreshInterval's boundary (10 s)
		{10000 * time.Millisecond, false, false, false, 11}, // the boundary: read
	} {
		if step.ran {
			usage += 50_000
		}
		if step.stalled {
			stall += 300_000
		}
		if step.node {
			nodeIO += 1000
		}
		writeFiles(t, dir, map[string]string{
			"proc/pressure/io":                   psi(0.5, nodeIO, 0.1, nodeIO/2),
			"cgroup/" + rel + "/cpu.stat":        fmt.Sprintf("usage_usec %d\n", usage),
			"cgroup/" + rel + "/cpu.pressure":    quietPSI,
			"cgroup/" + rel + "/memory.pressure": quietPSI,
			"cgroup/" + rel + "/io.pressure":     fmt.Sprintf("some avg10=0.00 avg60=%d.00 avg300=0.00 total=%d\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", i, stall),
		})
		if err := m.Sample(t0.Add(step.at)); err != nil {
			t.Fatal(err)
		}
		u, _ := m.Latest("c1")
		if got, want := u.Stats.GetIoPressure().GetSomeAvg60(), float64(step.psiRead); got != want {
			t.Errorf("pass %d at %v: io PSI avg60 %v, want %v (read at pass %d)", i, step.at, got, want, step.psiRead)
		}
	}
}

// TestIdleMemoryStatRefresh: an idle container's memory.current is re-read
// every refreshInterval; its memory.stat (and limit and events) only when
// memory.current moved, when the container ran, or every
// statRefreshInterval. Growth of its usage shows within refreshInterval.
func TestIdleMemoryStatRefresh(t *testing.T) {
	t.Parallel()
	m, _, root, rel := monitoredV2Container(t)
	cpuUsec := uint64(1_000_000)
	// Before pass i memory.stat says anon 1000+i: the working set a pass
	// shows tells which pass last read memory.stat.
	for i, step := range []struct {
		at       time.Duration
		ran      bool   // the container's CPU time grows before the pass
		current  uint64 // memory.current before the pass
		wantUse  uint64 // the usage the pass shows
		statRead int    // the pass whose memory.stat it shows
	}{
		{0, false, 500, 500, 0},                       // first pass: everything read
		{500 * time.Millisecond, false, 500, 500, 0},  // idle, within refreshInterval: repeated
		{1000 * time.Millisecond, false, 500, 500, 0}, // refresh: usage unchanged, stat repeated
		{2000 * time.Millisecond, false, 700, 700, 3}, // usage grew: everything read
		{2500 * time.Millisecond, false, 900, 700, 3}, // within refreshInterval of the last usage read
		{3000 * time.Millisecond, false, 900, 900, 5}, // growth seen within refreshInterval
		{4000 * time.Millisecond, false, 900, 900, 5}, // unchanged: stat repeated
		{4900 * time.Millisecond, false, 900, 900, 5}, // unchanged, before statRefreshInterval's boundary (5 s)
		{5000 * time.Millisecond, false, 900, 900, 8}, // the boundary: memory.stat read
		{5100 * time.Millisecond, true, 900, 900, 9},  // ran: everything read
		{5200 * time.Millisecond, false, 900, 900, 9}, // idle
	} {
		if step.ran {
			cpuUsec += 50_000
		}
		writeFiles(t, root, map[string]string{
			rel + "/cpu.stat":       fmt.Sprintf("usage_usec %d\n", cpuUsec),
			rel + "/memory.current": fmt.Sprintf("%d\n", step.current),
			rel + "/memory.stat":    fmt.Sprintf("anon %d\nfile 0\nactive_file 0\n", 1000+i),
		})
		if err := m.Sample(t0.Add(step.at)); err != nil {
			t.Fatal(err)
		}
		u, _ := m.Latest("c1")
		if u.MemUsage != step.wantUse {
			t.Errorf("pass %d at %v: usage %d, want %d", i, step.at, u.MemUsage, step.wantUse)
		}
		if got, want := u.Stats.GetMemWorkingSetBytes(), uint64(1000+step.statRead); got != want {
			t.Errorf("pass %d at %v: working set %d, want %d (memory.stat read at pass %d)", i, step.at, got, want, step.statRead)
		}
	}
}

// TestIdleRefreshSetting: with Config.IdleRefresh at 5 s an idle
// container's memory.current is repeated for 5 s, not refreshInterval
// (#29: the safety net's reads cost most of an idle node's cgroupfs
// reads); a container that ran is read at once.
func TestIdleRefreshSetting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fakeProc(t, filepath.Join(dir, "proc"), 1000)
	root := filepath.Join(dir, "cgroup")
	rel := "slackline/c1"
	v2Container(t, root, rel, 1_000_000)
	m, err := New(Config{Mode: "v2", CgroupMountpoint: root, ProcRoot: filepath.Join(dir, "proc"),
		History: 100, Logger: quietLogger(), IdleRefresh: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	m.SetTargets([]Target{{ID: "c1", CgroupPath: rel}})
	cpuUsec := uint64(1_000_000)
	for i, step := range []struct {
		at      time.Duration
		ran     bool
		current uint64
		wantUse uint64
	}{
		{0, false, 500, 500},
		{1000 * time.Millisecond, false, 600, 500}, // refreshInterval: still repeated
		{4900 * time.Millisecond, false, 600, 500},
		{5000 * time.Millisecond, false, 600, 600}, // the idle refresh
		{5100 * time.Millisecond, false, 700, 600},
		{5200 * time.Millisecond, true, 700, 700}, // ran: read
	} {
		if step.ran {
			cpuUsec += 50_000
		}
		writeFiles(t, root, map[string]string{
			rel + "/cpu.stat":       fmt.Sprintf("usage_usec %d\n", cpuUsec),
			rel + "/memory.current": fmt.Sprintf("%d\n", step.current),
		})
		if err := m.Sample(t0.Add(step.at)); err != nil {
			t.Fatal(err)
		}
		if u, _ := m.Latest("c1"); u.MemUsage != step.wantUse {
			t.Errorf("pass %d at %v: usage %d, want %d", i, step.at, u.MemUsage, step.wantUse)
		}
	}
	if _, err := New(Config{Mode: "v2", CgroupMountpoint: root, ProcRoot: filepath.Join(dir, "proc"), IdleRefresh: -time.Second}); err == nil || !strings.Contains(err.Error(), "IdleRefresh") {
		t.Errorf("negative IdleRefresh: err %v, want one naming IdleRefresh", err)
	}
}

// quietPSI is a PSI file without recent pressure.
const quietPSI = "some avg10=0.00 avg60=0.00 avg300=0.00 total=7\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"

// monitoredV2Container returns a monitor over a fake v2 tree under dir
// (the cgroup mount at root) with one target, "c1", whose cgroup is rel.
func monitoredV2Container(t *testing.T) (m *Monitor, dir, root, rel string) {
	t.Helper()
	dir = t.TempDir()
	m = newTestMonitor(t, "v2", dir, nil, 100)
	root = filepath.Join(dir, "cgroup")
	rel = "slackline/c1"
	v2Container(t, root, rel, 1_000_000)
	m.SetTargets([]Target{{ID: "c1", CgroupPath: rel}})
	return m, dir, root, rel
}
