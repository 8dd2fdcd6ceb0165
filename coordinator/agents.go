package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/coordinator/core"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/taskstate"
	"github.com/slackline/slackline/resources"
)

// agentPingInterval keeps idle command streams alive through proxies.
const agentPingInterval = 30 * time.Second

type agentService struct{ c *Coordinator }

func (s agentService) Register(ctx context.Context, req *connect.Request[slacklinev1.RegisterRequest]) (*connect.Response[slacklinev1.RegisterResponse], error) {
	reg, err := parseRegistration(req.Msg)
	if err != nil {
		return nil, invalidArgument(err)
	}
	// register_agents on the hostname was checked before the handler
	// (auth.Rules); the endpoint is where the agent is, not what it claims.
	endpoint, dropped := s.c.trustedEndpoint(reg.info.GetEndpoint(), req.Peer().Addr)
	if dropped != "" {
		s.c.cfg.Logger.Warn("agent's NodeService endpoint not published", "hostname", reg.info.GetHostname(),
			"claimed", reg.info.GetEndpoint(), "reason", dropped)
	}
	reg.info.Endpoint = endpoint
	agentID, sessionID, interval, err := s.c.register(ctx, reg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.RegisterResponse{
		AgentId: agentID, SessionId: sessionID, HeartbeatIntervalSeconds: interval.Seconds(),
		StatusBatches: true,
	}), nil
}

// session checks an agent's session, and that the caller may act as the
// agent's host. Caller holds c.mu.
func (c *Coordinator) session(ctx context.Context, agentID, sessionID string) (*agent, error) {
	a := c.agents[agentID]
	if a == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("agent %q is unknown; register first", agentID))
	}
	if err := c.checkSessionCaller(ctx, a); err != nil {
		return nil, err
	}
	if a.State == slacklinev1.AgentState_AGENT_STATE_GONE && (a.session == nil || a.session.id != sessionID) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("agent %q was shut down: its machine %s is DOWN for maintenance", agentID, a.Maint.Machine))
	}
	if a.session == nil || a.session.id != sessionID {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("session %q of agent %q is not current; register again", sessionID, agentID))
	}
	return a, nil
}

func (s agentService) Connect(ctx context.Context, req *connect.Request[slacklinev1.ConnectRequest], stream *connect.ServerStream[slacklinev1.ConnectResponse]) error {
	sess, err := s.c.streamSession(ctx, req.Msg.GetAgentId(), req.Msg.GetSessionId())
	if err != nil {
		return err
	}
	ctx, release := sess.claim(ctx)
	defer release()
	send := func(cmd *slacklinev1.AgentCommand) error {
		return stream.Send(&slacklinev1.ConnectResponse{Command: cmd})
	}
	ping := &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Ping{Ping: &slacklinev1.PingCommand{}}}
	// A first message flushes the response headers, so the agent's client
	// knows at once that the stream is open.
	if err := send(ping); err != nil {
		return err
	}
	err = sess.serve(ctx, ping, s.c.agentPings, send)
	if err == nil {
		if !sess.flush {
			return connect.NewError(connect.CodeFailedPrecondition, errSessionEnded)
		}
		// The last commands (a shutdown) go out before the end.
		err = sess.sendQueued(ctx, send)
	}
	if err != nil && errors.Is(context.Cause(ctx), errSuperseded) {
		return connect.NewError(connect.CodeAborted, errSuperseded)
	}
	return err
}

// streamSession returns the session whose commands a Connect stream
// delivers: the agent's current one, or one that a shutdown ended before its
// stream opened (the shutdown is delivered now). It takes c.mu.
func (c *Coordinator) streamSession(ctx context.Context, agentID, sessionID string) (*agentSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, err := c.session(ctx, agentID, sessionID)
	if err == nil {
		return a.session, nil
	}
	if connect.CodeOf(err) == connect.CodePermissionDenied {
		return nil, err
	}
	if a := c.agents[agentID]; a != nil && a.closing != nil && a.closing.id == sessionID {
		return a.closing, nil
	}
	return nil, err
}

func (s agentService) Heartbeat(ctx context.Context, req *connect.Request[slacklinev1.HeartbeatRequest]) (*connect.Response[slacklinev1.HeartbeatResponse], error) {
	interval, _, err := s.c.beat(ctx, req.Msg.GetAgentId(), req.Msg.GetSessionId(), nil, req.Msg.GetProfile())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.HeartbeatResponse{HeartbeatIntervalSeconds: interval.Seconds()}), nil
}

