// Package core is the pure part of the coordinator's state machine: the
// offer book, the task records, the agent records (agents.go), agent
// liveness, framework failover timeouts, the frameworks' records and the
// status update ledger. It holds the allocator
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
// RemoveFramework; an agent lost, shut down or forgotten) returns its
// records in Ready.After, for the shell to write after the sends. An
// agent's registration is a persist step with a dedicated apply
// (PlanRegistration, then ApplyRegistration, which re-checks the
// maintenance schedule it is given and the host's records: when another
// registration of the host applied meanwhile, its Ready.After restates
// the agent's record and those it retires, for the shell to write in
// apply order).
//
// # Events
//
//   - agent records (agents.go): LoadAgent (a record from the registry),
//     ProposedAgentID, PlanRegistration and ApplyRegistration (a
//     registration: a persist step; the host's other agents retired,
//     Ready.Retired), ShutdownAgent (its machine went DOWN),
//     InstallMaintenance (a new maintenance state applied to every agent
//     it moves: re-placed, shut down, or forgotten when its machine is back
//     UP; then the inverse offers), ForgetGoneAgents (retention); queries
//     Agent, AgentsOnHost, AgentRecords, DrainingUsers; the maintenance
//     state is the core's (Maintenance, LoadMaintenance), and the
//     registration calls are given it (Place puts an agent in it);
//   - the maintenance state (maint.go): PlanMaintenance (a transition
//     computed by package maintenance: a persist step whose record is
//     the state, installed by Apply through InstallMaintenance); answers
//     to inverse offers are recorded in it (AnswerInverseOffers) and a
//     torn-down framework's forgotten (RemoveFramework);
//   - the offer book's agents: RegisterAgent, AddRecoveredAgent, Heartbeat, AgentLost,
//     WithdrawAgent, RemoveAgent, ForgetAgent, SetMaintenance, Estimate
//     (the agent-record events call these; transcripts drive them alone
//     too);
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
//     Tick (agents silent past their timeout are lost: an ACTIVE record
//     becomes UNREACHABLE, its tasks too; agents from the registry that
//     did not register again become UNREACHABLE and are reported;
//     frameworks disconnected past their failover timeout are reported;
//     offers time out).
//
// Queries (Offers, AgentOffers, FrameworkOffered, Draining,
// HeartbeatInterval, LastHeartbeat, Allocator for read-only views) change
// nothing but the heartbeat pace's memory of the interval it told.
//
// # What the core does not hold yet
//
// The frameworks' states, sessions and subscriptions and the agents'
// sessions are still the coordinator's (package coordinator); RegisterTasks reads the
// frameworks' states through Frameworks (Reconcile reads the agents'
// through AgentStates, the core's own records in the coordinator:
// RecordedAgentStates, so that transcripts can name them). Whether a reported task is trusted (launch proofs)
// is decided by the shell: it is authorization. See docs/architecture.md.
//
// # Tests
//
// The core is tested by transcripts (testdata/*.txt): a list of events on
// a logical clock and, after each, the effects it must produce, compared
// exactly (see core_test.go for the commands).
package core
