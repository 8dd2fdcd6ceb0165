package auth

import (
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/server"
)

// Caller says which principals may call a procedure at all.
type Caller int

// Callers.
const (
	// Anyone: no credentials needed (health checks).
	Anyone Caller = iota
	// Clients: frameworks and operators, i.e. any authenticated principal
	// that is not an agent.
	Clients
	// Agents: agent certificates only.
	Agents
)

func (c Caller) String() string {
	switch c {
	case Anyone:
		return "anyone"
	case Clients:
		return "clients"
	case Agents:
		return "agents"
	}
	return "unknown"
}

// Rule is how one procedure (or HTTP path) is authorized.
type Rule struct {
	// Caller restricts who may call.
	Caller Caller
	// Action, when set, is checked before the handler runs: for each object
	// Objects returns, or with no object when Objects is nil.
	Action Action
	// Objects returns the action's objects named in a unary request.
	Objects func(req any) []string
	// Handler describes what the handler checks itself, with state only it
	// has ("" when the rule says it all).
	Handler string
	// Coordinator lets the coordinator's own client identity (a
	// certificate of CoordinatorOrganization) call the procedure on an
	// agent, without Action: the coordinator's live view proxies it after
	// authorizing its own caller for the same rule (ProxyMiddleware). The
	// coordinator's identity may call nothing else; it is set only for the
	// NodeService's read-only methods (a test checks): the view methods,
	// and ReadSandboxFile, which the coordinator forwards only after
	// checking that its caller may read the task's sandbox (the task's
	// framework principal, or access_sandboxes on it).
	Coordinator bool
}

// Open paths and procedures that are not Slackline services.
const (
	// MetricsPath is where both processes serve Prometheus metrics.
	MetricsPath = "/metrics"
)

func init() {
	// The Go runtime profiles of a process started with --pprof.
	for _, path := range server.PprofPaths {
		Rules[path] = Rule{Caller: Clients, Action: DebugProcesses}
	}
}

