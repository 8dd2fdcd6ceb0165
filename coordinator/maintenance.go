package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/coordinator/core"
	"github.com/slackline/slackline/coordinator/maintenance"
	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// maintenanceKey is the key of the maintenance record in
// store.BucketMaintenance.
const maintenanceKey = "state"

// maxMachinesPerCall bounds StartMaintenance and StopMaintenance requests.
const maxMachinesPerCall = 10000

// agentMaintenance is an agent's place in the maintenance schedule.
type agentMaintenance struct {
	// scheduled is set when the agent's machine is in the schedule.
	scheduled bool
	machine   maintenance.Machine
	mode      slacklinev1.MachineMode
	// unavailability is the machine's window (nil when UP).
	unavailability *slacklinev1.Unavailability
}

func (m agentMaintenance) same(o agentMaintenance) bool {
	return m.scheduled == o.scheduled && m.machine == o.machine && m.mode == o.mode && proto.Equal(m.unavailability, o.unavailability)
}

// lookupMachine places an agent in a maintenance state. Caller holds c.mu.
func lookupMachine(st *maintenance.State, info *slacklinev1.AgentInfo) agentMaintenance {
	m, ok := st.Lookup(info.GetHostname(), info.GetIp())
	if !ok {
		return agentMaintenance{mode: maintenance.ModeUp}
	}
	am := agentMaintenance{scheduled: true, machine: m, mode: st.Mode(m)}
	if w, ok := st.Window(m); ok {
		am.unavailability = w.Unavailability()
	}
	return am
}

// coreMaintenance is what the core knows of an agent's place in the
// schedule.
func (m agentMaintenance) core() core.Maintenance {
	return core.Maintenance{Mode: m.mode, Machine: m.machine, Unavailability: m.unavailability}
}

// downMachineError refuses the registration of an agent on a DOWN machine.
func downMachineError(m maintenance.Machine) error {
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
		"machine %s is DOWN for maintenance: its agents may not register until StopMaintenance brings it UP", m))
}

// maintenanceError maps the maintenance package's errors to RPC codes.
func maintenanceError(err error) error {
	switch {
	case errors.Is(err, maintenance.ErrInvalid):
		return connect.NewError(connect.CodeInvalidArgument, errors.New(strings.Replace(err.Error(), maintenance.ErrInvalid.Error()+": ", "", 1)))
	case errors.Is(err, maintenance.ErrFailedPrecondition):
		return connect.NewError(connect.CodeFailedPrecondition, errors.New(strings.Replace(err.Error(), maintenance.ErrFailedPrecondition.Error()+": ", "", 1)))
	}
	return connect.NewError(connect.CodeInternal, err)
}

// transition is a maintenance state change: the new state and the machines
// it changes, computed from the current state without modifying it.
type transition func(*maintenance.State) (*maintenance.State, []maintenance.Machine, error)

// transitionWith binds a transition method of maintenance.State to its
// argument.
func transitionWith[A any](method func(*maintenance.State, A) (*maintenance.State, []maintenance.Machine, error), arg A) transition {
	return func(st *maintenance.State) (*maintenance.State, []maintenance.Machine, error) { return method(st, arg) }
}

// changeMaintenance computes a transition once, persists its record and
// installs it, holding persistMu throughout: every change to the
// maintenance state holds it, so the transition is still valid when
// installed. The transition (validating a schedule of 40,000 machines
// takes a tenth of a second) runs without c.mu: c.maint is replaced and
// changed only under persistMu, and a transition does not modify it. It
// takes persistMu and c.mu and returns the RPC error.
func (c *Coordinator) changeMaintenance(ctx context.Context, reason string, tr transition) error {
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	next, _, err := tr(c.maint)
	if err != nil {
		return maintenanceError(err)
	}
	if err := c.persist(ctx, "maintenance", store.Put(store.BucketMaintenance, maintenanceKey, mustMarshal(next.Record()))); err != nil {
		return err
	}
	c.mu.Lock()
	writes := c.installMaintenance(next, reason, c.cfg.Now())
	c.mu.Unlock()
	// The maintenance record is durable; agent records follow even if the
	// caller hangs up (recovery derives them from the modes anyway).
	c.record(ctx, writes...)
	return nil
}

