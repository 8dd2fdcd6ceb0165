package coordinator

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/protocol"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

var protocols = []struct {
	name string
	opts []connect.ClientOption
}{
	{"connect", nil},
	{"grpc", []connect.ClientOption{connect.WithGRPC()}},
	{"grpcweb", []connect.ClientOption{connect.WithGRPCWeb()}},
}

// TestLaunchLifecycle follows one task from offer to acknowledged
// completion, over every protocol the coordinator speaks.
func TestLaunchLifecycle(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				tc := startPipeCluster(t, fastConfig(t.TempDir()), p.opts...)
				agent := tc.registerAgent("host-a", "cpus:4;mem:4096")
				fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw", FailoverTimeoutSeconds: 60})

				offer := fw.nextOffer()
				if offer.GetAgentId() != agent.id || offer.GetHostname() != "host-a" {
					t.Fatalf("offer on %s/%s, want agent %s", offer.GetAgentId(), offer.GetHostname(), agent.id)
				}
				got, _, err := resources.FromProto(offer.GetResources())
				if err != nil || got.String() != "cpus:4;mem:4096" {
					t.Fatalf("offer resources = %v (%v), want the whole agent", got, err)
				}
				if err := launch(fw, offer, refuse(0), taskInfo("t1", "cpus:1;mem:512")); err != nil {
					t.Fatal(err)
				}
				run := agent.nextCommand().GetRunTask()
				if run.GetTask().GetTaskId() != "t1" || run.GetFramework().GetId() != fw.id {
					t.Fatalf("agent got %v, want run_task t1", run)
				}
				agent.sendStatus(fw.id, "t1", slacklinev1.TaskState_TASK_STATE_RUNNING, "u1")
				st := fw.nextUpdate()
				if st.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING || st.GetUuid() != "u1" || st.GetAgentId() != agent.id {
					t.Fatalf("update = %v", st)
				}
				if _, err := fw.client.Acknowledge(context.Background(), call(fw, &slacklinev1.AcknowledgeRequest{
					FrameworkId: fw.id, AgentId: agent.id, TaskId: "t1", Uuid: "u1"})); err != nil {
					t.Fatal(err)
				}
				if ack := agent.nextCommand().GetAcknowledge(); ack.GetUuid() != "u1" {
					t.Fatalf("agent got %v, want acknowledge u1", ack)
				}
				// The remainder of the offer comes back (refuse 0).
				rest, _, _ := resources.FromProto(fw.nextOffer().GetResources())
				if rest.String() != "cpus:3;mem:3584" {
					t.Fatalf("re-offered %v, want the remainder cpus:3;mem:3584", rest)
				}
				tasks, err := tc.operator.GetTasks(context.Background(), connect.NewRequest(&slacklinev1.GetTasksRequest{}))
				if err != nil || len(tasks.Msg.GetTasks()) != 1 || tasks.Msg.GetTasks()[0].GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING {
					t.Fatalf("GetTasks = %v, %v", tasks.Msg.GetTasks(), err)
				}
				agent.sendStatus(fw.id, "t1", slacklinev1.TaskState_TASK_STATE_FINISHED, "u2")
				if st := fw.nextUpdate(); st.GetState() != slacklinev1.TaskState_TASK_STATE_FINISHED {
					t.Fatalf("update = %v, want FINISHED", st)
				}
			})
		})
	}
}

