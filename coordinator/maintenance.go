package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/coordinator/core"
	"github.com/slackline/slackline/coordinator/maintenance"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// maintenanceKey is the key of the maintenance record in
// store.BucketMaintenance.
const maintenanceKey = "state"

// maxMachinesPerCall bounds StartMaintenance and StopMaintenance requests.
const maxMachinesPerCall = 10000

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

// transition is a maintenance state change (core.Transition).
type transition = core.Transition

// transitionWith binds a transition method of maintenance.State to its
// argument.
func transitionWith[A any](method func(*maintenance.State, A) (*maintenance.State, []maintenance.Machine, error), arg A) transition {
	return func(st *maintenance.State) (*maintenance.State, []maintenance.Machine, error) { return method(st, arg) }
}

// changeMaintenance runs a maintenance transition as the core's persist
// step (core.PlanMaintenance) in one turn of the maintenance state's
// scope (order.go): every change to the maintenance state takes one, so
// the transition is computed once and is still valid when installed. The
// transition (validating a schedule of 40,000 machines takes a tenth of
// a second) is computed without c.mu: the core's state changes only in
// such a turn, and a transition does not modify it. Its record is
// written, then the core installs it (core.Apply: offers rescinded,
// agents of machines gone DOWN shut down, GONE agents of machines back
// UP forgotten, inverse offers sent) and the agents' records follow,
// even if the caller hangs up (recovery derives them from the modes
// anyway). It takes a turn and c.mu and returns the RPC error.
func (c *Coordinator) changeMaintenance(ctx context.Context, reason string, tr transition) error {
	defer c.takeTurn(scopeMaintenance)()
	return c.changeMaintenanceInTurn(ctx, reason, func() transition { return tr })
}

// changeMaintenanceInTurn is changeMaintenance for a caller that holds
// the turn of the maintenance state's scope (turns do not nest): decide,
// run under c.mu in the turn, returns the transition to make from the
// state current then, or nil to change nothing. It takes c.mu.
func (c *Coordinator) changeMaintenanceInTurn(ctx context.Context, reason string, decide func() transition) error {
	c.mu.Lock()
	cur := c.core.Maintenance()
	tr := decide()
	c.mu.Unlock()
	if tr == nil {
		return nil
	}
	r, err := core.PlanMaintenance(cur, tr, reason, c.cfg.Now())
	if err != nil {
		return maintenanceError(err)
	}
	if err := c.write(ctx, "maintenance", r); err != nil {
		return err
	}
	c.mu.Lock()
	applied := c.core.Apply(r.Apply)
	writes := registryWrites(applied.After)
	c.applyAgentChanges(&applied)
	c.mu.Unlock()
	c.record(ctx, writes...)
	return nil
}

// applyAgentChanges delivers a core Ready whose records (After) the
// caller writes, and applies its agent changes to the shell's own
// records: the sessions of agents shut down end once their
// ShutdownAgentCommand is delivered, forgotten agents are dropped. Caller
// holds c.mu.
func (c *Coordinator) applyAgentChanges(r *core.Ready) {
	shutDown, forgotten := r.ShutDown, r.ForgottenAgents
	r.After, r.ShutDown, r.ForgottenAgents = nil, nil, nil
	for _, id := range shutDown {
		if a := c.agents[id]; a != nil {
			c.log.Info("shutting down agent: its machine is DOWN", "agent", a.ID, "hostname", a.Info.GetHostname(), "machine", a.Maint.Machine.String())
		}
	}
	c.deliver(*r)
	for _, id := range shutDown {
		if a := c.agents[id]; a != nil && a.session != nil {
			a.session.endAfterDelivery()
			a.closing, a.session = a.session, nil
		}
	}
	for _, id := range forgotten {
		if a := c.agents[id]; a != nil {
			c.log.Info("agent forgotten: gone past the retention, or its machine is UP again and it may register anew", "agent", id, "hostname", a.Info.GetHostname())
			a.endSession()
			delete(c.agents, id)
		}
	}
}

