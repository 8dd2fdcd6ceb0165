package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/slackline/slackline/internal/taskstate"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

var (
	errStreamEnded = errors.New("command stream ended")
	errShutdown    = errors.New("agent shut down by the coordinator")
)

// Agent is one simulated agent of a Fleet. Its methods are safe for
// concurrent use.
type Agent struct {
	fleet    *Fleet
	index    int
	hostname string
	client   slacklinev1connect.AgentServiceClient
	log      *slog.Logger

	mu       sync.Mutex
	id       string
	sess     *session // nil when not registered
	tasks    map[taskKey]*task
	flushing bool // a flush goroutine is running
	stopped  bool // shut down by the coordinator
}

// session is one registration: from Register until the command stream ends.
type session struct {
	id       string
	agentID  string
	ctx      context.Context // cancelled when the session ends
	cancel   context.CancelCauseFunc
	interval time.Duration

	// Guarded by Agent.mu.
	nextHeartbeat time.Time
	heartbeating  bool
	healthy       bool // a heartbeat succeeded or a command arrived
}

// sessionResult says how a session ended.
type sessionResult struct {
	healthy  bool
	shutdown bool
}

func newAgent(f *Fleet, index int, hostname, id string, client slacklinev1connect.AgentServiceClient) *Agent {
	return &Agent{
		fleet:    f,
		index:    index,
		hostname: hostname,
		client:   client,
		log:      f.cfg.Logger.With("agent", hostname),
		id:       id,
		tasks:    map[taskKey]*task{},
	}
}

// Index returns the agent's index in its fleet.
func (a *Agent) Index() int { return a.index }

// Hostname returns the hostname the agent registers with.
func (a *Agent) Hostname() string { return a.hostname }

// ID returns the agent's id, or "" before its first registration.
func (a *Agent) ID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.id
}

// Registered reports whether the agent has a live session.
func (a *Agent) Registered() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sess != nil
}

// Stopped reports whether the coordinator shut the agent down.
func (a *Agent) Stopped() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopped
}

// run registers, serves sessions and registers again until ctx is
// cancelled or the agent is shut down for good.
func (a *Agent) run(ctx context.Context) {
	defer a.stopTimers()
	cfg := &a.fleet.cfg
	attempt, refusals := 0, 0
	for ctx.Err() == nil {
		resp, err := a.register(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			delay := a.backoff(attempt)
			attempt++
			if code := connect.CodeOf(err); code == connect.CodePermissionDenied || code == connect.CodeFailedPrecondition {
				// Typically a machine in maintenance (DOWN): retry slowly,
				// warn once per streak.
				delay = jitter(cfg.BackoffMax)
				level := slog.LevelDebug
				if refusals == 0 {
					level = slog.LevelWarn
				}
				refusals++
				a.log.Log(ctx, level, "registration refused; retrying", "error", err, "retry_in", delay)
			} else {
				a.log.Debug("registration failed; retrying", "error", err, "retry_in", delay)
			}
			if !sleep(ctx, delay) {
				return
			}
			continue
		}
		refusals = 0
		result := a.serve(ctx, resp)
		if result.healthy {
			attempt = 0
		}
		if ctx.Err() != nil {
			return
		}
		if result.shutdown {
			if cfg.RestartAfterShutdown <= 0 || !sleep(ctx, cfg.RestartAfterShutdown) {
				return
			}
			a.reset()
			continue
		}
		delay := a.backoff(attempt)
		attempt++
		if !sleep(ctx, delay) {
			return
		}
	}
}

// register calls Register with the agent's id and tasks, and records the id
// the coordinator returns.
func (a *Agent) register(ctx context.Context) (*slacklinev1.RegisterResponse, error) {
	f := a.fleet
	a.mu.Lock()
	req := &slacklinev1.RegisterRequest{
		ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
		AgentInfo: &slacklinev1.AgentInfo{
			Id:         a.id,
			Hostname:   a.hostname,
			Resources:  f.resourcesProto,
			Attributes: f.attributesProto,
		},
		Tasks: a.agentTasksLocked(),
	}
	a.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, f.cfg.RPCTimeout)
	defer cancel()
	resp, err := a.client.Register(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, fmt.Errorf("register: %w", err)
	}
	id, sessionID := resp.Msg.GetAgentId(), resp.Msg.GetSessionId()
	if id == "" || sessionID == "" {
		return nil, errors.New("register: coordinator returned no agent id or session id")
	}
	a.mu.Lock()
	old := a.id
	a.id = id
	a.mu.Unlock()
	if old != id {
		if old != "" {
			a.log.Warn("coordinator assigned a new agent id", "old", old, "new", id)
		}
		if f.cfg.WorkDir != "" {
			if err := saveAgentID(f.cfg.WorkDir, a.hostname, id); err != nil {
				a.log.Error("cannot persist agent id", "error", err)
			}
		}
	}
	return resp.Msg, nil
}