// maintenanceAction is what a maintenance change does to an agent whose
// machine changed mode or window, besides withdrawing its offers and
// inverse offers (they carry the old unavailability): nothing more; a shut
// down (its machine went DOWN: it becomes GONE); or forgetting the GONE
// agent of a machine back UP, so that it may register again.
type maintenanceAction int

const (
	actionReoffer maintenanceAction = iota
	actionShutdown
	actionForget
)

// agentChange is a maintenance change's effect on one agent.
type agentChange struct {
	agent  *agent
	after  agentMaintenance
	action maintenanceAction
}

// planMaintenance returns, changing nothing, what installing next does to
// each agent whose machine changes mode or window, in no particular order.
func planMaintenance(agents map[string]*agent, next *maintenance.State) []agentChange {
	var out []agentChange
	for _, a := range agents {
		ch := agentChange{agent: a, after: lookupMachine(next, a.info)}
		switch {
		case a.maint.same(ch.after):
			continue
		case ch.after.mode == maintenance.ModeDown:
			ch.action = actionShutdown
		case a.maint.mode == maintenance.ModeDown && a.state == slacklinev1.AgentState_AGENT_STATE_GONE:
			ch.action = actionForget
		}
		out = append(out, ch)
	}
	return out
}

// installMaintenance makes next the maintenance state and applies it to
// every agent (see planMaintenance); it returns the agents' registry
// writes. Caller holds c.mu.
func (c *Coordinator) installMaintenance(next *maintenance.State, reason string, now time.Time) []store.Mutation {
	c.maint = next
	var writes []store.Mutation
	for _, ch := range planMaintenance(c.agents, next) {
		a, before := ch.agent, ch.agent.maint
		a.maint = ch.after
		c.deliver(c.core.SetMaintenance(a.id, ch.after.core(), now))
		switch ch.action {
		case actionShutdown:
			writes = append(writes, c.shutdownAgent(a, ch.after.machine, reason, now))
		case actionForget:
			c.log.Info("machine is UP: its agent may register again", "agent", a.id, "machine", before.machine.String())
			c.forgetAgent(a)
			c.core.ForgetAgent(a.id)
			writes = append(writes, store.Delete(store.BucketAgents, a.id))
		}
	}
	c.deliver(c.core.SendInverseOffers(now, c.drainingUsers()))
	return writes
}

// shutdownAgent takes an agent out of the cluster because its machine went
// DOWN: offers and inverse offers are rescinded, its tasks end as
// TASK_STATE_GONE_BY_OPERATOR at once (whether or not the agent answers),
// the agent is told to shut down and its session ends once the command is
// delivered, and it becomes GONE. It returns the agent's registry write.
// Caller holds c.mu.
func (c *Coordinator) shutdownAgent(a *agent, m maintenance.Machine, reason string, now time.Time) store.Mutation {
	msg := fmt.Sprintf("machine %s is DOWN for maintenance (%s)", m, reason)
	c.log.Info("shutting down agent: its machine is DOWN", "agent", a.id, "hostname", a.info.GetHostname(), "machine", m.String(), "tasks", c.core.AgentTaskCount(a.id), "reason", reason)
	if a.session != nil {
		a.send(&slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ShutdownAgent{ShutdownAgent: &slacklinev1.ShutdownAgentCommand{Message: msg}}})
		if a.session != nil {
			a.session.endAfterDelivery()
			a.closing, a.session = a.session, nil
		}
	}
	c.retireAgent(a, slacklinev1.TaskState_TASK_STATE_GONE_BY_OPERATOR, slacklinev1.Reason_REASON_AGENT_REMOVED_BY_OPERATOR, msg, now)
	return a.record()
}

