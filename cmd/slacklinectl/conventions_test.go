package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"sigs.k8s.io/yaml"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestNaturalCompare: digits compare by value, so batch-2 sorts before
// batch-10.
func TestNaturalCompare(t *testing.T) {
	t.Parallel()
	got := []string{"batch-10", "batch-2", "batch-1", "b", "batch-01", "node-9", "node-10a", "node-10", "a10", "a9b"}
	slices.SortFunc(got, naturalCompare)
	want := []string{"a9b", "a10", "b", "batch-01", "batch-1", "batch-2", "batch-10", "node-9", "node-10", "node-10a"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("natural order (-want +got):\n%s", diff)
	}
}

// TestGetSortsNaturally: get tasks lists batch-2 before batch-10.
func TestGetSortsNaturally(t *testing.T) {
	t.Parallel()
	var tasks []*slacklinev1.Task
	for _, id := range []string{"batch-10", "batch-1", "batch-2"} {
		tasks = append(tasks, &slacklinev1.Task{TaskId: id, FrameworkId: "f-1", AgentId: "a-1", State: slacklinev1.TaskState_TASK_STATE_RUNNING})
	}
	url := serve(t, &fakeOperator{tasks: &slacklinev1.GetTasksResponse{Tasks: tasks}})
	got, err := run(t, "--coordinator", url, "get", "tasks", "-o", "jsonpath={.tasks[*].taskId}")
	if err != nil {
		t.Fatal(err)
	}
	if want := "batch-1\nbatch-2\nbatch-10\n"; got != want {
		t.Errorf("task ids in order %q, want %q", got, want)
	}
}

// TestOutputFormats: -o yaml is the response, -o wide adds the id
// columns, -o jsonpath selects values in both RFC 9535 and kubectl form.
func TestOutputFormats(t *testing.T) {
	t.Parallel()
	url := serve(t, &fakeOperator{})

	out, err := run(t, "--coordinator", url, "get", "agents", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Agents []struct {
			ID       string `json:"id"`
			Hostname string `json:"hostname"`
		} `json:"agents"`
	}
	if err := yaml.Unmarshal([]byte(out), &decoded); err != nil {
		t.Fatalf("-o yaml is not YAML: %v\n%s", err, out)
	}
	if len(decoded.Agents) != 2 || decoded.Agents[0].Hostname != "node-1" || decoded.Agents[1].ID != "a-2" {
		t.Errorf("-o yaml decoded to %+v", decoded)
	}

	out, err = run(t, "--coordinator", url, "get", "agents", "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	if header := strings.Fields(strings.SplitN(out, "\n", 2)[0]); !slices.Contains(header, "ID") || !slices.Contains(header, "ENDPOINT") {
		t.Errorf("-o wide header %q lacks ID and ENDPOINT", header)
	}

	for _, expr := range []string{"jsonpath=$.agents[*].hostname", "jsonpath={.agents[*].hostname}"} {
		out, err = run(t, "--coordinator", url, "get", "agents", "-o", expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if want := "node-1\nnode-2\n"; out != want {
			t.Errorf("-o %s printed %q, want %q", expr, out, want)
		}
	}
}

// TestNamesAccepted: hostnames and framework names are accepted where ids
// are, and get agents NAME shows that agent.
func TestNamesAccepted(t *testing.T) {
	t.Parallel()
	fake := &fakeOperator{}
	url := serve(t, fake)
	if _, err := run(t, "--coordinator", url, "get", "tasks", "--framework", "batch", "--agent", "node-1"); err != nil {
		t.Fatal(err)
	}
	want := &slacklinev1.GetTasksRequest{FrameworkId: "f-1", AgentId: "a-1"}
	fake.mu.Lock()
	got := fake.tasksReq
	fake.mu.Unlock()
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("GetTasksRequest (-want +got):\n%s", diff)
	}

	out, err := run(t, "--coordinator", url, "get", "agents", "node-2", "-o", "jsonpath=$.agents[*].id")
	if err != nil {
		t.Fatal(err)
	}
	if out != "a-2\n" {
		t.Errorf("get agents node-2 printed %q, want a-2", out)
	}
	_, err = run(t, "--coordinator", url, "get", "agents", "node-9")
	if code := exitCode(err); code != exitNotFound {
		t.Errorf("get agents node-9: error %v, exit %d, want %d", err, code, exitNotFound)
	}
}

