package ui

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protowire"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
)

// fakeAgents lists a fixed set of agents.
type fakeAgents []*slacklinev1.Agent

func (f fakeAgents) GetAgents(context.Context, *connect.Request[slacklinev1.GetAgentsRequest]) (*connect.Response[slacklinev1.GetAgentsResponse], error) {
	return connect.NewResponse(&slacklinev1.GetAgentsResponse{Agents: f}), nil
}

// fakeNode answers GetUsage and records the Authorization header it saw.
type fakeNode struct {
	slacklinev1connect.UnimplementedNodeServiceHandler
	mu   sync.Mutex
	auth []string
}

func (n *fakeNode) GetUsage(_ context.Context, req *connect.Request[slacklinev1.GetUsageRequest]) (*connect.Response[slacklinev1.GetUsageResponse], error) {
	n.mu.Lock()
	n.auth = append(n.auth, req.Header().Get("Authorization"))
	n.mu.Unlock()
	return connect.NewResponse(&slacklinev1.GetUsageResponse{Usage: []*slacklinev1.ContainerUsage{
		{TaskId: "web-1", Statistics: &slacklinev1.ResourceStatistics{CpusRate: 1.5}},
	}}), nil
}

func (n *fakeNode) ReadSandboxFile(context.Context, *connect.Request[slacklinev1.ReadSandboxFileRequest]) (*connect.Response[slacklinev1.ReadSandboxFileResponse], error) {
	return connect.NewResponse(&slacklinev1.ReadSandboxFileResponse{Data: []byte("secret")}), nil
}

func newServers(t *testing.T) (ui *httptest.Server, node *fakeNode) {
	t.Helper()
	node = &fakeNode{}
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewNodeServiceHandler(node))
	agentSrv := httptest.NewServer(mux)
	t.Cleanup(agentSrv.Close)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	agents := fakeAgents{
		{Id: "a1", Hostname: "node-1", Endpoint: agentSrv.URL},
		{Id: "a2", Hostname: "node-2"},
		{Id: "a3", Hostname: "node-3", Endpoint: dead.URL},
	}
	ui = httptest.NewServer(Handler(Config{Agents: agents}))
	t.Cleanup(ui.Close)
	return ui, node
}

func TestStaticPage(t *testing.T) {
	srv, _ := newServers(t)
	for _, tc := range []struct {
		path, contentType, contains string
	}{
		{"/ui/", "text/html", `<script src="vendor/uplot/uPlot.iife.min.js" defer></script>`},
		{"/ui/app.js", "javascript", "/slackline.v1.OperatorService/"},
		{"/ui/style.css", "text/css", "section.container"},
		// uPlot, vendored with its licence, from the page's own origin.
		{"/ui/vendor/uplot/uPlot.iife.min.js", "javascript", "var uPlot="},
		{"/ui/vendor/uplot/uPlot.min.css", "text/css", ".uplot"},
		{"/ui/vendor/uplot/LICENSE", "text/plain", "The MIT License"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			resp, err := http.Get(srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Type"), tc.contentType) {
				t.Fatalf("GET %s: %d %q", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			if !strings.Contains(string(body), tc.contains) {
				t.Fatalf("GET %s: body lacks %q", tc.path, tc.contains)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self'") {
				t.Fatalf("GET %s: Content-Security-Policy %q", tc.path, csp)
			}
		})
	}
	// The page holds no cluster data: hostnames come from the script's calls.
	resp, err := http.Get(srv.URL + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), "node-1") {
		t.Fatal("the page was rendered with agent data on the server")
	}
}

// TestProxyNeverForwardsTheCallersCredentials: the agent sees the call,
// not the caller's token or cookies.
func TestProxyNeverForwardsTheCallersCredentials(t *testing.T) {
	srv, node := newServers(t)
	for _, opts := range [][]connect.ClientOption{{connect.WithProtoJSON()}, nil} {
		client := slacklinev1connect.NewNodeServiceClient(http.DefaultClient, srv.URL+"/ui/node/a1", opts...)
		req := connect.NewRequest(&slacklinev1.GetUsageRequest{})
		req.Header().Set("Authorization", "Bearer operator-token")
		req.Header().Set("Cookie", "session=operator")
		resp, err := client.GetUsage(context.Background(), req)
		if err != nil {
			t.Fatalf("GetUsage through the proxy: %v", err)
		}
		if got := resp.Msg.GetUsage()[0].GetStatistics().GetCpusRate(); got != 1.5 {
			t.Fatalf("cpus_rate %v, want 1.5", got)
		}
	}
	node.mu.Lock()
	defer node.mu.Unlock()
	if len(node.auth) != 2 {
		t.Fatalf("agent saw %d calls, want 2", len(node.auth))
	}
	for _, a := range node.auth {
		if a != "" {
			t.Fatalf("agent saw Authorization %q, want none: a caller's token never leaves the coordinator", a)
		}
	}
}