// retireAgent makes an agent GONE: its offers and inverse offers are
// rescinded, its tasks end with state and reason at once, and it leaves the
// allocator. Its session, if any, is the caller's business. Caller holds
// c.mu.
func (c *Coordinator) retireAgent(a *agent, state slacklinev1.TaskState, reason slacklinev1.Reason, msg string, now time.Time) {
	c.deliver(c.core.WithdrawAgent(a.id, now))
	for _, t := range c.core.AgentTasks(a.id) {
		c.finishTask(t, coordinatorStatus(t.FrameworkID, t.Info.GetTaskId(), a.id, state, reason, msg, now), now)
	}
	c.deliver(c.core.RemoveAgent(a.id))
	a.state = slacklinev1.AgentState_AGENT_STATE_GONE
}

// drainingUsers returns, for each active agent on a draining machine, the
// frameworks with tasks there: with those with offers there, the users an
// inverse offer goes to (core.SendInverseOffers). Caller holds c.mu.
func (c *Coordinator) drainingUsers() map[string][]string {
	draining := c.core.Draining()
	if len(draining) == 0 {
		return nil
	}
	out := make(map[string][]string, len(draining))
	for _, id := range draining {
		a := c.agents[id]
		if a == nil || a.state != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
			continue
		}
		seen := map[string]bool{}
		for _, t := range c.core.AgentTasks(id) {
			if !seen[t.FrameworkID] {
				seen[t.FrameworkID] = true
				out[id] = append(out[id], t.FrameworkID)
			}
		}
	}
	return out
}

// answerInverseOffers handles AcceptInverseOffers and DeclineInverseOffers:
// every id must name an outstanding inverse offer of the framework, or the
// call is refused and changes nothing. The answer is kept for
// GetMaintenanceStatus; the framework gets the next inverse offer for the
// agent after the filter's refuse_seconds (default 5 s) if it still uses it.
// It takes persistMu (answers are part of the maintenance state) and c.mu.
func (c *Coordinator) answerInverseOffers(ctx context.Context, header http.Header, frameworkID string, ids []string, filters *slacklinev1.Filters, status maintenance.Status) error {
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	fw, err := c.authorize(ctx, header, frameworkID)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return invalidArgument(errors.New("inverse_offer_ids is empty"))
	}
	if len(ids) > maxOffersPerCall {
		return invalidArgument(fmt.Errorf("%d inverse_offer_ids, at most %d allowed", len(ids), maxOffersPerCall))
	}
	refuse, err := refuseSeconds(filters)
	if err != nil {
		return invalidArgument(err)
	}
	seen := map[string]bool{}
	for i, id := range ids {
		if err := validateID(fmt.Sprintf("inverse_offer_ids[%d]", i), id); err != nil {
			return invalidArgument(err)
		}
		if seen[id] {
			return invalidArgument(fmt.Errorf("inverse offer %q is listed twice", id))
		}
		seen[id] = true
	}
	now := c.cfg.Now()
	answers, err := c.core.AnswerInverseOffers(fw.id(), ids, seconds(refuse), now)
	if err != nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("%w; nothing was answered", err))
	}
	for _, ans := range answers {
		c.maint.RecordAnswer(ans.Machine, fw.id(), status, now)
		if status == maintenance.StatusAccept {
			c.metrics.inverseOffersAccepted.Inc()
		} else {
			c.metrics.inverseOffersDeclined.Inc()
		}
	}
	c.log.Info("inverse offers answered", "framework", fw.id(), "status", status.String(), "count", len(answers))
	return nil
}

func (s schedulerService) AcceptInverseOffers(ctx context.Context, req *connect.Request[slacklinev1.AcceptInverseOffersRequest]) (*connect.Response[slacklinev1.AcceptInverseOffersResponse], error) {
	return respond[slacklinev1.AcceptInverseOffersResponse](s.c.answerInverseOffers(
		ctx, req.Header(), req.Msg.GetFrameworkId(), req.Msg.GetInverseOfferIds(), req.Msg.GetFilters(), maintenance.StatusAccept))
}

func (s schedulerService) DeclineInverseOffers(ctx context.Context, req *connect.Request[slacklinev1.DeclineInverseOffersRequest]) (*connect.Response[slacklinev1.DeclineInverseOffersResponse], error) {
	return respond[slacklinev1.DeclineInverseOffersResponse](s.c.answerInverseOffers(
		ctx, req.Header(), req.Msg.GetFrameworkId(), req.Msg.GetInverseOfferIds(), req.Msg.GetFilters(), maintenance.StatusDecline))
}

