package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/privileged"
	"github.com/slackline/slackline/resources"
)

// The coordinator's trust towards agents (issue 24, attacks 1 and 7): no
// caller's token ever leaves the coordinator, revoked agents get no call,
// and nothing runs without credentials unless told to.

// startTrusted starts a coordinator as `make run` does: TLS, client
// certificates checked against the CRL, authz.yaml, and the coordinator's
// own client identity towards agents. Agents stay listed for as long as a
// test needs (the rogues here never heartbeat).
func startTrusted(t testing.TB, agents ...string) *secureCluster {
	t.Helper()
	s := &secureCluster{dir: t.TempDir(), addr: freeAddr(t)}
	s.url = "https://" + s.addr
	out, err := exec.Command(filepath.Join(binDir, "slacklinectl"), "credentials", "init", s.dir, "--hosts", "127.0.0.1,localhost",
		"--agents", strings.Join(agents, ","), "--frameworks", "batch,evil", "--operators", "admin").CombinedOutput()
	if err != nil {
		t.Fatalf("credentials init: %v\n%s", err, out)
	}
	args := append(coordinatorArgs(s.addr, t.TempDir()), "--agent-timeout", "10m",
		"--tls-cert", s.file("coordinator.crt"), "--tls-key", s.file("coordinator.key"),
		"--client-ca", s.file("ca.crt"), "--client-crl", s.file("crl.pem"), "--authz", s.file("authz.yaml"),
		"--agent-client-cert", s.file("coordinator-client.crt"), "--agent-client-key", s.file("coordinator-client.key"))
	// As an operator starts it: SLACKLINE_INSECURE plays no part.
	s.coordinator = startStrict(t, "slackline-coordinator", args...)
	eventually(t, startTimeout, func() string { _, err := getState(t, s.operator(t, "admin")); return errString(err) })
	return s
}

// seen is what a rogue endpoint received: each request's Authorization
// header and the organization of the client certificate it presented.
type seen struct {
	mu       sync.Mutex
	requests []seenRequest
}

type seenRequest struct{ authorization, clientOrganization string }

func (s *seen) record(r *http.Request) {
	got := seenRequest{authorization: r.Header.Get("Authorization")}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		got.clientOrganization = strings.Join(r.TLS.PeerCertificates[0].Subject.Organization, ",")
	}
	s.mu.Lock()
	s.requests = append(s.requests, got)
	s.mu.Unlock()
}

func (s *seen) all() []seenRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// rogueNode answers the node view like an agent would.
type rogueNode struct {
	slacklinev1connect.UnimplementedNodeServiceHandler
}

func (rogueNode) GetContainers(context.Context, *connect.Request[slacklinev1.GetContainersRequest]) (*connect.Response[slacklinev1.GetContainersResponse], error) {
	return connect.NewResponse(&slacklinev1.GetContainersResponse{Containers: []*slacklinev1.Container{{TaskId: "made-up"}}}), nil
}

// rogueEndpoint serves a NodeService on loopback that records every
// request: in clear text, or over TLS with the stolen agent certificate
// of name (asking for client certificates, to see whose arrive).
func rogueEndpoint(t *testing.T, s *secureCluster, name string, tlsOn bool) (url string, log *seen) {
	t.Helper()
	log = &seen{}
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewNodeServiceHandler(rogueNode{}))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.record(r)
		mux.ServeHTTP(w, r)
	}))
	if tlsOn {
		tlsConfig, err := auth.ServerTLS(s.file("agent-"+name+".crt"), s.file("agent-"+name+".key"), s.file("ca.crt"))
		if err != nil {
			t.Fatal(err)
		}
		srv.EnableHTTP2, srv.TLS = true, tlsConfig
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv.URL, log
}

