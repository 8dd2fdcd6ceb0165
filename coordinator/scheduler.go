package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/protocol"
	"github.com/slackline/slackline/resources"
)

var (
	errSlowSubscriber = errors.New("event queue overflowed: the subscriber reads too slowly")
	errFailedOver     = errors.New("framework failed over to a newer subscription")
)

// errTornDown ends a subscription for good.
type errTornDown struct{ reason string }

func (e errTornDown) Error() string { return "framework removed: " + e.reason }

type schedulerService struct{ c *Coordinator }

func (s schedulerService) Subscribe(ctx context.Context, req *connect.Request[slacklinev1.SubscribeRequest], stream *connect.ServerStream[slacklinev1.SubscribeResponse]) error {
	c := s.c
	info, err := normalizeFrameworkInfo(req.Msg.GetFrameworkInfo())
	if err != nil {
		return connect.NewError(connect.CodeInvalidArgument, err)
	}
	now := c.cfg.Now()
	// Held from the check to the write so that a concurrent teardown's
	// record cannot be overwritten by this subscription's.
	c.persistMu.Lock()
	persistLocked := true
	defer func() {
		if persistLocked {
			c.persistMu.Unlock()
		}
	}()
	c.mu.Lock()
	registeredAt := now
	if info.GetId() == "" {
		info.Id = newID()
	} else {
		fw := c.frameworks[info.GetId()]
		switch {
		case fw == nil:
			c.mu.Unlock()
			return connect.NewError(connect.CodeNotFound, fmt.Errorf("framework %q is unknown; subscribe without an id to register anew", info.GetId()))
		case fw.state == slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED:
			c.mu.Unlock()
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("framework %q was torn down and cannot subscribe again", info.GetId()))
		}
		registeredAt = fw.registeredAt
	}
	c.mu.Unlock()

	// Durable before the framework learns its id.
	rec := &slacklinev1.FrameworkRecord{Info: info, RegisteredTime: timestamppb.New(registeredAt)}
	if err := c.store.Apply(ctx, store.Put(store.BucketFrameworks, info.GetId(), mustMarshal(rec))); err != nil {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("persist framework: %w", err))
	}

	c.mu.Lock()
	fw := c.frameworks[info.GetId()]
	if fw == nil {
		fw = &framework{
			registeredAt: registeredAt, tasks: map[string]*task{}, offers: map[string]*offer{}, inverseOffers: map[string]*inverseOffer{},
			suppressed: map[string]bool{}, pending: map[string][]*slacklinev1.TaskStatus{},
		}
		c.frameworks[info.GetId()] = fw
		c.addFramework(info, true)
	} else {
		if fw.state == slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED {
			c.mu.Unlock()
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("framework %q was torn down and cannot subscribe again", info.GetId()))
		}
		if fw.sub != nil {
			fw.sub.send(errorEvent(errFailedOver.Error()))
			fw.sub.end(errFailedOver)
			// The new scheduler does not know the old one's offers.
			for _, o := range fw.offers {
				c.removeOffer(o, 0, now)
			}
			c.dropFrameworkInverseOffers(fw)
		}
		c.alloc.UpdateFrameworkRoles(info.GetId(), info.GetRoles())
		c.alloc.SetFrameworkRevocable(info.GetId(), hasCapability(info, slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_REVOCABLE_RESOURCES))
		c.alloc.ActivateFramework(info.GetId())
	}
	fw.info = info
	fw.state = slacklinev1.FrameworkState_FRAMEWORK_STATE_CONNECTED
	sub := newSubscription(c.cfg.EventQueueSize)
	fw.sub = sub
	sub.send(&slacklinev1.Event{Event: &slacklinev1.Event_Subscribed{Subscribed: &slacklinev1.SubscribedEvent{
		FrameworkId: info.GetId(), StreamId: sub.streamID,
		HeartbeatIntervalSeconds: c.cfg.FrameworkHeartbeatInterval.Seconds(),
	}}})
	// Unacknowledged updates are replayed from this goroutine, not through
	// the bounded queue, so any number of them fits.
	var replay []*slacklinev1.Event
	for _, updates := range fw.pending {
		for _, st := range updates {
			replay = append(replay, updateEvent(fw, st))
		}
	}
	c.markAllDirty()
	c.mu.Unlock()
	c.persistMu.Unlock()
	persistLocked = false
	c.log.Info("framework subscribed", "framework", info.GetId(), "name", info.GetName(), "roles", info.GetRoles())
	defer c.subscriptionEnded(fw, sub)

	stream.ResponseHeader().Set(protocol.StreamIDHeader, sub.streamID)
	heartbeat := time.NewTicker(c.cfg.FrameworkHeartbeatInterval)
	defer heartbeat.Stop()
	send := func(ev *slacklinev1.Event) error {
		return stream.Send(&slacklinev1.SubscribeResponse{Event: ev})
	}
	// The Subscribed event is the first in the queue.
	if err := send(<-sub.events); err != nil {
		return err
	}
	for _, ev := range replay {
		if err := send(ev); err != nil {
			return err
		}
	}
	for {
		select {
		case ev := <-sub.events:
			if err := send(ev); err != nil {
				return err
			}
		case <-heartbeat.C:
			if err := send(&slacklinev1.Event{Event: &slacklinev1.Event_Heartbeat{Heartbeat: &slacklinev1.HeartbeatEvent{}}}); err != nil {
				return err
			}
		case <-sub.done:
			// Deliver what was queued before the end (the error event included).
			for {
				select {
				case ev := <-sub.events:
					if err := send(ev); err != nil {
						return err
					}
					continue
				default:
				}
				break
			}
			if errors.Is(sub.reason, errSlowSubscriber) {
				return connect.NewError(connect.CodeResourceExhausted, sub.reason)
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func errorEvent(msg string) *slacklinev1.Event {
	return &slacklinev1.Event{Event: &slacklinev1.Event_Error{Error: &slacklinev1.ErrorEvent{Message: msg}}}
}

func updateEvent(fw *framework, st *slacklinev1.TaskStatus) *slacklinev1.Event {
	return &slacklinev1.Event{Event: &slacklinev1.Event_Update{Update: &slacklinev1.UpdateEvent{Status: forFramework(fw, st)}}}
}

// subscriptionEnded handles the end of a Subscribe stream: if it is still
// the framework's current subscription the framework becomes DISCONNECTED
// and its failover timeout starts (an immediate teardown when it is zero).
func (c *Coordinator) subscriptionEnded(fw *framework, sub *subscription) {
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	c.mu.Lock()
	if fw.sub != sub || c.stopping {
		// Replaced by a newer subscription, or the coordinator is stopping:
		// a stop is not a disconnection (the registry keeps the framework).
		c.mu.Unlock()
		return
	}
	now := c.cfg.Now()
	fw.sub = nil
	var writes []store.Mutation
	if fw.state == slacklinev1.FrameworkState_FRAMEWORK_STATE_CONNECTED {
		fw.state = slacklinev1.FrameworkState_FRAMEWORK_STATE_DISCONNECTED
		fw.disconnectedAt = now
		fw.failoverDeadline = now.Add(fw.failoverTimeout())
		c.alloc.DeactivateFramework(fw.id())
		for _, o := range fw.offers {
			c.removeOffer(o, 0, now)
		}
		c.dropFrameworkInverseOffers(fw)
		c.log.Info("framework disconnected", "framework", fw.id(), "failover_timeout", fw.failoverTimeout())
		if fw.failoverTimeout() == 0 {
			writes = append(writes, c.removeFramework(fw, "disconnected with a zero failover timeout", now))
		}
	}
	c.mu.Unlock()
	if err := c.store.Apply(context.Background(), writes...); err != nil {
		c.log.Error("persist registry", "err", err)
	}
}

// removeFramework tears a framework down: offers rescinded, tasks killed and
// forgotten, allocations released. It returns the registry write that marks
// it completed. Caller holds c.mu.
func (c *Coordinator) removeFramework(fw *framework, reason string, now time.Time) store.Mutation {
	id := fw.id()
	for _, o := range fw.offers {
		delete(c.offers, o.id)
		if a := c.agents[o.agentID]; a != nil {
			delete(a.offers, o.id)
			c.markDirty(a.id)
		}
	}
	clear(fw.offers)
	c.dropFrameworkInverseOffers(fw)
	c.maint.ForgetFramework(id)
	shutdown := map[string]bool{}
	for taskID, t := range fw.tasks {
		if a := c.agents[t.agentID]; a != nil {
			delete(a.tasks, taskKey{id, taskID})
			if !shutdown[a.id] {
				shutdown[a.id] = true
				a.send(&slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ShutdownFramework{
					ShutdownFramework: &slacklinev1.ShutdownFrameworkCommand{FrameworkId: id}}})
			}
			c.markDirty(a.id)
		}
	}
	clear(fw.tasks)
	clear(fw.pending)
	c.alloc.RemoveFramework(id)
	fw.state = slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED
	if fw.sub != nil {
		fw.sub.send(errorEvent("framework removed: " + reason))
		fw.sub.end(errTornDown{reason})
		fw.sub = nil
	}
	c.log.Info("framework removed", "framework", id, "reason", reason)
	rec := &slacklinev1.FrameworkRecord{Info: fw.info, RegisteredTime: timestamppb.New(fw.registeredAt), Completed: true}
	return store.Put(store.BucketFrameworks, id, mustMarshal(rec))
}

// authorize finds the calling framework and checks the stream id header.
// Caller holds c.mu.
func (c *Coordinator) authorize(header http.Header, frameworkID string) (*framework, error) {
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
	if fw.sub == nil || fw.sub.streamID != streamID {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s %q is not the current subscription of framework %q", protocol.StreamIDHeader, streamID, frameworkID))
	}
	return fw, nil
}

func invalidArgument(err error) error { return connect.NewError(connect.CodeInvalidArgument, err) }

func (s schedulerService) Accept(ctx context.Context, req *connect.Request[slacklinev1.AcceptRequest]) (*connect.Response[slacklinev1.AcceptResponse], error) {
	c := s.c
	msg := req.Msg
	c.mu.Lock()
	defer c.mu.Unlock()
	fw, err := c.authorize(req.Header(), msg.GetFrameworkId())
	if err != nil {
		return nil, err
	}
	if len(msg.GetOfferIds()) == 0 {
		return nil, invalidArgument(errors.New("offer_ids is empty"))
	}
	if len(msg.GetOfferIds()) > maxOffersPerCall {
		return nil, invalidArgument(fmt.Errorf("%d offer_ids, at most %d allowed", len(msg.GetOfferIds()), maxOffersPerCall))
	}
	refuse, err := refuseSeconds(msg.GetFilters())
	if err != nil {
		return nil, invalidArgument(err)
	}
	var tasks []*slacklinev1.TaskInfo
	for i, op := range msg.GetOperations() {
		launch := op.GetLaunch()
		if launch == nil {
			return nil, invalidArgument(fmt.Errorf("operations[%d] has no known operation", i))
		}
		tasks = append(tasks, launch.GetTaskInfos()...)
	}
	if len(tasks) > maxTasksPerAccept {
		return nil, invalidArgument(fmt.Errorf("%d tasks in one call, at most %d allowed", len(tasks), maxTasksPerAccept))
	}
	now := c.cfg.Now()
	c.metrics.offersAccepted.Add(float64(len(msg.GetOfferIds())))

	offers, problem := c.acceptedOffers(fw, msg.GetOfferIds())
	if problem != "" {
		for _, o := range offers {
			c.removeOffer(o, 0, now)
		}
		for _, t := range tasks {
			fw.send(updateEvent(fw, coordinatorStatus(fw.id(), t.GetTaskId(), t.GetAgentId(),
				slacklinev1.TaskState_TASK_STATE_DROPPED, slacklinev1.Reason_REASON_INVALID_OFFERS, problem, now)))
		}
		return connect.NewResponse(&slacklinev1.AcceptResponse{}), nil
	}
	pool := offeredPool{agentID: offers[0].agentID, role: offers[0].role}
	for _, o := range offers {
		if o.revocable {
			pool.revocable = pool.revocable.Add(o.resources)
		} else {
			pool.regular = pool.regular.Add(o.resources)
		}
		delete(c.offers, o.id)
		delete(fw.offers, o.id)
		if a := c.agents[o.agentID]; a != nil {
			delete(a.offers, o.id)
		}
	}
	accepted, rejected := validateLaunch(pool, tasks, func(id string) bool { _, ok := fw.tasks[id]; return ok })
	for _, r := range rejected {
		fw.send(updateEvent(fw, coordinatorStatus(fw.id(), r.task.GetTaskId(), pool.agentID, r.state, r.reason, r.message, now)))
	}
	a := c.agents[pool.agentID]
	var used, usedRevocable resources.Resources
	for _, at := range accepted {
		info := cloneTaskInfo(at.info)
		info.AgentId = pool.agentID
		info.Resources = append(at.regular.Proto(pool.role, resources.Regular), at.revocable.Proto(pool.role, resources.Revocable)...)
		t := &task{
			info: info, frameworkID: fw.id(), agentID: pool.agentID, role: pool.role,
			resources: at.regular, revocable: at.revocable, state: slacklinev1.TaskState_TASK_STATE_STAGING,
		}
		fw.tasks[info.GetTaskId()] = t
		a.tasks[taskKey{fw.id(), info.GetTaskId()}] = t
		used, usedRevocable = used.Add(at.regular), usedRevocable.Add(at.revocable)
		a.send(&slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_RunTask{RunTask: &slacklinev1.RunTaskCommand{
			Framework: fw.info, Task: info,
		}}})
	}
	if remainder := pool.regular.Sub(used); !remainder.IsEmpty() {
		c.alloc.Release(fw.id(), pool.role, pool.agentID, remainder, seconds(refuse), now)
	}
	if remainder := pool.revocable.Sub(usedRevocable); !remainder.IsEmpty() {
		c.alloc.ReleaseRevocable(fw.id(), pool.role, pool.agentID, remainder, seconds(refuse), now)
	}
	c.markDirty(pool.agentID)
	return connect.NewResponse(&slacklinev1.AcceptResponse{}), nil
}

// acceptedOffers resolves offer ids for Accept. It returns the offers it
// found and, when some are unknown, foreign, repeated or on different
// agents or roles, a description of the problem. Caller holds c.mu.
func (c *Coordinator) acceptedOffers(fw *framework, ids []string) ([]*offer, string) {
	var offers []*offer
	problem := ""
	seen := map[string]bool{}
	for _, id := range ids {
		o := c.offers[id]
		switch {
		case seen[id]:
			problem = fmt.Sprintf("offer %q is listed twice", id)
			continue
		case o == nil || o.frameworkID != fw.id():
			problem = fmt.Sprintf("offer %q is not an outstanding offer of this framework (rescinded, expired or never made)", id)
			seen[id] = true
			continue
		}
		seen[id] = true
		if len(offers) > 0 && o.agentID != offers[0].agentID {
			problem = fmt.Sprintf("offers %q and %q are on different agents", offers[0].id, o.id)
		}
		if len(offers) > 0 && o.role != offers[0].role {
			problem = fmt.Sprintf("offers %q and %q are for different roles", offers[0].id, o.id)
		}
		offers = append(offers, o)
	}
	if problem == "" && len(offers) > 0 {
		if a := c.agents[offers[0].agentID]; a == nil || a.state != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
			problem = fmt.Sprintf("agent %q of the offers is not active", offers[0].agentID)
		}
	}
	return offers, problem
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func (s schedulerService) Decline(ctx context.Context, req *connect.Request[slacklinev1.DeclineRequest]) (*connect.Response[slacklinev1.DeclineResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	fw, err := c.authorize(req.Header(), req.Msg.GetFrameworkId())
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
	now := c.cfg.Now()
	var unknown []string
	for _, id := range req.Msg.GetOfferIds() {
		o := fw.offers[id]
		if o == nil {
			unknown = append(unknown, id)
			continue
		}
		c.metrics.offersDeclined.Inc()
		c.removeOffer(o, seconds(refuse), now)
	}
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
func (c *Coordinator) setSuppressed(header http.Header, frameworkID string, roles []string, suppress bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	fw, err := c.authorize(header, frameworkID)
	if err != nil {
		return err
	}
	if roles, err = checkRoles(fw, roles); err != nil {
		return err
	}
	if suppress {
		c.alloc.Suppress(fw.id(), roles)
	} else {
		c.alloc.Revive(fw.id(), roles)
		c.markAllDirty()
	}
	for _, r := range roles {
		if suppress {
			fw.suppressed[r] = true
		} else {
			delete(fw.suppressed, r)
		}
	}
	return nil
}

func (s schedulerService) Revive(ctx context.Context, req *connect.Request[slacklinev1.ReviveRequest]) (*connect.Response[slacklinev1.ReviveResponse], error) {
	if err := s.c.setSuppressed(req.Header(), req.Msg.GetFrameworkId(), req.Msg.GetRoles(), false); err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.ReviveResponse{}), nil
}

func (s schedulerService) Suppress(ctx context.Context, req *connect.Request[slacklinev1.SuppressRequest]) (*connect.Response[slacklinev1.SuppressResponse], error) {
	if err := s.c.setSuppressed(req.Header(), req.Msg.GetFrameworkId(), req.Msg.GetRoles(), true); err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.SuppressResponse{}), nil
}

func (s schedulerService) Kill(ctx context.Context, req *connect.Request[slacklinev1.KillRequest]) (*connect.Response[slacklinev1.KillResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	fw, err := c.authorize(req.Header(), req.Msg.GetFrameworkId())
	if err != nil {
		return nil, err
	}
	if err := validateID("task_id", req.Msg.GetTaskId()); err != nil {
		return nil, invalidArgument(err)
	}
	t := fw.tasks[req.Msg.GetTaskId()]
	if t == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("task %q is not a live task of framework %q", req.Msg.GetTaskId(), fw.id()))
	}
	if a := c.agents[t.agentID]; a != nil {
		a.send(&slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_KillTask{KillTask: &slacklinev1.KillTaskCommand{
			FrameworkId: fw.id(), TaskId: t.info.GetTaskId(),
		}}})
	}
	return connect.NewResponse(&slacklinev1.KillResponse{}), nil
}

