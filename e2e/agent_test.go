package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/privileged"
	"github.com/slackline/slackline/internal/server"
)

// realAgent is a started slackline-agent with its own cgroup root.
type realAgent struct {
	proc       *process
	args       []string
	listen     string
	cgroupRoot string
}

func startAgent(t *testing.T, coordinatorAddr, name, res string, extra ...string) *realAgent {
	t.Helper()
	return startAgentAt(t, coordinatorAddr, name, cgrouptest.PriorityRoot(fmt.Sprintf("slackline-e2e-%s-%d", name, time.Now().UnixNano()%1e9)), res, extra...)
}

// startAgentAt is startAgent with the agent's --cgroup-root root (under
// a cgroup bounding the node's memory, say: boundedNode).
func startAgentAt(t *testing.T, coordinatorAddr, name, root, res string, extra ...string) *realAgent {
	t.Helper()
	listen := freeAddr(t)
	args := []string{"--coordinator", "http://" + coordinatorAddr, "--listen", listen, "--hostname", name,
		"--work-dir", filepath.Join(cgrouptest.WorkDir(t, root), name), "--cgroup-root", root, "--resources", res,
		"--kill-grace-period", "500ms"}
	args = append(args, extra...)
	a := &realAgent{proc: start(t, "slackline-agent", args...), args: args, listen: listen, cgroupRoot: root}
	return a
}

// EnvEBPFLoadTimeout overrides how long waitEBPFLoaded waits for the
// agent's eBPF monitor to load (a Go duration, default 60s): in an emulated
// 6.12 guest beside a loaded host it took 6.5 minutes (scripts/diskio-guest
// sets 15m).
const EnvEBPFLoadTimeout = "SLACKLINE_E2E_EBPF_LOAD_TIMEOUT"

// ebpfLoadTimeout is waitEBPFLoaded's bound: EnvEBPFLoadTimeout, else 60 s.
func ebpfLoadTimeout(t testing.TB) time.Duration {
	v := os.Getenv(EnvEBPFLoadTimeout)
	if v == "" {
		return 60 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 10m", EnvEBPFLoadTimeout, v)
	}
	return d
}

// waitEBPFLoaded waits until the agent's eBPF monitor, which loads after
// the agent registers, is loaded (or failed): GetFeatures' ebpf_monitor
// is no longer loading (or absent: --ebpf=false).
func waitEBPFLoaded(t *testing.T, node slacklinev1connect.NodeServiceClient) {
	t.Helper()
	start := time.Now()
	defer func() {
		t.Logf("eBPF monitor loaded (or not loading) after %v", time.Since(start).Round(100*time.Millisecond))
	}()
	eventually(t, ebpfLoadTimeout(t), func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := node.GetFeatures(ctx, connect.NewRequest(&slacklinev1.GetFeaturesRequest{}))
		if err != nil {
			return err.Error()
		}
		for _, f := range resp.Msg.GetFeatures() {
			if f.GetName() == "ebpf_monitor" {
				if f.GetStatus() == slacklinev1.FeatureStatus_FEATURE_STATUS_LOADING {
					return "eBPF monitor loading"
				}
				return ""
			}
		}
		return "" // --ebpf=false
	})
}

// restart SIGKILLs the agent and starts it again with the same flags.
func (a *realAgent) restart(t *testing.T) {
	a.proc.kill()
	a.proc = start(t, "slackline-agent", a.args...)
}

func (a *realAgent) node() slacklinev1connect.NodeServiceClient {
	return slacklinev1connect.NewNodeServiceClient(server.NewClient(), "http://"+a.listen)
}

func (a *realAgent) containers(t *testing.T) []*slacklinev1.Container {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := a.node().GetContainers(ctx, connect.NewRequest(&slacklinev1.GetContainersRequest{}))
	if err != nil {
		return nil
	}
	return resp.Msg.GetContainers()
}

func waitAgentsActive(t *testing.T, addr string, n int) {
	t.Helper()
	op := operator(addr)
	eventually(t, startTimeout, func() string {
		state, err := getState(t, op)
		if err != nil {
			return err.Error()
		}
		active := 0
		for _, a := range state.GetAgents() {
			if a.GetState() == slacklinev1.AgentState_AGENT_STATE_ACTIVE {
				active++
			}
		}
		if active != n {
			return fmt.Sprintf("%d of %d agents active", active, n)
		}
		return ""
	})
}

// taskStatuses returns the latest status of every task of a framework name.
func taskStatuses(t *testing.T, addr, name string) map[string]*slacklinev1.Task {
	state, err := getState(t, operator(addr))
	if err != nil {
		return nil
	}
	ids := map[string]bool{}
	for _, fw := range state.GetFrameworks() {
		if fw.GetInfo().GetName() == name {
			ids[fw.GetInfo().GetId()] = true
		}
	}
	out := map[string]*slacklinev1.Task{}
	for _, task := range state.GetTasks() {
		if ids[task.GetFrameworkId()] {
			out[task.GetTaskId()] = task
		}
	}
	return out
}

