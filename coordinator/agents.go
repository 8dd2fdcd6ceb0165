package coordinator

import (
	"context"
	"errors"
	"fmt"
	"github.com/slackline/slackline/internal/taskstate"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// agentPingInterval keeps idle command streams alive through proxies.
const agentPingInterval = 30 * time.Second

type agentService struct{ c *Coordinator }

// reportedTask is a validated AgentTask from a registration.
type reportedTask struct {
	frameworkID string
	framework   *slacklinev1.FrameworkInfo
	info        *slacklinev1.TaskInfo
	state       slacklinev1.TaskState
	role        string
	resources   resources.Resources
	revocable   resources.Resources
}

func validateRegistration(req *slacklinev1.RegisterRequest) (*slacklinev1.AgentInfo, resources.Resources, []reportedTask, error) {
	if v := req.GetProtocolVersion(); v != slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1 {
		return nil, resources.Resources{}, nil, invalidf("protocol_version %v is not supported (this coordinator speaks AGENT_PROTOCOL_VERSION_1)", v)
	}
	info := req.GetAgentInfo()
	if info == nil {
		return nil, resources.Resources{}, nil, invalidf("agent_info is required")
	}
	if info.GetId() != "" {
		if err := validateID("agent_info.id", info.GetId()); err != nil {
			return nil, resources.Resources{}, nil, err
		}
	}
	if h := info.GetHostname(); h == "" || len(h) > maxIDLength {
		return nil, resources.Resources{}, nil, invalidf("agent_info.hostname %q must be 1 to %d bytes", h, maxIDLength)
	}
	total, revocable, err := resources.FromProto(info.GetResources())
	if err != nil {
		return nil, resources.Resources{}, nil, fmt.Errorf("%w: agent_info.resources: %w", errInvalid, err)
	}
	if !revocable.IsEmpty() {
		return nil, resources.Resources{}, nil, invalidf("agent_info.resources must not be revocable (got %s); report estimates with UpdateOversubscribedResources", revocable)
	}
	for _, at := range info.GetAttributes() {
		if at.GetName() == "" {
			return nil, resources.Resources{}, nil, invalidf("agent_info.attributes has an attribute without a name")
		}
	}
	var tasks []reportedTask
	for i, at := range req.GetTasks() {
		t := at.GetTask()
		if err := validateID(fmt.Sprintf("tasks[%d].framework_id", i), at.GetFrameworkId()); err != nil {
			return nil, resources.Resources{}, nil, err
		}
		if err := validateID(fmt.Sprintf("tasks[%d].task.task_id", i), t.GetTaskId()); err != nil {
			return nil, resources.Resources{}, nil, err
		}
		res, rev, err := resources.FromProto(t.GetResources())
		if err != nil {
			return nil, resources.Resources{}, nil, fmt.Errorf("%w: tasks[%d] resources: %w", errInvalid, i, err)
		}
		role := "" // filled from the framework's roles when the resources name none
		if list := t.GetResources(); len(list) > 0 && list[0].GetRole() != "" {
			role = list[0].GetRole()
			if err := validateRole(role); err != nil {
				return nil, resources.Resources{}, nil, fmt.Errorf("tasks[%d]: %w", i, err)
			}
		}
		tasks = append(tasks, reportedTask{
			frameworkID: at.GetFrameworkId(), framework: at.GetFramework(), info: t,
			state: at.GetState(), role: role, resources: res, revocable: rev,
		})
	}
	return info, total, tasks, nil
}

func (s agentService) Register(ctx context.Context, req *connect.Request[slacklinev1.RegisterRequest]) (*connect.Response[slacklinev1.RegisterResponse], error) {
	c := s.c
	info, total, tasks, err := validateRegistration(req.Msg)
	if err != nil {
		return nil, invalidArgument(err)
	}
	info = proto.CloneOf(info)
	now := c.cfg.Now()

	c.mu.Lock()
	if am := lookupMachine(c.maint, info); am.mode == slacklinev1.MachineMode_MACHINE_MODE_DOWN {
		c.mu.Unlock()
		return nil, downMachineError(am.machine)
	}
	if info.GetId() == "" {
		info.Id = newID()
	} else if a := c.agents[info.GetId()]; a != nil && a.state == slacklinev1.AgentState_AGENT_STATE_GONE {
		c.mu.Unlock()
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("agent %q was removed from the cluster; restart it with an empty work dir to register anew", info.GetId()))
	}
	registeredAt := now
	needWrite := true
	if a := c.agents[info.GetId()]; a != nil {
		registeredAt = a.registeredAt
		needWrite = a.state != slacklinev1.AgentState_AGENT_STATE_ACTIVE || !proto.Equal(a.info, info)
	}
	rebooted := c.rebootedAgent(req.Msg.GetPreviousAgentId(), info)
	c.mu.Unlock()

	var writes []store.Mutation
	if needWrite {
		rec := &slacklinev1.AgentRecord{Info: info, State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, RegisteredTime: timestamppb.New(registeredAt)}
		writes = append(writes, store.Put(store.BucketAgents, info.GetId(), mustMarshal(rec)))
	}
	if rebooted != nil {
		rec := &slacklinev1.AgentRecord{Info: rebooted.info, State: slacklinev1.AgentState_AGENT_STATE_GONE, RegisteredTime: timestamppb.New(rebooted.registeredAt)}
		writes = append(writes, store.Put(store.BucketAgents, rebooted.id, mustMarshal(rec)))
	}
	if err := c.store.Apply(ctx, writes...); err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("persist agent: %w", err))
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	am := lookupMachine(c.maint, info)
	if am.mode == slacklinev1.MachineMode_MACHINE_MODE_DOWN {
		// Went DOWN while the record was written; recovery and the next
		// registration sort the record out.
		return nil, downMachineError(am.machine)
	}
	if rebooted != nil && rebooted.state != slacklinev1.AgentState_AGENT_STATE_GONE {
		c.retireRebootedAgent(rebooted, info.GetId(), now)
	}
	a := c.agents[info.GetId()]
	if a == nil {
		a = newAgent(info.GetId(), registeredAt)
		c.agents[a.id] = a
	}
	if a.session != nil {
		a.session.end()
	}
	previous := a.state
	if a.inAllocator && !a.total.Equal(total) {
		// Offers made from the old total may no longer fit.
		for _, o := range a.offers {
			c.rescindOffer(o, now)
		}
	}
	a.info, a.total = info, total
	a.state = slacklinev1.AgentState_AGENT_STATE_ACTIVE
	a.lastHeartbeat = now
	a.session = newAgentSession(c.cfg.AgentQueueSize)
	if !a.inAllocator {
		c.alloc.AddAgent(a.id, total)
		a.inAllocator = true
	} else {
		c.alloc.UpdateAgentTotal(a.id, total)
		c.alloc.ActivateAgent(a.id)
	}
	if !a.maint.same(am) {
		for _, o := range a.offers {
			c.rescindOffer(o, now)
		}
		c.rescindInverseOffers(a, now)
	}
	c.setAgentMaintenance(a, am)
	c.reconcileAgentTasks(a, tasks, previous, now)
	c.markDirty(a.id)
	c.log.Info("agent registered", "agent", a.id, "hostname", info.GetHostname(), "resources", total.String(), "tasks", len(tasks), "previous_state", previous.String())
	return connect.NewResponse(&slacklinev1.RegisterResponse{
		AgentId: a.id, SessionId: a.session.id, HeartbeatIntervalSeconds: c.cfg.AgentHeartbeatInterval.Seconds(),
	}), nil
}

