package monitor

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/internal/privileged"
)

const (
	kib = 1024
	mib = 1024 * kib
	gib = 1024 * mib
)

func TestPickBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		total  uint64
		limits []uint64
		want   int
	}{
		{"no ancestors", 8 * gib, nil, -1},
		{"no limits", 8 * gib, []uint64{0, 0, 0}, -1},
		{"limit at host total", 8 * gib, []uint64{0, 8 * gib}, -1},
		{"limit above host total", 8 * gib, []uint64{16 * gib, 0}, -1},
		{"one limit on a parent", 8 * gib, []uint64{0, 2 * gib, 0}, 1},
		{"one limit on the root", 8 * gib, []uint64{0, 0, 1 * gib}, 2},
		{"lowest wins, outer", 8 * gib, []uint64{1 * gib, 2 * gib, 3 * gib}, 0},
		{"lowest wins, inner", 8 * gib, []uint64{3 * gib, 0, 1 * gib}, 2},
		{"equal limits: outermost", 8 * gib, []uint64{0, 2 * gib, 2 * gib}, 1},
	} {
		if got := pickBound(tc.total, tc.limits); got != tc.want {
			t.Errorf("%s: pickBound(%d, %v) = %d, want %d", tc.name, tc.total, tc.limits, got, tc.want)
		}
	}
}

func TestBoundedMemory(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                 string
		hostTotal, hostAvail uint64
		b                    memoryBound
		wantTotal, wantAvail uint64
	}{
		{"no limit", 8 * gib, 6 * gib, memoryBound{usage: 1 * gib}, 8 * gib, 6 * gib},
		{"limit above host", 8 * gib, 6 * gib, memoryBound{limit: 9 * gib, usage: 1 * gib}, 8 * gib, 6 * gib},
		{"limit at host", 8 * gib, 6 * gib, memoryBound{limit: 8 * gib, usage: 7 * gib}, 8 * gib, 6 * gib},
		{"bounded, room left", 8 * gib, 6 * gib, memoryBound{limit: 1536 * mib, usage: 1000 * mib, inactiveFile: 200 * mib}, 1536 * mib, 736 * mib},
		{"bounded, inactive cache counts as available", 8 * gib, 6 * gib, memoryBound{limit: 1536 * mib, usage: 1536 * mib, inactiveFile: 384 * mib}, 1536 * mib, 384 * mib},
		{"bounded, full", 8 * gib, 6 * gib, memoryBound{limit: 1536 * mib, usage: 1536 * mib}, 1536 * mib, 0},
		{"bounded, usage above limit (v1 races)", 8 * gib, 6 * gib, memoryBound{limit: 1 * gib, usage: 2 * gib}, 1 * gib, 0},
		{"bounded, inactive above usage", 8 * gib, 6 * gib, memoryBound{limit: 1 * gib, usage: 100 * mib, inactiveFile: 200 * mib}, 1 * gib, 1 * gib},
		{"bounded, host shorter than the limit's room", 8 * gib, 300 * mib, memoryBound{limit: 2 * gib, usage: 100 * mib}, 2 * gib, 300 * mib},
	} {
		total, avail := boundedMemory(tc.hostTotal, tc.hostAvail, tc.b)
		if total != tc.wantTotal || avail != tc.wantAvail {
			t.Errorf("%s: boundedMemory = (%d, %d), want (%d, %d)", tc.name, total, avail, tc.wantTotal, tc.wantAvail)
		}
	}
}

