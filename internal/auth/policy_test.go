package auth

import (
	"crypto/x509"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/slackline/slackline/resources"
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
		{"bad cap", "version: 1\nacls:\n  register_agents:\n    - principals: agents\n      hostnames: self\n      max_resources: \"cpus:lots\"\n", "max_resources"},
		{"empty cap", "version: 1\nacls:\n  register_agents:\n    - principals: agents\n      hostnames: self\n      max_resources: \"\"\n", "caps every resource at zero"},
		{"list cap", "version: 1\nacls:\n  register_agents:\n    - principals: agents\n      hostnames: self\n      max_resources: [cpus]\n", "want a resources text"},
		{"cap elsewhere", "version: 1\nacls:\n  view_agents:\n    - principals: any\n      max_resources: \"cpus:1\"\n", "only register_agents rules take it"},
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

// TestCheckAgentResources: a registration fits when some rule allowing the
// agent on the hostname has no cap or a cap holding its resources; the
// error names the cap and what is beyond it.
func TestCheckAgentResources(t *testing.T) {
	pol, err := ParsePolicy([]byte(`
version: 1
acls:
  register_agents:
    - principals: agents
      hostnames: self
      max_resources: "cpus:64;mem:262144;ports:[31000-32000]"
    - principals: [agent:big]
      hostnames: self
      max_resources: "cpus:128;mem:524288"
    - principals: [agent:free]
      hostnames: self
      max_resources: unlimited
    - principals: [agent:legacy]
      hostnames: ["legacy-*"]
`))
	if err != nil {
		t.Fatal(err)
	}
	a1 := agentPrincipal(t, "a1", "a1")
	big := agentPrincipal(t, "big", "big")
	free := agentPrincipal(t, "free", "free")
	legacy := agentPrincipal(t, "legacy", "legacy")
	tests := []struct {
		name     string
		p        *Principal
		hostname string
		total    string
		want     string // "": allowed; else a part of the error
	}{
		{"within the cap", a1, "a1", "cpus:64;mem:262144;ports:[31000-31100]", ""},
		{"a cpu beyond", a1, "a1", "cpus:64.5;mem:1024", "exceed it by cpus:0.5"},
		{"a resource the cap does not name", a1, "a1", "cpus:1;disk:10", "exceed it by disk:10"},
		{"ports beyond", a1, "a1", "cpus:1;ports:[30000-30001]", "exceed it by ports:[30000-30001]"},
		{"another rule's larger cap", big, "big", "cpus:128;mem:1024", ""},
		{"beyond every cap names the first", big, "big", "cpus:129", "at most cpus:64;mem:262144;ports:[31000-32000]"},
		{"unlimited", free, "free", "cpus:100000;mem:1e9", ""},
		{"no key is uncapped", legacy, "legacy-1", "cpus:100000", ""},
		{"not allowed at all is Allowed's to say", a1, "a2", "cpus:100000", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := pol.CheckAgentResources(tt.p, tt.hostname, resources.MustParse(tt.total))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (!errors.Is(err, ErrOverResourceCap) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want ErrOverResourceCap mentioning %q", err, tt.want)
			}
		})
	}
	if w := pol.Warnings(); len(w) != 1 || !strings.Contains(w[0], "register_agents[3] has no max_resources") {
		t.Errorf("warnings %q, want one for the rule without max_resources", w)
	}
}
