package monitor

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

var approx = []cmp.Option{protocmp.Transform(), cmpopts.EquateApprox(0, 1e-9)}

// wantContainerStats are the cgroupfs figures that v2Container and
// hybridContainer write for 2 s of CPU time (everything but eBPF and rates).
func wantContainerStats(now time.Time) *slacklinev1.ResourceStatistics {
	return &slacklinev1.ResourceStatistics{
		Timestamp:             timestamppb.New(now),
		CpusUserTimeSecs:      1.5,
		CpusSystemTimeSecs:    0.5,
		CpusUsageSecs:         2,
		CpusLimit:             1.5,
		CpusNrPeriods:         40,
		CpusNrThrottled:       7,
		CpusThrottledTimeSecs: 0.35,
		MemRssBytes:           52428800,
		MemCacheBytes:         41943040,
		MemAnonBytes:          53000000,
		MemWorkingSetBytes:    92428800,
		MemLimitBytes:         268435456,
		OomEvents:             2,
		CpuPressure: &slacklinev1.Pressure{SomeAvg10: 12.5, SomeAvg60: 0.5, SomeAvg300: 0.25, SomeTotalSecs: 3,
			FullAvg10: 1.25, FullAvg60: 0.05, FullAvg300: 0.02, FullTotalSecs: 1.5},
		MemoryPressure: &slacklinev1.Pressure{SomeAvg10: 0.5, SomeAvg60: 0.5, SomeAvg300: 0.25, SomeTotalSecs: 0.2,
			FullAvg10: 0.25, FullAvg60: 0.05, FullAvg300: 0.02, FullTotalSecs: 0.1},
		IoPressure: &slacklinev1.Pressure{SomeAvg10: 2, SomeAvg60: 0.5, SomeAvg300: 0.25, SomeTotalSecs: 0.7,
			FullAvg10: 1, FullAvg60: 0.05, FullAvg300: 0.02, FullTotalSecs: 0.6},
	}
}

// layouts runs a test against both fake layouts. write creates a container
// with the given CPU time in microseconds.
var layouts = []struct {
	mode  string
	write func(tb testing.TB, cgroupRoot, rel string, usageUsec uint64)
	// unified is the v2 tree under the cgroup mountpoint.
	unified string
}{
	{"v2", v2Container, ""},
	{"hybrid", hybridContainer, "unified"},
}

