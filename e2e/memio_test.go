package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/agent/containerizer/cgroups"
	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/cgrouptest/nodecgroup"
	"github.com/slackline/slackline/internal/privileged"
)

// TestRevocableMemOffer: with the agent's defaults (no
// --oversubscribe-memory), a guaranteed task that leaves most of its mem
// unused makes a revocable mem offer to a framework with the capability.
func TestRevocableMemOffer(t *testing.T) {
	privileged.Require(t)
	addr, _, _ := startCoordinator(t)
	startAgent(t, addr, "memoffer", "cpus:2;mem:2048", "--monitor-interval", "100ms",
		"--oversubscribed-resources-interval", "200ms", "--estimator-window", "5s", "--qos-controller", "noop")
	waitAgentsActive(t, addr, 1)
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "guaranteed", "--tasks", "1",
		"--task-resources", "cpus:1;mem:1024", "--command", "sleep 1000")
	capable := startWatcher(t, addr, "capable", true)
	eventually(t, 60*time.Second, func() string {
		capable.mu.Lock()
		defer capable.mu.Unlock()
		for _, o := range capable.revocable {
			if r, _, _ := frameworkapi.OfferResources(o); r.Mem() > 0 {
				if r.Mem() > 1024 {
					return fmt.Sprintf("revocable mem %v MiB, more than the guaranteed task's 1024", r.Mem())
				}
				return ""
			}
		}
		return "no revocable mem offered"
	})
}