// answerInverseOffers handles AcceptInverseOffers and DeclineInverseOffers:
// every id must name an outstanding inverse offer of the framework, or the
// call is refused and changes nothing. The answer is kept for
// GetMaintenanceStatus; the framework gets the next inverse offer for the
// agent after the filter's refuse_seconds (default 5 s) if it still uses it.
// It takes a turn of the maintenance state's scope (answers are part of
// it) and c.mu.
func (c *Coordinator) answerInverseOffers(ctx context.Context, header http.Header, frameworkID string, ids []string, filters *slacklinev1.Filters, status maintenance.Status) error {
	// Authorized before the maintenance state's turn (a caller without
	// the right queues nothing there) and again in it.
	if err := c.authorizeLocked(ctx, header, frameworkID); err != nil {
		return err
	}
	defer c.takeTurn(scopeMaintenance)()
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
	answers, err := c.core.AnswerInverseOffers(fw.id(), ids, seconds(refuse), status, now)
	if err != nil {
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("%w; nothing was answered", err))
	}
	for range answers {
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
	return connect.NewResponse(&slacklinev1.GetMaintenanceScheduleResponse{Schedule: s.c.core.Maintenance().Schedule()}), nil
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
		if a.Maint.Scheduled() {
			out[a.Maint.Machine] = append(out[a.Maint.Machine], a)
		}
	}
	for _, list := range out {
		slices.SortFunc(list, func(x, y *agent) int { return strings.Compare(x.ID, y.ID) })
	}
	return out
}

// machineUsage returns, for a draining machine, what each framework that
// uses it (tasks, offers or inverse offers there) or answered for it has at
// stake. Caller holds c.mu.
func (c *Coordinator) machineUsage(m maintenance.Machine, byMachine map[maintenance.Machine][]*agent, running map[string]int) []maintenance.Usage {
	onMachine := map[string]int{}
	for _, a := range byMachine[m] {
		for _, t := range c.core.AgentTasks(a.ID) {
			onMachine[t.FrameworkID]++
		}
	}
	inWindow := map[string]int{}
	if w, ok := c.core.Maintenance().Window(m); ok {
		for _, wm := range w.Machines {
			for _, a := range byMachine[wm] {
				for _, t := range c.core.AgentTasks(a.ID) {
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
		for _, id := range c.core.AgentInverseFrameworks(a.ID) {
			ids[id] = true
		}
		for _, o := range c.core.AgentOffers(a.ID) {
			ids[o.FrameworkID] = true
		}
	}
	for id := range c.core.Maintenance().Answers(m) {
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
	for _, m := range c.core.Maintenance().Machines() {
		if c.core.Maintenance().Mode(m) == maintenance.ModeDown {
			out.DownMachines = append(out.DownMachines, m.Proto())
			continue
		}
		w, _ := c.core.Maintenance().Window(m)
		dm := &slacklinev1.DrainingMachine{Id: m.Proto(), Unavailability: w.Unavailability()}
		for _, a := range byMachine[m] {
			dm.AgentIds = append(dm.AgentIds, a.ID)
		}
		answers := c.core.Maintenance().Answers(m)
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
// When some look ready it takes the maintenance state's turn and decides
// again in it, so that a decline or a later window installed while it
// waited keeps the machine DRAINING. It takes c.mu, then a turn.
func (c *Coordinator) autoDown(ctx context.Context) {
	c.mu.Lock()
	ready := c.readyForAutoDown()
	c.mu.Unlock()
	if len(ready) == 0 {
		return
	}
	defer c.takeTurn(scopeMaintenance)()
	err := c.changeMaintenanceInTurn(ctx, "every framework accepted and the window started", func() transition {
		if ready = c.readyForAutoDown(); len(ready) == 0 {
			return nil
		}
		return transitionWith((*maintenance.State).StartMaintenance, ready)
	})
	if err != nil {
		c.log.Warn("automatic maintenance start: the next tick decides again", "err", err)
		return
	}
	if len(ready) > 0 {
		c.log.Info("machines taken DOWN automatically", "machines", len(ready))
	}
}

// readyForAutoDown lists the draining machines whose window has started
// and whose users all accepted. Caller holds c.mu.
func (c *Coordinator) readyForAutoDown() []*slacklinev1.MachineID {
	now := c.cfg.Now()
	byMachine := c.machineAgents()
	running := c.runningTasks()
	var ready []*slacklinev1.MachineID
	st := c.core.Maintenance()
	for _, m := range st.Machines() {
		if st.Mode(m) == maintenance.ModeDraining && st.ReadyForAutoDown(m, now, c.machineUsage(m, byMachine, running)) {
			ready = append(ready, m.Proto())
		}
	}
	return ready
}
