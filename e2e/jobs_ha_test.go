package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/etcdtest"
	"github.com/slackline/slackline/internal/protocol"
	"github.com/slackline/slackline/internal/server"
)

// jobsReplica is one slackline-jobs process of a group on etcd.
type jobsReplica struct {
	addr string
	args []string
	proc *process
}

func (r *jobsReplica) url() string { return "http://" + r.addr }

func (r *jobsReplica) client() slacklinev1connect.JobServiceClient {
	return slacklinev1connect.NewJobServiceClient(server.NewClient(), r.url())
}

// getJobs calls GetJobs on r; the leader header of its answer is returned
// too (followers set it).
func (r *jobsReplica) getJobs() (*slacklinev1.GetJobsResponse, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := r.client().GetJobs(ctx, connect.NewRequest(&slacklinev1.GetJobsRequest{}))
	if err != nil {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return nil, ce.Meta().Get(protocol.LeaderHeader), err
		}
		return nil, "", err
	}
	return resp.Msg, "", nil
}

// healthStatus asks grpc.health.v1.Health/Check at base (Connect's JSON
// protocol, as slackline-healthcheck does) and returns the status.
func healthStatus(t *testing.T, base string) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/grpc.health.v1.Health/Check", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer struct{ Status string }
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		t.Fatalf("health of %s: %v", base, err)
	}
	return answer.Status
}

// waitJobsLeader waits until exactly one of replicas answers GetJobs and
// every other one refuses it as a follower (Unavailable) naming it, and
// returns it.
func waitJobsLeader(t *testing.T, timeout time.Duration, replicas ...*jobsReplica) *jobsReplica {
	t.Helper()
	var leader *jobsReplica
	eventually(t, timeout, func() string {
		leader = nil
		named := map[string]bool{}
		for _, r := range replicas {
			_, header, err := r.getJobs()
			switch {
			case err == nil:
				if leader != nil {
					return fmt.Sprintf("both %s and %s answer as leader", leader.addr, r.addr)
				}
				leader = r
			case connect.CodeOf(err) == connect.CodeUnavailable && header != "":
				named[header] = true
			default:
				return fmt.Sprintf("%s: %v (leader header %q)", r.addr, err, header)
			}
		}
		if leader == nil {
			return "no replica leads"
		}
		if len(replicas) > 1 && (len(named) != 1 || !named[leader.url()]) {
			return fmt.Sprintf("followers name %v, the leader is %s", named, leader.url())
		}
		return ""
	})
	return leader
}

