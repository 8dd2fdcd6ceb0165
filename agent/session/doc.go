// Package session is the agent side of the agent protocol (AgentService in
// proto/slackline/v1/agent.proto; the coordinator side is
// coordinator/agents.go). The real agent and slackline-sim both run it, each
// with its own Handler in front of the same task machine (agent/tasks), so
// registration, the command stream, heartbeats, status-update delivery and
// retry rules exist once.
//
// # Data flow
//
//	coordinator ──Connect stream──▶ Session ──Handler.Command──▶ task machine
//	coordinator ◀──UpdateStatus──── Session ◀──Send──────────── task machine
//
// # Lifecycle
//
// Run loops: Register (AGENT_PROTOCOL_VERSION_1, the request from
// Handler.Registration), Handler.Opened, the Connect command stream, and
// Handler.Closed when the session ends; then it registers again with the
// same id after a jittered exponential backoff (Config.Backoff), which is
// reset once a session proved healthy (a heartbeat got through or a command
// arrived). A registration refused with PermissionDenied or
// FailedPrecondition (a machine that is DOWN, an agent that was removed) is
// retried about every Backoff.Max and logged at Warn once per streak.
//
// Heartbeats go at the interval the coordinator gave, each at the multiple
// of 50 ms of wall-clock time nearest to when it is due (the beat grid:
// beats of many agents due close together reach the coordinator together
// and are served in one wake-up of its threads, not one each), on the
// session's HeartbeatStream: one long-lived HTTP/2 stream on which each beat is a
// message, which costs the coordinator a fraction of a call per beat. A
// coordinator that says so in its answers (answers_optional) answers only
// the beats that ask (the others set no_answer): the first beat of a
// stream and every third ask and wait for the answer, which brings the
// interval, so a changed interval takes effect within three beats; the
// others are sent without waiting (a refusal of one ends the stream, and
// the next beat that asks reports it). An answer's frame and flush were
// most of the coordinator's CPU per beat. A stream that fails is opened again at the next
// beat. A beat on a stream that failed before answering any goes by
// Heartbeat call instead, and the session heartbeats with calls only,
// until it ends, once the coordinator answered Unimplemented (an older
// coordinator) or three streams failed before any answer (a transport or
// proxy without HTTP/2 streams). A beat (on the
// stream or a call) not answered within the heartbeat interval (at most
// Config.RPCTimeout) failed. A session ends when
// its command stream ends, when any call (Heartbeat, UpdateStatus,
// UpdateOversubscribedResources) is refused with FailedPrecondition,
// NotFound or PermissionDenied, when no heartbeat got through for three
// intervals (counted from the last beat the coordinator answered, plus the
// two after it that did not ask for an answer on a no_answer stream: a
// beat sent without asking proves nothing), or when the handler returns an
// error. Run returns nil when its
// context is cancelled, ErrStop when the handler returned ErrStop (after a
// best-effort delivery of the outbox: the simulator's shutdown_agent), and
// an error wrapped with Fatal as is; failures talking to the coordinator are
// retried and logged, never returned.
//
// # Status updates: who retries
//
// Send is fire-and-forget into the current session's outbox, coalesced per
// task (a newer status of a task replaces an unsent older one), so the
// outbox is bounded by the number of tasks. The sender delivers the
// outbox in batches (#30): one UpdateStatus carries the oldest queued
// updates, up to MaxUpdatesPerCall and MaxUpdateBytesPerCall, when the
// coordinator said it takes batches (RegisterResponse.status_batches), so
// a launch of 1,500 tasks costs a few calls, not 1,500; a single update
// goes in the request's single fields, which every coordinator reads. An
// entry the coordinator refuses is handled as a failed call of that
// update. A session that ends drops its outbox; a failed UpdateStatus is
// not retried here. The task machine owns
// reliability: it keeps every update until an AcknowledgeCommand (delivered
// through Handler.Command like any command) names its uuid, re-sends the
// unacknowledged ones on its own timers, and sends them all again when
// Handler.Opened reports a new session.
//
// # Cost
//
// slackline-sim runs 10,000 Sessions in one process, so a Session is cheap:
// Run's goroutine blocks on the command stream; heartbeats run on a timer
// (time.AfterFunc), so no goroutine of the Session's own waits between
// them (the HTTP/2 client's stream has its own); a sender
// goroutine exists only while the outbox is not empty; an idle session holds
// no buffers. Config.HeartbeatSlots can cap heartbeats in flight across
// Sessions.
//
// # Locks
//
// One mutex per Session guards the current session and its outbox; no call
// to the coordinator or the Handler is made while it is held. Handler
// methods are called from Run's goroutine only, so a Handler may call Send,
// SendEstimate and Current from them.
package session
