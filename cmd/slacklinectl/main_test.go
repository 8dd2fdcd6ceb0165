package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/slackline/slackline/coordinator/ui"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/resources"
)

// fakeOperator serves canned state and records updates. When err is set,
// every call fails with it. agents and tasks, when set, replace testAgents
// and testTasks.
type fakeOperator struct {
	slacklinev1connect.UnimplementedOperatorServiceHandler

	mu       sync.Mutex
	err      error
	agents   *slacklinev1.GetAgentsResponse
	tasks    *slacklinev1.GetTasksResponse
	calls    int
	weights  []*slacklinev1.UpdateWeightsRequest
	quotas   []*slacklinev1.UpdateQuotaRequest
	tasksReq *slacklinev1.GetTasksRequest
}

func (f *fakeOperator) call() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return f.err
}

var (
	testAgents = &slacklinev1.GetAgentsResponse{Agents: []*slacklinev1.Agent{
		{
			Id: "a-1", Hostname: "node-1",
			State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Mode: slacklinev1.MachineMode_MACHINE_MODE_UP,
			Resources:          resources.MustParse("cpus:8;mem:16384;ports:[31000-32000]").Proto("", resources.Regular),
			Allocated:          resources.MustParse("cpus:2;mem:1024").Proto("eng", resources.Regular),
			Revocable:          resources.MustParse("cpus:3;mem:2048").Proto("", resources.Revocable),
			AllocatedRevocable: resources.MustParse("cpus:1").Proto("batch", resources.Revocable),
		},
		{
			Id: "a-2", Hostname: "node-2",
			State: slacklinev1.AgentState_AGENT_STATE_UNREACHABLE, Mode: slacklinev1.MachineMode_MACHINE_MODE_DRAINING,
			Resources: resources.MustParse("cpus:4;mem:8192").Proto("", resources.Regular),
		},
	}}
	testFrameworks = &slacklinev1.GetFrameworksResponse{Frameworks: []*slacklinev1.Framework{
		{
			Info:      &slacklinev1.FrameworkInfo{Id: "f-1", Name: "batch", Roles: []string{"eng", "eng/batch"}},
			State:     slacklinev1.FrameworkState_FRAMEWORK_STATE_CONNECTED,
			Allocated: append(resources.MustParse("cpus:2;mem:1024").Proto("eng", resources.Regular), resources.MustParse("cpus:1").Proto("eng", resources.Revocable)...),
		},
		{
			Info:  &slacklinev1.FrameworkInfo{Id: "f-2", Name: "web"},
			State: slacklinev1.FrameworkState_FRAMEWORK_STATE_DISCONNECTED,
		},
	}}
	testTasks = &slacklinev1.GetTasksResponse{Tasks: []*slacklinev1.Task{
		{
			TaskId: "t-1", FrameworkId: "f-1", AgentId: "a-1", State: slacklinev1.TaskState_TASK_STATE_RUNNING,
			Resources: resources.MustParse("cpus:1;mem:512").Proto("eng", resources.Regular),
			Status:    &slacklinev1.TaskStatus{Healthy: proto.Bool(true)},
		},
		{
			TaskId: "t-2", FrameworkId: "f-1", AgentId: "a-1", State: slacklinev1.TaskState_TASK_STATE_FAILED,
			Resources: resources.MustParse("cpus:1").Proto("eng", resources.Revocable),
			Status:    &slacklinev1.TaskStatus{Message: "exited with code 3"},
		},
	}}
	testRoles = &slacklinev1.GetRolesResponse{Roles: []*slacklinev1.Role{
		{
			Name: "eng", Weight: 2.5,
			Quota:         &slacklinev1.Quota{Limits: resources.MustParse("cpus:10;mem:20480").Proto("", resources.Regular)},
			Allocated:     resources.MustParse("cpus:2;mem:1024").Proto("eng", resources.Regular),
			FrameworkIds:  []string{"f-1", "f-2"},
			DominantShare: 1.0 / 6,
		},
		{Name: "ops", Weight: 1},
	}}
)

func (f *fakeOperator) GetAgents(context.Context, *connect.Request[slacklinev1.GetAgentsRequest]) (*connect.Response[slacklinev1.GetAgentsResponse], error) {
	if err := f.call(); err != nil {
		return nil, err
	}
	if f.agents != nil {
		return connect.NewResponse(f.agents), nil
	}
	return connect.NewResponse(testAgents), nil
}