func TestStreamIDRequired(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw"})
		ctx := context.Background()
		_, err := fw.client.Revive(ctx, connect.NewRequest(&slacklinev1.ReviveRequest{FrameworkId: fw.id}))
		if connectCode(err) != connect.CodePermissionDenied {
			t.Fatalf("Revive without stream id: %v, want PermissionDenied", err)
		}
		req := connect.NewRequest(&slacklinev1.ReviveRequest{FrameworkId: fw.id})
		req.Header().Set(protocol.StreamIDHeader, "not-the-stream")
		if _, err := fw.client.Revive(ctx, req); connectCode(err) != connect.CodePermissionDenied {
			t.Fatalf("Revive with a wrong stream id: %v, want PermissionDenied", err)
		}
		if _, err := fw.client.Revive(ctx, call(fw, &slacklinev1.ReviveRequest{FrameworkId: "nope"})); connectCode(err) != connect.CodeNotFound {
			t.Fatalf("Revive of an unknown framework: %v, want NotFound", err)
		}
		if _, err := fw.client.Revive(ctx, call(fw, &slacklinev1.ReviveRequest{FrameworkId: fw.id})); err != nil {
			t.Fatalf("Revive with the stream id: %v", err)
		}
		// A second subscription takes over; the first stream id stops working.
		again := tc.subscribe(&slacklinev1.FrameworkInfo{Id: fw.id, Name: "fw"})
		if _, err := fw.client.Revive(ctx, call(fw, &slacklinev1.ReviveRequest{FrameworkId: fw.id})); connectCode(err) != connect.CodePermissionDenied {
			t.Fatalf("old stream id after failover: %v, want PermissionDenied", err)
		}
		if ev := fw.next(func(ev *slacklinev1.Event) bool { return ev.GetError() != nil }); !strings.Contains(ev.GetError().GetMessage(), "failed over") {
			t.Fatalf("old stream got %v", ev)
		}
		if _, err := again.client.Revive(ctx, call(again, &slacklinev1.ReviveRequest{FrameworkId: fw.id})); err != nil {
			t.Fatal(err)
		}
	})
}

func TestInvalidLaunches(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		tc.registerAgent("host-a", "cpus:2;mem:1024")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw"})
		offer := fw.nextOffer()
		bad := taskInfo("too-big", "cpus:3;mem:10")
		neg := taskInfo("negative", "cpus:1")
		neg.Resources[0].Scalar = -1
		nocmd := taskInfo("nocmd", "cpus:1")
		nocmd.Command = nil
		if err := launch(fw, offer, refuse(0), bad, neg, nocmd, taskInfo("ok", "cpus:1;mem:128"), taskInfo("ok", "cpus:0.5")); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"too-big": "needs cpus:3;mem:10", "negative": "negative", "nocmd": "no command", "ok": "already in use"}
		for range len(want) {
			st := fw.nextUpdate()
			if st.GetState() != slacklinev1.TaskState_TASK_STATE_ERROR || st.GetReason() != slacklinev1.Reason_REASON_TASK_INVALID {
				t.Fatalf("update %v, want ERROR/TASK_INVALID", st)
			}
			if !strings.Contains(st.GetMessage(), want[st.GetTaskId()]) {
				t.Fatalf("task %s message %q does not mention %q", st.GetTaskId(), st.GetMessage(), want[st.GetTaskId()])
			}
		}
		// Accepting an offer that is gone drops the tasks.
		if err := launch(fw, offer, refuse(0), taskInfo("late", "cpus:1")); err != nil {
			t.Fatal(err)
		}
		st := fw.nextUpdate()
		if st.GetTaskId() != "late" || st.GetState() != slacklinev1.TaskState_TASK_STATE_LOST {
			// Not partition-aware: DROPPED reads as LOST.
			t.Fatalf("update %v, want late LOST (DROPPED for partition-aware frameworks)", st)
		}
		if st.GetReason() != slacklinev1.Reason_REASON_INVALID_OFFERS {
			t.Fatalf("reason %v, want INVALID_OFFERS", st.GetReason())
		}
		_, err := fw.client.Accept(context.Background(), call(fw, &slacklinev1.AcceptRequest{FrameworkId: fw.id}))
		if connectCode(err) != connect.CodeInvalidArgument {
			t.Fatalf("Accept without offers: %v, want InvalidArgument", err)
		}
	})
}

