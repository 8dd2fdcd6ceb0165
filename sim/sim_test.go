package sim_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/agenttest"
	"github.com/slackline/slackline/resources"
	"github.com/slackline/slackline/sim"
)

// requests returns every UpdateStatus request the fake received for the
// task, re-sends included.
func requests(fake *agenttest.FakeCoordinator, taskID string) []*slacklinev1.UpdateStatusRequest {
	var out []*slacklinev1.UpdateStatusRequest
	for _, u := range fake.Updates() {
		if u.GetStatus().GetTaskId() == taskID {
			out = append(out, u)
		}
	}
	return out
}

// statuses returns every status the fake received for the task, re-sends included.
func statuses(fake *agenttest.FakeCoordinator, taskID string) []*slacklinev1.TaskStatus {
	var out []*slacklinev1.TaskStatus
	for _, u := range requests(fake, taskID) {
		out = append(out, u.GetStatus())
	}
	return out
}

// recorder keeps the fleet's events.
type recorder struct {
	mu     sync.Mutex
	events []sim.Event
}

func (r *recorder) record(e sim.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) kinds(kind sim.EventKind) []sim.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sim.Event
	for _, e := range r.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// harness runs a fleet against a fake coordinator inside a synctest bubble.
type harness struct {
	fake        *agenttest.FakeCoordinator
	fleet       *sim.Fleet
	events      *recorder
	cancel      context.CancelFunc
	done        chan error
	stopServing func()
	client      *http.Client
}

var testResources = resources.MustParse("cpus:8;mem:16384;ports:[31000-32000]")

// start starts a fleet after applying setup to the fake coordinator; cfg's
// Coordinator, HTTPClient and OnEvent are set by start, and Resources and
// Count default to testResources and 1. Call it in a synctest bubble and
// defer stop.
func start(t *testing.T, cfg sim.Config, setup ...func(*agenttest.FakeCoordinator)) *harness {
	t.Helper()
	h := &harness{fake: agenttest.NewFakeCoordinator(), events: &recorder{}, done: make(chan error, 1)}
	for _, f := range setup {
		f(h.fake)
	}
	network := agenttest.NewNetwork()
	h.stopServing = network.Serve(h.fake.Handler())
	h.client = network.Client()
	cfg.Coordinator = "http://coordinator.test"
	cfg.HTTPClient = h.client
	cfg.OnEvent = h.events.record
	if cfg.Resources.IsEmpty() {
		cfg.Resources = testResources
	}
	if cfg.Count == 0 {
		cfg.Count = 1
	}
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	fleet, err := sim.NewFleet(cfg)
	if err != nil {
		t.Fatalf("NewFleet: %v", err)
	}
	h.fleet = fleet
	ctx, cancel := context.WithCancel(t.Context())
	h.cancel = cancel
	go func() { h.done <- fleet.Run(ctx) }()
	synctest.Wait()
	return h
}

func (h *harness) stop(t *testing.T) {
	h.cancel()
	if err := <-h.done; err != nil {
		t.Errorf("Run: %v", err)
	}
	h.stopServing()
	h.client.CloseIdleConnections()
}

// agentID returns the id of the fleet's only (or first) agent.
func (h *harness) agentID(t *testing.T) string {
	t.Helper()
	ids := h.fleet.AgentIDs()
	if len(ids) == 0 {
		t.Fatal("no agent has registered")
	}
	return ids[0]
}

var testFramework = &slacklinev1.FrameworkInfo{Id: "fw-1", Name: "test", Roles: []string{"eng"}}

func runTask(taskID string, labels map[string]string) *slacklinev1.AgentCommand {
	return &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_RunTask{RunTask: &slacklinev1.RunTaskCommand{
		Framework: testFramework,
		Task:      &slacklinev1.TaskInfo{TaskId: taskID, Name: taskID, Resources: resources.MustParse("cpus:1;mem:128").Proto("eng", resources.Regular), Labels: labels},
	}}}
}

func killTask(frameworkID, taskID string, override slacklinev1.TaskState) *slacklinev1.AgentCommand {
	return &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_KillTask{KillTask: &slacklinev1.KillTaskCommand{
		FrameworkId: frameworkID, TaskId: taskID, StateOverride: override,
	}}}
}