func (s schedulerService) Acknowledge(ctx context.Context, req *connect.Request[slacklinev1.AcknowledgeRequest]) (*connect.Response[slacklinev1.AcknowledgeResponse], error) {
	c := s.c
	msg := req.Msg
	c.mu.Lock()
	defer c.mu.Unlock()
	fw, err := c.authorize(req.Header(), msg.GetFrameworkId())
	if err != nil {
		return nil, err
	}
	if msg.GetUuid() == "" {
		return nil, invalidArgument(errors.New("uuid is empty: only updates with a uuid are acknowledged"))
	}
	pending := fw.pending[msg.GetTaskId()]
	found := -1
	for i, st := range pending {
		if st.GetUuid() == msg.GetUuid() {
			found = i
			break
		}
	}
	if found < 0 {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no unacknowledged update %q for task %q", msg.GetUuid(), msg.GetTaskId()))
	}
	st := pending[found]
	pending = append(pending[:found], pending[found+1:]...)
	if len(pending) == 0 {
		delete(fw.pending, msg.GetTaskId())
	} else {
		fw.pending[msg.GetTaskId()] = pending
	}
	if a := c.agents[st.GetAgentId()]; a != nil {
		a.send(&slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Acknowledge{Acknowledge: &slacklinev1.AcknowledgeCommand{
			FrameworkId: fw.id(), TaskId: msg.GetTaskId(), Uuid: msg.GetUuid(),
		}}})
	}
	return connect.NewResponse(&slacklinev1.AcknowledgeResponse{}), nil
}

