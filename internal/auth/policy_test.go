package auth

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"
)

const testPolicy = `
version: 1
principals:
  batch: {token_sha256: 0000000000000000000000000000000000000000000000000000000000000001}
  admin: {token_sha256: 0000000000000000000000000000000000000000000000000000000000000002}
acls:
  register_frameworks:
    - principals: [batch]
      roles: [batch, "*"]
    - principals: [admin]
      roles: any
  run_tasks:
    - principals: [batch]
      users: [nobody]
  update_weights:
    - principals: [admin]
      roles: any
  view_agents:
    - principals: any
  start_maintenances:
    - principals: [admin]
      machines: ["rack1-*"]
  register_agents:
    - principals: agents
      hostnames: self
    - principals: [agent:sim]
      hostnames: ["sim-*"]
`

// agentPrincipal is an agent principal whose certificate names hosts.
func agentPrincipal(t *testing.T, cn string, hosts ...string) *Principal {
	t.Helper()
	ca, err := NewCA("test", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	certPEM, _, err := ca.Issue(CertSpec{CommonName: cn, Organization: []string{AgentOrganization}, Hosts: hosts,
		Client: true, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(pemBlock(t, certPEM))
	if err != nil {
		t.Fatal(err)
	}
	p, err := principalOfCertificate(cert)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPolicyAllowed(t *testing.T) {
	pol, err := ParsePolicy([]byte(testPolicy))
	if err != nil {
		t.Fatal(err)
	}
	batch := &Principal{Name: "batch", Method: MethodToken}
	admin := &Principal{Name: "admin", Method: MethodToken}
	a1 := agentPrincipal(t, "a1", "a1")
	sim := agentPrincipal(t, "sim", "sim")
	tests := []struct {
		p      *Principal
		action Action
		object string
		want   bool
	}{
		{batch, RegisterFrameworks, "batch", true},
		{batch, RegisterFrameworks, "*", true},
		{batch, RegisterFrameworks, "prod", false},
		{admin, RegisterFrameworks, "prod", true},
		{batch, RunTasks, "nobody", true},
		{batch, RunTasks, "root", false},
		{admin, RunTasks, "nobody", false}, // not granted at all
		{batch, UpdateWeights, "batch", false},
		{admin, UpdateWeights, "batch", true},
		{batch, ViewAgents, "", true},
		{nil, ViewAgents, "", false},
		{admin, StartMaintenances, "rack1-07", true},
		{admin, StartMaintenances, "rack2-01", false},
		{a1, RegisterAgents, "a1", true},
		{a1, RegisterAgents, "a2", false},
		{batch, RegisterAgents, "batch", false}, // self needs an agent certificate
		{sim, RegisterAgents, "sim-17", true},
		{sim, RegisterAgents, "a1", false},
		{a1, RegisterAgents, "sim-1", false},
		{admin, ViewMetrics, "", false}, // default deny
		{admin, Action("bogus"), "", false},
	}
	for _, tt := range tests {
		if got := pol.Allowed(tt.p, tt.action, tt.object); got != tt.want {
			t.Errorf("Allowed(%s, %s, %q) = %v, want %v", tt.p, tt.action, tt.object, got, tt.want)
		}
	}
}

func TestParsePolicyErrors(t *testing.T) {
	const hash = "0000000000000000000000000000000000000000000000000000000000000001"
	tests := []struct{ name, yaml, want string }{
		{"version", "version: 2\n", "version 2"},
		{"unknown key", "version: 1\nprincipal: {}\n", "principal"},
		{"unknown action", "version: 1\nacls:\n  update_weight:\n    - principals: any\n      roles: any\n", `unknown action "update_weight"`},
		{"wrong object", "version: 1\nacls:\n  update_weights:\n    - principals: any\n      users: any\n", "the object of update_weights is roles"},
		{"missing object", "version: 1\nacls:\n  update_weights:\n    - principals: any\n", "roles is missing"},
		{"object on objectless", "version: 1\nacls:\n  view_agents:\n    - principals: any\n      roles: any\n", "view_agents takes no object"},
		{"missing principals", "version: 1\nacls:\n  view_agents:\n    - {}\n", "principals is missing"},
		{"bad keyword", "version: 1\nacls:\n  view_agents:\n    - principals: everyone\n", `"everyone"`},
		{"self elsewhere", "version: 1\nacls:\n  update_weights:\n    - principals: any\n      roles: self\n", `"self"`},
		{"bad hash", "version: 1\nprincipals:\n  a: {token_sha256: abc}\n", "64 hex digits"},
		{"agent name", "version: 1\nprincipals:\n  agent:x: {token_sha256: " + hash + "}\n", "agents'"},
		{"same token", "version: 1\nprincipals:\n  a: {token_sha256: " + hash + "}\n  b: {token_sha256: " + hash + "}\n", "same token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePolicy([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestPrincipalOfToken(t *testing.T) {
	tokens := []tokenEntry{{principal: "a", hash: [32]byte(mustHex(t, HashToken("ta")))}, {principal: "b", hash: [32]byte(mustHex(t, HashToken("tb")))}}
	if p, err := principalOfToken("tb", tokens); err != nil || p.Name != "b" || p.IsAgent() {
		t.Fatalf("tb: %v, %v", p, err)
	}
	if _, err := principalOfToken("tc", tokens); err != ErrUnknownToken {
		t.Fatalf("tc: %v", err)
	}
}
