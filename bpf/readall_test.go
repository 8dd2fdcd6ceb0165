package bpf_test

import (
	"fmt"
	"slices"
	"testing"

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
