package tasks

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/ids"
	"github.com/slackline/slackline/internal/taskspec"
	"github.com/slackline/slackline/internal/taskstate"
	"github.com/slackline/slackline/resources"
)

// Errors Step returns for events that change nothing. The machine's state
// is unchanged when Step returns one of them.
var (
	// ErrInvalidLaunch is returned for a RunTask without a framework or task id.
	ErrInvalidLaunch = errors.New("run_task without a framework id or task id")
	// ErrDuplicateLaunch is returned for a RunTask of a task the agent has.
	ErrDuplicateLaunch = errors.New("task already known to the agent")
	// ErrStaleAcknowledgement is returned for an acknowledgement whose uuid
	// is not the task's oldest unacknowledged update.
	ErrStaleAcknowledgement = errors.New("acknowledgement of an update that is not awaiting one")
	// ErrUnknownTask is returned for an acknowledgement of a task the agent
	// does not know.
	ErrUnknownTask = errors.New("task unknown to the agent")
	// ErrUnknownContainer is returned for a launch result or an exit of a
	// container that belongs to no task; Exited still asks to destroy it.
	ErrUnknownContainer = errors.New("container unknown to the agent")
	// ErrAlreadyEnded is returned for a kill of a task that has ended.
	ErrAlreadyEnded = errors.New("task already ended")
	// ErrAlreadyKilling is returned for an agent-decided kill (one with a
	// reason) of a task whose kill is under way.
	ErrAlreadyKilling = errors.New("task is already being killed")
	// ErrNotRunning is returned for a health change of a task that is not
	// running (or is being killed).
	ErrNotRunning = errors.New("task is not running")
	// ErrHealthUnchanged is returned for a health change to the health the
	// task already has.
	ErrHealthUnchanged = errors.New("health unchanged")
)

// Key identifies a task on an agent.
type Key struct{ FrameworkID, TaskID string }

func (k Key) String() string { return k.FrameworkID + "/" + k.TaskID }

func compareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.FrameworkID, b.FrameworkID), cmp.Compare(a.TaskID, b.TaskID))
}

// Config configures a Machine.
type Config struct {
	// RetryMin is how long an unacknowledged update waits before it is sent
	// again (default 5 s); each re-send doubles the wait up to RetryMax
	// (default 1 min).
	RetryMin, RetryMax time.Duration
	// NewID returns a fresh unique id, for status update uuids and container
	// ids (default: 32 random hex digits). Tests inject a counter.
	NewID func() string
}

func (c Config) withDefaults() Config {
	if c.RetryMin <= 0 {
		c.RetryMin = 5 * time.Second
	}
	if c.RetryMax < c.RetryMin {
		c.RetryMax = max(c.RetryMin, time.Minute)
	}
	if c.NewID == nil {
		c.NewID = ids.NewHex
	}
	return c
}

// Update is a status update awaiting acknowledgement. Its Status is never
// modified once the update exists.
type Update struct {
	// CheckpointKey is the update's key in the checkpoint; it orders the
	// updates of one task.
	CheckpointKey string
	FrameworkID   string
	Status        *slacklinev1.TaskStatus
}

// Key returns the key of the update's task.
func (u Update) Key() Key { return Key{u.FrameworkID, u.Status.GetTaskId()} }

// Write is one checkpoint write. Exactly one field is set.
type Write struct {
	// Task is a task record to put (never modified once written here).
	Task *slacklinev1.AgentTaskRecord
	// Forget is a task whose record is deleted.
	Forget *Key
	// Update is an update to put.
	Update *Update
	// Acknowledged is the checkpoint key of an update to delete.
	Acknowledged string
}

// Start asks the executor to start a task's container. The outcome comes
// back as Launched or LaunchFailed.
type Start struct {
	ContainerID string
	Key         Key
	Task        *slacklinev1.TaskInfo
	Framework   *slacklinev1.FrameworkInfo
	// Revocable is set when any of the task's resources is revocable.
	Revocable bool
	// Resources are all the task's resources, regular and revocable.
	Resources resources.Resources
}

// Effects are what a Step asks the executor to do, in this order:
// Checkpoint (one transaction, durable first), then Start, Kill and
// Destroy, then Send. See the package documentation.
type Effects struct {
	Checkpoint []Write
	Start      []Start
	// Kill and Destroy list container ids.
	Kill, Destroy []string
	// Send lists the updates to send over the current session.
	Send []Update
}

