package netqos_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/bpf/netqos"
	"github.com/slackline/slackline/internal/nettest"
	"github.com/slackline/slackline/internal/privileged"
)

// BenchmarkProgramCost measures the classifier's cost per packet (per skb
// at the qdisc; with TSO/GSO an skb carries up to 64 KB) under a bulk TCP
// transfer from a classified cgroup through an HTB class, next to an empty
// tc program measured the same way (the cost of the hook and of the
// statistics themselves), and the sock_ops program's cost per callback.
// Kernel BPF statistics are on while it runs.
//
//	go test -run '^$' -bench ProgramCost -benchtime 3x -v ./bpf/netqos
func BenchmarkProgramCost(b *testing.B) {
	progs, dir, id, pair := setupBench(b)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		b.Fatal(err)
	}
	defer stats.Close()
	h := nodeHandle(b, pair)
	link, err := h.LinkByName(pair.NodeDev)
	if err != nil {
		b.Fatal(err)
	}
	const major = 0x514c
	htb := netlink.NewHtb(netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(major, 0), Parent: netlink.HANDLE_ROOT})
	if err := h.QdiscReplace(htb); err != nil {
		b.Fatal(err)
	}
	class := netlink.NewHtbClass(netlink.ClassAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(major, 0x10), Parent: netlink.MakeHandle(major, 0)},
		netlink.HtbClassAttrs{Rate: 10e9, Ceil: 10e9})
	if err := h.ClassReplace(class); err != nil {
		b.Fatal(err)
	}
	if err := progs.SetClass(id, 0x10); err != nil {
		b.Fatal(err)
	}
	empty, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, -1, asm.DWord), asm.Return()}})
	if err != nil {
		b.Fatal(err)
	}
	defer empty.Close()
	classifyFD, err := progs.ClassifierFD()
	if err != nil {
		b.Fatal(err)
	}
	filter := func(fd int) {
		f := &netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: link.Attrs().Index, Parent: netlink.MakeHandle(major, 0),
			Handle: 1, Priority: 1, Protocol: unix.ETH_P_ALL}, ClassId: netlink.MakeHandle(major, 0), Fd: fd, DirectAction: true, Name: "bench"}
		if err := h.FilterReplace(f); err != nil {
			b.Fatal(err)
		}
	}
	progStat := func(p *ebpf.Program) (uint64, time.Duration) {
		st, err := p.Stats()
		if err != nil {
			b.Fatal(err)
		}
		return st.RunCount, st.Runtime
	}
	byName := func(name string) (uint64, time.Duration) {
		all, err := progs.ProgramStats()
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range all {
			if s.Name == name {
				return s.RunCount, s.RunTime
			}
		}
		return 0, 0
	}
	ln, err := pair.Listen(9200)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	sink := nettest.ServeSink(ln)
	send := func() {
		h, err := nettest.StartHelper(dir, pair.NodeNetns, nil, "send", fmt.Sprintf("%s:9200", pair.PeerIP), "cubic", "1s")
		if err != nil {
			b.Fatal(err)
		}
		defer h.Kill()
		if err := h.Go(); err != nil {
			b.Fatal(err)
		}
		if _, err := h.Wait(); err != nil {
			b.Fatal(err)
		}
	}
	var emptyRuns, classifyRuns, sockopsRuns uint64
	var emptyTime, classifyTime, sockopsTime time.Duration
	bytes0 := sink.Bytes()
	for b.Loop() {
		filter(empty.FD())
		n0, t0 := progStat(empty)
		send()
		n1, t1 := progStat(empty)
		emptyRuns, emptyTime = emptyRuns+n1-n0, emptyTime+t1-t0

		filter(classifyFD)
		c0, ct0 := byName(netqos.PointClassifier)
		s0, st0 := byName(netqos.PointSockOps)
		send()
		c1, ct1 := byName(netqos.PointClassifier)
		s1, st1 := byName(netqos.PointSockOps)
		classifyRuns, classifyTime = classifyRuns+c1-c0, classifyTime+ct1-ct0
		sockopsRuns, sockopsTime = sockopsRuns+s1-s0, sockopsTime+st1-st0
	}
	per := func(d time.Duration, n uint64) float64 {
		if n == 0 {
			return 0
		}
		return float64(d.Nanoseconds()) / float64(n)
	}
	b.ReportMetric(per(classifyTime, classifyRuns), "classify-ns/skb")
	b.ReportMetric(per(emptyTime, emptyRuns), "empty-tc-ns/skb")
	b.ReportMetric(per(sockopsTime, sockopsRuns), "sockops-ns/call")
	b.ReportMetric(float64(sink.Bytes()-bytes0)/float64(emptyRuns+classifyRuns), "bytes/skb")
}

func setupBench(b *testing.B) (*netqos.Programs, string, uint64, *nettest.Pair) {
	b.Helper()
	privileged.Require(b)
	root, err := nettest.NewCgroupRoot("slackline-netqosbench", "task")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = nettest.RemoveCgroups(root) })
	dir := root + "/task"
	id, err := bpf.CgroupID(dir)
	if err != nil {
		b.Fatal(err)
	}
	progs, err := netqos.Load(netqos.Config{CgroupRoot: root, Logger: quietLogger()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { progs.Close() })
	pair, err := nettest.NewPair(nettest.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pair.Close() })
	return progs, dir, id, pair
}

func nodeHandle(b *testing.B, pair *nettest.Pair) *netlink.Handle {
	ns, err := netns.GetFromPath(pair.NodeNetns)
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(h.Close)
	return h
}
