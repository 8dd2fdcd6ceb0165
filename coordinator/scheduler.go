package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/coordinator/core"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/protocol"
	"github.com/slackline/slackline/resources"
)

type schedulerService struct{ c *Coordinator }

func (s schedulerService) Subscribe(ctx context.Context, req *connect.Request[slacklinev1.SubscribeRequest], stream *connect.ServerStream[slacklinev1.SubscribeResponse]) error {
	fw, sub, release, err := s.c.startSubscription(ctx, req)
	if err != nil {
		return err
	}
	defer s.c.endSubscription(fw, sub, release)
	return s.c.streamEvents(ctx, stream, sub)
}

// startSubscription validates and admits a Subscribe and subscribes (see
// subscribeOffStack). With endSubscription it keeps Subscribe's frame,
// which stays on the stream's goroutine while it waits, small (see
// rpcInterceptor.streamEnded in internal/server).
//
//go:noinline
func (c *Coordinator) startSubscription(ctx context.Context, req *connect.Request[slacklinev1.SubscribeRequest]) (*framework, *subscription, func(), error) {
	info, err := normalizeFrameworkInfo(req.Msg.GetFrameworkInfo())
	if err != nil {
		return nil, nil, nil, invalidArgument(err)
	}
	release, err := c.admitSubscription(callerKey(ctx, req.Peer()), c.cfg.Limits.MaxSubscriptionsPerPrincipal)
	if err != nil {
		return nil, nil, nil, err
	}
	fw, sub, err := c.subscribeOffStack(ctx, info)
	if err != nil {
		release()
		return nil, nil, nil, err
	}
	return fw, sub, release, nil
}

// endSubscription ends what startSubscription started.
func (c *Coordinator) endSubscription(fw *framework, sub *subscription, release func()) {
	defer release()
	c.subscriptionEnded(fw, sub)
}

func errorEvent(msg string) *slacklinev1.Event {
	return &slacklinev1.Event{Event: &slacklinev1.Event_Error{Error: &slacklinev1.ErrorEvent{Message: msg}}}
}

func updateEvent(fw *framework, st *slacklinev1.TaskStatus) *slacklinev1.Event {
	return &slacklinev1.Event{Event: &slacklinev1.Event_Update{Update: &slacklinev1.UpdateEvent{Status: forFramework(fw, st)}}}
}

// authorize finds the calling framework and checks the stream id header
// and that the caller may act for the framework (mayActFor). Caller holds
// c.mu.
func (c *Coordinator) authorize(ctx context.Context, header http.Header, frameworkID string) (*framework, error) {
	if frameworkID == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("framework_id is empty"))
	}
	fw := c.frameworks[frameworkID]
	if fw == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("framework %q is unknown", frameworkID))
	}
	streamID := header.Get(protocol.StreamIDHeader)
	if streamID == "" {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("missing %s header: subscribe first and send the stream id with every call", protocol.StreamIDHeader))
	}
	if fw.sub == nil || fw.sub.id != streamID {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s %q is not the current subscription of framework %q", protocol.StreamIDHeader, streamID, frameworkID))
	}
	if !c.mayActFor(ctx, fw) {
		return nil, c.actAsError(ctx, fw)
	}
	return fw, nil
}

// authorizeLocked is authorize for a caller that does not hold c.mu: it
// takes it.
func (c *Coordinator) authorizeLocked(ctx context.Context, header http.Header, frameworkID string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.authorize(ctx, header, frameworkID)
	return err
}

func invalidArgument(err error) error { return connect.NewError(connect.CodeInvalidArgument, err) }

// respond encodes the outcome of a domain operation whose response is
// empty.
func respond[T any](err error) (*connect.Response[T], error) {
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(new(T)), nil
}

