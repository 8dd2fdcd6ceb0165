package coordinator

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// A framework that fails over while its old stream is still open gets the
// agent offered again: the old subscription's offers are released.
func TestFailoverReleasesOldOffers(t *testing.T) {
	tc := startCluster(t, fastConfig(t.TempDir()))
	tc.registerAgent("host-a", "cpus:2;mem:1024")
	fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw", FailoverTimeoutSeconds: 60})
	old := fw.nextOffer()
	again := tc.subscribe(&slacklinev1.FrameworkInfo{Id: fw.id, Name: "fw", FailoverTimeoutSeconds: 60})
	if o := again.nextOffer(); o.GetId() == old.GetId() {
		t.Fatal("the old subscription's offer was sent again")
	}
}

// Stopping the coordinator is not a framework disconnection: a framework
// with a zero failover timeout survives a restart and may resubscribe.
func TestRestartKeepsZeroFailoverFramework(t *testing.T) {
	dir := t.TempDir()
	tc := startCluster(t, fastConfig(dir))
	fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw"})
	tc.stop()
	tc2 := startCluster(t, fastConfig(dir))
	if _, err := tc2.trySubscribe(&slacklinev1.FrameworkInfo{Id: fw.id, Name: "fw"}); err != nil {
		t.Fatalf("resubscribe after restart: %v", err)
	}
}

// A task of a framework that is not partition-aware was reported LOST when
// its agent became unreachable; when the agent comes back it is killed.
func TestUnreachableTaskKilledForNonPartitionAware(t *testing.T) {
	tc := startCluster(t, fastConfig(t.TempDir()))
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
}