func (s schedulerService) Reconcile(ctx context.Context, req *connect.Request[slacklinev1.ReconcileRequest]) (*connect.Response[slacklinev1.ReconcileResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	fw, err := c.authorize(req.Header(), req.Msg.GetFrameworkId())
	if err != nil {
		return nil, err
	}
	if len(req.Msg.GetTasks()) > maxTasksPerAccept {
		return nil, invalidArgument(fmt.Errorf("%d tasks, at most %d allowed", len(req.Msg.GetTasks()), maxTasksPerAccept))
	}
	now := c.cfg.Now()
	reply := func(t *task) {
		fw.send(updateEvent(fw, coordinatorStatus(fw.id(), t.info.GetTaskId(), t.agentID, t.state,
			slacklinev1.Reason_REASON_RECONCILIATION, "reconciliation: latest known state", now)))
	}
	if len(req.Msg.GetTasks()) == 0 {
		for _, t := range fw.tasks {
			reply(t)
		}
		return connect.NewResponse(&slacklinev1.ReconcileResponse{}), nil
	}
	for _, rt := range req.Msg.GetTasks() {
		if t := fw.tasks[rt.GetTaskId()]; t != nil {
			reply(t)
			continue
		}
		if t := fw.findCompleted(rt.GetTaskId()); t != nil {
			reply(t)
			continue
		}
		state, message, ok := c.unknownTaskState(rt.GetAgentId())
		if !ok {
			continue // the agent may still re-register and report it
		}
		fw.send(updateEvent(fw, coordinatorStatus(fw.id(), rt.GetTaskId(), rt.GetAgentId(), state,
			slacklinev1.Reason_REASON_RECONCILIATION, message, now)))
	}
	return connect.NewResponse(&slacklinev1.ReconcileResponse{}), nil
}

// unknownTaskState answers reconciliation of a task the coordinator does not
// know. ok is false while the answer is not yet known (agents recovering).
// Caller holds c.mu.
func (c *Coordinator) unknownTaskState(agentID string) (slacklinev1.TaskState, string, bool) {
	if agentID != "" {
		a := c.agents[agentID]
		switch {
		case a == nil:
			return slacklinev1.TaskState_TASK_STATE_UNKNOWN, "agent is unknown", true
		case a.state == slacklinev1.AgentState_AGENT_STATE_RECOVERING:
			return 0, "", false
		case a.state == slacklinev1.AgentState_AGENT_STATE_UNREACHABLE:
			return slacklinev1.TaskState_TASK_STATE_UNREACHABLE, "agent is unreachable", true
		}
		return slacklinev1.TaskState_TASK_STATE_GONE, "task is unknown to its agent", true
	}
	for _, a := range c.agents {
		if a.state == slacklinev1.AgentState_AGENT_STATE_RECOVERING {
			return 0, "", false
		}
	}
	return slacklinev1.TaskState_TASK_STATE_UNKNOWN, "task is unknown", true
}

func (fw *framework) findCompleted(taskID string) *task {
	for i := len(fw.completed) - 1; i >= 0; i-- {
		if fw.completed[i].info.GetTaskId() == taskID {
			return fw.completed[i]
		}
	}
	return nil
}

func (s schedulerService) Teardown(ctx context.Context, req *connect.Request[slacklinev1.TeardownRequest]) (*connect.Response[slacklinev1.TeardownResponse], error) {
	c := s.c
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	c.mu.Lock()
	fw, err := c.authorize(req.Header(), req.Msg.GetFrameworkId())
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	write := c.removeFramework(fw, "torn down by the framework", c.cfg.Now())
	c.mu.Unlock()
	// The framework is gone in memory: the record must follow even if the
	// caller hangs up.
	if err := c.store.Apply(context.WithoutCancel(ctx), write); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("persist teardown: %w", err))
	}
	return connect.NewResponse(&slacklinev1.TeardownResponse{}), nil
}
