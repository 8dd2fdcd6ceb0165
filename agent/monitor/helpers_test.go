package monitor

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// t0 is the fake clock's origin.
var t0 = time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC)

// writeFiles writes files (path relative to root -> content) in place, so
// files the monitor keeps open see the new content.
func writeFiles(tb testing.TB, root string, files map[string]string) {
	tb.Helper()
	for rel, content := range files {
		path := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}

// fakeProc writes a /proc with two CPUs. userTicks is the total user time
// in USER_HZ ticks.
func fakeProc(tb testing.TB, root string, userTicks int) {
	tb.Helper()
	writeFiles(tb, root, map[string]string{
		"stat": fmt.Sprintf("cpu  %d 10 200 5000 30 4 6 8 0 0\ncpu0 %d 5 100 2500 15 2 3 4 0 0\ncpu1 0 5 100 2500 15 2 3 4 0 0\n"+
			"intr 1 1\nctxt 100\nbtime 1700000000\nprocesses 10\nprocs_running 1\nprocs_blocked 0\nsoftirq 1 1 0 0 0 0 0 0 0 0 0\n", userTicks, userTicks),
		"meminfo":         "MemTotal:       8000000 kB\nMemFree:        1000000 kB\nMemAvailable:   6000000 kB\n",
		"loadavg":         "1.50 0.75 0.25 2/100 12345\n",
		"pressure/cpu":    "some avg10=1.00 avg60=2.00 avg300=3.00 total=4000000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"pressure/memory": "some avg10=0.10 avg60=0.20 avg300=0.30 total=500000\nfull avg10=0.01 avg60=0.02 avg300=0.03 total=250000\n",
		"pressure/io":     "some avg10=5.50 avg60=6.60 avg300=7.70 total=9000000\nfull avg10=4.40 avg60=3.30 avg300=2.20 total=1000000\n",
	})
}

// psi returns a PSI file's content.
func psi(someAvg10 float64, someTotalUsec uint64, fullAvg10 float64, fullTotalUsec uint64) string {
	return fmt.Sprintf("some avg10=%.2f avg60=0.50 avg300=0.25 total=%d\nfull avg10=%.2f avg60=0.05 avg300=0.02 total=%d\n",
		someAvg10, someTotalUsec, fullAvg10, fullTotalUsec)
}

// v2Container writes a container's files in a fake pure-v2 tree.
// usageUsec is its CPU time.
func v2Container(tb testing.TB, root, rel string, usageUsec uint64) {
	tb.Helper()
	writeFiles(tb, root, map[string]string{
		rel + "/cpu.stat": fmt.Sprintf("usage_usec %d\nuser_usec %d\nsystem_usec %d\nnr_periods 40\nnr_throttled 7\nthrottled_usec 350000\nnr_bursts 0\nburst_usec 0\n",
			usageUsec, usageUsec*3/4, usageUsec/4),
		rel + "/memory.current":  "104857600\n",
		rel + "/memory.stat":     "anon 52428800\nfile 41943040\nkernel 1048576\nshmem 4096\nactive_anon 50000000\ninactive_anon 3000000\nactive_file 40000000\ninactive_file 1943040\n",
		rel + "/memory.max":      "268435456\n",
		rel + "/memory.events":   "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n",
		rel + "/cpu.pressure":    psi(12.5, 3000000, 1.25, 1500000),
		rel + "/memory.pressure": psi(0.5, 200000, 0.25, 100000),
		rel + "/io.pressure":     psi(2, 700000, 1, 600000),
	})
}

// hybridContainer writes a container's files in a fake hybrid tree.
func hybridContainer(tb testing.TB, root, rel string, usageUsec uint64) {
	tb.Helper()
	writeFiles(tb, root, map[string]string{
		"unified/" + rel + "/cpu.stat":             fmt.Sprintf("usage_usec %d\nuser_usec %d\nsystem_usec %d\nnice_usec 0\n", usageUsec, usageUsec*3/4, usageUsec/4),
		"unified/" + rel + "/cpu.pressure":         psi(12.5, 3000000, 1.25, 1500000),
		"unified/" + rel + "/memory.pressure":      psi(0.5, 200000, 0.25, 100000),
		"unified/" + rel + "/io.pressure":          psi(2, 700000, 1, 600000),
		"cpu/" + rel + "/cpu.stat":                 "nr_periods 40\nnr_throttled 7\nthrottled_time 350000000\nnr_bursts 0\nburst_time 0\n",
		"memory/" + rel + "/memory.usage_in_bytes": "104857600\n",
		"memory/" + rel + "/memory.stat": "cache 1\nrss 2\nactive_anon 3\ntotal_cache 41943040\ntotal_rss 52428800\ntotal_shmem 4096\n" +
			"total_active_anon 50000000\ntotal_inactive_anon 3000000\ntotal_active_file 40000000\n",
		"memory/" + rel + "/memory.limit_in_bytes": "268435456\n",
		"memory/" + rel + "/memory.oom_control":    "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
	})
}

// fakeEBPF serves figures set by the test, per cgroup id.
type fakeEBPF struct {
	mu    sync.Mutex
	stats map[uint64]EBPFStats
	asked []uint64
}

func (f *fakeEBPF) set(id uint64, s EBPFStats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stats == nil {
		f.stats = make(map[uint64]EBPFStats)
	}
	f.stats[id] = s
}

func (f *fakeEBPF) Stats(id uint64) (EBPFStats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, id)
	s, ok := f.stats[id]
	if !ok {
		return EBPFStats{}, fmt.Errorf("cgroup %d not tracked", id)
	}
	s.RunqBuckets = append([]uint64(nil), s.RunqBuckets...)
	return s, nil
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newTestMonitor returns a Monitor over fake trees under dir: the cgroup
// mountpoint is dir/cgroup and procfs dir/proc.
func newTestMonitor(tb testing.TB, mode, dir string, ebpf EBPF, history int) *Monitor {
	tb.Helper()
	fakeProc(tb, filepath.Join(dir, "proc"), 1000)
	if err := os.MkdirAll(filepath.Join(dir, "cgroup"), 0o755); err != nil {
		tb.Fatal(err)
	}
	cfg := Config{Mode: mode, CgroupMountpoint: filepath.Join(dir, "cgroup"), ProcRoot: filepath.Join(dir, "proc"),
		History: history, Logger: quietLogger()}
	if ebpf != nil {
		cfg.EBPF = ebpf
	}
	m, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

// controlFiles returns every control file of c's samplers, in sampling
// order.
func controlFiles(c *container) []*controlFile {
	var files []*controlFile
	for _, s := range c.samplers {
		files = append(files, s.files()...)
	}
	return files
}
