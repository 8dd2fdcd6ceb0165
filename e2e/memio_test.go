package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
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
// revocable memory hog on one agent. When the hog drives MemAvailable
// below the reclaim line (set 1 GiB below what is available now, so a
// 1.5 GiB hog crosses it on any host; calm is 2% of memory above it) the reclaim controller first takes
// memory back without killing (memory.high, where the host has it: pure
// cgroup v2), then freezes the revocable subtree, and kills the hog only
// because the pressure persists (its anonymous memory cannot be reclaimed
// without swap); once calm it thaws the subtree. The guaranteed task keeps
// running, is never corrected, and is never OOM-killed.
func TestQoSMemoryReclaim(t *testing.T) {
	privileged.Require(t)
	avail, err := memAvailableMiB()
	if err != nil {
		t.Fatal(err)
	}
	addr, _, _ := startCoordinator(t)
	agent := startAgent(t, addr, "memreclaim", "cpus:2;mem:4096", "--monitor-interval", "100ms",
		"--oversubscribed-resources-interval", "200ms", "--estimator-window", "5s", "--qos-controller", "reclaim",
		"--qos-reclaim-low-available", fmt.Sprint(avail-1024), "--qos-memory-min-available", "256")
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
			return memoryHogState(tasks, avail-1024)
		}
		st := killed[0].GetStatus()
		if st.GetReason() != slacklinev1.Reason_REASON_CONTAINER_PREEMPTED || !strings.Contains(st.GetMessage(), "frozen") {
			return fmt.Sprintf("memory hog killed with %v %q, want REASON_CONTAINER_PREEMPTED after freezing", st.GetReason(), st.GetMessage())
		}
		return ""
	})
	// Calm again (MemAvailable 2% of memory above the line, as long as
	// other tenants of the host let it): the subtree is thawed.
	thawed := func() bool {
		for _, c := range corrections(t, agent) {
			if c.GetKind() == slacklinev1.CorrectionKind_CORRECTION_KIND_THAW {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(scaled(t, 2*time.Minute)); !thawed() && time.Now().Before(deadline); {
		<-time.After(500 * time.Millisecond)
	}
	checkThaw := thawed()
	if !checkThaw {
		total, err := memInfoMiB("MemTotal:")
		if err != nil {
			t.Fatal(err)
		}
		now, err := memAvailableMiB()
		if err != nil {
			t.Fatal(err)
		}
		if calm := avail - 1024 + max(128, 0.02*total); now >= calm {
			t.Errorf("revocable subtree not thawed with MemAvailable %.0f MiB above the calm line %.0f MiB", now, calm)
		} else {
			t.Logf("the host's other tenants kept MemAvailable (%.0f MiB) below the calm line (%.0f MiB): thaw not checked", now, calm)
		}
	}
	var kinds []string
	for _, c := range corrections(t, agent) {
		kinds = append(kinds, strings.TrimPrefix(c.GetKind().String(), "CORRECTION_KIND_"))
		if c.GetController() != "reclaim" {
			t.Errorf("correction by %q: %v", c.GetController(), c)
		}
		if id := c.GetTaskId(); id != "" && !strings.Contains(c.GetReason(), "newest revocable") {
			t.Errorf("correction of task %s that is not the hog's kill: %v", id, c)
		}
	}
	sequence := strings.Join(kinds, " ")
	t.Logf("corrections: %s (memory.high available: %v)", sequence, memoryHigh)
	want := "FREEZE KILL"
	if memoryHigh {
		want = "RECLAIM FREEZE KILL"
	}
	if checkThaw {
		want += " THAW"
	}
	if !inOrder(kinds, strings.Fields(want)) {
		t.Errorf("corrections %s, want %s in that order", sequence, want)
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

// memInfoMiB reads a /proc/meminfo field in MiB.
func memInfoMiB(field string) (float64, error) {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			var kb float64
			_, err := fmt.Sscanf(strings.TrimSpace(rest), "%f", &kb)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/meminfo", field)
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