func TestSampleEveryField(t *testing.T) {
	t.Parallel()
	for _, l := range layouts {
		t.Run(l.mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ebpf := &fakeEBPF{}
			m := newTestMonitor(t, l.mode, dir, ebpf, 10)
			cg := filepath.Join(dir, "cgroup")
			rel := "slackline/guaranteed/c1"
			l.write(t, cg, rel, 2_000_000)
			const cgroupID = 4242
			m.SetTargets([]Target{{ID: "c1", TaskID: "task-1", CgroupPath: rel, CgroupID: cgroupID, CPULimit: 1.5, MemLimit: 1 << 30}})

			first := EBPFStats{OnCPU: 1900 * time.Millisecond, Wakeups: 10, RunqBuckets: make([]uint64, 32),
				DelayedByRevocable: 250 * time.Millisecond, NetRxBytes: 1000, NetRxPackets: 10, NetTxBytes: 2000, NetTxPackets: 20,
				ReclaimStall: 30 * time.Millisecond, OOMKills: 1}
			first.RunqBuckets[10] = 10
			ebpf.set(cgroupID, first)
			if err := m.Sample(t0); err != nil {
				t.Fatal(err)
			}
			u, ok := m.Latest("c1")
			if !ok {
				t.Fatal("no sample after the first pass")
			}
			want := wantContainerStats(t0)
			want.OncpuSecs = 1.9
			want.DelayedByRevocableSecs = 0.25
			want.NetRxBytes, want.NetRxPackets, want.NetTxBytes, want.NetTxPackets = 1000, 10, 2000, 20
			want.MemReclaimStallSecs = 0.03
			want.Runqueue = &slacklinev1.RunQueueLatency{BucketsLog2Ns: []uint64{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10}, Wakeups: 10}
			if diff := cmp.Diff(want, u.Stats, approx...); diff != "" {
				t.Errorf("first sample (-want +got):\n%s", diff)
			}
			if u.CPURate != 0 || u.RunqP50 != 0 || u.RunqP99 != 0 {
				t.Errorf("first sample has interval figures: rate %v p50 %v p99 %v; want zeros", u.CPURate, u.RunqP50, u.RunqP99)
			}
			if u.ContainerID != "c1" || u.TaskID != "task-1" || !u.EBPF || u.MemUsage != 104857600 || !u.Time.Equal(t0) {
				t.Errorf("first sample: %+v", u)
			}

			// 500 ms later: 0.5 s more CPU time, 98 wakeups in [1024, 2048) ns
			// and 2 in [2^20, 2^21) ns, more OOM kills seen by eBPF than by the cgroup.
			l.write(t, cg, rel, 2_500_000)
			second := first
			second.RunqBuckets = make([]uint64, 32)
			second.RunqBuckets[10], second.RunqBuckets[20] = 108, 2
			second.Wakeups = 110
			second.OOMKills = 5
			ebpf.set(cgroupID, second)
			t1 := t0.Add(500 * time.Millisecond)
			if err := m.Sample(t1); err != nil {
				t.Fatal(err)
			}
			u, _ = m.Latest("c1")
			if got, want := u.CPURate, 1.0; got < want-1e-9 || got > want+1e-9 {
				t.Errorf("CPURate = %v, want %v", got, want)
			}
			if u.Stats.CpusRate != u.CPURate {
				t.Errorf("Stats.CpusRate = %v, want %v", u.Stats.CpusRate, u.CPURate)
			}
			// p50: rank 50 of 100 is the 50th of 98 in [1024, 2048): 1024 + 50/98*1024.
			frac := 50.0 / 98
			if got, want := u.RunqP50, time.Duration(1024+frac*1024); got != want {
				t.Errorf("RunqP50 = %v, want %v", got, want)
			}
			// p99: rank 99 is the first of the 2 in [2^20, 2^21): half-way.
			if got, want := u.RunqP99, time.Duration(1<<20+1<<19); got != want {
				t.Errorf("RunqP99 = %v, want %v", got, want)
			}
			if u.Stats.Runqueue.P50Seconds != u.RunqP50.Seconds() || u.Stats.Runqueue.P99Seconds != u.RunqP99.Seconds() {
				t.Errorf("Stats.Runqueue = %v, want p50 %v p99 %v", u.Stats.Runqueue, u.RunqP50, u.RunqP99)
			}
			if u.Stats.OomEvents != 5 {
				t.Errorf("OomEvents = %d, want 5 (the larger of the cgroup's 2 and eBPF's 5)", u.Stats.OomEvents)
			}
			if got := len(u.Stats.Runqueue.BucketsLog2Ns); got != 21 {
				t.Errorf("buckets kept: %d, want 21 (trailing zeros trimmed)", got)
			}
			h := m.History(make([]Point, 0, 2), "c1")
			wantPoint := Point{Time: t1, CPURate: 1, CPUSecs: 2.5, ThrottledSecs: 0.35, MemRSS: 52428800, MemCache: 41943040, MemWorkingSet: 92428800,
				MemUsage: 104857600, RunqP50: u.RunqP50, RunqP99: u.RunqP99, DelayedByRevocableSecs: 0.25,
				CPUPressureSecs: 3, MemoryPressureSecs: 0.2, IOPressureSecs: 0.7, OOMEvents: 5}
			if len(h) != 2 {
				t.Fatalf("history has %d points, want 2", len(h))
			}
			if diff := cmp.Diff(wantPoint, h[1], approx...); diff != "" {
				t.Errorf("history point (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSampleWithoutEBPF(t *testing.T) {
	t.Parallel()
	for _, l := range layouts {
		t.Run(l.mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			m := newTestMonitor(t, l.mode, dir, nil, 10)
			rel := "slackline/revocable/c2"
			l.write(t, filepath.Join(dir, "cgroup"), rel, 2_000_000)
			m.SetTargets([]Target{{ID: "c2", CgroupPath: rel, CPULimit: 1.5, Revocable: true}})
			if err := m.Sample(t0); err != nil {
				t.Fatal(err)
			}
			u, _ := m.Latest("c2")
			if diff := cmp.Diff(wantContainerStats(t0), u.Stats, approx...); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if u.EBPF || !u.Revocable {
				t.Errorf("EBPF = %v, Revocable = %v; want false, true", u.EBPF, u.Revocable)
			}
		})
	}
}

func TestHybridCpuacctFallback(t *testing.T) {
	t.Parallel()
	// Kernels without core cpu.stat in the v2 tree: CPU time from cpuacct.
	dir := t.TempDir()
	m := newTestMonitor(t, "hybrid", dir, nil, 10)
	cg := filepath.Join(dir, "cgroup")
	rel := "slackline/guaranteed/old"
	hybridContainer(t, cg, rel, 0)
	if err := os.Remove(filepath.Join(cg, "unified", rel, "cpu.stat")); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, cg, map[string]string{
		"cpuacct/" + rel + "/cpuacct.usage": "3000000000\n",
		"cpuacct/" + rel + "/cpuacct.stat":  "user 250\nsystem 50\n",
	})
	m.SetTargets([]Target{{ID: "old", CgroupPath: rel}})
	if err := m.Sample(t0); err != nil {
		t.Fatal(err)
	}
	u, _ := m.Latest("old")
	got := [3]float64{u.Stats.CpusUsageSecs, u.Stats.CpusUserTimeSecs, u.Stats.CpusSystemTimeSecs}
	if want := [3]float64{3, 2.5, 0.5}; got != want {
		t.Errorf("usage, user, system = %v, want %v", got, want)
	}
	if u.Stats.CpusThrottledTimeSecs != 0.35 {
		t.Errorf("throttled = %v, want 0.35 from the v1 cpu.stat", u.Stats.CpusThrottledTimeSecs)
	}
}

func TestHybridWithoutAnyCPUTime(t *testing.T) {
	t.Parallel()
	// No core cpu.stat and no cpuacct cgroup (the containerizer does not
	// create one where cpuacct is mounted apart): the container is kept,
	// with its other figures.
	dir := t.TempDir()
	m := newTestMonitor(t, "hybrid", dir, nil, 10)
	cg := filepath.Join(dir, "cgroup")
	rel := "slackline/guaranteed/x"
	hybridContainer(t, cg, rel, 0)
	if err := os.Remove(filepath.Join(cg, "unified", rel, "cpu.stat")); err != nil {
		t.Fatal(err)
	}
	m.SetTargets([]Target{{ID: "x", CgroupPath: rel}})
	if err := m.Sample(t0); err != nil {
		t.Fatal(err)
	}
	u, ok := m.Latest("x")
	if !ok || u.Stats.CpusUsageSecs != 0 || u.Stats.MemRssBytes != 52428800 {
		t.Errorf("ok %v, stats %v; want the container kept with memory figures", ok, u.Stats)
	}
}

func TestNode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := newTestMonitor(t, "v2", dir, nil, 10)
	if err := m.Sample(t0); err != nil {
		t.Fatal(err)
	}
	// /proc/stat: user 1000+10 nice, system 200 + irq 4 + softirq 6, steal 8 (ticks of 10 ms).
	want := &slacklinev1.ResourceStatistics{
		Timestamp:          timestamppb.New(t0),
		CpusUserTimeSecs:   10.1,
		CpusSystemTimeSecs: 2.1,
		CpusUsageSecs:      12.28,
		CpusLimit:          2,
		MemLimitBytes:      8000000 * 1024,
		MemAvailableBytes:  6000000 * 1024,
		LoadAvg_1:          1.5, LoadAvg_5: 0.75, LoadAvg_15: 0.25,
		CpuPressure:    &slacklinev1.Pressure{SomeAvg10: 1, SomeAvg60: 2, SomeAvg300: 3, SomeTotalSecs: 4},
		MemoryPressure: &slacklinev1.Pressure{SomeAvg10: 0.1, SomeAvg60: 0.2, SomeAvg300: 0.3, SomeTotalSecs: 0.5, FullAvg10: 0.01, FullAvg60: 0.02, FullAvg300: 0.03, FullTotalSecs: 0.25},
		IoPressure:     &slacklinev1.Pressure{SomeAvg10: 5.5, SomeAvg60: 6.6, SomeAvg300: 7.7, SomeTotalSecs: 9, FullAvg10: 4.4, FullAvg60: 3.3, FullAvg300: 2.2, FullTotalSecs: 1},
	}
	node := m.Node()
	if diff := cmp.Diff(want, node.Stats, approx...); diff != "" {
		t.Errorf("node (-want +got):\n%s", diff)
	}
	if node.MemUsage != 2000000*1024 {
		t.Errorf("node MemUsage = %d, want MemTotal - MemAvailable", node.MemUsage)
	}

	// Two seconds later the node used 3 more CPU seconds: 1.5 cores.
	fakeProc(t, filepath.Join(dir, "proc"), 1300)
	if err := m.Sample(t0.Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := m.Node().CPURate; got < 1.5-1e-9 || got > 1.5+1e-9 {
		t.Errorf("node CPURate = %v, want 1.5", got)
	}
}

func TestNodeWithoutPSI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := newTestMonitor(t, "v2", dir, nil, 10)
	if err := os.RemoveAll(filepath.Join(dir, "proc", "pressure")); err != nil {
		t.Fatal(err)
	}
	if err := m.Sample(t0); err != nil {
		t.Fatalf("a kernel without PSI is not an error: %v", err)
	}
	if st := m.Node().Stats; st.CpuPressure != nil || st.MemAvailableBytes == 0 {
		t.Errorf("node without PSI: %v", st)
	}
}

// enodevFile reads like a control file of a removed cgroup.
type enodevFile struct{}

func (enodevFile) ReadAt([]byte, int64) (int, error) {
	return 0, &os.PathError{Op: "read", Path: "cpu.stat", Err: unix.ENODEV}
}
func (enodevFile) Close() error { return nil }

func TestVanishedContainerIsDropped(t *testing.T) {
	t.Parallel()
	for _, l := range layouts {
		for _, open := range []bool{true, false} {
			name := l.mode + "/files not open"
			if open {
				name = l.mode + "/open files return ENODEV"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				dir := t.TempDir()
				m := newTestMonitor(t, l.mode, dir, nil, 10)
				cg := filepath.Join(dir, "cgroup")
				l.write(t, cg, "r/guaranteed/a", 1000)
				l.write(t, cg, "r/guaranteed/b", 1000)
				m.SetTargets([]Target{{ID: "a", CgroupPath: "r/guaranteed/a"}, {ID: "b", CgroupPath: "r/guaranteed/b"}})
				if err := m.Sample(t0); err != nil {
					t.Fatal(err)
				}
				for _, sub := range []string{"", "cpu", "memory", "unified"} {
					if err := os.RemoveAll(filepath.Join(cg, sub, "r/guaranteed/a")); err != nil {
						t.Fatal(err)
					}
				}
				if open {
					// What cgroupfs answers on descriptors of a removed cgroup
					// (tmpfs would still read the unlinked files).
					for _, f := range controlFiles(m.containers["a"]) {
						if f.f != nil {
							f.f.Close()
							f.f = enodevFile{}
						}
					}
				} else {
					m.Close()
				}
				if err := m.Sample(t0.Add(time.Second)); err != nil {
					t.Fatalf("a vanished container must not fail the pass: %v", err)
				}
				if _, ok := m.Latest("a"); ok {
					t.Error("vanished container a still has a sample")
				}
				if h := m.History(nil, "a"); len(h) != 0 {
					t.Errorf("vanished container a still has %d samples of history", len(h))
				}
				if h := m.History(nil, "b"); len(h) != 2 {
					t.Errorf("container b has %d samples, want 2", len(h))
				}
				// Back (same target, cgroup recreated): measured afresh.
				l.write(t, cg, "r/guaranteed/a", 5000)
				if err := m.Sample(t0.Add(2 * time.Second)); err != nil {
					t.Fatal(err)
				}
				u, ok := m.Latest("a")
				if !ok || u.CPURate != 0 || u.Stats.CpusUsageSecs != 0.005 {
					t.Errorf("recreated container a: ok %v, %+v", ok, u)
				}
			})
		}
	}
}

