package frameworkapi_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// fakeScheduler is a hand-driven SchedulerService: each Subscribe becomes a
// fakeSession the test receives from sessions and feeds events to; unary
// calls are checked against the live stream id and recorded in calls.
type fakeScheduler struct {
	slacklinev1connect.UnimplementedSchedulerServiceHandler

	sessions chan *fakeSession
	calls    chan recordedCall
	// refuse, when set, decides whether a Subscribe is refused (non-nil error).
	refuse func(*slacklinev1.SubscribeRequest) error
	// ackGate, when set (before the client starts), makes every
	// Acknowledge wait for a receive before it is recorded.
	ackGate chan struct{}

	mu       sync.Mutex
	streamID string
}

// fakeSession is one Subscribe stream of fakeScheduler.
type fakeSession struct {
	req    *slacklinev1.SubscribeRequest
	events chan *slacklinev1.Event
	end    chan error // nil: end the stream cleanly
	srv    *fakeScheduler
}

// recordedCall is a unary call the fake received.
type recordedCall struct {
	procedure string
	streamID  string
	msg       proto.Message
}

func newFakeScheduler() *fakeScheduler {
	return &fakeScheduler{
		sessions: make(chan *fakeSession),
		calls:    make(chan recordedCall, 100),
	}
}

func (f *fakeScheduler) Subscribe(ctx context.Context, req *connect.Request[slacklinev1.SubscribeRequest], stream *connect.ServerStream[slacklinev1.SubscribeResponse]) error {
	if f.refuse != nil {
		if err := f.refuse(req.Msg); err != nil {
			return err
		}
	}
	s := &fakeSession{req: req.Msg, events: make(chan *slacklinev1.Event), end: make(chan error), srv: f}
	select {
	case f.sessions <- s:
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-s.end:
			return err
		case ev := <-s.events:
			if sub := ev.GetSubscribed(); sub != nil {
				f.mu.Lock()
				f.streamID = sub.GetStreamId()
				f.mu.Unlock()
			}
			if err := stream.Send(&slacklinev1.SubscribeResponse{Event: ev}); err != nil {
				return err
			}
		}
	}
}

// send delivers ev on the session's stream.
func (s *fakeSession) send(t *testing.T, ev *slacklinev1.Event) {
	t.Helper()
	select {
	case s.events <- ev:
	case <-time.After(time.Hour):
		t.Fatal("session is not reading events")
	}
}

// subscribe sends the Subscribed event.
func (s *fakeSession) subscribe(t *testing.T, frameworkID, streamID string, heartbeatSeconds float64) {
	t.Helper()
	s.send(t, &slacklinev1.Event{Event: &slacklinev1.Event_Subscribed{Subscribed: &slacklinev1.SubscribedEvent{
		FrameworkId: frameworkID, StreamId: streamID, HeartbeatIntervalSeconds: heartbeatSeconds,
	}}})
}

// close ends the stream with err (nil: cleanly).
func (s *fakeSession) close(t *testing.T, err error) {
	t.Helper()
	select {
	case s.end <- err:
	case <-time.After(time.Hour):
		t.Fatal("session already ended")
	}
}

// record checks the stream id header and records a unary call.
func record[Res any](f *fakeScheduler, procedure string, header http.Header, msg proto.Message) (*connect.Response[Res], error) {
	f.mu.Lock()
	live := f.streamID
	f.mu.Unlock()
	got := header.Get(frameworkapi.StreamIDHeader)
	f.calls <- recordedCall{procedure: procedure, streamID: got, msg: msg}
	if got == "" || got != live {
		return nil, connect.NewError(connect.CodePermissionDenied, errors.New("wrong stream id"))
	}
	return connect.NewResponse(new(Res)), nil
}

func (f *fakeScheduler) Accept(_ context.Context, r *connect.Request[slacklinev1.AcceptRequest]) (*connect.Response[slacklinev1.AcceptResponse], error) {
	return record[slacklinev1.AcceptResponse](f, "Accept", r.Header(), r.Msg)
}

func (f *fakeScheduler) Decline(_ context.Context, r *connect.Request[slacklinev1.DeclineRequest]) (*connect.Response[slacklinev1.DeclineResponse], error) {
	return record[slacklinev1.DeclineResponse](f, "Decline", r.Header(), r.Msg)
}

func (f *fakeScheduler) AcceptInverseOffers(_ context.Context, r *connect.Request[slacklinev1.AcceptInverseOffersRequest]) (*connect.Response[slacklinev1.AcceptInverseOffersResponse], error) {
	return record[slacklinev1.AcceptInverseOffersResponse](f, "AcceptInverseOffers", r.Header(), r.Msg)
}

func (f *fakeScheduler) DeclineInverseOffers(_ context.Context, r *connect.Request[slacklinev1.DeclineInverseOffersRequest]) (*connect.Response[slacklinev1.DeclineInverseOffersResponse], error) {
	return record[slacklinev1.DeclineInverseOffersResponse](f, "DeclineInverseOffers", r.Header(), r.Msg)
}

