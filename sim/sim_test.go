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
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/agenttest"
	"github.com/slackline/slackline/resources"
	"github.com/slackline/slackline/sim"
)

// fakeCoordinator is a minimal AgentService: it admits every agent, checks
// sessions, records what agents send and lets the test push commands.
type fakeCoordinator struct {
	slacklinev1connect.UnimplementedAgentServiceHandler

	mu          sync.Mutex
	nextID      int
	nextSession int
	sessions    map[string]string                         // agent id -> live session id
	streams     map[string]chan *slacklinev1.AgentCommand // agent id -> its session's command queue
	refuse      error                                     // Register's answer while set
	registers   []*slacklinev1.RegisterRequest
	heartbeats  map[string]int // agent id -> heartbeats received
	updates     []*slacklinev1.UpdateStatusRequest
	estimates   []*slacklinev1.UpdateOversubscribedResourcesRequest
}

func newFakeCoordinator() *fakeCoordinator {
	return &fakeCoordinator{
		sessions:   map[string]string{},
		streams:    map[string]chan *slacklinev1.AgentCommand{},
		heartbeats: map[string]int{},
	}
}

func (f *fakeCoordinator) Register(_ context.Context, req *connect.Request[slacklinev1.RegisterRequest]) (*connect.Response[slacklinev1.RegisterResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registers = append(f.registers, req.Msg)
	if f.refuse != nil {
		return nil, f.refuse
	}
	id := req.Msg.GetAgentInfo().GetId()
	if id == "" {
		f.nextID++
		id = fmt.Sprintf("agent-%d", f.nextID)
	}
	f.nextSession++
	f.sessions[id] = fmt.Sprintf("session-%d", f.nextSession)
	return connect.NewResponse(&slacklinev1.RegisterResponse{AgentId: id, SessionId: f.sessions[id], HeartbeatIntervalSeconds: 5}), nil
}

func (f *fakeCoordinator) checkSessionLocked(agentID, sessionID string) error {
	if f.sessions[agentID] != sessionID {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("stale session"))
	}
	return nil
}

func (f *fakeCoordinator) Connect(ctx context.Context, req *connect.Request[slacklinev1.ConnectRequest], stream *connect.ServerStream[slacklinev1.ConnectResponse]) error {
	f.mu.Lock()
	if err := f.checkSessionLocked(req.Msg.GetAgentId(), req.Msg.GetSessionId()); err != nil {
		f.mu.Unlock()
		return err
	}
	commands := make(chan *slacklinev1.AgentCommand, 64)
	f.streams[req.Msg.GetAgentId()] = commands
	f.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return nil
		case cmd := <-commands:
			if err := stream.Send(&slacklinev1.ConnectResponse{Command: cmd}); err != nil {
				return err
			}
		}
	}
}