func TestReadErrorIsReported(t *testing.T) {
	t.Parallel()
	// A read failing for another reason than a removed cgroup (here: a
	// descriptor closed behind the monitor's back) is an error of the pass.
	dir := t.TempDir()
	m := newTestMonitor(t, "v2", dir, nil, 10)
	cg := filepath.Join(dir, "cgroup")
	v2Container(t, cg, "r/guaranteed/a", 1000)
	m.SetTargets([]Target{{ID: "a", CgroupPath: "r/guaranteed/a"}})
	if err := m.Sample(t0); err != nil {
		t.Fatal(err)
	}
	c := m.containers["a"]
	f, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	cpuStat := controlFiles(c)[0]
	if filepath.Base(cpuStat.path) != "cpu.stat" || cpuStat.f == nil {
		t.Fatalf("the first control file is %s (open: %v), want the open cpu.stat", cpuStat.path, cpuStat.f != nil)
	}
	cpuStat.f = f // reads fail with "file already closed"
	if err := m.Sample(t0.Add(time.Second)); err == nil {
		t.Error("a read error that is not ENODEV/ENOENT must be reported")
	}
	if u, _ := m.Latest("a"); !u.Time.Equal(t0) {
		t.Errorf("a partial sample was published (latest at %v, want the first pass's)", u.Time)
	}
	// The descriptor was dropped: the next pass reopens the file.
	if err := m.Sample(t0.Add(2 * time.Second)); err != nil {
		t.Errorf("after a failed read the file is reopened: %v", err)
	}
}

func TestMissingOptionalFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := newTestMonitor(t, "v2", dir, nil, 10)
	cg := filepath.Join(dir, "cgroup")
	// A v2 cgroup without the memory controller and a kernel without PSI.
	writeFiles(t, cg, map[string]string{"r/guaranteed/a/cpu.stat": "usage_usec 1000000\nuser_usec 600000\nsystem_usec 400000\n"})
	m.SetTargets([]Target{{ID: "a", CgroupPath: "r/guaranteed/a", MemLimit: 1 << 20}})
	for i := range 2 {
		if err := m.Sample(t0.Add(time.Duration(i) * time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	u, ok := m.Latest("a")
	if !ok {
		t.Fatal("no sample")
	}
	want := &slacklinev1.ResourceStatistics{Timestamp: timestamppb.New(t0.Add(time.Second)),
		CpusUsageSecs: 1, CpusUserTimeSecs: 0.6, CpusSystemTimeSecs: 0.4, MemLimitBytes: 1 << 20}
	if diff := cmp.Diff(want, u.Stats, approx...); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestUnlimitedMemoryFallsBackToTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode, file, content string
	}{
		{"v2", "r/g/a/memory.max", "max\n"},
		{"hybrid", "memory/r/g/a/memory.limit_in_bytes", "9223372036854771712\n"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			m := newTestMonitor(t, tc.mode, dir, nil, 10)
			cg := filepath.Join(dir, "cgroup")
			if tc.mode == "v2" {
				v2Container(t, cg, "r/g/a", 1)
			} else {
				hybridContainer(t, cg, "r/g/a", 1)
			}
			writeFiles(t, cg, map[string]string{tc.file: tc.content})
			m.SetTargets([]Target{{ID: "a", CgroupPath: "r/g/a", MemLimit: 12345}})
			if err := m.Sample(t0); err != nil {
				t.Fatal(err)
			}
			if u, _ := m.Latest("a"); u.Stats.MemLimitBytes != 12345 {
				t.Errorf("MemLimitBytes = %d, want the target's 12345", u.Stats.MemLimitBytes)
			}
		})
	}
}

