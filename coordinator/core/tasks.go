package core

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/taskstate"
	"github.com/slackline/slackline/resources"
)

// TaskKey names a task: its framework's id and its own.
type TaskKey struct{ FrameworkID, TaskID string }

// Task is the core's record of a task. The shell reads it (views, trust
// checks, maintenance usage) and changes it only through the core's
// events (Launch, AdoptTask, TaskUpdate, EndTask, ReportTaskState,
// TasksUnreachable, RemoveFramework).
type Task struct {
	Info        *slacklinev1.TaskInfo
	FrameworkID string
	AgentID     string
	Role        string
	// Resources are the task's regular resources, Revocable its revocable
	// ones (a task with any is a revocable task, e.g. revocable cpus with
	// regular memory).
	Resources resources.Resources
	Revocable resources.Resources
	State     slacklinev1.TaskState
	Status    *slacklinev1.TaskStatus
}

// Key returns the task's key.
func (t *Task) Key() TaskKey { return TaskKey{t.FrameworkID, t.Info.GetTaskId()} }

// Proto returns the task as the operator API shows it.
func (t *Task) Proto() *slacklinev1.Task {
	return &slacklinev1.Task{
		TaskId: t.Info.GetTaskId(), FrameworkId: t.FrameworkID, AgentId: t.AgentID, Name: t.Info.GetName(),
		State: t.State, Resources: append(t.Resources.Proto(t.Role, resources.Regular), t.Revocable.Proto(t.Role, resources.Revocable)...), Status: t.Status,
		Labels: t.Info.GetLabels(), Role: t.Role,
	}
}

// taskTable holds the tasks: live ones by framework and by agent, each
// framework's completed ones (its history, within
// Config.MaxCompletedTasks), and the terminal tasks agents reported when
// they last registered. It is kept apart from the book's framework and
// agent records: a torn-down framework keeps its history, and a task may
// be on an agent the book does not hold (one GONE).
type taskTable struct {
	live      map[string]map[string]*Task // framework id -> task id
	onAgent   map[string]map[TaskKey]*Task
	completed map[string][]*Task
	// reported are, per agent, the terminal tasks it reported (with a
	// valid launch proof) when it last registered, which the coordinator
	// did not know live: their updates come from the agent itself, and
	// reconciliation answers their reported state meanwhile. reportedOn
	// indexes them by key.
	reported   map[string]map[TaskKey]*Task
	reportedOn map[TaskKey]string
}

func newTaskTable() taskTable {
	return taskTable{
		live: map[string]map[string]*Task{}, onAgent: map[string]map[TaskKey]*Task{},
		completed: map[string][]*Task{}, reported: map[string]map[TaskKey]*Task{}, reportedOn: map[TaskKey]string{},
	}
}

func (tt *taskTable) add(t *Task) {
	fw := tt.live[t.FrameworkID]
	if fw == nil {
		fw = map[string]*Task{}
		tt.live[t.FrameworkID] = fw
	}
	fw[t.Info.GetTaskId()] = t
	on := tt.onAgent[t.AgentID]
	if on == nil {
		on = map[TaskKey]*Task{}
		tt.onAgent[t.AgentID] = on
	}
	on[t.Key()] = t
}

// ErrUnknownTask is returned (wrapped, naming the task) by Kill for a task
// that is not a live task of the framework.
var ErrUnknownTask = errors.New("unknown task")

// Task returns a framework's live task, or nil.
func (k *Core) Task(frameworkID, taskID string) *Task { return k.tasks.live[frameworkID][taskID] }

// FrameworkTasks returns a framework's live tasks, in no order.
func (k *Core) FrameworkTasks(frameworkID string) iter.Seq[*Task] {
	return maps.Values(k.tasks.live[frameworkID])
}

// LiveTasks returns the number of a framework's live tasks.
func (k *Core) LiveTasks(frameworkID string) int { return len(k.tasks.live[frameworkID]) }

// AgentTasks returns the live tasks on an agent, by framework id then task
// id.
func (k *Core) AgentTasks(agentID string) []*Task {
	return sortedTasks(maps.Values(k.tasks.onAgent[agentID]))
}

// AgentTaskCount returns the number of live tasks on an agent.
func (k *Core) AgentTaskCount(agentID string) int { return len(k.tasks.onAgent[agentID]) }

// Completed returns a framework's completed tasks, oldest first. The
// caller must not change the slice.
func (k *Core) Completed(frameworkID string) []*Task { return k.tasks.completed[frameworkID] }