func TestDeclineFiltersAndRevive(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		tc.registerAgent("host-a", "cpus:2;mem:1024")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw"})
		offer := fw.nextOffer()
		if _, err := fw.client.Decline(context.Background(), call(fw, &slacklinev1.DeclineRequest{
			FrameworkId: fw.id, OfferIds: []string{offer.GetId()}, Filters: refuse(3600)})); err != nil {
			t.Fatal(err)
		}
		// Full passes run every 50 ms: nothing is offered while the filter holds.
		fw.quiet(500*time.Millisecond, isOffers)
		if _, err := fw.client.Revive(context.Background(), call(fw, &slacklinev1.ReviveRequest{FrameworkId: fw.id})); err != nil {
			t.Fatal(err)
		}
		fw.nextOffer()
		_, err := fw.client.Decline(context.Background(), call(fw, &slacklinev1.DeclineRequest{
			FrameworkId: fw.id, OfferIds: []string{"no-such-offer"}}))
		if connectCode(err) != connect.CodeNotFound {
			t.Fatalf("Decline of an unknown offer: %v, want NotFound", err)
		}
		nan := refuse(-1)
		if _, err := fw.client.Decline(context.Background(), call(fw, &slacklinev1.DeclineRequest{
			FrameworkId: fw.id, OfferIds: []string{"x"}, Filters: nan})); connectCode(err) != connect.CodeInvalidArgument {
			t.Fatalf("negative refuse_seconds: %v, want InvalidArgument", err)
		}
	})
}

func TestSuppress(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		tc.registerAgent("host-a", "cpus:2;mem:1024")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw", Roles: []string{"eng/web"}})
		offer := fw.nextOffer()
		if r := offer.GetResources()[0].GetRole(); r != "eng/web" {
			t.Fatalf("offer role %q, want eng/web", r)
		}
		if _, err := fw.client.Suppress(context.Background(), call(fw, &slacklinev1.SuppressRequest{FrameworkId: fw.id})); err != nil {
			t.Fatal(err)
		}
		if _, err := fw.client.Decline(context.Background(), call(fw, &slacklinev1.DeclineRequest{
			FrameworkId: fw.id, OfferIds: []string{offer.GetId()}, Filters: refuse(0)})); err != nil {
			t.Fatal(err)
		}
		fw.quiet(300*time.Millisecond, isOffers)
		if _, err := fw.client.Suppress(context.Background(), call(fw, &slacklinev1.SuppressRequest{FrameworkId: fw.id, Roles: []string{"ops"}})); connectCode(err) != connect.CodeInvalidArgument {
			t.Fatalf("Suppress of a foreign role: %v, want InvalidArgument", err)
		}
		if _, err := fw.client.Revive(context.Background(), call(fw, &slacklinev1.ReviveRequest{FrameworkId: fw.id, Roles: []string{"eng/web"}})); err != nil {
			t.Fatal(err)
		}
		fw.nextOffer()
	})
}

func TestAgentUnreachableAndBack(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		agent := tc.registerAgent("host-a", "cpus:2;mem:1024")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw", FailoverTimeoutSeconds: 60,
			Capabilities: []slacklinev1.FrameworkCapability{slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_PARTITION_AWARE}})
		if err := launch(fw, fw.nextOffer(), refuse(0), taskInfo("t1", "cpus:1")); err != nil {
			t.Fatal(err)
		}
		agent.nextCommand()
		agent.sendStatus(fw.id, "t1", slacklinev1.TaskState_TASK_STATE_RUNNING, "u1")
		fw.nextUpdate()
		agent.cancel() // stop heartbeating
		st := fw.nextUpdate()
		if st.GetState() != slacklinev1.TaskState_TASK_STATE_UNREACHABLE || st.GetReason() != slacklinev1.Reason_REASON_AGENT_UNREACHABLE {
			t.Fatalf("update %v, want UNREACHABLE", st)
		}
		fw.next(func(ev *slacklinev1.Event) bool { return ev.GetFailure().GetAgentId() == agent.id })
		// The agent comes back with its task still running.
		tc.registerAgentWithID(agent.id, "host-a", "cpus:2;mem:1024", &slacklinev1.AgentTask{
			FrameworkId: fw.id, Task: taskInfo("t1", "cpus:1"), State: slacklinev1.TaskState_TASK_STATE_RUNNING})
		st = fw.nextUpdate()
		if st.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING || st.GetReason() != slacklinev1.Reason_REASON_RECONCILIATION {
			t.Fatalf("update %v, want RUNNING after re-registration", st)
		}
		// Its old session is refused.
		_, err := agent.client.Heartbeat(context.Background(), connect.NewRequest(&slacklinev1.HeartbeatRequest{AgentId: agent.id, SessionId: agent.session}))
		if connectCode(err) != connect.CodeFailedPrecondition {
			t.Fatalf("heartbeat on the old session: %v, want FailedPrecondition", err)
		}
	})
}