func TestHistoryBounded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := newTestMonitor(t, "v2", dir, nil, 4)
	cg := filepath.Join(dir, "cgroup")
	m.SetTargets([]Target{{ID: "a", CgroupPath: "r/g/a"}})
	for i := range 7 {
		v2Container(t, cg, "r/g/a", uint64(i)*100_000)
		if err := m.Sample(t0.Add(time.Duration(i) * 100 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		h := m.History(nil, "a")
		if want := min(i+1, 4); len(h) != want {
			t.Fatalf("after %d passes: %d samples, want %d", i+1, len(h), want)
		}
		for k, u := range h {
			wantTime := t0.Add(time.Duration(i+1-len(h)+k) * 100 * time.Millisecond)
			if !u.Time.Equal(wantTime) {
				t.Fatalf("after %d passes, sample %d at %v, want %v (oldest first)", i+1, k, u.Time, wantTime)
			}
		}
		// HistorySince returns the tail after a time: all, the newest
		// point only, nothing.
		if all := m.HistorySince(nil, "a", time.Time{}); !slices.Equal(all, h) {
			t.Fatalf("after %d passes: HistorySince(zero) = %d points, want History's %d", i+1, len(all), len(h))
		}
		if i > 0 {
			if tail := m.HistorySince(nil, "a", h[len(h)-2].Time); len(tail) != 1 || tail[0] != h[len(h)-1] {
				t.Fatalf("after %d passes: HistorySince(previous pass) = %v, want the newest point only", i+1, tail)
			}
		}
		if none := m.HistorySince(nil, "a", h[len(h)-1].Time); len(none) != 0 {
			t.Fatalf("after %d passes: HistorySince(newest) = %v, want nothing", i+1, none)
		}
	}
	for _, u := range m.History(nil, "a")[1:] {
		if u.CPURate < 1-1e-9 || u.CPURate > 1+1e-9 {
			t.Errorf("rate at %v = %v, want 1 core (0.1 s per 100 ms)", u.Time, u.CPURate)
		}
	}
}

func TestSetTargets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := newTestMonitor(t, "v2", dir, nil, 10)
	cg := filepath.Join(dir, "cgroup")
	v2Container(t, cg, "r/g/a", 1000)
	v2Container(t, cg, "r/g/a2", 1000)
	v2Container(t, cg, "r/g/b", 1000)
	m.SetTargets([]Target{{ID: "a", CgroupPath: "r/g/a", CPULimit: 1}, {ID: "b", CgroupPath: "r/g/b"}})
	if err := m.Sample(t0); err != nil {
		t.Fatal(err)
	}
	// a's limit changes (history kept), b goes, a2... is a new id.
	m.SetTargets([]Target{{ID: "a", CgroupPath: "r/g/a", CPULimit: 0.5}, {ID: "c", CgroupPath: "r/g/a2"}})
	if _, ok := m.Latest("b"); ok {
		t.Error("b is still reported after it left the targets")
	}
	if _, ok := m.Latest("c"); ok {
		t.Error("c has a sample before any pass saw it")
	}
	if err := m.Sample(t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if h := m.History(nil, "a"); len(h) != 2 {
		t.Errorf("a's history after a limit change: %d samples, want 2", len(h))
	}
	if u, _ := m.Latest("a"); u.Stats.CpusLimit != 0.5 {
		t.Errorf("cpus_limit = %v after the target changed, want 0.5", u.Stats.CpusLimit)
	}
	// Targets with unusable cgroup paths are ignored.
	m.SetTargets([]Target{{ID: "a", CgroupPath: "r/g/a"}, {ID: "x", CgroupPath: "../../etc"}, {ID: "y", CgroupPath: "/abs"}})
	if err := m.Sample(t0.Add(2 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := len(m.Usages()); got != 1 {
		t.Errorf("%d containers sampled, want 1 (invalid cgroup paths ignored)", got)
	}
	// A new cgroup path for the same id starts afresh.
	m.SetTargets([]Target{{ID: "a", CgroupPath: "r/g/a2"}})
	if h := m.History(nil, "a"); len(h) != 0 {
		t.Errorf("a moved to another cgroup kept %d samples", len(h))
	}
	if got := len(m.Usages()); got != 0 {
		t.Errorf("Usages() = %d entries before the next pass, want 0", got)
	}
}

func TestEBPFErrorKeepsCgroupFigures(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ebpf := &fakeEBPF{} // tracks nothing
	m := newTestMonitor(t, "v2", dir, ebpf, 10)
	v2Container(t, filepath.Join(dir, "cgroup"), "r/g/a", 2_000_000)
	m.SetTargets([]Target{{ID: "a", CgroupPath: "r/g/a", CgroupID: 7, CPULimit: 1.5}})
	if err := m.Sample(t0); err == nil {
		t.Error("an eBPF lookup failure must be reported")
	}
	u, ok := m.Latest("a")
	if !ok {
		t.Fatal("the cgroup figures must be published despite the eBPF failure")
	}
	if u.EBPF || u.Stats.Runqueue != nil {
		t.Errorf("EBPF = %v, Runqueue = %v; want no eBPF figures", u.EBPF, u.Stats.Runqueue)
	}
	if diff := cmp.Diff(wantContainerStats(t0), u.Stats, approx...); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestCgroupIDFromInode(t *testing.T) {
	t.Parallel()
	for _, l := range layouts {
		t.Run(l.mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ebpf := &fakeEBPF{}
			m := newTestMonitor(t, l.mode, dir, ebpf, 10)
			cg := filepath.Join(dir, "cgroup")
			l.write(t, cg, "r/g/a", 1)
			fi, err := os.Stat(filepath.Join(cg, l.unified, "r/g/a"))
			if err != nil {
				t.Fatal(err)
			}
			ino := fi.Sys().(*syscall.Stat_t).Ino
			ebpf.set(ino, EBPFStats{OnCPU: time.Second})
			m.SetTargets([]Target{{ID: "a", CgroupPath: "r/g/a"}})
			if err := m.Sample(t0); err != nil {
				t.Fatal(err)
			}
			if u, _ := m.Latest("a"); !u.EBPF || u.Stats.OncpuSecs != 1 {
				t.Errorf("eBPF figures not found by the v2 directory's inode %d (asked %v)", ino, ebpf.asked)
			}
		})
	}
}

func TestNewConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fakeProc(t, filepath.Join(dir, "proc"), 1)
	writeFiles(t, dir, map[string]string{"cgroup/cgroup.controllers": "cpu memory io\n"})
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr bool
		mode    string
	}{
		{"detects v2", Config{CgroupMountpoint: filepath.Join(dir, "cgroup")}, false, "v2"},
		{"explicit hybrid", Config{Mode: "hybrid", CgroupMountpoint: dir}, false, "hybrid"},
		{"unknown mode", Config{Mode: "v1"}, true, ""},
		{"interval too short", Config{Mode: "v2", Interval: time.Millisecond}, true, ""},
		{"no procfs", Config{Mode: "v2", ProcRoot: filepath.Join(dir, "nowhere")}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.cfg.ProcRoot == "" {
				tc.cfg.ProcRoot = filepath.Join(dir, "proc")
			}
			m, err := New(tc.cfg)
			if (err != nil) != tc.wantErr {
				t.Fatalf("New() error = %v, want error: %v", err, tc.wantErr)
			}
			if err == nil && m.Mode() != tc.mode {
				t.Errorf("Mode() = %q, want %q", m.Mode(), tc.mode)
			}
		})
	}
}