// Append adds the effects of a later Step to e.
func (e *Effects) Append(later Effects) {
	e.Checkpoint = append(e.Checkpoint, later.Checkpoint...)
	e.Start = append(e.Start, later.Start...)
	e.Kill = append(e.Kill, later.Kill...)
	e.Destroy = append(e.Destroy, later.Destroy...)
	e.Send = append(e.Send, later.Send...)
}

// IsZero reports whether there is nothing to do.
func (e Effects) IsZero() bool {
	return len(e.Checkpoint)+len(e.Start)+len(e.Kill)+len(e.Destroy)+len(e.Send) == 0
}

// Exit is how a container ended.
type Exit struct {
	// ExitCode is the main process's exit code (-1 when killed by a signal).
	ExitCode int
	// OOMKilled: the kernel killed a process of the container for exceeding
	// its memory limit.
	OOMKilled bool
	// Killed: the container was ended by a Kill effect.
	Killed bool
	// Lost: the container vanished without an exit status (host reboot).
	Lost bool
	// Message is a human-readable summary for the status update.
	Message string
}

// View is a snapshot of one task.
type View struct {
	Key         Key
	State       slacklinev1.TaskState
	ContainerID string
	// Unacknowledged counts the task's updates awaiting acknowledgement.
	Unacknowledged int
}

// Machine is the lifecycle of one agent's tasks. Create it with New or
// Recover; drive it with Step. It is not safe for concurrent use.
type Machine struct {
	cfg         Config
	tasks       map[Key]*task
	byContainer map[string]Key
	// seq numbers updates, so that their checkpoint keys sort in order.
	seq uint64
	// session is set while a session with the coordinator is open.
	session bool
}

// task is a task the agent runs or ran and has not forgotten. Its record
// fields are copied into a fresh AgentTaskRecord for every checkpoint write,
// so records handed out are never modified.
type task struct {
	key         Key
	info        *slacklinev1.TaskInfo
	framework   *slacklinev1.FrameworkInfo
	state       slacklinev1.TaskState
	containerID string
	// killState, killReason and killMessage record a requested kill: the
	// state to report instead of KILLED, and why the agent killed.
	killState   slacklinev1.TaskState
	killReason  slacklinev1.Reason
	killMessage string

	// healthy is the task's last health (nil: not checked yet); every
	// update after a change carries it.
	healthy *bool

	launching       bool // a Start effect awaits its Launched/LaunchFailed
	killAfterLaunch bool // a kill came while launching
	killing         bool // a kill was requested

	// updates are the unacknowledged updates, oldest first; only the first
	// is sent.
	updates []Update
	// nextSend is when the first update is sent again; retry the wait
	// after that.
	nextSend time.Time
	retry    time.Duration
}

func (t *task) record() *slacklinev1.AgentTaskRecord {
	return &slacklinev1.AgentTaskRecord{
		Task: &slacklinev1.AgentTask{
			FrameworkId: t.key.FrameworkID, Task: t.info, State: t.state, Framework: t.framework,
		},
		ContainerId: t.containerID, KillState: t.killState, KillReason: t.killReason, KillMessage: t.killMessage,
	}
}

// New returns a machine with no tasks.
func New(cfg Config) *Machine {
	return &Machine{cfg: cfg.withDefaults(), tasks: map[Key]*task{}, byContainer: map[string]Key{}}
}

// Event is an input to Step. The event types are this package's exported
// structs below.
type Event interface{ isEvent() }

// Launch is a RunTask command from the coordinator.
type Launch struct {
	Command *slacklinev1.RunTaskCommand
	Now     time.Time
}

// Launched reports that a Start effect's container runs.
type Launched struct {
	ContainerID string
	// Message is the RUNNING update's message, e.g. the cgroup and pid.
	Message string
	Now     time.Time
}

// LaunchFailed reports that a Start effect's container could not start;
// the task ends TASK_STATE_FAILED.
type LaunchFailed struct {
	ContainerID string
	// Reason defaults to REASON_CONTAINER_LAUNCH_FAILED.
	Reason  slacklinev1.Reason
	Message string
	Now     time.Time
}

// Kill asks to kill a task. StateOverride is the terminal state to report
// instead of TASK_STATE_KILLED; Reason and Message, when set, explain a kill
// the agent decided itself (a QoS preemption).
type Kill struct {
	Key           Key
	StateOverride slacklinev1.TaskState
	Reason        slacklinev1.Reason
	Message       string
	Now           time.Time
}

