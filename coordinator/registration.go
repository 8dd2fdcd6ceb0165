package coordinator

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/coordinator/core"
	"github.com/slackline/slackline/coordinator/maintenance"
	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/ids"
	"github.com/slackline/slackline/internal/taskstate"
	"github.com/slackline/slackline/resources"
)

// registration is a validated RegisterRequest. info is a copy; its Id is
// empty for an agent new to the cluster until register assigns one.
type registration struct {
	info       *slacklinev1.AgentInfo
	total      resources.Resources
	tasks      []reportedTask
	previousID string // the agent the host had before it rebooted
}

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

func parseRegistration(req *slacklinev1.RegisterRequest) (registration, error) {
	if v := req.GetProtocolVersion(); v != slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1 {
		return registration{}, invalidf("protocol_version %v is not supported (this coordinator speaks AGENT_PROTOCOL_VERSION_1)", v)
	}
	info := req.GetAgentInfo()
	if info == nil {
		return registration{}, invalidf("agent_info is required")
	}
	if info.GetId() != "" {
		if err := validateID("agent_info.id", info.GetId()); err != nil {
			return registration{}, err
		}
	}
	if err := validateHostname("agent_info.hostname", info.GetHostname()); err != nil {
		return registration{}, err
	}
	total, revocable, err := resources.FromProto(info.GetResources())
	if err != nil {
		return registration{}, fmt.Errorf("%w: agent_info.resources: %w", errInvalid, err)
	}
	if !revocable.IsEmpty() {
		return registration{}, invalidf("agent_info.resources must not be revocable (got %s); report estimates with UpdateOversubscribedResources", revocable)
	}
	for _, at := range info.GetAttributes() {
		if at.GetName() == "" {
			return registration{}, invalidf("agent_info.attributes has an attribute without a name")
		}
		if err := validateText("agent_info.attributes name", at.GetName(), maxLabelLength); err != nil {
			return registration{}, err
		}
		if err := validateText("agent_info.attributes value", at.GetValue(), maxLabelLength); err != nil {
			return registration{}, err
		}
	}
	reg := registration{info: proto.CloneOf(info), total: total, previousID: req.GetPreviousAgentId()}
	for i, at := range req.GetTasks() {
		t := at.GetTask()
		if err := validateID(fmt.Sprintf("tasks[%d].framework_id", i), at.GetFrameworkId()); err != nil {
			return registration{}, err
		}
		if err := validateID(fmt.Sprintf("tasks[%d].task.task_id", i), t.GetTaskId()); err != nil {
			return registration{}, err
		}
		res, rev, err := resources.FromProto(t.GetResources())
		if err != nil {
			return registration{}, fmt.Errorf("%w: tasks[%d] resources: %w", errInvalid, i, err)
		}
		role := "" // filled from the framework's roles when the resources name none
		if list := t.GetResources(); len(list) > 0 && list[0].GetRole() != "" {
			role = list[0].GetRole()
			if err := validateRole(role); err != nil {
				return registration{}, fmt.Errorf("tasks[%d]: %w", i, err)
			}
		}
		reg.tasks = append(reg.tasks, reportedTask{
			frameworkID: at.GetFrameworkId(), framework: at.GetFramework(), info: t,
			state: at.GetState(), role: role, resources: res, revocable: rev,
		})
	}
	return reg, nil
}

// registrationPlan is what a registration writes before its reply and then
// applies: the agent's record (unless ACTIVE and unchanged), the agent its
// host had before a reboot to retire, and that one's GONE record.
type registrationPlan struct {
	registeredAt time.Time // the first registration's, or now
	writes       []store.Mutation
	retire       string // agent id, "" for none
	// ignoredPrevious is the hostname of another host's agent named as the
	// previous one: an agent cannot retire it.
	ignoredPrevious string
}

