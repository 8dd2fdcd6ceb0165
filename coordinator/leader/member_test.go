package leader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slackline/slackline/coordinator"
	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/etcdtest"
	"github.com/slackline/slackline/internal/protocol"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

// testMember is a member served on loopback.
type testMember struct {
	m      *Member
	srv    *httptest.Server
	cancel context.CancelFunc
	done   chan struct{}
}

func (tm *testMember) stop() {
	tm.cancel()
	<-tm.done
}

func (tm *testMember) operator() slacklinev1connect.OperatorServiceClient {
	return slacklinev1connect.NewOperatorServiceClient(server.NewClient(), tm.srv.URL)
}

func startMember(t *testing.T, client *clientv3.Client, prefix string) *testMember {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.Start()
	m, err := NewMember(Config{
		Coordinator: coordinator.Config{
			Logger:                 slog.New(slog.DiscardHandler),
			AgentHeartbeatInterval: 50 * time.Millisecond,
			AgentTimeout:           2 * time.Second,
			AgentReregisterTimeout: 5 * time.Second,
			AllocationInterval:     50 * time.Millisecond,
		},
		Client: client, Prefix: prefix, AdvertiseURL: srv.URL, LeaseTTL: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = m.Handler()
	ctx, cancel := context.WithCancel(context.Background())
	tm := &testMember{m: m, srv: srv, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tm.done)
		if err := m.Run(ctx); err != nil {
			t.Errorf("member Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		tm.stop()
		srv.Close()
	})
	return tm
}

// waitLeader waits until exactly one of members leads and every running
// member reports it; it returns the leader.
func waitLeader(t *testing.T, members ...*testMember) *testMember {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var leaders []*testMember
		for _, tm := range members {
			if tm.m.terms.leading() != nil {
				leaders = append(leaders, tm)
			}
		}
		if len(leaders) == 1 {
			agreed := true
			for _, tm := range members {
				resp, err := tm.operator().GetState(context.Background(), connect.NewRequest(&slacklinev1.GetStateRequest{}))
				if err != nil || resp.Msg.GetLeaderUrl() != leaders[0].srv.URL {
					agreed = false
				}
			}
			if agreed {
				return leaders[0]
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("no single leader that every member reports")
	return nil
}

// TestGroupLeaderAndFollowers starts three members: one leads; every
// member's GetState names it; followers answer other calls (unary and
// streaming, Connect and gRPC) Unavailable with the leader's URL in the
// Slackline-Leader header; the leader sets no such header.
func TestGroupLeaderAndFollowers(t *testing.T) {
	t.Parallel()
	client := etcdtest.Shared(t).Client(t)
	prefix := etcdtest.Prefix(t)
	members := []*testMember{startMember(t, client, prefix), startMember(t, client, prefix), startMember(t, client, prefix)}
	leader := waitLeader(t, members...)
	for _, tm := range members {
		for _, protocolName := range []string{"connect", "grpc"} {
			var opts []connect.ClientOption
			if protocolName == "grpc" {
				opts = append(opts, connect.WithGRPC())
			}
			httpClient := server.NewClient()
			scheduler := slacklinev1connect.NewSchedulerServiceClient(httpClient, tm.srv.URL, opts...)
			_, err := scheduler.Revive(context.Background(), connect.NewRequest(&slacklinev1.ReviveRequest{}))
			stream, serr := scheduler.Subscribe(context.Background(), connect.NewRequest(&slacklinev1.SubscribeRequest{}))
			if serr == nil {
				stream.Receive()
				serr = stream.Err()
				stream.Close()
			}
			if tm == leader {
				if connect.CodeOf(err) == connect.CodeUnavailable {
					t.Errorf("leader (%s) answered Revive Unavailable: %v", protocolName, err)
				}
				continue
			}
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeUnavailable || !strings.Contains(ce.Message(), leader.srv.URL) {
				t.Errorf("follower (%s) Revive = %v, want Unavailable naming %s", protocolName, err, leader.srv.URL)
			}
			if connect.CodeOf(serr) != connect.CodeUnavailable {
				t.Errorf("follower (%s) Subscribe = %v, want Unavailable", protocolName, serr)
			}
		}
		req, _ := http.NewRequest(http.MethodPost, tm.srv.URL+slacklinev1connect.AgentServiceRegisterProcedure, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got, set := resp.Header.Get(protocol.LeaderHeader), len(resp.Header.Values(protocol.LeaderHeader)) > 0
		switch {
		case tm == leader && set:
			t.Errorf("leader set %s: %q", protocol.LeaderHeader, got)
		case tm != leader && got != leader.srv.URL:
			t.Errorf("follower's %s = %q, want %s", protocol.LeaderHeader, got, leader.srv.URL)
		}
	}
}

// TestFailoverRecoversRegistry writes the registry through a leader
// (an agent, weights, quota), stops it, and checks that the member that
// takes over recovers all of it, as a restarted coordinator would: the
// agent RECOVERING, weights and quota in force.
func TestFailoverRecoversRegistry(t *testing.T) {
	t.Parallel()
	client := etcdtest.Shared(t).Client(t)
	prefix := etcdtest.Prefix(t)
	a, b := startMember(t, client, prefix), startMember(t, client, prefix)
	first := waitLeader(t, a, b)
	other := b
	if first == b {
		other = a
	}
	ctx := context.Background()
	agents := slacklinev1connect.NewAgentServiceClient(server.NewClient(), first.srv.URL)
	reg, err := agents.Register(ctx, connect.NewRequest(&slacklinev1.RegisterRequest{
		ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
		AgentInfo:       &slacklinev1.AgentInfo{Hostname: "host-a", Resources: resources.MustParse("cpus:4;mem:4096").Proto("", resources.Regular)},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.operator().UpdateWeights(ctx, connect.NewRequest(&slacklinev1.UpdateWeightsRequest{
		Weights: []*slacklinev1.WeightInfo{{Role: "eng", Weight: 3}}})); err != nil {
		t.Fatal(err)
	}
	if _, err := first.operator().UpdateQuota(ctx, connect.NewRequest(&slacklinev1.UpdateQuotaRequest{Configs: []*slacklinev1.QuotaConfig{
		{Role: "eng", Limits: resources.MustParse("cpus:2").Proto("", resources.Regular)}}})); err != nil {
		t.Fatal(err)
	}

	started := time.Now()
	first.stop() // resigns: the other member need not wait for the lease
	if waitLeader(t, other) != other {
		t.Fatal("the other member does not lead")
	}
	t.Logf("failover after resignation: %v", time.Since(started))
	state, err := other.operator().GetState(ctx, connect.NewRequest(&slacklinev1.GetStateRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if len(state.Msg.GetAgents()) != 1 || state.Msg.GetAgents()[0].GetId() != reg.Msg.GetAgentId() ||
		state.Msg.GetAgents()[0].GetState() != slacklinev1.AgentState_AGENT_STATE_RECOVERING {
		t.Errorf("agents after failover = %v, want %s RECOVERING", state.Msg.GetAgents(), reg.Msg.GetAgentId())
	}
	roles := map[string]*slacklinev1.Role{}
	for _, r := range state.Msg.GetRoles() {
		roles[r.GetName()] = r
	}
	if roles["eng"].GetWeight() != 3 || len(roles["eng"].GetQuota().GetLimits()) == 0 {
		t.Errorf("role eng after failover = %v, want weight 3 and a quota", roles["eng"])
	}
}

// TestDeposedLeaderWritesNothing revokes the leader's lease behind its
// back (as etcd does when a paused leader's lease expires): its next
// registry write is refused by the fence (Unavailable), the term ends at
// once, and the registry holds none of it.
func TestDeposedLeaderWritesNothing(t *testing.T) {
	t.Parallel()
	client := etcdtest.Shared(t).Client(t)
	prefix := etcdtest.Prefix(t)
	tm := startMember(t, client, prefix)
	waitLeader(t, tm)
	s := tm.m.terms.leading()
	lease, err := client.Get(context.Background(), s.term.Fence.Key)
	if err != nil || len(lease.Kvs) != 1 {
		t.Fatalf("leader key: %v %v", lease, err)
	}
	if _, err := client.Revoke(context.Background(), clientv3.LeaseID(lease.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	_, err = tm.operator().UpdateWeights(context.Background(), connect.NewRequest(&slacklinev1.UpdateWeightsRequest{
		Weights: []*slacklinev1.WeightInfo{{Role: "deposed", Weight: 9}}}))
	if err == nil {
		t.Fatal("a deposed leader's write succeeded")
	}
	if s.term.Valid() {
		t.Error("term still valid after its write was fenced")
	}
	if !errors.Is(context.Cause(s.term.Context()), store.ErrFenced) && !errors.Is(context.Cause(s.term.Context()), ErrLeaseExpired) {
		t.Errorf("term ended by %v", context.Cause(s.term.Context()))
	}
	weights, err := store.NewEtcd(client, store.EtcdOptions{Prefix: prefix}).Load(context.Background(), store.BucketWeights)
	if err != nil || len(weights) != 0 {
		t.Fatalf("weights in etcd = %q, %v; want none", weights, err)
	}
}

// TestGatedWriterStopsAtTermEnd ends a term while its leader streams a
// response: nothing written after the end reaches the client, and the
// response is aborted rather than completed.
func TestGatedWriterStopsAtTermEnd(t *testing.T) {
	t.Parallel()
	wrote := make(chan struct{})
	term, resp := getAsLeader(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("as leader;"))
		w.(http.Flusher).Flush()
		close(wrote)
		<-r.Context().Done() // the term's end ends the request
		w.Write([]byte("after the term"))
	})
	<-wrote
	term.End(errors.New("deposed"))
	body, err := io.ReadAll(resp.Body)
	if string(body) != "as leader;" || err == nil {
		t.Fatalf("body %q, err %v; want only what was sent as leader, then an aborted response", body, err)
	}
}

// TestGatedWriterPassesDeadlines: a leader's handler can lift its read
// deadline through the gated writer (the heartbeat stream does, or HTTP/2
// ends it at the server's ReadTimeout).
func TestGatedWriterPassesDeadlines(t *testing.T) {
	t.Parallel()
	_, resp := getAsLeader(t, func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).SetReadDeadline(time.Time{}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Write([]byte("lifted"))
	})
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "lifted" {
		t.Fatalf("%d %q; want the read deadline lifted through the gated writer", resp.StatusCode, body)
	}
}

// getAsLeader serves handler as a leader's, through Terms.Handler, for a
// term that holds for an hour unless the test ends it, and returns the
// term and the response to a GET (closed when the test ends).
func getAsLeader(t *testing.T, handler http.HandlerFunc) (*Term, *http.Response) {
	t.Helper()
	term := &Term{lease: newLease(context.Background(), 1, time.Hour, 0, time.Now())}
	terms := &Terms{local: http.NotFoundHandler()}
	terms.serving.Store(&serving{term: term, service: Service{Handler: handler}})
	srv := httptest.NewServer(terms.Handler(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return term, resp
}

// TestTermsServeOwnProfiles: with Pprof a replica serves its own runtime
// profiles and /metrics whether it leads or follows; other paths go to
// the term's handler or the follower's.
func TestTermsServeOwnProfiles(t *testing.T) {
	t.Parallel()
	for _, pprof := range []bool{false, true} {
		terms := NewTerms(TermsConfig{LeaderMetric: "test_leader", TermsMetric: "test_terms_total", What: "test", Pprof: pprof})
		follower := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "follower") })
		srv := httptest.NewServer(terms.Handler(follower))
		t.Cleanup(srv.Close)
		get := func(path string) string {
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return fmt.Sprintf("%d %s", resp.StatusCode, body)
		}
		for _, leading := range []bool{false, true} {
			if leading {
				term := &Term{lease: newLease(context.Background(), 1, time.Hour, 0, time.Now())}
				terms.serving.Store(&serving{term: term, service: Service{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					io.WriteString(w, "leader")
				})}})
			}
			other := "200 follower"
			if leading {
				other = "200 leader"
			}
			profile := other // without Pprof the path is the service's
			if pprof {
				profile = "200 " + strings.Join(os.Args, "\x00")
			}
			if got := get("/debug/pprof/cmdline"); got != profile {
				t.Errorf("pprof %v, leading %v: /debug/pprof/cmdline = %q, want %q", pprof, leading, got, profile)
			}
			if got := get("/metrics"); !strings.Contains(got, "test_leader") {
				t.Errorf("pprof %v, leading %v: /metrics = %q, want the replica's own", pprof, leading, got)
			}
			if got := get("/x"); got != other {
				t.Errorf("pprof %v, leading %v: /x = %q, want %q", pprof, leading, got, other)
			}
		}
	}
}
