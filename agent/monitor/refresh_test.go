package monitor

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

// TestSlowFiguresRefresh: a container that has not run since its memory
// files were read has them repeated, not re-read, for refreshInterval; one
// that ran has them re-read at once. PSI files are re-read every
// refreshInterval whatever the container did. CPU is read every pass.
func TestSlowFiguresRefresh(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := newTestMonitor(t, "v2", dir, nil, 100)
	root := filepath.Join(dir, "cgroup")
	rel := "slackline/c1"
	v2Container(t, root, rel, 1_000_000)
	m.SetTargets([]Target{{ID: "c1", CgroupPath: rel}})
	usage := uint64(1_000_000)
	// Before pass i the memory files say 1000+i bytes and the PSI files
	// avg10 i: what a pass shows tells which pass last read them.
	for i, step := range []struct {
		at               time.Duration
		ran              bool // the container's CPU time grows before the pass
		memRead, psiRead int  // the pass whose files it shows
	}{
		{0, false, 0, 0},                       // first pass: everything read
		{100 * time.Millisecond, false, 0, 0},  // idle, within the interval: repeated
		{200 * time.Millisecond, true, 2, 0},   // ran: memory re-read, PSI repeated
		{900 * time.Millisecond, false, 2, 0},  // idle again: repeated
		{1000 * time.Millisecond, false, 2, 4}, // a second since PSI was read
		{1100 * time.Millisecond, false, 2, 4}, // idle
		{1200 * time.Millisecond, false, 6, 4}, // a second since memory was read (at 200 ms)
		{2000 * time.Millisecond, false, 6, 7}, // PSI's second
		{2100 * time.Millisecond, true, 8, 7},  // ran
		{2050 * time.Millisecond, false, 9, 7}, // before memory's last read (2100): re-read; after PSI's (2000): repeated
		{5 * time.Second, false, 10, 10},       // long gap
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

// TestIdleMemoryStatRefresh: an idle container's memory.current is re-read
// every refreshInterval; its memory.stat (and limit and events) only when
// memory.current moved, when the container ran, or every
// statRefreshInterval. Growth of its usage shows within refreshInterval.
func TestIdleMemoryStatRefresh(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := newTestMonitor(t, "v2", dir, nil, 100)
	root := filepath.Join(dir, "cgroup")
	rel := "slackline/c1"
	v2Container(t, root, rel, 1_000_000)
	m.SetTargets([]Target{{ID: "c1", CgroupPath: rel}})
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
		{7000 * time.Millisecond, false, 900, 900, 5}, // unchanged, under statRefreshInterval since pass 5
		{8000 * time.Millisecond, false, 900, 900, 8}, // statRefreshInterval since memory.stat's read
		{8100 * time.Millisecond, true, 900, 900, 9},  // ran: everything read
		{8200 * time.Millisecond, false, 900, 900, 9}, // idle
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
