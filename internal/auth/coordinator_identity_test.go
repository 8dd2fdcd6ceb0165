package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// viewMethods are the NodeService methods the coordinator's node proxy
// forwards (the live view's and slacklinectl's); coordinator/ui.NodeMethods must name the same (its test checks).
var viewMethods = []string{
	slacklinev1connect.NodeServiceGetContainersProcedure,
	slacklinev1connect.NodeServiceGetUsageProcedure,
	slacklinev1connect.NodeServiceGetEstimateProcedure,
	slacklinev1connect.NodeServiceGetCorrectionsProcedure,
	slacklinev1connect.NodeServiceGetFeaturesProcedure,
	slacklinev1connect.NodeServiceGetImagesProcedure,
	slacklinev1connect.NodeServiceGetHistoryProcedure,
	slacklinev1connect.NodeServiceGetDelaysProcedure,
	slacklinev1connect.NodeServiceGetShadowsProcedure,
	slacklinev1connect.NodeServiceReadSandboxFileProcedure,
}

// TestOnlyViewMethodsAdmitTheCoordinator: the coordinator's identity is a
// reader of the node view and of sandboxes it authorized, nothing more.
func TestOnlyViewMethodsAdmitTheCoordinator(t *testing.T) {
	t.Parallel()
	var admitted []string
	for path, rule := range Rules {
		if rule.Coordinator {
			admitted = append(admitted, path)
		}
	}
	slices.Sort(admitted)
	want := slices.Sorted(slices.Values(viewMethods))
	if !slices.Equal(admitted, want) {
		t.Fatalf("rules admitting the coordinator's identity: %v, want exactly %v", admitted, want)
	}
}

// nodeStub answers every NodeService call: a call that passes
// authorization succeeds.
type nodeStub struct {
	slacklinev1connect.UnimplementedNodeServiceHandler
}

func (nodeStub) GetContainers(context.Context, *connect.Request[slacklinev1.GetContainersRequest]) (*connect.Response[slacklinev1.GetContainersResponse], error) {
	return connect.NewResponse(&slacklinev1.GetContainersResponse{}), nil
}

func (nodeStub) ReadSandboxFile(context.Context, *connect.Request[slacklinev1.ReadSandboxFileRequest]) (*connect.Response[slacklinev1.ReadSandboxFileResponse], error) {
	return connect.NewResponse(&slacklinev1.ReadSandboxFileResponse{Data: []byte("secret")}), nil
}