func TestReRegistrationReconcilesMissingTasks(t *testing.T) {
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
		// The agent re-registers without the task (it lost it).
		tc.registerAgentWithID(agent.id, "host-a", "cpus:2;mem:1024")
		st := fw.nextUpdate()
		if st.GetTaskId() != "t1" || st.GetState() != slacklinev1.TaskState_TASK_STATE_LOST || st.GetReason() != slacklinev1.Reason_REASON_AGENT_RESTARTED {
			t.Fatalf("update %v, want t1 LOST (GONE) with AGENT_RESTARTED", st)
		}
	})
}

func TestFrameworkFailover(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		agent := tc.registerAgent("host-a", "cpus:2;mem:1024")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw", FailoverTimeoutSeconds: 0.5})
		if err := launch(fw, fw.nextOffer(), refuse(0), taskInfo("t1", "cpus:1")); err != nil {
			t.Fatal(err)
		}
		agent.nextCommand()
		agent.sendStatus(fw.id, "t1", slacklinev1.TaskState_TASK_STATE_RUNNING, "u1")
		fw.nextUpdate() // not acknowledged: it must be re-sent on resubscription

		// Within the failover timeout: the framework keeps its task and gets the
		// unacknowledged update again.
		fw.cancel()
		again := tc.subscribe(&slacklinev1.FrameworkInfo{Id: fw.id, Name: "fw", FailoverTimeoutSeconds: 0.5})
		if st := again.nextUpdate(); st.GetUuid() != "u1" {
			t.Fatalf("re-sent update %v, want u1", st)
		}
		tasks, _ := tc.operator.GetTasks(context.Background(), connect.NewRequest(&slacklinev1.GetTasksRequest{FrameworkId: fw.id}))
		if len(tasks.Msg.GetTasks()) != 1 {
			t.Fatalf("tasks after failover: %v", tasks.Msg.GetTasks())
		}
		// Past it: torn down, its tasks killed.
		again.cancel()
		if cmd := agent.nextCommand(); cmd.GetShutdownFramework().GetFrameworkId() != fw.id {
			t.Fatalf("agent got %v, want shutdown_framework", cmd)
		}
		if _, err := tc.trySubscribe(&slacklinev1.FrameworkInfo{Id: fw.id, Name: "fw"}); connectCode(err) != connect.CodeFailedPrecondition {
			t.Fatalf("resubscribe after teardown: %v, want FailedPrecondition", err)
		}
		if _, err := tc.trySubscribe(&slacklinev1.FrameworkInfo{Id: "never-seen", Name: "fw"}); connectCode(err) != connect.CodeNotFound {
			t.Fatalf("subscribe with an unknown id: %v, want NotFound", err)
		}
	})
}

