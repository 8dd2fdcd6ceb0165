// Package coordinator is Slackline's cluster coordinator: the equivalent of
// the Mesos master. It serves four Connect services on one HTTP handler:
//
//   - SchedulerService for frameworks: subscriptions with event streams,
//     offers, Accept/Decline, status updates and acknowledgements,
//     reconciliation, failover and teardown;
//   - AgentService for agents: registration, liveness, a command stream, and
//     status updates that are routed to frameworks;
//   - OperatorService for operators: cluster state, role weights and quota,
//     the maintenance schedule and StartMaintenance/StopMaintenance;
//   - ProfileService for operators: node profiles of estimator and QoS
//     settings, sent to agents on their command streams, and their
//     rollouts in waves, first judged in shadow on the agents that can run
//     one (profiles.go, profiles_shadow.go: ProfileShadowCommand; the pure
//     part in coordinator/profiles).
//
// # Ownership and lifecycle
//
// New opens the registry store (registry.db, a bbolt file, under
// Config.WorkDir by default) and loads what an earlier run persisted: agents become
// RECOVERING until they re-register (or become UNREACHABLE after
// Config.AgentReregisterTimeout), frameworks become DISCONNECTED and keep
// their tasks if they resubscribe within their failover timeout. Handler
// returns the http.Handler to serve; Run drives the allocation loop, the
// timers (agent liveness, framework failover, offer timeouts) and the
// judging of profile rollouts (JudgeRollouts at Config.Now's time every
// Config.RolloutInterval; a negative interval leaves it to the caller, at
// times of its choosing) until its context is cancelled; Close releases
// the store.
//
// # The core and the shell
//
// The state machine's pure part is package coordinator/core: the offer
// book (the allocator, outstanding offers and inverse offers, filters,
// revocable estimates, offer timeouts), the task records (live tasks by
// framework and agent, each framework's completed tasks within
// Limits.MaxCompletedTasksPerFramework, the terminal tasks agents reported
// on registering; launch, kill, reconciliation, updates), agent liveness (the heartbeat
// queue and pace, silent agents, agents not re-registered after a
// restart) and the status update ledger (a framework's unacknowledged
// updates, their bound and coalescing). Its methods take one event each,
// with the time in the event, and return a core.Ready: the events for
// frameworks' subscriptions and the commands for agents' streams, in
// order, and what the shell applies to its own records after them (the
// agents Tick found silent). It has no lock, no clock, no I/O and no
// goroutine, and is tested by transcripts (core/testdata/*.txt).
//
// The core also holds the frameworks' registry records and decides
// subscriptions (core.SubscribeFramework, a persist step) and teardowns
// (core.RemoveFramework, whose completed record comes back in Ready.After),
// and forgets the torn-down ones beyond Limits.MaxCompletedFrameworks
// (core.ForgetCompletedFrameworks). It holds the agents' registry records
// too (core.AgentRecord: info, total, state, registration time, place in
// the maintenance schedule) and makes every change of an agent's state: a
// registration is a persist step (core.PlanRegistration, then
// core.ApplyRegistration once its records are durable, re-checking the
// schedule); silent agents and agents not re-registered after a restart
// become UNREACHABLE in Tick; a maintenance transition is applied to the
// agents by core.InstallMaintenance (shutdowns, forgetting the GONE agents
// of machines back UP, inverse offers); core.ForgetGoneAgents is the
// retention of gone agents. The records of the changes it decides itself
// come back in Ready.After. The core owns the maintenance state too
// (core.Maintenance; package maintenance stays beneath it as the pure
// calculator): a transition (a schedule update, machines taken DOWN or
// brought UP) is a persist step (core.PlanMaintenance, computed outside
// mu, then core.Apply once its record is durable, which installs it);
// answers to inverse offers are recorded in it by
// core.AnswerInverseOffers and forgotten by core.RemoveFramework.
//
// This package is the shell around it and still holds the rest of the
// state: the agents' sessions and heartbeat streams (agent embeds the
// core's record, which it reads under mu and never changes), the
// frameworks' states, sessions and subscriptions, authorization and the
// launch proofs. RPC handlers decode, authorize, validate, call one
// domain operation and encode; registry changes are the core's persist
// steps, table-tested, that register, subscribe, updateRoles and
// changeMaintenance persist and apply. Bindings the core relies on (a
// framework's principal, an agent's identity and hostname) are enforced
// here before an event reaches it.
//
// # Locks and persistence
//
// The shell holds one lock over its state, mu, and two queue locks below
// it, always taken in this order (a later one is never held while an
// earlier one is taken):
//
//  1. mu guards all in-memory state, the core (and so the allocator)
//     included, for in-memory work only: never across a registry write, a
//     stream Send or another blocking call. Each core call's Ready is
//     delivered (deliver) under mu, right after the call, by queueing its
//     events and commands on the per-stream queues (outbox): a queue push
//     never blocks and never drops, and doing it under mu keeps the order
//     of effects across calls the order of the state changes. The sends
//     themselves happen on each stream's goroutine, without mu, as fast as
//     its peer reads; what can be queued is bounded by state because
//     entries coalesce (see flow.go). Keepalives (framework heartbeats,
//     agent pings) follow one shared pulse per kind, not a timer per
//     stream (outbox.go). It also guards the live subscriptions per
//     caller and the registration pacing (principalRates). Unexported methods expect mu held unless
//     their comment says they take it.
//  2. an outbox's mu (outbox.mu), taken under mu to queue and alone by its
//     stream's goroutine to take.
//  3. a pulse's mu (pulse.mu), taken under an outbox's mu when a stream
//     joins or leaves the pulse, and alone by the pulse's timer.
//
// Ordered changes (order.go) take no lock across their write: a change to
// framework records, the maintenance state (answers to inverse offers
// included), weights, quota or node profiles (a rollout's own decisions
// included) runs from its decision to its application in a turn of its
// scope (a framework, a principal's new frameworks, the maintenance
// state, the roles, the profiles; the timeout tick takes every scope,
// as it may tear down any framework). Turns are state under their own
// lock (turns.mu, a leaf: no lock is taken under it; ending a turn does
// not take mu, so a panic under mu in a turn still crashes the process): a
// change asks for its turn and waits for the turns it follows on their
// channels with no lock held, then decides under mu, writes with no lock
// and applies under mu (defer c.takeTurn(scope)()). Turns do not nest: a
// turn's holder never asks for another (it would wait for the turns asked
// in between, the tick's turn of every scope among them, which wait for
// the one it holds), so a change needing several scopes asks for them in
// one call, each once (a scope asked twice panics). Subscribe (a
// failover's binding to its framework's principal, a new framework's
// roles), Teardown and the answers to inverse offers authorize their
// caller before they take their turns (and again in them), so that a
// caller without the right queues nothing; the operator services'
// handlers are authorized by the middleware before they run. Changes of one scope never interleave (a teardown's
// record is never overwritten by a concurrent subscription's; a maintenance transition is computed once
// and still valid when installed; concurrent weight updates end in the
// registry as in memory), and changes of different scopes write
// concurrently, sharing fsyncs (the store batches concurrent writes). A
// teardown takes the maintenance state's scope too (it forgets the
// framework's answers to inverse offers). The core's maintenance state is
// replaced and changed only in a turn of its scope (and under mu), so
// the turn's holder reads it without mu: a schedule is validated outside
// mu. Agent registrations take no turn, so that they share fsyncs; they
// re-check the machine's mode after their write, and recovery and the
// next registration heal a stale agent record. When another registration
// of the host applied while one's records were written, its after-apply
// records (its own and those it retires) are written after, in the order
// registrations apply, waiting their turn without any mutex
// (registration.go), so the registry ends as memory is.
//
// Three more are leaves, never held while another lock is taken:
// turns.mu (above), offStack.mu (the subscriber goroutines' queue of
// calls, which run without it) and a heartbeat stream's closableBody.mu
// (the cause its end recorded; under mu when a newer stream supersedes
// it, or alone).
//
// Below this package, every other lock is a leaf too: the store's group
// commit (internal/kv's group.mu, taken inside store.Apply, which runs
// with no lock held, never under mu; bbolt's own locks are inside it),
// the node proxy's client cache (coordinator/ui, proxy.mu), a leader's
// lease clock (coordinator/leader, lease.mu), and on the way to a handler
// the per-caller call limiter (internal/server's CallLimiter.mu, taken and
// released in its interceptor before the handler runs), server.Serve's
// anonymous-connection guard (at accept) and internal/auth's certificate
// connection registry (revocation checks). Lock-free state:
// bounds.logged (a sync.Map, limits logged once), a pulse waiter's due
// flag and an outbox's once (its end), a heartbeat stream's idle timer
// (its last beat, timeout and stop: atomics, so that a beat takes no
// lock), the node proxy's busyOnce (its first refusal logged), the
// leader's current leader and serving term (atomic pointers) and the etcd
// store's closed flag. That
// is eight mutexes in all in coordinator/... (six here, two in
// subpackages), one in the store's group commit and three on the way to a
// handler (internal/server, internal/auth). The shell's state has
// one lock, mu; the outbox and pulse locks let streams take their queues
// without it, and the three leaves guard the turns, a queue and a cause
// of their own.
//
// A change a client asks for is durable before it is applied and answered:
// plan under mu, write the plan's records with mu released (store.Apply
// returns after fsync), apply under mu re-checking what may have changed
// meanwhile, reply; a failed write answers Unavailable and applies nothing.
// Changes the coordinator decides itself (timeouts, a stream's end, a
// teardown, agents shut down by maintenance) are applied first, in their
// turn, and recorded right after (before the turn ends), even if the caller hung up (a
// teardown answers after its write; the core returns the record to write
// in Ready.After). Where the core owns what a record holds (role weights
// and quota, framework records), the core's Ready carries the persist
// step: the event changes nothing and returns the records (Ready.Persist)
// and the change (Ready.Apply); step (or write and apply, for a
// subscription, whose shell part runs between them) writes the records
// with mu released, then delivers the sends, then applies the change
// (core.Apply) and delivers what it leads to. Offers, heartbeats and the update ledger
// live in memory and are rebuilt as agents re-register and frameworks
// resubscribe.
//
// # Agent liveness
//
// Agents heartbeat with AgentService.HeartbeatStream, one long-lived
// HTTP/2 stream per agent on which each beat is a message, answered by a
// message unless it asks for none (no_answer: agent/session asks on the
// first beat of a stream and every third; an answer's frame and flush
// were most of the coordinator's CPU per beat), or with Heartbeat calls (older agents, HTTP/1.1 clients); both
// feed the core's Heartbeat event and answer with the interval the core's
// pace tells. A stream's first beat claims it for its agent (agent.beats):
// a newer stream supersedes it and ends it at once (Aborted). The server's
// read timeout does not apply to the stream (heartbeat_streams.go lifts
// it, once per stream); the stream ends instead when no beat came for the
// agents' timeout in effect. A call costs the coordinator's HTTP/2 server
// several times a stream message (headers, a stream and a handler
// goroutine, three flushed frames); slackline_coordinator_agent_heartbeats_total
// counts the beats by transport, and scripts/bench/scale divides the
// coordinator's CPU by them (after the agents' streams opened: --settle).
// A beat costs the coordinator its transport mostly (x/net's HTTP/2 server
// hands each frame from the connection's reader goroutine to its serve
// loop and on to the handler's goroutine, and Go's scheduler wakes idle
// threads for each handoff); what keeps it to one frame and one read of
// each: agents send a message in one DATA frame (server.WholeMessages), a
// cleartext HTTP/2 connection is read through a small buffer
// (server.h2cReadConn) and the handler reads the stream's body through
// another (closableBody). What keeps the wake-ups few: agents beat on a
// 50 ms grid of wall-clock time (agent/session), so the beats due within
// 50 ms arrive together and share one wake-up of the idle threads, the
// runtime's monitor (sysmon) and the network poller, which a beat
// arriving alone paid for itself (about half the CPU per beat in a perf
// profile at 10,000 agents; context switches per beat 3.1 -> 0.7 with
// the grid, scripts/bench/scale --stat).
//
// # Flow control and limits
//
// Nothing a client asks for is lost because a queue was full: a launch or
// a reconciliation of any size completes, or is refused up front with
// ResourceExhausted while the agent's or the framework's stream is behind
// by more than its window. Every bound is named in Limits (request and
// status message sizes, unacknowledged updates per framework, completed
// frameworks and tasks kept, gone-agent retention, subscriptions per
// principal, queue windows, concurrent calls per caller, frameworks
// registered per principal, the longest failover timeout, the pace of a
// principal's agent registrations); a limit reached is logged once and
// counted in slackline_coordinator_limit_hits_total, as is a subscription
// that waits because maxOffStackGoroutines subscriptions are under way
// (flow.go; a constant, not a setting). A hostname has at most
// one agent that is not GONE: a new one retires the others
// (registration.go).
//
// # Batches
//
// UpdateStatus and Acknowledge take one update or acknowledgement, as
// clients before #30 send, or a batch (RegisterResponse.status_batches and
// SubscribedEvent.acknowledge_batches say this coordinator takes them;
// maxUpdatesPerCall and maxAcknowledgementsPerCall bound one). A batch is
// authorized once for all its entries (the agent's session and identity;
// the framework's stream and principal: a framework's entries name only its
// own updates), then its entries are applied in order under one hold of
// c.mu, each as the single call would apply it, and answered one by one
// (BatchResult). An entry is refused on its own, not the batch: an update
// refused for a reason that lasts (a task of another agent, a framework at
// its limit of unacknowledged updates) would otherwise hold back every
// other update of the agent each time it is sent again. A refused status
// update refuses the later entries of its task (Aborted) so that a
// framework never sees a task's updates out of order; the agent keeps what
// was refused and sends it again. Status updates are not persisted (they
// live in memory until acknowledged), so a batch writes no record.
//
// # Allocation
//
// The allocator (package coordinator/allocator) is pure and held by the
// core; the allocation loop is one goroutine calling core.Allocate. Events
// that free or add resources (an agent registering, an offer declined, a
// task ending, a framework reviving) mark agents dirty in the core, whose
// Ready asks to wake the allocation loop; the loop allocates only the
// dirty agents (in id order): at once after a quiet spell, else
// Config.AllocationBatch after the last pass, so that a burst of events is
// batched into one pass; a full pass runs every Config.AllocationInterval
// as well.
//
// # Maintenance and inverse offers
//
// The maintenance state machine is pure (package coordinator/maintenance);
// this package persists its transitions, and the core applies them to the
// agents (core.InstallMaintenance) and makes, rescinds and answers the
// inverse offers (core.SendInverseOffers, core.AnswerInverseOffers). The schedule and the DOWN machines are one
// record in store.BucketMaintenance, written before a change is applied
// and loaded by New, so a restart keeps both (agents of DOWN machines stay
// GONE).
//
// An agent belongs to the scheduled machine whose hostname and/or ip match
// its AgentInfo. UpdateMaintenanceSchedule makes the machines in the
// schedule DRAINING: outstanding offers on their agents are rescinded and
// re-sent carrying the window's unavailability, and after every allocation
// pass each connected framework with tasks or offers on a draining agent
// gets an inverse offer for the whole agent, unless one is outstanding or
// its last answer's filter (refuse_seconds, default 5 s) has not expired. A
// schedule change rescinds the inverse offers of the agents whose window
// changed, clears their filters and answers, and sends new ones.
// AcceptInverseOffers and DeclineInverseOffers refuse the whole call when
// an id is not an outstanding inverse offer of the framework (NotFound) or
// is malformed (InvalidArgument); answers are kept per (machine, framework)
// with their time for GetMaintenanceStatus, which also reports, for
// frameworks that declare FrameworkInfo.min_available_tasks, whether taking
// the machine's window down would leave fewer RUNNING tasks.
//
// StartMaintenance takes scheduled machines DOWN: their agents' offers and
// inverse offers are rescinded, their tasks end at once as
// TASK_STATE_GONE_BY_OPERATOR (LOST for frameworks that are not
// partition-aware), the agents get a ShutdownAgentCommand, their sessions
// end once it is delivered, they become GONE and leave the allocator, and
// Register refuses any agent of a DOWN machine with FailedPrecondition.
// StopMaintenance brings DOWN machines UP and out of the schedule and
// forgets their GONE agents, which may then register again (with their old
// id or a new one). With Config.AutoDownAfterAccept the timer loop takes a
// draining machine DOWN by itself once its window started, every framework
// with tasks there accepted, and no framework would fall below its minimum,
// deciding so in the maintenance state's turn (a decline or a later window
// installed meanwhile keeps it DRAINING).
//
// # Trust
//
// With Config.Authz (internal/auth) every request is authenticated and the
// part of its authorization that needs no state is checked before the
// handler runs. trust.go holds what needs the coordinator's state: a
// framework is bound to the principal that registered it
// (FrameworkInfo.principal, persisted in its record) and only that
// principal, or one granted teardown_frameworks on it, may fail over to it
// or call for it; register_frameworks is checked per role and run_tasks per
// task user (TaskInfo.user filled from FrameworkInfo.user); an agent's id
// stays bound to its hostname and its session calls come from an identity
// that may register as that hostname; the agent's published endpoint is
// where it connects from; views show what view_* grant. Every launched task
// carries a launch proof (an HMAC under a key in the registry's secrets
// bucket, over the agent's hostname, the framework's id and principal, the
// task id, role and resources): a registering agent's reported tasks are
// adopted only when the coordinator knows them on that agent with those
// resources or, after a restart, when their proof is valid for that host;
// others are killed. Updates are accepted only for the agent's own tasks.
// Without Config.Authz (loopback, tests) nothing is authorized, but launch
// proofs and update ownership still hold.
//
// # Tests
//
// The core's tests are transcripts on a logical clock (core/testdata).
// Domain tests drive the shell's operations directly, with no server.
// Cluster tests serve Handler over HTTP/2 on in-memory connections
// (net.Pipe with loopback addresses): most inside testing/synctest bubbles
// (startPipeCluster), where timers run on the bubble's clock; those that
// cannot (restarts on both registry backends, etcd among them, fairness
// per connection, /metrics) on the wall clock (startCluster); the load and
// profile tests with simulated agents on agenttest.Network, the same
// connections. Only the benchmarks serve on loopback TCP.
//
// # Errors
//
// RPCs validate their input and answer with Connect codes a client can act
// on: InvalidArgument (malformed resources, ids, roles; the offending value is
// named), NotFound (unknown framework, task, offer or agent ids),
// Unauthenticated (no valid credentials, with Config.Authz), PermissionDenied
// (missing or wrong Slackline-Stream-Id; an action the authorization file
// does not grant, named; another principal's framework; another agent's
// task or session), FailedPrecondition
// (a stale agent session, a torn-down framework, an agent of a DOWN machine,
// a maintenance transition the machines' modes forbid), Unimplemented
// (methods that later versions implement). Schedule validation errors name
// the window index and the machine at fault. An invalid launch never fails
// the Accept call: its tasks get TASK_STATE_ERROR or TASK_STATE_DROPPED
// updates with a reason; a task user the framework may not run as refuses
// the whole call (PermissionDenied) before any offer is used.
package coordinator
