package supervisor

import (
	"slices"
	"testing"
)

func TestSplitSupervisorMoves(t *testing.T) {
	t.Parallel()
	hybrid := []string{
		"/sys/fs/cgroup/unified/sl/supervisors/cgroup.procs",
		"/sys/fs/cgroup/cpu/sl/supervisors/cgroup.procs",
		"/sys/fs/cgroup/memory/sl/supervisors/cgroup.procs",
	}
	v2 := []string{"/sys/fs/cgroup/sl/supervisors/cgroup.procs"}
	tests := []struct {
		name       string
		files      []string
		mount, own string
		now, later []string
	}{
		{"hybrid, born in its v2 cgroup: v1 after", hybrid, "/sys/fs/cgroup/unified", "/sl/supervisors", nil, hybrid[1:]},
		{"hybrid, mount with a slash", hybrid, "/sys/fs/cgroup/unified/", "/sl/supervisors", nil, hybrid[1:]},
		{"hybrid, born in the agent's: all before", hybrid, "/sys/fs/cgroup/unified", "/agent.service", hybrid, nil},
		{"own cgroup unknown: all before", hybrid, "/sys/fs/cgroup/unified", "", hybrid, nil},
		{"v2, born there: nothing", v2, "/sys/fs/cgroup", "/sl/supervisors", nil, []string{}},
		{"v2, elsewhere", v2, "/sys/fs/cgroup", "/", v2, nil},
		{"no v2 file: all before", hybrid[1:], "/sys/fs/cgroup/unified", "/sl/supervisors", hybrid[1:], nil},
		{"none", nil, "/sys/fs/cgroup", "/sl/supervisors", nil, nil},
	}
	for _, tt := range tests {
		now, later := splitSupervisorMoves(tt.files, tt.mount, tt.own)
		if !slices.Equal(now, tt.now) || !slices.Equal(later, tt.later) {
			t.Errorf("%s: now %q, later %q; want %q, %q", tt.name, now, later, tt.now, tt.later)
		}
	}
}

func TestV2CgroupOf(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"12:memory:/a\n0::/sl/supervisors\n": "/sl/supervisors",
		"0::/\n":                             "/",
		"4:memory:/a\n1:cpu:/b\n":            "",
		"":                                   "",
	} {
		if got := v2CgroupOf([]byte(in)); got != want {
			t.Errorf("v2CgroupOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIsChildDir(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		root, dir string
		want      bool
	}{
		{"/var/lib/sl/containers", "/var/lib/sl/containers/abc", true},
		{"/var/lib/sl/containers/", "/var/lib/sl/containers/abc", true},
		{"/var/lib/sl/containers", "/var/lib/sl/containers", false},
		{"/var/lib/sl/containers", "/var/lib/sl/containers/abc/def", false},
		{"/var/lib/sl/containers", "/var/lib/sl/containers/../x", false},
		{"/var/lib/sl/containers", "/var/lib/sl/containers/abc/", false},
		{"/var/lib/sl/containers", "/etc", false},
		{"/var/lib/sl/containers", "abc", false},
		{"/", "/", false},
		{"/var/lib/sl/containers", "", false},
	} {
		if got := isChildDir(tt.root, tt.dir); got != tt.want {
			t.Errorf("isChildDir(%q, %q) = %v, want %v", tt.root, tt.dir, got, tt.want)
		}
	}
}

func TestInV2Cgroup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dir, mount, own string
		want            bool
	}{
		{"/sys/fs/cgroup/sl/guaranteed/x", "/sys/fs/cgroup", "/sl/guaranteed/x", true},
		{"/sys/fs/cgroup/sl/guaranteed/x", "/sys/fs/cgroup/", "/sl/guaranteed/x", true},
		{"/sys/fs/cgroup/unified/sl/guaranteed/x", "/sys/fs/cgroup/unified", "/sl/guaranteed/x", true},
		{"/sys/fs/cgroup/sl/guaranteed/x", "/sys/fs/cgroup", "/sl/agent", false},
		{"/sys/fs/cgroup/sl/guaranteed/x", "/sys/fs/cgroup", "", false},
		{"/sys/fs/cgroup/sl/guaranteed/x", "", "/sl/guaranteed/x", false},
		{"/sys/fs/cgroupx/sl/guaranteed/x", "/sys/fs/cgroup", "/sl/guaranteed/x", false},
		{"/sys/fs/cgroup", "/sys/fs/cgroup", "/", true},
	}
	for _, tt := range tests {
		if got := inV2Cgroup(tt.dir, tt.mount, tt.own); got != tt.want {
			t.Errorf("inV2Cgroup(%q, %q, %q) = %v, want %v", tt.dir, tt.mount, tt.own, got, tt.want)
		}
	}
}
