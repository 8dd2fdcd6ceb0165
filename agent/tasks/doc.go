// Package tasks is the pure lifecycle of an agent's tasks and of their
// unacknowledged status updates: the one state machine that both the real
// agent (agent/) and the simulator (sim/) run. It does no I/O, reads no
// clock and takes no locks: events go in through Machine.Step and effects
// come out, for a thin executor to perform.
//
// # Place in the data flow
//
//	coordinator --RunTask/KillTask/Acknowledge--> agent/session --events--> Machine.Step
//	containerizer exits, launch results, ticks ----------------------------> Machine.Step
//	Machine.Step --Effects--> executor: checkpoint (fsync), start/kill/destroy containers,
//	                                    send status updates through agent/session
//
// # Events
//
// Launch (a RunTask command), Launched and LaunchFailed (the executor's
// report on a Start effect), Kill (a KillTask command or an agent-decided
// kill such as a QoS preemption), ShutdownFramework, ShutdownAgent, Exited
// (a container ended), Acknowledge (a framework's acknowledgement forwarded
// by the coordinator), SessionOpened and SessionLost, Tick (time
// passed: re-send what is due), and HealthChanged (a running task's health
// check result changed: a RUNNING update with healthy set, which every
// later update of the task carries too). A machine starts empty (New) or from what
// the agent checkpointed (Recover).
//
// # Effects and the order they must be performed in
//
// Step returns Effects; the executor performs them in this order, and the
// effects of one Step before those of the next:
//
//  1. Checkpoint: one transaction of task records and updates to put and
//     delete. It must be durable before anything else in the batch happens,
//     so that a container exists only for a checkpointed task and an update
//     is sent only once a restart would find it.
//  2. Start, Kill and Destroy containers (asynchronously is fine; their
//     outcomes come back as Launched, LaunchFailed and Exited events).
//  3. Send status updates over the current session.
//
// Executors may merge the effects of several Steps (Effects.Append) into one
// batch, e.g. to write one checkpoint transaction for a burst of launches;
// the order above still holds for the merged batch.
//
// # Status updates
//
// Each task's updates form an ordered stream, as in Mesos's status update
// manager: every update is checkpointed, only the oldest unacknowledged one
// is sent, again after Config.RetryMin doubling up to Config.RetryMax and at
// once when a new session opens. An acknowledgement must name the uuid of
// that oldest update; any other uuid (an old or unknown one) changes nothing
// and Step says so with ErrStaleAcknowledgement. A task that ended is
// forgotten (its record deleted) once its last update is acknowledged.
//
// # Errors
//
// Step returns the new effects and, for an event that changes nothing, an
// error that says why (ErrDuplicateLaunch, ErrStaleAcknowledgement,
// ErrUnknownContainer, ...), for the shell to log. The machine's state is
// unchanged by such an event. A Machine is not safe for concurrent use: its
// owner serializes Steps (and never performs effects while holding the
// lock that does so).
package tasks