// CompletedTask returns the latest completed task of a framework with
// that id, or nil.
func (k *Core) CompletedTask(frameworkID, taskID string) *Task {
	list := k.tasks.completed[frameworkID]
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].Info.GetTaskId() == taskID {
			return list[i]
		}
	}
	return nil
}

// Reported reports whether an agent reported the task as terminal when
// it last registered (see SetReported).
func (k *Core) Reported(agentID string, key TaskKey) bool {
	_, ok := k.tasks.reported[agentID][key]
	return ok
}

func sortedTasks(seq iter.Seq[*Task]) []*Task {
	return slices.SortedFunc(seq, func(x, y *Task) int {
		return cmp.Or(strings.Compare(x.FrameworkID, y.FrameworkID), strings.Compare(x.Info.GetTaskId(), y.Info.GetTaskId()))
	})
}

// Launch records a task accepted from an offer as STAGING (its resources
// were taken with the offers: see TakeOffers and Return) and sends its
// agent the RunTask command.
func (k *Core) Launch(t *Task, framework *slacklinev1.FrameworkInfo) Ready {
	t.State = slacklinev1.TaskState_TASK_STATE_STAGING
	k.tasks.add(t)
	k.command(t.AgentID, &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_RunTask{RunTask: &slacklinev1.RunTaskCommand{
		Framework: framework, Task: t.Info,
	}}})
	return k.take()
}

// AdoptTask records a live task a registering agent reports that the
// coordinator did not know (it restarted), and claims its resources in
// the allocator.
func (k *Core) AdoptTask(t *Task) {
	k.tasks.add(t)
	k.Claim(t.FrameworkID, t.Role, t.AgentID, t.Resources, t.Revocable)
}

// SetReported replaces the terminal tasks an agent reported when it
// registered (their state as reported).
func (k *Core) SetReported(agentID string, reported []*Task) {
	for key := range k.tasks.reported[agentID] {
		delete(k.tasks.reportedOn, key)
	}
	delete(k.tasks.reported, agentID)
	if len(reported) == 0 {
		return
	}
	m := make(map[TaskKey]*Task, len(reported))
	for _, t := range reported {
		m[t.Key()] = t
		k.tasks.reportedOn[t.Key()] = agentID
	}
	k.tasks.reported[agentID] = m
}

// updateEvent is a task's status update for its framework (the shell
// adapts the state to a framework that is not partition-aware).
func updateEvent(st *slacklinev1.TaskStatus) *slacklinev1.Event {
	return &slacklinev1.Event{Event: &slacklinev1.Event_Update{Update: &slacklinev1.UpdateEvent{Status: st}}}
}

// CoordinatorStatus builds a status update generated by the coordinator
// (no uuid: it needs no acknowledgement).
func CoordinatorStatus(frameworkID, taskID, agentID string, state slacklinev1.TaskState, reason slacklinev1.Reason, message string, now time.Time) *slacklinev1.TaskStatus {
	return &slacklinev1.TaskStatus{
		TaskId: taskID, AgentId: agentID, FrameworkId: frameworkID, State: state, Reason: reason,
		Source: slacklinev1.TaskSource_TASK_SOURCE_COORDINATOR, Message: message, Timestamp: timestamppb.New(now),
	}
}

// TaskUpdate applies an agent's status update to the framework's live
// task when it is on that agent (a terminal state ends it: its resources
// are released and it joins the framework's history), then routes the
// update to the framework. The shell has checked that the agent may
// report for the task and admitted the update (AddUpdate).
func (k *Core) TaskUpdate(agentID string, st *slacklinev1.TaskStatus, now time.Time) Ready {
	if t := k.Task(st.GetFrameworkId(), st.GetTaskId()); t != nil && t.AgentID == agentID {
		t.State, t.Status = st.GetState(), st
		if taskstate.IsTerminal(st.GetState()) {
			k.forgetTask(t, now)
		}
	}
	k.send(st.GetFrameworkId(), updateEvent(st))
	return k.take()
}

// ReportTaskState records a live task's state as its re-registering agent
// reports it, and tells the framework (REASON_RECONCILIATION).
func (k *Core) ReportTaskState(t *Task, state slacklinev1.TaskState, now time.Time) Ready {
	k.reportTaskState(t, state, now)
	return k.take()
}