// planRegistration decides a registration from the agents and the
// maintenance state as they are, changing nothing. An agent of a DOWN
// machine and a GONE agent are refused (FailedPrecondition); a known agent
// keeps its registration time. reg.info.Id must be set.
func planRegistration(agents map[string]*agent, maint *maintenance.State, reg registration, now time.Time) (registrationPlan, error) {
	if am := lookupMachine(maint, reg.info); am.mode == maintenance.ModeDown {
		return registrationPlan{}, downMachineError(am.machine)
	}
	id := reg.info.GetId()
	plan := registrationPlan{registeredAt: now}
	write := true
	if a := agents[id]; a != nil {
		if a.state == slacklinev1.AgentState_AGENT_STATE_GONE {
			return registrationPlan{}, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("agent %q was removed from the cluster; restart it with an empty work dir to register anew", id))
		}
		plan.registeredAt = a.registeredAt
		write = a.state != slacklinev1.AgentState_AGENT_STATE_ACTIVE || !proto.Equal(a.info, reg.info)
	}
	if write {
		plan.writes = append(plan.writes, agentRecord(id, reg.info, slacklinev1.AgentState_AGENT_STATE_ACTIVE, plan.registeredAt))
	}
	old := agents[reg.previousID]
	switch {
	case old == nil || reg.previousID == id || old.state == slacklinev1.AgentState_AGENT_STATE_GONE:
		// nothing to retire
	case old.info.GetHostname() != reg.info.GetHostname():
		plan.ignoredPrevious = old.info.GetHostname()
	default:
		plan.retire = old.id
		plan.writes = append(plan.writes, agentRecord(old.id, old.info, slacklinev1.AgentState_AGENT_STATE_GONE, old.registeredAt))
	}
	return plan, nil
}

