package jobs

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// State is a job's state (the API's JobState).
type State = slacklinev1.JobState

// Job states.
const (
	Queued    = slacklinev1.JobState_JOB_STATE_QUEUED
	Running   = slacklinev1.JobState_JOB_STATE_RUNNING
	Succeeded = slacklinev1.JobState_JOB_STATE_SUCCEEDED
	Failed    = slacklinev1.JobState_JOB_STATE_FAILED
	Cancelled = slacklinev1.JobState_JOB_STATE_CANCELLED
	Scheduled = slacklinev1.JobState_JOB_STATE_SCHEDULED
)

// IndexState is where one index of a job is (the API's JobIndexState).
type IndexState = slacklinev1.JobIndexState

// Index states.
const (
	IndexPending   = slacklinev1.JobIndexState_JOB_INDEX_STATE_PENDING
	IndexLaunched  = slacklinev1.JobIndexState_JOB_INDEX_STATE_LAUNCHED
	IndexSucceeded = slacklinev1.JobIndexState_JOB_INDEX_STATE_SUCCEEDED
	IndexFailed    = slacklinev1.JobIndexState_JOB_INDEX_STATE_FAILED
	IndexCancelled = slacklinev1.JobIndexState_JOB_INDEX_STATE_CANCELLED
)

// IsFinal reports whether a job state is final.
func IsFinal(s State) bool { return s == Succeeded || s == Failed || s == Cancelled }

// Event is one line of a job's history.
type Event struct {
	Time    time.Time `json:"time"`
	Message string    `json:"message"`
}

// Index is one index of a job across its task attempts. It is persisted as
// its own record (see Core.TakeDirty).
type Index struct {
	State IndexState `json:"state"`
	// Attempts counts launches; it numbers the task ids.
	Attempts    int `json:"attempts,omitempty"`
	Failures    int `json:"failures,omitempty"`
	Preemptions int `json:"preemptions,omitempty"`
	Losses      int `json:"losses,omitempty"`
	// TaskID and AgentID are the latest attempt's.
	TaskID    string                `json:"task_id,omitempty"`
	AgentID   string                `json:"agent_id,omitempty"`
	TaskState slacklinev1.TaskState `json:"task_state,omitempty"`
	Reason    slacklinev1.Reason    `json:"reason,omitempty"`
	Message   string                `json:"message,omitempty"`
	// NotBefore is when a retry may launch; PendingSince when the index
	// last became pending (for revocable: prefer).
	NotBefore    time.Time `json:"not_before,omitzero"`
	PendingSince time.Time `json:"pending_since,omitzero"`
	// Queued is the index's place in its job's queue while pending: the
	// order it became pending in (indexes, then re-queues), kept so that a
	// restarted service launches in the same order.
	Queued uint64 `json:"queued,omitempty"`
	// ReconcileAt, set while the launch of the latest attempt is
	// unconfirmed (its Accept call failed: the coordinator may have
	// launched it or not), is when to ask the coordinator about it again.
	// The index stays launched until the coordinator answers: any status
	// of the task confirms it, a GONE or UNKNOWN answer re-queues it.
	ReconcileAt time.Time `json:"reconcile_at,omitzero"`
}

// Job is a job: its spec, owner, state and indexes. A cron job (a spec
// with a schedule) has no indexes: it starts runs, jobs of their own whose
// Parent names it.
type Job struct {
	Spec      Spec      `json:"spec"`
	Owner     string    `json:"owner,omitempty"`
	Seq       uint64    `json:"seq"`
	State     State     `json:"state"`
	Message   string    `json:"message,omitempty"`
	Submitted time.Time `json:"submitted"`
	Started   time.Time `json:"started,omitzero"`
	Finished  time.Time `json:"finished,omitzero"`
	Parent    string    `json:"parent,omitempty"`
	Runs      []string  `json:"runs,omitempty"`
	NextRun   time.Time `json:"next_run,omitzero"`
	Preempted int       `json:"preempted,omitempty"`
	Lost      int       `json:"lost,omitempty"`
	Failures  int       `json:"failures,omitempty"`
	Events    []Event   `json:"events,omitempty"`
	// Indexes are persisted one record each, not with the job.
	Indexes []Index `json:"-"`

	// Derived from Indexes, rebuilt by reindex().
	pending   []int // pending indexes, in launch order (by Queued)
	queued    uint64
	launched  int
	succeeded int
	failed    int
}

