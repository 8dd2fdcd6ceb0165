package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/cgrouptest"
	"github.com/slackline/slackline/internal/privileged"
	"github.com/slackline/slackline/internal/protocol"
	"github.com/slackline/slackline/resources"
)

// secureCluster is a coordinator started as `make run` starts it: with the
// credentials `slacklinectl credentials init` wrote (real TLS, client
// certificates, tokens, authz.yaml).
type secureCluster struct {
	dir, addr, url string
	coordinator    *process
}

// startSecure writes credentials for the agents, the frameworks batch and
// evil and the operator admin, and starts a coordinator with them.
func startSecure(t *testing.T, agents ...string) *secureCluster {
	t.Helper()
	s := &secureCluster{dir: t.TempDir(), addr: freeAddr(t)}
	s.url = "https://" + s.addr
	out, err := exec.Command(filepath.Join(binDir, "slacklinectl"), "credentials", "init", s.dir, "--hosts", "127.0.0.1,localhost",
		"--agents", strings.Join(agents, ","), "--frameworks", "batch,evil,jobs", "--operators", "admin").CombinedOutput()
	if err != nil {
		t.Fatalf("credentials init: %v\n%s", err, out)
	}
	args := append(coordinatorArgs(s.addr, t.TempDir()), "--tls-cert", s.file("coordinator.crt"), "--tls-key", s.file("coordinator.key"),
		"--client-ca", s.file("ca.crt"), "--authz", s.file("authz.yaml"),
		"--agent-client-cert", s.file("coordinator-client.crt"), "--agent-client-key", s.file("coordinator-client.key"))
	s.coordinator = start(t, "slackline-coordinator", args...)
	eventually(t, startTimeout, func() string { _, err := getState(t, s.operator(t, "admin")); return errString(err) })
	return s
}

func (s *secureCluster) file(name string) string { return filepath.Join(s.dir, name) }

// token is the credentials of a token principal ("" : none, the CA only).
func (s *secureCluster) token(name string) auth.ClientCredentials {
	c := auth.ClientCredentials{CAFile: s.file("ca.crt")}
	if name != "" {
		c.TokenFile = s.file(name + ".token")
	}
	return c
}

// agentCreds is the credentials of an agent certificate.
func (s *secureCluster) agentCreds(name string) auth.ClientCredentials {
	return auth.ClientCredentials{CAFile: s.file("ca.crt"), CertFile: s.file("agent-" + name + ".crt"), KeyFile: s.file("agent-" + name + ".key")}
}