func TestProxyRefuses(t *testing.T) {
	srv, _ := newServers(t)
	for _, tc := range []struct {
		name, method, path string
		status             int
		code               string
	}{
		{"sandbox files are not forwarded without Config.Sandboxes", "POST", "/ui/node/a1/slackline.v1.NodeService/ReadSandboxFile", 403, "permission_denied"},
		{"other services are not forwarded", "POST", "/ui/node/a1/slackline.v1.OperatorService/GetState", 404, "not_found"},
		{"unknown agent", "POST", "/ui/node/nope/slackline.v1.NodeService/GetUsage", 404, "not_found"},
		{"agent without endpoint", "POST", "/ui/node/a2/slackline.v1.NodeService/GetUsage", 503, "unavailable"},
		{"unreachable agent", "POST", "/ui/node/a3/slackline.v1.NodeService/GetUsage", 503, "unavailable"},
		{"only POST", "DELETE", "/ui/node/a1/slackline.v1.NodeService/GetUsage", 405, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.code) {
				t.Fatalf("%s %s: %d %s, want %d %s", tc.method, tc.path, resp.StatusCode, body, tc.status, tc.code)
			}
			if strings.Contains(string(body), "secret") {
				t.Fatal("sandbox data leaked through the proxy")
			}
		})
	}
}

// TestProxyVerifiesTheAgentsHostname: over TLS the agent's certificate
// must name the hostname the agent registered with, even when its
// endpoint is an address.
func TestProxyVerifiesTheAgentsHostname(t *testing.T) {
	caCert, caKey := newCA(t)
	node := &fakeNode{}
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewNodeServiceHandler(node))
	agentSrv := httptest.NewUnstartedServer(mux)
	agentSrv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf(t, caCert, caKey, "node-1")}}
	agentSrv.StartTLS()
	defer agentSrv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	agents := fakeAgents{
		{Id: "a1", Hostname: "node-1", Endpoint: agentSrv.URL}, // https://127.0.0.1:port
		{Id: "a2", Hostname: "node-2", Endpoint: agentSrv.URL}, // another host's claim on that address
	}
	srv := httptest.NewServer(Handler(Config{Agents: agents, AgentTLS: &tls.Config{RootCAs: roots}}))
	defer srv.Close()
	for _, tc := range []struct {
		agent string
		ok    bool
	}{{"a1", true}, {"a2", false}} {
		client := slacklinev1connect.NewNodeServiceClient(http.DefaultClient, srv.URL+"/ui/node/"+tc.agent, connect.WithProtoJSON())
		_, err := client.GetUsage(context.Background(), connect.NewRequest(&slacklinev1.GetUsageRequest{}))
		if (err == nil) != tc.ok {
			t.Errorf("agent %s: GetUsage error %v, want success %v", tc.agent, err, tc.ok)
		}
		if err != nil && connect.CodeOf(err) != connect.CodeUnavailable {
			t.Errorf("agent %s: %v, want unavailable", tc.agent, err)
		}
	}
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// leaf is a serving certificate for hostname alone (no IP addresses).
func leaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, hostname string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: hostname}, DNSNames: []string{hostname},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

type callerKey struct{}

// visibleAgents shows its agents only to a caller the middleware named.
type visibleAgents fakeAgents

func (v visibleAgents) GetAgents(ctx context.Context, req *connect.Request[slacklinev1.GetAgentsRequest]) (*connect.Response[slacklinev1.GetAgentsResponse], error) {
	if ctx.Value(callerKey{}) == nil {
		return connect.NewResponse(&slacklinev1.GetAgentsResponse{}), nil
	}
	return fakeAgents(v).GetAgents(ctx, req)
}

