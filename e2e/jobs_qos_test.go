package e2e

import (
	"fmt"
	"strings"
	"testing"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/privileged"
	"github.com/slackline/slackline/resources"
)

// TestJobsSlackOnlyPreemptedByQoSCompletes runs a `revocable: only` job on
// a real agent whose memory QoS controller finds the node short of memory
// from the start (its floor is above any machine's memory) and may kill
// once an hour: it preempts the first revocable task it sees, exactly once,
// whatever else the machine does. The index's first task (attempt 1, its
// task id ends in .1) waits to be killed; it is preempted
// (REASON_CONTAINER_PREEMPTED) and the job service re-queues it without
// counting a failure; the next attempt exits 0. The job succeeds, its
// preemption counted apart from failures, and its tasks ran on revocable
// cpus.
func TestJobsSlackOnlyPreemptedByQoSCompletes(t *testing.T) {
	privileged.Require(t)
	addr, _, _ := startCoordinator(t)
	startAgent(t, addr, "jobsqos", "cpus:2;mem:4096", "--monitor-interval", "100ms",
		"--oversubscribed-resources-interval", "200ms", "--estimator-window", "5s", "--qos-controller", "memory",
		"--qos-memory-min-available", fmt.Sprint(1<<30), "--qos-memory-kill-cooldown", "1h")
	waitAgentsActive(t, addr, 1)
	// An idle guaranteed task leaves slack cpus for the estimator to offer.
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "guaranteed", "--tasks", "1",
		"--task-resources", "cpus:1.5;mem:64", "--command", "sleep 1000")
	c := &jobsCluster{t: t, coordAddr: addr, jobsAddr: freeAddr(t), jobsDir: t.TempDir()}
	c.startJobs()
	c.submit(`name: slack
command: "case $SLACKLINE_TASK_ID in *.1) exec sleep 100000;; esac; exit 0"
resources: "cpus:0.2;mem:64"
completions: 1
retries: 0
revocable: only
`)
	// Each task starts at idle CPU priority: slow on a busy machine.
	eventually(t, 3*revocableStartTimeout, func() string {
		l, err := c.listed()
		if err != nil {
			return err.Error()
		}
		if j := l["slack"]; j.State != "SUCCEEDED" {
			if j.State == "FAILED" {
				t.Fatalf("job failed: %+v", j)
			}
			return fmt.Sprintf("%+v", j)
		}
		return ""
	})
	d, err := c.job("slack")
	if err != nil {
		t.Fatal(err)
	}
	s := d.GetSummary()
	if s.GetPreempted() != 1 || s.GetFailures() != 0 || s.GetFailed() != 0 {
		t.Errorf("preempted %d, failures %d, failed %d; want the index preempted once and no failure", s.GetPreempted(), s.GetFailures(), s.GetFailed())
	}
	preemptions := 0
	for _, e := range d.GetEvents() {
		if strings.Contains(e.GetMessage(), "preempted (TASK_STATE_KILLED REASON_CONTAINER_PREEMPTED") && strings.Contains(e.GetMessage(), "not a failure") {
			preemptions++
		}
	}
	if preemptions != 1 {
		t.Errorf("%d preemption events, want 1: %v", preemptions, d.GetEvents())
	}
	for id, task := range taskStatuses(t, addr, "jobs") {
		if _, rev, _ := resources.FromProto(task.GetResources()); rev.CPUs() != 0.2 {
			t.Errorf("task %s ran on revocable %s, want its 0.2 cpus revocable", id, rev)
		}
	}
	if ix := d.GetIndexes(); len(ix) != 1 || ix[0].GetTaskState() != slacklinev1.TaskState_TASK_STATE_FINISHED || ix[0].GetAttempts() != 2 {
		t.Errorf("indexes %v", ix)
	}
}
