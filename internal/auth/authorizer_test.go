package auth

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/server"
)

func pemBlock(t *testing.T, data []byte) []byte {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatal("not PEM")
	}
	return b.Bytes
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadGenerated loads the authorization file and the coordinator's server
// TLS that Generate wrote in dir.
func loadGenerated(t *testing.T, dir string) (*Authorizer, *tls.Config) {
	t.Helper()
	a, err := Load(filepath.Join(dir, AuthzFile))
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig, err := ServerTLS(filepath.Join(dir, CoordinatorCertFile), filepath.Join(dir, CoordinatorKeyFile), filepath.Join(dir, CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	return a, tlsConfig
}

// testServer serves unimplemented Operator and Agent services behind the
// authorizer, over TLS with the credentials Generate wrote in dir: a call
// that passes authorization answers Unimplemented.
func testServer(t *testing.T) (dir, url string, a *Authorizer) {
	t.Helper()
	dir = t.TempDir()
	if _, err := Generate(dir, Spec{Hosts: []string{"127.0.0.1"}, Agents: []string{"a1"},
		Frameworks: []string{"batch"}, Operators: []string{"admin"}}); err != nil {
		t.Fatal(err)
	}
	a, tlsConfig := loadGenerated(t, dir)
	opts := connect.WithInterceptors(a.Interceptor())
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewOperatorServiceHandler(slacklinev1connect.UnimplementedOperatorServiceHandler{}, opts))
	mux.Handle(slacklinev1connect.NewAgentServiceHandler(slacklinev1connect.UnimplementedAgentServiceHandler{}, opts))
	server.MountStandard(mux, slacklinev1connect.OperatorServiceName)
	server.MountPprof(mux)
	mux.Handle(MetricsPath, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "metrics") }))
	srv := httptest.NewUnstartedServer(a.Middleware(mux))
	srv.EnableHTTP2 = true
	srv.TLS = tlsConfig
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return dir, srv.URL, a
}

