package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

const (
	defaultJobsServer = "https://127.0.0.1:5060"
	// jobsServerEnv overrides the default of --jobs-server.
	jobsServerEnv = "SLACKLINE_JOBS_SERVER"
)

// newJobsCommand is "jobs": the job service's client (docs/jobs.md).
func newJobsCommand(g *globals) *cobra.Command {
	var server string
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "Submit, list, describe, follow and cancel jobs of the job service (slackline-jobs)",
		Long: `Talk to the job service (slackline-jobs) at --jobs-server (env ` + jobsServerEnv + `),
with the same --ca and --token-file as the coordinator. A principal sees and
cancels its own jobs; others' need view_jobs and cancel_jobs in authz.yaml.`,
	}
	cmd.PersistentFlags().StringVar(&server, "jobs-server", "", "job service base URL (default: env "+jobsServerEnv+", else the context's jobs-server, else "+defaultJobsServer+")")
	client := func() slacklinev1connect.JobServiceClient {
		url := cmp.Or(server, os.Getenv(jobsServerEnv), g.contextJobsServer(), defaultJobsServer)
		return slacklinev1connect.NewJobServiceClient(g.httpClient(), strings.TrimSuffix(url, "/"))
	}
	cmd.AddCommand(newJobsSubmitCommand(g, client), newJobsGetCommand(g, client), newJobsDescribeCommand(g, client),
		newJobsCancelCommand(g, client), newJobsLogsCommand(g, client))
	return cmd
}

func newJobsSubmitCommand(g *globals, client func() slacklinev1connect.JobServiceClient) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "submit -f FILE",
		Short: "Submit a job spec (YAML or JSON; - reads stdin)",
		Args:  exactArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return fmt.Errorf("jobs submit: -f FILE is required")
			}
			var text []byte
			var err error
			if file == "-" {
				text, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
			} else {
				text, err = os.ReadFile(file)
			}
			if err != nil {
				return fmt.Errorf("jobs submit: %w", err)
			}
			resp, err := client().SubmitJob(cmd.Context(), connect.NewRequest(&slacklinev1.SubmitJobRequest{Spec: string(text)}))
			if err != nil {
				return fmt.Errorf("jobs submit: %w", err)
			}
			if g.structured() {
				return g.print(resp.Msg, table{})
			}
			_, err = fmt.Fprintf(g.out, "job/%s submitted (%s)\n", resp.Msg.GetJob().GetName(), jobState(resp.Msg.GetJob().GetState()))
			return err
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "job spec file (YAML or JSON), - for stdin")
	return cmd
}

func jobState(s slacklinev1.JobState) string { return enumName(s.String(), "JOB_STATE_") }

// jobJSON is one job of "jobs get -o json": the contract scripts rely on.
type jobJSON struct {
	Name        string `json:"name"`
	Owner       string `json:"owner"`
	Role        string `json:"role"`
	State       string `json:"state"`
	Completions uint32 `json:"completions"`
	Succeeded   uint32 `json:"succeeded"`
	Failed      uint32 `json:"failed"`
	Running     uint32 `json:"running"`
	Pending     uint32 `json:"pending"`
	Preempted   uint32 `json:"preempted"`
	Lost        uint32 `json:"lost"`
	Failures    uint32 `json:"failures"`
	Message     string `json:"message,omitempty"`
	Schedule    string `json:"schedule,omitempty"`
	Parent      string `json:"parent,omitempty"`
	Submitted   string `json:"submitted,omitempty"`
}

