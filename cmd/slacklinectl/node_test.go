package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/resources"
)

// fakeNode is an agent's NodeService: sandbox files in memory, keyed by
// "FRAMEWORK/TASK/PATH", read like the agent reads them, and canned
// containers. Each ReadSandboxFile is recorded and, when served is set,
// announced on it (without blocking).
type fakeNode struct {
	slacklinev1connect.UnimplementedNodeServiceHandler

	mu         sync.Mutex
	files      map[string][]byte
	containers *slacklinev1.GetContainersResponse
	reads      []*slacklinev1.ReadSandboxFileRequest
	served     chan struct{}
}

func (f *fakeNode) ReadSandboxFile(_ context.Context, req *connect.Request[slacklinev1.ReadSandboxFileRequest]) (*connect.Response[slacklinev1.ReadSandboxFileResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.served != nil {
		defer func() {
			select {
			case f.served <- struct{}{}:
			default:
			}
		}()
	}
	msg := req.Msg
	f.reads = append(f.reads, msg)
	length := msg.GetLength()
	if length == 0 {
		length = defaultTail
	}
	if length < 0 || length > maxRead {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("length %d must be between 1 and %d", length, maxRead))
	}
	var data []byte
	found := false
	for key, content := range f.files {
		framework, rest, _ := strings.Cut(key, "/")
		if rest == msg.GetTaskId()+"/"+msg.GetPath() && (msg.GetFrameworkId() == "" || framework == msg.GetFrameworkId()) {
			data, found = content, true
		}
	}
	if !found {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("%s not found in the sandbox of %q", msg.GetPath(), msg.GetTaskId()))
	}
	size := int64(len(data))
	offset := msg.GetOffset()
	if offset < 0 {
		offset = max(0, size+offset)
	}
	offset = min(offset, size)
	end := min(size, offset+length)
	return connect.NewResponse(&slacklinev1.ReadSandboxFileResponse{
		Data: bytes.Clone(data[offset:end]), Offset: offset, Size: size,
	}), nil
}

func (f *fakeNode) GetContainers(context.Context, *connect.Request[slacklinev1.GetContainersRequest]) (*connect.Response[slacklinev1.GetContainersResponse], error) {
	return connect.NewResponse(f.containers), nil
}

// appendFile appends data to a sandbox file, as a running task does.
func (f *fakeNode) appendFile(key, data string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[key] = append(f.files[key], data...)
}

// serveNode starts the fake agent and returns its URL.
func serveNode(t *testing.T, fake *fakeNode) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewNodeServiceHandler(fake))
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)
	return server.URL
}

// bigLog is a stdout of over 2 MiB: three ReadSandboxFile calls.
var bigLog = func() []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < 2<<20+1000; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.Bytes()
}()

// logsCluster starts a fake agent with sandboxes and a fake coordinator
// whose agent a-1 is that agent. Tasks: t-1 in frameworks f-1 and f-2,
// t-2 (stdout and stderr), t-3 (bigLog), t-4 on an agent without endpoint,
// t-5 on an unknown agent, t-6 without files.
func logsCluster(t *testing.T) (coordinatorURL, nodeURL string, node *fakeNode) {
	t.Helper()
	node = &fakeNode{files: map[string][]byte{
		"f-1/t-1/stdout": []byte("one\n"),
		"f-2/t-1/stdout": []byte("two\n"),
		"f-1/t-2/stdout": []byte("line 1\nline 2\nline 3\n"),
		"f-1/t-2/stderr": []byte("oops\n"),
		"f-1/t-3/stdout": bigLog,
	}}
	nodeURL = serveNode(t, node)
	task := func(id, framework, agent string) *slacklinev1.Task {
		return &slacklinev1.Task{TaskId: id, FrameworkId: framework, AgentId: agent, State: slacklinev1.TaskState_TASK_STATE_RUNNING}
	}
	named := func(t *slacklinev1.Task, name string) *slacklinev1.Task { t.Name = name; return t }
	coordinatorURL = serve(t, &fakeOperator{
		agents: &slacklinev1.GetAgentsResponse{Agents: []*slacklinev1.Agent{
			{Id: "a-1", Hostname: "node-1", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: nodeURL},
			{Id: "a-2", Hostname: "node-2", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE},
		}},
		tasks: &slacklinev1.GetTasksResponse{Tasks: []*slacklinev1.Task{
			task("t-1", "f-1", "a-1"), task("t-1", "f-2", "a-1"), named(task("t-2", "f-1", "a-1"), "worker-2"), task("t-3", "f-1", "a-1"),
			task("t-4", "f-1", "a-2"), task("t-5", "f-1", "a-9"), task("t-6", "f-1", "a-1"),
			{TaskId: "t-7", FrameworkId: "f-1", AgentId: "a-1", State: slacklinev1.TaskState_TASK_STATE_STAGING},
		}},
	})
	return coordinatorURL, nodeURL, node
}

