package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// requeuedJob answers GetJob with index 0 pending after its first task was
// lost, then, from the third call on, launched on a new task.
type requeuedJob struct {
	slacklinev1connect.UnimplementedJobServiceHandler
	calls int
}

func (j *requeuedJob) GetJob(context.Context, *connect.Request[slacklinev1.GetJobRequest]) (*connect.Response[slacklinev1.GetJobResponse], error) {
	j.calls++
	ix := &slacklinev1.JobIndex{State: slacklinev1.JobIndexState_JOB_INDEX_STATE_PENDING, TaskId: "lost-attempt", TaskState: slacklinev1.TaskState_TASK_STATE_LOST}
	if j.calls >= 3 {
		ix = &slacklinev1.JobIndex{State: slacklinev1.JobIndexState_JOB_INDEX_STATE_LAUNCHED, TaskId: "second-attempt", TaskState: slacklinev1.TaskState_TASK_STATE_RUNNING}
	}
	return connect.NewResponse(&slacklinev1.GetJobResponse{Job: &slacklinev1.JobDetail{Indexes: []*slacklinev1.JobIndex{ix}}}), nil
}

// TestJobsLogsWaitsForRequeuedIndex: an index re-queued after its task was
// lost names the lost attempt, whose sandbox may never have existed; "jobs
// logs" reads the attempt launched next (failed the README's job tour in CI
// when an offer was rescinded under the job service's Accept).
func TestJobsLogsWaitsForRequeuedIndex(t *testing.T) {
	saved := followInterval
	followInterval = time.Millisecond
	t.Cleanup(func() { followInterval = saved })

	jobs := &requeuedJob{}
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewJobServiceHandler(jobs))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client := slacklinev1connect.NewJobServiceClient(srv.Client(), srv.URL)

	ix, err := launchedIndex(t.Context(), client, "array-demo", 0)
	if err != nil {
		t.Fatal(err)
	}
	if ix.GetTaskId() != "second-attempt" || jobs.calls != 3 {
		t.Fatalf("read task %q after %d calls, want second-attempt after 3", ix.GetTaskId(), jobs.calls)
	}
	if _, err := launchedIndex(t.Context(), client, "array-demo", 1); err == nil {
		t.Fatal("index 1 of a one-index job: no error")
	}
}
