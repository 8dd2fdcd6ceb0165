package sim_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/agenttest"
	"github.com/slackline/slackline/sim"
)

// nodeClient serves the fleet's NodeService on an in-memory network.
func nodeClient(t *testing.T, h *harness) slacklinev1connect.NodeServiceClient {
	t.Helper()
	network := agenttest.NewNetwork()
	stop := network.Serve(h.fleet.NodeHandler(nil))
	t.Cleanup(stop)
	return slacklinev1connect.NewNodeServiceClient(network.Client(), "http://node.test")
}

func runCommand(taskID, command string, labels map[string]string) *slacklinev1.AgentCommand {
	cmd := runTask(taskID, labels)
	cmd.GetRunTask().GetTask().Command = &slacklinev1.CommandInfo{Value: command, Shell: true}
	return cmd
}

// TestNodeService: a simulated agent registers its NodeService endpoint
// and serves its pretend containers (marked simulated), their usage, a
// stdout that says nothing ran, even after the task ended, and a feature
// list that says there is no eBPF.
func TestNodeService(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, sim.Config{NodeEndpoint: "https://127.0.0.1:5052"})
		defer h.stop(t)
		agentID := h.agentID(t)
		if got := h.fake.Registrations()[0].GetAgentInfo().GetEndpoint(); got != "https://127.0.0.1:5052" {
			t.Errorf("registered endpoint %q, want https://127.0.0.1:5052", got)
		}
		node := nodeClient(t, h)
		ctx := t.Context()

		h.fake.Send(t, agentID, runCommand("t1", "echo hello; sleep 2", map[string]string{sim.LabelUsage: "0.25"}))
		synctest.Wait()

		containers, err := node.GetContainers(ctx, connect.NewRequest(&slacklinev1.GetContainersRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if got := containers.Msg.GetContainers(); len(got) != 1 || got[0].GetTaskId() != "t1" || got[0].GetFrameworkId() != "fw-1" ||
			got[0].GetCgroupMode() != sim.CgroupModeSimulated || got[0].GetState() != running || got[0].GetContainerId() == "" {
			t.Errorf("containers %v, want t1 of fw-1, RUNNING, simulated", got)
		}

		time.Sleep(10 * time.Second)
		usage, err := node.GetUsage(ctx, connect.NewRequest(&slacklinev1.GetUsageRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if got := usage.Msg.GetUsage(); len(got) != 1 || got[0].GetTaskId() != "t1" ||
			got[0].GetStatistics().GetCpusRate() != 0.25 || got[0].GetStatistics().GetMemRssBytes() != 32<<20 ||
			got[0].GetStatistics().GetCpusUserTimeSecs() != 2.5 {
			t.Errorf("usage %v, want t1 at 0.25 cpus, 32 MiB, 2.5 s of CPU after 10 s", got)
		}
		if n := usage.Msg.GetNode(); n.GetCpusRate() != 0.25 || n.GetMemAvailableBytes() != (16384-32)<<20 {
			t.Errorf("node usage %v, want 0.25 cpus and 16352 MiB available", n)
		}

		read := func() string {
			t.Helper()
			resp, err := node.ReadSandboxFile(ctx, connect.NewRequest(&slacklinev1.ReadSandboxFileRequest{FrameworkId: "fw-1", TaskId: "t1", Path: "stdout"}))
			if err != nil {
				t.Fatalf("ReadSandboxFile: %v", err)
			}
			return string(resp.Msg.GetData())
		}
		if got := read(); !strings.Contains(got, "no process runs here") || !strings.Contains(got, "echo hello; sleep 2") {
			t.Errorf("stdout %q: want it to say no process ran, and the command", got)
		}
		h.fake.Send(t, agentID, killTask("fw-1", "t1", slacklinev1.TaskState_TASK_STATE_UNSPECIFIED))
		synctest.Wait()
		h.ackAll(t, agentID, "t1")
		if got := read(); !strings.Contains(got, "ended: killed") {
			t.Errorf("stdout after the kill %q: want it to say how the task ended", got)
		}
		if _, err := node.ReadSandboxFile(ctx, connect.NewRequest(&slacklinev1.ReadSandboxFileRequest{TaskId: "t1", Path: "../etc/passwd"})); connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("ReadSandboxFile of another path: %v, want not_found", err)
		}
		containers, err = node.GetContainers(ctx, connect.NewRequest(&slacklinev1.GetContainersRequest{}))
		if err != nil || len(containers.Msg.GetContainers()) != 0 {
			t.Errorf("containers after the kill: %v, %v; want none", containers.Msg.GetContainers(), err)
		}

		features, err := node.GetFeatures(ctx, connect.NewRequest(&slacklinev1.GetFeaturesRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if got := features.Msg.GetFeatures(); len(got) != 1 || got[0].GetStatus() != slacklinev1.FeatureStatus_FEATURE_STATUS_NOT_SUPPORTED {
			t.Errorf("features %v, want one NOT_SUPPORTED entry", got)
		}
	})
}

// TestEndedContainersAreBounded: an agent keeps the output of at most
// MaxEndedContainers ended tasks and counts those it forgets.
func TestEndedContainersAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, sim.Config{})
		defer h.stop(t)
		agentID := h.agentID(t)
		node := nodeClient(t, h)
		for i := range sim.MaxEndedContainers + 2 {
			id := "t" + string(rune('a'+i/26)) + string(rune('a'+i%26))
			h.fake.Send(t, agentID, runCommand(id, "true", map[string]string{sim.LabelDuration: "0s"}))
			// One at a time, so that they end in the order sent and the
			// oldest is the one forgotten.
			synctest.Wait()
			time.Sleep(time.Millisecond)
			synctest.Wait()
		}
		if got := h.fleet.EndedContainersDropped(); got != 2 {
			t.Errorf("EndedContainersDropped = %d, want 2", got)
		}
		_, err := node.ReadSandboxFile(t.Context(), connect.NewRequest(&slacklinev1.ReadSandboxFileRequest{TaskId: "taa", Path: "stdout"}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("the oldest ended task's stdout: %v, want not_found", err)
		}
		resp, err := node.ReadSandboxFile(t.Context(), connect.NewRequest(&slacklinev1.ReadSandboxFileRequest{TaskId: "tac", Path: "stdout"}))
		if err != nil || !strings.Contains(string(resp.Msg.GetData()), "exited with code 0") {
			t.Errorf("a kept ended task's stdout: %v", err)
		}
	})
}

// TestInvalidUsageLabel: a sim.usage outside [0, 1] fails the launch.
func TestInvalidUsageLabel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, sim.Config{})
		defer h.stop(t)
		agentID := h.agentID(t)
		h.fake.Send(t, agentID, runTask("t1", map[string]string{sim.LabelUsage: "2"}))
		synctest.Wait()
		got := statuses(h.fake, "t1")
		want := []slacklinev1.TaskState{failed}
		if diff := cmp.Diff(want, states(got)); diff != "" {
			t.Fatalf("states (-want +got):\n%s", diff)
		}
		if msg := got[0].GetMessage(); msg != `invalid sim.usage label "2": want a fraction between 0 and 1` {
			t.Errorf("message %q", msg)
		}
	})
}