// HeartbeatStream answers each heartbeat of the stream as Heartbeat does,
// on one long-lived HTTP/2 stream instead of a call per beat (a unary call
// costs the coordinator several times the CPU of a message on a stream).
// The first beat claims the stream for its agent: a newer stream of the
// agent supersedes it and ends it at once (Aborted); every beat must name
// the agent that claimed it. The server's read timeout does not apply to
// the stream (heartbeatStreams lifts it); instead the stream ends when no
// beat came for the agents' timeout in effect (the silence after which
// the agent is lost anyway), so an idle stream holds nothing for long.
// A beat that asks for no answer (no_answer) gets none: an answer's frame
// and flush were most of the coordinator's CPU per beat; every answer says
// that this coordinator honours the field (answers_optional).
func (s agentService) HeartbeatStream(ctx context.Context, stream *connect.BidiStream[slacklinev1.HeartbeatStreamRequest, slacklinev1.HeartbeatStreamResponse]) error {
	claim := &beatClaim{body: streamBody(ctx)}
	idle := newIdleTimer(s.c.cfg.AgentTimeout, func() { claim.body.end(errBeatsIdle) })
	defer idle.stop()
	for {
		req, err := stream.Receive()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if cause := claim.body.endCause(); cause != nil {
				return cause
			}
			return err
		}
		if claim.agentID != "" && req.GetAgentId() != claim.agentID {
			return invalidArgument(fmt.Errorf("agent_id %q: this stream carries the heartbeats of agent %q", req.GetAgentId(), claim.agentID))
		}
		interval, timeout, err := s.c.beat(ctx, req.GetAgentId(), req.GetSessionId(), claim, req.GetProfile())
		if err != nil {
			return err
		}
		idle.beat(timeout)
		if req.GetNoAnswer() {
			continue
		}
		if err := stream.Send(&slacklinev1.HeartbeatStreamResponse{HeartbeatIntervalSeconds: interval.Seconds(), AnswersOptional: true}); err != nil {
			return err
		}
	}
}

var (
	errBeatsIdle       = connect.NewError(connect.CodeDeadlineExceeded, errors.New("no heartbeat on this stream for the agents' timeout"))
	errBeatsSuperseded = connect.NewError(connect.CodeAborted, errors.New("a newer heartbeat stream of this agent superseded this one"))
)

// beatClaim is a HeartbeatStream's claim on its agent (agent.beats) and
// the way to end the stream: closing its request body, with the cause the
// handler returns.
type beatClaim struct {
	agentID string
	body    *closableBody
}

// beat records a heartbeat of an agent's current session and returns the
// interval to tell the agent and the silence after which it is lost.
// claim, for a beat on a HeartbeatStream, is the stream's: its first beat
// makes it the agent's stream and ends any other. It takes c.mu.
func (c *Coordinator) beat(ctx context.Context, agentID, sessionID string, claim *beatClaim, profile *slacklinev1.ProfileReport) (interval, timeout time.Duration, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, err := c.session(ctx, agentID, sessionID)
	if err != nil {
		return 0, 0, err
	}
	if claim != nil {
		switch {
		case claim.agentID == "":
			if a.beats != nil {
				a.beats.body.end(errBeatsSuperseded)
			}
			claim.agentID, a.beats = a.ID, claim
		case a.beats != claim:
			return 0, 0, errBeatsSuperseded
		}
	}
	now := c.cfg.Now()
	c.heartbeat(a, now)
	c.profileBeat(a, profile)
	if claim != nil {
		c.heartbeats.stream.Inc()
	} else {
		c.heartbeats.call.Inc()
	}
	p := c.agentPace(now)
	return p.Interval, p.Timeout, nil
}

