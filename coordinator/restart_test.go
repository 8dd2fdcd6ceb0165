package coordinator

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/etcdtest"
	"github.com/slackline/slackline/resources"
)

// TestRestartKeepsRegistry stops a coordinator and starts a new one on the
// same registry, on each backend (bbolt in the work dir; a real etcd
// process): agents, frameworks, weights and quota survive, and tasks are
// rebuilt from the re-registering agent.
func TestRestartKeepsRegistry(t *testing.T) {
	t.Parallel()
	t.Run("bbolt", func(t *testing.T) {
		dir := t.TempDir()
		testRestartKeepsRegistry(t, func() Config { return wallConfig(dir) })
	})
	t.Run("etcd", func(t *testing.T) {
		etcdtest.Require(t)
		client := etcdtest.Shared(t).Client(t)
		prefix := etcdtest.Prefix(t)
		testRestartKeepsRegistry(t, func() Config {
			cfg := wallConfig(t.TempDir()) // the work dir is unused with a store
			cfg.Store = store.NewEtcd(client, store.EtcdOptions{Prefix: prefix})
			return cfg
		})
	})
}

// testRestartKeepsRegistry runs the scenario on coordinators configured by
// config, called once per coordinator.
func testRestartKeepsRegistry(t *testing.T, config func() Config) {
	ctx := context.Background()
	tc := startCluster(t, config())
	agent := tc.registerAgent("host-a", "cpus:4;mem:4096")
	fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw", Roles: []string{"eng/web"}, FailoverTimeoutSeconds: 3600})
	if err := launch(fw, fw.nextOffer(), refuse(0), taskInfo("t1", "cpus:1;mem:256"), taskInfo("t2", "cpus:1;mem:256")); err != nil {
		t.Fatal(err)
	}
	run, run2 := agent.nextCommand().GetRunTask(), agent.nextCommand().GetRunTask()
	if _, err := tc.operator.UpdateWeights(ctx, connect.NewRequest(&slacklinev1.UpdateWeightsRequest{
		Weights: []*slacklinev1.WeightInfo{{Role: "eng", Weight: 3}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.operator.UpdateQuota(ctx, connect.NewRequest(&slacklinev1.UpdateQuotaRequest{Configs: []*slacklinev1.QuotaConfig{
		{Role: "eng/web", Limits: resources.MustParse("cpus:2;mem:2048").Proto("", resources.Regular)}}})); err != nil {
		t.Fatal(err)
	}
	tc.stop()

	tc2 := startCluster(t, config())
	agents, err := tc2.operator.GetAgents(ctx, connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(agents.Msg.GetAgents()); n != 1 || agents.Msg.GetAgents()[0].GetState() != slacklinev1.AgentState_AGENT_STATE_RECOVERING {
		t.Fatalf("agents after restart = %v, want one RECOVERING", agents.Msg.GetAgents())
	}
	frameworks, _ := tc2.operator.GetFrameworks(ctx, connect.NewRequest(&slacklinev1.GetFrameworksRequest{}))
	if n := len(frameworks.Msg.GetFrameworks()); n != 1 || frameworks.Msg.GetFrameworks()[0].GetState() != slacklinev1.FrameworkState_FRAMEWORK_STATE_DISCONNECTED ||
		frameworks.Msg.GetFrameworks()[0].GetInfo().GetFailoverTimeoutSeconds() != 3600 {
		t.Fatalf("frameworks after restart = %v, want one DISCONNECTED with its failover timeout", frameworks.Msg.GetFrameworks())
	}
	roles, _ := tc2.operator.GetRoles(ctx, connect.NewRequest(&slacklinev1.GetRolesRequest{}))
	found := 0
	for _, r := range roles.Msg.GetRoles() {
		switch r.GetName() {
		case "eng":
			if r.GetWeight() != 3 {
				t.Errorf("eng weight %v, want 3", r.GetWeight())
			}
			found++
		case "eng/web":
			limit, _, _ := resources.FromProto(r.GetQuota().GetLimits())
			if limit.String() != "cpus:2;mem:2048" {
				t.Errorf("eng/web quota %v, want cpus:2;mem:2048", limit)
			}
			found++
		}
	}
	if found != 2 {
		t.Fatalf("roles after restart = %v", roles.Msg.GetRoles())
	}
	// The agent re-registers with its task as it was launched (with the
	// launch proof); the framework resubscribes and finds it.
	// t2 ended while the coordinator was down: the agent reports it
	// FINISHED and sends its update itself, later.
	tc2.registerAgentWithID(agent.id, "host-a", "cpus:4;mem:4096", &slacklinev1.AgentTask{
		FrameworkId: fw.id, Task: run.GetTask(), State: slacklinev1.TaskState_TASK_STATE_RUNNING}, &slacklinev1.AgentTask{
		FrameworkId: fw.id, Task: run2.GetTask(), State: slacklinev1.TaskState_TASK_STATE_FINISHED})
	fw2 := tc2.subscribe(&slacklinev1.FrameworkInfo{Id: fw.id, Name: "fw", Roles: []string{"eng/web"}, FailoverTimeoutSeconds: 3600})
	// Reconciliation answers what the agent reported, not GONE.
	if _, err := fw2.client.Reconcile(ctx, call(fw2, &slacklinev1.ReconcileRequest{FrameworkId: fw2.id,
		Tasks: []*slacklinev1.ReconcileTask{{TaskId: "t2", AgentId: agent.id}}})); err != nil {
		t.Fatal(err)
	}
	if st := fw2.nextUpdate(); st.GetTaskId() != "t2" || st.GetState() != slacklinev1.TaskState_TASK_STATE_FINISHED ||
		st.GetReason() != slacklinev1.Reason_REASON_RECONCILIATION {
		t.Fatalf("reconciliation of a task its agent reported FINISHED after the restart: %v", st)
	}
	tasks, _ := tc2.operator.GetTasks(ctx, connect.NewRequest(&slacklinev1.GetTasksRequest{FrameworkId: fw2.id}))
	if len(tasks.Msg.GetTasks()) != 1 || tasks.Msg.GetTasks()[0].GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING {
		t.Fatalf("tasks after restart = %v", tasks.Msg.GetTasks())
	}
	// The quota still binds: eng/web holds cpus:1 and may get at most 1 more.
	offered, _, _ := resources.FromProto(fw2.nextOffer().GetResources())
	if offered.CPUs() != 1 {
		t.Fatalf("offer under quota = %v, want cpus:1 (limit 2, 1 held)", offered)
	}
}