func (s operatorService) GetMaintenanceSchedule(ctx context.Context, _ *connect.Request[slacklinev1.GetMaintenanceScheduleRequest]) (*connect.Response[slacklinev1.GetMaintenanceScheduleResponse], error) {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return connect.NewResponse(&slacklinev1.GetMaintenanceScheduleResponse{Schedule: s.c.maint.Schedule()}), nil
}

func (s operatorService) UpdateMaintenanceSchedule(ctx context.Context, req *connect.Request[slacklinev1.UpdateMaintenanceScheduleRequest]) (*connect.Response[slacklinev1.UpdateMaintenanceScheduleResponse], error) {
	return respond[slacklinev1.UpdateMaintenanceScheduleResponse](s.c.changeMaintenance(ctx, "schedule updated",
		transitionWith((*maintenance.State).UpdateSchedule, req.Msg.GetSchedule())))
}

func (s operatorService) StartMaintenance(ctx context.Context, req *connect.Request[slacklinev1.StartMaintenanceRequest]) (*connect.Response[slacklinev1.StartMaintenanceResponse], error) {
	return respond[slacklinev1.StartMaintenanceResponse](s.c.changeMachines(ctx, "StartMaintenance", req.Msg.GetMachines(), (*maintenance.State).StartMaintenance))
}

func (s operatorService) StopMaintenance(ctx context.Context, req *connect.Request[slacklinev1.StopMaintenanceRequest]) (*connect.Response[slacklinev1.StopMaintenanceResponse], error) {
	return respond[slacklinev1.StopMaintenanceResponse](s.c.changeMachines(ctx, "StopMaintenance", req.Msg.GetMachines(), (*maintenance.State).StopMaintenance))
}

// changeMachines runs StartMaintenance or StopMaintenance.
func (c *Coordinator) changeMachines(ctx context.Context, reason string, ids []*slacklinev1.MachineID,
	tr func(*maintenance.State, []*slacklinev1.MachineID) (*maintenance.State, []maintenance.Machine, error)) error {
	if len(ids) > maxMachinesPerCall {
		return invalidArgument(fmt.Errorf("%d machines, at most %d allowed", len(ids), maxMachinesPerCall))
	}
	return c.changeMaintenance(ctx, reason, transitionWith(tr, ids))
}

func (s operatorService) GetMaintenanceStatus(ctx context.Context, _ *connect.Request[slacklinev1.GetMaintenanceStatusRequest]) (*connect.Response[slacklinev1.GetMaintenanceStatusResponse], error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return connect.NewResponse(&slacklinev1.GetMaintenanceStatusResponse{Status: c.clusterStatus()}), nil
}

// machineAgents returns the agents of each scheduled machine. Caller holds c.mu.
func (c *Coordinator) machineAgents() map[maintenance.Machine][]*agent {
	out := map[maintenance.Machine][]*agent{}
	for _, a := range c.agents {
		if a.maint.scheduled {
			out[a.maint.machine] = append(out[a.maint.machine], a)
		}
	}
	for _, list := range out {
		slices.SortFunc(list, func(x, y *agent) int { return strings.Compare(x.id, y.id) })
	}
	return out
}

