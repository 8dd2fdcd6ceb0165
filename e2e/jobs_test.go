package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/server"
)

// jobsCluster is a coordinator, simulated agents and the job service, all
// real binaries on loopback, without credentials.
type jobsCluster struct {
	coordAddr, jobsAddr string
	coordDir, jobsDir   string
	coordinator, jobs   *process
	t                   *testing.T
}

func startJobsCluster(t *testing.T, agents int, agentResources string) *jobsCluster {
	t.Helper()
	c := &jobsCluster{t: t, coordAddr: freeAddr(t), jobsAddr: freeAddr(t), coordDir: t.TempDir(), jobsDir: t.TempDir()}
	c.startCoordinator()
	start(t, "slackline-sim", "--coordinator", "http://"+c.coordAddr, "--agents", fmt.Sprint(agents),
		"--resources", agentResources, "--work-dir", t.TempDir(), "--status-interval", "0")
	eventually(t, 30*time.Second, func() string {
		state, err := getState(t, operator(c.coordAddr))
		if err != nil {
			return err.Error()
		}
		if n := len(state.GetAgents()); n < agents {
			return fmt.Sprintf("%d of %d agents registered", n, agents)
		}
		return ""
	})
	c.startJobs()
	return c
}

func (c *jobsCluster) startCoordinator() {
	c.coordinator = start(c.t, "slackline-coordinator", coordinatorArgs(c.coordAddr, c.coordDir)...)
}

func (c *jobsCluster) startJobs() {
	c.jobs = start(c.t, "slackline-jobs", "--coordinator", "http://"+c.coordAddr, "--listen", c.jobsAddr, "--work-dir", c.jobsDir)
	eventually(c.t, 10*time.Second, func() string {
		_, err := c.client().GetJobs(context.Background(), connect.NewRequest(&slacklinev1.GetJobsRequest{}))
		return errString(err)
	})
}

func (c *jobsCluster) client() slacklinev1connect.JobServiceClient {
	return slacklinev1connect.NewJobServiceClient(server.NewClient(), "http://"+c.jobsAddr)
}

// ctl runs slacklinectl against the job service and returns its output.
func (c *jobsCluster) ctl(args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(binDir, "slacklinectl"), append([]string{"--coordinator", "http://" + c.coordAddr}, args...)...)
	cmd.Env = append(os.Environ(), "SLACKLINE_JOBS_SERVER=http://"+c.jobsAddr)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// submit submits a spec with slacklinectl jobs submit -f.
func (c *jobsCluster) submit(spec string) {
	c.t.Helper()
	file := filepath.Join(c.t.TempDir(), "job.yaml")
	if err := os.WriteFile(file, []byte(spec), 0o600); err != nil {
		c.t.Fatal(err)
	}
	if out, err := c.ctl("jobs", "submit", "-f", file); err != nil {
		c.t.Fatalf("jobs submit: %v\n%s", err, out)
	}
}