func newJobsGetCommand(g *globals, client func() slacklinev1connect.JobServiceClient) *cobra.Command {
	return &cobra.Command{
		Use:   "get",
		Short: "List the jobs the caller may see (-o json: name, state and counts)",
		Args:  exactArgs(""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := client().GetJobs(cmd.Context(), connect.NewRequest(&slacklinev1.GetJobsRequest{}))
			if err != nil {
				return fmt.Errorf("jobs get: %w", err)
			}
			if g.output == outputJSON {
				out := struct {
					Jobs []jobJSON `json:"jobs"`
				}{Jobs: []jobJSON{}}
				for _, j := range resp.Msg.GetJobs() {
					out.Jobs = append(out.Jobs, jobJSON{
						Name: j.GetName(), Owner: j.GetOwner(), Role: j.GetRole(), State: jobState(j.GetState()),
						Completions: j.GetCompletions(), Succeeded: j.GetSucceeded(), Failed: j.GetFailed(), Running: j.GetRunning(),
						Pending: j.GetPending(), Preempted: j.GetPreempted(), Lost: j.GetLost(), Failures: j.GetFailures(),
						Message: j.GetMessage(), Schedule: j.GetSchedule(), Parent: j.GetParent(), Submitted: timeText(j.GetSubmitted()),
					})
				}
				enc := json.NewEncoder(g.out)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			t := table{header: []string{"NAME", "OWNER", "ROLE", "STATE", "SUCCEEDED", "RUNNING", "PENDING", "FAILED", "PREEMPTED", "FAILURES", "AGE"}}
			for _, j := range resp.Msg.GetJobs() {
				done := fmt.Sprintf("%d/%d", j.GetSucceeded(), j.GetCompletions())
				if j.GetSchedule() != "" {
					done = j.GetSchedule()
				}
				t.rows = append(t.rows, []string{j.GetName(), j.GetOwner(), j.GetRole(), jobState(j.GetState()), done,
					count(j.GetRunning()), count(j.GetPending()), count(j.GetFailed()), count(j.GetPreempted()), count(j.GetFailures()),
					age(j.GetSubmitted())})
			}
			return t.write(g.out)
		},
	}
}

func count(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

func timeText(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

func age(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return ""
	}
	return time.Since(ts.AsTime()).Round(time.Second).String()
}

// jobName accepts NAME or job/NAME.
func jobName(arg string) string { return strings.TrimPrefix(arg, "job/") }

func newJobsDescribeCommand(g *globals, client func() slacklinev1connect.JobServiceClient) *cobra.Command {
	return &cobra.Command{
		Use:   "describe NAME",
		Short: "Describe a job: its spec, indexes by state, retries and events",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := client().GetJob(cmd.Context(), connect.NewRequest(&slacklinev1.GetJobRequest{Name: jobName(args[0])}))
			if err != nil {
				return fmt.Errorf("jobs describe: %w", err)
			}
			if g.structured() {
				return g.print(resp.Msg, table{})
			}
			return describeJob(g.out, resp.Msg.GetJob())
		},
	}
}

func describeJob(out io.Writer, d *slacklinev1.JobDetail) error {
	s := d.GetSummary()
	w := &strings.Builder{}
	fmt.Fprintf(w, "Name:        %s\n", escape(s.GetName()))
	fmt.Fprintf(w, "Owner:       %s\n", escape(cmp.Or(s.GetOwner(), none)))
	fmt.Fprintf(w, "Role:        %s\n", escape(s.GetRole()))
	fmt.Fprintf(w, "State:       %s\n", jobState(s.GetState()))
	if s.GetMessage() != "" {
		fmt.Fprintf(w, "Message:     %s\n", escape(s.GetMessage()))
	}
	fmt.Fprintf(w, "Priority:    %d\nRevocable:   %s\n", s.GetPriority(), s.GetRevocable())
	fmt.Fprintf(w, "Submitted:   %s\n", timeText(s.GetSubmitted()))
	if s.GetFinished() != nil {
		fmt.Fprintf(w, "Finished:    %s\n", timeText(s.GetFinished()))
	}
	if s.GetSchedule() != "" {
		fmt.Fprintf(w, "Schedule:    %s (concurrency %s), next run %s\n", escape(s.GetSchedule()), s.GetConcurrency(), cmp.Or(timeText(s.GetNextRun()), none))
		fmt.Fprintf(w, "Runs:        %s\n", escape(cmp.Or(strings.Join(d.GetRuns(), ", "), none)))
	} else {
		if s.GetParent() != "" {
			fmt.Fprintf(w, "Cron job:    %s\n", escape(s.GetParent()))
		}
		fmt.Fprintf(w, "Indexes:     %d succeeded, %d running, %d pending, %d failed of %d (parallelism %d)\n",
			s.GetSucceeded(), s.GetRunning(), s.GetPending(), s.GetFailed(), s.GetCompletions(), s.GetParallelism())
		fmt.Fprintf(w, "Retries:     %d failures, %d preempted, %d lost (preempted and lost tasks are re-queued, not failures)\n",
			s.GetFailures(), s.GetPreempted(), s.GetLost())
	}
	if _, err := io.WriteString(out, w.String()); err != nil {
		return err
	}
	// Indexes that are not plainly succeeded or pending, then events.
	t := table{header: []string{"INDEX", "STATE", "TASK", "AGENT", "TASK STATE", "FAILURES", "PREEMPTED", "REASON"}}
	for _, ix := range d.GetIndexes() {
		if ix.GetState() == slacklinev1.JobIndexState_JOB_INDEX_STATE_PENDING && ix.GetAttempts() == 0 && len(d.GetIndexes()) > 20 {
			continue
		}
		if ix.GetState() == slacklinev1.JobIndexState_JOB_INDEX_STATE_SUCCEEDED && ix.GetFailures()+ix.GetPreemptions() == 0 && len(d.GetIndexes()) > 20 {
			continue
		}
		reason := enumName(ix.GetReason().String(), "REASON_")
		if ix.GetMessage() != "" {
			reason = strings.TrimPrefix(reason+": "+ix.GetMessage(), ": ")
		}
		t.rows = append(t.rows, []string{count(ix.GetIndex()), enumName(ix.GetState().String(), "JOB_INDEX_STATE_"), ix.GetTaskId(),
			ix.GetAgentId(), enumName(ix.GetTaskState().String(), "TASK_STATE_"), count(ix.GetFailures()), count(ix.GetPreemptions()), reason})
	}
	if len(t.rows) > 0 {
		fmt.Fprintln(out, "\nIndexes (of a large job, those with attempts beyond a plain success):")
		if err := t.write(out); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "\nEvents:")
	for _, e := range d.GetEvents() {
		fmt.Fprintf(out, "  %s  %s\n", timeText(e.GetTime()), escape(e.GetMessage()))
	}
	return nil
}

func newJobsCancelCommand(g *globals, client func() slacklinev1connect.JobServiceClient) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel NAME",
		Short: "Cancel a job (its running tasks are killed) or a cron job (and its active runs)",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			resp, err := client().CancelJob(cmd.Context(), connect.NewRequest(&slacklinev1.CancelJobRequest{Name: jobName(args[0])}))
			if err != nil {
				return fmt.Errorf("jobs cancel: %w", err)
			}
			if g.structured() {
				return g.print(resp.Msg, table{})
			}
			_, err = fmt.Fprintf(g.out, "job/%s cancelled\n", resp.Msg.GetJob().GetName())
			return err
		},
	}
}