// reconcileAgentTasks merges the tasks a (re-)registering agent reports with
// what the coordinator knew. Caller holds c.mu.
func (c *Coordinator) reconcileAgentTasks(a *agent, reported []reportedTask, previous slacklinev1.AgentState, now time.Time) {
	seen := map[taskKey]bool{}
	for _, r := range reported {
		key := taskKey{r.frameworkID, r.info.GetTaskId()}
		seen[key] = true
		if taskstate.IsTerminal(r.state) {
			continue // the agent reports its terminal update itself
		}
		fw := c.frameworks[r.frameworkID]
		if fw == nil && r.framework != nil && r.framework.GetId() == r.frameworkID {
			// A framework the coordinator never saw (registry lost): adopt
			// it as disconnected; its failover timeout runs from now.
			info, err := normalizeFrameworkInfo(r.framework)
			if err != nil {
				c.log.Warn("agent reports a task of an invalid framework; shutting it down", "agent", a.id, "framework", r.frameworkID, "err", err)
				a.send(&slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ShutdownFramework{
					ShutdownFramework: &slacklinev1.ShutdownFrameworkCommand{FrameworkId: r.frameworkID}}})
				continue
			}
			fw = &framework{
				info: info, state: slacklinev1.FrameworkState_FRAMEWORK_STATE_DISCONNECTED,
				registeredAt: now, disconnectedAt: now, failoverDeadline: now.Add(failoverTimeout(info)),
				tasks: map[string]*task{}, offers: map[string]*offer{}, inverseOffers: map[string]*inverseOffer{},
				suppressed: map[string]bool{}, pending: map[string][]*slacklinev1.TaskStatus{},
			}
			c.frameworks[r.frameworkID] = fw
			c.addFramework(info, false)
		}
		if fw == nil || fw.state == slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED {
			a.send(&slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ShutdownFramework{
				ShutdownFramework: &slacklinev1.ShutdownFrameworkCommand{FrameworkId: r.frameworkID}}})
			continue
		}
		if r.role == "" {
			r.role = fw.info.GetRoles()[0]
		}
		t := fw.tasks[r.info.GetTaskId()]
		if t == nil {
			t = &task{
				info: r.info, frameworkID: r.frameworkID, agentID: a.id, role: r.role,
				resources: r.resources, revocable: r.revocable, state: r.state,
			}
			fw.tasks[r.info.GetTaskId()] = t
			a.tasks[key] = t
			c.alloc.Claim(r.frameworkID, r.role, a.id, r.resources)
			if !r.revocable.IsEmpty() {
				c.alloc.ClaimRevocable(r.frameworkID, r.role, a.id, r.revocable)
			}
			continue
		}
		if t.state == slacklinev1.TaskState_TASK_STATE_UNREACHABLE && !fw.partitionAware() {
			// The framework was told the task is LOST and may have replaced
			// it: like Mesos, kill what comes back.
			a.send(&slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_KillTask{KillTask: &slacklinev1.KillTaskCommand{
				FrameworkId: fw.id(), TaskId: t.info.GetTaskId()}}})
			continue
		}
		if t.state != r.state {
			t.state = r.state
			st := coordinatorStatus(fw.id(), t.info.GetTaskId(), a.id, r.state, slacklinev1.Reason_REASON_RECONCILIATION,
				"agent re-registered and reports the task "+r.state.String(), now)
			t.status = st
			fw.send(updateEvent(fw, st))
		}
	}
	for key, t := range a.tasks {
		if seen[key] {
			continue
		}
		state, reason, msg := slacklinev1.TaskState_TASK_STATE_GONE, slacklinev1.Reason_REASON_AGENT_RESTARTED, "task not found on its agent after the agent re-registered"
		if t.state == slacklinev1.TaskState_TASK_STATE_STAGING {
			state, msg = slacklinev1.TaskState_TASK_STATE_DROPPED, "launch did not reach the agent before it re-registered"
		}
		c.finishTask(t, coordinatorStatus(t.frameworkID, key.taskID, a.id, state, reason, msg, now), now)
	}
}

