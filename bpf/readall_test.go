package bpf_test

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/slackline/slackline/bpf"
	"github.com/slackline/slackline/internal/privileged"
)

// TestReadAll reads more cgroups than one batch holds: ReadAll answers what
// Stats answers for each, idle cgroups are not Running, and a cgroup that
// ran between two reads is seen to have run (Running, or its OnCPU or
// Wakeups moved), with Sched set (sched_switch is attached): the property
// the agent's monitor relies on to skip the cgroupfs files of cgroups that
// did not run.
func TestReadAll(t *testing.T) {
	privileged.Require(t)
	m := load(t, bpf.Config{})
	root := testRoot(t)
	const n = 300 // more than one batch
	cgs := make([]cgroup, n)
	for i := range cgs {
		cgs[i] = newCgroup(t, root, fmt.Sprintf("c%d", i))
		if err := m.Track(cgs[i].id, bpf.ClassGuaranteed); err != nil {
			t.Fatal(err)
		}
	}
	spinner := cgs[0]
	p := startHelper(t, spinner, -1, "spin", "10s", "20ms")

	before := map[uint64]bpf.CgroupStats{}
	if err := m.ReadAll(before); err != nil {
		t.Fatal(err)
	}
	if len(before) != n {
		t.Fatalf("ReadAll read %d cgroups, want %d", len(before), n)
	}
	if !slices.Contains(m.Attached(), "tp_btf/sched_switch") {
		t.Fatalf("sched_switch not attached: %v", m.Attached())
	}
	for _, cg := range cgs[1:] {
		got, want := before[cg.id], stats(t, m, cg.id)
		if !got.Sched {
			t.Fatalf("cgroup %d: Sched false with sched_switch attached", cg.id)
		}
		if got != want {
			t.Fatalf("cgroup %d: ReadAll %+v, Stats %+v", cg.id, got, want)
		}
		if got.Running || got.OnCPU != 0 {
			t.Fatalf("idle cgroup %d: %+v, want not running and no CPU time", cg.id, got)
		}
	}

	p.start(t)
	if line, err := p.stdout.ReadString('\n'); err != nil || line != "mark\n" {
		t.Fatalf("spinner: %q %v", line, err)
	}
	after := map[uint64]bpf.CgroupStats{42: {}} // ReadAll replaces what was there
	if err := m.ReadAll(after); err != nil {
		t.Fatal(err)
	}
	if _, ok := after[42]; ok || len(after) != n {
		t.Fatalf("ReadAll left %d entries (42 kept: %v), want %d", len(after), ok, n)
	}
	b, a := before[spinner.id], after[spinner.id]
	if !a.Running && a.OnCPU == b.OnCPU && a.Wakeups == b.Wakeups {
		t.Fatalf("a cgroup that burnt 20 ms between two reads looks idle: before %+v, after %+v", b, a)
	}
	if a.OnCPU < b.OnCPU {
		t.Fatalf("OnCPU went back: %v -> %v", b.OnCPU, a.OnCPU)
	}
}

