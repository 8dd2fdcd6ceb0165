package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCPUList(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		out  string
	}{
		{"", nil, ""},
		{"0", []int{0}, "0"},
		{"0-3", []int{0, 1, 2, 3}, "0-3"},
		{"0-1,3,5-6\n", []int{0, 1, 3, 5, 6}, "0-1,3,5-6"},
		{"3,1,2", []int{1, 2, 3}, "1-3"},
	}
	for _, tt := range tests {
		got, err := ParseCPUList(tt.in)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("ParseCPUList(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
		if s := FormatCPUList(got); s != tt.out {
			t.Errorf("FormatCPUList(%v) = %q, want %q", got, s, tt.out)
		}
	}
	for _, bad := range []string{"a", "3-1", "-1", "1-"} {
		if _, err := ParseCPUList(bad); err == nil {
			t.Errorf("ParseCPUList(%q): no error", bad)
		}
	}
}

func TestCPUSetHybrid(t *testing.T) {
	mnt := writeTree(t, map[string]string{
		"unified/cgroup.controllers":   "",
		"cpu/cpu.shares":               "1024\n",
		"memory/memory.limit_in_bytes": "9223372036854771712\n",
		"cpuset/cpuset.cpus":           "0-3\n",
		"cpuset/cpuset.mems":           "0\n",
	})
	l, err := Detect(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if l.CPUSet != filepath.Join(mnt, "cpuset") {
		t.Fatalf("CPUSet = %q", l.CPUSet)
	}
	if err := l.SetupCPUSet("slackline"); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"slackline-revocable"} {
		// A v1 cpuset takes no process before it has CPUs and memory nodes.
		if got := readFile(t, filepath.Join(mnt, "cpuset", rel, "cpuset.cpus")); got != "0-3" {
			t.Errorf("%s cpuset.cpus = %q, want the parent's", rel, got)
		}
		if got := readFile(t, filepath.Join(mnt, "cpuset", rel, "cpuset.mems")); got != "0" {
			t.Errorf("%s cpuset.mems = %q, want the parent's", rel, got)
		}
	}
	if err := l.SetCPUs("slackline-revocable", []int{2, 3}); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(mnt, "cpuset/slackline-revocable/cpuset.cpus")); got != "2-3" {
		t.Errorf("after SetCPUs: %q", got)
	}
	if err := l.SetCPUs("slackline-revocable", nil); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(mnt, "cpuset/slackline-revocable/cpuset.cpus")); got != "0-3" {
		t.Errorf("after SetCPUs(nil): %q, want the parent's CPUs", got)
	}
	// Containers join their subtree's cpuset, not one of their own.
	p := l.ContainerPaths("slackline", Revocable, "c1")
	want := filepath.Join(mnt, "cpuset/slackline-revocable/cgroup.procs")
	if files := p.ProcsFiles(); !slices.Contains(files, want) {
		t.Errorf("ProcsFiles = %v, want %s among them", files, want)
	}
	if slices.Contains(p.Dirs(), filepath.Join(mnt, "cpuset/slackline-revocable")) {
		t.Errorf("Dirs lists the shared cpuset directory: removing a container would remove it")
	}
}

func TestCPUSetV2(t *testing.T) {
	t.Run("delegated", func(t *testing.T) {
		mnt := fakeV2(t)
		if err := os.WriteFile(filepath.Join(mnt, "cgroup.subtree_control"), []byte("cpuset cpu memory\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Detect(mnt)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SetupRoot("slackline"); err != nil {
			t.Fatal(err)
		}
		if err := l.SetupCPUSet("slackline"); err != nil {
			t.Fatal(err)
		}
		if err := l.SetCPUs("slackline-revocable", []int{1}); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, filepath.Join(mnt, "slackline-revocable/cpuset.cpus")); got != "1" {
			t.Errorf("cpuset.cpus = %q", got)
		}
		if err := l.SetCPUs("slackline-revocable", nil); err != nil {
			t.Fatal(err)
		}
		if got := readFile(t, filepath.Join(mnt, "slackline-revocable/cpuset.cpus")); got != "" {
			t.Errorf("cpuset.cpus = %q, want empty (the parent's CPUs)", got)
		}
	})
	t.Run("not delegated", func(t *testing.T) {
		mnt := fakeV2(t) // cgroup.subtree_control without cpuset
		l, err := Detect(mnt)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.SetupRoot("slackline"); err != nil {
			t.Fatal(err)
		}
		err = l.SetupCPUSet("slackline")
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "cpuset") {
			t.Fatalf("err = %v, want ErrUnsupported naming cpuset", err)
		}
		if got := readFile(t, filepath.Join(mnt, "cgroup.subtree_control")); got != "cpu io memory pids" {
			t.Errorf("the parent's subtree_control changed: %q", got)
		}
	})
	t.Run("no controller", func(t *testing.T) {
		mnt := writeTree(t, map[string]string{
			"cgroup.controllers":     "cpu memory\n",
			"cgroup.subtree_control": "cpu memory\n",
		})
		l, err := Detect(mnt)
		if err != nil {
			t.Fatal(err)
		}
		if l.CPUSet != "" {
			t.Fatalf("CPUSet = %q without the controller", l.CPUSet)
		}
		if err := l.SetCPUs("slackline-revocable", []int{0}); !errors.Is(err, ErrUnsupported) {
			t.Errorf("SetCPUs: %v, want ErrUnsupported", err)
		}
	})
}

func TestSetupService(t *testing.T) {
	mnt := fakeHybrid(t, false)
	l, err := Detect(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetupRoot("slackline"); err != nil {
		t.Fatal(err)
	}
	for range 2 { // again, as a restarted agent does
		p, err := l.SetupService("slackline", AgentCgroup, ServiceLimits{Weight: 0.25, Cap: 1})
		if err != nil {
			t.Fatal(err)
		}
		if p.Rel != "slackline/agent" {
			t.Errorf("Rel = %q", p.Rel)
		}
	}
	if got := readFile(t, filepath.Join(mnt, "cpu/slackline/agent/cpu.shares")); got != "256" {
		t.Errorf("cpu.shares = %q, want 256 (a quarter of a CPU)", got)
	}
	if got := readFile(t, filepath.Join(mnt, "cpu/slackline/agent/cpu.cfs_quota_us")); got != "100000" {
		t.Errorf("cpu.cfs_quota_us = %q, want one core", got)
	}
	for _, h := range []string{"unified", "memory"} {
		if _, err := os.Stat(filepath.Join(mnt, h, "slackline/agent")); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
}