// finishTask records a terminal status of a task the coordinator itself
// decided, tells the framework and releases the resources. Caller holds c.mu.
func (c *Coordinator) finishTask(t *task, st *slacklinev1.TaskStatus, now time.Time) {
	fw := c.frameworks[t.frameworkID]
	t.state, t.status = st.GetState(), st
	c.forgetTask(t, now)
	if fw != nil {
		fw.send(updateEvent(fw, st))
	}
}

// forgetTask removes a terminal task from the live maps and releases its
// resources. Caller holds c.mu.
func (c *Coordinator) forgetTask(t *task, now time.Time) {
	key := taskKey{t.frameworkID, t.info.GetTaskId()}
	if a := c.agents[t.agentID]; a != nil && a.tasks[key] == t {
		delete(a.tasks, key)
		c.markDirty(a.id)
	}
	fw := c.frameworks[t.frameworkID]
	if fw == nil || fw.tasks[key.taskID] != t {
		return
	}
	delete(fw.tasks, key.taskID)
	c.alloc.Release(t.frameworkID, t.role, t.agentID, t.resources, 0, now)
	if !t.revocable.IsEmpty() {
		c.alloc.ReleaseRevocable(t.frameworkID, t.role, t.agentID, t.revocable, 0, now)
	}
	fw.completed = append(fw.completed, t)
	if over := len(fw.completed) - c.cfg.CompletedTasksPerFramework; over > 0 {
		fw.completed = append(fw.completed[:0], fw.completed[over:]...)
	}
}

