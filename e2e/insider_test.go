package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/resources"
)

// The insider attacks of issue 24 (2, 3 and 4) on a secured cluster with
// real binaries and real TLS: one stolen agent certificate, one framework
// token, or nothing at all.

// startInsider is startSecure with more flags for credentials init and the
// coordinator.
func startInsider(t *testing.T, initArgs, coordinatorFlags []string, agents ...string) *secureCluster {
	t.Helper()
	s := &secureCluster{dir: t.TempDir(), addr: freeAddr(t)}
	s.url = "https://" + s.addr
	args := append([]string{"credentials", "init", s.dir, "--hosts", "127.0.0.1,localhost",
		"--agents", strings.Join(agents, ","), "--frameworks", "batch,evil", "--operators", "admin"}, initArgs...)
	if out, err := exec.Command(filepath.Join(binDir, "slacklinectl"), args...).CombinedOutput(); err != nil {
		t.Fatalf("credentials init: %v\n%s", err, out)
	}
	flags := append(coordinatorArgs(s.addr, t.TempDir()), "--tls-cert", s.file("coordinator.crt"), "--tls-key", s.file("coordinator.key"),
		"--client-ca", s.file("ca.crt"), "--authz", s.file("authz.yaml"))
	s.coordinator = start(t, "slackline-coordinator", append(flags, coordinatorFlags...)...)
	eventually(t, startTimeout, func() string { _, err := getState(t, s.operator(t, "admin")); return errString(err) })
	return s
}

// registerWith registers an agent with an agent certificate, as a
// rogue process holding it would.
func (s *secureCluster) registerWith(t *testing.T, cert, hostname, res string) (*slacklinev1.RegisterResponse, error) {
	t.Helper()
	resp, err := slacklinev1connect.NewAgentServiceClient(httpClient(t, s.agentCreds(cert)), s.url).Register(ctx5(t),
		connect.NewRequest(&slacklinev1.RegisterRequest{ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
			AgentInfo: &slacklinev1.AgentInfo{Hostname: hostname, Resources: resources.MustParse(res).Proto("", resources.Regular)}}))
	if err != nil {
		return nil, err
	}
	return resp.Msg, nil
}