func (f *fakeOperator) GetFrameworks(context.Context, *connect.Request[slacklinev1.GetFrameworksRequest]) (*connect.Response[slacklinev1.GetFrameworksResponse], error) {
	if err := f.call(); err != nil {
		return nil, err
	}
	return connect.NewResponse(testFrameworks), nil
}

func (f *fakeOperator) GetTasks(_ context.Context, req *connect.Request[slacklinev1.GetTasksRequest]) (*connect.Response[slacklinev1.GetTasksResponse], error) {
	if err := f.call(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.tasksReq = req.Msg
	f.mu.Unlock()
	if f.tasks != nil {
		return connect.NewResponse(f.tasks), nil
	}
	return connect.NewResponse(testTasks), nil
}

func (f *fakeOperator) GetRoles(context.Context, *connect.Request[slacklinev1.GetRolesRequest]) (*connect.Response[slacklinev1.GetRolesResponse], error) {
	if err := f.call(); err != nil {
		return nil, err
	}
	return connect.NewResponse(testRoles), nil
}

func (f *fakeOperator) UpdateWeights(_ context.Context, req *connect.Request[slacklinev1.UpdateWeightsRequest]) (*connect.Response[slacklinev1.UpdateWeightsResponse], error) {
	if err := f.call(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.weights = append(f.weights, req.Msg)
	return connect.NewResponse(&slacklinev1.UpdateWeightsResponse{}), nil
}

func (f *fakeOperator) UpdateQuota(_ context.Context, req *connect.Request[slacklinev1.UpdateQuotaRequest]) (*connect.Response[slacklinev1.UpdateQuotaResponse], error) {
	if err := f.call(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.quotas = append(f.quotas, req.Msg)
	return connect.NewResponse(&slacklinev1.UpdateQuotaResponse{}), nil
}

// MayReadSandbox lets a caller read the sandboxes of the tasks the fake
// lists on their agents (the coordinator checks principals; see
// coordinator's tests), and refuses every other with permission_denied.
func (f *fakeOperator) MayReadSandbox(_ context.Context, agentID, frameworkID, taskID string) error {
	f.mu.Lock()
	tasks := f.tasks
	f.mu.Unlock()
	if tasks == nil {
		tasks = testTasks
	}
	for _, t := range tasks.GetTasks() {
		if t.GetAgentId() == agentID && t.GetFrameworkId() == frameworkID && t.GetTaskId() == taskID {
			return nil
		}
	}
	return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("task %q of framework %q on agent %q: not yours", taskID, frameworkID, agentID))
}

// serve starts the fake, with the coordinator's real node proxy in front
// of the agents it lists, and returns its URL.
func serve(t *testing.T, fake *fakeOperator) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewOperatorServiceHandler(fake))
	mux.Handle("/ui/", ui.Handler(ui.Config{Agents: fake, Sandboxes: fake}))
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)
	return server.URL
}

// run runs slacklinectl with args and returns its output and error.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := newRootCommand(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return out.String(), err
}

func TestGetTable(t *testing.T) {
	url := serve(t, &fakeOperator{})
	tests := []struct {
		resource string
		want     string
	}{
		{"agents", `
HOSTNAME   STATE         MODE       RESOURCES                              ALLOCATED         REVOCABLE
node-1     ACTIVE        UP         cpus:8;mem:16384;ports:[31000-32000]   cpus:2;mem:1024   cpus:3;mem:2048 (allocated cpus:1)
node-2     UNREACHABLE   DRAINING   cpus:4;mem:8192                        -                 -
`},
		{"frameworks", `
NAME    STATE          ROLES           ALLOCATED
batch   CONNECTED      eng,eng/batch   cpus:2;mem:1024 + revocable cpus:1
web     DISCONNECTED   *               -
`},
		{"tasks", `
ID    NAME   FRAMEWORK   AGENT    STATE     HEALTH    RESOURCES          MESSAGE
t-1   -      batch       node-1   RUNNING   healthy   cpus:1;mem:512     -
t-2   -      batch       node-1   FAILED    -         revocable cpus:1   exited with code 3
`},
		{"roles", `
NAME   WEIGHT   QUOTA               ALLOCATED         SHARE   FRAMEWORKS
eng    2.5      cpus:10;mem:20480   cpus:2;mem:1024   0.167   batch,web
ops    1        -                   -                 0.000   -
`},
	}
	for _, test := range tests {
		t.Run(test.resource, func(t *testing.T) {
			got, err := run(t, "--coordinator", url, "get", test.resource)
			if err != nil {
				t.Fatalf("get %s: %v", test.resource, err)
			}
			if diff := cmp.Diff(strings.TrimPrefix(test.want, "\n"), got); diff != "" {
				t.Errorf("get %s (-want +got):\n%s", test.resource, diff)
			}
		})
	}
}