// Rules maps every procedure Slackline serves, and its other HTTP paths, to
// its rule. A request for a path without a rule is refused when
// authorization is configured, so that nothing is served unchecked.
var Rules = map[string]Rule{
	// Health Check stays open: load balancers probe it without
	// credentials. Watch is a stream that lives as long as its caller
	// wants: a principal's only, so that nobody can hold streams open
	// without credentials.
	"/" + grpchealth.HealthV1ServiceName + "/Check":                       {Caller: Anyone},
	"/" + grpchealth.HealthV1ServiceName + "/Watch":                       {Caller: Clients},
	"/" + grpcreflect.ReflectV1ServiceName + "/ServerReflectionInfo":      {Caller: Clients, Action: ViewAPI},
	"/" + grpcreflect.ReflectV1AlphaServiceName + "/ServerReflectionInfo": {Caller: Clients, Action: ViewAPI},
	MetricsPath: {Caller: Clients, Action: ViewMetrics},

	// SchedulerService: the framework id is bound to the principal that
	// registered it; only that principal, or one granted
	// teardown_frameworks on it, may use it.
	slacklinev1connect.SchedulerServiceSubscribeProcedure: {Caller: Clients,
		Handler: "register_frameworks for each role; a failover (framework_info.id set) by another principal than the framework's needs teardown_frameworks on it"},
	slacklinev1connect.SchedulerServiceAcceptProcedure: {Caller: Clients,
		Handler: "the framework's principal (or teardown_frameworks on it); run_tasks for each task's user (TaskInfo.user, else FrameworkInfo.user)"},
	slacklinev1connect.SchedulerServiceDeclineProcedure:              {Caller: Clients, Handler: frameworkBinding},
	slacklinev1connect.SchedulerServiceAcceptInverseOffersProcedure:  {Caller: Clients, Handler: frameworkBinding},
	slacklinev1connect.SchedulerServiceDeclineInverseOffersProcedure: {Caller: Clients, Handler: frameworkBinding},
	slacklinev1connect.SchedulerServiceReviveProcedure:               {Caller: Clients, Handler: frameworkBinding},
	slacklinev1connect.SchedulerServiceSuppressProcedure:             {Caller: Clients, Handler: frameworkBinding},
	slacklinev1connect.SchedulerServiceKillProcedure:                 {Caller: Clients, Handler: frameworkBinding},
	slacklinev1connect.SchedulerServiceAcknowledgeProcedure:          {Caller: Clients, Handler: frameworkBinding},
	slacklinev1connect.SchedulerServiceReconcileProcedure:            {Caller: Clients, Handler: frameworkBinding},
	slacklinev1connect.SchedulerServiceTeardownProcedure:             {Caller: Clients, Handler: frameworkBinding},

	// AgentService: an agent registers only as a hostname it may, and then
	// acts only through its own session, on its own tasks.
	slacklinev1connect.AgentServiceRegisterProcedure: {Caller: Agents, Action: RegisterAgents,
		Objects: func(req any) []string {
			return []string{req.(*slacklinev1.RegisterRequest).GetAgentInfo().GetHostname()}
		},
		Handler: "an agent id keeps its hostname; previous_agent_id only of the same hostname; reported tasks only with the coordinator's launch proof for this host and their resources"},
	slacklinev1connect.AgentServiceConnectProcedure:         {Caller: Agents, Handler: agentSession},
	slacklinev1connect.AgentServiceHeartbeatProcedure:       {Caller: Agents, Handler: agentSession},
	slacklinev1connect.AgentServiceHeartbeatStreamProcedure: {Caller: Agents, Handler: agentSession + "; one stream per agent, the newest"},
	slacklinev1connect.AgentServiceUpdateStatusProcedure: {Caller: Agents,
		Handler: agentSession + "; updates only for tasks on this agent"},
	slacklinev1connect.AgentServiceUpdateOversubscribedResourcesProcedure: {Caller: Agents, Handler: agentSession},

	// OperatorService.
	slacklinev1connect.OperatorServiceGetStateProcedure: {Caller: Clients,
		Handler: "shows agents as GetAgents does, frameworks and tasks with view_frameworks/view_tasks on their principal (own always), roles with view_roles"},
	slacklinev1connect.OperatorServiceGetAgentsProcedure: {Caller: Clients,
		Handler: "shows every agent with view_agents, else the agents of the tasks the caller may see (to reach their sandboxes)"},
	slacklinev1connect.OperatorServiceGetFrameworksProcedure: {Caller: Clients,
		Handler: "shows the frameworks the caller registered or has view_frameworks on"},
	slacklinev1connect.OperatorServiceGetTasksProcedure: {Caller: Clients,
		Handler: "shows the tasks of frameworks the caller registered or has view_tasks on"},
	slacklinev1connect.OperatorServiceGetRolesProcedure: {Caller: Clients, Handler: "shows the roles the caller has view_roles on"},
	slacklinev1connect.OperatorServiceUpdateWeightsProcedure: {Caller: Clients, Action: UpdateWeights,
		Objects: func(req any) []string {
			var roles []string
			for _, w := range req.(*slacklinev1.UpdateWeightsRequest).GetWeights() {
				roles = append(roles, w.GetRole())
			}
			return roles
		}},
	slacklinev1connect.OperatorServiceUpdateQuotaProcedure: {Caller: Clients, Action: UpdateQuotas,
		Objects: func(req any) []string {
			var roles []string
			for _, q := range req.(*slacklinev1.UpdateQuotaRequest).GetConfigs() {
				roles = append(roles, q.GetRole())
			}
			return roles
		}},
	slacklinev1connect.OperatorServiceGetMaintenanceScheduleProcedure:    {Caller: Clients, Action: ViewMaintenance},
	slacklinev1connect.OperatorServiceUpdateMaintenanceScheduleProcedure: {Caller: Clients, Action: UpdateMaintenanceSchedules},
	slacklinev1connect.OperatorServiceGetMaintenanceStatusProcedure:      {Caller: Clients, Action: ViewMaintenance},
	slacklinev1connect.OperatorServiceStartMaintenanceProcedure: {Caller: Clients, Action: StartMaintenances,
		Objects: func(req any) []string { return machines(req.(*slacklinev1.StartMaintenanceRequest).GetMachines()) }},
	slacklinev1connect.OperatorServiceStopMaintenanceProcedure: {Caller: Clients, Action: StopMaintenances,
		Objects: func(req any) []string { return machines(req.(*slacklinev1.StopMaintenanceRequest).GetMachines()) }},

	// NodeService (served by the agent). The coordinator's node proxy
	// (the live view's and slacklinectl's) forwards these with its own
	// identity, having checked view_agents for its caller, or for
	// ReadSandboxFile the caller's right to the task's sandbox.
	slacklinev1connect.NodeServiceGetContainersProcedure:  {Caller: Clients, Action: ViewAgents, Coordinator: true},
	slacklinev1connect.NodeServiceGetUsageProcedure:       {Caller: Clients, Action: ViewAgents, Coordinator: true},
	slacklinev1connect.NodeServiceGetEstimateProcedure:    {Caller: Clients, Action: ViewAgents, Coordinator: true},
	slacklinev1connect.NodeServiceGetCorrectionsProcedure: {Caller: Clients, Action: ViewAgents, Coordinator: true},
	slacklinev1connect.NodeServiceGetFeaturesProcedure:    {Caller: Clients, Action: ViewAgents, Coordinator: true},
	slacklinev1connect.NodeServiceGetImagesProcedure:      {Caller: Clients, Action: ViewAgents, Coordinator: true},
	slacklinev1connect.NodeServiceGetHistoryProcedure:     {Caller: Clients, Action: ViewAgents, Coordinator: true},
	slacklinev1connect.NodeServiceGetDelaysProcedure:      {Caller: Clients, Action: ViewAgents, Coordinator: true},
	slacklinev1connect.NodeServiceGetShadowsProcedure:     {Caller: Clients, Action: ViewAgents, Coordinator: true},
	// JobService (served by slackline-jobs): a job belongs to the
	// principal that submitted it.
	slacklinev1connect.JobServiceSubmitJobProcedure: {Caller: Clients,
		Handler: "submit_jobs for the spec's role"},
	slacklinev1connect.JobServiceGetJobsProcedure: {Caller: Clients,
		Handler: "shows the caller's own jobs and those of owners it has view_jobs on"},
	slacklinev1connect.JobServiceGetJobProcedure: {Caller: Clients,
		Handler: "the job's owner, or view_jobs on it; others get NOT_FOUND"},
	slacklinev1connect.JobServiceCancelJobProcedure: {Caller: Clients,
		Handler: "the job's owner, or cancel_jobs on it; a caller that cannot see the job gets NOT_FOUND"},

	// ProfileService (#29): operators only.
	slacklinev1connect.ProfileServiceGetProfilesProcedure:      {Caller: Clients, Action: ViewProfiles},
	slacklinev1connect.ProfileServiceGetProfileStatusProcedure: {Caller: Clients, Action: ViewProfiles},
	slacklinev1connect.ProfileServiceApplyProfileProcedure:     {Caller: Clients, Action: UpdateProfiles},
	slacklinev1connect.ProfileServiceRolloutProfileProcedure:   {Caller: Clients, Action: UpdateProfiles},
	slacklinev1connect.ProfileServiceDeleteProfileProcedure:    {Caller: Clients, Action: UpdateProfiles},
	slacklinev1connect.ProfileServiceAbortRolloutProcedure:     {Caller: Clients, Action: UpdateProfiles},

	slacklinev1connect.NodeServiceReadSandboxFileProcedure: {Caller: Clients, Coordinator: true,
		Handler: "the task's framework principal, or access_sandboxes on it; the coordinator's identity, which checked that for its caller"},
}

const (
	frameworkBinding = "the Slackline-Stream-Id of the framework's subscription, and the framework's principal (or teardown_frameworks on it)"
	agentSession     = "the session's agent has a hostname the caller may register as"
)

// machines names machines by hostname, or by IP when they have none.
func machines(ids []*slacklinev1.MachineID) []string {
	out := make([]string, 0, len(ids))
	for _, m := range ids {
		if m.GetHostname() != "" {
			out = append(out, m.GetHostname())
		} else {
			out = append(out, m.GetIp())
		}
	}
	return out
}