// registerRogue registers, with the stolen certificate of name, an agent
// of that hostname whose NodeService endpoint is claimed, and returns its
// id.
func registerRogue(t *testing.T, s *secureCluster, name, claimed string) string {
	t.Helper()
	resp, err := slacklinev1connect.NewAgentServiceClient(httpClient(t, s.agentCreds(name)), s.url).Register(ctx5(t),
		connect.NewRequest(&slacklinev1.RegisterRequest{
			ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
			AgentInfo: &slacklinev1.AgentInfo{Hostname: name, Endpoint: claimed,
				Resources: resources.MustParse("cpus:1;mem:64").Proto("", resources.Regular)},
		}))
	if err != nil {
		t.Fatalf("register %s with its stolen certificate: %v", name, err)
	}
	return resp.Msg.GetAgentId()
}

// viewNode asks for an agent's containers through the coordinator's live
// view proxy, as the page does, with the operator admin's token.
func viewNode(t *testing.T, s *secureCluster, agentID string) (*slacklinev1.GetContainersResponse, error) {
	t.Helper()
	client := slacklinev1connect.NewNodeServiceClient(httpClient(t, s.token("admin")), s.url+"/ui/node/"+agentID, connect.WithProtoJSON())
	resp, err := client.GetContainers(ctx5(t), connect.NewRequest(&slacklinev1.GetContainersRequest{}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

func publishedEndpoint(t *testing.T, s *secureCluster, agentID string) string {
	t.Helper()
	resp, err := s.operator(t, "admin").GetAgents(ctx5(t), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range resp.Msg.GetAgents() {
		if a.GetId() == agentID {
			return a.GetEndpoint()
		}
	}
	t.Fatalf("agent %s is not listed", agentID)
	return ""
}

// TestOperatorTokenNeverReachesAnAgent: a stolen agent certificate
// registers its host with an endpoint of its choosing; when the operator
// opens that node in the live view, the rogue endpoint never receives the
// operator's token: a clear-text endpoint is not published (nothing is
// sent), a TLS one is called with the coordinator's own certificate and
// nothing of the operator's. (Before: the endpoint was published as
// claimed, and the proxy forwarded "Authorization: Bearer <admin token>".)
func TestOperatorTokenNeverReachesAnAgent(t *testing.T) {
	s := startTrusted(t, "rogue-http", "rogue-tls")
	token, err := auth.ReadToken(s.file("admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	leaked := func(log *seen) bool {
		for _, r := range log.all() {
			if strings.Contains(r.authorization, token) {
				return true
			}
		}
		return false
	}

	t.Run("clear-text endpoint", func(t *testing.T) {
		url, log := rogueEndpoint(t, s, "rogue-http", false)
		id := registerRogue(t, s, "rogue-http", url) // http://127.0.0.1:PORT
		if got := publishedEndpoint(t, s, id); got != "" {
			t.Errorf("the coordinator published the clear-text claim as %q", got)
		}
		_, err := viewNode(t, s, id)
		wantCode(t, "the node view of an agent that claimed http", err, connect.CodeUnavailable)
		if leaked(log) || len(log.all()) != 0 {
			t.Fatalf("the clear-text endpoint received %+v (the operator's token leaked: %v)", log.all(), leaked(log))
		}
	})

	t.Run("TLS endpoint", func(t *testing.T) {
		url, log := rogueEndpoint(t, s, "rogue-tls", true)
		id := registerRogue(t, s, "rogue-tls", url) // https://127.0.0.1:PORT
		resp, err := viewNode(t, s, id)
		if err != nil {
			t.Fatalf("the node view of the TLS rogue: %v", err)
		}
		if len(resp.GetContainers()) != 1 {
			t.Errorf("containers %v: want the rogue's answer passed through", resp.GetContainers())
		}
		got := log.all()
		if len(got) != 1 || got[0].authorization != "" || got[0].clientOrganization != auth.CoordinatorOrganization {
			t.Fatalf("the rogue received %+v; want one call with the coordinator's certificate (%s) and no Authorization (token leaked: %v)",
				got, auth.CoordinatorOrganization, leaked(log))
		}
		// The coordinator's identity buys the rogue nothing: the coordinator
		// refuses it for its own API (only agents accept it, for the view).
		coordinatorCreds := auth.ClientCredentials{CAFile: s.file("ca.crt"), CertFile: s.file("coordinator-client.crt"), KeyFile: s.file("coordinator-client.key")}
		_, err = slacklinev1connect.NewOperatorServiceClient(httpClient(t, coordinatorCreds), s.url).GetState(ctx5(t),
			connect.NewRequest(&slacklinev1.GetStateRequest{}))
		wantCode(t, "the coordinator's identity calling GetState", err, connect.CodePermissionDenied)
	})
}

// TestRevokedAgentGetsNoProxiedCall: once an agent's certificate is in the
// CRL (and the coordinator reloaded it), neither the live view's proxy nor
// slacklinectl with --crl sends it anything, also over the connection the
// proxy had pooled. (Before: both kept calling it, with the caller's token.)
func TestRevokedAgentGetsNoProxiedCall(t *testing.T) {
	s := startTrusted(t, "stolen")
	url, log := rogueEndpoint(t, s, "stolen", true)
	id := registerRogue(t, s, "stolen", url)
	if _, err := viewNode(t, s, id); err != nil {
		t.Fatalf("the node view before revocation: %v", err)
	}
	ctl := func(extra ...string) (string, error) {
		args := append(s.tlsArgs("admin"), extra...)
		out, err := exec.Command(filepath.Join(binDir, "slacklinectl"), args...).CombinedOutput()
		return string(out), err
	}
	if out, err := ctl("--crl", s.file("crl.pem"), "get", "containers", "--hostname", "stolen"); err != nil {
		t.Fatalf("slacklinectl get containers before revocation: %v\n%s", err, out)
	}
	before := len(log.all())

	if out, err := exec.Command(filepath.Join(binDir, "slacklinectl"), "credentials", "revoke", s.dir, "stolen").CombinedOutput(); err != nil {
		t.Fatalf("credentials revoke: %v\n%s", err, out)
	}
	if err := s.coordinator.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, func() string {
		if !strings.Contains(s.coordinator.out.String(), "reloaded certificate revocation list") {
			return "the coordinator has not reloaded the CRL"
		}
		return ""
	})
	_, err := viewNode(t, s, id)
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("the node view of the revoked agent: %v, want unavailable naming the revocation", err)
	}
	out, err := ctl("--crl", s.file("crl.pem"), "get", "containers", "--hostname", "stolen")
	if err == nil || !strings.Contains(out, "server certificate revoked") {
		t.Errorf("slacklinectl --crl get containers of the revoked agent: %v\n%s", err, out)
	}
	if got := log.all(); len(got) != before {
		t.Fatalf("the revoked agent received %d more requests: %+v", len(got)-before, got[before:])
	}
}

// TestDefaultsRefuseWithoutCredentials: with default flags (no
// credentials, no --insecure, no SLACKLINE_INSECURE) the coordinator and
// the agent refuse to start on loopback and say what to do; --insecure or
// SLACKLINE_INSECURE=1 opts out. (Before: loopback was exempt.)
func TestDefaultsRefuseWithoutCredentials(t *testing.T) {
	for _, binary := range []string{"slackline-coordinator", "slackline-agent"} {
		t.Run(binary, func(t *testing.T) {
			addr := freeAddr(t)
			args := []string{"--listen", addr, "--work-dir", t.TempDir()}
			if binary == "slackline-agent" {
				// Should it start (it must not), it works under a root of its own.
				root := fmt.Sprintf("slackline-e2e-defaults-%d", time.Now().UnixNano()%1e9)
				args = []string{"--listen", addr, "--work-dir", cgrouptest.WorkDir(t, root), "--cgroup-root", root}
			}
			p := startStrict(t, binary, args...)
			waitExit(t, p, 10*time.Second)
			out := p.out.String()
			for _, want := range []string{"refusing to listen on " + addr, "slacklinectl credentials init", "--insecure", "SLACKLINE_INSECURE=1"} {
				if !strings.Contains(out, want) {
					t.Errorf("%s with default flags on loopback: output lacks %q:\n%s", binary, want, out)
				}
			}
			if p.err == nil {
				t.Errorf("%s exited 0", binary)
			}
		})
	}
	t.Run("opt-outs", func(t *testing.T) {
		for _, opt := range []struct {
			env  []string
			args []string
		}{
			{args: []string{"--insecure"}},
			{env: []string{auth.EnvInsecure + "=1"}},
		} {
			addr := freeAddr(t)
			p := startWithEnv(t, append(strictEnv(), opt.env...), "slackline-coordinator",
				append([]string{"--listen", addr, "--work-dir", t.TempDir()}, opt.args...)...)
			eventually(t, startTimeout, func() string { _, err := getState(t, operator(addr)); return errString(err) })
			if !strings.Contains(p.out.String(), "running insecure") {
				t.Errorf("%v %v: no warning that it runs insecure:\n%s", opt.env, opt.args, p.out.String())
			}
		}
		p := startWithEnv(t, append(strictEnv(), auth.EnvInsecure+"=maybe"), "slackline-coordinator", "--listen", freeAddr(t), "--work-dir", t.TempDir())
		waitExit(t, p, 10*time.Second)
		if !strings.Contains(p.out.String(), auth.EnvInsecure+`="maybe"`) {
			t.Errorf("a bad %s: %s", auth.EnvInsecure, p.out.String())
		}
	})
}

// TestTaskCannotReadAnotherTasksOutput: on one node, a task of the
// framework evil tries to read the output of a task of batch through the
// agent's NodeService on loopback, with slacklinectl and everything a
// local user has (the cluster's CA is public), over https and http. With
// default flags the coordinator and the agent do not start at all without
// credentials (before, they did, and the task read batch's output over
// http); with credentials the task is refused: it has no token, and the
// agent serves only TLS.
func TestTaskCannotReadAnotherTasksOutput(t *testing.T) {
	privileged.Require(t)
	t.Run("default flags", func(t *testing.T) {
		addr, listen := freeAddr(t), freeAddr(t)
		coordinator := startStrict(t, "slackline-coordinator", coordinatorArgs(addr, t.TempDir())...)
		root := cgrouptest.PriorityRoot(fmt.Sprintf("slackline-e2e-proxytrust-%d", time.Now().UnixNano()%1e9))
		agent := startStrict(t, "slackline-agent", "--coordinator", "http://"+addr, "--listen", listen,
			"--work-dir", cgrouptest.WorkDir(t, root), "--cgroup-root", root, "--resources", "cpus:2;mem:512", "--kill-grace-period", "200ms")
		select {
		case <-coordinator.done:
		case <-time.After(10 * time.Second):
		}
		select {
		case <-agent.done:
		case <-time.After(10 * time.Second):
		}
		if coordinator.exited() && agent.exited() {
			return // nothing to attack: both refused (TestDefaultsRefuseWithoutCredentials checks why)
		}
		// They run: a task attacks as it would in any cluster of defaults.
		framework := func(name string) []string { return []string{"--coordinator", "http://" + addr, "--name", name} }
		out := attackThroughTheAgent(t, framework, listen, operator(addr),
			slacklinev1connect.NewNodeServiceClient(http.DefaultClient, "http://"+listen), "")
		if strings.Contains(out, "secret-of-batch") {
			t.Fatalf("with default flags a task read another framework's task output through the agent:\n%s", out)
		}
	})
	t.Run("credentials", func(t *testing.T) {
		// The node is named by its address, so that a task's TLS to it
		// verifies: only the missing credentials stop it.
		s := startTrusted(t, "127.0.0.1")
		listen := freeAddr(t)
		root := cgrouptest.PriorityRoot(fmt.Sprintf("slackline-e2e-proxytrust-%d", time.Now().UnixNano()%1e9))
		startStrict(t, "slackline-agent", "--coordinator", s.url, "--listen", listen, "--work-dir", filepath.Join(cgrouptest.WorkDir(t, root), "agent"),
			"--cgroup-root", root, "--resources", "cpus:2;mem:512", "--ca", s.file("ca.crt"), "--cert", s.file("agent-127.0.0.1.crt"),
			"--key", s.file("agent-127.0.0.1.key"), "--client-crl", s.file("crl.pem"), "--authz", s.file("authz.yaml"), "--kill-grace-period", "200ms")
		framework := func(name string) []string { return append(s.tlsArgs(name), "--name", name, "--role", name) }
		admin := s.token("admin")
		admin.ServerName = "127.0.0.1"
		out := attackThroughTheAgent(t, framework, listen, s.operator(t, "admin"),
			slacklinev1connect.NewNodeServiceClient(httpClient(t, admin), "https://"+listen), s.file("ca.crt"))
		if strings.Contains(out, "secret-of-batch") {
			t.Fatalf("a task read another framework's task output through the agent:\n%s", out)
		}
		for _, want := range []string{"unauthenticated", "attack-exit=22"} { // curl --fail-with-body: HTTP 401
			if !strings.Contains(out, want) {
				t.Errorf("the attack's output lacks %q:\n%s", want, out)
			}
		}
	})
}

// attackThroughTheAgent runs batch's task, which prints a secret, then
// evil's, which tries to read it through the agent at listen with
// slacklinectl (over https with the CA file ca, when given, and over
// http), and returns what evil's task printed, read by an operator.
func attackThroughTheAgent(t *testing.T, framework func(name string) []string, listen string,
	op slacklinev1connect.OperatorServiceClient, node slacklinev1connect.NodeServiceClient, ca string) string {
	t.Helper()
	start(t, "batch-framework", append(framework("batch"), "--tasks", "1",
		"--task-resources", "cpus:0.1;mem:32", "--command", "echo secret-of-batch; sleep 3600")...)
	var victimFramework, victimTask string
	eventually(t, 60*time.Second, func() string {
		state, err := op.GetState(ctx5(t), connect.NewRequest(&slacklinev1.GetStateRequest{}))
		if err != nil {
			return err.Error()
		}
		for _, task := range state.Msg.GetTasks() {
			if task.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
				victimFramework, victimTask = task.GetFrameworkId(), task.GetTaskId()
				return ""
			}
		}
		return "batch's task is not running"
	})

	// What the attacking task can use: an HTTP client (slacklinectl
	// reaches agents only through the coordinator) and the public CA.
	tools := taskVisibleDir(t)
	var copies []struct{ from, to string }
	caFlag := ""
	if ca != "" {
		copies = append(copies, struct{ from, to string }{ca, "ca.crt"})
		caFlag = "--cacert " + filepath.Join(tools, "ca.crt")
	}
	for _, f := range copies {
		data, err := os.ReadFile(f.from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tools, f.to), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	attack := func(url string) string {
		return fmt.Sprintf("curl -sS --fail-with-body %s -H 'Content-Type: application/json' --data '{\"frameworkId\":\"%s\",\"taskId\":\"%s\",\"path\":\"stdout\"}' %s/slackline.v1.NodeService/ReadSandboxFile 2>&1; echo \" attack-exit=$?\"",
			caFlag, victimFramework, victimTask, url)
	}
	command := attack("https://"+listen) + "; " + attack("http://"+listen) + "; echo attack-done; sleep 3600"
	start(t, "batch-framework", append(framework("evil"), "--tasks", "1",
		"--task-resources", "cpus:0.1;mem:32", "--command", command)...)

	var out string
	eventually(t, 60*time.Second, func() string {
		tasks, err := op.GetTasks(ctx5(t), connect.NewRequest(&slacklinev1.GetTasksRequest{}))
		if err != nil {
			return err.Error()
		}
		for _, task := range tasks.Msg.GetTasks() {
			if task.GetFrameworkId() == victimFramework {
				continue
			}
			resp, err := node.ReadSandboxFile(ctx5(t), connect.NewRequest(&slacklinev1.ReadSandboxFileRequest{
				FrameworkId: task.GetFrameworkId(), TaskId: task.GetTaskId(), Path: "stdout"}))
			if err != nil {
				return err.Error()
			}
			if out = string(resp.Msg.GetData()); strings.Contains(out, "attack-done") {
				return ""
			}
		}
		return fmt.Sprintf("the attack has not finished: %q", out)
	})
	t.Logf("the attacking task printed:\n%s", out)
	return out
}

// BenchmarkNodeViewLatency measures GetContainers on a real agent (TLS,
// authorization) called directly by an operator with its token, and
// through the coordinator's live view proxy, which authorizes the operator
// and calls the agent with the coordinator's own certificate. Both clients
// reuse their connections, as the page's polling does. Reported:
// direct_p50_us, direct_p99_us, proxied_p50_us, proxied_p99_us.
//
//	sudo go test ./e2e -run '^$' -bench NodeViewLatency -benchtime 2000x
func BenchmarkNodeViewLatency(b *testing.B) {
	privileged.Require(b)
	s := startTrusted(b, "bench-node")
	listen := freeAddr(b)
	root := cgrouptest.PriorityRoot(fmt.Sprintf("slackline-e2e-viewbench-%d", time.Now().UnixNano()%1e9))
	startStrict(b, "slackline-agent", "--coordinator", s.url, "--listen", listen, "--work-dir", filepath.Join(cgrouptest.WorkDir(b, root), "agent"),
		"--cgroup-root", root, "--resources", "cpus:1;mem:256", "--ca", s.file("ca.crt"), "--cert", s.file("agent-bench-node.crt"),
		"--key", s.file("agent-bench-node.key"), "--client-crl", s.file("crl.pem"), "--authz", s.file("authz.yaml"))
	var agentID string
	eventually(b, 30*time.Second, func() string {
		resp, err := s.operator(b, "admin").GetAgents(ctx5(b), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
		if err != nil || len(resp.Msg.GetAgents()) != 1 || resp.Msg.GetAgents()[0].GetEndpoint() == "" {
			return fmt.Sprintf("agents %v, %v", resp, err)
		}
		agentID = resp.Msg.GetAgents()[0].GetId()
		return ""
	})
	admin := s.token("admin")
	admin.ServerName = "bench-node"
	direct := slacklinev1connect.NewNodeServiceClient(httpClient(b, admin), "https://"+listen)
	proxied := slacklinev1connect.NewNodeServiceClient(httpClient(b, s.token("admin")), s.url+"/ui/node/"+agentID, connect.WithProtoJSON())
	call := func(c slacklinev1connect.NodeServiceClient) time.Duration {
		begin := time.Now()
		if _, err := c.GetContainers(context.Background(), connect.NewRequest(&slacklinev1.GetContainersRequest{})); err != nil {
			b.Fatal(err)
		}
		return time.Since(begin)
	}
	for range 20 { // warm both connections
		call(direct)
		call(proxied)
	}
	var directTimes, proxiedTimes []time.Duration
	b.ResetTimer()
	for b.Loop() {
		// Interleaved, so that both see the same load.
		directTimes = append(directTimes, call(direct))
		proxiedTimes = append(proxiedTimes, call(proxied))
	}
	b.StopTimer()
	for _, m := range []struct {
		name  string
		times []time.Duration
	}{{"direct", directTimes}, {"proxied", proxiedTimes}} {
		sort.Slice(m.times, func(i, j int) bool { return m.times[i] < m.times[j] })
		b.ReportMetric(float64(percentile(m.times, 0.50).Microseconds()), m.name+"_p50_us")
		b.ReportMetric(float64(percentile(m.times, 0.99).Microseconds()), m.name+"_p99_us")
	}
}

// percentile of sorted durations.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}
