package sim

import (
	"context"
	"fmt"
	"github.com/slackline/slackline/internal/ids"
	"github.com/slackline/slackline/internal/taskstate"
	"slices"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// Task is a snapshot of a simulated task.
type Task struct {
	FrameworkID string
	TaskID      string
	// State is the state of the task's latest status update.
	State slacklinev1.TaskState
	// Unacknowledged is how many of its status updates await an
	// acknowledgement.
	Unacknowledged int
}

type taskKey struct{ frameworkID, taskID string }

// task is a simulated task. A terminal task is forgotten once its last
// update is acknowledged.
type task struct {
	key       taskKey
	info      *slacklinev1.TaskInfo
	framework *slacklinev1.FrameworkInfo
	state     slacklinev1.TaskState
	timer     *time.Timer // ends a task with a sim.duration label
	// updates are the unacknowledged status updates, oldest first. Only the
	// first is sent; the next one goes when it is acknowledged.
	updates []*pendingUpdate
}

type pendingUpdate struct {
	status   *slacklinev1.TaskStatus // immutable once created
	sentIn   *session                // the session it was last sent in
	retry    time.Duration           // the current re-send interval
	nextSend time.Time               // when to re-send it in sentIn
}

// script is how a task behaves, from its labels.
type script struct {
	failLaunch  bool
	hasDuration bool
	duration    time.Duration
	exitCode    int
}

func parseScript(labels map[string]string) (script, error) {
	var sc script
	if v, ok := labels[LabelFailLaunch]; ok && v != "false" && v != "0" {
		sc.failLaunch = true
	}
	if v, ok := labels[LabelDuration]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return sc, fmt.Errorf("invalid %s label %q: want a non-negative Go duration", LabelDuration, v)
		}
		sc.hasDuration, sc.duration = true, d
	}
	if v, ok := labels[LabelExitCode]; ok {
		code, err := strconv.Atoi(v)
		if err != nil {
			return sc, fmt.Errorf("invalid %s label %q: want an integer", LabelExitCode, v)
		}
		sc.exitCode = code
	}
	return sc, nil
}

// Tasks returns the tasks the agent knows (live ones, and ended ones whose
// last update is not acknowledged yet), ordered by framework and task id.
func (a *Agent) Tasks() []Task {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Task, 0, len(a.tasks))
	for _, t := range a.sortedTasksLocked() {
		out = append(out, Task{FrameworkID: t.key.frameworkID, TaskID: t.key.taskID, State: t.state, Unacknowledged: len(t.updates)})
	}
	return out
}

// agentTasksLocked returns the tasks to report when registering, with their
// latest state.
func (a *Agent) agentTasksLocked() []*slacklinev1.AgentTask {
	if len(a.tasks) == 0 {
		return nil
	}
	out := make([]*slacklinev1.AgentTask, 0, len(a.tasks))
	for _, t := range a.sortedTasksLocked() {
		out = append(out, &slacklinev1.AgentTask{FrameworkId: t.key.frameworkID, Task: t.info, State: t.state, Framework: t.framework})
	}
	return out
}

// runTask starts a task: RUNNING at once, or FAILED when its labels say so.
func (a *Agent) runTask(cmd *slacklinev1.RunTaskCommand) {
	info := cmd.GetTask()
	key := taskKey{cmd.GetFramework().GetId(), info.GetTaskId()}
	if key.frameworkID == "" || key.taskID == "" {
		a.log.Warn("ignoring run_task without a framework id or task id")
		return
	}
	now := time.Now()
	a.mu.Lock()
	if _, known := a.tasks[key]; known {
		a.mu.Unlock()
		a.log.Warn("ignoring run_task for a task the agent already has", "framework_id", key.frameworkID, "task_id", key.taskID)
		return
	}
	t := &task{key: key, info: info, framework: cmd.GetFramework(), state: slacklinev1.TaskState_TASK_STATE_STAGING}
	a.tasks[key] = t
	events := []Event{{Kind: EventTaskLaunched, Time: now, AgentIndex: a.index, AgentID: a.id, FrameworkID: key.frameworkID, TaskID: key.taskID}}
	sc, err := parseScript(info.GetLabels())
	switch {
	case err != nil:
		events = append(events, a.updateLocked(t, slacklinev1.TaskState_TASK_STATE_FAILED, slacklinev1.Reason_REASON_TASK_INVALID, err.Error()))
	case sc.failLaunch:
		events = append(events, a.updateLocked(t, slacklinev1.TaskState_TASK_STATE_FAILED, slacklinev1.Reason_REASON_CONTAINER_LAUNCH_FAILED, "simulated launch failure"))
	default:
		events = append(events, a.updateLocked(t, slacklinev1.TaskState_TASK_STATE_RUNNING, slacklinev1.Reason_REASON_UNSPECIFIED, ""))
		if sc.hasDuration {
			t.timer = time.AfterFunc(sc.duration, func() { a.finishTask(t, sc.exitCode) })
		}
	}
	a.mu.Unlock()
	a.fleet.emit(events...)
}