// job returns a job's detail ("" error text when found).
func (c *jobsCluster) job(name string) (*slacklinev1.JobDetail, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.client().GetJob(ctx, connect.NewRequest(&slacklinev1.GetJobRequest{Name: name}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetJob(), nil
}

// jobListed is one job of `slacklinectl jobs get -o json`.
type jobListed struct {
	Name      string `json:"name"`
	State     string `json:"state"`
	Succeeded int    `json:"succeeded"`
	Failed    int    `json:"failed"`
	Running   int    `json:"running"`
	Preempted int    `json:"preempted"`
	Message   string `json:"message"`
}

// listed returns `slacklinectl jobs get -o json` by name.
func (c *jobsCluster) listed() (map[string]jobListed, error) {
	out, err := c.ctl("jobs", "get", "-o", "json")
	if err != nil {
		return nil, fmt.Errorf("%v: %s", err, out)
	}
	var resp struct{ Jobs []jobListed }
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		return nil, fmt.Errorf("decode %q: %w", out, err)
	}
	m := map[string]jobListed{}
	for _, j := range resp.Jobs {
		m[j.Name] = j
	}
	return m, nil
}

// waitSucceeded waits until a job has at least n succeeded indexes.
func (c *jobsCluster) waitSucceeded(name string, n int, timeout time.Duration) {
	c.t.Helper()
	eventually(c.t, timeout, func() string {
		l, err := c.listed()
		if err != nil {
			return err.Error()
		}
		if j := l[name]; j.Succeeded < n || j.State == "FAILED" {
			return fmt.Sprintf("%+v, want %d succeeded", j, n)
		}
		return ""
	})
}

// TestJobsArrayCompletesEveryIndexOnceAcrossKills runs a 1,000-index array
// job on the simulator while the job service and then the coordinator are
// each SIGKILLed and restarted once: the job succeeds with every index
// succeeded once, and no index was launched again except after its
// earlier task was reported lost (LOST/GONE by reconciliation, or a launch
// call that failed) or preempted.
func TestJobsArrayCompletesEveryIndexOnceAcrossKills(t *testing.T) {
	t.Parallel()
	const n = 1000
	c := startJobsCluster(t, 4, "cpus:64;mem:65536;disk:65536")
	c.submit(fmt.Sprintf(`name: array
command: "echo $SLACKLINE_JOB_INDEX"
resources: "cpus:0.5;mem:64"
completions: %d
parallelism: 200
labels: {sim.duration: 300ms}
`, n))
	c.waitSucceeded("array", 150, 2*time.Minute)
	c.jobs.kill()
	c.startJobs()
	c.waitSucceeded("array", 400, 2*time.Minute)
	c.coordinator.kill()
	c.startCoordinator()
	c.waitSucceeded("array", n, 5*time.Minute)

	d, err := c.job("array")
	if err != nil {
		t.Fatal(err)
	}
	s := d.GetSummary()
	if s.GetState() != slacklinev1.JobState_JOB_STATE_SUCCEEDED || s.GetSucceeded() != n || s.GetFailures() != 0 {
		t.Fatalf("job %s, %d succeeded, %d failures; want SUCCEEDED with %d", s.GetState(), s.GetSucceeded(), s.GetFailures(), n)
	}
	relaunched := 0
	for _, ix := range d.GetIndexes() {
		if ix.GetState() != slacklinev1.JobIndexState_JOB_INDEX_STATE_SUCCEEDED || ix.GetTaskState() != slacklinev1.TaskState_TASK_STATE_FINISHED {
			t.Errorf("index %d: %s, task %s", ix.GetIndex(), ix.GetState(), ix.GetTaskState())
		}
		// An index reported lost may finish after all (its first task's
		// FINISHED arrives late): then it has fewer attempts than reasons.
		if most := 1 + ix.GetLosses() + ix.GetPreemptions() + ix.GetFailures(); ix.GetAttempts() > most {
			t.Errorf("index %d launched %d times with %d losses and %d preemptions: a launch without a reason", ix.GetIndex(), ix.GetAttempts(), ix.GetLosses(), ix.GetPreemptions())
		}
		if ix.GetAttempts() > 1 {
			relaunched++
		}
	}
	t.Logf("%d of %d indexes relaunched after a loss (lost %d)", relaunched, n, s.GetLost())
}

// TestJobsRetryLimitFailsWithLastReason: a job whose task always fails is
// retried (with backoff) up to its limit, then fails naming the last task's
// state and reason.
func TestJobsRetryLimitFailsWithLastReason(t *testing.T) {
	t.Parallel()
	c := startJobsCluster(t, 1, "cpus:4;mem:4096")
	c.submit(`name: doomed
command: "exit 3"
resources: "cpus:1;mem:64"
retries: 2
backoff: 100ms
labels: {sim.duration: 50ms, sim.exit_code: "3"}
`)
	eventually(t, time.Minute, func() string {
		l, err := c.listed()
		if err != nil {
			return err.Error()
		}
		if l["doomed"].State != "FAILED" {
			return fmt.Sprintf("%+v", l["doomed"])
		}
		return ""
	})
	d, err := c.job("doomed")
	if err != nil {
		t.Fatal(err)
	}
	msg := d.GetSummary().GetMessage()
	for _, want := range []string{"index 0 failed 3 times (retries 2)", "last task doomed.0.3", "TASK_STATE_FAILED"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if ix := d.GetIndexes()[0]; ix.GetAttempts() != 3 || ix.GetFailures() != 3 {
		t.Errorf("index 0: %d attempts, %d failures; want 3 and 3", ix.GetAttempts(), ix.GetFailures())
	}
	out, err := c.ctl("jobs", "describe", "doomed")
	if err != nil || !strings.Contains(out, "retry 1 of 2") || !strings.Contains(out, "retry 2 of 2") || !strings.Contains(out, "no retries left") {
		t.Errorf("describe: %v\n%s", err, out)
	}
}

// TestJobsCronForbidSkipsOverlaps: a cron job due every second whose runs
// take longer starts runs on schedule and, with concurrency forbid, skips
// the runs due while one is active: no two runs overlap.
func TestJobsCronForbidSkipsOverlaps(t *testing.T) {
	t.Parallel()
	c := startJobsCluster(t, 1, "cpus:4;mem:4096")
	c.submit(`name: tick
command: "date"
resources: "cpus:1;mem:64"
schedule: "* * * * * *"
concurrency: forbid
labels: {sim.duration: 2500ms}
`)
	var d *slacklinev1.JobDetail
	eventually(t, 2*time.Minute, func() string {
		var err error
		if d, err = c.job("tick"); err != nil {
			return err.Error()
		}
		finished := 0
		for _, r := range d.GetRuns() {
			if run, err := c.job(r); err == nil && run.GetSummary().GetState() == slacklinev1.JobState_JOB_STATE_SUCCEEDED {
				finished++
			}
		}
		skipped := 0
		for _, e := range d.GetEvents() {
			if strings.Contains(e.GetMessage(), "skipped") && strings.Contains(e.GetMessage(), "concurrency forbid") {
				skipped++
			}
		}
		if finished < 2 || skipped < 2 {
			return fmt.Sprintf("%d runs succeeded, %d skipped; want 2 and 2", finished, skipped)
		}
		return ""
	})
	if _, err := c.ctl("jobs", "cancel", "tick"); err != nil {
		t.Fatal(err)
	}
	var prevEnd time.Time
	for _, r := range d.GetRuns() {
		run, err := c.job(r)
		if err != nil {
			t.Fatal(err)
		}
		s := run.GetSummary()
		if s.GetParent() != "tick" {
			t.Errorf("run %s parent %q", r, s.GetParent())
		}
		if start := s.GetSubmitted().AsTime(); start.Before(prevEnd) {
			t.Errorf("run %s started at %v, before the previous run ended at %v", r, start, prevEnd)
		}
		if s.GetFinished() == nil {
			break // the last run, cancelled or still running
		}
		prevEnd = s.GetFinished().AsTime()
	}
}

// TestJobsBadSpecsRefusedNamingTheField: slacklinectl jobs submit of a bad
// spec fails with invalid_argument and names the field.
func TestJobsBadSpecsRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	c := &jobsCluster{t: t, coordAddr: freeAddr(t), jobsAddr: freeAddr(t), jobsDir: t.TempDir()}
	c.startJobs() // no coordinator needed to refuse specs
	base := "name: bad\ncommand: x\nresources: \"cpus:1;mem:64\"\n"
	for _, tt := range []struct{ spec, field string }{
		{base + "completions: -3\n", "completions: -3"},
		{base + "revocable: sometimes\n", "revocable: \"sometimes\""},
		{base + "parallelism: many\n", "parallelism:"},
		{base + "schedule: \"61 * * * *\"\n", "schedule:"},
		{base + "completion: 3\n", "completion: unknown field"},
		{"name: Bad_Name\ncommand: x\nresources: cpus:1\n", "name: \"Bad_Name\""},
		{"name: bad\ncommand: x\n", "resources: missing"},
		{base + "role: nope\n", "role \"nope\""},
	} {
		file := filepath.Join(t.TempDir(), "job.yaml")
		if err := os.WriteFile(file, []byte(tt.spec), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := c.ctl("jobs", "submit", "-f", file)
		if err == nil || !strings.Contains(out, "invalid_argument") || !strings.Contains(out, tt.field) {
			t.Errorf("submit of\n%s: %v\n%s\nwant invalid_argument naming %q", tt.spec, err, out, tt.field)
		}
	}
	if l, err := c.listed(); err != nil || len(l) != 0 {
		t.Errorf("jobs after refusals: %v %v", l, err)
	}
}

// TestJobsPrincipalsSeeAndCancelOnlyTheirOwn runs the job service with the
// credentials `slacklinectl credentials init` writes: alice and bob see and
// cancel only their own jobs, an operator all of them; a principal without
// submit_jobs in a role cannot submit there, and a caller without
// credentials nothing at all.
func TestJobsPrincipalsSeeAndCancelOnlyTheirOwn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out, err := exec.Command(filepath.Join(binDir, "slacklinectl"), "credentials", "init", dir, "--hosts", "127.0.0.1,localhost",
		"--frameworks", "jobs,alice,bob", "--operators", "admin").CombinedOutput()
	if err != nil {
		t.Fatalf("credentials init: %v\n%s", err, out)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	addr := freeAddr(t)
	// The job service subscribes in the users' roles as the jobs principal.
	authz, err := os.ReadFile(file("authz.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	authz = []byte(strings.Replace(string(authz), "  register_frameworks:\n", "  register_frameworks:\n    - principals: [jobs]\n      roles: [alice, bob]\n", 1))
	if err := os.WriteFile(file("authz.yaml"), authz, 0o600); err != nil {
		t.Fatal(err)
	}
	coordAddr := freeAddr(t)
	startStrict(t, "slackline-coordinator", append(coordinatorArgs(coordAddr, t.TempDir()), "--tls-cert", file("coordinator.crt"),
		"--tls-key", file("coordinator.key"), "--client-ca", file("ca.crt"), "--authz", file("authz.yaml"))...)
	jobsProc := startStrict(t, "slackline-jobs", "--coordinator", "https://"+coordAddr, "--ca", file("ca.crt"), "--token-file", file("jobs.token"),
		"--listen", addr, "--work-dir", t.TempDir(), "--roles", "alice,bob",
		"--tls-cert", file("coordinator.crt"), "--tls-key", file("coordinator.key"), "--client-ca", file("ca.crt"), "--authz", file("authz.yaml"))
	ctl := func(principal string, args ...string) (string, error) {
		cmdArgs := append([]string{"--jobs-server", "https://" + addr, "--ca", file("ca.crt")}, args...)
		if principal != "" {
			cmdArgs = append(cmdArgs, "--token-file", file(principal+".token"))
		}
		cmd := exec.Command(filepath.Join(binDir, "slacklinectl"), cmdArgs...)
		cmd.Env = strictEnv()
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	submit := func(principal, name, role string) (string, error) {
		f := filepath.Join(t.TempDir(), "job.yaml")
		spec := fmt.Sprintf("name: %s\nrole: %s\ncommand: \"true\"\nresources: \"cpus:1;mem:64\"\n", name, role)
		if err := os.WriteFile(f, []byte(spec), 0o600); err != nil {
			t.Fatal(err)
		}
		return ctl(principal, "jobs", "submit", "-f", f)
	}
	eventually(t, 20*time.Second, func() string {
		if jobsProc.exited() {
			t.Fatalf("slackline-jobs exited: %s", jobsProc.out.String())
		}
		out, err := submit("alice", "alice-etl", "alice")
		if err != nil {
			return out
		}
		return ""
	})
	if out, err := submit("bob", "bob-etl", "bob"); err != nil {
		t.Fatalf("bob submit: %v\n%s", err, out)
	}
	if out, err := submit("bob", "bob-in-alice", "alice"); err == nil || !strings.Contains(out, "permission_denied") || !strings.Contains(out, "submit_jobs") {
		t.Errorf("bob submitting in role alice: %v\n%s", err, out)
	}
	names := func(principal string) []string {
		out, err := ctl(principal, "jobs", "get", "-o", "json")
		if err != nil {
			t.Fatalf("%s jobs get: %v\n%s", principal, err, out)
		}
		var resp struct {
			Jobs []struct{ Name, Owner string }
		}
		if err := json.Unmarshal([]byte(out), &resp); err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, j := range resp.Jobs {
			n = append(n, j.Name+"@"+j.Owner)
		}
		return n
	}
	if got := strings.Join(names("alice"), ","); got != "alice-etl@alice" {
		t.Errorf("alice sees %s, want only alice-etl", got)
	}
	if got := strings.Join(names("admin"), ","); got != "alice-etl@alice,bob-etl@bob" {
		t.Errorf("admin sees %s, want both", got)
	}
	for _, args := range [][]string{{"jobs", "describe", "bob-etl"}, {"jobs", "cancel", "bob-etl"}} {
		if out, err := ctl("alice", args...); err == nil || !strings.Contains(out, "not_found") {
			t.Errorf("alice %v: %v\n%s, want not_found", args, err, out)
		}
	}
	if out, err := ctl("", "jobs", "get"); err == nil || !strings.Contains(out, "unauthenticated") {
		t.Errorf("jobs get without a token: %v\n%s", err, out)
	}
	if out, err := ctl("bob", "jobs", "describe", "bob-etl"); err != nil || !strings.Contains(out, "QUEUED") && !strings.Contains(out, "RUNNING") {
		t.Errorf("bob describes his job: %v\n%s", err, out)
	}
	if out, err := ctl("admin", "jobs", "cancel", "bob-etl"); err != nil {
		t.Errorf("admin cancels bob's job: %v\n%s", err, out)
	}
	if out, err := ctl("bob", "jobs", "get"); err != nil || !strings.Contains(out, "CANCELLED") {
		t.Errorf("bob's job after the admin's cancel: %v\n%s", err, out)
	}
	// /metrics needs view_metrics, like the coordinator's.
	client := httpClient(t, auth.ClientCredentials{CAFile: file("ca.crt"), TokenFile: file("alice.token")})
	resp, err := client.Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("alice reads /metrics: %s, want 403", resp.Status)
	}
	client = httpClient(t, auth.ClientCredentials{CAFile: file("ca.crt"), TokenFile: file("admin.token")})
	resp, err = client.Get("https://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`slackline_jobs_jobs{state="cancelled"} 1`, `slackline_jobs_tasks{state="queued"} 1`, `slackline_jobs_tasks{state="preempted"} 0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
