// Package sim simulates Slackline agents: a Fleet of N agents that speak the
// real AgentService protocol to a coordinator, run no processes, and script
// their tasks' lives with labels. It backs the slackline-sim command (scale
// tests, developing frameworks without root) and in-process tests and
// benchmarks of the coordinator and the framework SDK.
//
// # Use
//
//	fleet, err := sim.NewFleet(sim.Config{
//		Coordinator: "http://127.0.0.1:5050",
//		Resources:   resources.MustParse("cpus:8;mem:16384;ports:[31000-32000]"),
//		Count:       100,
//		OnEvent: func(e sim.Event) {
//			if e.Kind == sim.EventStatusUpdate && e.State == slacklinev1.TaskState_TASK_STATE_RUNNING {
//				running.Add(1)
//			}
//		},
//	})
//	if err != nil { ... }
//	err = fleet.Run(ctx) // until ctx is cancelled
//
// While it runs, Fleet.Registered counts agents with a live session,
// Fleet.AgentIDs lists their ids and Agent.Tasks shows each agent's tasks.
//
// # Protocol
//
// A simulated agent is the real agent's protocol and task lifecycle with
// pretend containers: agent/session registers, reads the command stream,
// heartbeats and delivers status updates; agent/tasks decides every task's
// states and which update to send when. Only the executor of the machine's
// effects is the simulator's own (task.go).
//
// Each agent registers with AGENT_PROTOCOL_VERSION_1, its hostname
// HostnamePrefix+index, resources, attributes, its id when it has one and
// its tasks with their latest state, and heartbeats at the coordinator's
// interval. A session ends when its command stream ends, a call is refused
// with FailedPrecondition, NotFound or PermissionDenied, or no heartbeat got
// through for three intervals; the agent then registers again with the same
// id and its tasks after a jittered exponential backoff
// (BackoffMin..BackoffMax), reset once a session proves healthy. A refused
// registration (PermissionDenied or FailedPrecondition, e.g. a machine that
// is DOWN) is retried about every BackoffMax and logged once per streak.
//
// Commands: run_task makes the task TASK_STATE_RUNNING at once (see
// LabelDuration, LabelExitCode and LabelFailLaunch for scripted endings);
// kill_task ends it at once, TASK_STATE_KILLED or in the command's
// state_override; a kill of a task the agent does not know is answered
// TASK_STATE_DROPPED; shutdown_framework kills the framework's tasks;
// acknowledge drops the task's oldest update (an acknowledgement of any
// other uuid changes nothing); shutdown_agent ends every task
// TASK_STATE_GONE_BY_OPERATOR, delivers what it can and stops the agent (see
// Config.RestartAfterShutdown).
//
// Status updates are delivered like Mesos's status update manager does:
// each task's updates are kept in order until acknowledged; only the oldest
// is sent, again every StatusRetryMin doubling up to StatusRetryMax, and at
// once in every new session; agent/session carries the updates that are
// due together in one UpdateStatus (#30). A task that ended is forgotten
// once its last update is acknowledged. The simulator keeps no checkpoint: only the agent
// ids survive a restart (WorkDir).
//
// # NodeService
//
// Fleet.NodeHandler serves the real agent's NodeService over the pretend
// containers (cgroup_mode CgroupModeSimulated): GetContainers, GetUsage
// (each task using LabelUsage of its cpus and mem), GetFeatures (none: no
// eBPF), GetCorrections (none) and ReadSandboxFile (a stdout that says no
// process ran, what would have, and how the task ended). The agents
// register Config.NodeEndpoint; a call is for the agent whose hostname the
// client asked for (TLS server name, as the coordinator's node proxy sends
// it). Ended containers are kept for their output, MaxEndedContainers per
// agent (EndedContainersDropped counts the rest).
//
// # Cost
//
// An agent has one goroutine, blocked on its command stream. Heartbeats run
// on a per-agent timer (no goroutine between them; at most
// MaxConcurrentHeartbeats in flight fleet-wide); re-sends are driven by one
// fleet-wide ticker; a sender goroutine exists only while an agent has
// updates to send; a task with LabelDuration has a runtime timer. Agents
// share cleartext HTTP/2 transports, AgentsPerTransport agents each, so a
// few connections carry thousands of streams (Go's HTTP/2 client adds one
// goroutine of its own per open stream). Measured with scripts/bench/scale
// on a shared, busy 2-core machine against the real coordinator: 10,000
// agents register within 2.5-6 s and then hold about 430 MiB RSS and 0.14
// of a core with a 5 s heartbeat interval.
//
// # Errors
//
// NewFleet returns an error for an invalid Config or an unreadable WorkDir.
// Run returns nil when its context is cancelled or every agent has stopped;
// failures talking to the coordinator are retried and logged, never
// returned. Run may be called once (ErrAlreadyRun).
package sim
