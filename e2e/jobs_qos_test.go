package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/privileged"
	"github.com/slackline/slackline/resources"
)

// TestJobsSlackOnlyPreemptedByQoSCompletes runs a `revocable: only` job on
// a real agent whose memory QoS controller preempts revocable tasks when the
// node runs short of memory (the threshold is set just below what is
// available now). The index's first task holds 1.5 GiB and is preempted
// (REASON_CONTAINER_PREEMPTED); the job service re-queues it without
// counting a failure, and the index's next task, finding its marker, exits
// 0. The job succeeds, its preemption counted apart from failures, and its
// tasks ran on revocable cpus.
func TestJobsSlackOnlyPreemptedByQoSCompletes(t *testing.T) {
	privileged.Require(t)
	avail, err := memAvailableMiB()
	if err != nil {
		t.Fatal(err)
	}
	addr, _, _ := startCoordinator(t)
	startAgent(t, addr, "jobsqos", "cpus:2;mem:4096", "--monitor-interval", "100ms",
		"--oversubscribed-resources-interval", "200ms", "--estimator-window", "5s", "--qos-controller", "memory",
		"--qos-memory-min-available", fmt.Sprint(avail-1024))
	waitAgentsActive(t, addr, 1)
	// An idle guaranteed task leaves slack cpus for the estimator to offer.
	start(t, "batch-framework", "--coordinator", "http://"+addr, "--name", "guaranteed", "--tasks", "1",
		"--task-resources", "cpus:1.5;mem:64", "--command", "sleep 1000")
	dir := taskVisibleDir(t)
	if err := os.Chmod(dir, 0o1777); err != nil { // tasks run as users of their own
		t.Fatal(err)
	}
	c := &jobsCluster{t: t, coordAddr: addr, jobsAddr: freeAddr(t), jobsDir: t.TempDir()}
	c.startJobs()
	// dd reads 1.5 GiB into one buffer with a single read (the kernel
	// zero-fills it: fast even at idle CPU priority), then blocks
	// writing it to a pipe nobody reads, holding the memory until killed.
	marker := filepath.Join(dir, "hogged-$SLACKLINE_JOB_INDEX")
	c.submit(fmt.Sprintf(`name: slack
command: "if [ ! -f %[1]s ]; then touch %[1]s; dd if=/dev/zero bs=1536M count=1 status=none | sleep 100000; fi; exit 0"
resources: "cpus:0.2;mem:2048"
completions: 1
retries: 0
revocable: only
`, marker))
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
	if s.GetPreempted() < 1 || s.GetFailures() != 0 || s.GetFailed() != 0 {
		t.Errorf("preempted %d, failures %d, failed %d; want the index preempted and no failure", s.GetPreempted(), s.GetFailures(), s.GetFailed())
	}
	preemptions := 0
	for _, e := range d.GetEvents() {
		if strings.Contains(e.GetMessage(), "preempted (TASK_STATE_KILLED REASON_CONTAINER_PREEMPTED") && strings.Contains(e.GetMessage(), "not a failure") {
			preemptions++
		}
	}
	if preemptions < 1 {
		t.Errorf("no preemption event: %v", d.GetEvents())
	}
	for id, task := range taskStatuses(t, addr, "jobs") {
		if _, rev, _ := resources.FromProto(task.GetResources()); rev.CPUs() != 0.2 {
			t.Errorf("task %s ran on revocable %s, want its 0.2 cpus revocable", id, rev)
		}
	}
	if ix := d.GetIndexes(); len(ix) != 1 || ix[0].GetTaskState() != slacklinev1.TaskState_TASK_STATE_FINISHED {
		t.Errorf("indexes %v", ix)
	}
}