func httpClient(t testing.TB, creds auth.ClientCredentials) *http.Client {
	t.Helper()
	c, err := creds.HTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (s *secureCluster) operator(t testing.TB, name string) slacklinev1connect.OperatorServiceClient {
	return slacklinev1connect.NewOperatorServiceClient(httpClient(t, s.token(name)), s.url)
}

// tlsArgs are the client flags of a token principal.
func (s *secureCluster) tlsArgs(token string) []string {
	return []string{"--coordinator", s.url, "--ca", s.file("ca.crt"), "--token-file", s.file(token + ".token")}
}

// simArgs start a simulated agent with its certificate: one agent named
// name, so its hostname is name (prefix name minus its index).
func (s *secureCluster) simArgs(name, res string) []string {
	prefix := strings.TrimSuffix(name, "0")
	return []string{"--coordinator", s.url, "--ca", s.file("ca.crt"), "--cert", s.file("agent-" + name + ".crt"),
		"--key", s.file("agent-" + name + ".key"), "--agents", "1", "--hostname-prefix", prefix, "--resources", res}
}

func ctx5(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// victim is the framework under attack, as the admin sees it.
type victim struct {
	frameworkID, agentID string
	tasks                []string
}

// observeVictim waits for the batch framework's n tasks to run and
// returns what an attacker would want to know.
func observeVictim(t *testing.T, s *secureCluster, n int) victim {
	t.Helper()
	var v victim
	eventually(t, 30*time.Second, func() string {
		state, err := getState(t, s.operator(t, "admin"))
		if err != nil {
			return err.Error()
		}
		v = victim{}
		for _, fw := range state.GetFrameworks() {
			if fw.GetInfo().GetName() == "batch" && fw.GetState() == slacklinev1.FrameworkState_FRAMEWORK_STATE_CONNECTED {
				v.frameworkID = fw.GetInfo().GetId()
			}
		}
		for _, task := range state.GetTasks() {
			if task.GetFrameworkId() == v.frameworkID && task.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING {
				v.tasks = append(v.tasks, task.GetTaskId())
				v.agentID = task.GetAgentId()
			}
		}
		if len(v.tasks) != n {
			return fmt.Sprintf("victim %+v", v)
		}
		return ""
	})
	return v
}

// checkVictimUnharmed fails unless the victim framework is still connected
// with its tasks running on its agent, which is still active.
func checkVictimUnharmed(t *testing.T, s *secureCluster, v victim) {
	t.Helper()
	state, err := getState(t, s.operator(t, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fw := range state.GetFrameworks() {
		if fw.GetInfo().GetId() == v.frameworkID && fw.GetState() != slacklinev1.FrameworkState_FRAMEWORK_STATE_CONNECTED {
			t.Errorf("victim framework is %v", fw.GetState())
		}
	}
	running := 0
	for _, task := range state.GetTasks() {
		if task.GetFrameworkId() == v.frameworkID && task.GetState() == slacklinev1.TaskState_TASK_STATE_RUNNING && task.GetAgentId() == v.agentID {
			running++
		}
	}
	if running != len(v.tasks) {
		t.Errorf("victim has %d of %d tasks running", running, len(v.tasks))
	}
	for _, a := range state.GetAgents() {
		if a.GetId() == v.agentID && a.GetState() != slacklinev1.AgentState_AGENT_STATE_ACTIVE {
			t.Errorf("victim agent is %v", a.GetState())
		}
	}
}

func wantCode(t *testing.T, what string, err error, code connect.Code) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Errorf("%s: %v, want %v", what, err, code)
	}
}

// TestAttacksRefused replays every attack of the issue on a secured
// cluster (real binaries, real TLS): each is refused with the right code and
// the victim's tasks keep running.
func TestAttacksRefused(t *testing.T) {
	s := startSecure(t, "victim-0", "attacker")
	start(t, "slackline-sim", s.simArgs("victim-0", "cpus:4;mem:4096")...)
	batch := start(t, "batch-framework", append(s.tlsArgs("batch"), "--name", "batch", "--role", "batch", "--tasks", "2",
		"--task-resources", "cpus:1;mem:128", "--command", "sleep 3600", "--failover-timeout", "1h")...)
	v := observeVictim(t, s, 2)

	t.Run("reading frameworks without credentials", func(t *testing.T) {
		_, err := s.operator(t, "").GetFrameworks(ctx5(t), connect.NewRequest(&slacklinev1.GetFrameworksRequest{}))
		wantCode(t, "GetFrameworks", err, connect.CodeUnauthenticated)
	})
	t.Run("another framework does not see the id", func(t *testing.T) {
		resp, err := s.operator(t, "evil").GetFrameworks(ctx5(t), connect.NewRequest(&slacklinev1.GetFrameworksRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(resp.Msg.GetFrameworks()); n != 0 {
			t.Errorf("evil sees %d frameworks", n)
		}
		_, err = s.operator(t, "evil").GetTasks(ctx5(t), connect.NewRequest(&slacklinev1.GetTasksRequest{FrameworkId: v.frameworkID}))
		wantCode(t, "GetTasks of the victim", err, connect.CodeNotFound)
	})
	t.Run("failing over to the victim's id, then disconnecting with failover timeout 0", func(t *testing.T) {
		sched := slacklinev1connect.NewSchedulerServiceClient(httpClient(t, s.token("evil")), s.url)
		for _, roles := range [][]string{{"evil"}, {"batch"}} {
			stream, err := sched.Subscribe(ctx5(t), connect.NewRequest(&slacklinev1.SubscribeRequest{FrameworkInfo: &slacklinev1.FrameworkInfo{
				Id: v.frameworkID, Name: "evil", Roles: roles, FailoverTimeoutSeconds: 0}}))
			if err == nil {
				for stream.Receive() {
					t.Errorf("evil received %v", stream.Msg())
				}
				err = stream.Err()
				stream.Close()
			}
			wantCode(t, "subscribe with the victim's id", err, connect.CodePermissionDenied)
			if err != nil && !strings.Contains(err.Error(), string(auth.TeardownFrameworks)) && !strings.Contains(err.Error(), string(auth.RegisterFrameworks)) {
				t.Errorf("refusal does not name the action: %v", err)
			}
		}
		// Without credentials it is not even authenticated.
		_, err := slacklinev1connect.NewSchedulerServiceClient(httpClient(t, s.token("")), s.url).Teardown(ctx5(t),
			connect.NewRequest(&slacklinev1.TeardownRequest{FrameworkId: v.frameworkID}))
		wantCode(t, "teardown without credentials", err, connect.CodeUnauthenticated)
	})
	t.Run("operator actions by a framework or nobody", func(t *testing.T) {
		for _, who := range []struct {
			name string
			code connect.Code
		}{{"evil", connect.CodePermissionDenied}, {"", connect.CodeUnauthenticated}} {
			op := s.operator(t, who.name)
			_, err := op.UpdateWeights(ctx5(t), connect.NewRequest(&slacklinev1.UpdateWeightsRequest{Weights: []*slacklinev1.WeightInfo{{Role: "batch", Weight: 1e-3}}}))
			wantCode(t, who.name+" UpdateWeights", err, who.code)
			_, err = op.UpdateQuota(ctx5(t), connect.NewRequest(&slacklinev1.UpdateQuotaRequest{Configs: []*slacklinev1.QuotaConfig{
				{Role: "batch", Limits: resources.MustParse("cpus:0.01").Proto("", resources.Regular)}}}))
			wantCode(t, who.name+" UpdateQuota", err, who.code)
			window := &slacklinev1.Window{MachineIds: []*slacklinev1.MachineID{{Hostname: "victim-0"}}, Unavailability: &slacklinev1.Unavailability{}}
			_, err = op.UpdateMaintenanceSchedule(ctx5(t), connect.NewRequest(&slacklinev1.UpdateMaintenanceScheduleRequest{
				Schedule: &slacklinev1.Schedule{Windows: []*slacklinev1.Window{window}}}))
			wantCode(t, who.name+" UpdateMaintenanceSchedule", err, who.code)
			_, err = op.StartMaintenance(ctx5(t), connect.NewRequest(&slacklinev1.StartMaintenanceRequest{Machines: window.MachineIds}))
			wantCode(t, who.name+" StartMaintenance", err, who.code)
		}
	})

	attacker := slacklinev1connect.NewAgentServiceClient(httpClient(t, s.agentCreds("attacker")), s.url)
	register := func(req *slacklinev1.RegisterRequest) (*slacklinev1.RegisterResponse, error) {
		req.ProtocolVersion = slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1
		if req.AgentInfo.Resources == nil {
			req.AgentInfo.Resources = resources.MustParse("cpus:1;mem:128").Proto("", resources.Regular)
		}
		resp, err := attacker.Register(ctx5(t), connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return resp.Msg, nil
	}
	t.Run("an agent registering as another host with its previous id", func(t *testing.T) {
		_, err := register(&slacklinev1.RegisterRequest{AgentInfo: &slacklinev1.AgentInfo{Hostname: "victim-0"}, PreviousAgentId: v.agentID})
		wantCode(t, "register as victim-0", err, connect.CodePermissionDenied)
		_, err = register(&slacklinev1.RegisterRequest{AgentInfo: &slacklinev1.AgentInfo{Id: v.agentID, Hostname: "attacker"}})
		wantCode(t, "register with the victim's id", err, connect.CodePermissionDenied)
	})
	var session *slacklinev1.RegisterResponse
	t.Run("an agent reporting tasks the coordinator never launched", func(t *testing.T) {
		var err error
		session, err = register(&slacklinev1.RegisterRequest{AgentInfo: &slacklinev1.AgentInfo{Hostname: "attacker"},
			Tasks: []*slacklinev1.AgentTask{{FrameworkId: v.frameworkID, State: slacklinev1.TaskState_TASK_STATE_RUNNING,
				Task: &slacklinev1.TaskInfo{TaskId: "invented", Resources: resources.MustParse("cpus:1000000000000").Proto("batch", resources.Regular),
					LaunchProof: []byte("trust me")}}}})
		if err != nil {
			t.Fatal(err)
		}
		state, err := getState(t, s.operator(t, "admin"))
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range state.GetTasks() {
			if task.GetTaskId() == "invented" {
				t.Errorf("invented task adopted: %v", task)
			}
		}
	})
	t.Run("an agent forging updates for another agent's task", func(t *testing.T) {
		if session == nil {
			t.Skip("no session")
		}
		_, err := attacker.UpdateStatus(ctx5(t), connect.NewRequest(&slacklinev1.UpdateStatusRequest{
			AgentId: session.GetAgentId(), SessionId: session.GetSessionId(), FrameworkId: v.frameworkID,
			Status: &slacklinev1.TaskStatus{TaskId: v.tasks[0], State: slacklinev1.TaskState_TASK_STATE_FAILED, Uuid: "forged"}}))
		wantCode(t, "forged update", err, connect.CodePermissionDenied)
		_, err = attacker.Heartbeat(ctx5(t), connect.NewRequest(&slacklinev1.HeartbeatRequest{AgentId: v.agentID, SessionId: "guess"}))
		wantCode(t, "heartbeat on the victim's agent", err, connect.CodePermissionDenied)
	})
	t.Run("tasks as root", func(t *testing.T) {
		sched := slacklinev1connect.NewSchedulerServiceClient(httpClient(t, s.token("batch")), s.url)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		stream, err := sched.Subscribe(ctx, connect.NewRequest(&slacklinev1.SubscribeRequest{FrameworkInfo: &slacklinev1.FrameworkInfo{
			Name: "rooted", Roles: []string{"batch"}, User: "root"}}))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		var frameworkID, streamID string
		var offer *slacklinev1.Offer
		for offer == nil && stream.Receive() {
			ev := stream.Msg().GetEvent()
			if sub := ev.GetSubscribed(); sub != nil {
				frameworkID, streamID = sub.GetFrameworkId(), sub.GetStreamId()
			}
			if offers := ev.GetOffers().GetOffers(); len(offers) > 0 {
				offer = offers[0]
			}
		}
		if offer == nil {
			t.Fatalf("no offer: %v", stream.Err())
		}
		req := connect.NewRequest(&slacklinev1.AcceptRequest{FrameworkId: frameworkID, OfferIds: []string{offer.GetId()},
			Operations: []*slacklinev1.Operation{{Operation: &slacklinev1.Operation_Launch{Launch: &slacklinev1.LaunchOperation{TaskInfos: []*slacklinev1.TaskInfo{
				{TaskId: "root-task", Name: "root-task", AgentId: offer.GetAgentId(), Resources: resources.MustParse("cpus:0.1;mem:32").Proto("", resources.Regular),
					Command: &slacklinev1.CommandInfo{Value: "id -u", Shell: true}}}}}}}})
		req.Header().Set(protocol.StreamIDHeader, streamID)
		_, err = sched.Accept(ctx, req)
		wantCode(t, "launch as root", err, connect.CodePermissionDenied)
		if err != nil && !strings.Contains(err.Error(), "run_tasks") {
			t.Errorf("refusal does not name run_tasks: %v", err)
		}
	})

	checkVictimUnharmed(t, s, v)
	select {
	case <-batch.done:
		t.Errorf("the victim framework exited: %v", batch.err)
	default:
	}
}

// TestCertificatesRefused: expired certificates, another CA, a wrong
// hostname and a revoked token are all refused.
func TestCertificatesRefused(t *testing.T) {
	s := startSecure(t, "a1")
	other := t.TempDir()
	if out, err := exec.Command(filepath.Join(binDir, "slacklinectl"), "credentials", "init", other, "--hosts", "127.0.0.1",
		"--agents", "a1", "--operators", "admin").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	ca, err := auth.LoadCA(s.file("ca.crt"), s.file("ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-48 * time.Hour)
	certPEM, keyPEM, err := ca.Issue(auth.CertSpec{CommonName: "a1", Organization: []string{auth.AgentOrganization}, Hosts: []string{"a1"},
		Client: true, Server: true, NotBefore: past, NotAfter: past.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	expired := t.TempDir()
	os.WriteFile(filepath.Join(expired, "a1.crt"), certPEM, 0o644)
	os.WriteFile(filepath.Join(expired, "a1.key"), keyPEM, 0o600)

	register := func(creds auth.ClientCredentials) error {
		_, err := slacklinev1connect.NewAgentServiceClient(httpClient(t, creds), s.url).Register(ctx5(t), connect.NewRequest(&slacklinev1.RegisterRequest{
			ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
			AgentInfo:       &slacklinev1.AgentInfo{Hostname: "a1", Resources: resources.MustParse("cpus:1").Proto("", resources.Regular)}}))
		return err
	}
	if err := register(s.agentCreds("a1")); err != nil {
		t.Fatalf("the genuine agent certificate: %v", err)
	}
	// The server ends the handshake of a client certificate it does not
	// accept (the client sees a TLS alert or a reset); the client refuses a
	// server it does not trust (and says why).
	for _, tt := range []struct {
		name  string
		creds auth.ClientCredentials
		want  string // "" : any transport error
	}{
		{"expired agent certificate", auth.ClientCredentials{CAFile: s.file("ca.crt"), CertFile: filepath.Join(expired, "a1.crt"), KeyFile: filepath.Join(expired, "a1.key")}, ""},
		{"agent certificate of another CA", auth.ClientCredentials{CAFile: s.file("ca.crt"), CertFile: filepath.Join(other, "agent-a1.crt"), KeyFile: filepath.Join(other, "agent-a1.key")}, ""},
		{"coordinator not trusted (another CA)", auth.ClientCredentials{CAFile: filepath.Join(other, "ca.crt"), CertFile: s.file("agent-a1.crt"), KeyFile: s.file("agent-a1.key")}, "unknown authority"},
		{"coordinator under a name its certificate lacks", auth.ClientCredentials{CAFile: s.file("ca.crt"), CertFile: s.file("agent-a1.crt"), KeyFile: s.file("agent-a1.key"), ServerName: "coordinator.example"}, "not coordinator.example"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := register(tt.creds)
			switch connect.CodeOf(err) {
			case connect.CodeUnavailable, connect.CodeCanceled, connect.CodeUnknown, connect.CodeInternal:
			default:
				t.Fatalf("register: %v, want the connection refused", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("register: %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
	resp, err := s.operator(t, "admin").GetAgents(ctx5(t), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
	if err != nil || len(resp.Msg.GetAgents()) != 1 {
		t.Fatalf("agents %v, %v: want only the genuine one", resp, err)
	}
	// The real agent binary refuses to start with a certificate for another
	// host.
	// (Insecure only so that the missing --authz is not what it refuses.)
	wrongHost := exec.Command(filepath.Join(binDir, "slackline-agent"), "--coordinator", s.url, "--ca", s.file("ca.crt"),
		"--cert", s.file("agent-a1.crt"), "--key", s.file("agent-a1.key"), "--hostname", "a2", "--work-dir", t.TempDir())
	wrongHost.Env = append(os.Environ(), auth.EnvInsecure+"=1")
	out, err := wrongHost.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not valid for --hostname a2") {
		t.Errorf("agent with another host's certificate: %v\n%s", err, out)
	}

	t.Run("revoked token", func(t *testing.T) {
		if _, err := getState(t, s.operator(t, "admin")); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(s.file("authz.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for _, line := range strings.Split(string(data), "\n") {
			if !strings.HasPrefix(line, "  admin: {token_sha256") {
				kept = append(kept, line)
			}
		}
		if err := os.WriteFile(s.file("authz.yaml"), []byte(strings.Join(kept, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := s.coordinator.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, func() string {
			_, err := getState(t, s.operator(t, "admin"))
			if connect.CodeOf(err) != connect.CodeUnauthenticated {
				return fmt.Sprintf("revoked token: %v", err)
			}
			return ""
		})
	})
}

// TestListenRefusedWithoutTrust: a coordinator or agent on a non-loopback
// address will not start without TLS and authorization, and says so.
func TestListenRefusedWithoutTrust(t *testing.T) {
	for _, cmd := range [][]string{
		{"slackline-coordinator", "--listen", "0.0.0.0:0", "--work-dir", t.TempDir()},
		{"slackline-agent", "--listen", "0.0.0.0:0", "--work-dir", t.TempDir()},
	} {
		c := exec.Command(filepath.Join(binDir, cmd[0]), cmd[1:]...)
		c.Env = strictEnv()
		out, err := c.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "refusing to listen on 0.0.0.0:0") || !strings.Contains(string(out), "--insecure") {
			t.Errorf("%s on 0.0.0.0: %v\n%s", cmd[0], err, out)
		}
	}
}

// Callers of the authorization table, in the order of its expectations.
var tableCallers = []string{"anonymous", "agent", "framework", "operator"}

// rpcCase is a row of the authorization table: a request, and for each
// caller whether its call is refused as unauthenticated (U), refused as
// not allowed (D), or passes authorization (A: the handler answers,
// whatever it answers).
type rpcCase struct {
	request string // the request in protojson
	want    string // one letter per tableCallers
}

// authorizationTable has a row for every RPC of every service: the test
// walks the proto descriptors and fails on an RPC without a row, so a new
// RPC cannot be added without deciding who may call it. The framework is
// "batch" (its own role batch), the operator "admin", the agent
// "table-agent".
var authorizationTable = map[string]rpcCase{
	slacklinev1connect.SchedulerServiceSubscribeProcedure:                 {`{"frameworkInfo":{"name":"t","roles":["batch"]}}`, "UDAA"},
	slacklinev1connect.SchedulerServiceAcceptProcedure:                    {`{"frameworkId":"nope"}`, "UDAA"},
	slacklinev1connect.SchedulerServiceDeclineProcedure:                   {`{"frameworkId":"nope"}`, "UDAA"},
	slacklinev1connect.SchedulerServiceAcceptInverseOffersProcedure:       {`{"frameworkId":"nope"}`, "UDAA"},
	slacklinev1connect.SchedulerServiceDeclineInverseOffersProcedure:      {`{"frameworkId":"nope"}`, "UDAA"},
	slacklinev1connect.SchedulerServiceReviveProcedure:                    {`{"frameworkId":"nope"}`, "UDAA"},
	slacklinev1connect.SchedulerServiceSuppressProcedure:                  {`{"frameworkId":"nope"}`, "UDAA"},
	slacklinev1connect.SchedulerServiceKillProcedure:                      {`{"frameworkId":"nope"}`, "UDAA"},
	slacklinev1connect.SchedulerServiceAcknowledgeProcedure:               {`{"frameworkId":"nope"}`, "UDAA"},
	slacklinev1connect.SchedulerServiceReconcileProcedure:                 {`{"frameworkId":"nope"}`, "UDAA"},
	slacklinev1connect.SchedulerServiceTeardownProcedure:                  {`{"frameworkId":"nope"}`, "UDAA"},
	slacklinev1connect.AgentServiceRegisterProcedure:                      {`{"protocolVersion":"AGENT_PROTOCOL_VERSION_1","agentInfo":{"hostname":"table-agent","resources":[{"name":"cpus","scalar":1}]}}`, "UADD"},
	slacklinev1connect.AgentServiceConnectProcedure:                       {`{"agentId":"nope"}`, "UADD"},
	slacklinev1connect.AgentServiceHeartbeatProcedure:                     {`{"agentId":"nope"}`, "UADD"},
	slacklinev1connect.AgentServiceHeartbeatStreamProcedure:               {`{"agentId":"nope"}`, "UADD"},
	slacklinev1connect.AgentServiceUpdateStatusProcedure:                  {`{"agentId":"nope"}`, "UADD"},
	slacklinev1connect.AgentServiceUpdateOversubscribedResourcesProcedure: {`{"agentId":"nope"}`, "UADD"},
	slacklinev1connect.OperatorServiceGetStateProcedure:                   {`{}`, "UDAA"},
	slacklinev1connect.OperatorServiceGetAgentsProcedure:                  {`{}`, "UDAA"},
	slacklinev1connect.OperatorServiceGetFrameworksProcedure:              {`{}`, "UDAA"},
	slacklinev1connect.OperatorServiceGetTasksProcedure:                   {`{}`, "UDAA"},
	slacklinev1connect.OperatorServiceGetRolesProcedure:                   {`{}`, "UDAA"},
	slacklinev1connect.OperatorServiceUpdateWeightsProcedure:              {`{"weights":[{"role":"batch","weight":2}]}`, "UDDA"},
	slacklinev1connect.OperatorServiceUpdateQuotaProcedure:                {`{"configs":[{"role":"batch"}]}`, "UDDA"},
	slacklinev1connect.OperatorServiceGetMaintenanceScheduleProcedure:     {`{}`, "UDDA"},
	slacklinev1connect.OperatorServiceUpdateMaintenanceScheduleProcedure:  {`{"schedule":{}}`, "UDDA"},
	slacklinev1connect.OperatorServiceGetMaintenanceStatusProcedure:       {`{}`, "UDDA"},
	slacklinev1connect.OperatorServiceStartMaintenanceProcedure:           {`{"machines":[{"hostname":"no-such-host"}]}`, "UDDA"},
	slacklinev1connect.OperatorServiceStopMaintenanceProcedure:            {`{"machines":[{"hostname":"no-such-host"}]}`, "UDDA"},
	slacklinev1connect.NodeServiceGetContainersProcedure:                  {`{}`, "UDDA"},
	slacklinev1connect.NodeServiceGetUsageProcedure:                       {`{}`, "UDDA"},
	slacklinev1connect.NodeServiceGetEstimateProcedure:                    {`{}`, "UDDA"},
	slacklinev1connect.NodeServiceGetCorrectionsProcedure:                 {`{}`, "UDDA"},
	slacklinev1connect.NodeServiceGetFeaturesProcedure:                    {`{}`, "UDDA"},
	slacklinev1connect.NodeServiceReadSandboxFileProcedure:                {`{"taskId":"nope","path":"stdout"}`, "UDAA"},
	slacklinev1connect.NodeServiceGetImagesProcedure:                      {`{}`, "UDDA"},
	slacklinev1connect.NodeServiceGetHistoryProcedure:                     {`{}`, "UDDA"},
	slacklinev1connect.NodeServiceGetDelaysProcedure:                      {`{}`, "UDDA"},
	slacklinev1connect.NodeServiceGetShadowsProcedure:                     {`{}`, "UDDA"},
	// JobService (slackline-jobs): any principal submits in a role it may
	// (batch's own), and sees and cancels its own jobs (none here: not found).
	slacklinev1connect.JobServiceSubmitJobProcedure: {`{"spec":"name: table\nrole: batch\ncommand: \"true\"\nresources: \"cpus:0.1;mem:16\"\n"}`, "UDAA"},
	slacklinev1connect.JobServiceGetJobsProcedure:   {`{}`, "UDAA"},
	slacklinev1connect.JobServiceGetJobProcedure:    {`{"name":"nope"}`, "UDAA"},
	slacklinev1connect.JobServiceCancelJobProcedure: {`{"name":"nope"}`, "UDAA"},
	// ProfileService (#29): operators only. The operator's apply is refused
	// by validation (INVALID_ARGUMENT) and changes nothing.
	slacklinev1connect.ProfileServiceGetProfilesProcedure:      {`{}`, "UDDA"},
	slacklinev1connect.ProfileServiceGetProfileStatusProcedure: {`{"name":"nope"}`, "UDDA"},
	slacklinev1connect.ProfileServiceApplyProfileProcedure:     {`{"name":"nope","settings":"estimator-target-violation: 2"}`, "UDDA"},
	slacklinev1connect.ProfileServiceRolloutProfileProcedure:   {`{"name":"nope","settings":""}`, "UDDA"},
	slacklinev1connect.ProfileServiceDeleteProfileProcedure:    {`{"name":"nope"}`, "UDDA"},
	slacklinev1connect.ProfileServiceAbortRolloutProcedure:     {`{"name":"nope"}`, "UDDA"},
}

// protoMethods returns every RPC of every slackline.v1 service by
// procedure, from the generated descriptors.
func protoMethods(t *testing.T) map[string]protoreflect.MethodDescriptor {
	out := map[string]protoreflect.MethodDescriptor{}
	protoregistry.GlobalFiles.RangeFilesByPackage("slackline.v1", func(f protoreflect.FileDescriptor) bool {
		for i := range f.Services().Len() {
			svc := f.Services().Get(i)
			for j := range svc.Methods().Len() {
				out[fmt.Sprintf("/%s/%s", svc.FullName(), svc.Methods().Get(j).Name())] = svc.Methods().Get(j)
			}
		}
		return true
	})
	if len(out) == 0 {
		t.Fatal("no slackline.v1 services registered")
	}
	return out
}

// callRPC calls a procedure with a request given in protojson, whatever its
// types (dynamic messages), and returns its error; a server stream counts
// as answered once its first message arrives.
func callRPC(ctx context.Context, client *http.Client, baseURL, procedure string, md protoreflect.MethodDescriptor, request string) error {
	req := dynamicpb.NewMessage(md.Input())
	if err := protojson.Unmarshal([]byte(request), req); err != nil {
		return fmt.Errorf("table request of %s: %w", procedure, err)
	}
	rpc := connect.NewClient[dynamicpb.Message, dynamicpb.Message](client, baseURL+procedure, connect.WithSchema(md),
		connect.WithResponseInitializer(func(_ connect.Spec, msg any) error {
			*msg.(*dynamicpb.Message) = *dynamicpb.NewMessage(md.Output())
			return nil
		}))
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if md.IsStreamingClient() {
		// A bidirectional stream: one request, then its answer.
		stream := rpc.CallBidiStream(ctx)
		defer stream.CloseResponse()
		if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_, err := stream.Receive()
		return err
	}
	if !md.IsStreamingServer() {
		_, err := rpc.CallUnary(ctx, connect.NewRequest(req))
		return err
	}
	stream, err := rpc.CallServerStream(ctx, connect.NewRequest(req))
	if err != nil {
		return err
	}
	defer stream.Close()
	if stream.Receive() {
		return nil
	}
	return stream.Err()
}

func verdict(err error) byte {
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated:
		return 'U'
	case connect.CodePermissionDenied:
		return 'D'
	}
	return 'A'
}

// TestAuthorizationTable calls every RPC as each kind of caller and
// compares who is refused with authorizationTable.
func TestAuthorizationTable(t *testing.T) {
	methods := protoMethods(t)
	for proc := range methods {
		if _, ok := authorizationTable[proc]; !ok {
			t.Errorf("%s has no row in authorizationTable: decide who may call it (and give it a rule in internal/auth)", proc)
		}
	}
	for proc := range authorizationTable {
		if _, ok := methods[proc]; !ok {
			t.Errorf("authorizationTable has a row for %s, which is not an RPC", proc)
		}
	}
	if t.Failed() {
		return
	}
	s := startSecure(t, "table-agent")
	callers := func() []*http.Client {
		return []*http.Client{httpClient(t, s.token("")), httpClient(t, s.agentCreds("table-agent")),
			httpClient(t, s.token("batch")), httpClient(t, s.token("admin"))}
	}
	check := func(t *testing.T, baseURL, service string) {
		clients := callers()
		for proc, md := range methods {
			if string(md.Parent().FullName()) != service {
				continue
			}
			row := authorizationTable[proc]
			got := make([]byte, len(tableCallers))
			var errs []string
			for i, c := range clients {
				err := callRPC(context.Background(), c, baseURL, proc, md, row.request)
				got[i] = verdict(err)
				errs = append(errs, fmt.Sprintf("%s: %v", tableCallers[i], err))
			}
			rule := auth.Rules[proc]
			if string(got) != row.want {
				t.Errorf("%s (caller %s, action %q %s): got %s, want %s\n  %s", proc, rule.Caller, rule.Action, rule.Handler,
					got, row.want, strings.Join(errs, "\n  "))
			}
		}
	}
	t.Run("coordinator", func(t *testing.T) {
		for _, svc := range []string{slacklinev1connect.SchedulerServiceName, slacklinev1connect.AgentServiceName, slacklinev1connect.OperatorServiceName,
			slacklinev1connect.ProfileServiceName} {
			check(t, s.url, svc)
		}
		// Health is open; reflection and metrics follow the authorization file.
		if _, err := grpchealth.NewClient(httpClient(t, s.token("")), s.url, connect.WithGRPC()).Check(ctx5(t), &grpchealth.CheckRequest{}); err != nil {
			t.Errorf("health without credentials: %v", err)
		}
		for i, c := range callers() {
			stream := grpcreflect.NewClient(c, s.url, connect.WithGRPC()).NewStream(ctx5(t))
			_, err := stream.ListServices()
			stream.Close()
			if got, want := verdict(err), "UDDA"[i]; got != want {
				t.Errorf("reflection as %s: %v (%c, want %c)", tableCallers[i], err, got, want)
			}
			resp, err := c.Get(s.url + auth.MetricsPath)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if want := []int{401, 403, 403, 200}[i]; resp.StatusCode != want {
				t.Errorf("/metrics as %s: %d, want %d", tableCallers[i], resp.StatusCode, want)
			}
		}
	})
	t.Run("job service", func(t *testing.T) {
		listen := freeAddr(t)
		startStrict(t, "slackline-jobs", "--coordinator", s.url, "--ca", s.file("ca.crt"), "--token-file", s.file("jobs.token"),
			"--listen", listen, "--work-dir", t.TempDir(), "--roles", "jobs",
			"--tls-cert", s.file("coordinator.crt"), "--tls-key", s.file("coordinator.key"), "--client-ca", s.file("ca.crt"),
			"--authz", s.file("authz.yaml"))
		eventually(t, 30*time.Second, func() string {
			_, err := grpchealth.NewClient(httpClient(t, auth.ClientCredentials{CAFile: s.file("ca.crt")}),
				"https://"+listen).Check(ctx5(t), &grpchealth.CheckRequest{})
			return errString(err)
		})
		check(t, "https://"+listen, slacklinev1connect.JobServiceName)
	})
	t.Run("agent NodeService", func(t *testing.T) {
		privileged.Require(t)
		listen := freeAddr(t)
		root := cgrouptest.PriorityRoot(fmt.Sprintf("slackline-e2e-table-%d", time.Now().UnixNano()%1e9))
		start(t, "slackline-agent", "--coordinator", s.url, "--listen", listen, "--work-dir", filepath.Join(cgrouptest.WorkDir(t, root), "agent"),
			"--cgroup-root", root, "--resources", "cpus:1;mem:256", "--ca", s.file("ca.crt"), "--cert", s.file("agent-table-agent.crt"),
			"--key", s.file("agent-table-agent.key"), "--authz", s.file("authz.yaml"))
		eventually(t, 30*time.Second, func() string {
			_, err := grpchealth.NewClient(httpClient(t, auth.ClientCredentials{CAFile: s.file("ca.crt"), ServerName: "table-agent"}),
				"https://"+listen).Check(ctx5(t), &grpchealth.CheckRequest{})
			return errString(err)
		})
		clients := []*http.Client{}
		for _, creds := range []auth.ClientCredentials{s.token(""), s.agentCreds("table-agent"), s.token("batch"), s.token("admin")} {
			creds.ServerName = "table-agent"
			clients = append(clients, httpClient(t, creds))
		}
		for proc, md := range methods {
			if string(md.Parent().FullName()) != slacklinev1connect.NodeServiceName {
				continue
			}
			row := authorizationTable[proc]
			got := make([]byte, len(clients))
			for i, c := range clients {
				got[i] = verdict(callRPC(context.Background(), c, "https://"+listen, proc, md, row.request))
			}
			if string(got) != row.want {
				t.Errorf("%s: got %s, want %s", proc, got, row.want)
			}
		}
		// No TLS, no service.
		_, err := slacklinev1connect.NewNodeServiceClient(http.DefaultClient, "http://"+listen).GetFeatures(ctx5(t),
			connect.NewRequest(&slacklinev1.GetFeaturesRequest{}))
		if err == nil {
			t.Error("the NodeService answered in clear text")
		}
	})
}

// TestSandboxAccess: a task's sandbox is read by its framework's principal
// and by operators granted access_sandboxes, not by another framework; the
// agent serves only TLS and is reached at the address it connected from,
// certified for its hostname.
func TestSandboxAccess(t *testing.T) {
	privileged.Require(t)
	s := startSecure(t, "sandbox-agent")
	listen := freeAddr(t)
	root := cgrouptest.PriorityRoot(fmt.Sprintf("slackline-e2e-sandbox-%d", time.Now().UnixNano()%1e9))
	start(t, "slackline-agent", "--coordinator", s.url, "--listen", listen, "--work-dir", filepath.Join(cgrouptest.WorkDir(t, root), "agent"),
		"--cgroup-root", root, "--resources", "cpus:1;mem:256", "--ca", s.file("ca.crt"), "--cert", s.file("agent-sandbox-agent.crt"),
		"--key", s.file("agent-sandbox-agent.key"), "--authz", s.file("authz.yaml"), "--kill-grace-period", "200ms")
	start(t, "batch-framework", append(s.tlsArgs("batch"), "--name", "batch", "--role", "batch", "--tasks", "1",
		"--task-resources", "cpus:0.1;mem:32", "--command", "echo secret-of-batch; sleep 3600")...)
	v := observeVictim(t, s, 1)

	// The endpoint the coordinator publishes is where the agent is.
	agents, err := s.operator(t, "admin").GetAgents(ctx5(t), connect.NewRequest(&slacklinev1.GetAgentsRequest{}))
	if err != nil || len(agents.Msg.GetAgents()) != 1 {
		t.Fatalf("agents: %v %v", agents, err)
	}
	if got, want := agents.Msg.GetAgents()[0].GetEndpoint(), "https://"+listen; got != want {
		t.Errorf("endpoint %q, want %q", got, want)
	}
	read := func(who string) (string, error) {
		creds := s.token(who)
		creds.ServerName = "sandbox-agent"
		resp, err := slacklinev1connect.NewNodeServiceClient(httpClient(t, creds), "https://"+listen).ReadSandboxFile(ctx5(t),
			connect.NewRequest(&slacklinev1.ReadSandboxFileRequest{FrameworkId: v.frameworkID, TaskId: v.tasks[0], Path: "stdout"}))
		if err != nil {
			return "", err
		}
		return string(resp.Msg.GetData()), nil
	}
	eventually(t, 10*time.Second, func() string {
		out, err := read("batch")
		if err != nil || !strings.Contains(out, "secret-of-batch") {
			return fmt.Sprintf("batch reads %q, %v", out, err)
		}
		return ""
	})
	if out, err := read("admin"); err != nil || !strings.Contains(out, "secret-of-batch") {
		t.Errorf("admin reads %q, %v", out, err)
	}
	_, err = read("evil")
	wantCode(t, "evil reads batch's sandbox", err, connect.CodePermissionDenied)
	_, err = read("")
	wantCode(t, "reading without credentials", err, connect.CodeUnauthenticated)
	// The CLI reads it through the coordinator's node proxy.
	out, err := exec.Command(filepath.Join(binDir, "slacklinectl"), "--coordinator", s.url, "--ca", s.file("ca.crt"),
		"--token-file", s.file("batch.token"), "logs", v.tasks[0]).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "secret-of-batch") {
		t.Errorf("slacklinectl logs as batch: %v\n%s", err, out)
	}
}

// TestSimFleetIdentity: a simulated fleet shares one agent certificate;
// the authorization file lets that identity register as the fleet's
// hostnames, and as nothing else.
func TestSimFleetIdentity(t *testing.T) {
	s := startSecure(t, "sim")
	authz, err := os.ReadFile(s.file("authz.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rule := "  register_agents:\n    - principals: agents\n      hostnames: self\n"
	fleet := rule + "    - principals: [agent:sim]\n      hostnames: [\"fleet-*\"]\n"
	if !strings.Contains(string(authz), rule) {
		t.Fatalf("authz.yaml has no register_agents rule to extend:\n%s", authz)
	}
	if err := os.WriteFile(s.file("authz.yaml"), []byte(strings.Replace(string(authz), rule, fleet, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.coordinator.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	simArgs := []string{"--coordinator", s.url, "--ca", s.file("ca.crt"), "--cert", s.file("agent-sim.crt"), "--key", s.file("agent-sim.key"),
		"--resources", "cpus:2;mem:1024"}
	eventually(t, 20*time.Second, func() string {
		_, err := slacklinev1connect.NewAgentServiceClient(httpClient(t, s.agentCreds("sim")), s.url).Register(ctx5(t),
			connect.NewRequest(&slacklinev1.RegisterRequest{ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
				AgentInfo: &slacklinev1.AgentInfo{Hostname: "fleet-probe", Resources: resources.MustParse("cpus:1").Proto("", resources.Regular)}}))
		return errString(err) // until the reload took effect
	})
	start(t, "slackline-sim", append(simArgs, "--agents", "3", "--hostname-prefix", "fleet-")...)
	eventually(t, 30*time.Second, func() string {
		state, err := getState(t, s.operator(t, "admin"))
		if err != nil {
			return err.Error()
		}
		active := map[string]bool{}
		for _, a := range state.GetAgents() {
			if a.GetState() == slacklinev1.AgentState_AGENT_STATE_ACTIVE {
				active[a.GetHostname()] = true
			}
		}
		if !active["fleet-0"] || !active["fleet-1"] || !active["fleet-2"] {
			return fmt.Sprintf("active agents %v", active)
		}
		return ""
	})
	_, err = slacklinev1connect.NewAgentServiceClient(httpClient(t, s.agentCreds("sim")), s.url).Register(ctx5(t),
		connect.NewRequest(&slacklinev1.RegisterRequest{ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
			AgentInfo: &slacklinev1.AgentInfo{Hostname: "node-1", Resources: resources.MustParse("cpus:1").Proto("", resources.Regular)}}))
	wantCode(t, "the fleet's identity registering as node-1", err, connect.CodePermissionDenied)
}
