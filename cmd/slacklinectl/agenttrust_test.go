package main

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/coordinator/ui"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
)

// headerLog records the Authorization header of each request a server
// received.
type headerLog struct {
	mu   sync.Mutex
	seen []string
}

func (h *headerLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.seen = append(h.seen, r.Header.Get("Authorization"))
		h.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (h *headerLog) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

// TestCLINeverSendsItsTokenToAnAgent: slacklinectl sends the caller's
// token to the coordinator only; logs, top, get containers and get features
// reach agents through the coordinator's node proxy (the real one,
// coordinator/ui, configured as the coordinator configures it), which calls
// them with the coordinator's client certificate, verifies each agent's
// certificate for its registered hostname, refuses revoked agents and
// clear-text endpoints before sending anything.
func TestCLINeverSendsItsTokenToAnAgent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := auth.Generate(dir, auth.Spec{Hosts: []string{"127.0.0.1"}, Agents: []string{"node-1", "node-2"}, Operators: []string{"admin"}}); err != nil {
		t.Fatal(err)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	serveTLS := func(h http.Handler, cert, key string) string {
		tlsConfig, err := auth.ServerTLS(file(cert), file(key), file(auth.CACertFile))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(h)
		srv.EnableHTTP2, srv.TLS = true, tlsConfig
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.URL
	}
	logs := map[string]*headerLog{}
	nodeHandler := func(host string) http.Handler {
		logs[host] = &headerLog{}
		mux := http.NewServeMux()
		mux.Handle(slacklinev1connect.NewNodeServiceHandler(&usageNode{fakeNode{containers: testContainers,
			files: map[string][]byte{"f-1/t-" + host + "/stdout": []byte("output of " + host + "\n")}}}))
		return logs[host].wrap(mux)
	}
	node1 := serveTLS(nodeHandler("node-1"), auth.AgentCertFile("node-1"), auth.AgentKeyFile("node-1"))
	node2 := serveTLS(nodeHandler("node-2"), auth.AgentCertFile("node-2"), auth.AgentKeyFile("node-2"))
	clear := httptest.NewServer(nodeHandler("node-3"))
	t.Cleanup(clear.Close)
	task := func(host, agent string) *slacklinev1.Task {
		return &slacklinev1.Task{TaskId: "t-" + host, FrameworkId: "f-1", AgentId: agent, State: slacklinev1.TaskState_TASK_STATE_RUNNING}
	}
	fake := &fakeOperator{
		agents: &slacklinev1.GetAgentsResponse{Agents: []*slacklinev1.Agent{
			{Id: "a-1", Hostname: "node-1", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: node1},
			{Id: "a-2", Hostname: "node-2", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: node2},
			{Id: "a-3", Hostname: "node-3", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: clear.URL},
			// node-1's certificate served for node-4: the name is verified.
			{Id: "a-4", Hostname: "node-4", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: node1},
		}},
		tasks: &slacklinev1.GetTasksResponse{Tasks: []*slacklinev1.Task{task("node-1", "a-1"), task("node-2", "a-2"), task("node-3", "a-3")}},
	}
	if _, err := auth.Revoke(dir, []string{"node-1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	authz, err := auth.Load(file(auth.AuthzFile))
	if err != nil {
		t.Fatal(err)
	}
	agentTLS, err := auth.ClientTLS(file(auth.CACertFile), file(auth.CoordinatorClientCertFile), file(auth.CoordinatorClientKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	crl, err := auth.LoadCRL(file(auth.CRLFile), file(auth.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	coordinatorLog := &headerLog{}
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewOperatorServiceHandler(fake))
	mux.Handle("/ui/", ui.Handler(ui.Config{Agents: fake, Sandboxes: fake, AgentTLS: agentTLS, AgentCRL: crl, Authorize: authz.ProxyMiddleware}))
	coordinator := serveTLS(coordinatorLog.wrap(mux), auth.CoordinatorCertFile, auth.CoordinatorKeyFile)
	token, err := auth.ReadToken(file("admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"--coordinator", coordinator, "--ca", file(auth.CACertFile), "--token-file", file("admin.token")}
	cli := func(args ...string) []string { return append(slices.Clone(base), args...) }

	for _, tt := range []struct {
		name    string
		args    []string
		host    string // whose NodeService the command reaches
		wantErr string // "" : success
	}{
		{"get containers", cli("get", "containers", "--hostname", "node-2"), "node-2", ""},
		{"logs", cli("logs", "t-node-2"), "node-2", ""},
		{"top", cli("top", "--agent", "a-2"), "node-2", ""},
		{"get features", cli("get", "features", "--hostname", "node-2"), "node-2", ""},
		{"revoked agent: get containers", cli("get", "containers", "--hostname", "node-1"), "node-1", "revoked"},
		{"revoked agent: logs", cli("logs", "t-node-1"), "node-1", "revoked"},
		{"revoked agent: top", cli("top", "--hostname", "node-1"), "node-1", "revoked"},
		{"clear-text endpoint: logs", cli("logs", "t-node-3"), "node-3", "only over https"},
		{"clear-text endpoint: top", cli("top", "--agent", "a-3"), "node-3", "only over https"},
		{"a certificate for another host", cli("get", "containers", "--hostname", "node-4"), "node-1", "node-4"},
	} {
		before, coordinatorBefore := len(logs[tt.host].requests()), len(coordinatorLog.requests())
		_, err := run(t, tt.args...)
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
		} else if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: %v, want an error naming %q", tt.name, err, tt.wantErr)
		}
		got := logs[tt.host].requests()[before:]
		switch {
		case tt.wantErr == "" && len(got) == 0:
			t.Errorf("%s: %s received nothing", tt.name, tt.host)
		case tt.wantErr != "" && len(got) != 0:
			t.Errorf("%s: %s received %d requests (Authorization %q), want none", tt.name, tt.host, len(got), got)
		}
		for _, a := range got {
			if a != "" {
				t.Errorf("%s: %s saw Authorization %q, want none: the caller's token stays with the coordinator", tt.name, tt.host, a)
			}
		}
		for _, a := range coordinatorLog.requests()[coordinatorBefore:] {
			if a != "Bearer "+token {
				t.Errorf("%s: the coordinator saw Authorization %q, want the caller's own token", tt.name, a)
			}
		}
	}
	// The proxy authorizes the caller: without a token nothing reaches an agent.
	before := len(logs["node-2"].requests())
	if _, err := run(t, "--coordinator", coordinator, "--ca", file(auth.CACertFile), "get", "containers", "--agent", "a-2"); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("without a token: %v, want unauthenticated", err)
	}
	if n := len(logs["node-2"].requests()) - before; n != 0 {
		t.Errorf("without a token node-2 received %d requests, want none", n)
	}
}