// startTimeout bounds a coordinator's start and agents' registration in the
// end-to-end tests: long, because it only ends a hung run (a passing run
// waits no longer for it) and a shared, loaded machine is slow.
const startTimeout = 2 * time.Minute

func startCoordinator(t *testing.T) (string, *process, string) {
	t.Helper()
	addr, workDir := freeAddr(t), t.TempDir()
	p := start(t, "slackline-coordinator", coordinatorArgs(addr, workDir)...)
	// Generous: the bound only ends a hung start. Beside CPU hogs and other
	// tests' disk writes, a coordinator's first registry commit (fsyncs)
	// took 10 s in a CI run.
	eventually(t, startTimeout, func() string { _, err := getState(t, operator(addr)); return errString(err) })
	return addr, p, workDir
}

// TestRealAgents runs real commands on two real agents: successes, a
// failure with its exit code, an OOM kill, and a kill that leaves nothing.
func TestRealAgents(t *testing.T) {
	privileged.Require(t)
	addr, _, _ := startCoordinator(t)
	agents := []*realAgent{
		startAgent(t, addr, "agent-1", "cpus:2;mem:1024"),
		startAgent(t, addr, "agent-2", "cpus:2;mem:1024"),
	}
	waitAgentsActive(t, addr, 2)

	t.Run("ten sleeps finish", func(t *testing.T) {
		batch := start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "sleepers", "--tasks", "10",
			"--task-resources", "cpus:0.2;mem:32", "--command", "sleep 1")
		waitExit(t, batch, 60*time.Second)
		if batch.err != nil || !strings.Contains(batch.out.String(), "10 finished, 0 failed") {
			t.Fatalf("batch-framework: %v\n%s", batch.err, batch.out.String())
		}
	})
	t.Run("exit code", func(t *testing.T) {
		batch := start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "exit3", "--tasks", "1",
			"--max-attempts", "1", "--task-resources", "cpus:0.1;mem:32", "--command", "echo bye; exit 3")
		waitExit(t, batch, 60*time.Second)
		if batch.err == nil {
			t.Fatal("batch-framework succeeded with a task that exits 3")
		}
		for _, task := range taskStatuses(t, addr, "exit3") {
			st := task.GetStatus()
			if task.GetState() != slacklinev1.TaskState_TASK_STATE_FAILED || !strings.Contains(st.GetMessage(), "3") {
				t.Fatalf("task %s: %v %q, want FAILED naming exit code 3", task.GetTaskId(), task.GetState(), st.GetMessage())
			}
			// Its stdout stays readable through the agent after it ended.
			if out := ctl(t, addr, "logs", task.GetTaskId()); out != "bye\n" {
				t.Fatalf("slacklinectl logs %s = %q, want %q", task.GetTaskId(), out, "bye\n")
			}
		}
	})
	t.Run("oom", func(t *testing.T) {
		// tail holds its whole input when it has no newline.
		batch := start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "hog", "--tasks", "1",
			"--max-attempts", "1", "--task-resources", "cpus:0.1;mem:64", "--command", "head -c 400m /dev/zero | tail")
		waitExit(t, batch, 60*time.Second)
		tasks := taskStatuses(t, addr, "hog")
		if len(tasks) == 0 {
			t.Fatal("no task recorded")
		}
		for _, task := range tasks {
			st := task.GetStatus()
			if task.GetState() != slacklinev1.TaskState_TASK_STATE_FAILED || st.GetReason() != slacklinev1.Reason_REASON_CONTAINER_LIMITATION_MEMORY {
				t.Fatalf("task %s: %v %v %q, want FAILED with REASON_CONTAINER_LIMITATION_MEMORY", task.GetTaskId(), task.GetState(), st.GetReason(), st.GetMessage())
			}
		}
	})
	t.Run("kill leaves no process", func(t *testing.T) {
		batch := start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "stubborn", "--tasks", "1",
			"--task-resources", "cpus:0.1;mem:32", "--teardown-on-exit",
			"--command", `trap "" TERM; (setsid sleep 1000 &); sleep 1000`)
		var cgroup string
		var pids []int
		eventually(t, 30*time.Second, func() string {
			for _, a := range agents {
				for _, c := range a.containers(t) {
					if c.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
						cgroup = c.GetCgroupPath()
						pids = cgroupPids(cgroup)
						if len(pids) >= 2 {
							return ""
						}
					}
				}
			}
			return "no running container with its daemonized child yet"
		})
		batch.stop() // SIGTERM: --teardown-on-exit tears the framework down; its task is killed
		eventually(t, 30*time.Second, func() string {
			for _, pid := range pids {
				if unix.Kill(pid, 0) == nil {
					return fmt.Sprintf("process %d of %s still alive", pid, cgroup)
				}
			}
			if left := cgroupPids(cgroup); len(left) > 0 {
				return fmt.Sprintf("cgroup %s still has %v", cgroup, left)
			}
			return ""
		})
	})
}

