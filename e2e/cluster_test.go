package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestDRFSeedExample reproduces the DRF paper's example with the real
// binaries: one agent of 9 CPUs and 18 GB; framework A runs <1 CPU, 4 GB>
// tasks, B <3 CPUs, 1 GB>, each launching one task per offer. DRF ends at
// 3 tasks for A and 2 for B (equal dominant shares of 2/3).
func TestDRFSeedExample(t *testing.T) {
	addr := freeAddr(t)
	start(t, "slackline-coordinator", coordinatorArgs(addr, t.TempDir())...)
	op := operator(addr)
	eventually(t, startTimeout, func() string {
		_, err := getState(t, op)
		return errString(err)
	})
	for _, fw := range []struct{ name, res string }{{"fw-a", "cpus:1;mem:4096"}, {"fw-b", "cpus:3;mem:1024"}} {
		start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", fw.name, "--tasks", "10",
			"--max-tasks-per-offer", "1", "--task-resources", fw.res, "--command", "sleep 3600")
	}
	eventually(t, 20*time.Second, func() string {
		state, err := getState(t, op)
		if err != nil {
			return err.Error()
		}
		connected := 0
		for _, fw := range state.GetFrameworks() {
			if fw.GetState() == slacklinev1.FrameworkState_FRAMEWORK_STATE_CONNECTED {
				connected++
			}
		}
		if connected != 2 {
			return fmt.Sprintf("%d frameworks connected", connected)
		}
		return ""
	})
	// The agent joins only now, so neither framework had a head start.
	start(t, "slackline-sim", "--coordinator", "http://"+addr, "--agents", "1", "--resources", "cpus:9;mem:18432",
		"--hostname-prefix", "drf-")
	var counts map[string]int
	eventually(t, 30*time.Second, func() string {
		state, err := getState(t, op)
		if err != nil {
			return err.Error()
		}
		counts = runningTasks(state)
		if counts["fw-a"]+counts["fw-b"] < 5 {
			return fmt.Sprintf("running tasks %v", counts)
		}
		return ""
	})
	// Stable: nothing more fits (9 CPUs used), and nothing was taken back.
	time.Sleep(2 * time.Second)
	state, err := getState(t, op)
	if err != nil {
		t.Fatal(err)
	}
	counts = runningTasks(state)
	if counts["fw-a"] != 3 || counts["fw-b"] != 2 {
		t.Fatalf("running tasks %v, want fw-a 3 and fw-b 2 (DRF)", counts)
	}
	shares := map[string]float64{}
	for _, r := range state.GetRoles() {
		shares[r.GetName()] = r.GetDominantShare()
	}
	if s := shares["*"]; s < 0.99 {
		t.Fatalf("role * share %v, want ~1 (all CPUs held)", s)
	}
}

// TestCoordinatorKillRestart SIGKILLs the coordinator under load and starts
// it again on the same work dir: agents, the framework, weights and quota
// survive; agents and the framework re-register; tasks are reconciled.
func TestCoordinatorKillRestart(t *testing.T) {
	addr := freeAddr(t)
	workDir := t.TempDir()
	coord := start(t, "slackline-coordinator", coordinatorArgs(addr, workDir)...)
	op := operator(addr)
	eventually(t, startTimeout, func() string { _, err := getState(t, op); return errString(err) })
	start(t, "slackline-sim", "--coordinator", "http://"+addr, "--agents", "2", "--resources", "cpus:4;mem:8192",
		"--hostname-prefix", "restart-", "--work-dir", filepath.Join(t.TempDir(), "sim"))
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "long", "--tasks", "3",
		"--task-resources", "cpus:1;mem:512", "--command", "sleep 3600", "--failover-timeout", "1h",
		"--role", "eng/batch")
	ctl(t, addr, "set", "weight", "eng", "2.5")
	ctl(t, addr, "set", "quota", "eng/batch", "cpus:6;mem:8192")
	eventually(t, 30*time.Second, func() string {
		state, err := getState(t, op)
		if err != nil {
			return err.Error()
		}
		if n := runningTasks(state)["long"]; n != 3 {
			return fmt.Sprintf("%d tasks running", n)
		}
		return ""
	})
	before, _ := getState(t, op)

	coord.kill()
	start(t, "slackline-coordinator", coordinatorArgs(addr, workDir)...)
	eventually(t, 30*time.Second, func() string {
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
		if active != 2 || len(state.GetAgents()) != 2 {
			return fmt.Sprintf("%d of %d agents active", active, len(state.GetAgents()))
		}
		if len(state.GetFrameworks()) != 1 || state.GetFrameworks()[0].GetState() != slacklinev1.FrameworkState_FRAMEWORK_STATE_CONNECTED {
			return fmt.Sprintf("frameworks %v", state.GetFrameworks())
		}
		if n := runningTasks(state)["long"]; n != 3 {
			return fmt.Sprintf("%d tasks running", n)
		}
		return ""
	})
	after, _ := getState(t, op)
	if a, b := ids(after.GetAgents()), ids(before.GetAgents()); a != b {
		t.Fatalf("agents after restart %s, before %s", a, b)
	}
	if after.GetFrameworks()[0].GetInfo().GetId() != before.GetFrameworks()[0].GetInfo().GetId() {
		t.Fatal("framework id changed across the restart")
	}
	roles := ctl(t, addr, "get", "roles")
	for _, want := range []string{"eng ", "2.5", "eng/batch", "cpus:6;mem:8192"} {
		if !strings.Contains(roles, want) {
			t.Fatalf("slacklinectl get roles after restart lacks %q:\n%s", want, roles)
		}
	}
}

func ids(agents []*slacklinev1.Agent) string {
	var out []string
	for _, a := range agents {
		out = append(out, a.GetId())
	}
	return strings.Join(out, ",")
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ctl runs slacklinectl against the coordinator and returns its output.
func ctl(t *testing.T, addr string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "slacklinectl"), append([]string{"--coordinator", "http://" + addr}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("slacklinectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
