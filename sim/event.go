package sim

import (
	"fmt"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// EventKind says what an Event reports.
type EventKind int

// Kinds of Event.
const (
	// EventRegistered: the agent registered and opened its command stream.
	EventRegistered EventKind = iota + 1
	// EventDisconnected: the agent's session ended (stale session, broken
	// stream, shutdown or fleet stopping); it registers again unless stopped.
	EventDisconnected
	// EventTaskLaunched: a RunTaskCommand arrived.
	EventTaskLaunched
	// EventStatusUpdate: the agent generated a status update (State, UUID).
	// Re-sends of the same update are not reported again.
	EventStatusUpdate
	// EventAcknowledged: an AcknowledgeCommand arrived for UUID.
	EventAcknowledged
	// EventStopped: the agent was shut down by the coordinator.
	EventStopped
)

var eventKindNames = map[EventKind]string{
	EventRegistered:   "registered",
	EventDisconnected: "disconnected",
	EventTaskLaunched: "task-launched",
	EventStatusUpdate: "status-update",
	EventAcknowledged: "acknowledged",
	EventStopped:      "stopped",
}

// String returns the kind's name, e.g. "status-update".
func (k EventKind) String() string {
	if name, ok := eventKindNames[k]; ok {
		return name
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is something that happened to a simulated agent, delivered to
// Config.OnEvent. Fields that do not apply to the Kind are empty.
type Event struct {
	Kind EventKind
	// Time is when it happened (the agent's clock).
	Time time.Time
	// AgentIndex is the agent's index in the fleet (its hostname suffix).
	AgentIndex int
	// AgentID is the agent's id, empty before its first registration.
	AgentID     string
	FrameworkID string
	TaskID      string
	// State is the task's new state (EventStatusUpdate).
	State slacklinev1.TaskState
	// UUID is the status update's uuid (EventStatusUpdate, EventAcknowledged).
	UUID string
	// Message is the status message, the shutdown message or the reason a
	// session ended.
	Message string
}
