package coordinator

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/netpipe"
	"github.com/slackline/slackline/internal/protocol"
	"github.com/slackline/slackline/internal/server"
	"github.com/slackline/slackline/resources"
)

// testCluster is a real coordinator served over HTTP, driven through the
// public services, on in-memory connections (net.Pipe pairs with loopback
// addresses, so that per-connection limits tell callers apart as on TCP):
// the same HTTP/1.1 and cleartext HTTP/2 server and Connect clients as on
// loopback, without the kernel's sockets. startCluster runs on the wall
// clock; startPipeCluster inside a synctest bubble, where the bubble's
// fake clock drives every timer and the test is exact.
type testCluster struct {
	t        *testing.T
	c        *Coordinator
	url      string
	workDir  string
	cancel   context.CancelFunc
	done     chan error
	client   *http.Client
	opts     []connect.ClientOption
	operator slacklinev1connect.OperatorServiceClient
	listener *pipeListener
	// inBubble says the cluster runs in a synctest bubble.
	inBubble bool
	// closeServer ends the server and its connections.
	closeServer func()
}

func fastConfig(dir string) Config {
	return Config{
		WorkDir:                    dir,
		Logger:                     testLogger(),
		AgentHeartbeatInterval:     50 * time.Millisecond,
		AgentTimeout:               1500 * time.Millisecond, // long enough for a loaded CI host
		AgentReregisterTimeout:     2 * time.Second,
		FrameworkHeartbeatInterval: 100 * time.Millisecond,
		AllocationInterval:         50 * time.Millisecond,
		AllocationBatch:            time.Millisecond,
	}
}

// wallConfig is fastConfig for tests on the wall clock (startCluster) that
// are not about liveness (a restart, the registry, metrics): their agents
// are never found silent, nor lost for not re-registering, however slow
// the machine (at load 36, 1.5 s between a by-hand agent's registration
// and its framework's reconciliation passed, and its task was LOST).
func wallConfig(dir string) Config {
	cfg := fastConfig(dir)
	cfg.AgentTimeout, cfg.AgentReregisterTimeout = time.Hour, time.Hour
	return cfg
}

// startCluster serves a coordinator on in-memory connections, on the
// wall clock.
func startCluster(t *testing.T, cfg Config, opts ...connect.ClientOption) *testCluster {
	t.Helper()
	return serveCluster(t, cfg, false, opts)
}

func (tc *testCluster) run() {
	ctx, cancel := context.WithCancel(context.Background())
	tc.cancel, tc.done = cancel, make(chan error, 1)
	go func() { tc.done <- tc.c.Run(ctx) }()
	tc.operator = slacklinev1connect.NewOperatorServiceClient(tc.client, tc.url, tc.opts...)
	tc.t.Cleanup(tc.stop)
}

// startPipeCluster serves a coordinator on in-memory connections for tests
// that run in a synctest bubble: its timers, the agents' heartbeats and the
// tests' deadlines all follow the bubble's fake clock, which moves only
// when every goroutine waits.
func startPipeCluster(t *testing.T, cfg Config, opts ...connect.ClientOption) *testCluster {
	t.Helper()
	return serveCluster(t, cfg, true, opts)
}