func (s schedulerService) Accept(ctx context.Context, req *connect.Request[slacklinev1.AcceptRequest]) (*connect.Response[slacklinev1.AcceptResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	fw, err := c.authorize(ctx, req.Header(), req.Msg.GetFrameworkId())
	if err != nil {
		return nil, err
	}
	call, err := parseAccept(req.Msg)
	if err != nil {
		return nil, invalidArgument(err)
	}
	return respond[slacklinev1.AcceptResponse](c.accept(fw, call, c.cfg.Now()))
}

// acceptCall is a decoded, validated Accept request.
type acceptCall struct {
	offerIDs []string
	tasks    []*slacklinev1.TaskInfo
	refuse   time.Duration // the filter for what the tasks leave of the offers
}

// parseAccept decodes and validates an Accept request: what can be checked
// without the coordinator's state.
func parseAccept(msg *slacklinev1.AcceptRequest) (acceptCall, error) {
	ids := msg.GetOfferIds()
	if len(ids) == 0 {
		return acceptCall{}, errors.New("offer_ids is empty")
	}
	if len(ids) > maxOffersPerCall {
		return acceptCall{}, fmt.Errorf("%d offer_ids, at most %d allowed", len(ids), maxOffersPerCall)
	}
	refuse, err := refuseSeconds(msg.GetFilters())
	if err != nil {
		return acceptCall{}, err
	}
	call := acceptCall{offerIDs: ids, refuse: seconds(refuse)}
	for i, op := range msg.GetOperations() {
		launch := op.GetLaunch()
		if launch == nil {
			return acceptCall{}, fmt.Errorf("operations[%d] has no known operation", i)
		}
		call.tasks = append(call.tasks, launch.GetTaskInfos()...)
	}
	if len(call.tasks) > maxTasksPerAccept {
		return acceptCall{}, fmt.Errorf("%d tasks in one call, at most %d allowed", len(call.tasks), maxTasksPerAccept)
	}
	return call, nil
}

// accept uses the offers of call for its tasks: the tasks that fit are
// launched, the others get a terminal update, and what they leave of the
// offers returns to the allocator with the call's filter. Offers that are
// not all this framework's, on one active agent, for one role drop every
// task (REASON_INVALID_OFFERS). Caller holds c.mu.
func (c *Coordinator) accept(fw *framework, call acceptCall, now time.Time) error {
	for _, t := range call.tasks {
		// A task the framework may not run refuses the whole call, before
		// any offer is used.
		if _, err := c.runAs(fw, t); err != nil {
			return err
		}
		if err := c.mayRunUnconfined(fw, t); err != nil {
			return err
		}
	}
	c.metrics.offersAccepted.Add(float64(len(call.offerIDs)))
	agentID, problem := c.core.CheckAccept(fw.id(), call.offerIDs)
	if problem != "" {
		c.deliver(c.core.DropOffers(fw.id(), call.offerIDs, now))
		for _, t := range call.tasks {
			fw.send(updateEvent(fw, coordinatorStatus(fw.id(), t.GetTaskId(), t.GetAgentId(),
				slacklinev1.TaskState_TASK_STATE_DROPPED, slacklinev1.Reason_REASON_INVALID_OFFERS, problem, now)))
		}
		return nil
	}
	if err := c.admitLaunch(agentID); err != nil {
		return err
	}
	pool := c.core.TakeOffers(fw.id(), call.offerIDs)
	accepted, rejected := validateLaunch(offeredPool{agentID: pool.AgentID, role: pool.Role, regular: pool.Regular, revocable: pool.Revocable}, call.tasks, func(id string) bool { return c.core.Task(fw.id(), id) != nil })
	for _, r := range rejected {
		fw.send(updateEvent(fw, coordinatorStatus(fw.id(), r.task.GetTaskId(), pool.AgentID, r.state, r.reason, r.message, now)))
	}
	var used, usedRevocable resources.Resources
	for _, at := range accepted {
		c.launch(fw, pool, at)
		used, usedRevocable = used.Add(at.regular), usedRevocable.Add(at.revocable)
	}
	c.deliver(c.core.Return(fw.id(), pool, used, usedRevocable, call.refuse, now))
	return nil
}

// launch records an accepted task as STAGING on the pool's agent and
// sends the agent its RunTask command. Caller holds c.mu.
func (c *Coordinator) launch(fw *framework, pool core.Pool, at acceptedTask) {
	a := c.agents[pool.AgentID]
	info := proto.CloneOf(at.info)
	info.AgentId = pool.AgentID
	info.Resources = append(at.regular.Proto(pool.Role, resources.Regular), at.revocable.Proto(pool.Role, resources.Revocable)...)
	info.User, _ = c.runAs(fw, info) // checked by accept
	info.LaunchProof = launchProof(c.launchKey, a.Info.GetHostname(), fw.id(), fw.info.GetPrincipal(), info.GetTaskId(), pool.Role, at.regular, at.revocable)
	c.deliver(c.core.Launch(&core.Task{
		Info: info, FrameworkID: fw.id(), AgentID: pool.AgentID, Role: pool.Role,
		Resources: at.regular, Revocable: at.revocable,
	}, fw.info))
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func (s schedulerService) Decline(ctx context.Context, req *connect.Request[slacklinev1.DeclineRequest]) (*connect.Response[slacklinev1.DeclineResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	fw, err := c.authorize(ctx, req.Header(), req.Msg.GetFrameworkId())
	if err != nil {
		return nil, err
	}
	refuse, err := refuseSeconds(req.Msg.GetFilters())
	if err != nil {
		return nil, invalidArgument(err)
	}
	if len(req.Msg.GetOfferIds()) > maxOffersPerCall {
		return nil, invalidArgument(fmt.Errorf("%d offer_ids, at most %d allowed", len(req.Msg.GetOfferIds()), maxOffersPerCall))
	}
	r, unknown, declined := c.core.Decline(fw.id(), req.Msg.GetOfferIds(), seconds(refuse), c.cfg.Now())
	c.metrics.offersDeclined.Add(float64(declined))
	c.deliver(r)
	if len(unknown) > 0 {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("offers %q are not outstanding offers of this framework (the others were declined)", unknown))
	}
	return connect.NewResponse(&slacklinev1.DeclineResponse{}), nil
}

// checkRoles returns the roles a Revive or Suppress applies to.
func checkRoles(fw *framework, roles []string) ([]string, error) {
	if len(roles) == 0 {
		return fw.info.GetRoles(), nil
	}
	known := map[string]bool{}
	for _, r := range fw.info.GetRoles() {
		known[r] = true
	}
	for _, r := range roles {
		if !known[r] {
			return nil, invalidArgument(fmt.Errorf("role %q is not one of the framework's roles %q", r, fw.info.GetRoles()))
		}
	}
	return roles, nil
}

// setSuppressed suppresses (or revives) the given roles of the calling
// framework, all of them when roles is empty. Revive also clears filters.
// It takes c.mu.
func (c *Coordinator) setSuppressed(ctx context.Context, header http.Header, frameworkID string, roles []string, suppress bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	fw, err := c.authorize(ctx, header, frameworkID)
	if err != nil {
		return err
	}
	if roles, err = checkRoles(fw, roles); err != nil {
		return err
	}
	c.deliver(c.core.SetSuppressed(fw.id(), roles, suppress))
	return nil
}

func (s schedulerService) Revive(ctx context.Context, req *connect.Request[slacklinev1.ReviveRequest]) (*connect.Response[slacklinev1.ReviveResponse], error) {
	return respond[slacklinev1.ReviveResponse](s.c.setSuppressed(ctx, req.Header(), req.Msg.GetFrameworkId(), req.Msg.GetRoles(), false))
}

func (s schedulerService) Suppress(ctx context.Context, req *connect.Request[slacklinev1.SuppressRequest]) (*connect.Response[slacklinev1.SuppressResponse], error) {
	return respond[slacklinev1.SuppressResponse](s.c.setSuppressed(ctx, req.Header(), req.Msg.GetFrameworkId(), req.Msg.GetRoles(), true))
}

func (s schedulerService) Kill(ctx context.Context, req *connect.Request[slacklinev1.KillRequest]) (*connect.Response[slacklinev1.KillResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	fw, err := c.authorize(ctx, req.Header(), req.Msg.GetFrameworkId())
	if err != nil {
		return nil, err
	}
	if err := validateID("task_id", req.Msg.GetTaskId()); err != nil {
		return nil, invalidArgument(err)
	}
	r, err := c.core.Kill(fw.id(), req.Msg.GetTaskId())
	if err != nil {
		return nil, connect.NewError(connect.CodeNotFound, err)
	}
	c.deliver(r)
	return connect.NewResponse(&slacklinev1.KillResponse{}), nil
}

func (s schedulerService) Acknowledge(ctx context.Context, req *connect.Request[slacklinev1.AcknowledgeRequest]) (*connect.Response[slacklinev1.AcknowledgeResponse], error) {
	c := s.c
	msg := req.Msg
	acks := msg.GetAcknowledgements()
	if len(acks) > 0 {
		if msg.GetAgentId() != "" || msg.GetTaskId() != "" || msg.GetUuid() != "" {
			return nil, invalidArgument(errors.New("a request carries agent_id, task_id and uuid (one acknowledgement) or acknowledgements (a batch), not both"))
		}
		if len(acks) > maxAcknowledgementsPerCall {
			return nil, invalidArgument(fmt.Errorf("%d acknowledgements, at most %d allowed", len(acks), maxAcknowledgementsPerCall))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fw, err := c.authorize(ctx, req.Header(), msg.GetFrameworkId())
	if err != nil {
		return nil, err
	}
	if len(acks) == 0 {
		if err := c.acknowledge(fw, msg.GetTaskId(), msg.GetUuid()); err != nil {
			return nil, err
		}
		return connect.NewResponse(&slacklinev1.AcknowledgeResponse{}), nil
	}
	// A batch (#30): each entry is applied or refused on its own, in
	// order; every entry is the authorized framework's, as the request
	// names one framework.
	results := make([]*slacklinev1.BatchResult, len(acks))
	for i, ack := range acks {
		results[i] = batchResult("acknowledgements", i, c.acknowledge(fw, ack.GetTaskId(), ack.GetUuid()))
	}
	return connect.NewResponse(&slacklinev1.AcknowledgeResponse{Results: results}), nil
}

// acknowledge forgets framework fw's update uuid of a task and forwards
// the acknowledgement to the update's agent. Caller holds c.mu.
func (c *Coordinator) acknowledge(fw *framework, taskID, uuid string) error {
	if uuid == "" {
		return invalidArgument(errors.New("uuid is empty: only updates with a uuid are acknowledged"))
	}
	r, ok := c.core.Acknowledge(fw.id(), taskID, uuid)
	if !ok {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("no unacknowledged update %q for task %q", uuid, taskID))
	}
	c.deliver(r)
	return nil
}

func (s schedulerService) Reconcile(ctx context.Context, req *connect.Request[slacklinev1.ReconcileRequest]) (*connect.Response[slacklinev1.ReconcileResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	fw, err := c.authorize(ctx, req.Header(), req.Msg.GetFrameworkId())
	if err != nil {
		return nil, err
	}
	if len(req.Msg.GetTasks()) > maxTasksPerAccept {
		return nil, invalidArgument(fmt.Errorf("%d tasks, at most %d allowed", len(req.Msg.GetTasks()), maxTasksPerAccept))
	}
	if err := c.admitReconcile(fw); err != nil {
		return nil, err
	}
	queries := make([]core.ReconcileQuery, len(req.Msg.GetTasks()))
	for i, rt := range req.Msg.GetTasks() {
		queries[i] = core.ReconcileQuery{TaskID: rt.GetTaskId(), AgentID: rt.GetAgentId()}
	}
	c.deliver(c.core.Reconcile(fw.id(), queries, c.core.RecordedAgentStates(), c.cfg.Now()))
	return connect.NewResponse(&slacklinev1.ReconcileResponse{}), nil
}

func (s schedulerService) Teardown(ctx context.Context, req *connect.Request[slacklinev1.TeardownRequest]) (*connect.Response[slacklinev1.TeardownResponse], error) {
	c := s.c
	// Authorized before its turns, so that a caller without the right
	// queues nothing on the framework's or the maintenance state's scope,
	// and again in them: the framework may have failed over or gone while
	// it waited.
	if err := c.authorizeLocked(ctx, req.Header(), req.Msg.GetFrameworkId()); err != nil {
		return nil, err
	}
	defer c.takeTurn(scopeFramework(req.Msg.GetFrameworkId()), scopeMaintenance)()
	c.mu.Lock()
	fw, err := c.authorize(ctx, req.Header(), req.Msg.GetFrameworkId())
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	writes := c.removeFramework(fw, "torn down by the framework")
	c.mu.Unlock()
	// The framework is gone in memory: the record must follow even if the
	// caller hangs up.
	if err := c.persist(context.WithoutCancel(ctx), "teardown", writes...); err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.TeardownResponse{}), nil
}
