package coordinator

import (
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// agent is the coordinator's record of an agent.
type agent struct {
	id           string
	info         *slacklinev1.AgentInfo
	total        resources.Resources
	state        slacklinev1.AgentState
	registeredAt time.Time
	session      *agentSession
	// tasks on the agent, by framework id then task id. Its offers,
	// inverse offers and estimate are the core's.
	tasks map[taskKey]*task
	// maint is the agent's place in the maintenance schedule.
	maint agentMaintenance
	// closing is the session ended by a shutdown, kept so that a command
	// stream opened late still delivers the ShutdownAgentCommand.
	closing *agentSession
	// reported are the terminal tasks the agent reported, with a valid
	// launch proof, when it last registered: their updates are routed even
	// though the coordinator (after a restart) does not know them.
	reported map[taskKey]bool
}

func newAgent(id string, registeredAt time.Time) *agent {
	return &agent{
		id: id, registeredAt: registeredAt, tasks: map[taskKey]*task{},
		reported: map[taskKey]bool{},
		maint:    agentMaintenance{mode: slacklinev1.MachineMode_MACHINE_MODE_UP},
	}
}

type taskKey struct{ frameworkID, taskID string }

// agentSession is one registration of an agent: commands queue here until
// the agent's Connect stream takes them.
type agentSession = outbox[*slacklinev1.AgentCommand]

// send queues a command to the agent's session, if any (see queueCommand).
// Caller holds c.mu.
func (a *agent) send(cmd *slacklinev1.AgentCommand) {
	if a.session != nil {
		queueCommand(a.session, cmd)
	}
}

// endSession ends the agent's current session, if any.
func (a *agent) endSession() {
	if a.session != nil {
		a.session.end(errSessionEnded)
		a.session = nil
	}
}

// framework is the coordinator's record of a framework.
type framework struct {
	info           *slacklinev1.FrameworkInfo
	state          slacklinev1.FrameworkState
	registeredAt   time.Time
	disconnectedAt time.Time
	// failoverDeadline is when a DISCONNECTED framework is torn down.
	failoverDeadline time.Time
	sub              *subscription
	// Its maps are made on first use (see put): an idle framework holds
	// none of them. Reading, ranging
	// over and deleting from a nil map is fine. Its offers, inverse
	// offers and suppressed roles are the core's.
	tasks     map[string]*task
	completed []*task
	// pending holds, per task, the status updates with a uuid that the
	// framework has not acknowledged yet, oldest first; pendingCount
	// counts them (see addPending).
	pending      map[string][]*slacklinev1.TaskStatus
	pendingCount int
}

func newFramework(info *slacklinev1.FrameworkInfo, state slacklinev1.FrameworkState, registeredAt time.Time) *framework {
	return &framework{info: info, state: state, registeredAt: registeredAt}
}

// put sets (*m)[k] = v, making the map first if it is nil.
func put[K comparable, V any](m *map[K]V, k K, v V) {
	if *m == nil {
		*m = make(map[K]V)
	}
	(*m)[k] = v
}

func (fw *framework) id() string { return fw.info.GetId() }

func (fw *framework) failoverTimeout() time.Duration { return failoverTimeout(fw.info) }

func failoverTimeout(info *slacklinev1.FrameworkInfo) time.Duration {
	return time.Duration(info.GetFailoverTimeoutSeconds() * float64(time.Second))
}

func (fw *framework) partitionAware() bool {
	return hasCapability(fw.info, slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_PARTITION_AWARE)
}

// send queues an event to the live subscription, if any (see
// subscription.queue). Caller holds c.mu.
func (fw *framework) send(ev *slacklinev1.Event) {
	if fw.sub != nil {
		fw.sub.queue(ev)
	}
}

// subscription is one live Subscribe stream.
type subscription struct {
	*outbox[*slacklinev1.Event]
	// replay holds the updates unacknowledged when it began, sent after
	// Subscribed and not through the bounded queue, so that all fit.
	replay []*slacklinev1.Event
}

// task is the coordinator's record of a task.
type task struct {
	info        *slacklinev1.TaskInfo
	frameworkID string
	agentID     string
	role        string
	// resources are the task's regular resources, revocable its revocable
	// ones (a task with any is a revocable task, e.g. revocable cpus with
	// regular memory).
	resources resources.Resources
	revocable resources.Resources
	state     slacklinev1.TaskState
	status    *slacklinev1.TaskStatus
}

func (t *task) proto() *slacklinev1.Task {
	return &slacklinev1.Task{
		TaskId: t.info.GetTaskId(), FrameworkId: t.frameworkID, AgentId: t.agentID, Name: t.info.GetName(),
		State: t.state, Resources: append(t.resources.Proto(t.role, resources.Regular), t.revocable.Proto(t.role, resources.Revocable)...), Status: t.status,
		Labels: t.info.GetLabels(), Role: t.role,
	}
}

// coordinatorStatus builds a status update generated by the coordinator
// (no uuid: it needs no acknowledgement).
func coordinatorStatus(frameworkID, taskID, agentID string, state slacklinev1.TaskState, reason slacklinev1.Reason, message string, now time.Time) *slacklinev1.TaskStatus {
	return &slacklinev1.TaskStatus{
		TaskId: taskID, AgentId: agentID, FrameworkId: frameworkID, State: state, Reason: reason,
		Source: slacklinev1.TaskSource_TASK_SOURCE_COORDINATOR, Message: message, Timestamp: timestamppb.New(now),
	}
}

// forFramework adapts a status for a framework without the PARTITION_AWARE
// capability, which only knows TASK_STATE_LOST for the partition states.
func forFramework(fw *framework, st *slacklinev1.TaskStatus) *slacklinev1.TaskStatus {
	if fw.partitionAware() {
		return st
	}
	switch st.GetState() {
	case slacklinev1.TaskState_TASK_STATE_UNREACHABLE, slacklinev1.TaskState_TASK_STATE_GONE,
		slacklinev1.TaskState_TASK_STATE_UNKNOWN, slacklinev1.TaskState_TASK_STATE_DROPPED,
		slacklinev1.TaskState_TASK_STATE_GONE_BY_OPERATOR:
		out := proto.CloneOf(st)
		out.State = slacklinev1.TaskState_TASK_STATE_LOST
		return out
	}
	return st
}

func shutdownFrameworkCommand(frameworkID string) *slacklinev1.AgentCommand {
	return &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ShutdownFramework{
		ShutdownFramework: &slacklinev1.ShutdownFrameworkCommand{FrameworkId: frameworkID}}}
}

func killTaskCommand(frameworkID, taskID string) *slacklinev1.AgentCommand {
	return &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_KillTask{
		KillTask: &slacklinev1.KillTaskCommand{FrameworkId: frameworkID, TaskId: taskID}}}
}