// TestInsiderOneAgentPerHost: a second agent registered with the node's
// certificate and hostname retires the first, so that the host has one
// live agent (before: both were ACTIVE, and offered).
func TestInsiderOneAgentPerHost(t *testing.T) {
	t.Parallel()
	s := startSecure(t, "node-1")
	first, err := s.registerWith(t, "node-1", "node-1", "cpus:4;mem:4096")
	if err != nil {
		t.Fatal(err)
	}
	second, err := s.registerWith(t, "node-1", "node-1", "cpus:4;mem:4096")
	if err != nil {
		t.Fatal(err)
	}
	state, err := getState(t, s.operator(t, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]slacklinev1.AgentState{}
	active := 0
	for _, a := range state.GetAgents() {
		states[a.GetId()] = a.GetState()
		if a.GetHostname() == "node-1" && a.GetState() == slacklinev1.AgentState_AGENT_STATE_ACTIVE {
			active++
		}
	}
	if active != 1 || states[second.GetAgentId()] != slacklinev1.AgentState_AGENT_STATE_ACTIVE ||
		states[first.GetAgentId()] != slacklinev1.AgentState_AGENT_STATE_GONE {
		t.Fatalf("node-1 has %d active agents (first %v, second %v); want the second alone, the first GONE",
			active, states[first.GetAgentId()], states[second.GetAgentId()])
	}
	// The first one's session is over: it cannot heartbeat as the host.
	_, err = slacklinev1connect.NewAgentServiceClient(httpClient(t, s.agentCreds("node-1")), s.url).Heartbeat(ctx5(t),
		connect.NewRequest(&slacklinev1.HeartbeatRequest{AgentId: first.GetAgentId(), SessionId: first.GetSessionId()}))
	wantCode(t, "the retired agent's heartbeat", err, connect.CodeFailedPrecondition)
}

// TestInsiderAgentResourceCap: an agent certificate registering more than
// the cap credentials init wrote (--agent-max-resources) is refused,
// naming the cap (before: registered with any resources).
func TestInsiderAgentResourceCap(t *testing.T) {
	t.Parallel()
	const limit = "cpus:16;mem:65536;disk:1048576;ports:[31000-32000]"
	s := startInsider(t, []string{"--agent-max-resources", limit}, nil, "node-1")
	_, err := s.registerWith(t, "node-1", "node-1", "cpus:64;mem:262144")
	wantCode(t, "registering cpus:64;mem:262144", err, connect.CodePermissionDenied)
	if err != nil && !strings.Contains(err.Error(), "max_resources") {
		t.Errorf("the error does not name the cap: %v", err)
	}
	if _, err := s.registerWith(t, "node-1", "node-1", "cpus:16;mem:65536;ports:[31000-32000]"); err != nil {
		t.Fatalf("registering within the cap: %v", err)
	}
}

// rssKiB returns a process's resident set size.
func rssKiB(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return kib
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// TestInsiderWatchFlood: 2,000 attempts to hold a health Watch stream
// open without credentials, from another address (127.0.0.2) and each on
// its own connection kept open, against a coordinator limited to 256 file
// descriptors as in the issue. The operator's GetState keeps answering
// and the coordinator's RSS stays within 50 MB of where it started
// (before: every stream stayed open, the descriptors ran out and GetState
// timed out).
func TestInsiderWatchFlood(t *testing.T) {
	t.Parallel()
	s := startSecure(t)
	pid := s.coordinator.cmd.Process.Pid
	if out, err := exec.Command("prlimit", "--pid", strconv.Itoa(pid), "--nofile=256:256").CombinedOutput(); err != nil {
		t.Fatalf("prlimit: %v\n%s", err, out)
	}
	if _, err := getState(t, s.operator(t, "admin")); err != nil {
		t.Fatal(err)
	}
	before := rssKiB(t, pid)

	caPEM, err := os.ReadFile(s.file("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	flood, stopFlood := context.WithCancel(context.Background())
	defer stopFlood()
	const attempts, workers = 2000, 32
	var mu sync.Mutex
	outcomes := map[string]int{}
	var transports []*http.Transport
	var wg sync.WaitGroup
	next := make(chan int, attempts)
	for i := range attempts {
		next <- i
	}
	close(next)
	for range workers {
		wg.Go(func() {
			for range next {
				// A new connection for each attempt, from 127.0.0.2, kept
				// open (the transport is never closed during the flood).
				dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: 2 * time.Second}
				tr := &http.Transport{DialContext: dialer.DialContext, TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"},
					Protocols: new(http.Protocols), TLSHandshakeTimeout: 2 * time.Second}
				tr.Protocols.SetHTTP2(true)
				ctx, cancel := context.WithTimeout(flood, 2*time.Second)
				events := grpchealth.NewClient(&http.Client{Transport: tr}, s.url, connect.WithGRPC()).Watch(flood, &grpchealth.CheckRequest{})
				outcome := "no answer within 2s"
				select {
				case ev := <-events:
					switch {
					case ev.Err != nil:
						outcome = connect.CodeOf(ev.Err).String()
					default:
						outcome = "stream open: " + ev.Response.Status.String()
					}
				case <-ctx.Done():
				}
				cancel()
				mu.Lock()
				outcomes[outcome]++
				transports = append(transports, tr)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Logf("%d unauthenticated Watch attempts: %v", attempts, outcomes)
	for outcome, n := range outcomes {
		if strings.HasPrefix(outcome, "stream open") {
			t.Errorf("%d Watch streams without credentials were opened", n)
		}
	}

	// With the attacker's connections still open, the operator's GetState
	// (each on a new connection) answers.
	var latencies []time.Duration
	for range 20 {
		began := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := s.operator(t, "admin").GetState(ctx, connect.NewRequest(&slacklinev1.GetStateRequest{}))
		cancel()
		if err != nil {
			t.Fatalf("operator's GetState under the flood: %v", err)
		}
		latencies = append(latencies, time.Since(began))
	}
	slices.Sort(latencies)
	after := rssKiB(t, pid)
	t.Logf("operator GetState under the flood (new TLS connection each): p50 %v, max %v; coordinator RSS %d KiB -> %d KiB (%+d KiB)",
		latencies[len(latencies)/2], latencies[len(latencies)-1], before, after, after-before)
	if after-before > 50<<10 {
		t.Errorf("coordinator RSS grew by %d KiB under the flood, more than 50 MiB", after-before)
	}
	stopFlood()
	for _, tr := range transports {
		tr.CloseIdleConnections()
	}
}

// TestInsiderFrameworkCap: one framework token registers frameworks up to
// --max-frameworks-per-principal, connected or disconnected within their
// failover timeout; one more is refused with resource_exhausted; a
// year-long failover timeout is lowered to --max-failover-timeout, as
// GetFrameworks shows (before: 3,000 frameworks, each kept a year).
func TestInsiderFrameworkCap(t *testing.T) {
	t.Parallel()
	s := startInsider(t, nil, []string{"--max-frameworks-per-principal", "5", "--max-failover-timeout", "48h"})
	sched := slacklinev1connect.NewSchedulerServiceClient(httpClient(t, s.token("batch")), s.url)
	subscribe := func(name string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel() // the framework disconnects, within its failover timeout
		stream, err := sched.Subscribe(ctx, connect.NewRequest(&slacklinev1.SubscribeRequest{FrameworkInfo: &slacklinev1.FrameworkInfo{
			Name: name, Roles: []string{"batch"}, FailoverTimeoutSeconds: 365 * 24 * 3600}}))
		if err != nil {
			return err
		}
		defer stream.Close()
		if !stream.Receive() {
			return stream.Err()
		}
		return nil
	}
	for i := range 5 {
		if err := subscribe(fmt.Sprintf("fw-%d", i)); err != nil {
			t.Fatalf("framework %d: %v", i, err)
		}
	}
	err := subscribe("one-too-many")
	wantCode(t, "the sixth framework", err, connect.CodeResourceExhausted)
	if err != nil && !strings.Contains(err.Error(), "--max-frameworks-per-principal 5") {
		t.Errorf("the error does not name the cap: %v", err)
	}
	resp, err := slacklinev1connect.NewOperatorServiceClient(httpClient(t, s.token("batch")), s.url).GetFrameworks(ctx5(t),
		connect.NewRequest(&slacklinev1.GetFrameworksRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.Msg.GetFrameworks()); n != 5 {
		t.Errorf("batch has %d frameworks, want 5", n)
	}
	for _, fw := range resp.Msg.GetFrameworks() {
		if got := fw.GetInfo().GetFailoverTimeoutSeconds(); got != 48*3600 {
			t.Errorf("framework %s: failover timeout %v s in effect, want 172800 (--max-failover-timeout)", fw.GetInfo().GetName(), got)
		}
	}
	// Another principal is not held back by batch's frameworks.
	other := slacklinev1connect.NewSchedulerServiceClient(httpClient(t, s.token("admin")), s.url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := other.Subscribe(ctx, connect.NewRequest(&slacklinev1.SubscribeRequest{FrameworkInfo: &slacklinev1.FrameworkInfo{Name: "admin-fw"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() {
		t.Fatalf("admin's framework: %v", stream.Err())
	}
}
