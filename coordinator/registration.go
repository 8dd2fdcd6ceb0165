package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/coordinator/core"
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

// One host, one agent: a hostname (compared without case, as DNS names and
// certificates compare them: core.HostKey) has at most one agent that is
// not GONE. A new agent of a host retires the host's other agents, ACTIVE
// or not, as previous_agent_id asks after a reboot: like Kubernetes' one
// Node object per name and Mesos' removal of the old agent at an address a
// new one registers from. Refusing instead would lock a node whose work
// dir was wiped out until its old agent is forgotten
// (Limits.GoneAgentRetention), and would let whoever registers first keep
// the hostname; retiring gives a holder of the host's certificate nothing
// it did not have (it could already name the old agent as previous), and
// no longer lets it add agents beside the real one. The decision is the
// core's (core.PlanRegistration, core.ApplyRegistration).

// register admits an agent (new, re-registering, or a rebooted host's new
// one) and returns its id, session id and the interval to heartbeat at:
// the core plans it (a persist step), the records are written with mu
// released, then the core applies it. It takes c.mu to plan and to apply,
// and no turn (order.go): registrations share fsyncs. Another registration of
// the host may plan, write and apply in between; the core's after-apply
// records then restate the host's records as applied, written in apply
// order (recordInApplyOrder), so the registry ends as memory is (#30).
func (c *Coordinator) register(ctx context.Context, reg registration) (agentID, sessionID string, heartbeatInterval time.Duration, err error) {
	now := c.cfg.Now()
	if err := c.admitRegistration(ctx, reg, now); err != nil {
		return "", "", 0, err
	}
	c.mu.Lock()
	if reg.info.GetId() == "" {
		reg.info.Id = c.core.ProposedAgentID(reg.info.GetHostname(), reg.proposedID, ids.New())
	}
	planned, err := c.core.PlanRegistration(core.AgentRegistration{Info: reg.info, Total: reg.total, PreviousID: reg.previousID}, c.core.Maintenance(), now)
	if err == nil {
		err = c.checkAgentIdentity(reg)
	}
	c.mu.Unlock()
	if err != nil {
		return "", "", 0, registrationError(err)
	}
	if h := planned.Apply.IgnoredPrevious(); h != "" {
		c.log.Warn("agent names a previous agent of another host; ignored", "previous", reg.previousID,
			"previous_hostname", h, "hostname", reg.info.GetHostname())
	}
	if err := c.write(ctx, "agent", planned); err != nil {
		return "", "", 0, err
	}
	c.mu.Lock()
	a, late, err := c.applyRegistration(reg, planned.Apply, now)
	if err == nil {
		agentID, sessionID, heartbeatInterval = a.ID, a.session.id, c.agentHeartbeatInterval(now)
	}
	var previous, done chan struct{}
	if len(late) > 0 {
		previous, done = c.registrationAfter, make(chan struct{})
		c.registrationAfter = done
	}
	c.mu.Unlock()
	if len(late) > 0 {
		c.recordInApplyOrder(ctx, previous, done, late)
	}
	return agentID, sessionID, heartbeatInterval, registrationError(err)
}

// recordInApplyOrder writes a registration's after-apply records once the
// previously applied registration's are written (previous closed; nil:
// none), then closes done. Registrations of one host write their records
// with mu released and may apply in either order (#30); the core's
// after-apply records then restate, as applied, the records another
// plan's write may have overwritten, and writing them in apply order
// makes the last applied registration's the registry's, as in memory. It
// holds no mutex while it waits or writes.
func (c *Coordinator) recordInApplyOrder(ctx context.Context, previous, done chan struct{}, late []store.Mutation) {
	defer func() {
		close(done)
		c.mu.Lock()
		if c.registrationAfter == done {
			c.registrationAfter = nil
		}
		c.mu.Unlock()
	}()
	if previous != nil {
		<-previous
	}
	c.record(ctx, late...)
}

// registrationError maps the core's registration refusals to RPC codes.
func registrationError(err error) error {
	if errors.Is(err, core.ErrMachineDown) || errors.Is(err, core.ErrAgentGone) {
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return err
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

// applyRegistration installs a registration whose records are durable
// (core.ApplyRegistration, which re-checks what may have changed since it
// was planned); late are the GONE records of the host's agents it retired
// that the plan did not know of, to write after. The retired agents'
// sessions end; the agent gets a new session and its reported tasks are
// reconciled. Caller holds c.mu.
func (c *Coordinator) applyRegistration(reg registration, change core.Change, now time.Time) (a *agent, late []store.Mutation, err error) {
	previous := slacklinev1.AgentState_AGENT_STATE_UNSPECIFIED
	if r := c.core.Agent(reg.info.GetId()); r != nil {
		previous = r.State
	}
	r, rec, err := c.core.ApplyRegistration(change, c.core.Maintenance(), now)
	if err != nil {
		// Went DOWN while the record was written; recovery and the next
		// registration sort the record out.
		return nil, nil, err
	}
	late = registryWrites(r.After)
	for _, old := range r.Retired {
		level := slog.LevelInfo
		if old.State == slacklinev1.AgentState_AGENT_STATE_ACTIVE && !old.Named {
			// A live agent replaced without being named: a wiped work dir,
			// or a second process with the host's certificate.
			level = slog.LevelWarn
		}
		c.log.Log(context.Background(), level, "agent retired: its host registered a new agent", "agent", old.ID, "hostname", old.Hostname,
			"state", old.State.String(), "new_agent", rec.ID, "named_as_previous", old.Named, "tasks", old.Tasks)
		if o := c.agents[old.ID]; o != nil {
			o.endSession()
		}
	}
	r.After, r.Retired = nil, nil
	a = c.agents[rec.ID]
	if a == nil {
		a = &agent{AgentRecord: rec}
		c.agents[rec.ID] = a
	}
	a.endSession()
	c.deliver(r)
	a.session = newOutbox[*slacklinev1.AgentCommand]()
	c.reconcileAgentTasks(a, reg.tasks, now)
	c.log.Info("agent registered", "agent", a.ID, "hostname", a.Info.GetHostname(), "resources", reg.total.String(), "tasks", len(reg.tasks), "previous_state", previous.String())
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
			Info: r.info, FrameworkID: r.frameworkID, AgentID: a.ID, Role: r.role,
			Resources: r.resources, Revocable: r.revocable, State: r.state,
		}})
	}
	ready := c.core.RegisterTasks(a.ID, reports, frameworkStates{c}, now)
	for _, t := range ready.Untrusted {
		// Not a task the coordinator gave this agent, or not with these
		// resources: it is not adopted, and it is killed.
		c.log.Warn("agent reports a task it was not given; killing it", "agent", a.ID, "hostname", a.Info.GetHostname(),
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

// adoptFramework adds, DISCONNECTED with its failover timeout running from
// now, a framework that an agent reports and the coordinator never saw (its
// registry was lost). It returns nil for an invalid one.
func (c *Coordinator) adoptFramework(a *agent, reported *slacklinev1.FrameworkInfo, now time.Time) *framework {
	info, err := normalizeFrameworkInfo(reported)
	if err != nil {
		c.log.Warn("agent reports a task of an invalid framework; shutting it down", "agent", a.ID, "framework", reported.GetId(), "err", err)
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