func TestTeardownAndReconcile(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		agent := tc.registerAgent("host-a", "cpus:2;mem:1024")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw", FailoverTimeoutSeconds: 60,
			Capabilities: []slacklinev1.FrameworkCapability{slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_PARTITION_AWARE}})
		if err := launch(fw, fw.nextOffer(), refuse(0), taskInfo("t1", "cpus:1")); err != nil {
			t.Fatal(err)
		}
		agent.nextCommand()
		agent.sendStatus(fw.id, "t1", slacklinev1.TaskState_TASK_STATE_RUNNING, "u1")
		fw.nextUpdate()
		ctx := context.Background()
		// Implicit reconciliation returns the known task.
		if _, err := fw.client.Reconcile(ctx, call(fw, &slacklinev1.ReconcileRequest{FrameworkId: fw.id})); err != nil {
			t.Fatal(err)
		}
		if st := fw.nextUpdate(); st.GetTaskId() != "t1" || st.GetState() != slacklinev1.TaskState_TASK_STATE_RUNNING || st.GetUuid() != "" {
			t.Fatalf("implicit reconcile: %v", st)
		}
		// Explicit, for a task the coordinator never heard of on a known agent.
		if _, err := fw.client.Reconcile(ctx, call(fw, &slacklinev1.ReconcileRequest{FrameworkId: fw.id,
			Tasks: []*slacklinev1.ReconcileTask{{TaskId: "ghost", AgentId: agent.id}, {TaskId: "nowhere"}}})); err != nil {
			t.Fatal(err)
		}
		got := map[string]slacklinev1.TaskState{}
		for range 2 {
			st := fw.nextUpdate()
			got[st.GetTaskId()] = st.GetState()
		}
		if got["ghost"] != slacklinev1.TaskState_TASK_STATE_GONE || got["nowhere"] != slacklinev1.TaskState_TASK_STATE_UNKNOWN {
			t.Fatalf("explicit reconcile = %v", got)
		}
		if _, err := fw.client.Kill(ctx, call(fw, &slacklinev1.KillRequest{FrameworkId: fw.id, TaskId: "ghost"})); connectCode(err) != connect.CodeNotFound {
			t.Fatalf("Kill of an unknown task: %v, want NotFound", err)
		}
		if _, err := fw.client.Kill(ctx, call(fw, &slacklinev1.KillRequest{FrameworkId: fw.id, TaskId: "t1"})); err != nil {
			t.Fatal(err)
		}
		if cmd := agent.nextCommand(); cmd.GetKillTask().GetTaskId() != "t1" {
			t.Fatalf("agent got %v, want kill_task t1", cmd)
		}
		if _, err := fw.client.Teardown(ctx, call(fw, &slacklinev1.TeardownRequest{FrameworkId: fw.id})); err != nil {
			t.Fatal(err)
		}
		if cmd := agent.nextCommand(); cmd.GetShutdownFramework().GetFrameworkId() != fw.id {
			t.Fatalf("agent got %v, want shutdown_framework", cmd)
		}
		if ev := fw.next(func(ev *slacklinev1.Event) bool { return ev.GetError() != nil }); !strings.Contains(ev.GetError().GetMessage(), "torn down") {
			t.Fatalf("error event %v", ev)
		}
	})
}

// badInputMaxRequestBytes is TestBadInput's request limit: its oversized
// request was one of server.MaxRequestBytes (4 MiB, the default), and
// marshalling, moving and reading those 4 MiB was most of the test's CPU.
// The limit in force is Limits.MaxRequestBytes whatever its value
// (TestDefaultMaxRequestBytes checks the default).
const badInputMaxRequestBytes = 64 << 10

