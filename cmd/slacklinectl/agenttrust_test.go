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

// TestCLITrustsAgentsOnlyWithTheirCertificates: slacklinectl talks to
// agents with the caller's own token, only over https, verifies the
// agent's certificate for its registered hostname and, with --crl, refuses
// a revoked agent before sending anything.
func TestCLITrustsAgentsOnlyWithTheirCertificates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := auth.Generate(dir, auth.Spec{Hosts: []string{"127.0.0.1"}, Agents: []string{"node-1", "node-2"}, Operators: []string{"admin"}}); err != nil {
		t.Fatal(err)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	serveTLS := func(h http.Handler, cert, key string) string {
		tlsConfig, err := auth.ServerTLS(file(cert), file(key), "")
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
		mux.Handle(slacklinev1connect.NewNodeServiceHandler(&fakeNode{containers: testContainers,
			files: map[string][]byte{"f-1/t-" + host + "/stdout": []byte("output of " + host + "\n")}}))
		return logs[host].wrap(mux)
	}
	node1 := serveTLS(nodeHandler("node-1"), auth.AgentCertFile("node-1"), auth.AgentKeyFile("node-1"))
	node2 := serveTLS(nodeHandler("node-2"), auth.AgentCertFile("node-2"), auth.AgentKeyFile("node-2"))
	clear := httptest.NewServer(nodeHandler("node-3"))
	t.Cleanup(clear.Close)
	task := func(host, agent string) *slacklinev1.Task {
		return &slacklinev1.Task{TaskId: "t-" + host, FrameworkId: "f-1", AgentId: agent, State: slacklinev1.TaskState_TASK_STATE_RUNNING}
	}
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewOperatorServiceHandler(&fakeOperator{
		agents: &slacklinev1.GetAgentsResponse{Agents: []*slacklinev1.Agent{
			{Id: "a-1", Hostname: "node-1", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: node1},
			{Id: "a-2", Hostname: "node-2", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: node2},
			{Id: "a-3", Hostname: "node-3", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: clear.URL},
			// node-1's certificate served at node-2's claim: the name is verified.
			{Id: "a-4", Hostname: "node-4", State: slacklinev1.AgentState_AGENT_STATE_ACTIVE, Endpoint: node1},
		}},
		tasks: &slacklinev1.GetTasksResponse{Tasks: []*slacklinev1.Task{task("node-1", "a-1"), task("node-2", "a-2"), task("node-3", "a-3")}},
	}))
	coordinator := serveTLS(mux, auth.CoordinatorCertFile, auth.CoordinatorKeyFile)
	if _, err := auth.Revoke(dir, []string{"node-1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	token, err := auth.ReadToken(file("admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"--coordinator", coordinator, "--ca", file(auth.CACertFile), "--token-file", file("admin.token")}
	withCRL := func(args ...string) []string {
		return append(append(slices.Clone(base), "--crl", file(auth.CRLFile)), args...)
	}

	for _, tt := range []struct {
		name    string
		args    []string
		host    string // whose NodeService the command reaches
		wantErr string // "" : success
	}{
		{"the caller's token to a verified agent", withCRL("get", "containers", "--hostname", "node-2"), "node-2", ""},
		{"logs from a verified agent", withCRL("logs", "t-node-2"), "node-2", ""},
		{"revoked agent: get containers", withCRL("get", "containers", "--hostname", "node-1"), "node-1", "server certificate revoked"},
		{"revoked agent: logs", withCRL("logs", "t-node-1"), "node-1", "server certificate revoked"},
		{"revoked agent: top", withCRL("top", "--hostname", "node-1"), "node-1", "server certificate revoked"},
		{"revoked agent: get features", withCRL("get", "features", "--hostname", "node-1"), "node-1", "server certificate revoked"},
		{"clear-text endpoint: no token sent", withCRL("logs", "t-node-3"), "node-3", "clear text"},
		{"clear-text --agent URL: no token sent", withCRL("get", "containers", "--agent", clear.URL), "node-3", "clear text"},
		{"a certificate for another host", withCRL("get", "containers", "--hostname", "node-4"), "node-1", "node-4"},
	} {
		before := len(logs[tt.host].requests())
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
		case tt.wantErr == "" && (len(got) == 0 || got[0] != "Bearer "+token):
			t.Errorf("%s: %s saw Authorization %q, want the caller's own token", tt.name, tt.host, got)
		case tt.wantErr != "" && len(got) != 0:
			t.Errorf("%s: %s received %d requests (Authorization %q), want none", tt.name, tt.host, len(got), got)
		}
	}
	// Without --crl the revoked agent is reached: the list is what stops it.
	if _, err := run(t, append(slices.Clone(base), "get", "containers", "--hostname", "node-1")...); err != nil {
		t.Errorf("revoked agent without --crl: %v", err)
	}
	if _, err := run(t, "--crl", file(auth.CRLFile), "get", "containers", "--agent", node2); err == nil || !strings.Contains(err.Error(), "--crl needs --ca") {
		t.Errorf("--crl without --ca: %v", err)
	}
}