func (f *fakeScheduler) Revive(_ context.Context, r *connect.Request[slacklinev1.ReviveRequest]) (*connect.Response[slacklinev1.ReviveResponse], error) {
	return record[slacklinev1.ReviveResponse](f, "Revive", r.Header(), r.Msg)
}

func (f *fakeScheduler) Suppress(_ context.Context, r *connect.Request[slacklinev1.SuppressRequest]) (*connect.Response[slacklinev1.SuppressResponse], error) {
	return record[slacklinev1.SuppressResponse](f, "Suppress", r.Header(), r.Msg)
}

func (f *fakeScheduler) Kill(_ context.Context, r *connect.Request[slacklinev1.KillRequest]) (*connect.Response[slacklinev1.KillResponse], error) {
	return record[slacklinev1.KillResponse](f, "Kill", r.Header(), r.Msg)
}

func (f *fakeScheduler) Acknowledge(ctx context.Context, r *connect.Request[slacklinev1.AcknowledgeRequest]) (*connect.Response[slacklinev1.AcknowledgeResponse], error) {
	if f.ackGate != nil {
		select {
		case <-f.ackGate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return record[slacklinev1.AcknowledgeResponse](f, "Acknowledge", r.Header(), r.Msg)
}

func (f *fakeScheduler) Reconcile(_ context.Context, r *connect.Request[slacklinev1.ReconcileRequest]) (*connect.Response[slacklinev1.ReconcileResponse], error) {
	return record[slacklinev1.ReconcileResponse](f, "Reconcile", r.Header(), r.Msg)
}

func (f *fakeScheduler) Teardown(_ context.Context, r *connect.Request[slacklinev1.TeardownRequest]) (*connect.Response[slacklinev1.TeardownResponse], error) {
	return record[slacklinev1.TeardownResponse](f, "Teardown", r.Header(), r.Msg)
}

// nextSession waits for the client's next Subscribe.
func (f *fakeScheduler) nextSession(t *testing.T) *fakeSession {
	t.Helper()
	select {
	case s := <-f.sessions:
		return s
	case <-time.After(time.Hour):
		t.Fatal("no subscription")
		return nil
	}
}

// nextCall waits for the next unary call.
func (f *fakeScheduler) nextCall(t *testing.T) recordedCall {
	t.Helper()
	select {
	case c := <-f.calls:
		return c
	case <-time.After(time.Hour):
		t.Fatal("no call")
		return recordedCall{}
	}
}

// noCall fails if a unary call was recorded. Call it after synctest.Wait.
func (f *fakeScheduler) noCall(t *testing.T) {
	t.Helper()
	select {
	case c := <-f.calls:
		t.Fatalf("unexpected call %s %v", c.procedure, c.msg)
	default:
	}
}

// memListener is an in-memory net.Listener whose connections are net.Pipes,
// so that a client and a server in a synctest bubble block durably.
type memListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newMemListener() *memListener {
	return &memListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr{} }

func (l *memListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "mem" }

// protocol is a wire protocol the tests run over.
type protocol struct {
	name    string
	h2c     bool
	options []connect.ClientOption
}

var protocols = []protocol{
	{name: "connect-http1"},
	{name: "grpc-h2c", h2c: true, options: []connect.ClientOption{connect.WithGRPC()}},
}

// startFake serves fake in memory and returns a Client configured for it.
// It must run inside a synctest bubble; everything is shut down at cleanup.
func startFake(t *testing.T, p protocol, fake *fakeScheduler, cfg frameworkapi.Config) *frameworkapi.Client {
	t.Helper()
	lis := newMemListener()
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewSchedulerServiceHandler(fake))
	srv := &http.Server{Handler: mux, Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(lis) }()

	transport := &http.Transport{DialContext: lis.dial, Protocols: new(http.Protocols)}
	if p.h2c {
		transport.Protocols.SetUnencryptedHTTP2(true)
	} else {
		transport.Protocols.SetHTTP1(true)
	}
	t.Cleanup(func() {
		_ = srv.Close()
		transport.CloseIdleConnections()
	})

	cfg.Coordinator = "http://coordinator.test"
	cfg.HTTPClient = &http.Client{Transport: transport}
	cfg.ClientOptions = p.options
	if cfg.Framework == nil {
		cfg.Framework = &slacklinev1.FrameworkInfo{Name: "test"}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MinBackoff == 0 {
		cfg.MinBackoff = 10 * time.Millisecond
		cfg.MaxBackoff = 100 * time.Millisecond
	}
	c, err := frameworkapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runClient runs c.Run(ctx, h) in the background; the returned channel gets
// Run's result. The context is cancelled at cleanup.
func runClient(t *testing.T, c *frameworkapi.Client, h frameworkapi.Handler) (cancel context.CancelFunc, result <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		done <- c.Run(ctx, h)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	return cancel, done
}