// session checks an agent's session. Caller holds c.mu.
func (c *Coordinator) session(agentID, sessionID string) (*agent, error) {
	a := c.agents[agentID]
	if a == nil {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("agent %q is unknown; register first", agentID))
	}
	if a.state == slacklinev1.AgentState_AGENT_STATE_GONE && (a.session == nil || a.session.id != sessionID) {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("agent %q was shut down: its machine %s is DOWN for maintenance", agentID, a.maint.machine))
	}
	if a.session == nil || a.session.id != sessionID {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("session %q of agent %q is not current; register again", sessionID, agentID))
	}
	return a, nil
}

func (s agentService) Connect(ctx context.Context, req *connect.Request[slacklinev1.ConnectRequest], stream *connect.ServerStream[slacklinev1.ConnectResponse]) error {
	c := s.c
	c.mu.Lock()
	a, err := c.session(req.Msg.GetAgentId(), req.Msg.GetSessionId())
	var sess *agentSession
	switch {
	case err == nil:
		sess = a.session
	case c.agents[req.Msg.GetAgentId()] != nil && c.agents[req.Msg.GetAgentId()].closing != nil &&
		c.agents[req.Msg.GetAgentId()].closing.id == req.Msg.GetSessionId():
		// Shut down before its stream opened: deliver the shutdown now.
		sess = c.agents[req.Msg.GetAgentId()].closing
	default:
		c.mu.Unlock()
		return err
	}
	c.mu.Unlock()
	ping := time.NewTicker(agentPingInterval)
	defer ping.Stop()
	// A first message flushes the response headers, so the agent's client
	// knows at once that the stream is open.
	if err := stream.Send(&slacklinev1.ConnectResponse{Command: &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Ping{Ping: &slacklinev1.PingCommand{}}}}); err != nil {
		return err
	}
	for {
		select {
		case cmd := <-sess.commands:
			if err := stream.Send(&slacklinev1.ConnectResponse{Command: cmd}); err != nil {
				return err
			}
		case <-ping.C:
			if err := stream.Send(&slacklinev1.ConnectResponse{Command: &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Ping{Ping: &slacklinev1.PingCommand{}}}}); err != nil {
				return err
			}
		case <-sess.done:
			if sess.deliver {
				// The last commands (a shutdown) go out before the end.
				for {
					select {
					case cmd := <-sess.commands:
						if err := stream.Send(&slacklinev1.ConnectResponse{Command: cmd}); err != nil {
							return err
						}
						continue
					default:
					}
					break
				}
				return nil
			}
			return connect.NewError(connect.CodeFailedPrecondition, errors.New("session ended; register again"))
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s agentService) Heartbeat(ctx context.Context, req *connect.Request[slacklinev1.HeartbeatRequest]) (*connect.Response[slacklinev1.HeartbeatResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	a, err := c.session(req.Msg.GetAgentId(), req.Msg.GetSessionId())
	if err != nil {
		return nil, err
	}
	a.lastHeartbeat = c.cfg.Now()
	return connect.NewResponse(&slacklinev1.HeartbeatResponse{}), nil
}

func (s agentService) UpdateStatus(ctx context.Context, req *connect.Request[slacklinev1.UpdateStatusRequest]) (*connect.Response[slacklinev1.UpdateStatusResponse], error) {
	c := s.c
	msg := req.Msg
	st := msg.GetStatus()
	if err := validateID("framework_id", msg.GetFrameworkId()); err != nil {
		return nil, invalidArgument(err)
	}
	if err := validateID("status.task_id", st.GetTaskId()); err != nil {
		return nil, invalidArgument(err)
	}
	if _, ok := slacklinev1.TaskState_name[int32(st.GetState())]; !ok || st.GetState() == slacklinev1.TaskState_TASK_STATE_UNSPECIFIED {
		return nil, invalidArgument(fmt.Errorf("status.state %d is not a task state", int32(st.GetState())))
	}
	if st.GetUuid() == "" {
		return nil, invalidArgument(errors.New("status.uuid is empty: agent updates carry a uuid so they can be acknowledged"))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a, err := c.session(msg.GetAgentId(), msg.GetSessionId())
	if err != nil {
		return nil, err
	}
	st = proto.CloneOf(st)
	st.AgentId, st.FrameworkId = a.id, msg.GetFrameworkId()
	if st.Source == slacklinev1.TaskSource_TASK_SOURCE_UNSPECIFIED {
		st.Source = slacklinev1.TaskSource_TASK_SOURCE_AGENT
	}
	if st.Timestamp == nil {
		st.Timestamp = timestamppb.New(c.cfg.Now())
	}
	c.handleStatus(a, st)
	return connect.NewResponse(&slacklinev1.UpdateStatusResponse{}), nil
}

// handleStatus applies an agent's status update and routes it to the
// framework. Caller holds c.mu.
func (c *Coordinator) handleStatus(a *agent, st *slacklinev1.TaskStatus) {
	now := c.cfg.Now()
	fw := c.frameworks[st.GetFrameworkId()]
	if fw == nil || fw.state == slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED {
		// Nobody will acknowledge it: do so on the framework's behalf.
		a.send(&slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Acknowledge{Acknowledge: &slacklinev1.AcknowledgeCommand{
			FrameworkId: st.GetFrameworkId(), TaskId: st.GetTaskId(), Uuid: st.GetUuid(),
		}}})
		if !taskstate.IsTerminal(st.GetState()) {
			a.send(&slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ShutdownFramework{
				ShutdownFramework: &slacklinev1.ShutdownFrameworkCommand{FrameworkId: st.GetFrameworkId()}}})
		}
		return
	}
	if t := fw.tasks[st.GetTaskId()]; t != nil && t.agentID == a.id {
		t.state, t.status = st.GetState(), st
		if taskstate.IsTerminal(st.GetState()) {
			c.forgetTask(t, now)
		}
	}
	pending := fw.pending[st.GetTaskId()]
	duplicate := false
	for _, p := range pending {
		if p.GetUuid() == st.GetUuid() {
			duplicate = true
			break
		}
	}
	if !duplicate {
		fw.pending[st.GetTaskId()] = append(pending, st)
	}
	fw.send(updateEvent(fw, st))
}