func (k *Core) reportTaskState(t *Task, state slacklinev1.TaskState, now time.Time) {
	t.State = state
	t.Status = CoordinatorStatus(t.FrameworkID, t.Info.GetTaskId(), t.AgentID, state, slacklinev1.Reason_REASON_RECONCILIATION,
		"agent re-registered and reports the task "+state.String(), now)
	k.send(t.FrameworkID, updateEvent(t.Status))
}

// EndTask ends a live task with a terminal status the coordinator decided
// (its agent is gone, the launch was lost): the task leaves the live
// tasks, its resources are released, and the framework is told.
func (k *Core) EndTask(t *Task, st *slacklinev1.TaskStatus, now time.Time) Ready {
	k.endTask(t, st, now)
	return k.take()
}

func (k *Core) endTask(t *Task, st *slacklinev1.TaskStatus, now time.Time) {
	t.State, t.Status = st.GetState(), st
	k.forgetTask(t, now)
	k.send(t.FrameworkID, updateEvent(st))
}

// TasksUnreachable marks the live tasks of an agent found silent (or not
// re-registered) UNREACHABLE and tells their frameworks: an update per
// task, then one FailureEvent per framework after its first update.
func (k *Core) TasksUnreachable(agentID, hostname string, now time.Time) Ready {
	told := map[string]bool{}
	for _, t := range k.AgentTasks(agentID) {
		st := CoordinatorStatus(t.FrameworkID, t.Info.GetTaskId(), agentID, slacklinev1.TaskState_TASK_STATE_UNREACHABLE,
			slacklinev1.Reason_REASON_AGENT_UNREACHABLE, "agent "+hostname+" is unreachable", now)
		t.State, t.Status = st.GetState(), st
		k.send(t.FrameworkID, updateEvent(st))
		if !told[t.FrameworkID] {
			told[t.FrameworkID] = true
			k.send(t.FrameworkID, &slacklinev1.Event{Event: &slacklinev1.Event_Failure{Failure: &slacklinev1.FailureEvent{AgentId: agentID}}})
		}
	}
	return k.take()
}

// forgetTask removes a terminal task from the live tasks, releases its
// resources and keeps it in its framework's history.
func (k *Core) forgetTask(t *Task, now time.Time) {
	key := t.Key()
	if on := k.tasks.onAgent[t.AgentID]; on[key] == t {
		delete(on, key)
		if len(on) == 0 {
			delete(k.tasks.onAgent, t.AgentID)
		}
		k.markDirty(t.AgentID)
	}
	live := k.tasks.live[t.FrameworkID]
	if live[key.TaskID] != t {
		return
	}
	delete(live, key.TaskID)
	if len(live) == 0 {
		delete(k.tasks.live, t.FrameworkID) // the space of a past burst of tasks
	}
	k.releaseTask(t.FrameworkID, t.Role, t.AgentID, t.Resources, t.Revocable, now)
	k.complete(t)
}

// complete keeps a terminal task in its framework's history, without its
// command, and drops the oldest beyond Config.MaxCompletedTasks
// (Ready.TrimmedHistory names the framework).
func (k *Core) complete(t *Task) {
	info := t.Info
	t.Info = &slacklinev1.TaskInfo{TaskId: info.GetTaskId(), Name: info.GetName(), AgentId: info.GetAgentId(), Labels: info.GetLabels()}
	list := append(k.tasks.completed[t.FrameworkID], t)
	if limit := k.cfg.MaxCompletedTasks; limit >= 0 && len(list) > limit {
		over := len(list) - limit
		clear(list[:over])
		list = append(list[:0], list[over:]...)
		k.out.TrimmedHistory = append(k.out.TrimmedHistory, t.FrameworkID)
	}
	k.tasks.completed[t.FrameworkID] = list
}

// dropFrameworkTasks forgets a torn-down framework's live tasks (they do
// not join its history; RemoveFramework released their allocations) and
// sends each agent that ran any a ShutdownFramework command, in agent id
// order.
func (k *Core) dropFrameworkTasks(frameworkID string) {
	agents := map[string]bool{}
	for _, t := range k.tasks.live[frameworkID] {
		if on := k.tasks.onAgent[t.AgentID]; on != nil {
			delete(on, t.Key())
			if len(on) == 0 {
				delete(k.tasks.onAgent, t.AgentID)
			}
		}
		agents[t.AgentID] = true
	}
	delete(k.tasks.live, frameworkID)
	for _, id := range slices.Sorted(maps.Keys(agents)) {
		k.command(id, ShutdownFrameworkCommand(frameworkID))
		k.markDirty(id)
	}
}