func acknowledge(status *slacklinev1.TaskStatus) *slacklinev1.AgentCommand {
	return &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Acknowledge{Acknowledge: &slacklinev1.AcknowledgeCommand{
		FrameworkId: status.GetFrameworkId(), TaskId: status.GetTaskId(), Uuid: status.GetUuid(),
	}}}
}

func states(statuses []*slacklinev1.TaskStatus) []slacklinev1.TaskState {
	var out []slacklinev1.TaskState
	for _, s := range statuses {
		out = append(out, s.GetState())
	}
	return out
}

// ackAll acknowledges every update received so far for the task.
func (h *harness) ackAll(t *testing.T, agentID, taskID string) {
	t.Helper()
	seen := map[string]bool{}
	for _, s := range statuses(h.fake, taskID) {
		if !seen[s.GetUuid()] {
			seen[s.GetUuid()] = true
			h.fake.Send(t, agentID, acknowledge(s))
		}
	}
	synctest.Wait()
}

const (
	running        = slacklinev1.TaskState_TASK_STATE_RUNNING
	finished       = slacklinev1.TaskState_TASK_STATE_FINISHED
	failed         = slacklinev1.TaskState_TASK_STATE_FAILED
	killed         = slacklinev1.TaskState_TASK_STATE_KILLED
	dropped        = slacklinev1.TaskState_TASK_STATE_DROPPED
	goneByOperator = slacklinev1.TaskState_TASK_STATE_GONE_BY_OPERATOR
)

func TestRegistration(t *testing.T) {
	for _, protocol := range agenttest.Protocols {
		t.Run(protocol.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := start(t, sim.Config{
					Count:          3,
					HostnamePrefix: "node-",
					Attributes:     map[string]string{"zone": "a", "rack": "r1"},
					Revocable:      resources.MustParse("cpus:2"),
					ClientOptions:  protocol.Opts,
				})
				defer h.stop(t)

				if got := h.fleet.Registered(); got != 3 {
					t.Errorf("Registered() = %d, want 3", got)
				}
				var hostnames []string
				for _, req := range h.fake.Registrations() {
					hostnames = append(hostnames, req.GetAgentInfo().GetHostname())
					// A fresh agent proposes an id of its own.
					if req.GetProposedAgentId() == "" {
						t.Errorf("first registration of %s proposes no agent id", req.GetAgentInfo().GetHostname())
					}
					want := &slacklinev1.RegisterRequest{
						ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
						ProposedAgentId: req.GetProposedAgentId(),
						AgentInfo: &slacklinev1.AgentInfo{
							Hostname:   req.GetAgentInfo().GetHostname(),
							Resources:  testResources.Proto("", resources.Regular),
							Attributes: []*slacklinev1.Attribute{{Name: "rack", Value: "r1"}, {Name: "zone", Value: "a"}},
						},
					}
					if diff := cmp.Diff(want, req, protocmp.Transform()); diff != "" {
						t.Errorf("RegisterRequest (-want +got):\n%s", diff)
					}
				}
				slices.Sort(hostnames)
				if diff := cmp.Diff([]string{"node-0", "node-1", "node-2"}, hostnames); diff != "" {
					t.Errorf("registered hostnames (-want +got):\n%s", diff)
				}
				ids := h.fleet.AgentIDs()
				slices.Sort(ids)
				if diff := cmp.Diff([]string{"agent-1", "agent-2", "agent-3"}, ids); diff != "" {
					t.Errorf("AgentIDs (-want +got):\n%s", diff)
				}
				if got := len(h.events.kinds(sim.EventRegistered)); got != 3 {
					t.Errorf("%d registered events, want 3", got)
				}
				if got := len(h.fake.Estimates()); got != 3 {
					t.Errorf("%d revocable estimates, want 3", got)
				}

				// The coordinator's interval is 5 s: two heartbeats in 11 s.
				time.Sleep(11 * time.Second)
				synctest.Wait()
				for _, id := range ids {
					if got := h.fake.Heartbeats(id); got != 2 {
						t.Errorf("agent %s sent %d heartbeats in 11s, want 2", id, got)
					}
				}
			})
		})
	}
}