// UpdateOversubscribedResources records an agent's estimate: its total
// revocable capacity, including what revocable tasks already hold (Mesos
// semantics). Any change rescinds the agent's outstanding revocable offers,
// so that what is offered never exceeds the estimate and a grown estimate
// is offered whole; regular offers are never touched.
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
	a, err := c.session(req.Msg.GetAgentId(), req.Msg.GetSessionId())
	if err != nil {
		return nil, err
	}
	if estimate.Equal(a.revocable) {
		return connect.NewResponse(&slacklinev1.UpdateOversubscribedResourcesResponse{}), nil
	}
	now := c.cfg.Now()
	c.log.Debug("revocable estimate", "agent", a.id, "from", a.revocable.String(), "to", estimate.String())
	a.revocable = estimate
	c.alloc.SetAgentRevocable(a.id, estimate)
	for _, o := range a.offers {
		if o.revocable {
			c.metrics.revocableRescinded.Inc()
			c.rescindOffer(o, now)
		}
	}
	c.markDirty(a.id)
	return connect.NewResponse(&slacklinev1.UpdateOversubscribedResourcesResponse{}), nil
}

// markAgentUnreachable handles an agent silent past the timeout: its
// session ends, its offers are rescinded, its tasks become UNREACHABLE (LOST
// for frameworks that are not partition-aware). Caller holds c.mu.
func (c *Coordinator) markAgentUnreachable(a *agent, now time.Time) {
	a.state = slacklinev1.AgentState_AGENT_STATE_UNREACHABLE
	if a.session != nil {
		a.session.end()
		a.session = nil
	}
	if a.inAllocator {
		c.alloc.DeactivateAgent(a.id)
		// Its estimate is stale: the agent sends a fresh one once back.
		a.revocable = resources.Resources{}
		c.alloc.SetAgentRevocable(a.id, a.revocable)
	}
	for _, o := range a.offers {
		c.rescindOffer(o, now)
	}
	c.rescindInverseOffers(a, now)
	told := map[*framework]bool{}
	for key, t := range a.tasks {
		fw := c.frameworks[key.frameworkID]
		st := coordinatorStatus(key.frameworkID, key.taskID, a.id, slacklinev1.TaskState_TASK_STATE_UNREACHABLE,
			slacklinev1.Reason_REASON_AGENT_UNREACHABLE, "agent "+a.info.GetHostname()+" is unreachable", now)
		t.state, t.status = st.GetState(), st
		if fw != nil {
			fw.send(updateEvent(fw, st))
			if !told[fw] {
				told[fw] = true
				fw.send(&slacklinev1.Event{Event: &slacklinev1.Event_Failure{Failure: &slacklinev1.FailureEvent{AgentId: a.id}}})
			}
		}
	}
}