// IsCron reports whether the job is a cron job.
func (j *Job) IsCron() bool { return j.Spec.Schedule != "" }

// reindex rebuilds the derived fields from Indexes.
func (j *Job) reindex() {
	j.pending, j.launched, j.succeeded, j.failed, j.queued = nil, 0, 0, 0, 0
	for i := range j.Indexes {
		j.queued = max(j.queued, j.Indexes[i].Queued)
		switch j.Indexes[i].State {
		case IndexPending:
			j.pending = append(j.pending, i)
		case IndexLaunched:
			j.launched++
		case IndexSucceeded:
			j.succeeded++
		case IndexFailed:
			j.failed++
		}
	}
	// Records written before Queued existed have none: index order.
	slices.SortStableFunc(j.pending, func(a, b int) int { return cmp.Compare(j.Indexes[a].Queued, j.Indexes[b].Queued) })
}

// Summary returns the job's line of `slacklinectl jobs get`.
func (j *Job) Summary() *slacklinev1.JobSummary {
	s := &slacklinev1.JobSummary{
		Name:        j.Spec.Name,
		Owner:       j.Owner,
		Role:        j.Spec.Role,
		State:       j.State,
		Completions: uint32(j.Spec.Completions),
		Parallelism: uint32(j.Spec.Parallelism),
		Succeeded:   uint32(j.succeeded),
		Failed:      uint32(j.failed),
		Running:     uint32(j.launched),
		Pending:     uint32(len(j.pending)),
		Preempted:   uint32(j.Preempted),
		Lost:        uint32(j.Lost),
		Failures:    uint32(j.Failures),
		Submitted:   timestamppb.New(j.Submitted),
		Message:     j.Message,
		Schedule:    j.Spec.Schedule,
		Concurrency: string(j.Spec.Concurrency),
		Parent:      j.Parent,
		Priority:    uint32(j.Spec.Priority),
		Revocable:   string(j.Spec.Revocable),
	}
	if j.IsCron() {
		s.Completions, s.Parallelism = 0, 0
	}
	if !j.Finished.IsZero() {
		s.Finished = timestamppb.New(j.Finished)
	}
	if !j.NextRun.IsZero() {
		s.NextRun = timestamppb.New(j.NextRun)
	}
	return s
}

// Detail returns `slacklinectl jobs describe`'s view of the job.
func (j *Job) Detail() *slacklinev1.JobDetail {
	d := &slacklinev1.JobDetail{Summary: j.Summary(), Runs: append([]string(nil), j.Runs...)}
	if spec, err := jsonMarshal(j.Spec); err == nil {
		d.Spec = string(spec)
	}
	for i, x := range j.Indexes {
		ix := &slacklinev1.JobIndex{
			Index: uint32(i), State: x.State, Failures: uint32(x.Failures), Preemptions: uint32(x.Preemptions),
			Losses: uint32(x.Losses), TaskId: x.TaskID, AgentId: x.AgentID, TaskState: x.TaskState,
			Reason: x.Reason, Message: x.Message, Attempts: uint32(x.Attempts),
		}
		if !x.NotBefore.IsZero() {
			ix.NotBefore = timestamppb.New(x.NotBefore)
		}
		d.Indexes = append(d.Indexes, ix)
	}
	for _, e := range j.Events {
		d.Events = append(d.Events, &slacklinev1.JobEvent{Time: timestamppb.New(e.Time), Message: e.Message})
	}
	return d
}

// taskID is "<job>.<index>.<attempt>": job names have no dots.
func taskID(job string, index, attempt int) string {
	return fmt.Sprintf("%s.%d.%d", job, index, attempt)
}

// ParseTaskID splits a task id of the job service into its job, index and
// attempt.
func ParseTaskID(id string) (job string, index, attempt int, ok bool) {
	var rest string
	for i := len(id) - 1; i >= 0; i-- {
		if id[i] == '.' {
			if rest != "" {
				job = id[:i]
				break
			}
			rest = id[i+1:]
		}
	}
	if job == "" || rest == "" {
		return "", 0, 0, false
	}
	if _, err := fmt.Sscanf(id[len(job)+1:], "%d.%d", &index, &attempt); err != nil || index < 0 || attempt < 1 {
		return "", 0, 0, false
	}
	if taskID(job, index, attempt) != id {
		return "", 0, 0, false
	}
	return job, index, attempt, true
}