// register admits an agent (new, re-registering, or a rebooted host's new
// one) and returns its id, session id and the interval to heartbeat at. It takes c.mu to plan and to
// apply, and no persistMu: registrations share fsyncs.
func (c *Coordinator) register(ctx context.Context, reg registration) (agentID, sessionID string, heartbeatInterval time.Duration, err error) {
	if reg.info.GetId() == "" {
		reg.info.Id = ids.New()
	}
	now := c.cfg.Now()
	c.mu.Lock()
	plan, err := planRegistration(c.agents, c.maint, reg, now)
	if err == nil {
		err = c.checkAgentIdentity(reg)
	}
	c.mu.Unlock()
	if err != nil {
		return "", "", 0, err
	}
	if plan.ignoredPrevious != "" {
		c.log.Warn("agent names a previous agent of another host; ignored", "previous", reg.previousID,
			"previous_hostname", plan.ignoredPrevious, "hostname", reg.info.GetHostname())
	}
	if err := c.persist(ctx, "agent", plan.writes...); err != nil {
		return "", "", 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a, err := c.applyRegistration(reg, plan, now)
	if err != nil {
		return "", "", 0, err
	}
	return a.id, a.session.id, c.agentHeartbeatInterval(now), nil
}

// applyRegistration installs a registration whose records are durable,
// re-checking what may have changed since it was planned: the machine may
// have gone DOWN, the rebooted agent may be GONE already. The agent gets a
// new session and its reported tasks are reconciled.
func (c *Coordinator) applyRegistration(reg registration, plan registrationPlan, now time.Time) (*agent, error) {
	am := lookupMachine(c.maint, reg.info)
	if am.mode == maintenance.ModeDown {
		// Went DOWN while the record was written; recovery and the next
		// registration sort the record out.
		return nil, downMachineError(am.machine)
	}
	if old := c.agents[plan.retire]; old != nil && old.state != slacklinev1.AgentState_AGENT_STATE_GONE {
		// Its tasks are gone (LOST for frameworks that are not
		// partition-aware) at once rather than after the agent timeout.
		c.log.Info("agent retired: its host rebooted", "agent", old.id, "new_agent", reg.info.GetId(), "tasks", len(old.tasks))
		old.endSession()
		c.retireAgent(old, slacklinev1.TaskState_TASK_STATE_GONE, slacklinev1.Reason_REASON_AGENT_RESTARTED,
			fmt.Sprintf("host %s rebooted; its agent registered anew as %s", old.info.GetHostname(), reg.info.GetId()), now)
	}
	a := c.agents[reg.info.GetId()]
	if a == nil {
		a = newAgent(reg.info.GetId(), plan.registeredAt)
		c.agents[a.id] = a
	}
	a.endSession()
	previous := a.state
	// Offers made from the old total may no longer fit; offers and inverse
	// offers made under another window carry the wrong unavailability: the
	// core rescinds them.
	c.deliver(c.core.RegisterAgent(agentSpec(a.id, reg.info, reg.total, am), now))
	a.info, a.total = reg.info, reg.total
	a.state = slacklinev1.AgentState_AGENT_STATE_ACTIVE
	a.session = newOutbox[*slacklinev1.AgentCommand]()
	a.maint = am
	c.reconcileAgentTasks(a, reg.tasks, now)
	c.log.Info("agent registered", "agent", a.id, "hostname", a.info.GetHostname(), "resources", reg.total.String(), "tasks", len(reg.tasks), "previous_state", previous.String())
	return a, nil
}

// reconcileAgentTasks merges the tasks a (re-)registering agent reports with
// what the coordinator knew. Caller holds c.mu.
func (c *Coordinator) reconcileAgentTasks(a *agent, reported []reportedTask, now time.Time) {
	seen := map[taskKey]bool{}
	clear(a.reported)
	for _, r := range reported {
		key := taskKey{r.frameworkID, r.info.GetTaskId()}
		if !c.trustReport(a, r) {
			// Not a task the coordinator gave this agent, or not with these
			// resources: it is not adopted, and it is killed.
			c.log.Warn("agent reports a task it was not given; killing it", "agent", a.id, "hostname", a.info.GetHostname(),
				"framework", r.frameworkID, "task", key.taskID, "resources", r.resources.Add(r.revocable).String())
			if !taskstate.IsTerminal(r.state) {
				a.send(killTaskCommand(r.frameworkID, key.taskID))
			}
			continue
		}
		seen[key] = true
		if taskstate.IsTerminal(r.state) {
			a.reported[key] = true
			continue // the agent reports its terminal update itself
		}
		fw := c.frameworks[r.frameworkID]
		if fw == nil && r.framework != nil && r.framework.GetId() == r.frameworkID {
			fw = c.adoptFramework(a, r.framework, now)
		}
		if fw == nil || fw.state == slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED {
			a.send(shutdownFrameworkCommand(r.frameworkID))
			continue
		}
		if r.role == "" {
			r.role = fw.info.GetRoles()[0]
		}
		t := fw.tasks[key.taskID]
		switch {
		case t == nil:
			t = &task{
				info: r.info, frameworkID: r.frameworkID, agentID: a.id, role: r.role,
				resources: r.resources, revocable: r.revocable, state: r.state,
			}
			put(&fw.tasks, key.taskID, t)
			a.tasks[key] = t
			c.core.Claim(r.frameworkID, r.role, a.id, r.resources, r.revocable)
		case t.state == slacklinev1.TaskState_TASK_STATE_UNREACHABLE && !fw.partitionAware():
			// The framework was told the task is LOST and may have replaced
			// it: like Mesos, kill what comes back.
			a.send(killTaskCommand(fw.id(), key.taskID))
		case t.state != r.state:
			t.state = r.state
			t.status = coordinatorStatus(fw.id(), key.taskID, a.id, r.state, slacklinev1.Reason_REASON_RECONCILIATION,
				"agent re-registered and reports the task "+r.state.String(), now)
			fw.send(updateEvent(fw, t.status))
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

// agentSpec is what the core knows of an agent.
func agentSpec(id string, info *slacklinev1.AgentInfo, total resources.Resources, am agentMaintenance) core.AgentSpec {
	return core.AgentSpec{ID: id, Hostname: info.GetHostname(), Attributes: info.GetAttributes(), Total: total, Maint: am.core()}
}

// adoptFramework adds, DISCONNECTED with its failover timeout running from
// now, a framework that an agent reports and the coordinator never saw (its
// registry was lost). It returns nil for an invalid one.
func (c *Coordinator) adoptFramework(a *agent, reported *slacklinev1.FrameworkInfo, now time.Time) *framework {
	info, err := normalizeFrameworkInfo(reported)
	if err != nil {
		c.log.Warn("agent reports a task of an invalid framework; shutting it down", "agent", a.id, "framework", reported.GetId(), "err", err)
		return nil
	}
	fw := newFramework(info, slacklinev1.FrameworkState_FRAMEWORK_STATE_DISCONNECTED, now)
	fw.disconnectedAt, fw.failoverDeadline = now, now.Add(failoverTimeout(info))
	c.frameworks[info.GetId()] = fw
	c.addFramework(info)
	return fw
}