// TestQoSMemoryReclaim: a guaranteed task with a hot working set and a
// revocable memory hog on one agent whose node is bounded by a cgroup
// memory limit of its own (boundedNode, 3 GiB): the node's MemAvailable is
// that limit less what the agent's tasks hold, and its memory pressure
// that cgroup's, whatever the host's other tenants do (the host's
// MemAvailable only counts once it falls below the bound's).
// The reclaim line is 2 GiB and the calm line 92 MiB above it: the
// guaranteed task alone leaves the node calm (~2.8 GiB available), the
// 1.5 GiB hog takes it below the line (~1.3 GiB), and nothing else moves
// it. The reclaim controller first takes memory back without killing
// (memory.high, where the host has it: pure cgroup v2), then freezes the
// revocable subtree, kills the hog only because the pressure persists (its
// anonymous memory cannot be reclaimed without swap), and once calm thaws
// the subtree (and releases memory.high). The corrections are exactly that
// sequence; the guaranteed task keeps running, is never corrected, and is
// never OOM-killed.
func TestQoSMemoryReclaim(t *testing.T) {
	privileged.Require(t)
	const (
		nodeMiB = 3072
		lineMiB = 2048
	)
	addr, _, _ := startCoordinator(t)
	root := boundedNode(t, "memreclaim", nodeMiB)
	agent := startAgentAt(t, addr, "memreclaim", root, "cpus:2;mem:2560", "--monitor-interval", "100ms",
		"--oversubscribed-resources-interval", "200ms", "--estimator-window", "5s", "--qos-controller", "reclaim",
		"--qos-reclaim-low-available", fmt.Sprint(lineMiB), "--qos-memory-min-available", "256")
	waitAgentsActive(t, addr, 1)
	// A hot working set: 200 MiB written over and over, a pass a second
	// (so that it leaves CPU slack for the hog's revocable cpus).
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "guaranteed", "--tasks", "1",
		"--task-resources", "cpus:1.5;mem:512", "--command", "exec stress-ng --vm 1 --vm-bytes 200M --vm-keep --vm-hang 1 --timeout 1000s -q")
	eventually(t, scaled(t, 30*time.Second), func() string {
		for _, task := range taskStatuses(t, addr, "guaranteed") {
			if task.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
				return ""
			}
		}
		return "guaranteed task not running"
	})
	// The node is the bound, and calm with the guaranteed task alone: the
	// sequence below starts from calm.
	eventually(t, scaled(t, 30*time.Second), func() string {
		total, avail := nodeMemoryMiB(t, agent)
		if total != nodeMiB {
			return fmt.Sprintf("the agent's node has %.0f MiB, want the bound's %d (a limit at or above the host's memory bounds nothing: this test needs a host of more than %d MiB)", total, nodeMiB, nodeMiB)
		}
		if avail < lineMiB+256 {
			return fmt.Sprintf("the node has %.0f MiB available with the guaranteed task alone, want well above the %d MiB line", avail, lineMiB)
		}
		return ""
	})
	memoryHigh := strings.Contains(feature(t, agent, "memory_qos").GetDetail(), "memory.high on the revocable subtree")
	// dd fills a 1.5 GiB buffer from /dev/zero in one read (little CPU: the
	// revocable subtree is SCHED_IDLE on a loaded machine) and holds it,
	// blocked writing to a pipe nobody reads.
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "memhog", "--revocable", "--tasks", "1",
		"--max-attempts", "1", "--task-resources", "cpus:0.2;mem:2048", "--command", "dd if=/dev/zero bs=1536M count=1 2>/dev/null | sleep 1000")
	// At idle priority on a loaded machine the hog may take a minute or two
	// to fill its buffer (under emulation, more: EnvTimeoutScale).
	eventually(t, scaled(t, 5*time.Minute), func() string {
		tasks := revocableTasks(t, addr, "memhog")
		killed := tasks[slacklinev1.TaskState_TASK_STATE_KILLED]
		if len(killed) == 0 {
			_, avail := nodeMemoryMiB(t, agent)
			return fmt.Sprintf("memory hog not killed (tasks: %s); the node has %.0f MiB available, line %d MiB", taskStatesText(tasks), avail, lineMiB)
		}
		st := killed[0].GetStatus()
		if st.GetReason() != slacklinev1.Reason_REASON_CONTAINER_PREEMPTED || !strings.Contains(st.GetMessage(), "frozen") {
			return fmt.Sprintf("memory hog killed with %v %q, want REASON_CONTAINER_PREEMPTED after freezing", st.GetReason(), st.GetMessage())
		}
		return ""
	})
	// Calm again (the hog's memory freed: ~2.8 GiB available, above the
	// calm line for the calm period): the subtree is thawed.
	eventually(t, scaled(t, 2*time.Minute), func() string {
		for _, c := range corrections(t, agent) {
			if c.GetKind() == slacklinev1.CorrectionKind_CORRECTION_KIND_THAW {
				return ""
			}
		}
		_, avail := nodeMemoryMiB(t, agent)
		return fmt.Sprintf("revocable subtree not thawed; the node has %.0f MiB available", avail)
	})
	var kinds []string
	for _, c := range corrections(t, agent) {
		kinds = append(kinds, strings.TrimPrefix(c.GetKind().String(), "CORRECTION_KIND_"))
		t.Logf("correction %s %s: %s", c.GetKind(), c.GetTaskId(), c.GetReason())
		if c.GetController() != "reclaim" {
			t.Errorf("correction by %q: %v", c.GetController(), c)
		}
		if id := c.GetTaskId(); id != "" && !strings.Contains(c.GetReason(), "newest revocable") {
			t.Errorf("correction of task %s that is not the hog's kill: %v", id, c)
		}
	}
	sequence := strings.Join(kinds, " ")
	// Exactly: without memory.high (cgroup v1) the subtree is frozen at
	// once; with it, reclaimed one step a second first and released step
	// by step after the thaw.
	want := regexp.MustCompile(`^FREEZE KILL THAW$`)
	if memoryHigh {
		want = regexp.MustCompile(`^(RECLAIM )+FREEZE KILL THAW( RELEASE)*$`)
	}
	t.Logf("corrections: %s (memory.high available: %v)", sequence, memoryHigh)
	if !want.MatchString(sequence) {
		t.Errorf("corrections %s, want %s", sequence, want)
	}
	for _, task := range taskStatuses(t, addr, "guaranteed") {
		if task.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING {
			t.Fatalf("guaranteed task %v %q: want it untouched", task.GetState(), task.GetStatus().GetMessage())
		}
	}
	usage, err := agent.node().GetUsage(context.Background(), connect.NewRequest(&slacklinev1.GetUsageRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range usage.Msg.GetUsage() {
		if strings.HasPrefix(u.GetTaskId(), "guaranteed") && u.GetStatistics().GetOomEvents() != 0 {
			t.Errorf("guaranteed task %s saw %d OOM kills", u.GetTaskId(), u.GetStatistics().GetOomEvents())
		}
	}
}

// boundedNode makes a cgroup of the test's own with a memory limit of
// limitMiB (nodecgroup.Make) and returns the agent's --cgroup-root under
// it: the node's memory, as the agent sees it, is then that limit and what
// the agent's tasks (its revocable subtree, beside its root, included)
// leave of it. The cgroup is removed after the agent's own cleanup.
func boundedNode(t *testing.T, name string, limitMiB uint64) string {
	t.Helper()
	layout, err := cgroups.Detect(cgrouptest.Mountpoint)
	if err != nil {
		t.Fatal(err)
	}
	bound := cgrouptest.PriorityRoot(fmt.Sprintf("slackline-e2e-%s-node-%d", name, time.Now().UnixNano()%1e9))
	// Registered before the agent's: cleanups run last first, so the
	// bound goes once the agent's root and tasks are gone.
	t.Cleanup(func() { cgrouptest.RemoveRoot(bound) })
	if err := nodecgroup.Make(layout, bound, limitMiB<<20); err != nil {
		t.Fatalf("bound the node's memory: %v", err)
	}
	return bound + "/node"
}

// nodeMemoryMiB returns the node's memory and what is available of it as
// the agent's monitor sees them (GetUsage's node statistics), in MiB.
func nodeMemoryMiB(t *testing.T, a *realAgent) (total, avail float64) {
	t.Helper()
	usage, err := a.node().GetUsage(context.Background(), connect.NewRequest(&slacklinev1.GetUsageRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	n := usage.Msg.GetNode()
	return float64(n.GetMemLimitBytes()) / (1 << 20), float64(n.GetMemAvailableBytes()) / (1 << 20)
}

// inOrder reports whether want occurs in got as a subsequence.
func inOrder(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// feature returns the agent's GetFeatures entry name (nil if absent).
func feature(t *testing.T, a *realAgent, name string) *slacklinev1.Feature {
	t.Helper()
	resp, err := a.node().GetFeatures(context.Background(), connect.NewRequest(&slacklinev1.GetFeaturesRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range resp.Msg.GetFeatures() {
		if f.GetName() == name {
			t.Logf("feature %s: %v %s", name, f.GetStatus(), f.GetDetail())
			return f
		}
	}
	t.Fatalf("no %s feature in GetFeatures", name)
	return nil
}