// serve runs one session: it opens the command stream, re-sends pending
// status updates and handles commands until the stream ends.
func (a *Agent) serve(ctx context.Context, resp *slacklinev1.RegisterResponse) sessionResult {
	f := a.fleet
	interval := time.Duration(resp.GetHeartbeatIntervalSeconds() * float64(time.Second))
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	sctx, cancel := context.WithCancelCause(ctx)
	s := &session{id: resp.GetSessionId(), agentID: resp.GetAgentId(), ctx: sctx, cancel: cancel, interval: interval}

	// The session is live once Register succeeds: opening the stream may
	// block until the coordinator sends the first command (or headers), and
	// heartbeats and updates must flow meanwhile.
	now := time.Now()
	a.mu.Lock()
	a.sess = s
	s.nextHeartbeat = now.Add(interval)
	a.kickLocked() // re-send every task's oldest unacknowledged update
	a.mu.Unlock()
	f.registered.Add(1)
	f.emit(Event{Kind: EventRegistered, Time: now, AgentIndex: a.index, AgentID: s.agentID})
	a.log.Debug("registered", "agent_id", s.agentID, "session_id", s.id, "heartbeat_interval", interval)

	if len(f.revocableProto) > 0 {
		a.reportEstimate(s)
	}

	var result sessionResult
	stream, err := a.client.Connect(sctx, connect.NewRequest(&slacklinev1.ConnectRequest{AgentId: s.agentID, SessionId: s.id}))
	if err == nil {
		for stream.Receive() {
			if a.handle(s, stream.Msg().GetCommand()) {
				result.shutdown = true
				break
			}
		}
		err = stream.Err()
	}
	cause := err
	switch {
	case result.shutdown:
		cause = errShutdown
	case sctx.Err() != nil:
		cause = context.Cause(sctx)
	case cause == nil:
		cause = errStreamEnded
	}
	if stream != nil {
		s.cancel(cause) // so that Close does not wait to drain the stream
		stream.Close()
	}
	a.endSession(s, cause)
	a.mu.Lock()
	result.healthy = s.healthy
	a.mu.Unlock()
	return result
}

// endSession forgets s; only the session's reader (serve) calls it. Other
// goroutines end a session by cancelling its context, which ends the stream.
func (a *Agent) endSession(s *session, cause error) {
	s.cancel(cause)
	a.mu.Lock()
	if a.sess != s {
		a.mu.Unlock()
		return
	}
	a.sess = nil
	a.mu.Unlock()
	a.fleet.registered.Add(-1)
	a.fleet.emit(Event{Kind: EventDisconnected, Time: time.Now(), AgentIndex: a.index, AgentID: s.agentID, Message: cause.Error()})
	a.log.Debug("session ended", "session_id", s.id, "cause", cause)
}

// dropSession ends s after a call refused it (stale session, unknown agent).
func (a *Agent) dropSession(s *session, err error) {
	s.cancel(err)
}

// isSessionError reports whether err means the session is no longer valid
// and the agent must register again.
func isSessionError(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeFailedPrecondition, connect.CodeNotFound, connect.CodePermissionDenied:
		return true
	}
	return false
}

// handle executes one command; it reports whether the agent must stop.
func (a *Agent) handle(s *session, cmd *slacklinev1.AgentCommand) (shutdown bool) {
	a.mu.Lock()
	s.healthy = true
	a.mu.Unlock()
	switch c := cmd.GetCommand().(type) {
	case *slacklinev1.AgentCommand_RunTask:
		a.runTask(c.RunTask)
	case *slacklinev1.AgentCommand_KillTask:
		a.killTask(c.KillTask)
	case *slacklinev1.AgentCommand_ShutdownFramework:
		a.shutdownFramework(c.ShutdownFramework.GetFrameworkId())
	case *slacklinev1.AgentCommand_Acknowledge:
		a.acknowledge(c.Acknowledge)
	case *slacklinev1.AgentCommand_ShutdownAgent:
		a.shutdown(s, c.ShutdownAgent.GetMessage())
		return true
	case *slacklinev1.AgentCommand_Ping:
	default:
		a.log.Debug("ignoring unknown command", "command", cmd)
	}
	return false
}

// tick is called by the fleet's ticker. It starts re-sending status updates
// that are due and returns the session when a heartbeat is due (the caller
// then calls heartbeat), or nil.
func (a *Agent) tick(now time.Time) *session {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sess
	if s == nil || s.ctx.Err() != nil {
		return nil
	}
	if !a.flushing && a.resendDueLocked(s, now) {
		a.kickLocked()
	}
	if s.heartbeating || now.Before(s.nextHeartbeat) {
		return nil
	}
	s.heartbeating = true
	s.nextHeartbeat = now.Add(s.interval)
	return s
}