// cgroupPids lists the processes of a container's cgroup in the v2 tree
// (hybrid machines mount it at /sys/fs/cgroup/unified).
func cgroupPids(cgroupPath string) []int {
	for _, base := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		raw, err := os.ReadFile(filepath.Join(base, cgroupPath, "cgroup.procs"))
		if err != nil {
			continue
		}
		var pids []int
		for _, f := range strings.Fields(string(raw)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return pids
	}
	return nil
}

func waitExit(t *testing.T, p *process, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v:\n%s", p.name, timeout, p.out.String())
	}
}

// TestAgentAndCoordinatorRestarts: a running task survives an agent SIGKILL
// (same process, still RUNNING) and a coordinator SIGKILL (the same tasks
// once the agents re-register).
func TestAgentAndCoordinatorRestarts(t *testing.T) {
	privileged.Require(t)
	addr, coord, coordDir := startCoordinator(t)
	agent := startAgent(t, addr, "restart-agent", "cpus:2;mem:1024")
	waitAgentsActive(t, addr, 1)
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "long", "--tasks", "2",
		"--task-resources", "cpus:0.1;mem:32", "--command", "sleep 1000", "--failover-timeout", "1h")
	pids := map[string]int32{}
	eventually(t, 30*time.Second, func() string {
		for _, c := range agent.containers(t) {
			if c.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
				pids[c.GetTaskId()] = c.GetPid()
			}
		}
		if len(pids) != 2 {
			return fmt.Sprintf("%d containers running", len(pids))
		}
		return ""
	})

	agent.restart(t)
	eventually(t, 30*time.Second, func() string {
		got := map[string]int32{}
		for _, c := range agent.containers(t) {
			got[c.GetTaskId()] = c.GetPid()
		}
		for task, pid := range pids {
			if got[task] != pid {
				return fmt.Sprintf("after the agent restart task %s has pid %d, want %d", task, got[task], pid)
			}
		}
		for task, st := range taskStatuses(t, addr, "long") {
			if st.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING {
				return fmt.Sprintf("task %s is %v", task, st.GetState())
			}
		}
		return ""
	})

	coord.kill()
	start(t, "slackline-coordinator", coordinatorArgs(addr, coordDir)...)
	eventually(t, 30*time.Second, func() string {
		tasks := taskStatuses(t, addr, "long")
		if len(tasks) != 2 {
			return fmt.Sprintf("%d tasks known after the coordinator restart", len(tasks))
		}
		for task, st := range tasks {
			if st.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING || pids[task] == 0 {
				return fmt.Sprintf("task %s is %v", task, st.GetState())
			}
		}
		return ""
	})
	for task, pid := range pids {
		if unix.Kill(int(pid), 0) != nil {
			t.Fatalf("process %d of task %s died across the restarts", pid, task)
		}
	}
}

// TestUpdateWhileCoordinatorDown: a task ends while the coordinator is
// down; its update is checkpointed by the agent and reaches the framework
// once the coordinator is back, so the batch finishes.
func TestUpdateWhileCoordinatorDown(t *testing.T) {
	privileged.Require(t)
	addr, coord, coordDir := startCoordinator(t)
	agent := startAgent(t, addr, "down-agent", "cpus:2;mem:1024")
	waitAgentsActive(t, addr, 1)
	batch := start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "patient", "--tasks", "2",
		"--task-resources", "cpus:0.1;mem:32", "--command", "sleep 3", "--failover-timeout", "1h")
	eventually(t, 30*time.Second, func() string {
		state, err := getState(t, operator(addr))
		if err != nil {
			return err.Error()
		}
		if n := runningTasks(state)["patient"]; n != 2 {
			return fmt.Sprintf("%d tasks running", n)
		}
		return ""
	})
	coord.kill()
	// The tasks end while nobody listens.
	eventually(t, 30*time.Second, func() string {
		for _, c := range agent.containers(t) {
			if c.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
				return "task " + c.GetTaskId() + " still running"
			}
		}
		return ""
	})
	start(t, "slackline-coordinator", coordinatorArgs(addr, coordDir)...)
	waitExit(t, batch, 60*time.Second)
	if batch.err != nil || !strings.Contains(batch.out.String(), "2 finished, 0 failed") {
		t.Fatalf("batch-framework after the coordinator restart: %v\n%s", batch.err, batch.out.String())
	}
}