// ShutdownFramework kills every live task of a framework.
type ShutdownFramework struct {
	FrameworkID string
	Now         time.Time
}

// ShutdownAgent kills every live task; they end TASK_STATE_GONE_BY_OPERATOR.
type ShutdownAgent struct{ Now time.Time }

// Exited reports that a container ended.
type Exited struct {
	ContainerID string
	Exit        Exit
	Now         time.Time
}

// Acknowledge is a framework's acknowledgement of a status update.
type Acknowledge struct {
	Key  Key
	UUID string
	Now  time.Time
}

// SessionOpened reports a new session with the coordinator: every task's
// oldest unacknowledged update is sent at once.
type SessionOpened struct{ Now time.Time }

// SessionLost reports that the session ended: nothing is sent until the
// next one opens.
type SessionLost struct{}

// Tick lets time pass: updates whose re-send time has come are sent.
type Tick struct{ Now time.Time }

// HealthChanged reports that a running task's health check result
// changed: a TASK_STATE_RUNNING update with healthy set is sent. A task
// failing its check too often is killed with a Kill event instead.
type HealthChanged struct {
	ContainerID string
	Healthy     bool
	Message     string
	Now         time.Time
}

func (Launch) isEvent()            {}
func (Launched) isEvent()          {}
func (LaunchFailed) isEvent()      {}
func (Kill) isEvent()              {}
func (ShutdownFramework) isEvent() {}
func (ShutdownAgent) isEvent()     {}
func (Exited) isEvent()            {}
func (Acknowledge) isEvent()       {}
func (SessionOpened) isEvent()     {}
func (SessionLost) isEvent()       {}
func (Tick) isEvent()              {}
func (HealthChanged) isEvent()     {}

// Step applies an event and returns the effects to perform. An event that
// changes nothing returns an error saying why (and, for Exited of an
// unknown container, still the effect that destroys it).
func (m *Machine) Step(ev Event) (Effects, error) {
	var eff Effects
	var err error
	switch ev := ev.(type) {
	case Launch:
		err = m.launch(ev, &eff)
	case Launched:
		err = m.launched(ev, &eff)
	case LaunchFailed:
		err = m.launchFailed(ev, &eff)
	case Kill:
		err = m.kill(ev, &eff)
	case ShutdownFramework:
		for _, k := range m.liveKeys(ev.FrameworkID) {
			_ = m.kill(Kill{Key: k, Now: ev.Now}, &eff)
		}
	case ShutdownAgent:
		for _, k := range m.liveKeys("") {
			_ = m.kill(Kill{Key: k, StateOverride: slacklinev1.TaskState_TASK_STATE_GONE_BY_OPERATOR, Now: ev.Now}, &eff)
		}
	case Exited:
		err = m.exited(ev, &eff)
	case Acknowledge:
		err = m.acknowledge(ev, &eff)
	case SessionOpened:
		m.session = true
		for _, t := range m.sorted() {
			if len(t.updates) > 0 {
				t.retry = m.cfg.RetryMin
				m.sendHead(t, ev.Now, &eff)
			}
		}
	case SessionLost:
		m.session = false
	case Tick:
		m.tick(ev.Now, &eff)
	case HealthChanged:
		err = m.healthChanged(ev, &eff)
	default:
		err = fmt.Errorf("unknown event %T", ev)
	}
	return eff, err
}

func (m *Machine) launch(ev Launch, eff *Effects) error {
	info, fw := ev.Command.GetTask(), ev.Command.GetFramework()
	key := Key{fw.GetId(), info.GetTaskId()}
	if key.FrameworkID == "" || key.TaskID == "" {
		return ErrInvalidLaunch
	}
	if _, dup := m.tasks[key]; dup {
		return fmt.Errorf("launch %s: %w", key, ErrDuplicateLaunch)
	}
	t := &task{
		key: key, info: info, framework: fw, state: slacklinev1.TaskState_TASK_STATE_STAGING,
		containerID: m.cfg.NewID(), retry: m.cfg.RetryMin,
	}
	m.tasks[key] = t
	m.byContainer[t.containerID] = key
	regular, revocable, err := resources.FromProto(info.GetResources())
	if err == nil {
		// Checked again here: a task may come from an older coordinator.
		err = taskspec.Task(info)
	}
	if err != nil {
		m.report(t, slacklinev1.TaskState_TASK_STATE_ERROR, slacklinev1.Reason_REASON_TASK_INVALID, err.Error(), ev.Now, eff)
		return nil
	}
	// Durable before the container exists, so that a restart finds it.
	t.launching = true
	eff.Checkpoint = append(eff.Checkpoint, Write{Task: t.record()})
	eff.Start = append(eff.Start, Start{
		ContainerID: t.containerID, Key: key, Task: info, Framework: fw,
		Revocable: !revocable.IsEmpty(), Resources: regular.Add(revocable),
	})
	return nil
}