// TestProxyAuthorizesAsTheForwardedProcedure: Config.Authorize sees the
// NodeService procedure's path, and the caller it establishes is the one
// the agent lookup sees.
func TestProxyAuthorizesAsTheForwardedProcedure(t *testing.T) {
	node := &fakeNode{}
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewNodeServiceHandler(node))
	agentSrv := httptest.NewServer(mux)
	defer agentSrv.Close()
	var paths []string
	authorize := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			paths = append(paths, r.URL.Path)
			if r.Header.Get("Authorization") != "Bearer operator-token" {
				writeError(w, connect.CodeUnauthenticated, "no token")
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, "operator")))
		})
	}
	srv := httptest.NewServer(Handler(Config{Agents: visibleAgents{{Id: "a1", Hostname: "node-1", Endpoint: agentSrv.URL}}, Authorize: authorize}))
	defer srv.Close()
	client := slacklinev1connect.NewNodeServiceClient(http.DefaultClient, srv.URL+"/ui/node/a1", connect.WithProtoJSON())
	if _, err := client.GetUsage(context.Background(), connect.NewRequest(&slacklinev1.GetUsageRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("without a token: %v, want unauthenticated", err)
	}
	req := connect.NewRequest(&slacklinev1.GetUsageRequest{})
	req.Header().Set("Authorization", "Bearer operator-token")
	if _, err := client.GetUsage(context.Background(), req); err != nil {
		t.Fatalf("with a token: %v", err)
	}
	if want := slacklinev1connect.NodeServiceGetUsageProcedure; len(paths) != 2 || paths[0] != want || paths[1] != want {
		t.Fatalf("Authorize saw %v, want %s twice", paths, want)
	}
}

// TestNodeMethodsAreTheCoordinatorsOnly: what the proxy forwards is
// exactly what agents accept from the coordinator's identity.
func TestNodeMethodsAreTheCoordinatorsOnly(t *testing.T) {
	t.Parallel()
	var admitted, forwarded []string
	for path, rule := range auth.Rules {
		if rule.Coordinator {
			admitted = append(admitted, path)
		}
	}
	for _, m := range NodeMethods {
		forwarded = append(forwarded, "/"+slacklinev1connect.NodeServiceName+"/"+m)
	}
	slices.Sort(admitted)
	slices.Sort(forwarded)
	if !slices.Equal(admitted, forwarded) {
		t.Fatalf("the proxy forwards %v, agents admit the coordinator for %v", forwarded, admitted)
	}
}

// recordingAgent is an agent's NodeService behind the agent's own
// authorization (auth.Authorizer.Middleware over its certificate), that
// records each request's Authorization header and client certificate.
type recordingAgent struct {
	mu       sync.Mutex
	requests []recorded
}

type recorded struct {
	authorization, clientOrganization string
}

func (r *recordingAgent) calls() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.requests)
}

// secureCluster writes credentials for two agents, serves each one's
// NodeService over TLS with its certificate and the generated
// authorization file, and returns the proxy configured as the coordinator
// configures it.
func secureCluster(t *testing.T) (dir string, agents fakeAgents, recorders map[string]*recordingAgent, cfg Config) {
	t.Helper()
	dir = t.TempDir()
	if _, err := auth.Generate(dir, auth.Spec{Hosts: []string{"127.0.0.1"}, Agents: []string{"node-1", "node-2"}, Operators: []string{"admin"}}); err != nil {
		t.Fatal(err)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	authz, err := auth.Load(file(auth.AuthzFile))
	if err != nil {
		t.Fatal(err)
	}
	recorders = map[string]*recordingAgent{}
	for i, host := range []string{"node-1", "node-2"} {
		rec := &recordingAgent{}
		recorders[host] = rec
		mux := http.NewServeMux()
		mux.Handle(slacklinev1connect.NewNodeServiceHandler(&fakeNode{}, connect.WithInterceptors(authz.Interceptor())))
		protected := authz.Middleware(mux)
		tlsConfig, err := auth.ServerTLS(file(auth.AgentCertFile(host)), file(auth.AgentKeyFile(host)), file(auth.CACertFile))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got := recorded{authorization: r.Header.Get("Authorization")}
			if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
				got.clientOrganization = strings.Join(r.TLS.PeerCertificates[0].Subject.Organization, ",")
			}
			rec.mu.Lock()
			rec.requests = append(rec.requests, got)
			rec.mu.Unlock()
			protected.ServeHTTP(w, r)
		}))
		srv.EnableHTTP2, srv.TLS = true, tlsConfig
		srv.StartTLS()
		t.Cleanup(srv.Close)
		agents = append(agents, &slacklinev1.Agent{Id: fmt.Sprintf("a%d", i+1), Hostname: host, Endpoint: srv.URL})
	}
	agentTLS, err := auth.ClientTLS(file(auth.CACertFile), file(auth.CoordinatorClientCertFile), file(auth.CoordinatorClientKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	crl, err := auth.LoadCRL(file(auth.CRLFile), file(auth.CACertFile))
	if err != nil {
		t.Fatal(err)
	}
	return dir, agents, recorders, Config{Agents: agents, AgentTLS: agentTLS, AgentCRL: crl}
}

func getUsage(t *testing.T, proxyURL, agentID string) error {
	t.Helper()
	client := slacklinev1connect.NewNodeServiceClient(http.DefaultClient, proxyURL+"/ui/node/"+agentID, connect.WithProtoJSON())
	req := connect.NewRequest(&slacklinev1.GetUsageRequest{})
	req.Header().Set("Authorization", "Bearer operator-token")
	_, err := client.GetUsage(context.Background(), req)
	return err
}

// TestProxyCallsAgentsAsTheCoordinator: over TLS the agent authorizes the
// coordinator's certificate (the generated authz.yaml grants it nothing:
// the rule admits it for the view's methods) and never sees a token.
func TestProxyCallsAgentsAsTheCoordinator(t *testing.T) {
	t.Parallel()
	_, _, recorders, cfg := secureCluster(t)
	srv := httptest.NewServer(Handler(cfg))
	defer srv.Close()
	if err := getUsage(t, srv.URL, "a1"); err != nil {
		t.Fatalf("GetUsage of node-1 through the proxy: %v", err)
	}
	calls := recorders["node-1"].calls()
	if len(calls) != 1 || calls[0].authorization != "" || calls[0].clientOrganization != auth.CoordinatorOrganization {
		t.Fatalf("node-1 saw %+v, want one call with the coordinator's certificate (%s) and no Authorization", calls, auth.CoordinatorOrganization)
	}

	// Without the coordinator's certificate the agent refuses, and the
	// proxy says what to configure.
	noIdentity := cfg
	noIdentity.AgentTLS = &tls.Config{RootCAs: cfg.AgentTLS.RootCAs}
	bare := httptest.NewServer(Handler(noIdentity))
	defer bare.Close()
	if err := getUsage(t, bare.URL, "a1"); connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "--agent-client-cert") {
		t.Fatalf("without a client identity: %v, want unavailable naming --agent-client-cert", err)
	}
}

