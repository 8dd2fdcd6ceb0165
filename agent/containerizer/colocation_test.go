package containerizer

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/resources"
)

// cpusAllowed reads a process's Cpus_allowed_list.
func cpusAllowed(t *testing.T, pid int) []int {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			cpus, err := cgroups.ParseCPUList(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return cpus
		}
	}
	t.Fatalf("no Cpus_allowed_list for pid %d", pid)
	return nil
}

// TestRevocableCPUs: a revocable task follows the CPUs its subtree is
// confined to, a guaranteed one keeps every CPU, and giving the subtree
// every CPU back reaches the running task.
func TestRevocableCPUs(t *testing.T) {
	c := newTest(t, testConfig(t))
	if _, err := c.RevocableCPUs(); errors.Is(err, ErrUnsupported) {
		t.Skipf("no cpuset controller: %v", err)
	}
	all := c.CPUs()
	if len(all) < 2 {
		t.Skipf("%d CPU: nothing to confine to", len(all))
	}
	g := launch(t, c, Spec{TaskID: "g", Resources: resources.MustParse("cpus:1;mem:64"), Command: shell("exec sleep 1000")})
	r := launch(t, c, Spec{TaskID: "r", Revocable: true, Resources: resources.MustParse("cpus:0.5;mem:64"), Command: shell("exec sleep 1000")})
	last := all[len(all)-1:]
	if err := c.SetRevocableCPUs(last); err != nil {
		t.Fatal(err)
	}
	if got, err := c.RevocableCPUs(); err != nil || !slices.Equal(got, last) {
		t.Errorf("RevocableCPUs = %v, %v; want %v", got, err, last)
	}
	if got := cpusAllowed(t, r.Pid); !slices.Equal(got, last) {
		t.Errorf("revocable task may run on %v, want %v", got, last)
	}
	if got := cpusAllowed(t, g.Pid); !slices.Equal(got, all) {
		t.Errorf("guaranteed task may run on %v, want every CPU %v", got, all)
	}
	if err := c.SetRevocableCPUs(nil); err != nil {
		t.Fatal(err)
	}
	if got := cpusAllowed(t, r.Pid); !slices.Equal(got, all) {
		t.Errorf("after giving every CPU back the revocable task may run on %v, want %v", got, all)
	}
	// The getters hold what they read (#29), but a write through the
	// setters shows at the next read.
	if got, err := c.RevocableCPUs(); err != nil || !slices.Equal(got, all) {
		t.Errorf("RevocableCPUs after giving every CPU back = %v, %v; want %v", got, err, all)
	}
	if got, err := c.RevocableCPULimit(); err != nil || got != 0 {
		t.Errorf("RevocableCPULimit before a cap = %v, %v; want 0", got, err)
	}
	if err := c.SetRevocableCPULimit(0.5, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got, err := c.RevocableCPULimit(); err != nil || got != 0.5 {
		t.Errorf("RevocableCPULimit = %v, %v", got, err)
	}
	for _, ct := range []*Container{g, r} {
		if err := c.Kill(context.Background(), ct.ID); err != nil {
			t.Fatal(err)
		}
		waitExit(t, c, ct.ID)
	}
}

// TestSupervisorsAndAgentCgroups: supervisors live in <root>/supervisors,
// out of the agent's cgroup, and IsolateAgent moves a process into
// <root>/agent; ending everything in the agent's cgroup (as a container
// runtime does with the agent's pod) leaves the supervisor and its task
// running.
func TestSupervisorsAndAgentCgroups(t *testing.T) {
	cfg := testConfig(t)
	c := newTest(t, cfg)
	ct := launch(t, c, Spec{TaskID: "sleep", Command: shell("exec sleep 1000")})
	c.mu.Lock()
	supervisor := c.containers[ct.ID].cp.Supervisor.Pid
	c.mu.Unlock()
	want := "/" + filepath.Join(cfg.CgroupRoot, cgroups.SupervisorsCgroup)
	if got := cgroupOf(t, supervisor); got != want {
		t.Errorf("supervisor %d in cgroup %q, want %q", supervisor, got, want)
	}

	// A stand-in for the agent: a process moved into <root>/agent.
	agent := exec.Command("sleep", "1000")
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	defer agent.Process.Kill()
	if err := c.IsolateAgent(agent.Process.Pid); err != nil {
		t.Fatal(err)
	}
	agentCgroup := "/" + filepath.Join(cfg.CgroupRoot, cgroups.AgentCgroup)
	if got := cgroupOf(t, agent.Process.Pid); got != agentCgroup {
		t.Errorf("agent in cgroup %q, want %q", got, agentCgroup)
	}
	// The agent's cgroup killed: supervisor and task live on.
	if err := c.layout.PathsOf(filepath.Join(cfg.CgroupRoot, cgroups.AgentCgroup)).Kill(); err != nil {
		t.Fatal(err)
	}
	_ = agent.Wait()
	time.Sleep(100 * time.Millisecond)
	for _, pid := range []int{supervisor, ct.Pid} {
		if err := unix.Kill(pid, 0); err != nil {
			t.Errorf("pid %d gone after the agent's cgroup was killed: %v", pid, err)
		}
	}
	if err := c.Kill(context.Background(), ct.ID); err != nil {
		t.Fatal(err)
	}
	waitExit(t, c, ct.ID)
}

// cgroupOf returns a process's cgroup in the v2 tree ("0::" line).
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "0::"); ok {
			return v
		}
	}
	return ""
}