func TestTaskLifecycle(t *testing.T) {
	tests := []struct {
		name        string
		labels      map[string]string
		wait        time.Duration
		want        []slacklinev1.TaskState
		wantReason  slacklinev1.Reason
		wantMessage string
	}{
		{
			name: "runs until killed",
			wait: time.Hour,
			want: []slacklinev1.TaskState{running},
		},
		{
			name:        "finishes after sim.duration",
			labels:      map[string]string{sim.LabelDuration: "1s"},
			wait:        time.Second,
			want:        []slacklinev1.TaskState{running, finished},
			wantMessage: "exited with code 0",
		},
		{
			name:        "fails with sim.exit_code",
			labels:      map[string]string{sim.LabelDuration: "2s", sim.LabelExitCode: "3"},
			wait:        2 * time.Second,
			want:        []slacklinev1.TaskState{running, failed},
			wantReason:  slacklinev1.Reason_REASON_COMMAND_EXECUTOR_FAILED, // as the real agent reports it
			wantMessage: "exited with code 3",
		},
		{
			name:        "sim.fail_launch",
			labels:      map[string]string{sim.LabelFailLaunch: "true"},
			want:        []slacklinev1.TaskState{failed},
			wantReason:  slacklinev1.Reason_REASON_CONTAINER_LAUNCH_FAILED,
			wantMessage: "simulated launch failure",
		},
		{
			name:        "invalid sim.duration",
			labels:      map[string]string{sim.LabelDuration: "soon"},
			want:        []slacklinev1.TaskState{failed},
			wantReason:  slacklinev1.Reason_REASON_TASK_INVALID,
			wantMessage: `invalid sim.duration label "soon": want a non-negative Go duration`,
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := start(t, sim.Config{})
				defer h.stop(t)
				agentID := h.agentID(t)

				h.fake.Send(t, agentID, runTask("t1", test.labels))
				synctest.Wait()
				h.ackAll(t, agentID, "t1") // RUNNING's ack lets the next update go
				time.Sleep(test.wait)
				synctest.Wait()

				got := statuses(h.fake, "t1")
				if diff := cmp.Diff(test.want, states(got)); diff != "" {
					t.Fatalf("states (-want +got):\n%s", diff)
				}
				for _, req := range requests(h.fake, "t1") {
					// The agent id travels in the request; the coordinator
					// copies it into the status.
					s := req.GetStatus()
					if req.GetAgentId() != agentID || s.GetFrameworkId() != "fw-1" || s.GetSource() != slacklinev1.TaskSource_TASK_SOURCE_AGENT || s.GetUuid() == "" || s.GetTimestamp() == nil {
						t.Errorf("update %v: want agent id, framework id, source agent, uuid and timestamp", req)
					}
				}
				last := got[len(got)-1]
				if last.GetReason() != test.wantReason || last.GetMessage() != test.wantMessage {
					t.Errorf("last status reason %v, message %q; want %v, %q", last.GetReason(), last.GetMessage(), test.wantReason, test.wantMessage)
				}

				// Once its terminal update is acknowledged, the agent forgets the task.
				h.ackAll(t, agentID, "t1")
				wantTasks := 0
				if test.want[len(test.want)-1] == running {
					wantTasks = 1
				}
				if got := len(h.fleet.Agents()[0].Tasks()); got != wantTasks {
					t.Errorf("agent has %d tasks after acknowledgements, want %d", got, wantTasks)
				}
				if got, want := len(h.events.kinds(sim.EventStatusUpdate)), len(test.want); got != want {
					t.Errorf("%d status-update events, want %d", got, want)
				}
			})
		})
	}
}

func TestKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, sim.Config{})
		defer h.stop(t)
		agentID := h.agentID(t)
		other := runTask("other", nil)
		other.GetRunTask().Framework = &slacklinev1.FrameworkInfo{Id: "fw-2"}
		for _, cmd := range []*slacklinev1.AgentCommand{runTask("a", nil), runTask("b", nil), runTask("c", nil), runTask("d", nil), other} {
			h.fake.Send(t, agentID, cmd)
		}
		synctest.Wait()
		for _, id := range []string{"a", "b", "c", "d", "other"} {
			h.ackAll(t, agentID, id)
		}

		h.fake.Send(t, agentID, killTask("fw-1", "a", slacklinev1.TaskState_TASK_STATE_UNSPECIFIED))
		h.fake.Send(t, agentID, killTask("fw-1", "b", goneByOperator))
		h.fake.Send(t, agentID, killTask("fw-1", "unknown", slacklinev1.TaskState_TASK_STATE_UNSPECIFIED))
		synctest.Wait()
		h.fake.Send(t, agentID, &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ShutdownFramework{
			ShutdownFramework: &slacklinev1.ShutdownFrameworkCommand{FrameworkId: "fw-1"},
		}})
		h.fake.Send(t, agentID, &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Ping{Ping: &slacklinev1.PingCommand{}}})
		synctest.Wait()

		for task, want := range map[string][]slacklinev1.TaskState{
			"a":       {running, killed},
			"b":       {running, goneByOperator},
			"c":       {running, killed}, // by shutdown_framework
			"d":       {running, killed},
			"other":   {running}, // another framework's task keeps running
			"unknown": {dropped},
		} {
			if diff := cmp.Diff(want, states(statuses(h.fake, task))); diff != "" {
				t.Errorf("task %s states (-want +got):\n%s", task, diff)
			}
		}
	})
}

func TestUnacknowledgedUpdatesAreResent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, sim.Config{})
		defer h.stop(t)
		agentID := h.agentID(t)

		h.fake.Send(t, agentID, runTask("t1", nil))
		synctest.Wait()
		h.fake.Send(t, agentID, killTask("fw-1", "t1", slacklinev1.TaskState_TASK_STATE_UNSPECIFIED))
		synctest.Wait()
		first := statuses(h.fake, "t1")
		if diff := cmp.Diff([]slacklinev1.TaskState{running}, states(first)); diff != "" {
			t.Fatalf("before any acknowledgement (-want +got):\n%s", diff)
		}

		// Re-sent after 10 s, then 20 s (backoff), with the same uuid; the
		// KILLED update waits behind the unacknowledged RUNNING one.
		time.Sleep(10*time.Second + time.Second)
		synctest.Wait()
		if got := states(statuses(h.fake, "t1")); !cmp.Equal(got, []slacklinev1.TaskState{running, running}) {
			t.Fatalf("after 11s: states %v, want [RUNNING RUNNING]", got)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got := len(statuses(h.fake, "t1")); got != 2 {
			t.Fatalf("after 21s: %d sends, want 2 (the second re-send is due at 30s)", got)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		got := statuses(h.fake, "t1")
		if diff := cmp.Diff([]slacklinev1.TaskState{running, running, running}, states(got)); diff != "" {
			t.Fatalf("after 31s (-want +got):\n%s", diff)
		}
		for _, s := range got {
			if s.GetUuid() != first[0].GetUuid() {
				t.Errorf("re-sent uuid %s, want %s", s.GetUuid(), first[0].GetUuid())
			}
		}

		// Acknowledging RUNNING releases KILLED at once.
		h.fake.Send(t, agentID, acknowledge(first[0]))
		synctest.Wait()
		got = statuses(h.fake, "t1")
		if diff := cmp.Diff([]slacklinev1.TaskState{running, running, running, killed}, states(got)); diff != "" {
			t.Fatalf("after acknowledging RUNNING (-want +got):\n%s", diff)
		}
		if tasks := h.fleet.Agents()[0].Tasks(); len(tasks) != 1 || tasks[0].Unacknowledged != 1 {
			t.Errorf("Tasks() = %+v, want t1 with 1 unacknowledged update", tasks)
		}
		h.fake.Send(t, agentID, acknowledge(got[3]))
		synctest.Wait()
		if tasks := h.fleet.Agents()[0].Tasks(); len(tasks) != 0 {
			t.Errorf("Tasks() = %+v after acknowledging the terminal update, want none", tasks)
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if got := len(statuses(h.fake, "t1")); got != 4 {
			t.Errorf("%d sends after every update was acknowledged, want 4", got)
		}
	})
}

func TestReregistersAfterStaleSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, sim.Config{})
		defer h.stop(t)
		agentID := h.agentID(t)
		h.fake.Send(t, agentID, runTask("t1", nil))
		h.fake.Send(t, agentID, runTask("t2", map[string]string{sim.LabelDuration: "1s"}))
		synctest.Wait()
		h.ackAll(t, agentID, "t2")
		time.Sleep(time.Second)
		synctest.Wait()
		running1 := statuses(h.fake, "t1")[0]

		// The coordinator forgets the session: the next heartbeat is refused
		// with FailedPrecondition and the agent registers again.
		h.fake.Expire(agentID)
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if got := h.fleet.Registered(); got != 1 {
			t.Fatalf("Registered() = %d after the backoff, want 1", got)
		}

		regs := h.fake.Registrations()
		if len(regs) != 2 {
			t.Fatalf("%d registrations, want 2", len(regs))
		}
		again := regs[1]
		if got := again.GetAgentInfo().GetId(); got != agentID {
			t.Errorf("re-registered with id %q, want %q", got, agentID)
		}
		var reported []string
		for _, task := range again.GetTasks() {
			reported = append(reported, fmt.Sprintf("%s/%s/%v/%s", task.GetFrameworkId(), task.GetTask().GetTaskId(), task.GetState(), task.GetFramework().GetName()))
		}
		// t2 finished but its FINISHED update awaits acknowledgement.
		want := []string{"fw-1/t1/TASK_STATE_RUNNING/test", "fw-1/t2/TASK_STATE_FINISHED/test"}
		if diff := cmp.Diff(want, reported); diff != "" {
			t.Errorf("re-registration tasks (-want +got):\n%s", diff)
		}

		// Pending updates are re-sent at once in the new session.
		got := statuses(h.fake, "t1")
		if len(got) != 2 || got[1].GetUuid() != running1.GetUuid() {
			t.Errorf("t1 updates %v: want RUNNING re-sent with uuid %s", states(got), running1.GetUuid())
		}
		if diff := cmp.Diff([]slacklinev1.TaskState{running, finished, finished}, states(statuses(h.fake, "t2"))); diff != "" {
			t.Errorf("t2 states (-want +got):\n%s", diff)
		}
		if got := len(h.events.kinds(sim.EventDisconnected)); got != 1 {
			t.Errorf("%d disconnected events, want 1", got)
		}
	})
}

func TestRefusedRegistrationIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, sim.Config{}, func(f *agenttest.FakeCoordinator) {
			f.SetRefuse(connect.NewError(connect.CodePermissionDenied, errors.New("machine sim-0 is DOWN for maintenance")))
		})
		defer h.stop(t)
		if got := h.fleet.Registered(); got != 0 {
			t.Fatalf("Registered() = %d while refused, want 0", got)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		attempts := len(h.fake.Registrations())
		// About every BackoffMax (10 s, jittered to 5-10 s): 6 to 13 attempts a minute.
		if attempts < 6 || attempts > 13 {
			t.Errorf("%d registration attempts in a minute while refused, want 6 to 13", attempts)
		}
		h.fake.SetRefuse(nil)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got := h.fleet.Registered(); got != 1 {
			t.Errorf("Registered() = %d after the refusal ended, want 1", got)
		}
	})
}

func TestShutdownAgent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, sim.Config{})
		defer h.stop(t)
		agentID := h.agentID(t)
		h.fake.Send(t, agentID, runTask("t1", nil))
		synctest.Wait()
		h.ackAll(t, agentID, "t1")
		h.fake.Send(t, agentID, &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ShutdownAgent{
			ShutdownAgent: &slacklinev1.ShutdownAgentCommand{Message: "machine is going DOWN"},
		}})
		synctest.Wait()

		// Run returns by itself: its only agent stopped.
		select {
		case err := <-h.done:
			h.done <- err // for stop
		default:
			t.Fatal("Run still running after its only agent was shut down")
		}
		got := statuses(h.fake, "t1")
		if diff := cmp.Diff([]slacklinev1.TaskState{running, goneByOperator}, states(got)); diff != "" {
			t.Errorf("states (-want +got):\n%s", diff)
		}
		if msg := got[len(got)-1].GetMessage(); msg != "machine is going DOWN" {
			t.Errorf("message %q, want the shutdown message", msg)
		}
		if a := h.fleet.Agents()[0]; !a.Stopped() || a.Registered() {
			t.Errorf("agent stopped=%v registered=%v, want stopped and not registered", a.Stopped(), a.Registered())
		}
	})
}