// agentRecord returns the registry write for an agent's current state.
// Caller holds c.mu.
func (c *Coordinator) agentRecord(a *agent) store.Mutation {
	rec := &slacklinev1.AgentRecord{Info: a.info, State: a.state, RegisteredTime: timestamppb.New(a.registeredAt)}
	return store.Put(store.BucketAgents, a.id, mustMarshal(rec))
}

// rebootedAgent returns the agent a host had before it rebooted, when a
// registering agent names it and it is the same host (an agent cannot retire
// another host's agent). Caller holds c.mu.
func (c *Coordinator) rebootedAgent(previousID string, info *slacklinev1.AgentInfo) *agent {
	if previousID == "" || previousID == info.GetId() {
		return nil
	}
	old := c.agents[previousID]
	if old == nil || old.state == slacklinev1.AgentState_AGENT_STATE_GONE {
		return nil
	}
	if old.info.GetHostname() != info.GetHostname() {
		c.log.Warn("agent names a previous agent of another host; ignored", "previous", previousID,
			"previous_hostname", old.info.GetHostname(), "hostname", info.GetHostname())
		return nil
	}
	return old
}

// retireRebootedAgent ends the agent a host had before it rebooted: its
// offers are rescinded, its tasks are gone (LOST for frameworks that are not
// partition-aware) and it becomes GONE, at once rather than after the agent
// timeout. Caller holds c.mu.
func (c *Coordinator) retireRebootedAgent(old *agent, newID string, now time.Time) {
	msg := fmt.Sprintf("host %s rebooted; its agent registered anew as %s", old.info.GetHostname(), newID)
	c.log.Info("agent retired: its host rebooted", "agent", old.id, "new_agent", newID, "tasks", len(old.tasks))
	if old.session != nil {
		old.session.end()
		old.session = nil
	}
	c.retireAgent(old, slacklinev1.TaskState_TASK_STATE_GONE, slacklinev1.Reason_REASON_AGENT_RESTARTED, msg, now)
}
