package monitor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/procfs"
)

// TestNodeFilesParseAsProcfs (#29): the node's files, now read with one
// pread each and parsed by the monitor, give what prometheus/procfs (which
// sampleNode used before) gives for the fields the monitor uses, on
// fixtures and on this host's /proc; malformed files are errors.
func TestNodeFilesParseAsProcfs(t *testing.T) {
	t.Parallel()
	fixtures := []struct {
		name                                string
		stat, meminfo, loadavg, pressureCPU string
	}{
		{
			name:        "typical",
			stat:        "cpu  4705 356 584 3699176 23060 0 277 12 0 0\ncpu0 1393280 32966 572056 13343292 6130 0 17875 0 23933 0\ncpu1 1 2 3 4 5 6 7 8 9 10\nintr 8885917 17 0 0 0\nctxt 38014093\nbtime 1418183276\nprocesses 26442\nprocs_running 2\nprocs_blocked 1\nsoftirq 5057579 250191 1481983 1647 211099 186066 0 1783454 622196 12499 508444\n",
			meminfo:     "MemTotal:       15666184 kB\nMemFree:          440324 kB\nMemAvailable:    1123456 kB\nBuffers:         1020128 kB\nHugePages_Total:       0\n",
			loadavg:     "0.02 0.04 0.05 1/497 11947\n",
			pressureCPU: "some avg10=0.10 avg60=2.00 avg300=3.85 total=15\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		},
		{
			name:        "old kernel: fewer cpu fields, no MemAvailable, some only",
			stat:        "cpu 100 0 50 1000\ncpu0 100 0 50 1000\n",
			meminfo:     "MemTotal:       2048 kB\nMemFree:        1024 kB\n",
			loadavg:     "12.34 5.60 0.78 3/100 42",
			pressureCPU: "some avg10=12.34 avg60=56.78 avg300=90.12 total=123456789\n",
		},
	}
	for _, f := range fixtures {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			for name, content := range map[string]string{"stat": f.stat, "meminfo": f.meminfo, "loadavg": f.loadavg, "pressure/cpu": f.pressureCPU} {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			compareWithProcfs(t, root)
		})
	}
	t.Run("this host", func(t *testing.T) {
		t.Parallel()
		if _, err := os.Stat("/proc/pressure/cpu"); err != nil {
			t.Skipf("no PSI on this host: %v", err)
		}
		compareWithProcfs(t, "/proc")
	})
}

// compareWithProcfs parses root's node files with the monitor and with
// procfs and compares what the monitor uses. The averages and totals of a
// live /proc move between the two reads, so for "/proc" only the stable
// fields are compared.
func compareWithProcfs(t *testing.T, root string) {
	t.Helper()
	live := root == "/proc"
	fs, err := procfs.NewFS(root)
	if err != nil {
		t.Fatal(err)
	}
	files := newNodeFiles(root)
	defer files.close()

	data, err := files.read(&files.stat)
	if err != nil {
		t.Fatal(err)
	}
	cpu, err := parseProcStat(data)
	if err != nil {
		t.Fatal(err)
	}
	want, err := fs.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if cpu.cpus != len(want.CPU) {
		t.Errorf("cpus %d, procfs %d", cpu.cpus, len(want.CPU))
	}
	if c := want.CPUTotal; !live && (cpu.user != c.User || cpu.nice != c.Nice || cpu.system != c.System || cpu.idle != c.Idle ||
		cpu.iowait != c.Iowait || cpu.irq != c.IRQ || cpu.softirq != c.SoftIRQ || cpu.steal != c.Steal) {
		t.Errorf("cpu %+v, procfs %+v", cpu, c)
	}

	if data, err = files.read(&files.meminfo); err != nil {
		t.Fatal(err)
	}
	mem, err := parseMeminfo(data)
	if err != nil {
		t.Fatal(err)
	}
	wantMem, err := fs.Meminfo()
	if err != nil {
		t.Fatal(err)
	}
	if mem.hasTotal != (wantMem.MemTotalBytes != nil) || mem.hasTotal && mem.total != *wantMem.MemTotalBytes {
		t.Errorf("MemTotal %d (%v), procfs %v", mem.total, mem.hasTotal, wantMem.MemTotalBytes)
	}
	if mem.hasAvailable != (wantMem.MemAvailableBytes != nil) || !live && mem.hasAvailable && mem.available != *wantMem.MemAvailableBytes {
		t.Errorf("MemAvailable %d (%v), procfs %v", mem.available, mem.hasAvailable, wantMem.MemAvailableBytes)
	}

	if data, err = files.read(&files.loadavg); err != nil {
		t.Fatal(err)
	}
	l1, l5, l15, err := parseLoadavg(data)
	if err != nil {
		t.Fatal(err)
	}
	wantLoad, err := fs.LoadAvg()
	if err != nil {
		t.Fatal(err)
	}
	if !live && (l1 != wantLoad.Load1 || l5 != wantLoad.Load5 || l15 != wantLoad.Load15) {
		t.Errorf("load %v %v %v, procfs %+v", l1, l5, l15, wantLoad)
	}

	if data, err = files.read(&files.pressure[0]); err != nil {
		t.Fatal(err)
	}
	some, full, err := parseNodePressure(data)
	if err != nil {
		t.Fatal(err)
	}
	wantPSI, err := fs.PSIStatsForResource("cpu")
	if err != nil {
		t.Fatal(err)
	}
	if !live {
		if got, want := pressure(some, full), pressure(psiOf(wantPSI.Some), psiOf(wantPSI.Full)); got.String() != want.String() {
			t.Errorf("cpu pressure %v, procfs %v", got, want)
		}
	}
}

// psiOf is what sampleNode made of a procfs PSI line.
func psiOf(l *procfs.PSILine) psiLine {
	if l == nil {
		return psiLine{}
	}
	return psiLine{avg10: l.Avg10, avg60: l.Avg60, avg300: l.Avg300, totalUsec: l.Total}
}

// TestNodeFilesMalformed: a node file the monitor cannot parse is an
// error, not zeros.
func TestNodeFilesMalformed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		parse func([]byte) error
		data  string
	}{
		{"stat without a cpu line", func(b []byte) error { _, err := parseProcStat(b); return err }, "intr 1 2\nctxt 3\n"},
		{"stat with a bad number", func(b []byte) error { _, err := parseProcStat(b); return err }, "cpu 1 x 3\n"},
		{"meminfo with a bad number", func(b []byte) error { _, err := parseMeminfo(b); return err }, "MemTotal: 12a kB\n"},
		{"meminfo in another unit", func(b []byte) error { _, err := parseMeminfo(b); return err }, "MemTotal: 12 MB\n"},
		{"loadavg too short", func(b []byte) error { _, _, _, err := parseLoadavg(b); return err }, "0.1 0.2\n"},
		{"pressure with a bad total", func(b []byte) error { _, _, err := parseNodePressure(b); return err }, "some avg10=0.00 avg60=0.00 avg300=0.00 total=x\n"},
	} {
		if err := c.parse([]byte(c.data)); err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}
