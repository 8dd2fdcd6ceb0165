package core

import (
	"slices"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// The status update ledger: per framework, the agents' updates (those with
// a uuid) the framework has not acknowledged yet, oldest first per task,
// bounded by Config.MaxPendingUpdates. They are replayed to a new
// subscription (Pending) and forwarded to their agent once acknowledged
// (Acknowledge).

// Command is a command for an agent's command stream.
type Command struct {
	AgentID string
	Command *slacklinev1.AgentCommand
}

// Unqueue asks the shell to take an event still queued, not yet sent, off
// a framework's subscription: the pending update of a task with a uuid,
// superseded.
type Unqueue struct {
	FrameworkID, TaskID, UUID string
}

func (k *Core) command(agentID string, cmd *slacklinev1.AgentCommand) {
	k.out.Commands = append(k.out.Commands, Command{AgentID: agentID, Command: cmd})
}

// AcknowledgeCommand is the command that forwards a framework's
// acknowledgement of an update to the update's agent.
func AcknowledgeCommand(frameworkID, taskID, uuid string) *slacklinev1.AgentCommand {
	return &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Acknowledge{Acknowledge: &slacklinev1.AcknowledgeCommand{
		FrameworkId: frameworkID, TaskId: taskID, Uuid: uuid,
	}}}
}

// Admission is what AddUpdate decided.
type Admission int

// AddUpdate's decisions.
const (
	// Admitted: the update joins the framework's unacknowledged ones
	// (once per uuid).
	Admitted Admission = iota
	// Coalesced: at the limit, the task's older unacknowledged updates,
	// superseded by this one, were forgotten (taken out of the event queue
	// if not sent yet, Ready.Unqueue) and acknowledged to their agent on
	// the framework's behalf (Ready.Commands); the update is admitted.
	Coalesced
	// Refused: at the limit and the task has no older update: nothing
	// changes, the agent keeps the update and sends it again later.
	Refused
)

// AddUpdate records an agent's update with a uuid until the framework
// acknowledges it, within Config.MaxPendingUpdates per framework (< 0: no
// limit). An update already pending (same task and uuid) is not added
// twice. It returns the decision and the framework's count of pending
// updates before the call.
func (k *Core) AddUpdate(frameworkID string, st *slacklinev1.TaskStatus) (Ready, Admission, int) {
	fw := k.frameworks[frameworkID]
	if fw == nil {
		return k.take(), Refused, 0
	}
	before := fw.pendingCount
	pending := fw.pending[st.GetTaskId()]
	known := slices.ContainsFunc(pending, func(p *slacklinev1.TaskStatus) bool { return p.GetUuid() == st.GetUuid() })
	if known {
		return k.take(), Admitted, before
	}
	admission := Admitted
	if limit := k.cfg.MaxPendingUpdates; limit >= 0 && fw.pendingCount >= limit {
		if len(pending) == 0 {
			return k.take(), Refused, before
		}
		admission = Coalesced
		for _, old := range pending {
			k.out.Unqueue = append(k.out.Unqueue, Unqueue{FrameworkID: frameworkID, TaskID: old.GetTaskId(), UUID: old.GetUuid()})
			k.command(old.GetAgentId(), AcknowledgeCommand(frameworkID, old.GetTaskId(), old.GetUuid()))
		}
		fw.pendingCount -= len(pending)
		pending = nil
	}
	put(&fw.pending, st.GetTaskId(), append(pending, st))
	fw.pendingCount++
	return k.take(), admission, before
}

// Acknowledge forgets the update of a task with uuid that the framework
// acknowledged and forwards the acknowledgement to the update's agent. ok
// is false when no such update is pending (nothing changes).
func (k *Core) Acknowledge(frameworkID, taskID, uuid string) (Ready, bool) {
	fw := k.frameworks[frameworkID]
	if fw == nil {
		return k.take(), false
	}
	pending := fw.pending[taskID]
	i := slices.IndexFunc(pending, func(p *slacklinev1.TaskStatus) bool { return p.GetUuid() == uuid })
	if i < 0 {
		return k.take(), false
	}
	st := pending[i]
	if pending = slices.Delete(pending, i, i+1); len(pending) == 0 {
		delete(fw.pending, taskID)
	} else {
		fw.pending[taskID] = pending
	}
	if fw.pendingCount--; fw.pendingCount == 0 && len(fw.pending) == 0 {
		// A map keeps the space of its largest size: give back what a
		// burst of updates took.
		fw.pending = nil
	}
	k.command(st.GetAgentId(), AcknowledgeCommand(frameworkID, taskID, uuid))
	return k.take(), true
}

// Pending returns a framework's unacknowledged updates, per task oldest
// first, tasks in no order: what a new subscription replays.
func (k *Core) Pending(frameworkID string) []*slacklinev1.TaskStatus {
	fw := k.frameworks[frameworkID]
	if fw == nil {
		return nil
	}
	out := make([]*slacklinev1.TaskStatus, 0, fw.pendingCount)
	for _, updates := range fw.pending {
		out = append(out, updates...)
	}
	return out
}

// PendingCount returns the number of a framework's unacknowledged
// updates, and of those of one task.
func (k *Core) PendingCount(frameworkID, taskID string) (all, task int) {
	if fw := k.frameworks[frameworkID]; fw != nil {
		return fw.pendingCount, len(fw.pending[taskID])
	}
	return 0, 0
}