// TestCoordinatorIdentity serves a NodeService as an agent does
// (Middleware, the agent's certificate, client certificates from the CA)
// and a proxy as the coordinator does (ProxyMiddleware), and calls both with
// the coordinator's client certificate that Generate wrote.
func TestCoordinatorIdentity(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Generate(dir, Spec{Hosts: []string{"coord.example", "127.0.0.1"}, Agents: []string{"a1"},
		Frameworks: []string{"batch"}, Operators: []string{"admin"}}); err != nil {
		t.Fatal(err)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	a, err := Load(file(AuthzFile))
	if err != nil {
		t.Fatal(err)
	}
	// The generated policy grants the coordinator nothing: the rule admits it.
	coordinatorCreds := ClientCredentials{CAFile: file(CACertFile), CertFile: file(CoordinatorClientCertFile),
		KeyFile: file(CoordinatorClientKeyFile), ServerName: "a1"}
	cert, err := tls.LoadX509KeyPair(coordinatorCreds.CertFile, coordinatorCreds.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	p, err := principalOfCertificate(cert.Leaf)
	if err != nil {
		t.Fatal(err)
	}
	if !p.IsCoordinator() || p.IsAgent() || p.Name != "coordinator:coord.example" {
		t.Fatalf("the coordinator's certificate is principal %q (coordinator %v, agent %v), want coordinator:coord.example",
			p.Name, p.IsCoordinator(), p.IsAgent())
	}
	for _, action := range Actions() {
		if a.Allowed(p, action, "x") || a.Allowed(p, action, "") {
			t.Errorf("the generated policy grants the coordinator %s", action)
		}
	}

	serve := func(h http.Handler, certFile, keyFile string) string {
		tlsConfig, err := ServerTLS(certFile, keyFile, file(CACertFile))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(h)
		srv.EnableHTTP2, srv.TLS = true, tlsConfig
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.URL
	}
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewNodeServiceHandler(nodeStub{}, connect.WithInterceptors(a.Interceptor())))
	mux.Handle(MetricsPath, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	agentURL := serve(a.Middleware(mux), file(AgentCertFile("a1")), file(AgentKeyFile("a1")))
	proxyURL := serve(a.ProxyMiddleware(mux), file(CoordinatorCertFile), file(CoordinatorKeyFile))

	ctx := context.Background()
	calls := map[string]func(url string, c *http.Client) error{
		"GetContainers": func(url string, c *http.Client) error {
			_, err := slacklinev1connect.NewNodeServiceClient(c, url).GetContainers(ctx, connect.NewRequest(&slacklinev1.GetContainersRequest{}))
			return err
		},
		"ReadSandboxFile": func(url string, c *http.Client) error {
			_, err := slacklinev1connect.NewNodeServiceClient(c, url).ReadSandboxFile(ctx,
				connect.NewRequest(&slacklinev1.ReadSandboxFileRequest{TaskId: "t", Path: "stdout"}))
			return err
		},
		"metrics": func(url string, c *http.Client) error {
			resp, err := c.Get(url + MetricsPath)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return connect.NewError(connect.CodePermissionDenied, errors.New(resp.Status))
			}
			return nil
		},
	}
	coordinator := client(t, coordinatorCreds)
	proxyCreds := coordinatorCreds
	proxyCreds.ServerName = "coord.example"
	for _, tt := range []struct {
		server, call string
		want         connect.Code // 0: allowed
	}{
		{"agent", "GetContainers", 0},
		// Admitted by the rule: the agent's handler lets the coordinator's
		// identity read, as the coordinator checked its caller (agent/node.go).
		{"agent", "ReadSandboxFile", 0},
		{"agent", "metrics", connect.CodePermissionDenied},
		// The coordinator's own proxy never takes the coordinator's identity:
		// the operator's view_agents is always checked for someone.
		{"proxy", "GetContainers", connect.CodePermissionDenied},
	} {
		url, c := agentURL, coordinator
		if tt.server == "proxy" {
			url, c = proxyURL, client(t, proxyCreds)
		}
		err := calls[tt.call](url, c)
		if got := connect.CodeOf(err); (err == nil) != (tt.want == 0) || (err != nil && got != tt.want) {
			t.Errorf("the coordinator's identity calling %s on the %s: %v, want code %v", tt.call, tt.server, err, tt.want)
		}
	}
	// An operator with view_agents still passes the proxy.
	admin := client(t, ClientCredentials{CAFile: file(CACertFile), TokenFile: file("admin.token"), ServerName: "coord.example"})
	if err := calls["GetContainers"](proxyURL, admin); err != nil {
		t.Errorf("admin through the proxy: %v", err)
	}
	// The coordinator's identity calls nothing of the coordinator's API:
	// Middleware refuses it on every rule that does not admit it.
	for path, rule := range Rules {
		if rule.Caller == Anyone || rule.Coordinator {
			continue
		}
		if err := callerAllowed(rule, p, path); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("the coordinator's identity on %s: %v, want permission_denied", path, err)
		}
	}
}