// TestOnlyAgentIsTheDefault: with one agent, commands that need one use it;
// with several they ask for --agent and list the hostnames.
func TestOnlyAgentIsTheDefault(t *testing.T) {
	t.Parallel()
	node := &fakeNode{containers: testContainers}
	nodeURL := serveNode(t, node)
	one := serve(t, &fakeOperator{agents: &slacklinev1.GetAgentsResponse{Agents: []*slacklinev1.Agent{
		{Id: "a-1", Hostname: "node-1", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: nodeURL},
	}}})
	out, err := run(t, "--coordinator", one, "get", "containers", "-o", "jsonpath=$.containers[*].taskId")
	if err != nil {
		t.Fatal(err)
	}
	if out != "t-1\nt-2\n" {
		t.Errorf("get containers printed %q", out)
	}
	two := serve(t, &fakeOperator{})
	_, err = run(t, "--coordinator", two, "get", "containers")
	if want := "get containers: want --agent or --hostname (a hostname or an agent id): 2 agents (node-1, node-2)"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	if code := exitCode(err); code != exitUsage {
		t.Errorf("exit %d, want %d", code, exitUsage)
	}
}

// TestExitCodes: usage, not found, denied and unavailable exit 2, 3, 4, 5.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	url := serve(t, &fakeOperator{})
	denied := serve(t, &fakeOperator{err: connect.NewError(connect.CodePermissionDenied, errors.New("no"))})
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"--coordinator", url, "get", "agents"}, exitOK},
		{[]string{"--coordinator", url, "get", "pods"}, exitUsage},
		{[]string{"--coordinator", url, "frobnicate"}, exitUsage},
		{[]string{"--coordinator", url, "get", "agents", "--no-such-flag"}, exitUsage},
		{[]string{"--coordinator", url, "get", "agents", "-o", "xml"}, exitUsage},
		{[]string{"--coordinator", url, "logs"}, exitUsage},
		{[]string{"--coordinator", url, "logs", "no-such-task"}, exitNotFound},
		{[]string{"--coordinator", denied, "get", "agents"}, exitDenied},
		{[]string{"--coordinator", closed.URL, "get", "agents"}, exitUnavailable},
	}
	for _, test := range tests {
		_, err := run(t, test.args...)
		if got := exitCode(err); got != test.want {
			t.Errorf("%q: exit %d (error %v), want %d", test.args, got, err, test.want)
		}
	}
}

// TestContexts: set-context writes a context that later commands use when
// no flag or environment variable says otherwise; a flag wins over it;
// unknown keys in the file are refused.
func TestContexts(t *testing.T) {
	// Not parallel: it sets the contexts file's environment variable.
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	t.Setenv(configEnv, path)
	url := serve(t, &fakeOperator{})

	if _, err := run(t, "config", "set-context", "local", "--coordinator", url, "--use"); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "get", "agents", "-o", "jsonpath=$.agents[0].hostname")
	if err != nil {
		t.Fatalf("get agents with the context: %v", err)
	}
	if out != "node-1\n" {
		t.Errorf("get agents printed %q", out)
	}
	if out, err := run(t, "config", "current-context"); err != nil || out != "local\n" {
		t.Errorf("current-context: %q, %v", out, err)
	}

	// A flag wins over the context.
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	if _, err := run(t, "--coordinator", closed.URL, "get", "agents"); exitCode(err) != exitUnavailable {
		t.Errorf("--coordinator did not override the context: %v", err)
	}
	// So does the environment.
	t.Setenv(coordinatorEnv, closed.URL)
	if _, err := run(t, "get", "agents"); exitCode(err) != exitUnavailable {
		t.Errorf("%s did not override the context: %v", coordinatorEnv, err)
	}
	os.Unsetenv(coordinatorEnv)

	if _, err := run(t, "--context", "nope", "get", "agents"); err == nil || !strings.Contains(err.Error(), `--context "nope": no such context`) {
		t.Errorf("unknown context: %v", err)
	}

	if err := os.WriteFile(path, []byte("current-context: local\ncontexts:\n- name: local\n  coordinater: http://x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "get", "agents"); err == nil || !strings.Contains(err.Error(), `unknown field "coordinater"`) {
		t.Errorf("misspelled key: error %v, want unknown field", err)
	}
}

// TestSchemeMismatch: http to an https coordinator, and https to an http
// one, fail with an error that says which scheme to use.
func TestSchemeMismatch(t *testing.T) {
	t.Parallel()
	tlsServer := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(tlsServer.Close)
	plain := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(plain.Close)
	host := strings.TrimPrefix(tlsServer.URL, "https://")
	_, err := run(t, "--coordinator", "http://"+host, "get", "agents")
	if want := host + " serves https, not plain http: use --coordinator https://" + host; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("http to https: error %v, want it to contain %q", err, want)
	}
	host = strings.TrimPrefix(plain.URL, "http://")
	_, err = run(t, "--coordinator", "https://"+host, "get", "agents")
	if want := host + " speaks plain http, not https: use --coordinator http://" + host; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("https to http: error %v, want it to contain %q", err, want)
	}
}
