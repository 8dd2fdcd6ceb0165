package bpf_test

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/internal/privileged"
)

// pingPong is a pipe ping-pong between this thread and a helper process,
// both pinned to one CPU, so each round trip is two context switches.
type pingPong struct {
	toChild, fromChild int
	cmd                *exec.Cmd
}

func startPingPong(b *testing.B, cg cgroup, cpu int) *pingPong {
	b.Helper()
	var down, up [2]int
	if err := unix.Pipe2(down[:], unix.O_CLOEXEC); err != nil {
		b.Fatal(err)
	}
	if err := unix.Pipe2(up[:], unix.O_CLOEXEC); err != nil {
		b.Fatal(err)
	}
	childIn, childOut := os.NewFile(uintptr(down[0]), "down"), os.NewFile(uintptr(up[1]), "up")
	dir, err := os.Open(cg.path)
	if err != nil {
		b.Fatal(err)
	}
	defer dir.Close()
	cmd := exec.Command("taskset", "-c", strconv.Itoa(cpu), os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"=pingpong", "GOMAXPROCS=1")
	cmd.ExtraFiles = []*os.File{childIn, childOut} // fds 3 and 4
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	childIn.Close()
	childOut.Close()
	p := &pingPong{toChild: down[1], fromChild: up[0], cmd: cmd}
	b.Cleanup(func() {
		unix.Close(p.toChild)
		unix.Close(p.fromChild)
		_ = cmd.Wait()
	})
	return p
}

// roundTrips must run on a thread locked and pinned to the child's CPU.
func (p *pingPong) roundTrips(b *testing.B, n int) {
	buf := []byte{1}
	for i := 0; i < n; i++ {
		if _, err := unix.Write(p.toChild, buf); err != nil {
			b.Fatal(err)
		}
		if _, err := unix.Read(p.fromChild, buf); err != nil {
			b.Fatal(err)
		}
	}
}

func pinThread(b *testing.B, cpu int) {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		b.Fatal(err)
	}
}

func unpinThread() {
	var set unix.CPUSet
	for i := 0; i < runtime.NumCPU(); i++ {
		set.Set(i)
	}
	_ = unix.SchedSetaffinity(0, &set)
	runtime.UnlockOSThread()
}

