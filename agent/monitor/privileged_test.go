package monitor

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/internal/privileged"
	"golang.org/x/sys/unix"
)

const realMountpoint = "/sys/fs/cgroup"

// helperEnv makes the test binary act as a CPU-bound task (see TestMain).
const helperEnv = "SLACKLINE_MONITOR_TEST_HELPER"

// TestMain turns the test binary into the helper task when helperEnv is
// set: it waits for a byte on stdin (sent once it is in its cgroups, so
// what it does next is charged to them), touches 32 MiB, says so with a byte
// on stdout, and spins.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		var b [1]byte
		if _, err := io.ReadFull(os.Stdin, b[:]); err != nil {
			os.Exit(3)
		}
		mem := make([]byte, 32<<20)
		for i := range mem {
			mem[i] = byte(i)
		}
		if _, err := os.Stdout.Write(b[:]); err != nil {
			os.Exit(3)
		}
		for x := 0; ; x++ {
			mem[x%len(mem)]++
		}
	}
	os.Exit(m.Run())
}

// realCgroups creates <hierarchy>/slackline-<prefix>-<rand>/c0..c<n-1> in
// every hierarchy the host's layout has (and the v1 cpuacct hierarchy when
// it is mounted apart), removed at cleanup. It returns the layout and the
// relative paths.
func realCgroups(tb testing.TB, prefix string, n int) (cgroups.Layout, []string) {
	tb.Helper()
	layout, err := cgroups.Detect(realMountpoint)
	if err != nil {
		tb.Fatalf("detect cgroups: %v", err)
	}
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		tb.Fatal(err)
	}
	root := "slackline-" + prefix + "-" + hex.EncodeToString(suffix[:])
	hierarchies := []string{layout.Unified}
	if layout.Mode == cgroups.ModeHybrid {
		hierarchies = append(hierarchies, layout.CPU, layout.Memory)
		if layout.Pids != "" {
			hierarchies = append(hierarchies, layout.Pids) // PathsOf names it: tasks join it too
		}
		if cpuacct := filepath.Join(realMountpoint, "cpuacct"); !sameDir(cpuacct, layout.CPU) {
			hierarchies = append(hierarchies, cpuacct)
		}
	}
	var rels []string
	for i := range n {
		rels = append(rels, filepath.Join(root, "c"+strconv.Itoa(i)))
	}
	tb.Cleanup(func() {
		for _, h := range hierarchies {
			for _, rel := range rels {
				removeCgroup(tb, filepath.Join(h, rel))
			}
			removeCgroup(tb, filepath.Join(h, root))
		}
	})
	for _, h := range hierarchies {
		for _, rel := range rels {
			if err := os.MkdirAll(filepath.Join(h, rel), 0o755); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if layout.Mode == cgroups.ModeV2 {
		// As the containerizer does for its root: without this the
		// containers have no memory.* or cpu.max files on pure v2.
		if err := os.WriteFile(filepath.Join(layout.Unified, root, "cgroup.subtree_control"), []byte("+cpu +memory +pids"), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return layout, rels
}

func sameDir(a, b string) bool {
	ia, errA := os.Stat(a)
	ib, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(ia, ib)
}

// removeCgroup removes an (empty) cgroup, retrying while its last process
// is being reaped.
func removeCgroup(tb testing.TB, dir string) {
	for range 50 {
		err := os.Remove(dir)
		if err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Errorf("could not remove cgroup %s", dir)
}

// pinToOneCPU pins every thread of pid to the first CPU it may run on
// (after its cgroup moves: joining a cpuset resets a task's affinity).
// A cgroup's CPU pressure averages each CPU's stall time weighted by the
// time the group had work on that CPU, so a thread waiting on two CPUs in
// turn is reported up to half as waiting; on one CPU the figure is exact.
// Threads the helper starts later inherit the pin from their creator; the
// list is read again until it stops growing. It returns the CPU.
func pinToOneCPU(t *testing.T, pid int) int {
	t.Helper()
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(pid, &allowed); err != nil {
		t.Fatalf("the helper's CPU affinity: %v", err)
	}
	cpu := -1
	for i := 0; i < 1024 && cpu < 0; i++ {
		if allowed.IsSet(i) {
			cpu = i
		}
	}
	if cpu < 0 {
		t.Fatal("the helper may run on no CPU")
	}
	var one unix.CPUSet
	one.Set(cpu)
	pinned := map[int]bool{}
	for {
		entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatalf("the helper's threads: %v", err)
		}
		grew := false
		for _, e := range entries {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || pinned[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &one); err != nil && !errors.Is(err, unix.ESRCH) {
				t.Fatalf("pin the helper's thread %d to CPU %d: %v", tid, cpu, err)
			}
			pinned[tid], grew = true, true
		}
		if !grew {
			return cpu
		}
	}
}

func TestRealCgroups(t *testing.T) {
	privileged.Require(t)
	layout, rels := realCgroups(t, "montest", 1)
	rel := rels[0]

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	pid := []byte(strconv.Itoa(cmd.Process.Pid))
	procsFiles := layout.PathsOf(rel).ProcsFiles()
	if cpuacct := filepath.Join(realMountpoint, "cpuacct", rel, "cgroup.procs"); layout.Mode == cgroups.ModeHybrid && fileExists(cpuacct) {
		procsFiles = append(procsFiles, cpuacct)
	}
	for _, procs := range procsFiles {
		if err := os.WriteFile(procs, pid, 0o644); err != nil {
			t.Fatalf("move the helper into %s: %v", procs, err)
		}
	}
	cpu := pinToOneCPU(t, cmd.Process.Pid)
	if _, err := stdin.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
	// Sampling starts once the 32 MiB are touched (that took more than
	// the second sampled in an emulated guest).
	if _, err := io.ReadFull(stdout, make([]byte, 1)); err != nil {
		t.Fatalf("the helper did not report its memory touched: %v", err)
	}

	fi, err := os.Stat(filepath.Join(layout.Unified, rel))
	if err != nil {
		t.Fatal(err)
	}
	inode := fi.Sys().(*syscall.Stat_t).Ino
	ebpf := &fakeEBPF{}
	// Like the programs, the fake says the spinning helper is running: the
	// monitor reads the CPU files of running containers only.
	ebpf.set(inode, EBPFStats{OnCPU: time.Second, Running: true, Sched: true})
	m, err := New(Config{Mode: string(layout.Mode), EBPF: ebpf, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.SetTargets([]Target{{ID: "c0", TaskID: "spin", CgroupPath: rel, MemLimit: 1 << 30}})

	// The helper's CPU time from its threads' /proc/PID/task/TID/schedstat,
	// the scheduler's own nanoseconds, as the cgroup's usage is:
	// /proc/PID/stat counts ticks, which a loaded emulated guest misses
	// (6.1 guest: 0.68 s by ticks against 0.84 s in the cgroup). Per
	// thread, so that the growth is summed thread by thread (a thread
	// that appears counts from zero); never mixed with the tick count: a
	// 6.1 guest once read 0.27 s for the helper against 2.09 s in the
	// cgroup, which a schedstat total minus a tick total gives.
	type threadTimes struct{ run, wait int64 } // schedstat's first two fields, ns
	helperThreads := func() map[string]threadTimes {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", cmd.Process.Pid))
		if err != nil || len(tasks) == 0 {
			t.Fatalf("the helper's threads' schedstat: %v (%d files)", err, len(tasks))
		}
		ns := make(map[string]threadTimes, len(tasks))
		for _, f := range tasks {
			data, err := os.ReadFile(f)
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue // a thread that ended meanwhile
			}
			var tt threadTimes
			if _, err2 := fmt.Sscanf(string(data), "%d %d", &tt.run, &tt.wait); err != nil || err2 != nil {
				t.Fatalf("%s: %q, %v, %v", f, data, err, err2)
			}
			ns[filepath.Base(filepath.Dir(f))] = tt
		}
		return ns
	}
	grown := func(before, after map[string]threadTimes) (run, wait float64, ended int) {
		for tid, n := range after {
			run += float64(n.run-before[tid].run) / 1e9
			wait += float64(n.wait-before[tid].wait) / 1e9
		}
		for tid := range before {
			if _, ok := after[tid]; !ok {
				ended++
			}
		}
		return run, wait, ended
	}

	// The helper's threads are read just before and just after the first
	// and the last samples: the cgroup's growth between those samples lies
	// between the helper's growth from just after the first to just before
	// the last (inner) and from just before the first to just after the
	// last (outer). A slow guest spends a good part of a second between a
	// sample and a reading.
	outerStart := helperThreads()
	start := time.Now()
	if err := m.Sample(start); err != nil {
		t.Fatal(err)
	}
	firstDone := time.Now()
	helperStart := helperThreads()
	takenStart := takenSecs(t, cpu)
	first, _ := m.Latest("c0")
	// Let the helper run about a second; sample every 100 ms meanwhile.
	var last Usage
	var innerEnd map[string]threadTimes
	var integral float64 // sum of rate x interval: must equal the usage growth
	var lastStart, lastDone time.Time
	// At least once: a slow (emulated, loaded) host may have spent the
	// second already. And until a sample reads the PSI files anew: they are
	// read at most once per refreshInterval grid step and repeated in
	// between (a repeat shares the previous message), so a window ending on
	// a repeat would compare a second of CPU time with the stalls of part
	// of it (CI under load: 0.556 s + 0.136 s in 1.01 s, the pressure read
	// mid-window).
	for first, freshPSI := true, false; first || time.Since(start) < time.Second || !freshPSI; first = false {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no sample read the PSI files anew in %v", time.Since(start))
		}
		time.Sleep(100 * time.Millisecond)
		prev, _ := m.Latest("c0")
		innerEnd = helperThreads()
		lastStart = time.Now()
		if err := m.Sample(lastStart); err != nil {
			t.Fatal(err)
		}
		lastDone = time.Now()
		last, _ = m.Latest("c0")
		integral += last.CPURate * last.Time.Sub(prev.Time).Seconds()
		freshPSI = last.Stats.CpuPressure != prev.Stats.CpuPressure
	}
	helperEnd := helperThreads()
	takenEnd := takenSecs(t, cpu)
	stolen, interrupted := takenEnd.steal-takenStart.steal, takenEnd.irq-takenStart.irq
	helperUsed, helperWaited, ended := grown(helperStart, innerEnd)
	outerUsed, _, _ := grown(outerStart, helperEnd)
	if ended > 0 {
		// Its time after the first reading is unknown: the helper's
		// figure is then a lower bound only.
		t.Logf("%d of the helper's %d threads ended while sampled", ended, len(helperStart))
	}
	elapsed := last.Time.Sub(first.Time).Seconds()
	used := last.Stats.CpusUsageSecs - first.Stats.CpusUsageSecs
	waited := last.Stats.CpuPressure.GetSomeTotalSecs() - first.Stats.CpuPressure.GetSomeTotalSecs()
	t.Logf("%s layout: %.3f CPU s (the helper's own count: %.3f-%.3f s) and %.3f s waiting for a CPU in %.3f s; "+
		"user %.3f s, system %.3f s; rss %d, cache %d, usage %d",
		layout.Mode, used, helperUsed, outerUsed, waited, elapsed, last.Stats.CpusUserTimeSecs, last.Stats.CpusSystemTimeSecs,
		last.Stats.MemRssBytes, last.Stats.MemCacheBytes, last.MemUsage)
	// The cgroup's CPU time is the helper's (its /proc stat counts in 10 ms
	// ticks, sampled slightly apart).
	if used < helperUsed-0.05-0.1*helperUsed || (ended == 0 && used > outerUsed+0.05+0.1*outerUsed) {
		t.Errorf("cgroup CPU time grew %.3f s, the helper's own CPU time %.3f-%.3f s", used, helperUsed, outerUsed)
	}
	// One spinning thread is always either on a CPU or waiting for one: CPU
	// time plus CPU pressure ("some") is about the elapsed time, however
	// loaded the machine is (about 1 core-second per second when idle).
	// PSI aggregates per-CPU stall states, so on a busy multi-CPU host it
	// can count more waiting than one thread can do (seen: 1.06 s running
	// plus 0.25 s waiting in 1.06 s): the upper bound allows for that.
	// Time the hypervisor took from this (virtual) machine's CPUs is
	// neither: the thread was "running" on a CPU that did not run. The
	// host-wide steal over the window bounds what it took from the thread.
	// Nor is a page fault: a test guest reads the helper's binary over 9p
	// from a starved emulator, and the thread then waits on I/O (io and
	// memory pressure), neither running nor waiting for a CPU; a 6.12
	// guest beside a host CPU hog showed 0.47 s + 0.12 s in 1.45 s. That
	// time counts towards the lower bound only. Nor is the time the
	// helper's CPU spent in interrupts and softirqs (with the kernel's IRQ
	// time accounting it is charged to no task): CI beside loopback-heavy
	// tests saw 0.556 s + 0.136 s in 1.01 s.
	stalled := last.Stats.IoPressure.GetSomeTotalSecs() - first.Stats.IoPressure.GetSomeTotalSecs() +
		last.Stats.MemoryPressure.GetSomeTotalSecs() - first.Stats.MemoryPressure.GetSomeTotalSecs()
	// The samples' times are taken before they read the files, and a
	// starved guest spends seconds in one (a 6.12 guest beside host CPU
	// hogs: 0.38 s + 0.18 s in a 3.2 s window whose first sample took most
	// of it, the helper running 3.0 s from before the first to after the
	// last): the files' readings lie between the first sample's end and
	// the last one's start (inner) at least, and between the first's start
	// and the last's end (outer) at most.
	inner, outer := lastStart.Sub(firstDone).Seconds(), lastDone.Sub(start).Seconds()
	if total := used + waited; total+stalled < 0.7*inner-stolen-interrupted || total > 1.5*outer {
		t.Errorf("CPU time %.3f s + CPU pressure %.3f s over %.3f s (read between %.3f s and %.3f s apart; %.3f s stolen by the hypervisor, "+
			"%.3f s in interrupts on CPU %d, %.3f s stalled on I/O or memory; the helper's threads waited %.3f s for a CPU by their schedstat): want about one second per second",
			used, waited, elapsed, inner, outer, stolen, interrupted, cpu, stalled, helperWaited)
	}
	if diff := integral - used; diff < -1e-6 || diff > 1e-6 {
		t.Errorf("sum of CPURate x interval = %.6f s, want the usage growth %.6f s", integral, used)
	}
	if last.Stats.CpusUserTimeSecs <= 0 {
		t.Errorf("user time = %v, want > 0", last.Stats.CpusUserTimeSecs)
	}
	if last.Stats.MemRssBytes < 16<<20 || last.MemUsage < 16<<20 {
		t.Errorf("rss %d, usage %d; want both above 16 MiB (the helper touched 32 MiB)", last.Stats.MemRssBytes, last.MemUsage)
	}
	if last.Stats.MemLimitBytes != 1<<30 {
		t.Errorf("mem limit %d, want the target's (the cgroup has none)", last.Stats.MemLimitBytes)
	}
	if last.Stats.CpuPressure == nil || last.Stats.MemoryPressure == nil || last.Stats.IoPressure == nil {
		t.Errorf("no PSI from the v2 cgroup: %v", last.Stats)
	}
	if !last.EBPF || last.Stats.OncpuSecs != 1 {
		t.Errorf("eBPF figures not looked up by the cgroup's inode %d (asked %v)", inode, ebpf.asked)
	}
	if node := m.Node().Stats; node.MemAvailableBytes == 0 || node.CpusUsageSecs == 0 || node.CpusLimit < 1 {
		t.Errorf("node: %v", node)
	}

	// Once the cgroup is gone the container is dropped without error.
	cmd.Process.Kill()
	cmd.Wait()
	for _, procs := range procsFiles {
		removeCgroup(t, filepath.Dir(procs))
	}
	if err := m.Sample(time.Now()); err != nil {
		t.Errorf("sample after the cgroup was removed: %v", err)
	}
	if _, ok := m.Latest("c0"); ok {
		t.Error("a removed cgroup is still reported")
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// benchmarkTargets returns targets for rels.
func benchmarkTargets(rels []string) []Target {
	targets := make([]Target, len(rels))
	for i, rel := range rels {
		targets[i] = Target{ID: fmt.Sprintf("c%d", i), TaskID: fmt.Sprintf("t%d", i), CgroupPath: rel, CgroupID: uint64(i + 1), CPULimit: 1}
	}
	return targets
}

// takenTimes is CPU time no task was charged for: what the hypervisor took
// from this (virtual) machine's CPUs, and what one CPU spent in interrupts
// and softirqs.
type takenTimes struct{ steal, irq float64 } // seconds

// takenSecs reads /proc/stat: steal from the first line (all CPUs, so an
// upper bound on what one thread lost), irq and softirq from cpu's line.
func takenSecs(t *testing.T, cpu int) takenTimes {
	t.Helper()
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	field := func(line string, i int) float64 {
		fields := strings.Fields(line)
		if len(fields) < 9 {
			t.Fatalf("/proc/stat: unexpected line %q", line)
		}
		ticks, err := strconv.ParseFloat(fields[i], 64)
		if err != nil {
			t.Fatalf("/proc/stat field %d of %q: %v", i, line, err)
		}
		return ticks / 100 // USER_HZ
	}
	var taken takenTimes
	found := false
	for line := range strings.Lines(string(data)) {
		name, _, _ := strings.Cut(line, " ")
		switch name {
		case "cpu":
			taken.steal = field(line, 8)
		case "cpu" + strconv.Itoa(cpu):
			taken.irq = field(line, 6) + field(line, 7)
			found = true
		}
	}
	if !found {
		t.Fatalf("/proc/stat has no line for CPU %d", cpu)
	}
	return taken
}