func TestGetJSON(t *testing.T) {
	url := serve(t, &fakeOperator{})
	tests := []struct {
		resource string
		want     proto.Message
	}{
		{"agents", testAgents},
		{"frameworks", testFrameworks},
		{"tasks", testTasks},
		{"roles", testRoles},
	}
	for _, test := range tests {
		t.Run(test.resource, func(t *testing.T) {
			got, err := run(t, "--coordinator", url, "get", test.resource, "-o", "json")
			if err != nil {
				t.Fatalf("get %s -o json: %v", test.resource, err)
			}
			if strings.Count(got, "\n") < 3 {
				t.Errorf("output is not multi-line JSON:\n%s", got)
			}
			decoded := test.want.ProtoReflect().New().Interface()
			if err := protojson.Unmarshal([]byte(got), decoded); err != nil {
				t.Fatalf("output is not the response in JSON: %v\n%s", err, got)
			}
			if diff := cmp.Diff(test.want, decoded, protocmp.Transform()); diff != "" {
				t.Errorf("decoded output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGetTasksFilters(t *testing.T) {
	fake := &fakeOperator{}
	url := serve(t, fake)
	t.Setenv(coordinatorEnv, url) // instead of --coordinator
	if _, err := run(t, "get", "tasks", "--framework", "f-1", "--agent", "a-1"); err != nil {
		t.Fatal(err)
	}
	want := &slacklinev1.GetTasksRequest{FrameworkId: "f-1", AgentId: "a-1"}
	if diff := cmp.Diff(want, fake.tasksReq, protocmp.Transform()); diff != "" {
		t.Errorf("GetTasksRequest (-want +got):\n%s", diff)
	}
}

func TestSet(t *testing.T) {
	fake := &fakeOperator{}
	url := serve(t, fake)
	tests := []struct {
		args       []string
		wantOutput string
	}{
		{[]string{"set", "weight", "eng", "2.5"}, "role eng: weight set to 2.5\n"},
		{[]string{"set", "quota", "eng", "cpus:10;mem:20480"}, "role eng: quota set to cpus:10;mem:20480\n"},
		{[]string{"set", "quota", "eng", ""}, "role eng: quota removed\n"},
		{[]string{"set", "weight", "ops", "3", "-o", "json"}, "{}\n"},
	}
	for _, test := range tests {
		got, err := run(t, append([]string{"--coordinator", url}, test.args...)...)
		if err != nil {
			t.Fatalf("%q: %v", test.args, err)
		}
		if got != test.wantOutput {
			t.Errorf("%q printed %q, want %q", test.args, got, test.wantOutput)
		}
	}
	wantWeights := []*slacklinev1.UpdateWeightsRequest{
		{Weights: []*slacklinev1.WeightInfo{{Role: "eng", Weight: 2.5}}},
		{Weights: []*slacklinev1.WeightInfo{{Role: "ops", Weight: 3}}},
	}
	if diff := cmp.Diff(wantWeights, fake.weights, protocmp.Transform()); diff != "" {
		t.Errorf("UpdateWeights requests (-want +got):\n%s", diff)
	}
	wantQuotas := []*slacklinev1.UpdateQuotaRequest{
		{Configs: []*slacklinev1.QuotaConfig{{Role: "eng", Limits: []*slacklinev1.Resource{{Name: "cpus", Scalar: 10}, {Name: "mem", Scalar: 20480}}}}},
		{Configs: []*slacklinev1.QuotaConfig{{Role: "eng"}}},
	}
	if diff := cmp.Diff(wantQuotas, fake.quotas, protocmp.Transform()); diff != "" {
		t.Errorf("UpdateQuota requests (-want +got):\n%s", diff)
	}
}

func TestInvalidArguments(t *testing.T) {
	fake := &fakeOperator{}
	url := serve(t, fake)
	tests := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"set", "weight", "eng", "0"}, `set weight: weight "0": must be a positive finite number`},
		{[]string{"set", "weight", "--", "eng", "-1"}, `set weight: weight "-1": must be a positive finite number`},
		{[]string{"set", "weight", "eng", "NaN"}, `set weight: weight "NaN": must be a positive finite number`},
		{[]string{"set", "weight", "eng", "+Inf"}, `set weight: weight "+Inf": must be a positive finite number`},
		{[]string{"set", "weight", "eng", "heavy"}, `set weight: weight "heavy": must be a positive finite number`},
		{[]string{"set", "weight", "eng"}, "set weight: want ROLE WEIGHT, got 1 argument(s)"},
		{[]string{"set", "quota", "eng", "cpus:lots"}, `set quota: invalid resources: cpus value "lots" is not a number`},
		{[]string{"set", "quota", "eng", "ports:[1-2]"}, "set quota: quota limits scalar resources (cpus, mem, disk), not ports"},
		{[]string{"set", "speed", "x"}, `set: unknown setting "speed": want weight or quota`},
		{[]string{"get", "pods"}, `get: unknown resource "pods": want one of agents, frameworks, tasks, roles, containers, features`},
		{[]string{"get", "containers", "--agent", "a-1", "--hostname", "x"}, "get containers: --agent and --hostname exclude each other"},
		{[]string{"top", "--agent", "http://x:5051"}, `top: --agent "http://x:5051": want an agent's hostname or id (see get agents): slacklinectl reaches agents only through the coordinator, never at a URL`},
		{[]string{"logs", "t-1", "--agent", "a-1"}, "unknown flag: --agent"},
		{[]string{"logs"}, "logs: want TASK, got 0 argument(s)"},
		{[]string{"logs", "t-1", "t-2"}, "logs: want TASK, got 2 argument(s)"},
		{[]string{"logs", "t-1", "--tail", "-2"}, "logs: --tail -2: want a number of bytes, 0 for none or -1 for the whole file"},
		{[]string{"get", "tasks", "extra"}, `get tasks: takes no arguments, got ["extra"]`},
		{[]string{"get", "agents", "-o", "xml"}, `unknown output format "xml": want table, wide, json, yaml or jsonpath=EXPR`},
		{[]string{"get", "agents", "-o", "jsonpath=$[?"}, "-o jsonpath=$[?: jsonpath: unexpected eof at position 4"},
	}
	for _, test := range tests {
		_, err := run(t, append([]string{"--coordinator", url}, test.args...)...)
		if err == nil || err.Error() != test.wantErr {
			t.Errorf("%q: error %v, want %q", test.args, err, test.wantErr)
		}
	}
	if fake.calls != 0 {
		t.Errorf("invalid arguments made %d calls to the coordinator, want 0", fake.calls)
	}
}

func TestCoordinatorErrors(t *testing.T) {
	fake := &fakeOperator{err: connect.NewError(connect.CodeUnavailable, errors.New("not the leader"))}
	url := serve(t, fake)
	for _, args := range [][]string{
		{"get", "agents"}, {"get", "frameworks"}, {"get", "tasks"}, {"get", "roles"},
		{"set", "weight", "eng", "2"}, {"set", "quota", "eng", "cpus:1"},
		{"logs", "t-1"}, {"get", "containers", "--hostname", "node-1"},
	} {
		_, err := run(t, append([]string{"--coordinator", url}, args...)...)
		command := strings.Join(args[:2], " ")
		if args[0] == "logs" {
			command = "logs"
		}
		want := command + ": unavailable: not the leader"
		if err == nil || err.Error() != want {
			t.Errorf("%q: error %v, want %q", args, err, want)
		}
		if connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("%q: code %v, want unavailable", args, connect.CodeOf(err))
		}
	}

	// No coordinator at all.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	_, err := run(t, "--coordinator", closed.URL, "get", "agents")
	if err == nil || !strings.HasPrefix(err.Error(), "get agents: unavailable: ") {
		t.Errorf("error %v, want get agents: unavailable: ...", err)
	}
}

// TestVersion: "slacklinectl version" and "slacklinectl --version" print
// the build's version line.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out bytes.Buffer
		root := newRootCommand(&out)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if got := out.String(); !strings.HasPrefix(got, "slacklinectl ") || !strings.Contains(got, "revision") || !strings.HasSuffix(got, "\n") {
			t.Errorf("%v printed %q, want slacklinectl's version line", args, got)
		}
	}
}

// TestMain points the contexts file at a path that does not exist, so that
// a developer's own contexts (make run writes one) never reach the tests.
func TestMain(m *testing.M) {
	os.Setenv(configEnv, filepath.Join(os.TempDir(), "slacklinectl-test-no-such-config.yaml"))
	os.Unsetenv(contextEnv)
	for _, env := range []string{coordinatorEnv, "SLACKLINE_CA", "SLACKLINE_TOKEN_FILE", "SLACKLINE_CRL"} {
		os.Unsetenv(env)
	}
	os.Exit(m.Run())
}
