// Command jobs measures the job service (slackline-jobs) on the simulator,
// all real binaries on loopback without credentials:
//
//   - latency: the time from a SubmitJob call to the job's first task
//     RUNNING, over --trials one-task jobs submitted one after another
//     (observed by polling GetJob every --poll, which adds up to that much);
//   - throughput: a --tasks array job (parallelism = completions) on
//     --agents simulated agents, from SubmitJob to every index placed on an
//     offer (the core's decision; polled every 10 ms) and to every index
//     succeeded (each task runs --task-duration; every task's RUNNING and
//     FINISHED updates are stored and acknowledged), in tasks/s, with the
//     job service's CPU (cores, over the run) and RSS at the end.
//
// The last line is the summary, one line of key=value pairs:
//
//	go run ./scripts/bench/jobs
//	go run ./scripts/bench/jobs --trials 200 --tasks 10000 --agents 100
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/benchutil"
	"github.com/slackline/slackline/internal/server"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "jobs:", err)
		os.Exit(1)
	}
}

func run() error {
	trials := flag.Int("trials", 100, "one-task jobs for the submit -> RUNNING latency")
	tasks := flag.Int("tasks", 10000, "indexes of the throughput job")
	agents := flag.Int("agents", 100, "simulated agents")
	agentRes := flag.String("agent-resources", "cpus:64;mem:65536;disk:65536", "each simulated agent's resources")
	taskRes := flag.String("task-resources", "cpus:0.5;mem:64", "each task's resources")
	taskDuration := flag.Duration("task-duration", 100*time.Millisecond, "how long each simulated task runs")
	poll := flag.Duration("poll", 2*time.Millisecond, "GetJob polling interval of the latency trials")
	flag.Parse()

	dir, err := os.MkdirTemp("", "slackline-bench-jobs")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := benchutil.Build(dir, "./cmd/slackline-coordinator", "./cmd/slackline-sim", "./cmd/slackline-jobs"); err != nil {
		return err
	}
	coordAddr, jobsAddr := benchutil.FreeAddr(), benchutil.FreeAddr()
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
			_ = p.Wait()
		}
	}()
	startProc := func(name string, args ...string) (*exec.Cmd, error) {
		cmd := exec.Command(filepath.Join(dir, name), args...)
		cmd.Env = append(os.Environ(), "SLACKLINE_INSECURE=1")
		logFile, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		procs = append([]*exec.Cmd{cmd}, procs...)
		return cmd, nil
	}
	if _, err := startProc("slackline-coordinator", "--listen", coordAddr, "--work-dir", filepath.Join(dir, "coordinator")); err != nil {
		return err
	}
	if _, err := startProc("slackline-sim", "--coordinator", "http://"+coordAddr, "--agents", fmt.Sprint(*agents),
		"--resources", *agentRes, "--status-interval", "0"); err != nil {
		return err
	}
	jobsProc, err := startProc("slackline-jobs", "--coordinator", "http://"+coordAddr, "--listen", jobsAddr, "--work-dir", filepath.Join(dir, "jobs"))
	if err != nil {
		return err
	}
	client := slacklinev1connect.NewJobServiceClient(server.NewClient(), "http://"+jobsAddr)
	ctx := context.Background()
	if err := waitFor(2*time.Minute, func() (bool, error) {
		_, err := client.GetJobs(ctx, connect.NewRequest(&slacklinev1.GetJobsRequest{}))
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("job service not serving: %w", err)
	}
	// Let every agent register (a job's first offers then cover all).
	time.Sleep(2 * time.Second)

	labels := fmt.Sprintf("labels: {sim.duration: %s}\n", *taskDuration)
	var latencies []time.Duration
	for i := range *trials {
		name := fmt.Sprintf("lat-%d", i)
		spec := fmt.Sprintf("name: %s\ncommand: \"true\"\nresources: %q\n%s", name, *taskRes, labels)
		start := time.Now()
		if _, err := client.SubmitJob(ctx, connect.NewRequest(&slacklinev1.SubmitJobRequest{Spec: spec})); err != nil {
			return fmt.Errorf("submit %s: %w", name, err)
		}
		if err := waitFor(time.Minute, func() (bool, error) {
			resp, err := client.GetJob(ctx, connect.NewRequest(&slacklinev1.GetJobRequest{Name: name}))
			if err != nil {
				return false, err
			}
			st := resp.Msg.GetJob().GetIndexes()[0].GetTaskState()
			return st == slacklinev1.TaskState_TASK_STATE_RUNNING || st == slacklinev1.TaskState_TASK_STATE_FINISHED, nil
		}, *poll); err != nil {
			return fmt.Errorf("job %s never ran: %w", name, err)
		}
		latencies = append(latencies, time.Since(start))
	}
	p50 := benchutil.Percentile(latencies, 0.5, 100*time.Microsecond)
	p99 := benchutil.Percentile(latencies, 0.99, 100*time.Microsecond)
	fmt.Printf("submit -> first task RUNNING over %d jobs: p50 %v, p99 %v, max %v\n", len(latencies), p50, p99,
		benchutil.Percentile(latencies, 1, 100*time.Microsecond))

	cpu0, err := benchutil.CPUSeconds(jobsProc.Process.Pid)
	if err != nil {
		return err
	}
	spec := fmt.Sprintf("name: array\ncommand: \"true\"\nresources: %q\ncompletions: %d\n%s", *taskRes, *tasks, labels)
	start := time.Now()
	if _, err := client.SubmitJob(ctx, connect.NewRequest(&slacklinev1.SubmitJobRequest{Spec: spec})); err != nil {
		return fmt.Errorf("submit array: %w", err)
	}
	var launched time.Duration
	if err := waitFor(10*time.Minute, func() (bool, error) {
		resp, err := client.GetJobs(ctx, connect.NewRequest(&slacklinev1.GetJobsRequest{}))
		if err != nil {
			return false, err
		}
		for _, j := range resp.Msg.GetJobs() {
			if j.GetName() != "array" {
				continue
			}
			if j.GetState() == slacklinev1.JobState_JOB_STATE_FAILED {
				return false, fmt.Errorf("array job failed: %s", j.GetMessage())
			}
			// Placed: the service chose an offer for every index (its
			// launch calls follow); not yet RUNNING on the agents.
			if launched == 0 && j.GetPending() == 0 {
				launched = time.Since(start)
			}
			return j.GetState() == slacklinev1.JobState_JOB_STATE_SUCCEEDED, nil
		}
		return false, nil
	}, 10*time.Millisecond); err != nil {
		return err
	}
	done := time.Since(start)
	cpu1, err := benchutil.CPUSeconds(jobsProc.Process.Pid)
	if err != nil {
		return err
	}
	rss, err := benchutil.RSSBytes(jobsProc.Process.Pid)
	if err != nil {
		return err
	}
	launchRate := float64(*tasks) / launched.Seconds()
	doneRate := float64(*tasks) / done.Seconds()
	cores := (cpu1 - cpu0) / done.Seconds()
	fmt.Printf("array job of %d tasks on %d agents: all placed in %v (%.0f tasks/s), all succeeded in %v (%.0f tasks/s)\n",
		*tasks, *agents, launched.Round(time.Millisecond), launchRate, done.Round(time.Millisecond), doneRate)
	fmt.Printf("slackline-jobs: CPU %.2f cores over the array job (%.1f s), RSS %.1f MiB\n", cores, cpu1-cpu0, float64(rss)/(1<<20))
	fmt.Printf("jobs: submit_to_running_p50_ms=%.1f submit_to_running_p99_ms=%.1f placed_tasks_per_s=%.0f complete_tasks_per_s=%.0f jobs_cpu_cores=%.2f jobs_rss_mib=%.1f tasks=%d agents=%d\n",
		float64(p50)/1e6, float64(p99)/1e6, launchRate, doneRate, cores, float64(rss)/(1<<20), *tasks, *agents)
	return nil
}

// waitFor polls cond (every interval[0], default 10 ms) until it is true,
// fails, or timeout passes.
func waitFor(timeout time.Duration, cond func() (bool, error), interval ...time.Duration) error {
	every := 10 * time.Millisecond
	if len(interval) > 0 {
		every = interval[0]
	}
	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		ok, err := cond()
		if ok {
			return nil
		}
		lastErr = err
		time.Sleep(every)
	}
	return fmt.Errorf("timed out after %v (last error: %v)", timeout, lastErr)
}