// finishTask ends a task whose sim.duration elapsed.
func (a *Agent) finishTask(t *task, exitCode int) {
	a.mu.Lock()
	if a.tasks[t.key] != t || taskstate.IsTerminal(t.state) {
		a.mu.Unlock()
		return
	}
	t.timer = nil
	state := slacklinev1.TaskState_TASK_STATE_FINISHED
	if exitCode != 0 {
		state = slacklinev1.TaskState_TASK_STATE_FAILED
	}
	event := a.updateLocked(t, state, slacklinev1.Reason_REASON_UNSPECIFIED, fmt.Sprintf("exited with code %d", exitCode))
	a.mu.Unlock()
	a.fleet.emit(event)
}

// killTask ends a task KILLED, or in the command's terminal state_override.
// A task the agent does not know is reported TASK_STATE_DROPPED so that the
// coordinator's view converges; killing an ended task does nothing.
func (a *Agent) killTask(cmd *slacklinev1.KillTaskCommand) {
	key := taskKey{cmd.GetFrameworkId(), cmd.GetTaskId()}
	state := slacklinev1.TaskState_TASK_STATE_KILLED
	if override := cmd.GetStateOverride(); taskstate.IsTerminal(override) {
		state = override
	}
	a.mu.Lock()
	var events []Event
	switch t := a.tasks[key]; {
	case t == nil:
		t = &task{key: key, info: &slacklinev1.TaskInfo{TaskId: key.taskID}, state: slacklinev1.TaskState_TASK_STATE_UNKNOWN}
		a.tasks[key] = t
		events = append(events, a.updateLocked(t, slacklinev1.TaskState_TASK_STATE_DROPPED, slacklinev1.Reason_REASON_TASK_UNKNOWN, "task unknown to the agent"))
	case taskstate.IsTerminal(t.state):
	default:
		events = append(events, a.updateLocked(t, state, slacklinev1.Reason_REASON_UNSPECIFIED, "killed"))
	}
	a.mu.Unlock()
	a.fleet.emit(events...)
}

// shutdownFramework kills every live task of the framework.
func (a *Agent) shutdownFramework(frameworkID string) {
	a.mu.Lock()
	var events []Event
	for _, t := range a.sortedTasksLocked() {
		if t.key.frameworkID == frameworkID && !taskstate.IsTerminal(t.state) {
			events = append(events, a.updateLocked(t, slacklinev1.TaskState_TASK_STATE_KILLED, slacklinev1.Reason_REASON_UNSPECIFIED, "framework shut down"))
		}
	}
	a.mu.Unlock()
	a.fleet.emit(events...)
}

// acknowledge drops the acknowledged update; the task's next update, if
// any, is sent at once, and an ended task with nothing left is forgotten.
func (a *Agent) acknowledge(cmd *slacklinev1.AcknowledgeCommand) {
	key := taskKey{cmd.GetFrameworkId(), cmd.GetTaskId()}
	a.mu.Lock()
	found := false
	if t := a.tasks[key]; t != nil {
		i := slices.IndexFunc(t.updates, func(u *pendingUpdate) bool { return u.status.GetUuid() == cmd.GetUuid() })
		if i >= 0 {
			found = true
			t.updates = slices.Delete(t.updates, i, i+1)
			if i == 0 && len(t.updates) > 0 {
				a.kickLocked()
			}
		}
		if len(t.updates) == 0 && taskstate.IsTerminal(t.state) {
			delete(a.tasks, key)
		}
	}
	id := a.id
	a.mu.Unlock()
	if !found {
		a.log.Debug("acknowledgement for an unknown update", "framework_id", key.frameworkID, "task_id", key.taskID, "uuid", cmd.GetUuid())
		return
	}
	a.fleet.emit(Event{Kind: EventAcknowledged, Time: time.Now(), AgentIndex: a.index, AgentID: id, FrameworkID: key.frameworkID, TaskID: key.taskID, UUID: cmd.GetUuid()})
}