// launching returns the task whose container is being started.
func (m *Machine) launching(containerID string) (*task, error) {
	t := m.tasks[m.byContainer[containerID]]
	if t == nil || t.containerID != containerID {
		return nil, fmt.Errorf("container %s: %w", containerID, ErrUnknownContainer)
	}
	if !t.launching {
		return nil, fmt.Errorf("container %s of task %s: launch result without a launch", containerID, t.key)
	}
	return t, nil
}

func (m *Machine) launched(ev Launched, eff *Effects) error {
	t, err := m.launching(ev.ContainerID)
	if err != nil {
		return err
	}
	t.launching = false
	if !taskstate.IsTerminal(t.state) {
		m.report(t, slacklinev1.TaskState_TASK_STATE_RUNNING, slacklinev1.Reason_REASON_UNSPECIFIED, ev.Message, ev.Now, eff)
	}
	if t.killAfterLaunch {
		eff.Kill = append(eff.Kill, t.containerID)
	}
	return nil
}

func (m *Machine) healthChanged(ev HealthChanged, eff *Effects) error {
	t := m.tasks[m.byContainer[ev.ContainerID]]
	if t == nil || t.containerID != ev.ContainerID {
		return fmt.Errorf("health of container %s: %w", ev.ContainerID, ErrUnknownContainer)
	}
	if t.state != slacklinev1.TaskState_TASK_STATE_RUNNING || t.killing {
		return fmt.Errorf("health of task %s in %v: %w", t.key, t.state, ErrNotRunning)
	}
	if t.healthy != nil && *t.healthy == ev.Healthy {
		return fmt.Errorf("health of task %s: %w", t.key, ErrHealthUnchanged)
	}
	healthy := ev.Healthy
	t.healthy = &healthy
	m.report(t, slacklinev1.TaskState_TASK_STATE_RUNNING, slacklinev1.Reason_REASON_UNSPECIFIED, ev.Message, ev.Now, eff)
	return nil
}

func (m *Machine) launchFailed(ev LaunchFailed, eff *Effects) error {
	t, err := m.launching(ev.ContainerID)
	if err != nil {
		return err
	}
	t.launching = false
	if t.killAfterLaunch {
		// Killed while it was being launched (e.g. while its artifacts
		// were fetched): the kill is what ended it.
		state := cmp.Or(t.killState, slacklinev1.TaskState_TASK_STATE_KILLED)
		reason := cmp.Or(t.killReason, slacklinev1.Reason_REASON_TASK_KILLED_DURING_LAUNCH)
		m.report(t, state, reason, cmp.Or(t.killMessage, "killed while launching: "+ev.Message), ev.Now, eff)
		return nil
	}
	reason := cmp.Or(ev.Reason, slacklinev1.Reason_REASON_CONTAINER_LAUNCH_FAILED)
	m.report(t, slacklinev1.TaskState_TASK_STATE_FAILED, reason, ev.Message, ev.Now, eff)
	return nil
}

func (m *Machine) kill(ev Kill, eff *Effects) error {
	t := m.tasks[ev.Key]
	switch {
	case t == nil:
		// Unknown here: tell the framework it will never run.
		t = &task{key: ev.Key, info: &slacklinev1.TaskInfo{TaskId: ev.Key.TaskID}, retry: m.cfg.RetryMin}
		m.tasks[ev.Key] = t
		m.report(t, slacklinev1.TaskState_TASK_STATE_DROPPED, slacklinev1.Reason_REASON_TASK_UNKNOWN, "task unknown to the agent", ev.Now, eff)
		return nil
	case taskstate.IsTerminal(t.state):
		return fmt.Errorf("kill %s: %w", ev.Key, ErrAlreadyEnded)
	case t.killing && ev.Reason != slacklinev1.Reason_REASON_UNSPECIFIED:
		return fmt.Errorf("kill %s: %w", ev.Key, ErrAlreadyKilling)
	}
	t.killing = true
	changed := false
	if ev.StateOverride != slacklinev1.TaskState_TASK_STATE_UNSPECIFIED && ev.StateOverride != t.killState {
		t.killState, changed = ev.StateOverride, true
	}
	if ev.Reason != slacklinev1.Reason_REASON_UNSPECIFIED {
		t.killReason, t.killMessage, changed = ev.Reason, ev.Message, true
	}
	if changed {
		// Durable: a restart in the middle of the kill still reports why.
		eff.Checkpoint = append(eff.Checkpoint, Write{Task: t.record()})
	}
	if t.launching {
		t.killAfterLaunch = true
		return nil
	}
	eff.Kill = append(eff.Kill, t.containerID)
	return nil
}