func newJobsLogsCommand(g *globals, client func() slacklinev1connect.JobServiceClient) *cobra.Command {
	var o logsOptions
	var index uint32
	cmd := &cobra.Command{
		Use:   "logs job/NAME --index N",
		Short: "Print the stdout (or stderr) of the latest task of a job's index",
		Long: `Find the latest task of index N of the job at the job service, then read its
sandbox through the coordinator as "slacklinectl logs TASK_ID" does (same
flags; the caller needs the right to read the job service's task sandboxes:
access_sandboxes on its framework principal). An index waiting to be launched
(queued, or re-queued after its task was lost or preempted) is waited for, up
to 30 s, so that the attempt that runs is read.`,
		Args: exactArgs("job/NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ix, err := launchedIndex(cmd.Context(), client(), jobName(args[0]), index)
			if err != nil {
				return fmt.Errorf("jobs logs: %w", err)
			}
			taskID := ix.GetTaskId()
			if taskID == "" {
				return fmt.Errorf("jobs logs: index %d of job %s has not run yet", index, jobName(args[0]))
			}
			if err := o.run(cmd.Context(), g, taskID); err != nil {
				return fmt.Errorf("jobs logs: task %s: %w", taskID, err)
			}
			return nil
		},
	}
	flags := cmd.Flags()
	flags.Uint32Var(&index, "index", 0, "the job's index")
	flags.BoolVar(&o.stderr, "stderr", false, "print stderr instead of stdout")
	flags.Int64Var(&o.tail, "tail", defaultTail, "print the last N bytes first (0: none, -1: the whole file)")
	flags.BoolVarP(&o.follow, "follow", "f", false, "keep printing new output until interrupted")
	flags.BoolVar(&o.raw, "raw", false, "print the output's bytes unescaped")
	return cmd
}

// launchedIndex returns index of the named job once it is not pending,
// asking again every followInterval for up to sandboxWait. A pending index
// waits in the queue or to be re-launched after its task was lost or
// preempted; its task_id then names the attempt that ended, whose sandbox
// may never have existed (an offer rescinded before the task reached its
// agent). Waiting reads the attempt that runs next, as "logs" waits for a
// task still launching. When the wait ends the index is returned as it is.
func launchedIndex(ctx context.Context, jobs slacklinev1connect.JobServiceClient, name string, index uint32) (*slacklinev1.JobIndex, error) {
	deadline := time.Now().Add(sandboxWait)
	for {
		resp, err := jobs.GetJob(ctx, connect.NewRequest(&slacklinev1.GetJobRequest{Name: name}))
		if err != nil {
			return nil, err
		}
		ixs := resp.Msg.GetJob().GetIndexes()
		if int(index) >= len(ixs) {
			return nil, fmt.Errorf("--index %d: job %s has indexes 0 to %d", index, name, len(ixs)-1)
		}
		ix := ixs[index]
		if ix.GetState() != slacklinev1.JobIndexState_JOB_INDEX_STATE_PENDING || !time.Now().Before(deadline) {
			return ix, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(followInterval):
		}
	}
}