func TestBucketQuantile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		counts []uint64
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.99, 0},
		{"all zero", []uint64{0, 0, 0}, 0.5, 0},
		{"one bucket, median", []uint64{0, 0, 0, 4}, 0.5, 8 + 4},   // [8,16): half-way
		{"one bucket, p100", []uint64{0, 0, 0, 4}, 1, 16},          // upper bound
		{"p99 in the tail", []uint64{0, 99, 0, 0, 1}, 0.99, 2 + 2}, // rank 99 = last of bucket 1 = its upper bound
		{"p99 beyond", []uint64{0, 98, 0, 0, 2}, 0.99, 16 + 8},     // rank 99: first of 2 in [16,32)
		{"skips empty buckets", []uint64{10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10}, 0.75, 1024 + 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := bucketQuantile(tc.counts, tc.q); got != tc.want {
				t.Errorf("bucketQuantile(%v, %v) = %v, want %v", tc.counts, tc.q, got, tc.want)
			}
		})
	}
}

func TestBucketDeltas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		prev, cur, want []uint64
	}{
		{"growth", []uint64{1, 2, 3}, []uint64{2, 2, 5}, []uint64{1, 0, 2}},
		{"new buckets", []uint64{1}, []uint64{1, 0, 4}, []uint64{0, 0, 4}},
		{"reset", []uint64{5, 5}, []uint64{1, 7}, []uint64{1, 7}},
		{"no previous", nil, []uint64{3}, []uint64{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := bucketDeltas([]uint64{99, 99}, tc.prev, tc.cur)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestParsers(t *testing.T) {
	t.Parallel()
	some, full := parsePressure([]byte("some avg10=12.34 avg60=0.05 avg300=100.00 total=123456789\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=42\n"))
	if want := (psiLine{12.34, 0.05, 100, 123456789}); some != want {
		t.Errorf("some = %+v, want %+v", some, want)
	}
	if want := (psiLine{totalUsec: 42}); full != want {
		t.Errorf("full = %+v, want %+v", full, want)
	}
	for in, want := range map[string]uint64{"max\n": 0, "9223372036854771712\n": 0, "1048576\n": 1048576, "": 0} {
		if got := parseLimit([]byte(in)); got != want {
			t.Errorf("parseLimit(%q) = %d, want %d", in, got, want)
		}
	}
	if _, ok := parseUint([]byte("18446744073709551616")); ok {
		t.Error("parseUint accepted an overflowing value")
	}
	var keys []string
	forEachKey([]byte("a 1\nbad\nb x\nc 3"), func(k []byte, v uint64) { keys = append(keys, string(k)) })
	if diff := cmp.Diff([]string{"a", "c"}, keys); diff != "" {
		t.Errorf("forEachKey (-want +got):\n%s", diff)
	}
}

func TestLargeFileGrowsBuffer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := newTestMonitor(t, "v2", dir, nil, 10)
	cg := filepath.Join(dir, "cgroup")
	v2Container(t, cg, "r/g/a", 1)
	pad := make([]byte, 0, 20000)
	for len(pad) < 19000 {
		pad = append(pad, "padding_key 1\n"...)
	}
	writeFiles(t, cg, map[string]string{"r/g/a/memory.stat": string(pad) + "anon 77\n"})
	m.SetTargets([]Target{{ID: "a", CgroupPath: "r/g/a"}})
	if err := m.Sample(t0); err != nil {
		t.Fatal(err)
	}
	if u, _ := m.Latest("a"); u.Stats.MemRssBytes != 77 {
		t.Errorf("MemRssBytes = %d, want 77 from the end of a 19 KB memory.stat", u.Stats.MemRssBytes)
	}
}

func TestNodeInterval(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	m := newTestMonitor(t, "v2", dir, nil, 10) // Interval 1s: node every 1s
	if err := m.Sample(t0); err != nil {
		t.Fatal(err)
	}
	fakeProc(t, filepath.Join(dir, "proc"), 2000)
	if err := m.Sample(t0.Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if got := m.Node().Time; !got.Equal(t0) {
		t.Errorf("node sampled again after 100 ms (at %v); want at most once per NodeInterval", got)
	}
	if err := m.Sample(t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := m.Node(); !got.Time.Equal(t0.Add(time.Second)) || got.CPURate < 10-1e-9 || got.CPURate > 10+1e-9 {
		t.Errorf("node after 1 s: time %v, rate %v; want rate 10 (1000 ticks in 1 s)", got.Time, got.CPURate)
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	// Run with -race: sampling, target changes, reads and scrapes at once.
	dir := t.TempDir()
	ebpf := &fakeEBPF{}
	m := newTestMonitor(t, "hybrid", dir, ebpf, 5)
	cg := filepath.Join(dir, "cgroup")
	var targets []Target
	for i := range 5 {
		rel := "r/g/c" + string(rune('0'+i))
		hybridContainer(t, cg, rel, 1000)
		targets = append(targets, Target{ID: rel, CgroupPath: rel, CgroupID: uint64(i + 1)})
		ebpf.set(uint64(i+1), EBPFStats{RunqBuckets: []uint64{1, 2, 3}})
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector())
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			m.SetTargets(targets[:1+i%len(targets)])
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			m.Latest("r/g/c0")
			m.History(nil, "r/g/c1")
			m.Usages()
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
			}
		}
	})
	for i := range 200 {
		m.Sample(t0.Add(time.Duration(i) * 100 * time.Millisecond))
	}
	close(done)
	wg.Wait()
}