func (m *Machine) exited(ev Exited, eff *Effects) error {
	eff.Destroy = append(eff.Destroy, ev.ContainerID)
	t := m.tasks[m.byContainer[ev.ContainerID]]
	if t == nil || t.containerID != ev.ContainerID {
		return fmt.Errorf("exit of container %s: %w", ev.ContainerID, ErrUnknownContainer)
	}
	if taskstate.IsTerminal(t.state) {
		return nil // reported already (e.g. LOST after a reboot); only destroy
	}
	t.launching = false
	state, reason := ExitStatus(ev.Exit, t.killState)
	message := ev.Exit.Message
	if ev.Exit.Killed && t.killReason != slacklinev1.Reason_REASON_UNSPECIFIED {
		reason, message = t.killReason, t.killMessage
	}
	m.report(t, state, reason, message, ev.Now, eff)
	return nil
}

// ExitStatus maps a container's end to a task state and reason; killState
// is the state a requested kill reports (UNSPECIFIED: TASK_STATE_KILLED).
func ExitStatus(ex Exit, killState slacklinev1.TaskState) (slacklinev1.TaskState, slacklinev1.Reason) {
	switch {
	case ex.Lost:
		return slacklinev1.TaskState_TASK_STATE_LOST, slacklinev1.Reason_REASON_AGENT_RESTARTED
	case ex.OOMKilled:
		return slacklinev1.TaskState_TASK_STATE_FAILED, slacklinev1.Reason_REASON_CONTAINER_LIMITATION_MEMORY
	case ex.Killed && killState != slacklinev1.TaskState_TASK_STATE_UNSPECIFIED:
		return killState, slacklinev1.Reason_REASON_TASK_KILLED
	case ex.Killed:
		return slacklinev1.TaskState_TASK_STATE_KILLED, slacklinev1.Reason_REASON_TASK_KILLED
	case ex.ExitCode == 0:
		return slacklinev1.TaskState_TASK_STATE_FINISHED, slacklinev1.Reason_REASON_UNSPECIFIED
	}
	return slacklinev1.TaskState_TASK_STATE_FAILED, slacklinev1.Reason_REASON_COMMAND_EXECUTOR_FAILED
}

func (m *Machine) acknowledge(ev Acknowledge, eff *Effects) error {
	t := m.tasks[ev.Key]
	if t == nil {
		return fmt.Errorf("acknowledgement for %s: %w", ev.Key, ErrUnknownTask)
	}
	if len(t.updates) == 0 || t.updates[0].Status.GetUuid() != ev.UUID {
		return fmt.Errorf("acknowledgement %s for %s: %w", ev.UUID, ev.Key, ErrStaleAcknowledgement)
	}
	eff.Checkpoint = append(eff.Checkpoint, Write{Acknowledged: t.updates[0].CheckpointKey})
	t.updates[0] = Update{}
	t.updates = t.updates[1:]
	switch {
	case len(t.updates) > 0:
		t.retry = m.cfg.RetryMin
		m.sendHead(t, ev.Now, eff)
	case taskstate.IsTerminal(t.state):
		m.forget(t, eff)
	}
	return nil
}

// forget deletes an ended task with nothing left to acknowledge.
func (m *Machine) forget(t *task, eff *Effects) {
	delete(m.tasks, t.key)
	if m.byContainer[t.containerID] == t.key {
		delete(m.byContainer, t.containerID)
	}
	key := t.key
	eff.Checkpoint = append(eff.Checkpoint, Write{Forget: &key})
}

