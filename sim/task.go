package sim

import (
	"fmt"
	"strconv"
	"time"

	"github.com/slackline/slackline/agent/tasks"
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

// Tasks returns the tasks the agent knows (live ones, and ended ones whose
// last update is not acknowledged yet), ordered by framework and task id.
func (a *Agent) Tasks() []Task {
	a.mu.Lock()
	views := a.machine.Tasks()
	a.mu.Unlock()
	out := make([]Task, len(views))
	for i, v := range views {
		out[i] = Task{FrameworkID: v.Key.FrameworkID, TaskID: v.Key.TaskID, State: v.State, Unacknowledged: v.Unacknowledged}
	}
	return out
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

// performLocked is the simulator's executor: it performs the machine's
// effects, feeding the outcomes of pretend containers back as events until
// nothing is left, and returns the events to emit once a.mu is released.
// killMessage is the message of the updates of tasks killed in this batch.
//
// The simulator keeps no checkpoint (only its ids, in WorkDir): a
// Checkpoint write matters here only as the birth of a status update.
// Containers are pretend: a start runs at once (or fails, as the task's
// labels say), a kill ends the task at once, a sim.duration timer ends it
// later.
func (a *Agent) performLocked(eff tasks.Effects, now time.Time, killMessage string) []Event {
	var events []Event
	for !eff.IsZero() {
		var next tasks.Effects
		for _, w := range eff.Checkpoint {
			if u := w.Update; u != nil {
				events = append(events, Event{
					Kind: EventStatusUpdate, Time: now, AgentIndex: a.index, AgentID: a.id,
					FrameworkID: u.FrameworkID, TaskID: u.Status.GetTaskId(), State: u.Status.GetState(),
					UUID: u.Status.GetUuid(), Message: u.Status.GetMessage(),
				})
			}
		}
		for _, start := range eff.Start {
			next.Append(a.startLocked(start, now))
		}
		for _, id := range eff.Kill {
			a.stopTimerLocked(id)
			a.recordEndLocked(id, killMessage)
			exited, _ := a.machine.Step(tasks.Exited{ContainerID: id, Exit: tasks.Exit{ExitCode: -1, Killed: true, Message: killMessage}, Now: now})
			next.Append(exited)
		}
		for _, id := range eff.Destroy {
			a.stopTimerLocked(id)
			a.recordEndLocked(id, "destroyed")
		}
		for _, u := range eff.Send {
			a.session.Send(u.FrameworkID, u.Status)
		}
		eff = next
	}
	return events
}

// startLocked starts a pretend container: RUNNING at once, FAILED when
// the labels say so or are invalid; a sim.duration arms the timer that
// ends it.
func (a *Agent) startLocked(start tasks.Start, now time.Time) tasks.Effects {
	id := start.ContainerID
	var ev tasks.Event
	usage, usageErr := parseUsage(start.Task.GetLabels())
	switch sc, err := parseScript(start.Task.GetLabels()); {
	case err != nil || usageErr != nil:
		if err == nil {
			err = usageErr
		}
		ev = tasks.LaunchFailed{ContainerID: id, Reason: slacklinev1.Reason_REASON_TASK_INVALID, Message: err.Error(), Now: now}
	case sc.failLaunch:
		ev = tasks.LaunchFailed{ContainerID: id, Reason: slacklinev1.Reason_REASON_CONTAINER_LAUNCH_FAILED, Message: "simulated launch failure", Now: now}
	default:
		ev = tasks.Launched{ContainerID: id, Now: now}
		a.recordStartLocked(start, usage, now)
		if sc.hasDuration {
			a.timers[id] = time.AfterFunc(sc.duration, func() { a.exit(id, sc.exitCode) })
		}
	}
	eff, _ := a.machine.Step(ev)
	return eff
}

// exit ends a pretend container whose sim.duration elapsed.
func (a *Agent) exit(containerID string, exitCode int) {
	now := time.Now()
	a.mu.Lock()
	if _, running := a.timers[containerID]; !running {
		a.mu.Unlock() // killed meanwhile, or the agent was reset
		return
	}
	delete(a.timers, containerID)
	a.recordEndLocked(containerID, fmt.Sprintf("exited with code %d", exitCode))
	eff, _ := a.machine.Step(tasks.Exited{ContainerID: containerID, Exit: tasks.Exit{ExitCode: exitCode, Message: fmt.Sprintf("exited with code %d", exitCode)}, Now: now})
	events := a.performLocked(eff, now, "")
	a.mu.Unlock()
	a.fleet.emit(events...)
}

func (a *Agent) stopTimerLocked(containerID string) {
	if t := a.timers[containerID]; t != nil {
		t.Stop()
		delete(a.timers, containerID)
	}
}