// ForgetFramework forgets a torn-down framework's record and history (the
// coordinator forgot the framework).
func (k *Core) ForgetFramework(frameworkID string) {
	delete(k.records, frameworkID)
	delete(k.tasks.completed, frameworkID)
}

// ForgetAgentTasks forgets what an agent reported when it registered (the
// coordinator forgot the agent; its live tasks were ended before).
func (k *Core) ForgetAgentTasks(agentID string) {
	k.SetReported(agentID, nil)
}

// ShutdownFrameworkCommand tells an agent to kill a framework's tasks
// there.
func ShutdownFrameworkCommand(frameworkID string) *slacklinev1.AgentCommand {
	return &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ShutdownFramework{
		ShutdownFramework: &slacklinev1.ShutdownFrameworkCommand{FrameworkId: frameworkID}}}
}

// KillTaskCommand tells an agent to kill a task.
func KillTaskCommand(frameworkID, taskID string) *slacklinev1.AgentCommand {
	return &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_KillTask{
		KillTask: &slacklinev1.KillTaskCommand{FrameworkId: frameworkID, TaskId: taskID}}}
}

// Kill asks the agent of a framework's live task to kill it; the task's
// terminal update comes from the agent. An unknown task is ErrUnknownTask
// (wrapped, naming it) and changes nothing.
func (k *Core) Kill(frameworkID, taskID string) (Ready, error) {
	t := k.Task(frameworkID, taskID)
	if t == nil {
		return k.take(), fmt.Errorf("task %q is not a live task of framework %q: %w", taskID, frameworkID, ErrUnknownTask)
	}
	k.command(t.AgentID, KillTaskCommand(frameworkID, taskID))
	return k.take(), nil
}

// AgentStates is what Reconcile needs to know of agents (the core's
// records: RecordedAgentStates; transcripts give their own): the state of one (known false for an agent the
// coordinator does not know), and whether any agent is still recovering
// (known from the registry, not registered again since the restart).
type AgentStates interface {
	AgentState(agentID string) (state slacklinev1.AgentState, known bool)
	AnyRecovering() bool
}

// ReconcileQuery is a task a framework asks about, with the agent it
// believes the task is on (may be empty).
type ReconcileQuery struct{ TaskID, AgentID string }

// Reconcile answers a framework's reconciliation with one update per task
// (REASON_RECONCILIATION), no uuid: with no queries, the latest state of
// each live task, in task id order; else, per query in order, the latest
// state of the live task, else of the latest completed one, else the
// terminal state its agent reported on registering (its own update may
// still be on its way), else what the agent's state tells (UNKNOWN for an
// unknown agent, UNREACHABLE, GONE) — and nothing while that agent, or
// with no agent named any agent, is still recovering: it may yet report
// the task.
func (k *Core) Reconcile(frameworkID string, queries []ReconcileQuery, agents AgentStates, now time.Time) Ready {
	latest := func(t *Task) {
		k.send(frameworkID, updateEvent(CoordinatorStatus(frameworkID, t.Info.GetTaskId(), t.AgentID, t.State,
			slacklinev1.Reason_REASON_RECONCILIATION, "reconciliation: latest known state", now)))
	}
	if len(queries) == 0 {
		for _, t := range sortedTasks(k.FrameworkTasks(frameworkID)) {
			latest(t)
		}
		return k.take()
	}
	for _, q := range queries {
		taskID, agentID := q.TaskID, q.AgentID
		if t := k.Task(frameworkID, taskID); t != nil {
			latest(t)
			continue
		}
		if t := k.CompletedTask(frameworkID, taskID); t != nil {
			latest(t)
			continue
		}
		key := TaskKey{frameworkID, taskID}
		if on, ok := k.tasks.reportedOn[key]; ok && (agentID == "" || agentID == on) {
			latest(k.tasks.reported[on][key])
			continue
		}
		state, message, ok := unknownTaskState(agentID, agents)
		if !ok {
			continue // the agent may still re-register and report it
		}
		k.send(frameworkID, updateEvent(CoordinatorStatus(frameworkID, taskID, agentID, state,
			slacklinev1.Reason_REASON_RECONCILIATION, message, now)))
	}
	return k.take()
}