// report records a new state and its status update: the task record and
// the update are checkpointed together, and the update is sent at once when
// it is the task's only one and a session is open.
func (m *Machine) report(t *task, state slacklinev1.TaskState, reason slacklinev1.Reason, message string, now time.Time, eff *Effects) {
	t.state = state
	m.seq++
	u := Update{
		CheckpointKey: updateKey(t.key, m.seq),
		FrameworkID:   t.key.FrameworkID,
		Status: &slacklinev1.TaskStatus{
			TaskId: t.key.TaskID, FrameworkId: t.key.FrameworkID, State: state, Reason: reason, Message: message,
			Source: slacklinev1.TaskSource_TASK_SOURCE_AGENT, Uuid: m.cfg.NewID(), Timestamp: timestamppb.New(now),
			Healthy: t.healthy,
		},
	}
	t.updates = append(t.updates, u)
	eff.Checkpoint = append(eff.Checkpoint, Write{Task: t.record()}, Write{Update: &u})
	if len(t.updates) == 1 {
		t.retry = m.cfg.RetryMin
		m.sendHead(t, now, eff)
	}
}

// sendHead sends the task's first update if a session is open and
// schedules its re-send.
func (m *Machine) sendHead(t *task, now time.Time, eff *Effects) {
	if !m.session || len(t.updates) == 0 {
		return
	}
	eff.Send = append(eff.Send, t.updates[0])
	t.nextSend = now.Add(t.retry)
	t.retry = min(2*t.retry, m.cfg.RetryMax)
}

func (m *Machine) tick(now time.Time, eff *Effects) {
	if !m.session {
		return
	}
	first := len(eff.Send)
	for _, t := range m.tasks {
		if len(t.updates) > 0 && !now.Before(t.nextSend) {
			m.sendHead(t, now, eff)
		}
	}
	slices.SortFunc(eff.Send[first:], func(a, b Update) int { return compareKeys(a.Key(), b.Key()) })
}

// updateKey is an update's checkpoint key: framework, task and a sequence
// number that orders the task's updates.
func updateKey(k Key, seq uint64) string {
	return fmt.Sprintf("%s\x00%s\x00%020d", k.FrameworkID, k.TaskID, seq)
}

// updateSeq parses the sequence number of an update's checkpoint key.
func updateSeq(key string) uint64 {
	if len(key) < 20 {
		return 0
	}
	n, _ := strconv.ParseUint(key[len(key)-20:], 10, 64)
	return n
}

// sorted returns the tasks ordered by key.
func (m *Machine) sorted() []*task {
	out := make([]*task, 0, len(m.tasks))
	for _, t := range m.tasks {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *task) int { return compareKeys(a.key, b.key) })
	return out
}

// liveKeys returns the keys of the tasks that have not ended, of one
// framework or ("" ) of all, in order.
func (m *Machine) liveKeys(frameworkID string) []Key {
	var out []Key
	for _, t := range m.sorted() {
		if (frameworkID == "" || t.key.FrameworkID == frameworkID) && !taskstate.IsTerminal(t.state) {
			out = append(out, t.key)
		}
	}
	return out
}

func (t *task) view() View {
	return View{Key: t.key, State: t.state, ContainerID: t.containerID, Unacknowledged: len(t.updates)}
}

// Tasks returns every task the agent has not forgotten, ordered by key.
func (m *Machine) Tasks() []View {
	out := make([]View, 0, len(m.tasks))
	for _, t := range m.sorted() {
		out = append(out, t.view())
	}
	return out
}

// Task returns one task.
func (m *Machine) Task(k Key) (View, bool) {
	t := m.tasks[k]
	if t == nil {
		return View{}, false
	}
	return t.view(), true
}

// Container returns the task a container belongs to.
func (m *Machine) Container(containerID string) (Key, bool) {
	k, ok := m.byContainer[containerID]
	return k, ok
}

// Killing reports whether the task of a container is being killed (a kill
// arrived, perhaps while it was being launched).
func (m *Machine) Killing(containerID string) bool {
	k, ok := m.byContainer[containerID]
	return ok && m.tasks[k] != nil && m.tasks[k].killing
}

// Len returns how many tasks the agent has not forgotten.
func (m *Machine) Len() int { return len(m.tasks) }

// Registration returns the tasks to report when registering, with their
// latest states, ordered by key.
func (m *Machine) Registration() []*slacklinev1.AgentTask {
	out := make([]*slacklinev1.AgentTask, 0, len(m.tasks))
	for _, t := range m.sorted() {
		out = append(out, t.record().GetTask())
	}
	return out
}