// updateLocked records a new status update for t and returns its event for
// the caller to emit once it has released the lock.
func (a *Agent) updateLocked(t *task, state slacklinev1.TaskState, reason slacklinev1.Reason, message string) Event {
	now := time.Now()
	status := &slacklinev1.TaskStatus{
		TaskId:      t.key.taskID,
		AgentId:     a.id,
		State:       state,
		Reason:      reason,
		Source:      slacklinev1.TaskSource_TASK_SOURCE_AGENT,
		Message:     message,
		Uuid:        ids.New(),
		Timestamp:   timestamppb.New(now),
		FrameworkId: t.key.frameworkID,
	}
	t.state = state
	if taskstate.IsTerminal(state) && t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	t.updates = append(t.updates, &pendingUpdate{status: status})
	if len(t.updates) == 1 {
		a.kickLocked()
	}
	return Event{
		Kind: EventStatusUpdate, Time: now, AgentIndex: a.index, AgentID: a.id,
		FrameworkID: t.key.frameworkID, TaskID: t.key.taskID, State: state, UUID: status.Uuid, Message: message,
	}
}

// kickLocked starts a flush unless one is running (it will see the new
// work) or there is no session to send in.
func (a *Agent) kickLocked() {
	if a.flushing || a.sess == nil || a.stopped {
		return
	}
	a.flushing = true
	a.fleet.flushes.Go(a.flush)
}

// resendDueLocked reports whether some task's first update is due in s.
func (a *Agent) resendDueLocked(s *session, now time.Time) bool {
	for _, t := range a.tasks {
		if len(t.updates) > 0 {
			if u := t.updates[0]; u.sentIn != s || !now.Before(u.nextSend) {
				return true
			}
		}
	}
	return false
}

// flush sends every task's first unacknowledged update that is due: never
// sent in the current session, or its re-send time has come. It loops until
// nothing is due, so work added meanwhile is not lost.
func (a *Agent) flush() {
	cfg := &a.fleet.cfg
	for {
		a.mu.Lock()
		s := a.sess
		var batch []*slacklinev1.UpdateStatusRequest
		if s != nil && !a.stopped {
			now := time.Now()
			for _, t := range a.sortedTasksLocked() {
				if len(t.updates) == 0 {
					continue
				}
				u := t.updates[0]
				if u.sentIn == s && now.Before(u.nextSend) {
					continue
				}
				if u.sentIn != s {
					u.retry = cfg.StatusRetryMin
				} else {
					u.retry = min(2*u.retry, cfg.StatusRetryMax)
				}
				u.sentIn, u.nextSend = s, now.Add(u.retry)
				batch = append(batch, &slacklinev1.UpdateStatusRequest{AgentId: s.agentID, SessionId: s.id, FrameworkId: t.key.frameworkID, Status: u.status})
			}
		}
		if len(batch) == 0 {
			a.flushing = false
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		for _, req := range batch {
			if err := a.sendStatus(s, req); err != nil && s.ctx.Err() != nil {
				break // the session is over; the next one re-sends
			}
		}
	}
}

// sendStatus sends one update in s. An error that invalidates the session
// ends it.
func (a *Agent) sendStatus(s *session, req *slacklinev1.UpdateStatusRequest) error {
	ctx, cancel := context.WithTimeout(s.ctx, a.fleet.cfg.RPCTimeout)
	defer cancel()
	_, err := a.client.UpdateStatus(ctx, connect.NewRequest(req))
	switch {
	case err == nil:
	case isSessionError(err):
		a.dropSession(s, fmt.Errorf("update status: %w", err))
	case s.ctx.Err() == nil:
		a.log.Debug("cannot send status update; will retry", "task_id", req.GetStatus().GetTaskId(), "error", err)
	}
	return err
}