func TestNewNodeBound(t *testing.T) {
	t.Parallel()
	v2 := layoutOf(cgroups.ModeV2, "/cg")
	hybrid := layoutOf(cgroups.ModeHybrid, "/cg")
	b, err := newNodeBound(v2, "system.slice/node.slice/slackline")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/cg/system.slice", "/cg/system.slice/node.slice", "/cg/system.slice/node.slice/slackline"}
	if !slicesEqual(b.dirs, want) || b.limitName != "memory.max" || b.inactiveKey != "inactive_file" {
		t.Errorf("v2: dirs %v limit %s key %s, want %v memory.max inactive_file", b.dirs, b.limitName, b.inactiveKey, want)
	}
	if !slicesEqual(b.pressureDirs, want) {
		t.Errorf("v2: pressure dirs %v, want %v", b.pressureDirs, want)
	}
	if b, err = newNodeBound(hybrid, "slackline"); err != nil {
		t.Fatal(err)
	}
	if !slicesEqual(b.dirs, []string{"/cg/memory/slackline"}) || b.limitName != "memory.limit_in_bytes" || b.inactiveKey != "total_inactive_file" {
		t.Errorf("hybrid: dirs %v limit %s key %s", b.dirs, b.limitName, b.inactiveKey)
	}
	// PSI is in the v2 tree in both layouts.
	if !slicesEqual(b.pressureDirs, []string{"/cg/unified/slackline"}) {
		t.Errorf("hybrid: pressure dirs %v, want the v2 tree's /cg/unified/slackline", b.pressureDirs)
	}
	if b, err = newNodeBound(v2, ""); b != nil || err != nil {
		t.Errorf("empty root: %v, %v; want nil, nil", b, err)
	}
	if _, err = newNodeBound(v2, "../escape"); err == nil {
		t.Error("root ../escape accepted")
	}
	if _, err := New(Config{Mode: "v2", CgroupMountpoint: t.TempDir(), CgroupRoot: "/abs", Logger: quietLogger()}); err == nil {
		t.Error("New accepted the absolute cgroup root /abs")
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// boundTestMonitor returns a Monitor over fake trees under dir whose
// cgroup root is root (fakeProc: MemTotal 8000000 kB, MemAvailable
// 6000000 kB).
func boundTestMonitor(tb testing.TB, mode, dir, root string) *Monitor {
	tb.Helper()
	fakeProc(tb, filepath.Join(dir, "proc"), 1000)
	if err := os.MkdirAll(filepath.Join(dir, "cgroup"), 0o755); err != nil {
		tb.Fatal(err)
	}
	m, err := New(Config{Mode: mode, CgroupMountpoint: filepath.Join(dir, "cgroup"), ProcRoot: filepath.Join(dir, "proc"),
		CgroupRoot: root, Logger: quietLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	return m
}

// TestNodeMemoryBoundedByCgroupRoot runs the shell on fake trees of both
// layouts: the lowest limit among the root's ancestors bounds the node
// (its memory and, from the v2 tree, its memory pressure), limits are
// re-read every nodeBoundRescanInterval, and without a finite limit no
// usage file is opened.
func TestNodeMemoryBoundedByCgroupRoot(t *testing.T) {
	t.Parallel()
	const hostTotal, hostAvail = 8000000 * kib, 6000000 * kib
	const hostPSI, boundPSI = 0.10, 12.5 // fakeProc's memory some avg10, the bound's
	for _, tc := range []struct {
		mode                            string
		prefix                          string // the memory hierarchy under the mountpoint
		v2                              string // the v2 tree under the mountpoint
		limit, usage, stat, inactiveKey string
		unlimited                       string
	}{
		{"v2", "", "", "memory.max", "memory.current", "memory.stat", "inactive_file", "max\n"},
		{"hybrid", "memory/", "unified/", "memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat", "total_inactive_file", "9223372036854771712\n"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cg := filepath.Join(dir, "cgroup")
			parent, root := tc.prefix+"bench", tc.prefix+"bench/node"
			writeFiles(t, cg, map[string]string{
				parent + "/" + tc.limit: strconv.Itoa(1536*mib) + "\n",
				parent + "/" + tc.usage: strconv.Itoa(1200*mib) + "\n",
				parent + "/" + tc.stat:  "cache 1\n" + tc.inactiveKey + " " + strconv.Itoa(100*mib) + "\nactive_file 5\n",
				root + "/" + tc.limit:   strconv.Itoa(2048*mib) + "\n",
				root + "/" + tc.usage:   strconv.Itoa(1100*mib) + "\n",
				root + "/" + tc.stat:    tc.inactiveKey + " 0\n",
				// Only the parent has a memory.pressure: the root's
				// (below) is never read while the parent bounds.
				tc.v2 + "bench/memory.pressure":      "some avg10=12.50 avg60=1.00 avg300=0.50 total=7000000\nfull avg10=3.00 avg60=0.10 avg300=0.00 total=900000\n",
				tc.v2 + "bench/node/memory.pressure": "some avg10=99.00 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
			})
			m := boundTestMonitor(t, tc.mode, dir, "bench/node")
			wantPSI := boundPSI
			check := func(at time.Duration, wantTotal, wantAvail uint64) {
				t.Helper()
				if err := m.Sample(t0.Add(at)); err != nil {
					t.Fatal(err)
				}
				n := m.Node()
				if n.Stats.MemLimitBytes != wantTotal || n.Stats.MemAvailableBytes != wantAvail || n.MemUsage != wantTotal-wantAvail {
					t.Errorf("at %v: node total %d avail %d usage %d, want %d %d %d", at, n.Stats.MemLimitBytes,
						n.Stats.MemAvailableBytes, n.MemUsage, wantTotal, wantAvail, wantTotal-wantAvail)
				}
				if got := n.Stats.GetMemoryPressure().GetSomeAvg10(); got != wantPSI {
					t.Errorf("at %v: node memory pressure some avg10 %v, want %v", at, got, wantPSI)
				}
			}
			// The parent's 1536 MiB is the lowest: 1536 - (1200 - 100) = 436 MiB available.
			check(0, 1536*mib, 436*mib)

			// Usage is read every sample.
			writeFiles(t, cg, map[string]string{parent + "/" + tc.usage: strconv.Itoa(1500*mib) + "\n"})
			check(time.Second, 1536*mib, 136*mib)

			// A new limit on the root is seen at the next scan, not before.
			writeFiles(t, cg, map[string]string{root + "/" + tc.limit: strconv.Itoa(1024*mib) + "\n"})
			check(2*time.Second, 1536*mib, 136*mib)
			// The root's 1024 MiB: 1024 - 1100 -> 0 available, and its
			// memory pressure.
			wantPSI = 99
			check(nodeBoundRescanInterval, 1024*mib, 0)
			writeFiles(t, cg, map[string]string{root + "/" + tc.usage: strconv.Itoa(600*mib) + "\n"})
			check(nodeBoundRescanInterval+time.Second, 1024*mib, 424*mib)

			// Limits lifted: the host's figures, and the usage files closed
			// and no longer read.
			writeFiles(t, cg, map[string]string{root + "/" + tc.limit: tc.unlimited, parent + "/" + tc.limit: tc.unlimited})
			wantPSI = hostPSI
			check(2*nodeBoundRescanInterval+time.Second, hostTotal, hostAvail)
			b := m.nodeBound
			if b.chosen != -1 || b.usage.f != nil || b.usage.path != "" || b.stat.f != nil {
				t.Errorf("unbounded node still reads a usage file: chosen %d usage %+v stat %+v", b.chosen, b.usage, b.stat)
			}
			// A limit above the host's memory bounds nothing.
			writeFiles(t, cg, map[string]string{parent + "/" + tc.limit: strconv.Itoa(16*gib) + "\n"})
			check(4*nodeBoundRescanInterval, hostTotal, hostAvail)
			// A bounding cgroup without memory.pressure (no PSI, or not in
			// the v2 tree): the host's pressure.
			if err := os.Remove(filepath.Join(cg, tc.v2+"bench/memory.pressure")); err != nil {
				t.Fatal(err)
			}
			// A removed bounding cgroup is an error and the host's figures,
			// and the limits are looked at again at the next sample.
			writeFiles(t, cg, map[string]string{parent + "/" + tc.limit: strconv.Itoa(1536*mib) + "\n"})
			check(6*nodeBoundRescanInterval, 1536*mib, 136*mib)
			m.nodeBound.close() // files kept open would still read
			if err := os.Remove(filepath.Join(cg, parent, tc.usage)); err != nil {
				t.Fatal(err)
			}
			if err := m.Sample(t0.Add(6*nodeBoundRescanInterval + time.Second)); err == nil {
				t.Error("sampling a bounding cgroup without its usage file: no error")
			}
			if n := m.Node(); n.Stats.MemLimitBytes != hostTotal {
				t.Errorf("after a failed bound read the node's total is %d, want the host's %d", n.Stats.MemLimitBytes, hostTotal)
			}
			if !m.nodeBound.scannedAt.IsZero() {
				t.Error("a failed bound read does not force a rescan")
			}
		})
	}
}

// TestNodeMemoryWithoutCgroupRoot: no root, no bound (the host's figures
// even beside a limited cgroup).
func TestNodeMemoryWithoutCgroupRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFiles(t, filepath.Join(dir, "cgroup"), map[string]string{"slackline/memory.max": "1048576\n"})
	m := boundTestMonitor(t, "v2", dir, "")
	if m.nodeBound != nil {
		t.Fatal("a monitor without a cgroup root looks for a bound")
	}
	if err := m.Sample(t0); err != nil {
		t.Fatal(err)
	}
	if got := m.Node().Stats.MemLimitBytes; got != 8000000*kib {
		t.Errorf("node total %d, want the host's", got)
	}
}

// TestRealNodeMemoryBound bounds a real memory cgroup (v1 memory on a
// hybrid host, v2 otherwise) at 256 MiB and checks the node's figures
// follow it.
func TestRealNodeMemoryBound(t *testing.T) {
	privileged.Require(t)
	layout, rels := realCgroups(t, "nodebound", 1)
	parent := filepath.Dir(rels[0])
	proc, err := procfs.NewDefaultFS()
	if err != nil {
		t.Fatal(err)
	}
	host, err := proc.Meminfo()
	if err != nil || host.MemTotalBytes == nil {
		t.Fatalf("read /proc/meminfo: %v", err)
	}
	// 256 MiB, or a quarter of a small guest's memory (page-aligned).
	limit := min(uint64(256*mib), *host.MemTotalBytes/4) &^ 4095
	file := filepath.Join(layout.Unified, parent, "memory.max")
	if layout.Mode == cgroups.ModeHybrid {
		file = filepath.Join(layout.Memory, parent, "memory.limit_in_bytes")
	}
	if err := os.WriteFile(file, []byte(strconv.FormatUint(limit, 10)), 0o644); err != nil {
		t.Fatalf("set the limit: %v", err)
	}
	m, err := New(Config{Mode: string(layout.Mode), CgroupRoot: rels[0], Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Sample(time.Now()); err != nil {
		t.Fatal(err)
	}
	n := m.Node()
	if n.Stats.MemLimitBytes != limit {
		t.Errorf("node total %d, want the cgroup's limit %d", n.Stats.MemLimitBytes, limit)
	}
	// Nothing runs in the cgroup: (nearly) all of it is available, unless
	// the host has less.
	after, err := proc.Meminfo()
	if err != nil || after.MemAvailableBytes == nil {
		t.Fatalf("read /proc/meminfo: %v", err)
	}
	if a := n.Stats.MemAvailableBytes; a > limit || a < min(limit-min(limit, 16*mib), *after.MemAvailableBytes/2) {
		t.Errorf("node available %d, want at most %d and within 16 MiB of it (or of the host's %d)", a, limit, *after.MemAvailableBytes)
	}
	if m.nodeBound.chosen != 0 {
		t.Errorf("bounding cgroup %d (%v), want the parent", m.nodeBound.chosen, m.nodeBound.dirs)
	}
}