// TestProxyReachesOnlyHTTPSWithTLS: a clear-text endpoint is never called
// once the proxy has TLS configured.
func TestProxyReachesOnlyHTTPSWithTLS(t *testing.T) {
	t.Parallel()
	_, agents, _, cfg := secureCluster(t)
	var seen []string
	var mu sync.Mutex
	clear := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
	}))
	defer clear.Close()
	cfg.Agents = append(agents, &slacklinev1.Agent{Id: "rogue", Hostname: "node-1", Endpoint: clear.URL})
	srv := httptest.NewServer(Handler(cfg))
	defer srv.Close()
	if err := getUsage(t, srv.URL, "rogue"); connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "only over https") {
		t.Fatalf("clear-text endpoint: %v, want unavailable", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 0 {
		t.Fatalf("the clear-text endpoint received %d requests (Authorization %q)", len(seen), seen)
	}
}

// TestProxyRefusesRevokedAgents: an agent whose serving certificate is in
// the CRL receives no call, also over a connection the proxy pooled before
// the list was reloaded; the other agent is still reached.
func TestProxyRefusesRevokedAgents(t *testing.T) {
	t.Parallel()
	dir, _, recorders, cfg := secureCluster(t)
	srv := httptest.NewServer(Handler(cfg))
	defer srv.Close()
	for _, id := range []string{"a1", "a2"} {
		if err := getUsage(t, srv.URL, id); err != nil {
			t.Fatalf("%s before revocation: %v", id, err)
		}
	}
	if _, err := auth.Revoke(dir, []string{"node-1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.AgentCRL.Reload(); err != nil {
		t.Fatal(err)
	}
	err := getUsage(t, srv.URL, "a1")
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked node-1: %v, want unavailable naming the revocation", err)
	}
	if got := len(recorders["node-1"].calls()); got != 1 {
		t.Fatalf("revoked node-1 received %d calls, want only the one before revocation", got)
	}
	if err := getUsage(t, srv.URL, "a2"); err != nil {
		t.Fatalf("node-2 after node-1's revocation: %v", err)
	}
	if got := len(recorders["node-2"].calls()); got != 2 {
		t.Fatalf("node-2 received %d calls, want 2", got)
	}
}

// TestProxyRefusesOversizedAnswers: an agent's answer over
// MaxResponseBytes reaches the caller as resource_exhausted saying so,
// never as a message cut short, and is counted; one at the limit passes
// whole.
func TestProxyRefusesOversizedAnswers(t *testing.T) {
	t.Parallel()
	// A 1 MiB limit instead of MaxResponseBytes (16 MiB), so that the
	// test does not move two 16 MiB answers; the proxy's code is the same.
	const limit = 1 << 20
	var size atomic.Int64
	size.Store(limit + 1)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/proto")
		// One bytes field filling the answer: a tag byte and a 3-byte
		// length (1 MiB needs 3 varint bytes) before the data.
		msg := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), make([]byte, size.Load()-4))
		_, _ = w.Write(msg)
	}))
	t.Cleanup(agent.Close)
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(Handler(Config{Agents: fakeAgents{{Id: "a1", Hostname: "node-1", Endpoint: agent.URL}}, Metrics: reg, maxResponseBytes: limit}))
	t.Cleanup(srv.Close)
	client := slacklinev1connect.NewNodeServiceClient(http.DefaultClient, srv.URL+"/ui/node/a1", connect.WithReadMaxBytes(4*limit))
	_, err := client.GetUsage(context.Background(), connect.NewRequest(&slacklinev1.GetUsageRequest{}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "larger than the coordinator forwards (1 MiB)") {
		t.Fatalf("GetUsage of a %d-byte answer: %v, want resource_exhausted saying it is too large", size.Load(), err)
	}
	counter, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got float64
	for _, mf := range counter {
		if mf.GetName() == "slackline_coordinator_ui_proxy_answers_too_large_total" {
			got = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if got != 1 {
		t.Fatalf("slackline_coordinator_ui_proxy_answers_too_large_total %v, want 1", got)
	}
	// At the limit the answer is forwarded whole (it is no GetUsageResponse
	// the client can decode, so ask for raw bytes).
	size.Store(limit)
	resp, err := http.Post(srv.URL+"/ui/node/a1/"+slacklinev1connect.NodeServiceName+"/GetUsage", "application/proto", strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK || n != limit {
		t.Fatalf("answer at the limit: status %d, %d bytes (%v), want 200 and %d bytes", resp.StatusCode, n, err, limit)
	}
	// A second handler on the same registry shares the counter.
	Handler(Config{Agents: fakeAgents{}, Metrics: reg})
}

// TestProxyBoundsAnswersInFlight: beyond MaxAnswersInFlight calls held by
// their agents, a call waits for a slot and never reaches its agent; one
// whose wait ends (here its caller gives up) is counted, and once the held
// calls finish the proxy forwards again.
func TestProxyBoundsAnswersInFlight(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{}, 2*MaxAnswersInFlight)
	release := make(chan struct{})
	var calls atomic.Int64
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		arrived <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/proto")
	}))
	t.Cleanup(agent.Close)
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before agent.Close, which waits for the held calls
	reg := prometheus.NewRegistry()
	srv := httptest.NewServer(Handler(Config{Agents: fakeAgents{{Id: "a1", Hostname: "node-1", Endpoint: agent.URL}}, Metrics: reg}))
	t.Cleanup(srv.Close)
	client := slacklinev1connect.NewNodeServiceClient(http.DefaultClient, srv.URL+"/ui/node/a1")
	held := make(chan error, MaxAnswersInFlight)
	for range MaxAnswersInFlight {
		go func() {
			_, err := client.GetUsage(context.Background(), connect.NewRequest(&slacklinev1.GetUsageRequest{}))
			held <- err
		}()
	}
	for range MaxAnswersInFlight {
		<-arrived
	}
	metric := func(name string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				m := mf.GetMetric()[0]
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		return 0
	}
	waitFor := func(name string, want float64) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); metric(name) != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s %v, want %v", name, metric(name), want)
			}
		}
	}
	// One more call: it waits for a slot, then its caller gives up.
	ctx, cancel := context.WithCancel(context.Background())
	extra := make(chan error, 1)
	go func() {
		_, err := client.GetUsage(ctx, connect.NewRequest(&slacklinev1.GetUsageRequest{}))
		extra <- err
	}()
	waitFor("slackline_coordinator_ui_proxy_waiting", 1)
	cancel()
	<-extra
	waitFor("slackline_coordinator_ui_proxy_busy_total", 1)
	waitFor("slackline_coordinator_ui_proxy_waiting", 0)
	if got := calls.Load(); got != MaxAnswersInFlight {
		t.Fatalf("the agent received %d calls, want %d: the extra call got past the bound", got, MaxAnswersInFlight)
	}
	free()
	for range MaxAnswersInFlight {
		if err := <-held; err != nil {
			t.Fatalf("a held call: %v", err)
		}
	}
	if _, err := client.GetUsage(context.Background(), connect.NewRequest(&slacklinev1.GetUsageRequest{})); err != nil {
		t.Fatalf("a call after the held ones finished: %v", err)
	}
}