func TestWorkDirKeepsAgentIDs(t *testing.T) {
	dir := t.TempDir()
	var firstIDs []string
	synctest.Test(t, func(t *testing.T) {
		h := start(t, sim.Config{Count: 2, WorkDir: dir})
		firstIDs = h.fleet.AgentIDs()
		h.stop(t)
	})
	synctest.Test(t, func(t *testing.T) {
		h := start(t, sim.Config{Count: 2, WorkDir: dir})
		defer h.stop(t)
		byHost := map[string]string{}
		for _, req := range h.fake.Registrations() {
			byHost[req.GetAgentInfo().GetHostname()] = req.GetAgentInfo().GetId()
		}
		want := map[string]string{"sim-0": firstIDs[0], "sim-1": firstIDs[1]}
		if diff := cmp.Diff(want, byHost); diff != "" {
			t.Errorf("ids registered by a restarted fleet (-want +got):\n%s", diff)
		}
	})
}

func TestNewFleetValidates(t *testing.T) {
	tests := []struct {
		name string
		cfg  sim.Config
	}{
		{"no agents", sim.Config{Resources: testResources}},
		{"no resources", sim.Config{Count: 1}},
		{"prefix with a slash and a work dir", sim.Config{Count: 1, Resources: testResources, HostnamePrefix: "a/b", WorkDir: t.TempDir()}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if _, err := sim.NewFleet(test.cfg); err == nil {
				t.Error("NewFleet succeeded, want an error")
			}
		})
	}
}

func TestParseAttributes(t *testing.T) {
	got, err := sim.ParseAttributes(" rack=r1, zone = a ,,")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"rack": "r1", "zone": "a"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"rack", "=x", "a=1,a=2"} {
		if _, err := sim.ParseAttributes(bad); err == nil {
			t.Errorf("ParseAttributes(%q) succeeded, want an error", bad)
		}
	}
}

// BenchmarkFleetRegistration measures how fast a fleet registers and opens
// its command streams against a fake coordinator over real cleartext HTTP/2
// (the fake's cost included). Each iteration registers agents from scratch.
func BenchmarkFleetRegistration(b *testing.B) {
	for _, count := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("agents=%d", count), func(b *testing.B) {
			server := httptest.NewUnstartedServer(agenttest.NewFakeCoordinator().Handler())
			server.Config.Protocols = new(http.Protocols)
			server.Config.Protocols.SetHTTP1(true)
			server.Config.Protocols.SetUnencryptedHTTP2(true)
			server.Start()
			defer server.Close()
			b.ReportAllocs()
			var disconnects atomic.Int64
			for b.Loop() {
				var registrations atomic.Int64
				allRegistered := make(chan struct{})
				fleet, err := sim.NewFleet(sim.Config{
					Coordinator: server.URL,
					Resources:   testResources,
					Count:       count,
					OnEvent: func(e sim.Event) {
						switch e.Kind {
						case sim.EventRegistered:
							if registrations.Add(1) == int64(count) {
								close(allRegistered)
							}
						case sim.EventDisconnected:
							if e.Message != "context canceled" && disconnects.Add(1) == 1 {
								b.Logf("agent %d disconnected: %s", e.AgentIndex, e.Message)
							}
						}
					},
				})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(b.Context())
				done := make(chan error, 1)
				go func() { done <- fleet.Run(ctx) }()
				<-allRegistered
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(disconnects.Load())/float64(b.N), "disconnects/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*count), "ns/agent")
		})
	}
}