func (s agentService) UpdateStatus(ctx context.Context, req *connect.Request[slacklinev1.UpdateStatusRequest]) (*connect.Response[slacklinev1.UpdateStatusResponse], error) {
	c := s.c
	msg := req.Msg
	if len(msg.GetUpdates()) > 0 {
		results, err := c.updateStatuses(ctx, msg)
		if err != nil {
			return nil, err
		}
		return connect.NewResponse(&slacklinev1.UpdateStatusResponse{Results: results}), nil
	}
	if err := validateStatusUpdate(msg.GetFrameworkId(), msg.GetStatus()); err != nil {
		return nil, invalidArgument(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a, err := c.session(ctx, msg.GetAgentId(), msg.GetSessionId())
	if err != nil {
		return nil, err
	}
	if err := c.applyStatus(a, msg.GetFrameworkId(), msg.GetStatus()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.UpdateStatusResponse{}), nil
}

// updateStatuses applies a batch of status updates (#30) in order, each as
// UpdateStatus applies a single one, and answers each entry. An entry is
// refused on its own, not the batch: an update refused for a reason that
// lasts (a task of another agent, a framework at its limit of
// unacknowledged updates) would otherwise hold back every other update of
// the agent each time it sends the batch again. A task's later entries are
// refused with its first refused one (Aborted), so that its framework
// never sees its updates out of order. Nothing is persisted: status
// updates live in memory until acknowledged, as single ones do. The call
// fails only for the whole request: its session, or too many entries.
func (c *Coordinator) updateStatuses(ctx context.Context, msg *slacklinev1.UpdateStatusRequest) ([]*slacklinev1.BatchResult, error) {
	updates := msg.GetUpdates()
	if msg.GetStatus() != nil || msg.GetFrameworkId() != "" {
		return nil, invalidArgument(errors.New("a request carries framework_id and status (one update) or updates (a batch), not both"))
	}
	if len(updates) > maxUpdatesPerCall {
		return nil, invalidArgument(fmt.Errorf("%d updates, at most %d allowed", len(updates), maxUpdatesPerCall))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a, err := c.session(ctx, msg.GetAgentId(), msg.GetSessionId())
	if err != nil {
		return nil, err
	}
	type taskKey struct{ frameworkID, taskID string }
	var refused map[taskKey]int // a task's first refused entry
	results := make([]*slacklinev1.BatchResult, len(updates))
	for i, u := range updates {
		key := taskKey{u.GetFrameworkId(), u.GetStatus().GetTaskId()}
		var err error
		if first, ok := refused[key]; ok {
			err = connect.NewError(connect.CodeAborted, fmt.Errorf(
				"updates[%d] of task %q was refused: the task's later updates wait for it, to keep their order", first, key.taskID))
		} else if err = validateStatusUpdate(u.GetFrameworkId(), u.GetStatus()); err != nil {
			err = invalidArgument(err)
		} else {
			err = c.applyStatus(a, u.GetFrameworkId(), u.GetStatus())
		}
		results[i] = batchResult("updates", i, err)
		if err != nil {
			if refused == nil {
				refused = map[taskKey]int{}
			}
			if _, ok := refused[key]; !ok {
				refused[key] = i
			}
		}
	}
	return results, nil
}

// validateStatusUpdate checks an agent's update of a task of framework
// frameworkID.
func validateStatusUpdate(frameworkID string, st *slacklinev1.TaskStatus) error {
	if err := validateID("framework_id", frameworkID); err != nil {
		return err
	}
	if err := validateID("status.task_id", st.GetTaskId()); err != nil {
		return err
	}
	if _, ok := slacklinev1.TaskState_name[int32(st.GetState())]; !ok || st.GetState() == slacklinev1.TaskState_TASK_STATE_UNSPECIFIED {
		return fmt.Errorf("status.state %d is not a task state", int32(st.GetState()))
	}
	if st.GetUuid() == "" {
		return errors.New("status.uuid is empty: agent updates carry a uuid so they can be acknowledged")
	}
	return nil
}

// applyStatus applies agent a's validated update of a task of framework
// frameworkID: a copy of status, completed (agent, framework, source,
// time) and its message bounded, goes to handleStatus. Caller holds c.mu.
func (c *Coordinator) applyStatus(a *agent, frameworkID string, status *slacklinev1.TaskStatus) error {
	st := proto.CloneOf(status)
	st.AgentId, st.FrameworkId = a.ID, frameworkID
	if truncateStatusMessage(st, c.cfg.Limits.MaxStatusMessageBytes) {
		c.bounds.hit("status_message", "status message truncated", "agent", a.ID, "task", st.GetTaskId(), "bytes", len(status.GetMessage()))
	}
	if st.Source == slacklinev1.TaskSource_TASK_SOURCE_UNSPECIFIED {
		st.Source = slacklinev1.TaskSource_TASK_SOURCE_AGENT
	}
	if st.Timestamp == nil {
		st.Timestamp = timestamppb.New(c.cfg.Now())
	}
	return c.handleStatus(a, st)
}

// batchResult is the answer to entry i of a batch (the request's field):
// OK, or err's code and its message, which names the entry.
func batchResult(field string, i int, err error) *slacklinev1.BatchResult {
	if err == nil {
		return &slacklinev1.BatchResult{}
	}
	message := err.Error()
	if ce := new(connect.Error); errors.As(err, &ce) {
		message = ce.Message()
	}
	return &slacklinev1.BatchResult{Code: uint32(connect.CodeOf(err)), Message: fmt.Sprintf("%s[%d]: %s", field, i, message)}
}

// handleStatus applies an agent's status update and routes it to the
// framework. An agent reports only its own tasks: an update for a task of
// another agent is refused (PermissionDenied); one for a task the
// coordinator does not know on this agent (never launched here, or long
// forgotten) is acknowledged on the framework's behalf and dropped. Caller
// holds c.mu.
func (c *Coordinator) handleStatus(a *agent, st *slacklinev1.TaskStatus) error {
	now := c.cfg.Now()
	fw := c.frameworks[st.GetFrameworkId()]
	acknowledge := func() { a.send(core.AcknowledgeCommand(st.GetFrameworkId(), st.GetTaskId(), st.GetUuid())) }
	if fw == nil || fw.state == slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED {
		// Nobody will acknowledge it: do so on the framework's behalf.
		acknowledge()
		if !taskstate.IsTerminal(st.GetState()) {
			a.send(shutdownFrameworkCommand(st.GetFrameworkId()))
		}
		return nil
	}
	if owner, known := c.taskOwner(a, fw, st.GetTaskId()); owner != a.ID {
		if known {
			return connect.NewError(connect.CodePermissionDenied, fmt.Errorf(
				"task %q of framework %q is on agent %q, not on agent %q", st.GetTaskId(), fw.id(), owner, a.ID))
		}
		c.log.Warn("status update for a task the agent was not given; acknowledged and dropped",
			"agent", a.ID, "framework", fw.id(), "task", st.GetTaskId(), "state", st.GetState().String())
		acknowledge()
		return nil
	}
	// The core keeps the update until the framework acknowledges it,
	// within Limits.MaxPendingUpdatesPerFramework.
	r, admission, pending := c.core.AddUpdate(fw.id(), st)
	switch admission {
	case core.Refused:
		c.bounds.hit("pending_updates", "status update refused: the framework has as many unacknowledged updates as it may; the agent sends it again later",
			"framework", fw.id(), "pending", pending)
		return exhausted("framework %q has %d unacknowledged status updates, its limit: the update of task %q waits until the framework acknowledges some (send it again later)",
			fw.id(), pending, st.GetTaskId())
	case core.Coalesced:
		c.bounds.hit("pending_updates", "unacknowledged status updates coalesced: a task's older updates were superseded by a newer one",
			"framework", fw.id(), "task", st.GetTaskId())
	}
	c.deliver(r)
	c.deliver(c.core.TaskUpdate(a.ID, st, now))
	return nil
}

// UpdateOversubscribedResources records an agent's estimate: its total
// revocable capacity, including what revocable tasks already hold (Mesos
// semantics). A shrink rescinds only the outstanding revocable offers that
// no longer fit, growth is offered on its own (core.Estimate); regular
// offers are never touched.
func (s agentService) UpdateOversubscribedResources(ctx context.Context, req *connect.Request[slacklinev1.UpdateOversubscribedResourcesRequest]) (*connect.Response[slacklinev1.UpdateOversubscribedResourcesResponse], error) {
	c := s.c
	regular, revocable, err := resources.FromProto(req.Msg.GetResources())
	if err != nil {
		return nil, invalidArgument(fmt.Errorf("resources: %w", err))
	}
	estimate := regular.Add(revocable)
	if len(estimate.Ports()) > 0 {
		return nil, invalidArgument(fmt.Errorf("resources: ports %s cannot be oversubscribed", estimate.Ports()))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a, err := c.session(ctx, req.Msg.GetAgentId(), req.Msg.GetSessionId())
	if err != nil {
		return nil, err
	}
	// Slack is allocated but unused capacity, so no estimate exceeds the
	// agent's registered total (itself within its identity's
	// max_resources): an agent that reports more, to attract revocable
	// tasks, is held to its total.
	if bounded := estimate.Min(a.Total); !bounded.Equal(estimate) {
		c.bounds.hit("revocable_estimate", "an agent reported more revocable resources than it registered: held to its total",
			"agent", a.ID, "hostname", a.Info.GetHostname(), "estimate", estimate.String(), "total", a.Total.String())
		estimate = bounded
	}
	c.deliver(c.core.Estimate(a.ID, estimate, c.cfg.Now()))
	return connect.NewResponse(&slacklinev1.UpdateOversubscribedResourcesResponse{}), nil
}