func serveCluster(t *testing.T, cfg Config, inBubble bool, opts []connect.ClientOption) *testCluster {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := newPipeListener()
	srv := &http.Server{Handler: c.Handler(), Protocols: new(http.Protocols)}
	if inBubble {
		// A read timeout as the binary has one (shorter: a second of the
		// bubble's clock), which a request's body must arrive within. On
		// the wall clock there is none, as httptest's server had none: a
		// loaded machine must not cut a request.
		srv.ReadTimeout = time.Second
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go srv.Serve(l)
	tc := &testCluster{t: t, c: c, url: "http://coordinator.test", workDir: cfg.WorkDir, opts: opts, listener: l, inBubble: inBubble}
	tc.client = tc.newClient()
	tc.closeServer = func() {
		srv.Close()
		tc.client.CloseIdleConnections()
	}
	tc.run()
	return tc
}

// newClient returns an HTTP client (HTTP/1.1 and cleartext HTTP/2, as
// server.NewClient) whose connections reach the cluster's server. Each
// client has connections of its own: the coordinator sees it as another
// caller.
func (tc *testCluster) newClient() *http.Client {
	client := server.NewClient()
	client.Transport.(*http.Transport).DialContext = tc.listener.dial
	return client
}

// pipeListener is an in-memory net.Listener whose connections are the
// server ends of net.Pipe pairs made by dial.
type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial connects to the listener.
func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	srv, client := netpipe.Pipe()
	select {
	case l.conns <- srv:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// stop shuts the coordinator down (idempotent).
func (tc *testCluster) stop() {
	if tc.cancel == nil {
		return
	}
	tc.cancel()
	tc.cancel = nil
	if err := <-tc.done; err != nil {
		tc.t.Errorf("Run: %v", err)
	}
	tc.closeServer()
	tc.c.Close()
	if tc.inBubble {
		// In a bubble (fake time, no wait): the subscriber goroutine
		// (offStack) ends after offStackIdle without calls; every goroutine
		// must end before the bubble does.
		time.Sleep(offStackIdle + time.Second)
	}
}

// testAgent speaks the AgentService protocol by hand.
type testAgent struct {
	t        *testing.T
	client   slacklinev1connect.AgentServiceClient
	id       string
	session  string
	commands chan *slacklinev1.AgentCommand
	cancel   context.CancelFunc
}

func (tc *testCluster) registerAgent(hostname, res string, tasks ...*slacklinev1.AgentTask) *testAgent {
	return tc.registerAgentWithID("", hostname, res, tasks...)
}

func (tc *testCluster) registerAgentWithID(id, hostname, res string, tasks ...*slacklinev1.AgentTask) *testAgent {
	tc.t.Helper()
	client := slacklinev1connect.NewAgentServiceClient(tc.client, tc.url, tc.opts...)
	resp, err := client.Register(context.Background(), connect.NewRequest(&slacklinev1.RegisterRequest{
		ProtocolVersion: slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1,
		AgentInfo:       &slacklinev1.AgentInfo{Id: id, Hostname: hostname, Resources: resources.MustParse(res).Proto("", resources.Regular)},
		Tasks:           tasks,
	}))
	if err != nil {
		tc.t.Fatalf("register %s: %v", hostname, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &testAgent{t: tc.t, client: client, id: resp.Msg.GetAgentId(), session: resp.Msg.GetSessionId(),
		commands: make(chan *slacklinev1.AgentCommand, 1000), cancel: cancel}
	stream, err := client.Connect(ctx, connect.NewRequest(&slacklinev1.ConnectRequest{AgentId: a.id, SessionId: a.session}))
	if err != nil {
		tc.t.Fatal(err)
	}
	go func() {
		defer close(a.commands)
		for stream.Receive() {
			if stream.Msg().GetCommand().GetPing() == nil {
				a.commands <- stream.Msg().GetCommand()
			}
		}
	}()
	// Heartbeat until cancelled.
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_, _ = client.Heartbeat(ctx, connect.NewRequest(&slacklinev1.HeartbeatRequest{AgentId: a.id, SessionId: a.session}))
			}
		}
	}()
	tc.t.Cleanup(cancel)
	return a
}

func (a *testAgent) nextCommand() *slacklinev1.AgentCommand {
	a.t.Helper()
	select {
	case cmd, ok := <-a.commands:
		if !ok {
			a.t.Fatal("agent command stream ended")
		}
		return cmd
	case <-time.After(10 * time.Second):
		a.t.Fatal("no agent command within 10s")
	}
	return nil
}

func (a *testAgent) sendStatus(frameworkID, taskID string, state slacklinev1.TaskState, uuid string) {
	a.t.Helper()
	_, err := a.client.UpdateStatus(context.Background(), connect.NewRequest(&slacklinev1.UpdateStatusRequest{
		AgentId: a.id, SessionId: a.session, FrameworkId: frameworkID,
		Status: &slacklinev1.TaskStatus{TaskId: taskID, State: state, Uuid: uuid},
	}))
	if err != nil {
		a.t.Fatalf("UpdateStatus: %v", err)
	}
}

// testFramework subscribes through SchedulerService.
type testFramework struct {
	t        *testing.T
	client   slacklinev1connect.SchedulerServiceClient
	id       string
	streamID string
	events   chan *slacklinev1.Event
	cancel   context.CancelFunc
	// backlog holds events that next skipped, for later calls.
	backlog []*slacklinev1.Event
}

func (tc *testCluster) subscribe(info *slacklinev1.FrameworkInfo) *testFramework {
	tc.t.Helper()
	fw, err := tc.trySubscribe(info)
	if err != nil {
		tc.t.Fatalf("subscribe: %v", err)
	}
	return fw
}

func (tc *testCluster) trySubscribe(info *slacklinev1.FrameworkInfo) (*testFramework, error) {
	client := slacklinev1connect.NewSchedulerServiceClient(tc.client, tc.url, tc.opts...)
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := client.Subscribe(ctx, connect.NewRequest(&slacklinev1.SubscribeRequest{FrameworkInfo: info}))
	if err != nil {
		cancel()
		return nil, err
	}
	if !stream.Receive() {
		cancel()
		if stream.Err() == nil {
			return nil, errors.New("stream ended before subscribed")
		}
		return nil, stream.Err()
	}
	sub := stream.Msg().GetEvent().GetSubscribed()
	if sub == nil {
		cancel()
		return nil, errors.New("first event is not subscribed")
	}
	if got := stream.ResponseHeader().Get(protocol.StreamIDHeader); got != sub.GetStreamId() {
		cancel()
		return nil, errors.New("stream id header " + got + " differs from the subscribed event " + sub.GetStreamId())
	}
	fw := &testFramework{t: tc.t, client: client, id: sub.GetFrameworkId(), streamID: sub.GetStreamId(),
		events: make(chan *slacklinev1.Event, 10000), cancel: cancel}
	go func() {
		defer close(fw.events)
		for stream.Receive() {
			if stream.Msg().GetEvent().GetHeartbeat() == nil {
				fw.events <- stream.Msg().GetEvent()
			}
		}
	}()
	tc.t.Cleanup(cancel)
	return fw, nil
}

func call[T any](fw *testFramework, msg *T) *connect.Request[T] {
	req := connect.NewRequest(msg)
	req.Header().Set(protocol.StreamIDHeader, fw.streamID)
	return req
}

// next returns the next event matching keep, failing after 10 s. Events
// it skips stay available to later calls.
func (fw *testFramework) next(keep func(*slacklinev1.Event) bool) *slacklinev1.Event {
	fw.t.Helper()
	for i, ev := range fw.backlog {
		if keep(ev) {
			fw.backlog = append(fw.backlog[:i], fw.backlog[i+1:]...)
			return ev
		}
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-fw.events:
			if !ok {
				fw.t.Fatal("event stream ended")
			}
			if keep(ev) {
				return ev
			}
			fw.backlog = append(fw.backlog, ev)
		case <-deadline:
			fw.t.Fatal("no matching event within 10s")
		}
	}
}

