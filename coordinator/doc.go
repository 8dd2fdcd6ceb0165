// Package coordinator is Slackline's cluster coordinator: the equivalent of
// the Mesos master. It serves three Connect services on one HTTP handler:
//
//   - SchedulerService for frameworks: subscriptions with event streams,
//     offers, Accept/Decline, status updates and acknowledgements,
//     reconciliation, failover and teardown;
//   - AgentService for agents: registration, liveness, a command stream, and
//     status updates that are routed to frameworks;
//   - OperatorService for operators: cluster state, role weights and quota.
//
// # Ownership and lifecycle
//
// New opens the registry store (a bbolt file under Config.WorkDir by
// default) and loads what an earlier run persisted: agents become
// RECOVERING until they re-register (or become UNREACHABLE after
// Config.AgentReregisterTimeout), frameworks become DISCONNECTED and keep
// their tasks if they resubscribe within their failover timeout. Handler
// returns the http.Handler to serve; Run drives the allocation loop and the
// timers (agent liveness, framework failover, offer timeouts) until its
// context is cancelled; Close releases the store.
//
// All mutable state lives in one struct guarded by one mutex. Handlers lock
// it briefly, decide, and queue events to subscribers through bounded
// channels; they never block on a slow peer while holding the lock. A
// framework or agent whose queue overflows is disconnected and recovers by
// reconnecting. Registry writes (durable, fsync) happen before the RPC that
// caused them returns, and outside the lock.
//
// # Allocation
//
// The allocator (package coordinator/allocator) is pure; the coordinator
// calls it from one goroutine. Events that free or add resources (an agent
// registering, an offer declined, a task ending, a framework reviving) mark
// agents dirty and wake the allocation loop, which waits
// Config.AllocationBatch to batch events and allocates only the dirty agents;
// a full pass runs every Config.AllocationInterval as well.
//
// # Errors
//
// RPCs validate their input and answer with Connect codes a client can act
// on: InvalidArgument (malformed resources, ids, roles; the offending value is
// named), NotFound (unknown framework, task, offer or agent ids),
// PermissionDenied (missing or wrong Slackline-Stream-Id), FailedPrecondition
// (a stale agent session, a torn-down framework), Unimplemented (methods that
// later versions implement). An invalid launch never fails the Accept call:
// its tasks get TASK_STATE_ERROR or TASK_STATE_DROPPED updates with a reason.
package coordinator
