// Package core is the pure part of the coordinator's state machine: the
// offer book, the task records, agent liveness, framework failover
// timeouts and the status update ledger. It holds the allocator
// (coordinator/allocator), the outstanding offers and inverse offers, the
// allocation filters, the agents' heartbeats and heartbeat pace, and what
// it needs to know of agents (hostname, attributes, total, place in the
// maintenance schedule, oversubscription estimate, whether it may be
// offered) and frameworks (roles, revocable capability, whether a
// subscription is connected).
//
// It does no I/O, reads no clock, takes no lock and starts no goroutine:
// the coordinator (the shell) calls one method per event, with the time
// in the event, and gets back a Ready value: the events to send to
// frameworks' subscriptions and the commands to send to agents, in
// order, whether an allocation pass is wanted, and counts for its
// metrics. The offer book writes no registry record (offers live in
// memory only). An event that changes what the registry holds and the
// core owns (role weights and quota: UpdateRoles; a framework's record:
// SubscribeFramework) is a persist step, as
// in raft's Ready (persist.go): it changes nothing and returns the
// records to write (Ready.Persist) and the change (Ready.Apply); the
// shell writes the records, then sends, then calls Apply with the change
// once the records are durable, so a failed write changes nothing. A
// change the coordinator decides itself and applies first (a teardown:
// RemoveFramework) returns its records in Ready.After, for the shell to
// write after the sends. Where the shell still owns the record (an
// agent's registration), it makes the record durable first and calls the
// core after.
//
// # Events
//
//   - agents: RegisterAgent, AddRecoveredAgent, Heartbeat, AgentLost,
//     WithdrawAgent, RemoveAgent, ForgetAgent, SetMaintenance, Estimate;
//   - frameworks (frameworks.go): LoadFramework (a record from the
//     registry, or adopted), CheckSubscription and SubscribeFramework (new
//     or failover; a persist step), Disconnect, RemoveFramework (a
//     teardown: its tasks dropped, its record completed), SetSuppressed
//     (suppress and revive), ForgetCompletedFrameworks (retention: the
//     torn-down frameworks beyond a bound, oldest registered first; their
//     deletions in Ready.After); queries FrameworkRecord,
//     RegisteredFrameworks;
//   - offers: Decline, CheckAccept/TakeOffers/Return (one Accept), DropOffers
//     (an Accept refused for its offers), AnswerInverseOffers;
//   - tasks (tasks.go): Launch (accepted from an offer: RunTask to its
//     agent), AdoptTask (reported by a registering agent, its resources
//     claimed), SetReported (the terminal tasks it reported), TaskUpdate
//     (an agent's admitted update: a terminal one ends the task, releases
//     its resources and keeps it in the framework's history within
//     Config.MaxCompletedTasks), ReportTaskState, EndTask (a terminal
//     state the coordinator decided), TasksUnreachable, Kill, Reconcile (agents' states are an input:
//     AgentStates), RegisterTasks (a registering agent's reported tasks,
//     with the shell's verdict on each and the frameworks' states as
//     inputs), ForgetFramework (its record and history), ForgetAgentTasks; Claim and Release for
//     resources held outside a task record;
//   - status updates: AddUpdate (an agent's update with a uuid, within
//     Config.MaxPendingUpdates per framework), Acknowledge (the
//     framework's, forwarded to the agent as a Command);
//   - roles: UpdateRoles (weights and quota limits; a persist step),
//     Apply (its change, once durable);
//   - time: Allocate (one allocation pass, then the inverse offers) and
//     Tick (agents silent past their timeout are lost, agents from the
//     registry that did not register again are reported, frameworks
//     disconnected past their failover timeout are reported, offers time
//     out).
//
// Queries (Offers, AgentOffers, FrameworkOffered, Draining,
// HeartbeatInterval, LastHeartbeat, Allocator for read-only views) change
// nothing but the heartbeat pace's memory of the interval it told.
//
// # What the core does not hold yet
//
// Agent records, the frameworks' states, sessions and subscriptions,
// registrations with their registry records, the maintenance schedule
// itself and the retention of gone agents are still the coordinator's
// (package coordinator); Reconcile
// reads the agents' states through AgentStates, and RegisterTasks the
// frameworks' through Frameworks, for that reason. Whether a reported task
// is trusted (launch proofs) is decided by the shell: it is authorization. See
// docs/architecture.md.
//
// # Tests
//
// The core is tested by transcripts (testdata/*.txt): a list of events on
// a logical clock and, after each, the effects it must produce, compared
// exactly (see core_test.go for the commands).
package core