// TestCertificateOrganizations: agents and the coordinator are told apart
// by organization, never by a CN a certificate's holder chose.
func TestCertificateOrganizations(t *testing.T) {
	t.Parallel()
	ca, err := NewCA("test CA", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		cn, want, wantErr string
		orgs              []string
	}{
		{cn: "c1", orgs: []string{CoordinatorOrganization}, want: "coordinator:c1"},
		{cn: "n1", orgs: []string{AgentOrganization}, want: "agent:n1"},
		{cn: "c1", orgs: []string{AgentOrganization, CoordinatorOrganization}, wantErr: "not both"},
		{cn: "coordinator:c1", wantErr: "only the coordinator's certificate"},
		{cn: "agent:n1", wantErr: "only agent certificates"},
		{cn: "alice", want: "alice"},
	} {
		certPEM, _, err := ca.Issue(CertSpec{CommonName: tt.cn, Organization: tt.orgs, Client: true,
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(pemBlock(t, certPEM))
		if err != nil {
			t.Fatal(err)
		}
		p, err := principalOfCertificate(cert)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("CN %q orgs %v: %v, %v; want error %q", tt.cn, tt.orgs, p, err, tt.wantErr)
			}
		case err != nil || p.Name != tt.want:
			t.Errorf("CN %q orgs %v: %v, %v; want %q", tt.cn, tt.orgs, p, err, tt.want)
		}
	}
	if _, err := ParsePolicy([]byte("version: 1\nprincipals:\n  coordinator:x: {token_sha256: " + strings.Repeat("ab", 32) + "}\n")); err == nil {
		t.Error("a token principal named coordinator:x was accepted")
	}
}

// TestVerifyServerRefusesRevokedServer: a client with the CRL refuses, in
// the handshake, a server whose certificate the list revokes, so that the
// server receives no request; a reload (a new generation) applies to new
// handshakes.
func TestVerifyServerRefusesRevokedServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := Generate(dir, Spec{Hosts: []string{"127.0.0.1"}, Agents: []string{"a1", "a2"}}); err != nil {
		t.Fatal(err)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	if _, err := Revoke(dir, []string{"a1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	requests := map[string]int{}
	var mu = make(chan struct{}, 1)
	serve := func(name string) string {
		tlsConfig, err := ServerTLS(file(AgentCertFile(name)), file(AgentKeyFile(name)), "")
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			mu <- struct{}{}
			requests[name]++
			<-mu
		}))
		srv.TLS = tlsConfig
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.URL
	}
	for _, tt := range []struct {
		agent   string
		revoked bool
	}{{"a1", true}, {"a2", false}} {
		url := serve(tt.agent)
		c := client(t, ClientCredentials{CAFile: file(CACertFile), CRLFile: file(CRLFile), ServerName: tt.agent})
		resp, err := c.Get(url)
		if err == nil {
			resp.Body.Close()
		}
		if tt.revoked != errors.Is(err, ErrServerRevoked) {
			t.Errorf("GET %s: %v, want revoked %v", tt.agent, err, tt.revoked)
		}
		if err != nil && !strings.Contains(err.Error(), `CN "a1"`) {
			t.Errorf("GET %s: %v does not name the certificate", tt.agent, err)
		}
		mu <- struct{}{}
		got := requests[tt.agent]
		<-mu
		if want := map[bool]int{true: 0, false: 1}[tt.revoked]; got != want {
			t.Errorf("%s received %d requests, want %d", tt.agent, got, want)
		}
	}
	if _, err := (ClientCredentials{CRLFile: file(CRLFile)}).HTTPClient(); err == nil || !strings.Contains(err.Error(), "--crl needs --ca") {
		t.Errorf("--crl without --ca: %v", err)
	}

	crl, err := LoadCRL(file(CRLFile), file(CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	if crl.Generation() != 1 || (*CRL)(nil).Generation() != 0 {
		t.Errorf("generations %d (nil %d), want 1 (0)", crl.Generation(), (*CRL)(nil).Generation())
	}
	if _, err := crl.Reload(); err != nil || crl.Generation() != 2 {
		t.Errorf("after reload: generation %d, %v; want 2", crl.Generation(), err)
	}
}
