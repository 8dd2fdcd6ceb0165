package containerizer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/agent/containerizer/supervisor"
)

// cgroupDirs returns every directory of p: the v2 one and each v1
// hierarchy's (hybrid hosts), CPU sets and blkio included.
func cgroupDirs(p cgroups.Paths) []string {
	dirs := p.Dirs()
	for _, d := range []string{p.CPUSet, p.Blkio} {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// membersOf returns the ids a cgroup directory lists: its threads in a v1
// hierarchy (tasks), its threads in the v2 tree (cgroup.threads, which a
// domain cgroup lists too).
func membersOf(t *testing.T, dir string) []int {
	t.Helper()
	file := filepath.Join(dir, "tasks")
	if _, err := os.Stat(file); err != nil {
		file = filepath.Join(dir, "cgroup.threads")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for f := range strings.FieldsSeq(string(data)) {
		id, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("%s: %q", file, f)
		}
		ids = append(ids, id)
	}
	return ids
}

// threadsOf returns the thread ids of process pid.
func threadsOf(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var tids []int
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}

// outside returns the threads of pid missing from some directory of dirs,
// named with the directory.
func outside(t *testing.T, pid int, dirs []string) []string {
	t.Helper()
	var missing []string
	for _, d := range dirs {
		members := membersOf(t, d)
		for _, tid := range threadsOf(t, pid) {
			if !slices.Contains(members, tid) {
				missing = append(missing, fmt.Sprintf("pid %d thread %d not in %s", pid, tid, d))
			}
		}
	}
	return missing
}

func ppidOf(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatalf("no PPid in /proc/%d/status", pid)
	return 0
}

// peakMemory returns the highest memory usage a memory cgroup recorded
// (v1 memory.max_usage_in_bytes, v2 memory.peak), or -1 if the kernel
// keeps none.
func peakMemory(t *testing.T, dir string) int64 {
	t.Helper()
	for _, f := range []string{"memory.max_usage_in_bytes", "memory.peak"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		if err != nil {
			t.Fatalf("%s: %q", f, data)
		}
		return n
	}
	return -1
}

// TestTaskTreeInEveryCgroup: the shim is born in the task's v2 cgroup
// (CLONE_INTO_CGROUP) and in its v1 ones (forked from a thread of the
// supervisor that joined them: StartInCgroups); every thread of the task
// and of what it forks is in every cgroup of the container (v1
// hierarchies and the v2 tree) from its start, memory its children use
// is charged to the container's memory cgroup, and the task's init is
// wholly in them, and the supervisor wholly in its own, once Launch
// returned: neither moves after the report.
func TestTaskTreeInEveryCgroup(t *testing.T) {
	for _, tt := range []struct {
		name string
		iso  Isolation
	}{{"namespaces", DefaultIsolation}, {"none", Isolation{NoNamespaces: true, NoSeccomp: true}}} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.Isolation = tt.iso
			c := newTest(t, cfg)
			const size = 24 << 20
			ct := launch(t, c, Spec{TaskID: "tree", Command: shell(fmt.Sprintf(
				"(head -c %d /dev/zero > big.tmp && mv big.tmp big && exec sleep 1000) & exec sleep 1001", size))})
			c.mu.Lock()
			paths := c.containers[ct.ID].cp.Cgroup
			supervisorPid := c.containers[ct.ID].cp.Supervisor.Pid
			c.mu.Unlock()
			dirs := cgroupDirs(paths)
			// The task, its child (after its write, sleeping), and with
			// namespaces their init, the shim; mv may still be ending
			// when the file appears.
			want := 2
			if !tt.iso.NoNamespaces {
				want = 3
			}
			var pids []int
			eventually(t, "the task's child wrote its file and sleeps", func() bool {
				st, err := os.Stat(filepath.Join(ct.Sandbox, "big"))
				if err != nil || st.Size() != size {
					return false
				}
				pids, err = c.Pids(ct.ID)
				return err == nil && len(pids) == want
			})
			init := 0
			if !tt.iso.NoNamespaces {
				init = ppidOf(t, ct.Pid)
			}
			if !slices.Contains(pids, ct.Pid) || init != 0 && !slices.Contains(pids, init) {
				t.Fatalf("pids %v, want the task %d, its child and with namespaces the init %d", pids, ct.Pid, init)
			}
			for _, pid := range pids {
				if pid == init {
					continue
				}
				for _, m := range outside(t, pid, dirs) {
					t.Error(m)
				}
			}
			if init != 0 {
				for _, m := range outside(t, init, dirs) {
					t.Error("the init: " + m)
				}
			}
			if paths.Memory != "" || c.Mode() != ModeHybrid {
				memDir := paths.Memory
				if memDir == "" {
					memDir = paths.Unified
				}
				if peak := peakMemory(t, memDir); peak >= 0 && peak < size {
					t.Errorf("peak memory of %s = %d, want at least the %d bytes the task's child wrote", memDir, peak, size)
				}
			}
			for _, m := range outside(t, supervisorPid, cgroupDirs(c.supervisors)) {
				t.Error("the supervisor: " + m)
			}
		})
	}
}

// TestStartInCgroupsBornInV1: supervisor.StartInCgroups starts a process
// that is in every cgroup it is given (the v1 hierarchies of hybrid hosts
// included) when Start returns, before anyone could move it, and leaves
// none of the caller's threads in them (the thread that forked it
// ended). supervisor.StartInCgroup, v2 alone, fails the first check on a
// hybrid host.
func TestStartInCgroupsBornInV1(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	if c.Mode() != ModeHybrid {
		t.Log("not a hybrid host: only the v2 cgroup is checked")
	}
	c.closeWarm() // only the process started here in the supervisors' cgroups
	dirs := cgroupDirs(c.supervisors)
	for range 5 {
		cmd, born, err := supervisor.StartInCgroups(func() *exec.Cmd {
			cmd := exec.Command("sleep", "1000")
			cmd.SysProcAttr = &syscall.SysProcAttr{}
			return cmd
		}, supervisorCgroup(c.supervisors))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range outside(t, cmd.Process.Pid, dirs) {
			t.Errorf("born %v: %s", born, m)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	self := threadsOf(t, os.Getpid())
	eventually(t, "none of the test's threads in the supervisors' cgroups", func() bool {
		for _, d := range dirs {
			for _, tid := range membersOf(t, d) {
				if slices.Contains(self, tid) || tid == os.Getpid() {
					return false
				}
			}
		}
		return true
	})
}