// TestDefaultMaxRequestBytes checks that a coordinator whose Limits leave
// MaxRequestBytes zero reads requests up to server.MaxRequestBytes, and
// that a value set is kept.
func TestDefaultMaxRequestBytes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ set, want int }{{0, server.MaxRequestBytes}, {badInputMaxRequestBytes, badInputMaxRequestBytes}} {
		l := Limits{MaxRequestBytes: tt.set}
		l.setDefaults()
		if l.MaxRequestBytes != tt.want {
			t.Errorf("MaxRequestBytes %d: %d after defaults, want %d", tt.set, l.MaxRequestBytes, tt.want)
		}
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		cfg := fastConfig(t.TempDir())
		cfg.Limits.MaxRequestBytes = badInputMaxRequestBytes
		tc := startPipeCluster(t, cfg)
		ctx := context.Background()
		tests := []struct {
			name    string
			call    func() error
			code    connect.Code
			mention string
		}{
			{"quota NaN", func() error {
				_, err := tc.operator.UpdateQuota(ctx, connect.NewRequest(&slacklinev1.UpdateQuotaRequest{Configs: []*slacklinev1.QuotaConfig{
					{Role: "eng", Limits: []*slacklinev1.Resource{{Name: "cpus", Scalar: nan()}}}}}))
				return err
			}, connect.CodeInvalidArgument, "NaN"},
			{"quota unknown resource", func() error {
				_, err := tc.operator.UpdateQuota(ctx, connect.NewRequest(&slacklinev1.UpdateQuotaRequest{Configs: []*slacklinev1.QuotaConfig{
					{Role: "eng", Limits: []*slacklinev1.Resource{{Name: "gpus", Scalar: 1}}}}}))
				return err
			}, connect.CodeInvalidArgument, "gpus"},
			{"weight negative", func() error {
				_, err := tc.operator.UpdateWeights(ctx, connect.NewRequest(&slacklinev1.UpdateWeightsRequest{Weights: []*slacklinev1.WeightInfo{{Role: "eng", Weight: -2}}}))
				return err
			}, connect.CodeInvalidArgument, "-2"},
			{"bad role", func() error {
				_, err := tc.operator.UpdateWeights(ctx, connect.NewRequest(&slacklinev1.UpdateWeightsRequest{Weights: []*slacklinev1.WeightInfo{{Role: "eng//web", Weight: 2}}}))
				return err
			}, connect.CodeInvalidArgument, "eng//web"},
			{"tasks of unknown framework", func() error {
				_, err := tc.operator.GetTasks(ctx, connect.NewRequest(&slacklinev1.GetTasksRequest{FrameworkId: "nope"}))
				return err
			}, connect.CodeNotFound, "nope"},
			{"subscribe without name", func() error {
				_, err := tc.trySubscribe(&slacklinev1.FrameworkInfo{})
				return err
			}, connect.CodeInvalidArgument, "name"},
			{"subscribe with inverted ports role", func() error {
				_, err := tc.trySubscribe(&slacklinev1.FrameworkInfo{Name: "x", Roles: []string{"../etc"}})
				return err
			}, connect.CodeInvalidArgument, "../etc"},
			{"agent with overlapping ports", func() error {
				client := tc.agentClient()
				_, err := client.Register(ctx, connect.NewRequest(&slacklinev1.RegisterRequest{
					ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
					AgentInfo: &slacklinev1.AgentInfo{Hostname: "h", Resources: []*slacklinev1.Resource{
						{Name: "ports", Ranges: []*slacklinev1.Range{{Begin: 10, End: 20}, {Begin: 15, End: 30}}}}}}))
				return err
			}, connect.CodeInvalidArgument, "overlap"},
			{"agent with an old protocol", func() error {
				_, err := tc.agentClient().Register(ctx, connect.NewRequest(&slacklinev1.RegisterRequest{
					AgentInfo: &slacklinev1.AgentInfo{Hostname: "h"}}))
				return err
			}, connect.CodeInvalidArgument, "protocol_version"},
			{"heartbeat of unknown agent", func() error {
				_, err := tc.agentClient().Heartbeat(ctx, connect.NewRequest(&slacklinev1.HeartbeatRequest{AgentId: "nope"}))
				return err
			}, connect.CodeNotFound, "nope"},
			{"oversized request", func() error {
				_, err := tc.operator.UpdateWeights(ctx, connect.NewRequest(&slacklinev1.UpdateWeightsRequest{Weights: []*slacklinev1.WeightInfo{{Role: strings.Repeat("a", badInputMaxRequestBytes), Weight: 1}}}))
				return err
			}, connect.CodeResourceExhausted, ""},
		}
		// In a bubble: no subtests (t.Run), each case named in its error.
		for _, tt := range tests {
			err := tt.call()
			if connectCode(err) != tt.code {
				t.Errorf("%s: error %v, want code %v", tt.name, err, tt.code)
				continue
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("%s: error %q does not mention %q", tt.name, err, tt.mention)
			}
		}
	})
}

func (tc *testCluster) agentClient() interface {
	Register(context.Context, *connect.Request[slacklinev1.RegisterRequest]) (*connect.Response[slacklinev1.RegisterResponse], error)
	Heartbeat(context.Context, *connect.Request[slacklinev1.HeartbeatRequest]) (*connect.Response[slacklinev1.HeartbeatResponse], error)
} {
	return newAgentClient(tc)
}

func TestAgentResizeRescindsOffers(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		tc := startPipeCluster(t, fastConfig(t.TempDir()))
		agent := tc.registerAgent("host-a", "cpus:4;mem:4096")
		fw := tc.subscribe(&slacklinev1.FrameworkInfo{Name: "fw"})
		offer := fw.nextOffer()
		tc.registerAgentWithID(agent.id, "host-a", "cpus:2;mem:4096")
		ev := fw.next(func(ev *slacklinev1.Event) bool { return ev.GetRescind() != nil })
		if ev.GetRescind().GetOfferId() != offer.GetId() {
			t.Fatalf("rescinded %v, want %s", ev, offer.GetId())
		}
		got, _, _ := resources.FromProto(fw.nextOffer().GetResources())
		if got.CPUs() != 2 {
			t.Fatalf("new offer %v, want the new total cpus:2", got)
		}
	})
}