// unknownTaskState answers reconciliation of a task the coordinator does
// not know. ok is false while the answer is not yet known (agents
// recovering).
func unknownTaskState(agentID string, agents AgentStates) (slacklinev1.TaskState, string, bool) {
	if agentID == "" {
		if agents.AnyRecovering() {
			return 0, "", false
		}
		return slacklinev1.TaskState_TASK_STATE_UNKNOWN, "task is unknown", true
	}
	state, known := agents.AgentState(agentID)
	switch {
	case !known:
		return slacklinev1.TaskState_TASK_STATE_UNKNOWN, "agent is unknown", true
	case state == slacklinev1.AgentState_AGENT_STATE_RECOVERING:
		return 0, "", false
	case state == slacklinev1.AgentState_AGENT_STATE_UNREACHABLE:
		return slacklinev1.TaskState_TASK_STATE_UNREACHABLE, "agent is unreachable", true
	}
	return slacklinev1.TaskState_TASK_STATE_GONE, "task is unknown to its agent", true
}

// Report is a task a registering agent reports.
type Report struct {
	// Task is the task as reported: AgentID is the registering agent's,
	// Role may be empty (the framework's first role is taken).
	Task *Task
	// Trusted: the shell found the task the coordinator's (its live record
	// on this agent with these resources, or a launch proof valid for the
	// agent's host).
	Trusted bool
}

// Frameworks is what RegisterTasks needs to know of frameworks, whose
// records are the shell's: whether one is live (known and not torn down;
// the shell adopts, before the call, a framework it did not know that a
// trusted report carries), its first role, and whether it is
// partition-aware.
type Frameworks interface {
	Framework(frameworkID string) (live bool, firstRole string, partitionAware bool)
}

// RegisterTasks merges the tasks a (re-)registering agent reports with the
// records: an untrusted task is not adopted and, unless terminal, killed
// (Ready.Untrusted names it for the log); a terminal one is kept as
// reported (SetReported: its agent sends its update itself); a live one
// of a framework that is not live has its framework shut down on the
// agent; a live task the core does not know is adopted (its resources
// claimed); one the framework was told is LOST (UNREACHABLE, framework
// not partition-aware) is killed, as Mesos does, since the framework may
// have replaced it; a changed state is recorded and told
// (REASON_RECONCILIATION). The agent's live tasks it did not report end:
// GONE, or DROPPED when still STAGING (the launch did not reach it).
func (k *Core) RegisterTasks(agentID string, reports []Report, frameworks Frameworks, now time.Time) Ready {
	seen := map[TaskKey]bool{}
	var terminal []*Task
	for _, r := range reports {
		t := r.Task
		key := t.Key()
		if !r.Trusted {
			k.out.Untrusted = append(k.out.Untrusted, t)
			if !taskstate.IsTerminal(t.State) {
				k.command(agentID, KillTaskCommand(key.FrameworkID, key.TaskID))
			}
			continue
		}
		seen[key] = true
		if taskstate.IsTerminal(t.State) {
			terminal = append(terminal, t)
			continue
		}
		live, firstRole, partitionAware := frameworks.Framework(key.FrameworkID)
		if !live {
			k.command(agentID, ShutdownFrameworkCommand(key.FrameworkID))
			continue
		}
		if t.Role == "" {
			t.Role = firstRole
		}
		known := k.Task(key.FrameworkID, key.TaskID)
		switch {
		case known == nil:
			k.AdoptTask(t)
		case known.State == slacklinev1.TaskState_TASK_STATE_UNREACHABLE && !partitionAware:
			k.command(agentID, KillTaskCommand(key.FrameworkID, key.TaskID))
		case known.State != t.State:
			k.reportTaskState(known, t.State, now)
		}
	}
	k.SetReported(agentID, terminal)
	for _, t := range k.AgentTasks(agentID) {
		if seen[t.Key()] {
			continue
		}
		state, msg := slacklinev1.TaskState_TASK_STATE_GONE, "task not found on its agent after the agent re-registered"
		if t.State == slacklinev1.TaskState_TASK_STATE_STAGING {
			state, msg = slacklinev1.TaskState_TASK_STATE_DROPPED, "launch did not reach the agent before it re-registered"
		}
		k.endTask(t, CoordinatorStatus(t.FrameworkID, t.Info.GetTaskId(), agentID, state, slacklinev1.Reason_REASON_AGENT_RESTARTED, msg, now), now)
	}
	return k.take()
}
