package monitor

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/procfs"
)

// TestNodeParsersMatchProcfs: the node sample's own parsers of /proc/stat,
// /proc/meminfo, /proc/loadavg and /proc/pressure/* find exactly (to the
// bit) the figures github.com/prometheus/procfs, which the node sample
// used before (#29), finds in the same files: this host's and fake ones
// (a kernel without steal time, meminfo without units, a PSI file without
// a full line, averages whose decimal parse rounds twice).
func TestNodeParsersMatchProcfs(t *testing.T) {
	t.Parallel()
	fake := t.TempDir()
	writeFiles(t, fake, map[string]string{
		"stat": "cpu  1234567 89 4321 99999 12 34 56\ncpu0 1 2 3 4 5 6 7\ncpu1 1 2 3 4 5 6 7\ncpu2 1 2 3 4 5 6 7\n" +
			"intr 12 0 3\nctxt 100\nbtime 1700000000\nprocesses 10\nprocs_running 1\nprocs_blocked 0\nsoftirq 1 1 0 0 0 0 0 0 0 0 0\n",
		"meminfo":         "MemTotal:       16384 kB\nMemFree:        100\nMemAvailable:   12345\nHugePages_Total:       0\n",
		"loadavg":         "12.34 0.07 101.99 3/456 789\n",
		"pressure/cpu":    "some avg10=12.34 avg60=0.07 avg300=99.99 total=123456789\n",
		"pressure/memory": "some avg10=0.10 avg60=0.20 avg300=0.30 total=500000\nfull avg10=0.01 avg60=0.02 avg300=0.03 total=250000\n",
		"pressure/io":     "some avg10=5.55 avg60=6.66 avg300=7.77 total=9\nfull avg10=4.44 avg60=3.33 avg300=2.22 total=1\n",
	})
	// This host's files, copied once so that both parsers read the same
	// content.
	host := t.TempDir()
	for _, name := range []string{"stat", "meminfo", "loadavg", "pressure/cpu", "pressure/memory", "pressure/io"} {
		if data, err := os.ReadFile(filepath.Join("/proc", name)); err == nil {
			writeFiles(t, host, map[string]string{name: string(data)})
		}
	}
	for name, root := range map[string]string{"fake": fake, "host": host} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			proc, err := procfs.NewFS(root)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(root, "stat")); err != nil {
				t.Skipf("no /proc/stat on this host: %v", err)
			}
			read := func(name string) []byte {
				data, err := os.ReadFile(filepath.Join(root, name))
				if err != nil {
					t.Fatal(err)
				}
				return data
			}
			stat, err := proc.Stat()
			if err != nil {
				t.Fatal(err)
			}
			total, cpus, err := parseProcStat(read("stat"))
			c := stat.CPUTotal
			if want := (procCPU{c.User, c.Nice, c.System, c.IRQ, c.SoftIRQ, c.Steal}); err != nil || total != want || cpus != len(stat.CPU) {
				t.Errorf("stat: %+v, %d cpus, %v; procfs %+v, %d cpus", total, cpus, err, want, len(stat.CPU))
			}
			mem, err := proc.Meminfo()
			if err != nil {
				t.Fatal(err)
			}
			memTotal, available, err := parseMeminfo(read("meminfo"))
			if err != nil || *memTotal != *mem.MemTotalBytes || *available != *mem.MemAvailableBytes {
				t.Errorf("meminfo: %d, %d, %v; procfs %d, %d", *memTotal, *available, err, *mem.MemTotalBytes, *mem.MemAvailableBytes)
			}
			load, err := proc.LoadAvg()
			if err != nil {
				t.Fatal(err)
			}
			if got, err := parseLoadAvg(read("loadavg")); err != nil || got != [3]float64{load.Load1, load.Load5, load.Load15} {
				t.Errorf("loadavg: %v, %v; procfs %+v", got, err, load)
			}
			for _, resource := range []string{"cpu", "memory", "io"} {
				psi, err := proc.PSIStatsForResource(resource)
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				some, full, err := parseNodePressure(read("pressure/" + resource))
				if err != nil || some != psiLineOf(psi.Some) || full != psiLineOf(psi.Full) {
					t.Errorf("pressure/%s: %+v %+v %v; procfs %+v %+v", resource, some, full, err, psiLineOf(psi.Some), psiLineOf(psi.Full))
				}
			}
		})
	}
}

// psiLineOf is procfs's PSI line in the monitor's terms (zero for none).
func psiLineOf(l *procfs.PSILine) psiLine {
	if l == nil {
		return psiLine{}
	}
	return psiLine{avg10: l.Avg10, avg60: l.Avg60, avg300: l.Avg300, totalUsec: l.Total}
}