// TestJobsGroupFailsOverWhenTheLeaderIsKilled runs two slackline-jobs
// replicas on a real etcd beside a coordinator and simulated agents. The
// follower refuses calls naming the leader; the leader is SIGKILLed while
// an array job runs; the other replica takes over (a framework failover:
// the coordinator keeps one framework, with the same id) and the job
// completes with every index succeeded once, no index launched again
// without a reported loss, and no failure.
func TestJobsGroupFailsOverWhenTheLeaderIsKilled(t *testing.T) {
	t.Parallel()
	const n = 400
	etcd := etcdtest.Start(t, 1)
	coordAddr := freeAddr(t)
	start(t, "slackline-coordinator", coordinatorArgs(coordAddr, t.TempDir())...)
	start(t, "slackline-sim", "--coordinator", "http://"+coordAddr, "--agents", "2",
		"--resources", "cpus:64;mem:65536;disk:65536", "--work-dir", t.TempDir(), "--status-interval", "0")
	eventually(t, 30*time.Second, func() string {
		state, err := getState(t, operator(coordAddr))
		if err != nil {
			return err.Error()
		}
		if len(state.GetAgents()) < 2 {
			return fmt.Sprintf("%d of 2 agents registered", len(state.GetAgents()))
		}
		return ""
	})
	prefix := fmt.Sprintf("/%s/jobs/", t.Name())
	replicas := make([]*jobsReplica, 2)
	for i := range replicas {
		r := &jobsReplica{addr: freeAddr(t)}
		r.args = []string{"--coordinator", "http://" + coordAddr, "--listen", r.addr,
			"--etcd-endpoints", strings.Join(etcd.Endpoints(), ","), "--etcd-prefix", prefix,
			"--advertise-url", r.url(), "--lease-ttl", haLeaseTTL.String(), "--log-format", "json"}
		r.proc = start(t, "slackline-jobs", r.args...)
		replicas[i] = r
	}
	began := time.Now()
	leader := waitJobsLeader(t, 30*time.Second, replicas...)
	t.Logf("%s leads after %s", leader.addr, time.Since(began).Round(time.Millisecond))
	var follower *jobsReplica
	for _, r := range replicas {
		if r != leader {
			follower = r
		}
	}

	// Health: SERVING on the leader, NOT_SERVING on the follower (so that a
	// readiness probe sends a Service's traffic to the leader only).
	for r, want := range map[*jobsReplica]string{leader: "SERVING_STATUS_SERVING", follower: "SERVING_STATUS_NOT_SERVING"} {
		if got := healthStatus(t, r.url()); got != want {
			t.Errorf("%s health %q, want %q", r.addr, got, want)
		}
	}

	spec := fmt.Sprintf(`name: array
command: "echo $SLACKLINE_JOB_INDEX"
resources: "cpus:0.5;mem:64"
completions: %d
parallelism: 100
labels: {sim.duration: 300ms}
`, n)
	if _, err := leader.client().SubmitJob(context.Background(), connect.NewRequest(&slacklinev1.SubmitJobRequest{Spec: spec})); err != nil {
		t.Fatal(err)
	}
	// The follower refuses a submission, naming the leader.
	_, err := follower.client().SubmitJob(context.Background(), connect.NewRequest(&slacklinev1.SubmitJobRequest{Spec: strings.Replace(spec, "name: array", "name: other", 1)}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), leader.url()) {
		t.Fatalf("a follower's SubmitJob: %v, want Unavailable naming %s", err, leader.url())
	}
	frameworks := func() []string {
		state, err := getState(t, operator(coordAddr))
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, fw := range state.GetFrameworks() {
			ids = append(ids, fw.GetInfo().GetId())
		}
		return ids
	}
	succeeded := func(r *jobsReplica, want int) string {
		resp, _, err := r.getJobs()
		if err != nil {
			return err.Error()
		}
		for _, j := range resp.GetJobs() {
			if j.GetName() == "array" && int(j.GetSucceeded()) >= want {
				return ""
			} else if j.GetName() == "array" {
				return fmt.Sprintf("%d of %d succeeded, state %s", j.GetSucceeded(), want, j.GetState())
			}
		}
		return "no job array"
	}
	eventually(t, 2*time.Minute, func() string { return succeeded(leader, 100) })
	before := frameworks()
	if len(before) != 1 {
		t.Fatalf("frameworks before the failover: %v, want one", before)
	}

	t.Logf("100 indexes succeeded %s after the start", time.Since(began).Round(time.Millisecond))
	if resp, _, err := leader.getJobs(); err == nil {
		t.Logf("killing the leader with %d of %d indexes succeeded, %d running", resp.GetJobs()[0].GetSucceeded(), n, resp.GetJobs()[0].GetRunning())
	}
	leader.proc.kill()
	if got := waitJobsLeader(t, 30*time.Second, follower); got != follower {
		t.Fatalf("leader %s after the kill, want %s", got.addr, follower.addr)
	}
	tookOver := time.Now()
	t.Logf("the follower took over %s after the start", time.Since(began).Round(time.Millisecond))
	// The killed replica comes back as a follower.
	leader.proc = start(t, "slackline-jobs", leader.args...)
	eventually(t, 5*time.Minute, func() string { return succeeded(follower, n) })
	t.Logf("the job completed %s after the takeover", time.Since(tookOver).Round(time.Millisecond))
	if got := waitJobsLeader(t, 30*time.Second, replicas...); got != follower {
		t.Fatalf("leader %s after the restart, want %s", got.addr, follower.addr)
	}
	if after := frameworks(); len(after) != 1 || after[0] != before[0] {
		t.Errorf("frameworks after the failover %v, before %v: want the same one (a failover, not a new framework)", after, before)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := follower.client().GetJob(ctx, connect.NewRequest(&slacklinev1.GetJobRequest{Name: "array"}))
	if err != nil {
		t.Fatal(err)
	}
	d := resp.Msg.GetJob()
	s := d.GetSummary()
	if s.GetState() != slacklinev1.JobState_JOB_STATE_SUCCEEDED || s.GetSucceeded() != n || s.GetFailures() != 0 {
		t.Fatalf("job %s, %d succeeded, %d failures; want SUCCEEDED with %d", s.GetState(), s.GetSucceeded(), s.GetFailures(), n)
	}
	relaunched := 0
	for _, ix := range d.GetIndexes() {
		if ix.GetState() != slacklinev1.JobIndexState_JOB_INDEX_STATE_SUCCEEDED || ix.GetTaskState() != slacklinev1.TaskState_TASK_STATE_FINISHED {
			t.Errorf("index %d: %s, task %s", ix.GetIndex(), ix.GetState(), ix.GetTaskState())
		}
		if most := 1 + ix.GetLosses() + ix.GetPreemptions() + ix.GetFailures(); ix.GetAttempts() > most {
			t.Errorf("index %d launched %d times with %d losses: a launch without a reason", ix.GetIndex(), ix.GetAttempts(), ix.GetLosses())
		}
		if ix.GetAttempts() > 1 {
			relaunched++
		}
	}
	t.Logf("%d of %d indexes relaunched after a reported loss (lost %d)", relaunched, n, s.GetLost())

	// /metrics: the leader says so, the follower too.
	for r, want := range map[*jobsReplica]string{follower: "slackline_jobs_leader 1", leader: "slackline_jobs_leader 0"} {
		resp, err := http.Get(r.url() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(body), want) {
			t.Errorf("%s /metrics lacks %q", r.addr, want)
		}
	}
}