// BenchmarkContextSwitch measures pipe ping-pong round trips (2 context
// switches each) in three states, alternating in rounds within one run:
// nothing attached (detached), an empty program on each of the monitor's
// hooks (empty: what a hook alone costs on this kernel and machine), and
// the monitor attached. It reports the throughput ratios attached/detached,
// empty/detached and attached/empty, the last being the monitor's own cost
// beside what the hooks cost anyway (goal: at least 0.99).
// The helper's cgroup is tracked (guaranteed) so the programs take their
// accounting path; the benchmark's own thread is untracked.
func BenchmarkContextSwitch(b *testing.B) {
	privileged.Require(b)
	cpu := runtime.NumCPU() - 1
	root := testRoot(b)
	cg := newCgroup(b, root, "pingpong")
	p := startPingPong(b, cg, cpu)
	pinThread(b, cpu)
	defer unpinThread()
	p.roundTrips(b, 10000) // warm up

	m, err := bpf.Load(bpf.Config{CgroupRoot: root, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	if err := m.Track(cg.id, bpf.ClassGuaranteed); err != nil {
		b.Fatal(err)
	}
	// The empty programs go where the monitor's programs go.
	points := m.Attached()
	empty := loadEmptyHooks(b, points, root)
	defer empty.close()
	detach := func() func() error {
		b.Helper()
		reattach, err := bpf.DetachAll(m)
		if err != nil {
			b.Fatal(err)
		}
		return reattach
	}
	reattach := detach()

	// Many short rounds, so that what else the host runs falls on the
	// three states alike.
	const rounds = 30 // a multiple of 3: each state comes first as often
	perRound := max(b.N/rounds, 1000)
	var detached, emptyHooks, attached time.Duration
	timed := func(d *time.Duration) {
		start := time.Now()
		p.roundTrips(b, perRound)
		*d += time.Since(start)
	}
	// Each round measures the three states, in an order that rotates from
	// round to round, so that none always follows the same one.
	states := []func(){
		func() { timed(&detached) },
		func() {
			b.StopTimer()
			empty.attach(b)
			b.StartTimer()
			timed(&emptyHooks)
			b.StopTimer()
			empty.detach(b)
			b.StartTimer()
		},
		func() {
			b.StopTimer()
			if err := reattach(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			timed(&attached)
			b.StopTimer()
			reattach = detach()
			b.StartTimer()
		},
	}
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		for i := range states {
			states[(r+i)%len(states)]()
		}
	}
	n := float64(rounds * perRound)
	b.ReportMetric(n/detached.Seconds(), "detached_roundtrips/s")
	b.ReportMetric(n/emptyHooks.Seconds(), "empty_roundtrips/s")
	b.ReportMetric(n/attached.Seconds(), "attached_roundtrips/s")
	b.ReportMetric(detached.Seconds()/attached.Seconds(), "attached/detached")
	b.ReportMetric(detached.Seconds()/emptyHooks.Seconds(), "empty/detached")
	b.ReportMetric(emptyHooks.Seconds()/attached.Seconds(), "attached/empty")
	b.Logf("empty programs on %v", points)
}

// emptyHooks are programs that do nothing (tracing: return 0; cgroup_skb:
// let the packet through) for the monitor's attach points, attached and
// detached at will.
type emptyHooks struct {
	progs []*ebpf.Program
	// attachTo attaches progs[i].
	attachTo []func(*ebpf.Program) (link.Link, error)
	links    []link.Link
}

// loadEmptyHooks loads an empty program for each of the attach points
// ("tp_btf/NAME", "cgroup_skb/ingress", "cgroup_skb/egress"); the
// cgroup_skb ones attach to cgroupRoot.
func loadEmptyHooks(b *testing.B, points []string, cgroupRoot string) *emptyHooks {
	b.Helper()
	e := &emptyHooks{}
	for _, point := range points {
		kind, name, _ := strings.Cut(point, "/")
		var spec *ebpf.ProgramSpec
		var attach func(*ebpf.Program) (link.Link, error)
		switch kind {
		case "tp_btf":
			spec = &ebpf.ProgramSpec{Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: name, License: "GPL",
				Instructions: asm.Instructions{asm.LoadImm(asm.R0, 0, asm.DWord), asm.Return()}}
			attach = func(p *ebpf.Program) (link.Link, error) {
				return link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
			}
		case "cgroup_skb":
			at := map[string]ebpf.AttachType{"ingress": ebpf.AttachCGroupInetIngress, "egress": ebpf.AttachCGroupInetEgress}[name]
			spec = &ebpf.ProgramSpec{Type: ebpf.CGroupSKB, License: "GPL",
				Instructions: asm.Instructions{asm.LoadImm(asm.R0, 1, asm.DWord), asm.Return()}}
			attach = func(p *ebpf.Program) (link.Link, error) {
				return link.AttachCgroup(link.CgroupOptions{Path: cgroupRoot, Attach: at, Program: p})
			}
		default:
			b.Fatalf("no empty program for attach point %s", point)
		}
		prog, err := ebpf.NewProgram(spec)
		if err != nil {
			e.close()
			b.Fatalf("empty program for %s: %v", point, err)
		}
		e.progs, e.attachTo = append(e.progs, prog), append(e.attachTo, attach)
	}
	return e
}

func (e *emptyHooks) attach(b *testing.B) {
	b.Helper()
	for i, p := range e.progs {
		l, err := e.attachTo[i](p)
		if err != nil {
			b.Fatal(err)
		}
		e.links = append(e.links, l)
	}
}

func (e *emptyHooks) detach(b *testing.B) {
	b.Helper()
	for _, l := range e.links {
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
	}
	e.links = nil
}

func (e *emptyHooks) close() {
	for _, l := range e.links {
		_ = l.Close()
	}
	for _, p := range e.progs {
		_ = p.Close()
	}
}

// BenchmarkProgramCost runs a workload in a tracked cgroup (pipe ping-pong,
// UDP over loopback) with BPF statistics enabled and reports each program's
// mean run time per event (run_time_ns / run_cnt), over every event on the
// host during the run, tracked or not.
func BenchmarkProgramCost(b *testing.B) {
	privileged.Require(b)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	cpu := runtime.NumCPU() - 1
	root := testRoot(b)
	cg := newCgroup(b, root, "work")
	m, err := bpf.Load(bpf.Config{CgroupRoot: root, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer m.Close()
	if err := m.Track(cg.id, bpf.ClassGuaranteed); err != nil {
		b.Fatal(err)
	}
	// Reference: an empty program on sched_switch, measured the same way,
	// shows the cost of the tracepoint trampoline and of the statistics.
	empty, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: "sched_switch", License: "GPL",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 0, asm.DWord), asm.Return()},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer empty.Close()
	emptyLink, err := link.AttachTracing(link.TracingOptions{Program: empty, AttachType: ebpf.AttachTraceRawTp})
	if err != nil {
		b.Fatal(err)
	}
	defer emptyLink.Close()
	p := startPingPong(b, cg, cpu)

	b.ResetTimer()
	pinThread(b, cpu)
	p.roundTrips(b, max(b.N, 10000))
	unpinThread()
	udp := startHelper(b, cg, -1, "udp", "127.0.0.1:0", "0", "20000", "100", "127.0.0.1:9")
	udp.start(b)
	udp.wait(b)
	b.StopTimer()

	progs, err := m.ProgramStats()
	if err != nil {
		b.Fatal(err)
	}
	for _, ps := range progs {
		if ps.RunCount == 0 {
			b.Logf("%-40s no events", ps.Name)
			continue
		}
		ns := float64(ps.RunTime.Nanoseconds()) / float64(ps.RunCount)
		b.Logf("%-40s %10d events %8.1f ns/event", ps.Name, ps.RunCount, ns)
		b.ReportMetric(ns, strings.TrimPrefix(strings.TrimPrefix(ps.Name, "tp_btf/"), "cgroup_skb/")+"_ns/event")
	}
	if es, err := empty.Stats(); err == nil && es.RunCount > 0 {
		ns := float64(es.Runtime.Nanoseconds()) / float64(es.RunCount)
		b.Logf("%-40s %10d events %8.1f ns/event", "empty program on sched_switch", es.RunCount, ns)
		b.ReportMetric(ns, "empty_ns/event")
	}
	s, _ := m.Stats(cg.id)
	b.Logf("workload: %d wakeups, %d tx packets, %d rx packets", s.Wakeups, s.NetTxPackets, s.NetRxPackets)

}