// TestReadAllReadsOnlyChanged: with the full reads put off, ReadAll
// looks up only the cgroups whose counters the programs marked changed.
// Processes run in more cgroups than the CPUs keep resident, so that
// counters go to the counters map; ReadAll then shows each such cgroup's
// counters at least as far as a direct lookup (Stats) made before it
// (a missed mark would return the counters of the read before), and
// reuses the counters of every idle cgroup whose flag no cgroup that ran
// shares.
func TestReadAllReadsOnlyChanged(t *testing.T) {
	privileged.Require(t)
	m := load(t, bpf.Config{FullReadInterval: time.Hour}) // what the marks alone make it read
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	root := testRoot(t)
	ran := make([]cgroup, 4*ncpu+8) // more than RESIDENT (4) per CPU
	idle := make([]cgroup, 64)
	for i := range ran {
		ran[i] = newCgroup(t, root, fmt.Sprintf("ran%d", i))
	}
	for i := range idle {
		idle[i] = newCgroup(t, root, fmt.Sprintf("idle%d", i))
	}
	for _, cg := range append(slices.Clone(ran), idle...) {
		if err := m.Track(cg.id, bpf.ClassGuaranteed); err != nil {
			t.Fatal(err)
		}
	}
	all := map[uint64]bpf.CgroupStats{}
	if err := m.ReadAll(all); err != nil { // the first: a full read
		t.Fatal(err)
	}
	before := m.ReadCounts()

	for _, cg := range ran {
		dir, err := os.Open(cg.path)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("true")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
		err = cmd.Run()
		dir.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	direct := map[uint64]bpf.CgroupStats{}
	for _, cg := range ran {
		direct[cg.id] = stats(t, m, cg.id)
	}
	if err := m.ReadAll(all); err != nil {
		t.Fatal(err)
	}
	after := m.ReadCounts()
	if after.Full != before.Full {
		t.Fatalf("a full read happened (%+v -> %+v): the test sees nothing of the marks", before, after)
	}
	seen := 0
	for _, cg := range ran {
		got, want := all[cg.id], direct[cg.id]
		if got.OnCPU < want.OnCPU || got.Wakeups < want.Wakeups || got.RunqCount < want.RunqCount {
			t.Errorf("cgroup %d ran: ReadAll %v on CPU, %d wakeups, %d waits; a lookup before it %v, %d, %d",
				cg.id, got.OnCPU, got.Wakeups, got.RunqCount, want.OnCPU, want.Wakeups, want.RunqCount)
		}
		if want.OnCPU > 0 {
			seen++
		}
	}
	// Not vacuous: the lookups saw the processes run. (A process's last
	// slice is counted at its final switch, which may come after its
	// parent saw it exit: not every cgroup need show it yet.)
	if seen < len(ran)/2 {
		t.Errorf("only %d of %d cgroups where a process ran show CPU time", seen, len(ran))
	}
	ranFlags := map[int]bool{}
	for _, cg := range ran {
		ranFlags[bpf.ChangedFlag(cg.id)] = true
	}
	unshared := 0
	for _, cg := range idle {
		if !ranFlags[bpf.ChangedFlag(cg.id)] {
			unshared++
		}
	}
	if reused := after.Reused - before.Reused; reused < uint64(unshared) {
		t.Errorf("ReadAll reused the counters of %d cgroups, want at least the %d idle ones whose flag no running cgroup shares (%+v -> %+v)",
			reused, unshared, before, after)
	}
	if looked := after.LookedUp - before.LookedUp; looked > uint64(len(ran)+len(idle)-unshared) {
		t.Errorf("ReadAll looked up %d cgroups, more than the %d that ran or share a flag with one", looked, len(ran)+len(idle)-unshared)
	}
}

// TestReadChanged (#29): ReadChanged reassembles, and names, every cgroup
// at its first call and those whose counters moved since (a process ran
// in them) afterwards, never an idle one whose flag no cgroup that ran
// shares; the entries it leaves are what ReadAll reads.
func TestReadChanged(t *testing.T) {
	privileged.Require(t)
	m := load(t, bpf.Config{FullReadInterval: time.Hour}) // what the marks alone make it read
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	root := testRoot(t)
	ran := make([]cgroup, 4*ncpu+8) // more than RESIDENT (4) per CPU: some moved by marks alone
	idle := make([]cgroup, 32)
	for i := range ran {
		ran[i] = newCgroup(t, root, fmt.Sprintf("ran%d", i))
	}
	for i := range idle {
		idle[i] = newCgroup(t, root, fmt.Sprintf("idle%d", i))
	}
	for _, cg := range append(slices.Clone(ran), idle...) {
		if err := m.Track(cg.id, bpf.ClassGuaranteed); err != nil {
			t.Fatal(err)
		}
	}
	into := map[uint64]bpf.CgroupStats{}
	moved, err := m.ReadChanged(into)
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) != len(ran)+len(idle) || len(into) != len(ran)+len(idle) {
		t.Fatalf("first call: %d moved, %d entries; want every one of the %d tracked", len(moved), len(into), len(ran)+len(idle))
	}
	for _, cg := range ran {
		dir, err := os.Open(cg.path)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("true")
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
		err = cmd.Run()
		dir.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	direct := map[uint64]bpf.CgroupStats{}
	for _, cg := range ran {
		direct[cg.id] = stats(t, m, cg.id)
	}
	before := maps.Clone(into)
	if moved, err = m.ReadChanged(into); err != nil {
		t.Fatal(err)
	}
	movedSet := map[uint64]bool{}
	for _, id := range moved {
		movedSet[id] = true
	}
	ranFlags := map[int]bool{}
	for _, cg := range ran {
		ranFlags[bpf.ChangedFlag(cg.id)] = true
		if got, was := direct[cg.id], before[cg.id]; got.OnCPU != was.OnCPU && !movedSet[cg.id] {
			t.Errorf("cgroup %d ran (%v -> %v on CPU) but is not among the moved", cg.id, was.OnCPU, got.OnCPU)
		}
		if into[cg.id].OnCPU < direct[cg.id].OnCPU {
			t.Errorf("cgroup %d: ReadChanged %v on CPU, a lookup before it %v", cg.id, into[cg.id].OnCPU, direct[cg.id].OnCPU)
		}
	}
	for _, cg := range idle {
		if movedSet[cg.id] && !ranFlags[bpf.ChangedFlag(cg.id)] {
			t.Errorf("idle cgroup %d reassembled though nothing moved", cg.id)
		}
	}
	// Nothing ran since: no cgroup moved, not even those whose counters a
	// CPU keeps resident (the first to run on each CPU: they used to count
	// as moved at every call), and the entries stay as they were.
	kept := maps.Clone(into)
	if moved, err = m.ReadChanged(into); err != nil {
		t.Fatal(err)
	}
	if len(moved) != 0 {
		t.Errorf("a call with nothing run since the last: %d cgroups moved, want none", len(moved))
	}
	if !maps.Equal(kept, into) {
		t.Error("a call with nothing run since the last changed the entries")
	}
	all := map[uint64]bpf.CgroupStats{}
	if err := m.ReadAll(all); err != nil {
		t.Fatal(err)
	}
	for _, cg := range idle {
		if into[cg.id] != all[cg.id] {
			t.Errorf("idle cgroup %d: ReadChanged's entry %+v, ReadAll's %+v", cg.id, into[cg.id], all[cg.id])
		}
	}
	if err := m.Untrack(idle[0].id); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ReadChanged(into); err != nil {
		t.Fatal(err)
	}
	if _, ok := into[idle[0].id]; ok || len(into) != len(ran)+len(idle)-1 {
		t.Errorf("after an untrack: %d entries (the untracked one kept: %v)", len(into), ok)
	}
}
