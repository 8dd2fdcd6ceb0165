package coordinator

import (
	"context"
	"testing"
	"testing/synctest"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// A framework that fails over while its old stream is still open gets the
// agent offered again: the old subscription's offers are released.
func TestFailoverReleasesOldOffers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		tc.registerAgent("host-a", "cpus:2;mem:1024")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw", FailoverTimeoutSeconds: 60})
		old := fw.nextOffer()
		again := tc.subscribe(&slacklinev1.FrameworkInfo{Id: fw.id, Name: "fw", FailoverTimeoutSeconds: 60})
		if o := again.nextOffer(); o.GetId() == old.GetId() {
			t.Fatal("the old subscription's offer was sent again")
		}
	})
}

// Stopping the coordinator is not a framework disconnection: a framework
// with a zero failover timeout survives a restart and may resubscribe.
func TestRestartKeepsZeroFailoverFramework(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		tc := startPipeCluster(t, fastConfig(dir))
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw"})
		tc.stop()
		tc2 := startPipeCluster(t, fastConfig(dir))
		if _, err := tc2.trySubscribe(&slacklinev1.FrameworkInfo{Id: fw.id, Name: "fw"}); err != nil {
			t.Fatalf("resubscribe after restart: %v", err)
		}
	})
}

// A task of a framework that is not partition-aware was reported LOST when
// its agent became unreachable; when the agent comes back it is killed.
func TestUnreachableTaskKilledForNonPartitionAware(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		agent := tc.registerAgent("host-a", "cpus:2;mem:1024")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw", FailoverTimeoutSeconds: 60})
		if err := launch(fw, fw.nextOffer(), refuse(0), taskInfo("t1", "cpus:1")); err != nil {
			t.Fatal(err)
		}
		agent.nextCommand()
		agent.sendStatus(fw.id, "t1", slacklinev1.TaskState_TASK_STATE_RUNNING, "u1")
		fw.nextUpdate()
		agent.cancel()
		if st := fw.nextUpdate(); st.GetState() != slacklinev1.TaskState_TASK_STATE_LOST {
			t.Fatalf("update %v, want LOST", st)
		}
		back := tc.registerAgentWithID(agent.id, "host-a", "cpus:2;mem:1024", &slacklinev1.AgentTask{
			FrameworkId: fw.id, Task: taskInfo("t1", "cpus:1"), State: slacklinev1.TaskState_TASK_STATE_RUNNING})
		if cmd := back.nextCommand(); cmd.GetKillTask().GetTaskId() != "t1" {
			t.Fatalf("agent got %v, want kill_task t1", cmd)
		}
		tasks, _ := tc.operator.GetTasks(context.Background(), connect.NewRequest(&slacklinev1.GetTasksRequest{}))
		if len(tasks.Msg.GetTasks()) != 1 || tasks.Msg.GetTasks()[0].GetState() != slacklinev1.TaskState_TASK_STATE_UNREACHABLE {
			t.Fatalf("tasks = %v", tasks.Msg.GetTasks())
		}
	})
}

// An agent registering afresh after its host rebooted names its previous
// id: that agent is retired at once and its tasks reported gone.
func TestRebootedAgentRetired(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		old := tc.registerAgent("host-a", "cpus:2;mem:1024")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw", FailoverTimeoutSeconds: 60,
			Capabilities: []slacklinev1.FrameworkCapability{slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_PARTITION_AWARE}})
		if err := launch(fw, fw.nextOffer(), refuse(0), taskInfo("t1", "cpus:1")); err != nil {
			t.Fatal(err)
		}
		old.nextCommand()
		old.sendStatus(fw.id, "t1", slacklinev1.TaskState_TASK_STATE_RUNNING, "u1")
		fw.nextUpdate()

		client := newAgentClient(tc)
		resp, err := client.Register(context.Background(), connect.NewRequest(&slacklinev1.RegisterRequest{
			ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1, PreviousAgentId: old.id,
			AgentInfo: &slacklinev1.AgentInfo{Hostname: "host-a", Resources: resources.MustParse("cpus:2;mem:1024").Proto("", resources.Regular)},
		}))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Msg.GetAgentId() == old.id {
			t.Fatal("the rebooted host kept its old agent id")
		}
		st := fw.nextUpdate()
		if st.GetTaskId() != "t1" || st.GetState() != slacklinev1.TaskState_TASK_STATE_GONE || st.GetReason() != slacklinev1.Reason_REASON_AGENT_RESTARTED {
			t.Fatalf("update %v, want t1 GONE with AGENT_RESTARTED", st)
		}
		agents, _ := tc.operator.GetAgents(context.Background(), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
		states := map[string]slacklinev1.AgentState{}
		for _, a := range agents.Msg.GetAgents() {
			states[a.GetId()] = a.GetState()
		}
		if states[old.id] != slacklinev1.AgentState_AGENT_STATE_GONE || states[resp.Msg.GetAgentId()] != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
			t.Fatalf("agent states %v", states)
		}
		// Another host cannot retire it.
		other := tc.registerAgent("host-b", "cpus:1;mem:512")
		if _, err := client.Register(context.Background(), connect.NewRequest(&slacklinev1.RegisterRequest{
			ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1, PreviousAgentId: other.id,
			AgentInfo: &slacklinev1.AgentInfo{Hostname: "host-c", Resources: resources.MustParse("cpus:1;mem:512").Proto("", resources.Regular)},
		})); err != nil {
			t.Fatal(err)
		}
		agents, _ = tc.operator.GetAgents(context.Background(), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
		for _, a := range agents.Msg.GetAgents() {
			if a.GetId() == other.id && a.GetState() != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
				t.Fatalf("host-b's agent is %v after host-c named it", a.GetState())
			}
		}
	})
}