func (f *fakeCoordinator) Heartbeat(_ context.Context, req *connect.Request[slacklinev1.HeartbeatRequest]) (*connect.Response[slacklinev1.HeartbeatResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkSessionLocked(req.Msg.GetAgentId(), req.Msg.GetSessionId()); err != nil {
		return nil, err
	}
	f.heartbeats[req.Msg.GetAgentId()]++
	return connect.NewResponse(&slacklinev1.HeartbeatResponse{}), nil
}

func (f *fakeCoordinator) UpdateStatus(_ context.Context, req *connect.Request[slacklinev1.UpdateStatusRequest]) (*connect.Response[slacklinev1.UpdateStatusResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkSessionLocked(req.Msg.GetAgentId(), req.Msg.GetSessionId()); err != nil {
		return nil, err
	}
	f.updates = append(f.updates, req.Msg)
	return connect.NewResponse(&slacklinev1.UpdateStatusResponse{}), nil
}

func (f *fakeCoordinator) UpdateOversubscribedResources(_ context.Context, req *connect.Request[slacklinev1.UpdateOversubscribedResourcesRequest]) (*connect.Response[slacklinev1.UpdateOversubscribedResourcesResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkSessionLocked(req.Msg.GetAgentId(), req.Msg.GetSessionId()); err != nil {
		return nil, err
	}
	f.estimates = append(f.estimates, req.Msg)
	return connect.NewResponse(&slacklinev1.UpdateOversubscribedResourcesResponse{}), nil
}

// send queues a command on the agent's current command stream.
func (f *fakeCoordinator) send(t *testing.T, agentID string, cmd *slacklinev1.AgentCommand) {
	t.Helper()
	f.mu.Lock()
	commands := f.streams[agentID]
	f.mu.Unlock()
	if commands == nil {
		t.Fatalf("agent %s has no command stream", agentID)
	}
	commands <- cmd
}

// expire makes the agent's session stale, as a coordinator that lost it would.
func (f *fakeCoordinator) expire(agentID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions[agentID] = "expired"
}

func (f *fakeCoordinator) setRefuse(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = err
}

// statuses returns every status the coordinator received for the task, re-sends included.
func (f *fakeCoordinator) statuses(taskID string) []*slacklinev1.TaskStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*slacklinev1.TaskStatus
	for _, u := range f.updates {
		if u.GetStatus().GetTaskId() == taskID {
			out = append(out, u.GetStatus())
		}
	}
	return out
}

// requests returns every UpdateStatus request received for the task.
func (f *fakeCoordinator) requests(taskID string) []*slacklinev1.UpdateStatusRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*slacklinev1.UpdateStatusRequest
	for _, u := range f.updates {
		if u.GetStatus().GetTaskId() == taskID {
			out = append(out, u)
		}
	}
	return out
}

func (f *fakeCoordinator) registrations() []*slacklinev1.RegisterRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.registers)
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
	fake        *fakeCoordinator
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
func start(t *testing.T, cfg sim.Config, setup ...func(*fakeCoordinator)) *harness {
	t.Helper()
	h := &harness{fake: newFakeCoordinator(), events: &recorder{}, done: make(chan error, 1)}
	for _, f := range setup {
		f(h.fake)
	}
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewAgentServiceHandler(h.fake))
	network := agenttest.NewNetwork()
	h.stopServing = network.Serve(mux)
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
	for _, s := range h.fake.statuses(taskID) {
		if !seen[s.GetUuid()] {
			seen[s.GetUuid()] = true
			h.fake.send(t, agentID, acknowledge(s))
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

var protocols = []struct {
	name string
	opts []connect.ClientOption
}{
	{"connect", nil},
	{"grpc", []connect.ClientOption{connect.WithGRPC()}},
}

func TestRegistration(t *testing.T) {
	for _, protocol := range protocols {
		t.Run(protocol.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := start(t, sim.Config{
					Count:          3,
					HostnamePrefix: "node-",
					Attributes:     map[string]string{"zone": "a", "rack": "r1"},
					Revocable:      resources.MustParse("cpus:2"),
					ClientOptions:  protocol.opts,
				})
				defer h.stop(t)

				if got := h.fleet.Registered(); got != 3 {
					t.Errorf("Registered() = %d, want 3", got)
				}
				var hostnames []string
				for _, req := range h.fake.registrations() {
					hostnames = append(hostnames, req.GetAgentInfo().GetHostname())
					want := &slacklinev1.RegisterRequest{
						ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
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
				h.fake.mu.Lock()
				if got := len(h.fake.estimates); got != 3 {
					t.Errorf("%d revocable estimates, want 3", got)
				}
				h.fake.mu.Unlock()

				// The coordinator's interval is 5 s: two heartbeats in 11 s.
				time.Sleep(11 * time.Second)
				synctest.Wait()
				h.fake.mu.Lock()
				for _, id := range ids {
					if got := h.fake.heartbeats[id]; got != 2 {
						t.Errorf("agent %s sent %d heartbeats in 11s, want 2", id, got)
					}
				}
				h.fake.mu.Unlock()
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

				h.fake.send(t, agentID, runTask("t1", test.labels))
				synctest.Wait()
				h.ackAll(t, agentID, "t1") // RUNNING's ack lets the next update go
				time.Sleep(test.wait)
				synctest.Wait()

				got := h.fake.statuses("t1")
				if diff := cmp.Diff(test.want, states(got)); diff != "" {
					t.Fatalf("states (-want +got):\n%s", diff)
				}
				for _, req := range h.fake.requests("t1") {
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
			h.fake.send(t, agentID, cmd)
		}
		synctest.Wait()
		for _, id := range []string{"a", "b", "c", "d", "other"} {
			h.ackAll(t, agentID, id)
		}

		h.fake.send(t, agentID, killTask("fw-1", "a", slacklinev1.TaskState_TASK_STATE_UNSPECIFIED))
		h.fake.send(t, agentID, killTask("fw-1", "b", goneByOperator))
		h.fake.send(t, agentID, killTask("fw-1", "unknown", slacklinev1.TaskState_TASK_STATE_UNSPECIFIED))
		synctest.Wait()
		h.fake.send(t, agentID, &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ShutdownFramework{
			ShutdownFramework: &slacklinev1.ShutdownFrameworkCommand{FrameworkId: "fw-1"},
		}})
		h.fake.send(t, agentID, &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Ping{Ping: &slacklinev1.PingCommand{}}})
		synctest.Wait()

		for task, want := range map[string][]slacklinev1.TaskState{
			"a":       {running, killed},
			"b":       {running, goneByOperator},
			"c":       {running, killed}, // by shutdown_framework
			"d":       {running, killed},
			"other":   {running}, // another framework's task keeps running
			"unknown": {dropped},
		} {
			if diff := cmp.Diff(want, states(h.fake.statuses(task))); diff != "" {
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

		h.fake.send(t, agentID, runTask("t1", nil))
		synctest.Wait()
		h.fake.send(t, agentID, killTask("fw-1", "t1", slacklinev1.TaskState_TASK_STATE_UNSPECIFIED))
		synctest.Wait()
		first := h.fake.statuses("t1")
		if diff := cmp.Diff([]slacklinev1.TaskState{running}, states(first)); diff != "" {
			t.Fatalf("before any acknowledgement (-want +got):\n%s", diff)
		}

		// Re-sent after 10 s, then 20 s (backoff), with the same uuid; the
		// KILLED update waits behind the unacknowledged RUNNING one.
		time.Sleep(10*time.Second + time.Second)
		synctest.Wait()
		if got := states(h.fake.statuses("t1")); !cmp.Equal(got, []slacklinev1.TaskState{running, running}) {
			t.Fatalf("after 11s: states %v, want [RUNNING RUNNING]", got)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got := len(h.fake.statuses("t1")); got != 2 {
			t.Fatalf("after 21s: %d sends, want 2 (the second re-send is due at 30s)", got)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		got := h.fake.statuses("t1")
		if diff := cmp.Diff([]slacklinev1.TaskState{running, running, running}, states(got)); diff != "" {
			t.Fatalf("after 31s (-want +got):\n%s", diff)
		}
		for _, s := range got {
			if s.GetUuid() != first[0].GetUuid() {
				t.Errorf("re-sent uuid %s, want %s", s.GetUuid(), first[0].GetUuid())
			}
		}

		// Acknowledging RUNNING releases KILLED at once.
		h.fake.send(t, agentID, acknowledge(first[0]))
		synctest.Wait()
		got = h.fake.statuses("t1")
		if diff := cmp.Diff([]slacklinev1.TaskState{running, running, running, killed}, states(got)); diff != "" {
			t.Fatalf("after acknowledging RUNNING (-want +got):\n%s", diff)
		}
		if tasks := h.fleet.Agents()[0].Tasks(); len(tasks) != 1 || tasks[0].Unacknowledged != 1 {
			t.Errorf("Tasks() = %+v, want t1 with 1 unacknowledged update", tasks)
		}
		h.fake.send(t, agentID, acknowledge(got[3]))
		synctest.Wait()
		if tasks := h.fleet.Agents()[0].Tasks(); len(tasks) != 0 {
			t.Errorf("Tasks() = %+v after acknowledging the terminal update, want none", tasks)
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if got := len(h.fake.statuses("t1")); got != 4 {
			t.Errorf("%d sends after every update was acknowledged, want 4", got)
		}
	})
}

func TestReregistersAfterStaleSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, sim.Config{})
		defer h.stop(t)
		agentID := h.agentID(t)
		h.fake.send(t, agentID, runTask("t1", nil))
		h.fake.send(t, agentID, runTask("t2", map[string]string{sim.LabelDuration: "1s"}))
		synctest.Wait()
		h.ackAll(t, agentID, "t2")
		time.Sleep(time.Second)
		synctest.Wait()
		running1 := h.fake.statuses("t1")[0]

		// The coordinator forgets the session: the next heartbeat is refused
		// with FailedPrecondition and the agent registers again.
		h.fake.expire(agentID)
		time.Sleep(6 * time.Second)
		synctest.Wait()
		if got := h.fleet.Registered(); got != 1 {
			t.Fatalf("Registered() = %d after the backoff, want 1", got)
		}

		regs := h.fake.registrations()
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
		got := h.fake.statuses("t1")
		if len(got) != 2 || got[1].GetUuid() != running1.GetUuid() {
			t.Errorf("t1 updates %v: want RUNNING re-sent with uuid %s", states(got), running1.GetUuid())
		}
		if diff := cmp.Diff([]slacklinev1.TaskState{running, finished, finished}, states(h.fake.statuses("t2"))); diff != "" {
			t.Errorf("t2 states (-want +got):\n%s", diff)
		}
		if got := len(h.events.kinds(sim.EventDisconnected)); got != 1 {
			t.Errorf("%d disconnected events, want 1", got)
		}
	})
}

func TestRefusedRegistrationIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := start(t, sim.Config{}, func(f *fakeCoordinator) {
			f.refuse = connect.NewError(connect.CodePermissionDenied, errors.New("machine sim-0 is DOWN for maintenance"))
		})
		defer h.stop(t)
		if got := h.fleet.Registered(); got != 0 {
			t.Fatalf("Registered() = %d while refused, want 0", got)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		attempts := len(h.fake.registrations())
		// About every BackoffMax (10 s, jittered to 5-10 s): 6 to 13 attempts a minute.
		if attempts < 6 || attempts > 13 {
			t.Errorf("%d registration attempts in a minute while refused, want 6 to 13", attempts)
		}
		h.fake.setRefuse(nil)
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
		h.fake.send(t, agentID, runTask("t1", nil))
		synctest.Wait()
		h.ackAll(t, agentID, "t1")
		h.fake.send(t, agentID, &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ShutdownAgent{
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
		got := h.fake.statuses("t1")
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
		for _, req := range h.fake.registrations() {
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
			fake := newFakeCoordinator()
			mux := http.NewServeMux()
			mux.Handle(slacklinev1connect.NewAgentServiceHandler(fake))
			server := httptest.NewUnstartedServer(mux)
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
