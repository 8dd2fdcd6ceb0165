package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/privileged"
)

// TestMaintenanceWithSim is the maintenance scenario on three
// simulated agents (no privileges needed).
func TestMaintenanceWithSim(t *testing.T) {
	addr, _, _ := startCoordinator(t)
	// A shut-down sim agent comes back (as a new agent on the same host)
	// after 2 s, and is refused while its machine is DOWN.
	start(t, "slackline-sim", "--coordinator", "http://"+addr, "--agents", "3", "--resources", "cpus:2;mem:1024",
		"--hostname-prefix", "maint-", "--restart-after-shutdown", "2s")
	waitAgentsActive(t, addr, 3)
	maintenanceScenario(t, addr)
}

// TestMaintenanceWithRealAgents is the same scenario on three real agents.
func TestMaintenanceWithRealAgents(t *testing.T) {
	privileged.Require(t)
	addr, _, _ := startCoordinator(t)
	for i := range 3 {
		startAgent(t, addr, fmt.Sprintf("maint-real-%d", i), "cpus:2;mem:1024")
	}
	waitAgentsActive(t, addr, 3)
	maintenanceScenario(t, addr)
}

// maintenanceScenario: service-framework keeps 2 instances on 3 agents.
// Maintenance is scheduled for the agent of one instance: the framework
// gets an inverse offer, starts a replacement elsewhere, stops the old
// instance and accepts (visible in GetMaintenanceStatus). StartMaintenance
// shuts the agent down; StopMaintenance lets it register again and be
// offered resources. 2 instances run throughout.
func maintenanceScenario(t *testing.T, addr string) {
	op := operator(addr)
	start(t, "service-framework", "--coordinator", "http://"+addr, "--name", "web", "--instances", "2",
		"--task-resources", "cpus:0.5;mem:64", "--command", "sleep 3600", "--label", "sim.duration=1h")

	var webID, drainHost, drainAgent string
	eventually(t, 30*time.Second, func() string {
		state, err := getState(t, op)
		if err != nil {
			return err.Error()
		}
		if n := runningTasks(state)["web"]; n != 2 {
			return fmt.Sprintf("%d web instances running", n)
		}
		hosts := agentHosts(state)
		for _, task := range state.GetTasks() {
			if task.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
				webID, drainAgent, drainHost = task.GetFrameworkId(), task.GetAgentId(), hosts[task.GetAgentId()]
			}
		}
		return ""
	})

	// From now on, 2 instances must run at every sample.
	watch := watchRunning(t, addr, "web")

	schedule := filepath.Join(t.TempDir(), "schedule.yaml")
	windowStart := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if err := os.WriteFile(schedule, fmt.Appendf(nil, `windows:
  - machine_ids: [{hostname: %s}]
    unavailability: {start: "%s", duration: 1h}
`, drainHost, windowStart), 0o600); err != nil {
		t.Fatal(err)
	}
	ctl(t, addr, "maintenance", "schedule", "set", "-f", schedule)

	eventually(t, 60*time.Second, func() string {
		status, err := op.GetMaintenanceStatus(context.Background(), connect.NewRequest(&slacklinev1.GetMaintenanceStatusRequest{}))
		if err != nil {
			return err.Error()
		}
		machines := status.Msg.GetStatus().GetDrainingMachines()
		if len(machines) != 1 {
			return fmt.Sprintf("draining machines %v", machines)
		}
		var answer slacklinev1.InverseOfferStatus
		for _, st := range machines[0].GetStatuses() {
			if st.GetFrameworkId() == webID {
				answer = st.GetStatus()
				if st.GetTimestamp() == nil && answer == slacklinev1.InverseOfferStatus_INVERSE_OFFER_STATUS_ACCEPT {
					return "ACCEPT without a timestamp"
				}
			}
		}
		if answer != slacklinev1.InverseOfferStatus_INVERSE_OFFER_STATUS_ACCEPT {
			return fmt.Sprintf("web's answer for %s is %v", drainHost, answer)
		}
		state, err := getState(t, op)
		if err != nil {
			return err.Error()
		}
		for _, task := range state.GetTasks() {
			if task.GetAgentId() == drainAgent && task.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
				return fmt.Sprintf("instance %s still runs on the draining agent", task.GetTaskId())
			}
		}
		return ""
	})

	ctl(t, addr, "maintenance", "down", drainHost)
	eventually(t, 30*time.Second, func() string {
		state, err := getState(t, op)
		if err != nil {
			return err.Error()
		}
		for _, a := range state.GetAgents() {
			if a.GetHostname() == drainHost && a.GetState() != slacklinev1.AgentState_AGENT_STATE_GONE {
				return fmt.Sprintf("agent on %s is %v", drainHost, a.GetState())
			}
		}
		return ""
	})
	if out := ctl(t, addr, "maintenance", "status", "-o", "json"); !containsAll(out, "downMachines", drainHost) {
		t.Fatalf("maintenance status after down:\n%s", out)
	}
	// While DOWN its agent keeps trying to register and is refused.
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		state, err := getState(t, op)
		if err != nil {
			continue
		}
		for _, a := range state.GetAgents() {
			if a.GetHostname() == drainHost && a.GetState() == slacklinev1.AgentState_AGENT_STATE_ACTIVE {
				t.Fatalf("an agent of DOWN %s registered: %v", drainHost, a)
			}
		}
	}

	ctl(t, addr, "maintenance", "up", drainHost)
	eventually(t, 60*time.Second, func() string {
		state, err := getState(t, op)
		if err != nil {
			return err.Error()
		}
		for _, a := range state.GetAgents() {
			if a.GetHostname() == drainHost && a.GetState() == slacklinev1.AgentState_AGENT_STATE_ACTIVE && a.GetMode() == slacklinev1.MachineMode_MACHINE_MODE_UP {
				return ""
			}
		}
		return drainHost + " has no active agent yet"
	})
	// The returned agent is offered resources: a service of one instance
	// per agent must use it.
	start(t, "service-framework", "--coordinator", "http://"+addr, "--name", "probe", "--instances", "3",
		"--task-resources", "cpus:0.25;mem:32", "--command", "sleep 3600", "--label", "sim.duration=1h")
	eventually(t, 60*time.Second, func() string {
		state, err := getState(t, op)
		if err != nil {
			return err.Error()
		}
		hosts := agentHosts(state)
		names := map[string]string{}
		for _, fw := range state.GetFrameworks() {
			names[fw.GetInfo().GetId()] = fw.GetInfo().GetName()
		}
		for _, task := range state.GetTasks() {
			if names[task.GetFrameworkId()] == "probe" && hosts[task.GetAgentId()] == drainHost && task.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
				return ""
			}
		}
		return "no probe instance runs on " + drainHost
	})
	if minimum, samples := watch(); minimum < 2 || samples < 3 {
		t.Fatalf("web instances running: minimum %d over %d samples, want 2 throughout", minimum, samples)
	}
}

// watchRunning samples the RUNNING tasks of a framework every 20 ms until
// the returned function is called, which reports the minimum seen and the
// number of samples.
func watchRunning(t *testing.T, addr, name string) func() (minimum, samples int) {
	op := operator(addr)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	minimum, samples := 1<<30, 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			state, err := getState(t, op)
			if err != nil {
				continue
			}
			n := runningTasks(state)[name]
			mu.Lock()
			minimum, samples = min(minimum, n), samples+1
			mu.Unlock()
		}
	}()
	t.Cleanup(cancel)
	return func() (int, int) {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return minimum, samples
	}
}

func agentHosts(state *slacklinev1.GetStateResponse) map[string]string {
	out := map[string]string{}
	for _, a := range state.GetAgents() {
		out[a.GetId()] = a.GetHostname()
	}
	return out
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