func client(t *testing.T, creds ClientCredentials) *http.Client {
	t.Helper()
	c, err := creds.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMiddleware(t *testing.T) {
	dir, url, a := testServer(t)
	ca := filepath.Join(dir, CACertFile)
	file := func(name string) string { return filepath.Join(dir, name) }
	callers := map[string]ClientCredentials{
		"none":  {CAFile: ca},
		"batch": {CAFile: ca, TokenFile: file("batch.token")},
		"admin": {CAFile: ca, TokenFile: file("admin.token")},
		"agent": {CAFile: ca, CertFile: file(AgentCertFile("a1")), KeyFile: file(AgentKeyFile("a1"))},
	}
	bogus := filepath.Join(t.TempDir(), "bogus.token")
	if err := os.WriteFile(bogus, []byte("slackline_not-a-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	callers["bogus"] = ClientCredentials{CAFile: ca, TokenFile: bogus}

	weights := func(c *http.Client, opts ...connect.ClientOption) error {
		_, err := slacklinev1connect.NewOperatorServiceClient(c, url, opts...).UpdateWeights(context.Background(),
			connect.NewRequest(&slacklinev1.UpdateWeightsRequest{Weights: []*slacklinev1.WeightInfo{{Role: "eng", Weight: 2}}}))
		return err
	}
	schedule := func(c *http.Client, opts ...connect.ClientOption) error {
		_, err := slacklinev1connect.NewOperatorServiceClient(c, url, opts...).GetMaintenanceSchedule(context.Background(),
			connect.NewRequest(&slacklinev1.GetMaintenanceScheduleRequest{}))
		return err
	}
	register := func(host string) func(c *http.Client, opts ...connect.ClientOption) error {
		return func(c *http.Client, opts ...connect.ClientOption) error {
			_, err := slacklinev1connect.NewAgentServiceClient(c, url, opts...).Register(context.Background(),
				connect.NewRequest(&slacklinev1.RegisterRequest{AgentInfo: &slacklinev1.AgentInfo{Hostname: host}}))
			return err
		}
	}
	health := func(c *http.Client, opts ...connect.ClientOption) error {
		_, err := grpchealth.NewClient(c, url, opts...).Check(context.Background(), &grpchealth.CheckRequest{})
		return err
	}
	const passed = connect.CodeUnimplemented
	tests := []struct {
		name   string
		call   func(*http.Client, ...connect.ClientOption) error
		caller string
		want   connect.Code // 0: success
	}{
		{"weights without credentials", weights, "none", connect.CodeUnauthenticated},
		{"weights with a revoked token", weights, "bogus", connect.CodeUnauthenticated},
		{"weights by a framework", weights, "batch", connect.CodePermissionDenied},
		{"weights by an operator", weights, "admin", passed},
		{"weights by an agent", weights, "agent", connect.CodePermissionDenied},
		{"schedule by a framework", schedule, "batch", connect.CodePermissionDenied},
		{"schedule by an operator", schedule, "admin", passed},
		{"register as itself", register("a1"), "agent", passed},
		{"register as another host", register("a2"), "agent", connect.CodePermissionDenied},
		{"register by an operator", register("a1"), "admin", connect.CodePermissionDenied},
		{"health without credentials", health, "none", 0},
	}
	protocols := map[string][]connect.ClientOption{"connect": nil, "grpc": {connect.WithGRPC()}, "grpcweb": {connect.WithGRPCWeb()}}
	for _, tt := range tests {
		for proto, opts := range protocols {
			t.Run(tt.name+"/"+proto, func(t *testing.T) {
				err := tt.call(client(t, callers[tt.caller]), opts...)
				if connect.CodeOf(err) != tt.want && !(tt.want == 0 && err == nil) {
					t.Fatalf("err = %v, want %v", err, tt.want)
				}
				if tt.want == connect.CodePermissionDenied && !strings.Contains(err.Error(), "not") {
					t.Fatalf("denial does not say what: %v", err)
				}
			})
		}
	}

	t.Run("http statuses", func(t *testing.T) {
		for _, tt := range []struct {
			caller, path string
			status       int
		}{
			{"none", MetricsPath, http.StatusUnauthorized},
			{"batch", MetricsPath, http.StatusForbidden},
			{"admin", MetricsPath, http.StatusOK},
			// The Go runtime's profiles need debug_processes, which
			// operators have; a path under them without a rule is refused
			// before the pprof index could serve it.
			{"none", "/debug/pprof/cmdline", http.StatusUnauthorized},
			{"batch", "/debug/pprof/cmdline", http.StatusForbidden},
			{"admin", "/debug/pprof/cmdline", http.StatusOK},
			{"admin", "/debug/pprof/", http.StatusOK},
			{"admin", "/debug/pprof/heap", http.StatusOK},
			{"admin", "/debug/pprof/nosuchprofile", http.StatusNotFound},
			{"agent", "/debug/pprof/cmdline", http.StatusForbidden},
		} {
			resp, err := client(t, callers[tt.caller]).Get(url + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("%s GET %s: %d, want %d", tt.caller, tt.path, resp.StatusCode, tt.status)
			}
		}
		// A Connect unary refusal is 401/403 too.
		req, _ := http.NewRequest(http.MethodPost, url+slacklinev1connect.OperatorServiceGetAgentsProcedure, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client(t, callers["none"]).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Connect GetAgents without credentials: %d", resp.StatusCode)
		}
	})

	t.Run("reload revokes a token", func(t *testing.T) {
		data, err := os.ReadFile(file(AuthzFile))
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.HasPrefix(line, "  admin: {token_sha256") {
				kept = append(kept, line)
			}
		}
		if err := os.WriteFile(file(AuthzFile), []byte(strings.Join(kept, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := a.Reload(); err != nil {
			t.Fatal(err)
		}
		if err := schedule(client(t, callers["admin"])); connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("revoked admin: %v", err)
		}
	})
}

func TestTLSRefusals(t *testing.T) {
	dir, url, _ := testServer(t)
	file := func(name string) string { return filepath.Join(dir, name) }
	call := func(creds ClientCredentials) error {
		_, err := slacklinev1connect.NewOperatorServiceClient(client(t, creds), url).GetAgents(context.Background(), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
		return err
	}
	// A second CA, and certificates that the server's CA signed but that
	// expired.
	other := t.TempDir()
	if _, err := Generate(other, Spec{Hosts: []string{"127.0.0.1"}, Agents: []string{"a1"}}); err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(file(CACertFile), file(CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-48 * time.Hour)
	certPEM, keyPEM, err := ca.Issue(CertSpec{CommonName: "a1", Organization: []string{AgentOrganization}, Hosts: []string{"a1"},
		Client: true, NotBefore: past, NotAfter: past.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	expired := t.TempDir()
	os.WriteFile(filepath.Join(expired, "a.crt"), certPEM, 0o644)
	os.WriteFile(filepath.Join(expired, "a.key"), keyPEM, 0o600)

	for _, tt := range []struct {
		name  string
		creds ClientCredentials
		want  string
	}{
		{"server from another CA", ClientCredentials{CAFile: filepath.Join(other, CACertFile), TokenFile: file("admin.token")}, "certificate signed by unknown authority"},
		{"wrong hostname", ClientCredentials{CAFile: file(CACertFile), TokenFile: file("admin.token"), ServerName: "coordinator.example"}, "not valid for"},
		{"client from another CA", ClientCredentials{CAFile: file(CACertFile),
			CertFile: filepath.Join(other, AgentCertFile("a1")), KeyFile: filepath.Join(other, AgentKeyFile("a1"))}, "tls"},
		{"expired client certificate", ClientCredentials{CAFile: file(CACertFile),
			CertFile: filepath.Join(expired, "a.crt"), KeyFile: filepath.Join(expired, "a.key")}, "tls"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := call(tt.creds)
			if tt.want == "tls" && err != nil && connect.CodeOf(err) != connect.CodeUnauthenticated &&
				connect.CodeOf(err) != connect.CodePermissionDenied {
				// TLS 1.3: the server refuses the client's certificate after
				// the client finished its handshake, so the client sees the
				// alert, or a failed write, or a connection that could not be
				// set up, depending on timing: any transport failure, never
				// an answer from the service, means the handshake refused it.
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	// A token is never sent in clear text.
	_, err = slacklinev1connect.NewOperatorServiceClient(client(t, ClientCredentials{TokenFile: file("admin.token")}),
		strings.Replace(url, "https://", "http://", 1)).GetAgents(context.Background(), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
	if err == nil || !strings.Contains(err.Error(), "clear text") {
		t.Fatalf("token over http: %v", err)
	}
}

func TestGenerate(t *testing.T) {
	dir := t.TempDir()
	spec := Spec{Hosts: []string{"127.0.0.1", "coordinator.example"}, Agents: []string{"a1", "a2"},
		Frameworks: []string{"batch"}, Operators: []string{"admin"}}
	res, err := Generate(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]os.FileMode{
		CACertFile: 0o644, CAKeyFile: 0o600, CoordinatorCertFile: 0o644, CoordinatorKeyFile: 0o600,
		CoordinatorClientCertFile: 0o644, CoordinatorClientKeyFile: 0o600,
		"agent-a1.crt": 0o644, "agent-a1.key": 0o600, "agent-a2.crt": 0o644, "agent-a2.key": 0o600,
		"batch.token": 0o600, "admin.token": 0o600, AuthzFile: 0o644, CRLFile: 0o644,
	}
	if len(res.Written) != len(modes) {
		t.Fatalf("wrote %v", res.Written)
	}
	for name, mode := range modes {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, info.Mode().Perm(), mode)
		}
	}
	pol, err := LoadPolicy(filepath.Join(dir, AuthzFile))
	if err != nil {
		t.Fatal(err)
	}
	batch := &Principal{Name: "batch"}
	admin := &Principal{Name: "admin"}
	for _, tt := range []struct {
		p      *Principal
		action Action
		object string
		want   bool
	}{
		{batch, RegisterFrameworks, "batch", true},
		{batch, RegisterFrameworks, "*", false},
		{batch, RunTasks, "nobody", true},
		{batch, RunTasks, "root", false},
		{batch, ViewAgents, "", false},
		{admin, RunTasks, "root", true},
		{admin, UpdateQuotas, "anything", true},
		{admin, ViewMetrics, "", true},
		{admin, RegisterAgents, "a1", false},
		{agentPrincipal(t, "a1", "a1"), RegisterAgents, "a1", true},
	} {
		if got := pol.Allowed(tt.p, tt.action, tt.object); got != tt.want {
			t.Errorf("generated policy: Allowed(%s, %s, %q) = %v", tt.p, tt.action, tt.object, got)
		}
	}
	// Again with one more agent: the CA and the other files are kept.
	token, _ := os.ReadFile(filepath.Join(dir, "batch.token"))
	spec.Agents = append(spec.Agents, "a3")
	res, err = Generate(dir, spec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Written, ",") != "agent-a3.key,agent-a3.crt" {
		t.Fatalf("second run wrote %v", res.Written)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "batch.token")); string(again) != string(token) {
		t.Fatal("token replaced")
	}
	for _, bad := range []Spec{{}, {Hosts: []string{"h"}, Agents: []string{"../x"}}, {Hosts: []string{"h"}, Frameworks: []string{"x"}, Operators: []string{"x"}}} {
		if _, err := Generate(t.TempDir(), bad); err == nil {
			t.Errorf("Generate(%+v) succeeded", bad)
		}
	}
}

func TestCheckListen(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		addr                     string
		tlsOn, authzOn, insecure bool
		ok                       bool
	}{
		// Loopback is no exception: tasks are local users.
		{"127.0.0.1:5050", false, false, false, false},
		{"[::1]:5050", false, false, false, false},
		{"localhost:5050", false, true, false, false},
		{"127.0.0.1:5050", true, false, false, false},
		{"127.0.0.1:5050", true, true, false, true},
		{"127.0.0.1:5050", false, false, true, true},
		{"0.0.0.0:5050", false, false, false, false},
		{":5050", false, false, false, false},
		{"10.0.0.1:5050", true, false, false, false},
		{"10.0.0.1:5050", true, true, false, true},
		{"10.0.0.1:5050", false, false, true, true},
	} {
		err := CheckListen("--listen", tt.addr, tt.tlsOn, tt.authzOn, tt.insecure)
		if (err == nil) != tt.ok {
			t.Errorf("CheckListen(%s, tls %v, authz %v, insecure %v) = %v", tt.addr, tt.tlsOn, tt.authzOn, tt.insecure, err)
		}
		// The refusal says what to do.
		if err != nil {
			for _, want := range []string{"slacklinectl credentials init", "--insecure", "SLACKLINE_INSECURE=1", tt.addr} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("CheckListen(%s): %q does not say %q", tt.addr, err, want)
				}
			}
		}
	}
}

func TestInsecureFromEnv(t *testing.T) {
	for _, tt := range []struct {
		value   string
		want    bool
		wantErr bool
	}{
		{"", false, false},
		{"1", true, false},
		{"true", true, false},
		{"0", false, false},
		{"yes", false, true},
	} {
		t.Setenv(EnvInsecure, tt.value)
		got, err := InsecureFromEnv()
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("%s=%q: InsecureFromEnv() = %v, %v", EnvInsecure, tt.value, got, err)
		}
		if err != nil && !strings.Contains(err.Error(), EnvInsecure) {
			t.Errorf("%s=%q: error %q does not name the variable", EnvInsecure, tt.value, err)
		}
	}
}
