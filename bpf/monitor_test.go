package bpf_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/internal/privileged"
)

func load(t testing.TB, cfg bpf.Config) *bpf.Monitor {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	m, err := bpf.Load(cfg)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return m
}

func stats(t testing.TB, m *bpf.Monitor, id uint64) bpf.CgroupStats {
	t.Helper()
	s, err := m.Stats(id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func within(got, want, tolerance float64) bool {
	return math.Abs(got-want) <= tolerance*want
}

// readKeyed reads "key value" lines (cpu.stat).
func readKeyed(t testing.TB, path, key string) uint64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == key {
			v, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("%s: no %s", path, key)
	return 0
}

func readUint(t testing.TB, path string) uint64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestTrackUntrack(t *testing.T) {
	privileged.Require(t)
	m := load(t, bpf.Config{})
	cg := newCgroup(t, testRoot(t), "c")
	if _, err := m.Stats(cg.id); !errors.Is(err, bpf.ErrNotTracked) {
		t.Fatalf("Stats of an untracked cgroup: %v, want ErrNotTracked", err)
	}
	if err := m.Track(cg.id, bpf.Class(9)); err == nil {
		t.Fatal("Track accepted class 9")
	}
	if err := m.Track(cg.id, bpf.ClassGuaranteed); err != nil {
		t.Fatal(err)
	}
	if err := m.Track(cg.id, bpf.ClassRevocable); err != nil {
		t.Fatalf("re-Track with another class: %v", err)
	}
	all, err := m.AllStats()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := all[cg.id]; !ok || len(all) != 1 {
		t.Fatalf("AllStats = %v, want only %d", all, cg.id)
	}
	if err := m.Untrack(cg.id); err != nil {
		t.Fatal(err)
	}
	if err := m.Untrack(cg.id); !errors.Is(err, bpf.ErrNotTracked) {
		t.Fatalf("second Untrack: %v, want ErrNotTracked", err)
	}
}

// schedVariants are the two variants of the scheduler programs: the one
// that reads run-queue waits from the kernel's sched_info, loaded where the
// kernel has it, and the one that stamps them from wakeup hooks.
var schedVariants = []struct {
	name   string
	config func(bpf.Config) bpf.Config
}{
	{"sched_info", func(c bpf.Config) bpf.Config { return c }},
	{"wakeup_hooks", bpf.WithWakeupHooks},
}

// loadVariant loads the monitor with the scheduler variant v; it skips the
// sched_info variant on kernels without sched_info.
func loadVariant(t *testing.T, v int, cfg bpf.Config) *bpf.Monitor {
	t.Helper()
	m := load(t, schedVariants[v].config(cfg))
	wakeupHooks := slices.Contains(m.Attached(), "tp_btf/sched_wakeup")
	if v == 0 && wakeupHooks {
		t.Skip("the kernel has no sched_info (see the sched_info probe)")
	}
	if v == 1 && !wakeupHooks {
		t.Fatalf("wakeup variant asked for, attached %v", m.Attached())
	}
	return m
}

// forEachVariant runs test once for each scheduler variant.
func forEachVariant(t *testing.T, test func(t *testing.T, variant int)) {
	for i, v := range schedVariants {
		t.Run(v.name, func(t *testing.T) { test(t, i) })
	}
}

// TestOnCPUAccuracy: a CPU-bound process's cgroup, eBPF on-CPU time against
// the cgroup's own figures over 2 s: cpu.stat usage_usec of the v2 cgroup
// and, on hybrid hosts, cpuacct.usage of a v1 cpuacct cgroup. Both count the
// kernel's runtime, as sched.c does, so they agree to the nanosecond unless
// a switch is lost; the test allows 0.1%. (Switches the kernel does not
// trace cost 0.5-8% before sched.c checked for them: see
// TestOnCPUMissedSwitches.)
func TestOnCPUAccuracy(t *testing.T) {
	privileged.Require(t)
	forEachVariant(t, testOnCPUAccuracy)
}

func testOnCPUAccuracy(t *testing.T, variant int) {
	m := loadVariant(t, variant, bpf.Config{})
	cg := newCgroup(t, testRoot(t), "spin")
	if err := m.Track(cg.id, bpf.ClassGuaranteed); err != nil {
		t.Fatal(err)
	}
	proc := startHelper(t, cg, -1, "spin", "2s")

	// v1 cpuacct, when the host has it (hybrid).
	var v1 string
	if st, err := os.Stat("/sys/fs/cgroup/cpuacct/cpuacct.usage"); err == nil && !st.IsDir() {
		v1 = filepath.Join("/sys/fs/cgroup/cpuacct", "slackline-bpftest-"+randSuffix())
		if err := os.Mkdir(v1, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeCgroupTree(t, v1) })
		if err := os.WriteFile(filepath.Join(v1, "cgroup.procs"), []byte(strconv.Itoa(proc.cmd.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := stats(t, m, cg.id).OnCPU
	proc.start(t)
	proc.wait(t)

	const tolerance = 0.001
	afterLastSwitch(t, func() error {
		after := stats(t, m, cg.id).OnCPU
		v2Usage := time.Duration(readKeyed(t, filepath.Join(cg.path, "cpu.stat"), "usage_usec")) * time.Microsecond
		if v2Usage < 1900*time.Millisecond {
			t.Fatalf("cpu.stat usage %v: the helper did not spin for 2 s", v2Usage)
		}
		if !within(after.Seconds(), v2Usage.Seconds(), tolerance) {
			return fmt.Errorf("eBPF on-CPU %v not within 0.1%% of cpu.stat usage_usec %v", after, v2Usage)
		}
		t.Logf("v2 cpu.stat usage %v, eBPF on-CPU %v (%+.3f%%)", v2Usage, after, 100*(after.Seconds()-v2Usage.Seconds())/v2Usage.Seconds())
		return nil
	})
	if v1 != "" {
		afterLastSwitch(t, func() error {
			delta := stats(t, m, cg.id).OnCPU - before
			v1Usage := time.Duration(readUint(t, filepath.Join(v1, "cpuacct.usage")))
			if !within(delta.Seconds(), v1Usage.Seconds(), tolerance) {
				return fmt.Errorf("eBPF on-CPU %v not within 0.1%% of cpuacct.usage %v", delta, v1Usage)
			}
			t.Logf("v1 cpuacct.usage %v, eBPF on-CPU over the same interval %v (%+.3f%%)", v1Usage, delta, 100*(delta.Seconds()-v1Usage.Seconds())/v1Usage.Seconds())
			return nil
		})
	}
}

// TestOnCPUMissedSwitches: the context switches of a CPU go unseen for a
// while (the sched_switch program detached, as some kernels run no
// tracepoint for switches made from some tasks), and a tracked process
// pinned there starts spinning meanwhile, real-time so that it keeps the CPU
// once the program is back. The CPU's state then still describes the task
// that had the CPU before; the spinner's run under way must be counted all
// the same: eBPF's on-CPU time is at least the cgroup's usage since the
// program came back. Before sched.c checked which task leaves the CPU, that
// run went to the stale task and was lost.
func TestOnCPUMissedSwitches(t *testing.T) {
	privileged.Require(t)
	forEachVariant(t, testOnCPUMissedSwitches)
}

func testOnCPUMissedSwitches(t *testing.T, variant int) {
	m := loadVariant(t, variant, bpf.Config{})
	cg := newCgroup(t, testRoot(t), "spin")
	if err := m.Track(cg.id, bpf.ClassGuaranteed); err != nil {
		t.Fatal(err)
	}
	proc := startHelper(t, cg, runtime.NumCPU()-1, "spin", "600ms", "100ms", "fifo")
	usage := func() time.Duration {
		return time.Duration(readKeyed(t, filepath.Join(cg.path, "cpu.stat"), "usage_usec")) * time.Microsecond
	}

	reattach, err := bpf.DetachSchedSwitch(m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reattach() }) // before Close, when the test ends early
	proc.start(t)
	if line, err := proc.stdout.ReadString('\n'); err != nil || strings.TrimSpace(line) != "mark" {
		t.Fatalf("spinner: %q %v", line, err)
	}
	if err := reattach(); err != nil {
		t.Fatal(err)
	}
	// usage counts the runs that ended while unseen and part of the one
	// under way; the rest, counted after the program came back, is at most
	// what eBPF counts.
	unseen := usage()
	proc.wait(t)
	afterLastSwitch(t, func() error {
		total := usage()
		got := stats(t, m, cg.id).OnCPU
		// cpu.stat has microseconds.
		if want := total - unseen - time.Microsecond; got < want {
			return fmt.Errorf("eBPF on-CPU %v, want at least the %v the cgroup used since sched_switch was seen again (%v lost)", got, want, want-got)
		}
		t.Logf("cpu.stat usage %v, %v of it before the program came back; eBPF on-CPU %v", total, unseen, got)
		return nil
	})
}

// TestOnCPUAccuracyManyCgroups: more tracked cgroups share a CPU than a CPU
// keeps counters for in its own state (sched.c: RESIDENT), so some are
// counted in cgroup_stats; each cgroup's on-CPU time matches its cpu.stat.
func TestOnCPUAccuracyManyCgroups(t *testing.T) {
	privileged.Require(t)
	forEachVariant(t, testOnCPUAccuracyManyCgroups)
}

func testOnCPUAccuracyManyCgroups(t *testing.T, variant int) {
	m := loadVariant(t, variant, bpf.Config{})
	root := testRoot(t)
	cpu := runtime.NumCPU() - 1
	var cgs []cgroup
	var procs []*helperProc
	for i := range 7 {
		cg := newCgroup(t, root, fmt.Sprintf("spin-%d", i))
		if err := m.Track(cg.id, bpf.ClassGuaranteed); err != nil {
			t.Fatal(err)
		}
		cgs = append(cgs, cg)
		procs = append(procs, startHelper(t, cg, cpu, "spin", "300ms"))
	}
	for _, p := range procs {
		p.start(t)
	}
	for _, p := range procs {
		p.wait(t)
	}
	for _, cg := range cgs {
		afterLastSwitch(t, func() error {
			usage := time.Duration(readKeyed(t, filepath.Join(cg.path, "cpu.stat"), "usage_usec")) * time.Microsecond
			got := stats(t, m, cg.id).OnCPU
			if !within(got.Seconds(), usage.Seconds(), 0.05) {
				return fmt.Errorf("%s: eBPF on-CPU %v not within 5%% of cpu.stat usage_usec %v", cg.path, got, usage)
			}
			t.Logf("%s: cpu.stat usage %v, eBPF on-CPU %v", filepath.Base(cg.path), usage, got)
			return nil
		})
	}
}

// TestRetrackStartsAfresh: counters are those since Track; untracking a
// cgroup and tracking it again starts them from zero.
func TestRetrackStartsAfresh(t *testing.T) {
	privileged.Require(t)
	forEachVariant(t, testRetrackStartsAfresh)
}

func testRetrackStartsAfresh(t *testing.T, variant int) {
	m := loadVariant(t, variant, bpf.Config{})
	cg := newCgroup(t, testRoot(t), "c")
	if err := m.Track(cg.id, bpf.ClassRevocable); err != nil {
		t.Fatal(err)
	}
	p := startHelper(t, cg, runtime.NumCPU()-1, "spin", "200ms")
	p.start(t)
	p.wait(t)
	if got := stats(t, m, cg.id).OnCPU; got < 150*time.Millisecond {
		t.Fatalf("on-CPU %v after spinning 200ms", got)
	}
	if err := m.Untrack(cg.id); err != nil {
		t.Fatal(err)
	}
	if err := m.Track(cg.id, bpf.ClassGuaranteed); err != nil {
		t.Fatal(err)
	}
	if got := stats(t, m, cg.id); got.OnCPU > 0 || got.RunqCount > 0 {
		t.Errorf("tracked anew with nothing running: on-CPU %v, %d waits; want none", got.OnCPU, got.RunqCount)
	}
	before := time.Duration(readKeyed(t, filepath.Join(cg.path, "cpu.stat"), "usage_usec")) * time.Microsecond
	p = startHelper(t, cg, runtime.NumCPU()-1, "spin", "100ms")
	p.start(t)
	p.wait(t)
	usage := time.Duration(readKeyed(t, filepath.Join(cg.path, "cpu.stat"), "usage_usec")) * time.Microsecond
	got := stats(t, m, cg.id).OnCPU
	// cpu.stat counts both runs; the monitor only the second, which is
	// the helper's spin plus its start (much more than 100 ms in an
	// emulated guest), so it is compared with cpu.stat's growth.
	second := usage - before
	if !within(got.Seconds(), second.Seconds(), 0.05) || before < 150*time.Millisecond {
		t.Errorf("after tracking anew: eBPF on-CPU %v, want cpu.stat's growth %v (%v before, %v in all)", got, second, before, usage)
	}
}

func vethCounter(t testing.TB, dev, name string) uint64 {
	return readUint(t, filepath.Join("/sys/class/net", dev, "statistics", name))
}

// TestNetworkAccuracy: a process in a tracked cgroup receives from and sends
// to a network namespace the test made through a veth pair; the cgroup's
// eBPF bytes and packets match the veth's counters (which also count the
// 14-byte Ethernet header of each frame, so it is taken off).
func TestNetworkAccuracy(t *testing.T) {
	privileged.Require(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatal("needs ip (apt-get install iproute2)")
	}
	root := testRoot(t)
	m := load(t, bpf.Config{CgroupRoot: root})
	cg := newCgroup(t, root, "net")
	if err := m.Track(cg.id, bpf.ClassGuaranteed); err != nil {
		t.Fatal(err)
	}

	suffix := randSuffix()[:6]
	ns, hostDev, nsDev := "slbt-"+suffix, "slbta"+suffix, "slbtb"+suffix
	octet := 16 + int(suffix[0])%200
	hostIP, nsIP := fmt.Sprintf("10.213.%d.1", octet), fmt.Sprintf("10.213.%d.2", octet)
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "link", "add", hostDev, "type", "veth", "peer", "name", nsDev)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostDev).Run() })
	run(t, "ip", "link", "set", nsDev, "netns", ns)
	// No IPv6 (router solicitations) and static neighbours (no ARP): the
	// veth carries only the test's datagrams.
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+hostDev+"/disable_ipv6", []byte("1"), 0o644)
	run(t, "ip", "netns", "exec", ns, "sh", "-c", "echo 1 > /proc/sys/net/ipv6/conf/"+nsDev+"/disable_ipv6")
	hostMAC := strings.TrimSpace(string(must(os.ReadFile("/sys/class/net/" + hostDev + "/address"))))
	nsMAC := strings.TrimSpace(string(must(exec.Command("ip", "netns", "exec", ns, "cat", "/sys/class/net/"+nsDev+"/address").Output())))
	run(t, "ip", "addr", "add", hostIP+"/30", "dev", hostDev)
	run(t, "ip", "-n", ns, "addr", "add", nsIP+"/30", "dev", nsDev)
	run(t, "ip", "neigh", "replace", nsIP, "lladdr", nsMAC, "dev", hostDev, "nud", "permanent")
	run(t, "ip", "-n", ns, "neigh", "replace", hostIP, "lladdr", hostMAC, "dev", nsDev, "nud", "permanent")
	run(t, "ip", "link", "set", hostDev, "up")
	run(t, "ip", "-n", ns, "link", "set", nsDev, "up")

	// The namespace side: a socket created on a thread inside the namespace.
	peer := make(chan *net.UDPConn, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := unix.Open("/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Error(err)
			peer <- nil
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			t.Error(err)
			peer <- nil
			return
		}
		conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(nsIP), Port: 9999})
		if err != nil {
			t.Error(err)
		}
		peer <- conn
	}()
	conn := <-peer
	if conn == nil {
		t.FailNow()
	}
	defer conn.Close()
	go func() { // drain what the helper sends
		buf := make([]byte, 65536)
		for {
			if _, _, err := conn.ReadFromUDP(buf); err != nil {
				return
			}
		}
	}()

	const nRecv, nSend, size = 500, 2000, 1200
	txBytes0, txPackets0 := vethCounter(t, hostDev, "tx_bytes"), vethCounter(t, hostDev, "tx_packets")
	rxBytes0, rxPackets0 := vethCounter(t, hostDev, "rx_bytes"), vethCounter(t, hostDev, "rx_packets")
	proc := startHelper(t, cg, -1, "udp", hostIP+":9998", strconv.Itoa(nRecv), strconv.Itoa(nSend), strconv.Itoa(size), nsIP+":9999")
	proc.start(t)
	dst := &net.UDPAddr{IP: net.ParseIP(hostIP), Port: 9998}
	payload := make([]byte, 700)
	for i := 0; i < nRecv; i++ {
		if _, err := conn.WriteToUDP(payload, dst); err != nil {
			t.Fatal(err)
		}
		if i%32 == 31 {
			time.Sleep(time.Millisecond)
		}
	}
	out := proc.wait(t)
	t.Logf("helper: %s", strings.TrimSpace(out))

	const ethHeader = 14
	txPackets := vethCounter(t, hostDev, "tx_packets") - txPackets0
	txBytes := vethCounter(t, hostDev, "tx_bytes") - txBytes0 - ethHeader*txPackets
	rxPackets := vethCounter(t, hostDev, "rx_packets") - rxPackets0
	rxBytes := vethCounter(t, hostDev, "rx_bytes") - rxBytes0 - ethHeader*rxPackets
	s := stats(t, m, cg.id)
	t.Logf("tx: eBPF %d B %d pkts, veth %d B (IP layer) %d pkts", s.NetTxBytes, s.NetTxPackets, txBytes, txPackets)
	t.Logf("rx: eBPF %d B %d pkts, veth %d B (IP layer) %d pkts", s.NetRxBytes, s.NetRxPackets, rxBytes, rxPackets)
	if txPackets < nSend {
		t.Fatalf("veth sent %d packets, want >= %d", txPackets, nSend)
	}
	if !within(float64(s.NetTxBytes), float64(txBytes), 0.01) || !within(float64(s.NetTxPackets), float64(txPackets), 0.01) {
		t.Errorf("egress: eBPF %d B / %d pkts, veth %d B / %d pkts: not within 1%%", s.NetTxBytes, s.NetTxPackets, txBytes, txPackets)
	}
	if !within(float64(s.NetRxBytes), float64(rxBytes), 0.01) || !within(float64(s.NetRxPackets), float64(rxPackets), 0.01) {
		t.Errorf("ingress: eBPF %d B / %d pkts, veth %d B / %d pkts: not within 1%%", s.NetRxBytes, s.NetRxPackets, rxBytes, rxPackets)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestRunqueueInterference: a task sharing one CPU with a revocable CPU hog
// waits far longer for it than alone; the wait is attributed to the hog's
// cgroup and raises threshold events.
func TestRunqueueInterference(t *testing.T) {
	privileged.Require(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs: one for the test, one shared by victim and hog")
	}
	forEachVariant(t, testRunqueueInterference)
}

func testRunqueueInterference(t *testing.T, variant int) {
	root := testRoot(t)
	m := loadVariant(t, variant, bpf.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- m.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	cpu := runtime.NumCPU() - 1

	hog := newCgroup(t, root, "hog")
	if err := m.Track(hog.id, bpf.ClassRevocable); err != nil {
		t.Fatal(err)
	}
	threshold := 1 * time.Millisecond
	if err := m.SetLatencyThreshold(threshold); err != nil {
		t.Fatal(err)
	}
	// Collect threshold events as they come: several attempts raise more of
	// them than the channel holds.
	var evMu sync.Mutex
	var events []bpf.ThresholdEvent
	go func() {
		for ev := range m.Events() {
			evMu.Lock()
			events = append(events, ev)
			evMu.Unlock()
		}
	}()
	// The host may be busy with other work, which inflates the uncontended
	// baseline: measure up to three pairs and judge the best one. Each
	// attempt uses fresh cgroups.
	var alone, victim cgroup
	var uncontended, contended bpf.CgroupStats
	var p99a, p99b time.Duration
	for attempt := range 3 {
		alone = newCgroup(t, root, fmt.Sprintf("alone-%d", attempt))
		victim = newCgroup(t, root, fmt.Sprintf("victim-%d", attempt))
		for _, cg := range []cgroup{alone, victim} {
			if err := m.Track(cg.id, bpf.ClassGuaranteed); err != nil {
				t.Fatal(err)
			}
		}
		p := startHelper(t, alone, cpu, "victim", "1s")
		p.start(t)
		p.wait(t)
		uncontended = stats(t, m, alone.id)

		// Several hog processes, so the contended waits stand well above
		// the host's noise.
		p = startHelper(t, victim, cpu, "victim", "1500ms/150")
		hogs := startHogs(t, cpu, hog, hog, hog)
		p.start(t)
		p.wait(t)
		contended = stats(t, m, victim.id)
		for _, h := range hogs {
			_ = h.cmd.Process.Kill()
			_ = h.cmd.Wait()
		}
		p99a, p99b = uncontended.RunqQuantile(0.99), contended.RunqQuantile(0.99)
		t.Logf("attempt %d: uncontended: %d waits, p99 <= %v, mean %v", attempt, uncontended.RunqCount, p99a, uncontended.RunqTotal/time.Duration(max(uncontended.RunqCount, 1)))
		t.Logf("attempt %d: contended:   %d waits, p99 <= %v, mean %v, delayed by revocable %v", attempt, contended.RunqCount, p99b, contended.RunqTotal/time.Duration(max(contended.RunqCount, 1)), contended.DelayedByRevocable)
		if p99b >= 10*p99a {
			break
		}
	}
	if uncontended.RunqCount < 100 || contended.RunqCount < 100 {
		t.Fatalf("too few samples: %d alone, %d contended", uncontended.RunqCount, contended.RunqCount)
	}
	if p99b < 10*p99a {
		t.Errorf("contended p99 %v < 10 x uncontended p99 %v in all three attempts", p99b, p99a)
	}

	delays, err := m.DelayedBy(victim.id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("delayed by: %v (hog is %d)", delays, hog.id)
	if delays[hog.id] <= 0 || delays[hog.id] < contended.DelayedByRevocable/2 {
		t.Errorf("DelayedBy(victim) = %v: want most of %v attributed to the hog %d", delays, contended.DelayedByRevocable, hog.id)
	}
	if d, _ := m.DelayedBy(alone.id); len(d) != 0 {
		t.Errorf("DelayedBy(alone) = %v, want none", d)
	}
	// AllDelays walks the map once for every victim: the victim's delays
	// are at least what DelayedBy read just before (they only grow), and
	// the hog's share is there.
	all, err := m.AllDelays()
	if err != nil {
		t.Fatal(err)
	}
	if all[victim.id][hog.id] < delays[hog.id] || len(all[alone.id]) != 0 {
		t.Errorf("AllDelays: victim %v, alone %v; want the victim's delays by the hog of at least %v, nothing for alone",
			all[victim.id], all[alone.id], delays[hog.id])
	}

	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		evMu.Lock()
		var found *bpf.ThresholdEvent
		for i := range events {
			// Other work on the host can delay the victim too (culprit 0).
			if events[i].Cgroup == victim.id && events[i].Culprit == hog.id {
				found = &events[i]
				break
			}
		}
		evMu.Unlock()
		if found != nil {
			ev := *found
			t.Logf("event: %+v", ev)
			if ev.Latency < threshold || ev.Delayed <= 0 || ev.Delayed > ev.Latency || ev.Class != bpf.ClassGuaranteed ||
				ev.CPU != uint32(cpu) || time.Since(ev.Time) > time.Minute || time.Since(ev.Time) < 0 {
				t.Errorf("unexpected event %+v (threshold %v, cpu %d)", ev, threshold, cpu)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no threshold event for the victim (lost: %d)", m.EventsLost())
}

// TestRunqueueMatchesSchedstat: the run-queue figures are the kernel's own:
// a victim pinned to a CPU that a CPU hog shares, so that it waits after
// wakeups and preemptions; its eBPF wait count and total against the sum
// over its threads of the arrivals after a wait and the run_delay the
// kernel reports in /proc/<pid>/task/*/schedstat.
func TestRunqueueMatchesSchedstat(t *testing.T) {
	privileged.Require(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs: one for the test, one shared by victim and hog")
	}
	forEachVariant(t, testRunqueueMatchesSchedstat)
}

func testRunqueueMatchesSchedstat(t *testing.T, variant int) {
	m := loadVariant(t, variant, bpf.Config{})
	root := testRoot(t)
	cpu := runtime.NumCPU() - 1
	victim := newCgroup(t, root, "victim")
	if err := m.Track(victim.id, bpf.ClassGuaranteed); err != nil {
		t.Fatal(err)
	}
	p := startHelper(t, victim, cpu, "victim", "1s", "hold")
	startHogs(t, cpu, newCgroup(t, root, "hog")) // untracked
	p.start(t)
	if line, err := p.stdout.ReadString('\n'); err != nil || strings.TrimSpace(line) != "done" {
		t.Fatalf("victim: %q %v", line, err)
	}
	// Freeze the victim so that no thread of it waits or runs between the
	// two reads (the Go runtime's threads wake up on their own).
	freeze(t, victim, true)
	var arrivals, delay uint64
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", p.cmd.Process.Pid))
	if err != nil || len(tasks) == 0 {
		t.Fatalf("schedstat of the victim: %v %v", tasks, err)
	}
	for _, path := range tasks {
		f := strings.Fields(string(must(os.ReadFile(path))))
		delay += must(strconv.ParseUint(f[1], 10, 64))
		arrivals += must(strconv.ParseUint(f[2], 10, 64))
	}
	s := stats(t, m, victim.id)
	freeze(t, victim, false)
	if _, err := io.WriteString(p.stdin, "exit\n"); err != nil {
		t.Fatal(err)
	}
	p.wait(t)
	t.Logf("eBPF: %d waits, %v in all; kernel schedstat: %d arrivals after a wait, run_delay %v",
		s.RunqCount, s.RunqTotal, arrivals, time.Duration(delay))
	if arrivals < 100 {
		t.Fatalf("only %d waits: the victim did not run", arrivals)
	}
	// The sched_info variant reads the kernel's own stamps: it measured the
	// same figures to the nanosecond in most runs here, one or two waits
	// fewer out of ~2,000 in some. The wakeup variant stamps waits itself:
	// 0.1-0.7% fewer waits and less time here.
	const tolerance = 0.02
	if !within(float64(s.RunqCount), float64(arrivals), tolerance) {
		t.Errorf("eBPF counted %d waits, the kernel %d: not within %.1f%%", s.RunqCount, arrivals, 100*tolerance)
	}
	// A wait the wakeup variant misses takes its whole length from the
	// total: beside CPU hogs one wait can last a few scheduler slices (2
	// missed waits of 1,638 took 2.6% of a 1.86 s total in a CI run beside
	// stress-ng). The total may therefore fall short by the tolerance plus
	// up to maxMissedWait per wait counted short, and no more.
	const maxMissedWait = 30 * time.Millisecond
	missed := time.Duration(0)
	if arrivals > s.RunqCount {
		missed = time.Duration(arrivals-s.RunqCount) * maxMissedWait
	}
	kernel := time.Duration(delay)
	if s.RunqTotal > kernel+time.Duration(tolerance*float64(kernel)) ||
		s.RunqTotal < kernel-time.Duration(tolerance*float64(kernel))-missed {
		t.Errorf("eBPF waits total %v, the kernel's run_delay %v: not within %.1f%% (plus %v for the %d waits counted short)",
			s.RunqTotal, kernel, 100*tolerance, missed, max(arrivals, s.RunqCount)-s.RunqCount)
	}
}

// freeze freezes or thaws the cgroup's tasks and waits until it is done.
func freeze(t *testing.T, cg cgroup, frozen bool) {
	t.Helper()
	want := "frozen 0"
	value := "0"
	if frozen {
		want, value = "frozen 1", "1"
	}
	if err := os.WriteFile(filepath.Join(cg.path, "cgroup.freeze"), []byte(value), 0o644); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if strings.Contains(string(must(os.ReadFile(filepath.Join(cg.path, "cgroup.events")))), want) {
			return
		}
	}
	t.Fatalf("%s: no %q in cgroup.events after 5s", cg.path, want)
}

// TestProbesUnprivileged runs the probes as nobody, without capabilities:
// they must report "no permission", not crash.
func TestProbesUnprivileged(t *testing.T) {
	privileged.Require(t)
	// The test binary lives in a directory only root may enter: copy it.
	dir, err := os.MkdirTemp("", "slackline-probe-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bpf.test")
	if err := os.WriteFile(bin, must(os.ReadFile(os.Args[0])), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), helperEnv+"=probe")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe as nobody: %v\n%s", err, out)
	}
	got := map[string]probeLine{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var l probeLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		t.Logf("%-24s %-30s %s", l.Name, l.Status, l.Err)
		got[l.Name] = l
	}
	if len(got) != len(bpf.Features) {
		t.Fatalf("%d results, want %d", len(got), len(bpf.Features))
	}
	for _, name := range []string{"bpf_syscall", "tp_btf", "bpf_stats"} {
		if got[name].Status != bpf.FeatureNoPermission.String() {
			t.Errorf("%s as nobody: %s (%s), want %s", name, got[name].Status, got[name].Err, bpf.FeatureNoPermission)
		}
	}
}

// TestProbesPrivileged: as root on a kernel with BTF, everything the
// monitor needs is available.
func TestProbesPrivileged(t *testing.T) {
	privileged.Require(t)
	for _, r := range bpf.Probe() {
		t.Logf("%-24s %v %v", r.Name, r.Status(), r.Err)
		if r.Err != nil && !errors.Is(r.Err, bpf.ErrPermission) {
			continue // kernel-dependent
		}
		if errors.Is(r.Err, bpf.ErrPermission) {
			t.Errorf("%s: no permission as root: %v", r.Name, r.Err)
		}
	}
}

// TestSyncWrites: the fsyncs of a tracked cgroup's task are counted one by
// one, their total wait is within what the task itself measured around the
// calls, and an untracked cgroup's fsyncs are not counted.
func TestSyncWrites(t *testing.T) {
	privileged.Require(t)
	dir := t.TempDir()
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	// Wherever the kernel has the ext4_sync_file tracepoints the programs
	// must attach, whatever the other io.c programs do (a kernel before 6.5
	// has no block_io_start: that must not take these down), even where
	// the test directory is not on ext4 and the rest is skipped.
	m := load(t, bpf.Config{})
	if kernelHasType(t, "btf_trace_ext4_sync_file_enter", "ext4") {
		for _, p := range []string{"tp_btf/ext4_sync_file_enter", "tp_btf/ext4_sync_file_exit"} {
			if !slices.Contains(m.Attached(), p) {
				t.Fatalf("%s not attached: %v", p, m.Attached())
			}
		}
	}
	if fs.Type != unix.EXT4_SUPER_MAGIC {
		t.Skipf("%s is not on ext4 (magic %#x): the synchronous-write programs trace ext4_sync_file (attached: %v)", dir, fs.Type, m.Attached())
	}
	root := testRoot(t)
	tracked, other := newCgroup(t, root, "tracked"), newCgroup(t, root, "other")
	if err := m.Track(tracked.id, bpf.ClassGuaranteed); err != nil {
		t.Fatal(err)
	}
	const n = 50
	a := startHelper(t, tracked, -1, "fsync", dir, strconv.Itoa(n))
	b := startHelper(t, other, -1, "fsync", dir, strconv.Itoa(n))
	a.start(t)
	b.start(t)
	measured := time.Duration(must(strconv.ParseInt(strings.TrimSpace(a.wait(t)), 10, 64)))
	b.wait(t)
	s := stats(t, m, tracked.id)
	var inHist uint64
	for _, c := range s.SyncLatency {
		inHist += c
	}
	if s.SyncCount != n || inHist != n {
		t.Errorf("SyncCount %d, histogram %d, want %d (the tracked task's fsyncs)", s.SyncCount, inHist, n)
	}
	if s.SyncWait <= 0 || s.SyncWait > measured {
		t.Errorf("SyncWait %v, want in (0, %v] (the task's own measure around the calls)", s.SyncWait, measured)
	}
	if p99 := bpf.Quantile(s.SyncLatency[:], 0.99); p99 <= 0 || p99 > 2*measured {
		t.Errorf("p99 %v out of (0, 2 x total %v]", p99, measured)
	}
	if _, err := m.Stats(other.id); !errors.Is(err, bpf.ErrNotTracked) {
		t.Errorf("untracked cgroup: %v, want ErrNotTracked", err)
	}
}

// kernelHasType reports whether the kernel's BTF (vmlinux's, then the
// loaded module's if module is not empty) has the named type.
func kernelHasType(t *testing.T, name, module string) bool {
	t.Helper()
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatalf("kernel BTF: %v", err)
	}
	_, err = kernel.AnyTypeByName(name)
	if err == nil {
		return true
	}
	if !errors.Is(err, btf.ErrNotFound) {
		t.Fatalf("look up %s in the kernel's BTF: %v", name, err)
	}
	if module == "" {
		return false
	}
	spec, err := btf.LoadKernelModuleSpec(module)
	if err != nil {
		// Not loaded (or built without BTF): the type is not there.
		t.Logf("BTF of module %s: %v", module, err)
		return false
	}
	if _, err := spec.AnyTypeByName(name); err == nil {
		return true
	} else if !errors.Is(err, btf.ErrNotFound) {
		t.Fatalf("look up %s in module %s's BTF: %v", name, module, err)
	}
	return false
}

// noBlockDevice says why dir's file system issues no block requests (a
// tmpfs, 9p, an overlay: a device number without a block device behind
// it), or "" when it is on a block device. btrfs reports a per-subvolume
// anonymous device number but sits on block devices.
func noBlockDevice(dir string) string {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Sprintf("statfs %s: %v", dir, err)
	}
	if fs.Type == unix.BTRFS_SUPER_MAGIC {
		return ""
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return fmt.Sprintf("stat %s: %v", dir, err)
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	if _, err := os.Stat("/sys/dev/block/" + dev); err != nil {
		return fmt.Sprintf("%s is on a file system without a block device (device %s, file system magic %#x)", dir, dev, fs.Type)
	}
	return ""
}

// TestBlockRequests: the block requests a tracked cgroup's task submits
// are counted exactly and attributed to it, not to another tracked
// cgroup writing at the same time: one task overwrites 40 blocks with
// O_DIRECT, one write at a time, the other 80.
func TestBlockRequests(t *testing.T) {
	privileged.Require(t)
	dir := t.TempDir()
	// The writes must reach a block device: on a tmpfs (a test guest's
	// /tmp; Linux 6.6+ accepts O_DIRECT there) they complete without any
	// block request, and the test counted 0 for both cgroups.
	if why := noBlockDevice(dir); why != "" {
		if os.Getenv(privileged.EnvVar) == "1" {
			t.Fatalf("%s (set TMPDIR to a directory on a disk; %s=1 forbids skipping)", why, privileged.EnvVar)
		}
		t.Skipf("%s: set TMPDIR to a directory on a disk", why)
	}
	// Only a kernel without the block_io_start tracepoint (before 6.5)
	// may lack the programs; everywhere else they must attach.
	if !kernelHasType(t, "btf_trace_block_io_start", "") {
		t.Skipf("the kernel has no block_io_start tracepoint (btf_trace_block_io_start not in its BTF): %s", bpf.BlockKernelNeed)
	}
	m := load(t, bpf.Config{})
	for _, p := range []string{bpf.BlockStartAttach, bpf.BlockDoneAttach} {
		if !slices.Contains(m.Attached(), p) {
			t.Fatalf("%s not attached: %v", p, m.Attached())
		}
	}
	root := testRoot(t)
	a, b := newCgroup(t, root, "a"), newCgroup(t, root, "b")
	for _, cg := range []cgroup{a, b} {
		if err := m.Track(cg.id, bpf.ClassGuaranteed); err != nil {
			t.Fatal(err)
		}
	}
	const n = 40
	ha := startHelper(t, a, -1, "direct", dir, strconv.Itoa(n))
	hb := startHelper(t, b, -1, "direct", dir, strconv.Itoa(2*n))
	// Both files are written and synced (their own requests) before the
	// helpers say ready: the counts from here on are the direct writes.
	// The host's dirty pages are written back first (earlier tests leave
	// some): beside CPU hogs, after the package's other tests, 2-11 of the
	// 120 requests went uncounted in 3 of 7 runs, none in 8 runs with this
	// sync; the likely cause is a direct write merged into a request of the
	// flusher's, which counts in no tracked cgroup (not proven).
	unix.Sync()
	beforeA, beforeB := stats(t, m, a.id), stats(t, m, b.id)
	ha.start(t)
	hb.start(t)
	ha.wait(t)
	hb.wait(t)
	for _, c := range []struct {
		name   string
		id     uint64
		before bpf.CgroupStats
		want   uint64
	}{{"a", a.id, beforeA, n}, {"b", b.id, beforeB, 2 * n}} {
		s := stats(t, m, c.id)
		count, bytes := s.BlockCount-c.before.BlockCount, s.BlockBytes-c.before.BlockBytes
		var inHist uint64
		for i, v := range s.BlockLatency {
			inHist += v - c.before.BlockLatency[i]
		}
		if count != c.want || inHist != c.want || bytes != c.want*4096 {
			t.Errorf("cgroup %s: %d requests (histogram %d) of %d bytes, want %d of %d", c.name, count, inHist, bytes, c.want, c.want*4096)
		}
		if wait := s.BlockWait - c.before.BlockWait; wait <= 0 {
			t.Errorf("cgroup %s: block wait %v, want > 0", c.name, wait)
		}
	}

	// A full read (#29) gives every tracked cgroup the block counters
	// a lookup gives, from a batch walk of their map: no lookup per
	// cgroup, most of which (idle ones) would find no entry.
	idle := make([]cgroup, 20)
	for i := range idle {
		idle[i] = newCgroup(t, root, fmt.Sprintf("idle%d", i))
		if err := m.Track(idle[i].id, bpf.ClassGuaranteed); err != nil {
			t.Fatal(err)
		}
	}
	before := m.ReadCounts()
	all := map[uint64]bpf.CgroupStats{}
	if err := m.ReadAll(all); err != nil {
		t.Fatal(err)
	}
	after := m.ReadCounts()
	if after.Full == before.Full {
		t.Fatalf("ReadAll made no full read (%+v -> %+v)", before, after)
	}
	if looked := after.BlockLookedUp - before.BlockLookedUp; looked != 0 {
		t.Errorf("a full read of %d cgroups looked up %d cgroups' block counters one by one, want 0 (one walk)", len(all), looked)
	}
	for _, cg := range append([]cgroup{a, b}, idle...) {
		got, want := all[cg.id], stats(t, m, cg.id)
		if got.BlockCount != want.BlockCount || got.BlockBytes != want.BlockBytes || got.BlockWait != want.BlockWait || got.BlockLatency != want.BlockLatency {
			t.Errorf("cgroup %d: ReadAll block counters %d requests, %d bytes, %v; Stats %d, %d, %v",
				cg.id, got.BlockCount, got.BlockBytes, got.BlockWait, want.BlockCount, want.BlockBytes, want.BlockWait)
		}
	}
	if all[a.id].BlockCount == 0 || all[b.id].BlockCount == 0 {
		t.Errorf("ReadAll shows no block request of the writers: a %d, b %d", all[a.id].BlockCount, all[b.id].BlockCount)
	}
}

// TestStatsBesideFullReads: Stats may run while ReadAll makes full reads
// (the agent's GetUsage beside the monitor's pass); it must not see the
// block walk ReadAll writes (run with -race: a data race on it, and a
// concurrent map read and write, before the walk was ReadAll's alone).
func TestStatsBesideFullReads(t *testing.T) {
	privileged.Require(t)
	m := load(t, bpf.Config{})
	root := testRoot(t)
	var cgs []cgroup
	for i := range 8 {
		cgs = append(cgs, newCgroup(t, root, fmt.Sprintf("c%d", i)))
		if err := m.Track(cgs[i].id, bpf.ClassGuaranteed); err != nil {
			t.Fatal(err)
		}
	}
	// Full reads come once a second (on the clock's grid): ReadAll until
	// three more were made, with Stats beside it all along.
	const fullReads = 3
	before := m.ReadCounts().Full
	done := make(chan error, 1)
	go func() {
		all := map[uint64]bpf.CgroupStats{}
		for m.ReadCounts().Full-before < fullReads {
			if err := m.ReadAll(all); err != nil {
				done <- err
				return
			}
			time.Sleep(time.Millisecond)
		}
		done <- nil
	}()
	for i := 0; ; i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			return
		default:
			stats(t, m, cgs[i%len(cgs)].id)
		}
	}
}