// heartbeat sends one heartbeat for s.
func (a *Agent) heartbeat(s *session) {
	ctx, cancel := context.WithTimeout(s.ctx, a.fleet.cfg.RPCTimeout)
	_, err := a.client.Heartbeat(ctx, connect.NewRequest(&slacklinev1.HeartbeatRequest{AgentId: s.agentID, SessionId: s.id}))
	cancel()
	a.heartbeatDone(s, err)
}

func (a *Agent) heartbeatDone(s *session, err error) {
	a.mu.Lock()
	s.heartbeating = false
	if err == nil {
		s.healthy = true
	}
	a.mu.Unlock()
	switch {
	case err == nil:
	case isSessionError(err):
		a.dropSession(s, fmt.Errorf("heartbeat: %w", err))
	case s.ctx.Err() == nil:
		a.log.Debug("heartbeat failed", "error", err)
	}
}

// reportEstimate sends the configured revocable estimate.
func (a *Agent) reportEstimate(s *session) {
	ctx, cancel := context.WithTimeout(s.ctx, a.fleet.cfg.RPCTimeout)
	defer cancel()
	_, err := a.client.UpdateOversubscribedResources(ctx, connect.NewRequest(&slacklinev1.UpdateOversubscribedResourcesRequest{
		AgentId:   s.agentID,
		SessionId: s.id,
		Resources: a.fleet.revocableProto,
	}))
	switch {
	case err == nil:
	case isSessionError(err):
		a.dropSession(s, fmt.Errorf("update oversubscribed resources: %w", err))
	case s.ctx.Err() == nil:
		a.log.Warn("cannot report revocable estimate", "error", err)
	}
}

// shutdown reports every live task TASK_STATE_GONE_BY_OPERATOR, makes a
// best-effort attempt to deliver every pending update, and stops the agent.
func (a *Agent) shutdown(s *session, message string) {
	if message == "" {
		message = "agent shut down"
	}
	now := time.Now()
	a.mu.Lock()
	a.stopped = true // before the updates, so that no flush starts
	var events []Event
	var pending []*slacklinev1.UpdateStatusRequest
	for _, t := range a.sortedTasksLocked() {
		if !taskstate.IsTerminal(t.state) {
			events = append(events, a.updateLocked(t, slacklinev1.TaskState_TASK_STATE_GONE_BY_OPERATOR, slacklinev1.Reason_REASON_UNSPECIFIED, message))
		}
		for _, u := range t.updates {
			pending = append(pending, &slacklinev1.UpdateStatusRequest{AgentId: s.agentID, SessionId: s.id, FrameworkId: t.key.frameworkID, Status: u.status})
		}
	}
	a.mu.Unlock()
	a.fleet.emit(events...)
	for _, req := range pending {
		if err := a.sendStatus(s, req); err != nil && isSessionError(err) {
			break
		}
	}
	a.fleet.emit(Event{Kind: EventStopped, Time: now, AgentIndex: a.index, AgentID: s.agentID, Message: message})
	a.log.Info("shut down by the coordinator", "message", message)
}

// reset makes a shut-down agent a fresh one: no id, no tasks.
func (a *Agent) reset() {
	a.stopTimers()
	a.mu.Lock()
	a.id = ""
	a.tasks = map[taskKey]*task{}
	a.stopped = false
	a.mu.Unlock()
	if dir := a.fleet.cfg.WorkDir; dir != "" {
		if err := saveAgentID(dir, a.hostname, ""); err != nil {
			a.log.Error("cannot remove agent id", "error", err)
		}
	}
}

// stopTimers stops the tasks' duration timers.
func (a *Agent) stopTimers() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.tasks {
		if t.timer != nil {
			t.timer.Stop()
			t.timer = nil
		}
	}
}

// backoff returns the jittered delay before registration attempt+1.
func (a *Agent) backoff(attempt int) time.Duration {
	cfg := &a.fleet.cfg
	d := cfg.BackoffMax
	if attempt < 32 {
		if e := cfg.BackoffMin << attempt; e > 0 && e < d {
			d = e
		}
	}
	return jitter(d)
}

// jitter returns a random duration in [d/2, d].
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// sleep waits for d; it returns false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func compareTaskKeys(x, y taskKey) int {
	return cmp.Or(cmp.Compare(x.frameworkID, y.frameworkID), cmp.Compare(x.taskID, y.taskID))
}

// sortedTasksLocked returns the tasks ordered by framework and task id.
func (a *Agent) sortedTasksLocked() []*task {
	tasks := make([]*task, 0, len(a.tasks))
	for _, t := range a.tasks {
		tasks = append(tasks, t)
	}
	slices.SortFunc(tasks, func(x, y *task) int { return compareTaskKeys(x.key, y.key) })
	return tasks
}
