package e2e

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/privileged"
	"github.com/slackline/slackline/qos"
)

// TestColocationProtects: a guaranteed task that sleeps and wakes on both
// CPUs (a latency-sensitive pattern, two thousand wakeups a second:
// guaranteedWaker) beside
// revocable CPU hogs, with a tight run-queue target (p99 50 µs) that it
// misses whatever else runs. At idle priority the hogs delay it by the
// moment it takes to preempt them, thousands of times a second. With QoS
// "noop", over three 3-second windows, the agent's eBPF who-delayed-whom
// says how long revocable tasks held the guaranteed task's CPU while it
// waited; with the default controllers one window of up to eight must be
// below half the best noop window. The controllers confine the hogs to one
// CPU, then throttle them; on the development VM that made the delay
// worse, "never worse than nothing" undid it and preemption ended it
// (docs/colocation-study.md): whichever mechanism ends the delay, the test
// asks that the default controllers end it. Attribution's gate
// (--qos-min-attributed-delay 0) is off: whether revocable work causes a
// quarter of the task's waiting depends on what else the machine runs
// (parallel test packages in CI), and the gate and "never worse than
// nothing" have table tests in qos. A best window and a ratio, not a timed
// threshold: the machine may be shared and busy, and the comparison holds
// within one test; up to eight windows leave a busy machine time for the
// controllers' episodes to be judged. With the controllers doing nothing
// (noop on both sides) no window drops far below the others and the test
// fails.
func TestColocationProtects(t *testing.T) {
	privileged.Require(t)
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs: with one, confining revocable work is not possible")
	}
	noop := revocableDelays(t, "noop", 3, nil)
	best := slices.Min(noop)
	if best <= 0 {
		t.Fatalf("revocable work never delayed the guaranteed task with noop (%v): the test proves nothing", noop)
	}
	protected := revocableDelays(t, qos.DefaultControllers, 8, func(d time.Duration) bool { return d < best/2 })
	t.Logf("guaranteed task delayed by revocable work per window: noop %v, %s %v", noop, qos.DefaultControllers, protected)
	if ratio := float64(slices.Min(protected)) / float64(best); ratio >= 0.5 {
		t.Errorf("best window with %s: %v, with noop: %v (ratio %.2f); want below 0.5", qos.DefaultControllers, slices.Min(protected), best, ratio)
	}
}

// guaranteedWaker is the guaranteed task: two processes that each sleep a
// millisecond and wake, forever. One python3 forks once, so the wakeups are
// the task's whole load: a shell loop forking sleep(1) two thousand times a
// second spent CPU on fork and exec, and its kernel memory (charged to the
// task, freed behind the exits) outgrew the task's 64 MiB and the task was
// OOM-killed once the test's cgroup gave it the CPU it asks for.
const guaranteedWaker = `exec /usr/bin/python3 -c 'import os, time
os.fork()
while True: time.sleep(0.001)'`

// revocableDelays runs the scene with the QoS controller set and returns,
// for each of up to n 3-second windows, how long revocable tasks delayed
// the guaranteed task; it stops after a window enough accepts (nil: never).
func revocableDelays(t *testing.T, controllers string, n int, enough func(time.Duration) bool) []time.Duration {
	t.Helper()
	addr, _, _ := startCoordinator(t)
	agent := startAgent(t, addr, "coloc", "cpus:2;mem:1024", "--monitor-interval", "100ms",
		"--oversubscribed-resources-interval", "200ms", "--estimator-window", "5s", "--qos-controller", controllers,
		"--qos-runqueue-p99", "50us", "--qos-min-attributed-delay", "0")
	waitAgentsActive(t, addr, 1)
	waitEBPFLoaded(t, agent.node())
	// The guaranteed task holds the node, so that its slack (revocable)
	// fits the three hogs whatever its loops use; the hogs ask for little
	// (a tenth of a core each: at idle priority they take what is idle
	// whatever they asked), so that a busy CI host's smaller estimate fits
	// them too.
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "guaranteed", "--tasks", "1",
		"--task-resources", "cpus:2;mem:64", "--command", guaranteedWaker)
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "hogs", "--revocable", "--tasks", "3",
		"--max-attempts", "1", "--task-resources", "cpus:0.1;mem:32", "--command", "while :; do :; done")
	// Every hog must have started before the windows are measured. The
	// default controllers act as soon as the first one runs and may
	// preempt it before the others start (each takes tens of seconds to
	// start beside busy CPUs: see revocableStartTimeout): a hog they
	// preempted has started and been dealt with. With noop none is
	// preempted, so all three must run.
	var guaranteed string
	eventually(t, revocableStartTimeout, func() string {
		guaranteed = ""
		for _, c := range agent.containers(t) {
			if c.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING && !c.GetRevocable() {
				guaranteed = c.GetTaskId()
			}
		}
		hogs := revocableTasks(t, addr, "hogs")
		running, preempted := len(hogs[slacklinev1.TaskState_TASK_STATE_RUNNING]), 0
		for _, task := range hogs[slacklinev1.TaskState_TASK_STATE_KILLED] {
			if task.GetStatus().GetReason() == slacklinev1.Reason_REASON_CONTAINER_PREEMPTED {
				preempted++
			}
		}
		if controllers == "noop" && preempted > 0 {
			t.Fatalf("a revocable hog was preempted with QoS noop: %v", hogs[slacklinev1.TaskState_TASK_STATE_KILLED])
		}
		if running+preempted != 3 || guaranteed == "" {
			return fmt.Sprintf("%d of 3 revocable hogs running, %d preempted; guaranteed task running: %t", running, preempted, guaranteed != "")
		}
		return ""
	})
	if controllers != "noop" {
		// Wait for them to act, however slow a busy machine makes them
		// (the bound only ends a hung run, with the signal's values).
		probe := &qosProbe{agent: agent, taskID: guaranteed}
		eventually(t, qosStepTimeout, func() string {
			if len(probe.corrections()) == 0 {
				probe.pressure()
				return "no correction recorded: " + probe.diagnosis()
			}
			return ""
		})
	}
	time.Sleep(5 * time.Second) // the corrections take effect (noop: the same time passes)
	delayed := func() time.Duration {
		// A bound, not a synchronization: an emulated guest's agent,
		// capped beside 2000 wakeups a second, took over 5 s to answer.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		resp, err := agent.node().GetUsage(ctx, connect.NewRequest(&slacklinev1.GetUsageRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range resp.Msg.GetUsage() {
			if u.GetTaskId() == guaranteed {
				return time.Duration(u.GetStatistics().GetDelayedByRevocableSecs() * float64(time.Second))
			}
		}
		t.Fatalf("no usage of the guaranteed task %s", guaranteed)
		return 0
	}
	var windows []time.Duration
	last := delayed()
	for range n {
		time.Sleep(3 * time.Second)
		now := delayed()
		w := now - last
		windows = append(windows, w)
		last = now
		if enough != nil && enough(w) {
			break
		}
	}
	kinds := map[string]int{}
	for _, c := range corrections(t, agent) {
		kinds[c.GetController()+" "+c.GetKind().String()]++
	}
	t.Logf("%s: corrections %v", controllers, kinds)
	return windows
}