// machineUsage returns, for a draining machine, what each framework that
// uses it (tasks, offers or inverse offers there) or answered for it has at
// stake. Caller holds c.mu.
func (c *Coordinator) machineUsage(m maintenance.Machine, byMachine map[maintenance.Machine][]*agent, running map[string]int) []maintenance.Usage {
	onMachine := map[string]int{}
	for _, a := range byMachine[m] {
		for _, t := range c.core.AgentTasks(a.id) {
			onMachine[t.FrameworkID]++
		}
	}
	inWindow := map[string]int{}
	if w, ok := c.maint.Window(m); ok {
		for _, wm := range w.Machines {
			for _, a := range byMachine[wm] {
				for _, t := range c.core.AgentTasks(a.id) {
					if t.State == slacklinev1.TaskState_TASK_STATE_RUNNING {
						inWindow[t.FrameworkID]++
					}
				}
			}
		}
	}
	ids := map[string]bool{}
	for id := range onMachine {
		ids[id] = true
	}
	for _, a := range byMachine[m] {
		for _, id := range c.core.AgentInverseFrameworks(a.id) {
			ids[id] = true
		}
		for _, o := range c.core.AgentOffers(a.id) {
			ids[o.FrameworkID] = true
		}
	}
	for id := range c.maint.Answers(m) {
		ids[id] = true
	}
	var out []maintenance.Usage
	for id := range ids {
		u := maintenance.Usage{FrameworkID: id, TasksOnMachine: onMachine[id], Running: running[id], RunningInWindow: inWindow[id]}
		if fw := c.frameworks[id]; fw != nil {
			u.MinAvailable = int(fw.info.GetMinAvailableTasks())
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(x, y maintenance.Usage) int { return strings.Compare(x.FrameworkID, y.FrameworkID) })
	return out
}

// runningTasks counts each framework's RUNNING tasks. Caller holds c.mu.
func (c *Coordinator) runningTasks() map[string]int {
	out := map[string]int{}
	for id := range c.frameworks {
		for t := range c.core.FrameworkTasks(id) {
			if t.State == slacklinev1.TaskState_TASK_STATE_RUNNING {
				out[id]++
			}
		}
	}
	return out
}

// clusterStatus builds GetMaintenanceStatus's answer. Caller holds c.mu.
func (c *Coordinator) clusterStatus() *slacklinev1.ClusterStatus {
	out := &slacklinev1.ClusterStatus{}
	byMachine := c.machineAgents()
	running := c.runningTasks()
	for _, m := range c.maint.Machines() {
		if c.maint.Mode(m) == maintenance.ModeDown {
			out.DownMachines = append(out.DownMachines, m.Proto())
			continue
		}
		w, _ := c.maint.Window(m)
		dm := &slacklinev1.DrainingMachine{Id: m.Proto(), Unavailability: w.Unavailability()}
		for _, a := range byMachine[m] {
			dm.AgentIds = append(dm.AgentIds, a.id)
		}
		answers := c.maint.Answers(m)
		for _, u := range c.machineUsage(m, byMachine, running) {
			st := &slacklinev1.InverseOfferFrameworkStatus{
				FrameworkId: u.FrameworkID, Status: maintenance.StatusUnknown,
				TasksOnMachine: uint32(u.TasksOnMachine), RunningTasks: uint32(u.Running),
				MinAvailableTasks: uint32(u.MinAvailable), BreaksMinAvailable: u.BreaksMinAvailable(),
			}
			if fw := c.frameworks[u.FrameworkID]; fw != nil {
				st.FrameworkName = fw.info.GetName()
			}
			if ans, ok := answers[u.FrameworkID]; ok {
				st.Status, st.Timestamp = ans.Status, timestamppb.New(ans.Time)
			}
			dm.Statuses = append(dm.Statuses, st)
		}
		out.DrainingMachines = append(out.DrainingMachines, dm)
	}
	return out
}

// autoDown takes DOWN, without an operator, the draining machines whose
// window has started and whose users all accepted (Config.AutoDownAfterAccept).
// It takes c.mu, then changeMaintenance its locks.
func (c *Coordinator) autoDown(ctx context.Context) {
	c.mu.Lock()
	now := c.cfg.Now()
	byMachine := c.machineAgents()
	running := c.runningTasks()
	var ready []*slacklinev1.MachineID
	for _, m := range c.maint.Machines() {
		if c.maint.Mode(m) == maintenance.ModeDraining && c.maint.ReadyForAutoDown(m, now, c.machineUsage(m, byMachine, running)) {
			ready = append(ready, m.Proto())
		}
	}
	c.mu.Unlock()
	if len(ready) == 0 {
		return
	}
	err := c.changeMaintenance(ctx, "every framework accepted and the window started", transitionWith((*maintenance.State).StartMaintenance, ready))
	if err != nil {
		// A concurrent operator call may have changed the schedule: the next
		// tick decides again.
		c.log.Warn("automatic maintenance start", "err", err)
		return
	}
	c.log.Info("machines taken DOWN automatically", "machines", len(ready))
}
