package coordinator

import (
	"context"
	"fmt"
	"log/slog"
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
	"github.com/slackline/slackline/internal/auth"
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
	proposedID string // the id a fresh agent asks for (proposedAgentID)
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
	if p := req.GetProposedAgentId(); p != "" {
		if err := validateID("proposed_agent_id", p); err != nil {
			return registration{}, err
		}
	}
	reg := registration{info: proto.CloneOf(info), total: total, previousID: req.GetPreviousAgentId(), proposedID: req.GetProposedAgentId()}
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
// applies: the agent's record (unless ACTIVE and unchanged), the agents its
// host had before (a reboot, a wiped work dir, another process with the
// same certificate) to retire, and their GONE records.
type registrationPlan struct {
	registeredAt time.Time // the first registration's, or now
	writes       []store.Mutation
	retire       []string // agent ids
	// ignoredPrevious is the hostname of another host's agent named as the
	// previous one: an agent cannot retire it.
	ignoredPrevious string
}

// One host, one agent: a hostname (compared without case, as DNS names and
// certificates compare them) has at most one agent that is not GONE. A new
// agent of a host retires the host's other agents, ACTIVE or not, as
// previous_agent_id asks after a reboot: like Kubernetes' one Node object
// per name and Mesos' removal of the old agent at an address a new one
// registers from. Refusing instead would lock a node whose work dir was
// wiped out until its old agent is forgotten (Limits.GoneAgentRetention),
// and would let whoever registers first keep the hostname; retiring gives
// a holder of the host's certificate nothing it did not have (it could
// already name the old agent as previous), and no longer lets it add
// agents beside the real one.

// hostKey is the key hostnames are compared by: DNS names and x509 name
// checks ignore case, so "HOST-A" and "host-a" are one host.
func hostKey(hostname string) string { return strings.ToLower(hostname) }

// addAgent adds a to the agents and the host index. Caller holds c.mu.
func (c *Coordinator) addAgent(a *agent) {
	c.agents[a.id] = a
	key := hostKey(a.info.GetHostname())
	c.hosts[key] = append(c.hosts[key], a)
}

// forgetAgent removes a from the agents and the host index. Caller holds
// c.mu.
func (c *Coordinator) forgetAgent(a *agent) {
	delete(c.agents, a.id)
	c.core.ForgetAgentTasks(a.id)
	key := hostKey(a.info.GetHostname())
	if c.hosts[key] = slices.DeleteFunc(c.hosts[key], func(o *agent) bool { return o == a }); len(c.hosts[key]) == 0 {
		delete(c.hosts, key)
	}
}

// agentsOnHost returns the agents registered with hostname, any state.
// Caller holds c.mu.
func (c *Coordinator) agentsOnHost(hostname string) []*agent { return c.hosts[hostKey(hostname)] }

// planRegistration decides a registration from the agents, those of its
// host (sameHost: the agents registered with its hostname, any id and
// state) and the maintenance state as they are, changing nothing. An agent
// of a DOWN machine and a GONE agent are refused (FailedPrecondition); a
// known agent keeps its registration time; the host's other agents that
// are not GONE are retired. reg.info.Id must be set.
func planRegistration(agents map[string]*agent, sameHost []*agent, maint *maintenance.State, reg registration, now time.Time) (registrationPlan, error) {
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
	if old := agents[reg.previousID]; old != nil && hostKey(old.info.GetHostname()) != hostKey(reg.info.GetHostname()) {
		plan.ignoredPrevious = old.info.GetHostname()
	}
	for _, old := range sameHost {
		if old.id == id || old.state == slacklinev1.AgentState_AGENT_STATE_GONE {
			continue
		}
		plan.retire = append(plan.retire, old.id)
		plan.writes = append(plan.writes, agentRecord(old.id, old.info, slacklinev1.AgentState_AGENT_STATE_GONE, old.registeredAt))
	}
	slices.Sort(plan.retire)
	return plan, nil
}

// proposedAgentID is the id of a fresh agent (agent_info.id empty): the
// one it proposes when no agent has it, or when the agent that has it is
// of the same hostname and not GONE (a retry of a registration whose answer
// the agent never got: it re-registers as that agent); a new id
// otherwise, so that a proposal never claims another host's agent.
func proposedAgentID(agents map[string]*agent, reg registration) string {
	p := reg.proposedID
	if p == "" {
		return ids.New()
	}
	// The hostname is compared exactly, as checkAgentIdentity compares it:
	// a proposal it would refuse gets a new id instead.
	if a := agents[p]; a != nil && (a.info.GetHostname() != reg.info.GetHostname() || a.state == slacklinev1.AgentState_AGENT_STATE_GONE) {
		return ids.New()
	}
	return p
}

// register admits an agent (new, re-registering, or a rebooted host's new
// one) and returns its id, session id and the interval to heartbeat at. It takes c.mu to plan and to
// apply, and no persistMu: registrations share fsyncs.
func (c *Coordinator) register(ctx context.Context, reg registration) (agentID, sessionID string, heartbeatInterval time.Duration, err error) {
	now := c.cfg.Now()
	if err := c.admitRegistration(ctx, reg, now); err != nil {
		return "", "", 0, err
	}
	c.mu.Lock()
	if reg.info.GetId() == "" {
		reg.info.Id = proposedAgentID(c.agents, reg)
	}
	plan, err := planRegistration(c.agents, c.agentsOnHost(reg.info.GetHostname()), c.maint, reg, now)
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
	a, late, err := c.applyRegistration(reg, plan, now)
	if err == nil {
		agentID, sessionID, heartbeatInterval = a.id, a.session.id, c.agentHeartbeatInterval(now)
	}
	c.mu.Unlock()
	if len(late) > 0 {
		c.record(ctx, late...)
	}
	return agentID, sessionID, heartbeatInterval, err
}

// admitRegistration refuses, before anything is planned, a registration
// of a principal registering agents faster than
// Limits.AgentRegistrationsPerMinute allows (ResourceExhausted), or with
// more resources than its register_agents rule's max_resources
// (PermissionDenied, naming the cap). It takes c.mu.
func (c *Coordinator) admitRegistration(ctx context.Context, reg registration, now time.Time) error {
	if p := auth.FromContext(ctx); p != nil {
		c.mu.Lock()
		ok, wait := c.registrations.allow(p.Name, now)
		c.mu.Unlock()
		if !ok {
			c.bounds.hit("agent_registrations", "agent registration refused: its principal registers agents faster than it may",
				"principal", p.Name, "hostname", reg.info.GetHostname())
			return exhausted("principal %q registers agents faster than %d a minute (after a burst of %d): register again in %s",
				p.Name, c.cfg.Limits.AgentRegistrationsPerMinute, c.cfg.Limits.AgentRegistrationBurst, (wait + time.Second - 1).Truncate(time.Second))
		}
	}
	return c.cfg.Authz.CheckAgentResources(ctx, reg.info.GetHostname(), reg.total)
}

// applyRegistration installs a registration whose records are durable,
// re-checking what may have changed since it was planned: the machine may
// have gone DOWN, the rebooted agent may be GONE already, another agent of
// the host may have registered meanwhile (it is retired too; late are its
// GONE records, to write after). The agent gets a new session and its
// reported tasks are reconciled.
func (c *Coordinator) applyRegistration(reg registration, plan registrationPlan, now time.Time) (a *agent, late []store.Mutation, err error) {
	am := lookupMachine(c.maint, reg.info)
	if am.mode == maintenance.ModeDown {
		// Went DOWN while the record was written; recovery and the next
		// registration sort the record out.
		return nil, nil, downMachineError(am.machine)
	}
	// The host's other agents as they are now, not as planned: another
	// registration of the host may have been applied in between; whichever
	// applies last is the host's agent. The GONE records of agents the plan
	// did not know of are written after (late).
	for _, old := range slices.Clone(c.agentsOnHost(reg.info.GetHostname())) {
		if old.id == reg.info.GetId() || old.state == slacklinev1.AgentState_AGENT_STATE_GONE {
			continue
		}
		if !slices.Contains(plan.retire, old.id) {
			late = append(late, agentRecord(old.id, old.info, slacklinev1.AgentState_AGENT_STATE_GONE, old.registeredAt))
		}
		// Its tasks are gone (LOST for frameworks that are not
		// partition-aware) at once rather than after the agent timeout.
		level := slog.LevelInfo
		if old.state == slacklinev1.AgentState_AGENT_STATE_ACTIVE && reg.previousID != old.id {
			// A live agent replaced without being named: a wiped work dir,
			// or a second process with the host's certificate.
			level = slog.LevelWarn
		}
		c.log.Log(context.Background(), level, "agent retired: its host registered a new agent", "agent", old.id, "hostname", old.info.GetHostname(),
			"state", old.state.String(), "new_agent", reg.info.GetId(), "named_as_previous", reg.previousID == old.id, "tasks", c.core.AgentTaskCount(old.id))
		old.endSession()
		c.retireAgent(old, slacklinev1.TaskState_TASK_STATE_GONE, slacklinev1.Reason_REASON_AGENT_RESTARTED,
			fmt.Sprintf("host %s registered a new agent, %s", old.info.GetHostname(), reg.info.GetId()), now)
	}
	a = c.agents[reg.info.GetId()]
	if a == nil {
		a = newAgent(reg.info.GetId(), plan.registeredAt)
		a.info = reg.info
		c.addAgent(a)
	} else if hostKey(a.info.GetHostname()) != hostKey(reg.info.GetHostname()) {
		// Without authorization an agent id may change hosts.
		c.forgetAgent(a)
		a.info = reg.info
		c.addAgent(a)
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
	return a, late, nil
}

// reconcileAgentTasks merges the tasks a (re-)registering agent reports with
// what the coordinator knew (core.RegisterTasks): the shell decides which
// it trusts (trustReport) and adopts the frameworks it did not know that
// trusted live tasks carry. Caller holds c.mu.
func (c *Coordinator) reconcileAgentTasks(a *agent, reported []reportedTask, now time.Time) {
	reports := make([]core.Report, 0, len(reported))
	for _, r := range reported {
		trusted := c.trustReport(a, r)
		if trusted && !taskstate.IsTerminal(r.state) && c.frameworks[r.frameworkID] == nil &&
			r.framework != nil && r.framework.GetId() == r.frameworkID {
			c.adoptFramework(a, r.framework, now)
		}
		reports = append(reports, core.Report{Trusted: trusted, Task: &core.Task{
			Info: r.info, FrameworkID: r.frameworkID, AgentID: a.id, Role: r.role,
			Resources: r.resources, Revocable: r.revocable, State: r.state,
		}})
	}
	ready := c.core.RegisterTasks(a.id, reports, frameworkStates{c}, now)
	for _, t := range ready.Untrusted {
		// Not a task the coordinator gave this agent, or not with these
		// resources: it is not adopted, and it is killed.
		c.log.Warn("agent reports a task it was not given; killing it", "agent", a.id, "hostname", a.info.GetHostname(),
			"framework", t.FrameworkID, "task", t.Info.GetTaskId(), "resources", t.Resources.Add(t.Revocable).String())
	}
	c.deliver(ready)
}

// frameworkStates tells the core's RegisterTasks the frameworks' states,
// which are still the shell's records. Caller holds c.mu.
type frameworkStates struct{ c *Coordinator }

func (s frameworkStates) Framework(id string) (live bool, firstRole string, partitionAware bool) {
	fw := s.c.frameworks[id]
	if fw == nil || fw.state == slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED {
		return false, "", false
	}
	return true, fw.info.GetRoles()[0], fw.partitionAware()
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
	clampFailoverTimeout(info, c.cfg.Limits.MaxFailoverTimeout)
	fw := newFramework(info, slacklinev1.FrameworkState_FRAMEWORK_STATE_DISCONNECTED)
	fw.disconnectedAt = now
	c.frameworks[info.GetId()] = fw
	// Known in memory only (its record was lost with the registry).
	c.core.LoadFramework(&slacklinev1.FrameworkRecord{Info: info, RegisteredTime: timestamppb.New(now)}, now.Add(failoverTimeout(info)))
	return fw
}
