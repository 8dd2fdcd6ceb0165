package ui

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
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
		{"/ui/", "text/html", `<script src="app.js"`},
		{"/ui/app.js", "javascript", "/slackline.v1.OperatorService/"},
		{"/ui/style.css", "text/css", "section.container"},
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

func TestProxyForwardsReadMethodsWithTheCallersToken(t *testing.T) {
	srv, node := newServers(t)
	for _, opts := range [][]connect.ClientOption{{connect.WithProtoJSON()}, nil} {
		client := slacklinev1connect.NewNodeServiceClient(http.DefaultClient, srv.URL+"/ui/node/a1", opts...)
		req := connect.NewRequest(&slacklinev1.GetUsageRequest{})
		req.Header().Set("Authorization", "Bearer operator-token")
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
	for _, a := range node.auth {
		if a != "Bearer operator-token" {
			t.Fatalf("agent saw Authorization %q, want the caller's token", a)
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
		{"sandbox files are not forwarded", "POST", "/ui/node/a1/slackline.v1.NodeService/ReadSandboxFile", 404, "not_found"},
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