func TestLogs(t *testing.T) {
	url, _, node := logsCluster(t)
	tests := []struct {
		name      string
		args      []string
		want      string
		wantFirst *slacklinev1.ReadSandboxFileRequest
	}{
		{
			name:      "default tail",
			args:      []string{"logs", "t-2"},
			want:      "line 1\nline 2\nline 3\n",
			wantFirst: &slacklinev1.ReadSandboxFileRequest{FrameworkId: "f-1", TaskId: "t-2", Path: "stdout", Offset: -defaultTail, Length: defaultTail},
		},
		{
			name:      "by task name",
			args:      []string{"logs", "worker-2"},
			want:      "line 1\nline 2\nline 3\n",
			wantFirst: &slacklinev1.ReadSandboxFileRequest{FrameworkId: "f-1", TaskId: "t-2", Path: "stdout", Offset: -defaultTail, Length: defaultTail},
		},
		{
			name:      "framework by name",
			args:      []string{"logs", "t-1", "--framework", "batch"},
			want:      "one\n",
			wantFirst: &slacklinev1.ReadSandboxFileRequest{FrameworkId: "f-1", TaskId: "t-1", Path: "stdout", Offset: -defaultTail, Length: defaultTail},
		},
		{
			name:      "tail",
			args:      []string{"logs", "t-2", "--tail", "7"},
			want:      "line 3\n",
			wantFirst: &slacklinev1.ReadSandboxFileRequest{FrameworkId: "f-1", TaskId: "t-2", Path: "stdout", Offset: -7, Length: 7},
		},
		{
			name: "no tail",
			args: []string{"logs", "t-2", "--tail", "0"},
			want: "",
		},
		{
			name:      "stderr",
			args:      []string{"logs", "t-2", "--stderr"},
			want:      "oops\n",
			wantFirst: &slacklinev1.ReadSandboxFileRequest{FrameworkId: "f-1", TaskId: "t-2", Path: "stderr", Offset: -defaultTail, Length: defaultTail},
		},
		{
			name:      "framework chosen",
			args:      []string{"logs", "t-1", "--framework", "f-2"},
			want:      "two\n",
			wantFirst: &slacklinev1.ReadSandboxFileRequest{FrameworkId: "f-2", TaskId: "t-1", Path: "stdout", Offset: -defaultTail, Length: defaultTail},
		},
		{
			name: "tail longer than one read",
			args: []string{"logs", "t-3", "--tail", fmt.Sprint(3 << 19)},
			want: string(bigLog[len(bigLog)-3<<19:]),
		},
		{
			name: "whole file",
			args: []string{"logs", "t-3", "--tail", "-1"},
			want: string(bigLog),
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			node.mu.Lock()
			node.reads = nil
			node.mu.Unlock()
			got, err := run(t, append([]string{"--coordinator", url}, test.args...)...)
			if err != nil {
				t.Fatalf("%q: %v", test.args, err)
			}
			if got != test.want {
				if len(got) > 100 || len(test.want) > 100 {
					t.Errorf("%q printed %d bytes, want %d", test.args, len(got), len(test.want))
				} else {
					t.Errorf("%q printed %q, want %q", test.args, got, test.want)
				}
			}
			if test.wantFirst != nil {
				if diff := cmp.Diff(test.wantFirst, node.reads[0], protocmp.Transform()); diff != "" {
					t.Errorf("first ReadSandboxFileRequest (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestLogsErrors(t *testing.T) {
	url, _, _ := logsCluster(t)
	tests := []struct {
		args     []string
		wantErr  string
		wantCode connect.Code
	}{
		{[]string{"logs", "t-1"}, `logs: task "t-1" is in several frameworks (f-1, f-2): choose one with --framework`, connect.CodeUnknown},
		{[]string{"logs", "t-9"}, `logs: not_found: task "t-9" not found`, connect.CodeNotFound},
		{[]string{"logs", "t-2", "--framework", "f-2"}, `logs: not_found: task "t-2" of framework "f-2" not found`, connect.CodeNotFound},
		{[]string{"logs", "t-4"}, `logs: unavailable: agent a-2 (node-2) registered no NodeService endpoint`, connect.CodeUnavailable},
		{[]string{"logs", "t-5"}, `logs: not_found: no agent "a-9"`, connect.CodeNotFound},
		{[]string{"logs", "t-6"}, `logs: not_found: stdout not found in the sandbox of "t-6"`, connect.CodeNotFound},
	}
	for _, test := range tests {
		_, err := run(t, append([]string{"--coordinator", url}, test.args...)...)
		if err == nil || err.Error() != test.wantErr {
			t.Errorf("%q: error %v, want %q", test.args, err, test.wantErr)
		}
		if code := connect.CodeOf(err); code != test.wantCode {
			t.Errorf("%q: code %v, want %v", test.args, code, test.wantCode)
		}
	}
}

// syncBuffer is a bytes.Buffer that a running command writes while the test
// reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestLogsWaitsForALaunchingTask: a STAGING task's output not found yet
// (its agent is still creating the sandbox) is asked for again until it
// appears, then printed; a RUNNING task's is not_found at once
// (TestLogsErrors' t-6).
func TestLogsWaitsForALaunchingTask(t *testing.T) {
	saved := followInterval
	followInterval = time.Millisecond
	t.Cleanup(func() { followInterval = saved })

	url, _, node := logsCluster(t)
	node.served = make(chan struct{}, 1)
	var out syncBuffer
	cmd := newRootCommand(&out)
	cmd.SetArgs([]string{"--coordinator", url, "logs", "t-7"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(t.Context()) }()
	// The first read finds nothing; then the sandbox appears.
	select {
	case <-node.served:
	case err := <-done:
		t.Fatalf("logs of a STAGING task ended before its output appeared: %v", err)
	}
	node.appendFile("f-1/t-7/stdout", "hello\n")
	select {
	case err := <-done:
		if err != nil || out.String() != "hello\n" {
			t.Fatalf("logs of a STAGING task: %v, printed %q, want hello", err, out.String())
		}
	case <-time.After(sandboxWait):
		t.Fatal("logs of a STAGING task did not print its output once it appeared")
	}
}

func TestLogsFollow(t *testing.T) {
	saved := followInterval
	followInterval = time.Millisecond
	t.Cleanup(func() { followInterval = saved })

	url, _, node := logsCluster(t)
	node.served = make(chan struct{}, 1)
	var out syncBuffer
	cmd := newRootCommand(&out)
	cmd.SetArgs([]string{"--coordinator", url, "logs", "t-2", "--tail", "14", "-f"})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	// waitFor waits until the output is want. The command reads and then
	// prints, one read at a time, so once a read is served after the
	// output changed, every earlier read has been printed.
	waitFor := func(want string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case <-node.served:
			case err := <-done:
				t.Fatalf("logs -f ended early: %v; printed %q", err, out.String())
			case <-timeout:
				t.Fatalf("logs -f printed %q, want %q", out.String(), want)
			}
			if got := out.String(); got == want {
				return
			} else if !strings.HasPrefix(want, got) {
				t.Fatalf("logs -f printed %q, want %q", got, want)
			}
		}
	}
	waitFor("line 2\nline 3\n")
	node.appendFile("f-1/t-2/stdout", "line 4\n")
	waitFor("line 2\nline 3\nline 4\n")
	node.appendFile("f-1/t-2/stdout", "line 5\nline 6\n")
	waitFor("line 2\nline 3\nline 4\nline 5\nline 6\n")

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("logs -f ended with %v after the interrupt, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("logs -f did not stop on context cancel")
	}
	if got, want := out.String(), "line 2\nline 3\nline 4\nline 5\nline 6\n"; got != want {
		t.Errorf("logs -f printed %q after the interrupt, want %q", got, want)
	}
	node.mu.Lock()
	defer node.mu.Unlock()
	for _, r := range node.reads[1:] {
		if r.GetOffset() < 0 {
			t.Errorf("follow read at offset %d, want the absolute offset after what was printed", r.GetOffset())
		}
	}
}

var testContainers = &slacklinev1.GetContainersResponse{Containers: []*slacklinev1.Container{
	{
		ContainerId: "c-1", TaskId: "t-1", FrameworkId: "f-1", State: slacklinev1.TaskState_TASK_STATE_RUNNING,
		CgroupPath: "slackline/guaranteed/c-1", Resources: resources.MustParse("cpus:1;mem:512").Proto("eng", resources.Regular),
		Pid: 4242, Sandbox: "/var/lib/slackline/agent/sandboxes/f-1/t-1", CgroupMode: "v2",
		StartedTime: timestamppb.New(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)),
	},
	{
		ContainerId: "c-2", TaskId: "t-2", FrameworkId: "f-1", Revocable: true,
		CgroupPath: "slackline/revocable/c-2", Resources: resources.MustParse("cpus:0.5").Proto("eng", resources.Revocable),
		Sandbox: "/var/lib/slackline/agent/sandboxes/f-1/t-2",
	},
}}

func TestGetContainers(t *testing.T) {
	node := &fakeNode{containers: testContainers}
	nodeURL := serveNode(t, node)
	url := serve(t, &fakeOperator{agents: &slacklinev1.GetAgentsResponse{Agents: []*slacklinev1.Agent{
		// A stale registration of the same host: the active one is meant.
		{Id: "a-0", Hostname: "node-1", State: slacklinev1.AgentState_AGENT_STATE_UNREACHABLE, Endpoint: "http://127.0.0.1:1"},
		{Id: "a-1", Hostname: "node-1", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: nodeURL},
	}}})
	wantTable := strings.TrimPrefix(`
TASK   FRAMEWORK   STATE     RESOURCES            PID    CGROUP
t-1    batch       RUNNING   cpus:1;mem:512       4242   slackline/guaranteed/c-1
t-2    batch       -         revocable cpus:0.5   -      slackline/revocable/c-2
`, "\n")
	for _, by := range [][]string{{"--agent", "a-1"}, {"--hostname", "node-1"}} {
		got, err := run(t, append([]string{"--coordinator", url, "get", "containers"}, by...)...)
		if err != nil {
			t.Fatalf("get containers %q: %v", by, err)
		}
		if diff := cmp.Diff(wantTable, got); diff != "" {
			t.Errorf("get containers %q (-want +got):\n%s", by, diff)
		}

		got, err = run(t, append([]string{"--coordinator", url, "get", "containers", "-o", "json"}, by...)...)
		if err != nil {
			t.Fatalf("get containers %q -o json: %v", by, err)
		}
		decoded := &slacklinev1.GetContainersResponse{}
		if err := protojson.Unmarshal([]byte(got), decoded); err != nil {
			t.Fatalf("output is not the response in JSON: %v\n%s", err, got)
		}
		if diff := cmp.Diff(testContainers, decoded, protocmp.Transform()); diff != "" {
			t.Errorf("decoded output (-want +got):\n%s", diff)
		}
	}

	_, err := run(t, "--coordinator", url, "get", "containers", "--hostname", "node-9")
	if want := `get containers: not_found: no agent with hostname or id "node-9" (see slacklinectl get agents)`; err == nil || err.Error() != want {
		t.Errorf("unknown hostname: error %v, want %q", err, want)
	}
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("unknown hostname: code %v, want not_found", connect.CodeOf(err))
	}

	// An agent that does not answer.
	_, err = run(t, "--coordinator", url, "get", "containers", "--agent", "a-0")
	if err == nil || !strings.HasPrefix(err.Error(), "get containers: unavailable: ") {
		t.Errorf("error %v, want get containers: unavailable: ...", err)
	}
}