func (fw *testFramework) nextOffer() *slacklinev1.Offer {
	fw.t.Helper()
	return fw.next(func(ev *slacklinev1.Event) bool { return len(ev.GetOffers().GetOffers()) > 0 }).GetOffers().GetOffers()[0]
}

func (fw *testFramework) nextUpdate() *slacklinev1.TaskStatus {
	fw.t.Helper()
	return fw.next(func(ev *slacklinev1.Event) bool { return ev.GetUpdate() != nil }).GetUpdate().GetStatus()
}

// quiet asserts no event matching keep arrives within d.
func (fw *testFramework) quiet(d time.Duration, keep func(*slacklinev1.Event) bool) {
	fw.t.Helper()
	for _, ev := range fw.backlog {
		if keep(ev) {
			fw.t.Fatalf("unexpected event %v", ev)
		}
	}
	fw.backlog = nil
	deadline := time.After(d)
	for {
		select {
		case ev, ok := <-fw.events:
			if ok && keep(ev) {
				fw.t.Fatalf("unexpected event %v", ev)
			}
		case <-deadline:
			return
		}
	}
}

func isOffers(ev *slacklinev1.Event) bool { return len(ev.GetOffers().GetOffers()) > 0 }

func launch(fw *testFramework, offer *slacklinev1.Offer, filters *slacklinev1.Filters, tasks ...*slacklinev1.TaskInfo) error {
	_, err := fw.client.Accept(context.Background(), call(fw, &slacklinev1.AcceptRequest{
		FrameworkId: fw.id, OfferIds: []string{offer.GetId()}, Filters: filters,
		Operations: []*slacklinev1.Operation{{Operation: &slacklinev1.Operation_Launch{Launch: &slacklinev1.LaunchOperation{TaskInfos: tasks}}}},
	}))
	return err
}

func taskInfo(id, res string) *slacklinev1.TaskInfo {
	return &slacklinev1.TaskInfo{TaskId: id, Name: id, Resources: resources.MustParse(res).Proto("", resources.Regular),
		Command: &slacklinev1.CommandInfo{Value: "sleep 1000", Shell: true}}
}

func refuse(seconds float64) *slacklinev1.Filters {
	return &slacklinev1.Filters{RefuseSeconds: &seconds}
}

func connectCode(err error) connect.Code { return connect.CodeOf(err) }

func newAgentClient(tc *testCluster) slacklinev1connect.AgentServiceClient {
	return slacklinev1connect.NewAgentServiceClient(tc.client, tc.url, tc.opts...)
}

func nan() float64 { var zero float64; return zero / zero }

func testLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
