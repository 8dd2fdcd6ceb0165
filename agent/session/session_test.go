package session_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/slackline/slackline/agent/session"
	"github.com/slackline/slackline/coordinator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/agenttest"
	"github.com/slackline/slackline/internal/backoff"
	"github.com/slackline/slackline/resources"
)

// sent returns "framework/task/uuid" of every update the fake received.
func sent(fake *agenttest.FakeCoordinator) []string {
	var out []string
	for _, u := range fake.Updates() {
		out = append(out, u.GetFrameworkId()+"/"+u.GetStatus().GetTaskId()+"/"+u.GetStatus().GetUuid())
	}
	return out
}

// handler records what the session tells it and keeps the agent id, as an
// agent's task machine would.
type handler struct {
	mu       sync.Mutex
	agentID  string
	opened   []string // "agent/session"
	closed   []error
	commands []*slacklinev1.AgentCommand
	// onOpened and onCommand, when set, decide the answers.
	onOpened  func(ctx context.Context, agentID, sessionID string) error
	onCommand func(ctx context.Context, cmd *slacklinev1.AgentCommand) error
}

func (h *handler) Registration() *slacklinev1.RegisterRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return &slacklinev1.RegisterRequest{AgentInfo: &slacklinev1.AgentInfo{Id: h.agentID, Hostname: "node-1", Resources: resources.MustParse("cpus:4;mem:4096").Proto("", false)}}
}

func (h *handler) Opened(ctx context.Context, agentID, sessionID string) error {
	h.mu.Lock()
	h.agentID = agentID
	h.opened = append(h.opened, agentID+"/"+sessionID)
	onOpened := h.onOpened
	h.mu.Unlock()
	if onOpened != nil {
		return onOpened(ctx, agentID, sessionID)
	}
	return nil
}

func (h *handler) Command(ctx context.Context, cmd *slacklinev1.AgentCommand) error {
	h.mu.Lock()
	h.commands = append(h.commands, cmd)
	onCommand := h.onCommand
	h.mu.Unlock()
	if onCommand != nil {
		return onCommand(ctx, cmd)
	}
	return nil
}

func (h *handler) Closed(agentID, sessionID string, cause error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = append(h.closed, cause)
}

func (h *handler) snapshot() (opened []string, closed []error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.opened), slices.Clone(h.closed)
}

// warnCounter counts Warn records.
type warnCounter struct {
	slog.Handler
	mu    sync.Mutex
	warns []string
}

func (w *warnCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		w.mu.Lock()
		w.warns = append(w.warns, r.Message)
		w.mu.Unlock()
	}
	return w.Handler.Handle(ctx, r)
}

func (w *warnCounter) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.warns)
}

// harness runs one Session against a server on an in-memory network,
// inside a synctest bubble.
type harness struct {
	session *session.Session
	handler *handler
	network *agenttest.Network
	warns   *warnCounter
	cancel  context.CancelFunc
	done    chan error
	closers []func()
}

// run starts the Session; serve, when set, starts what answers it.
func run(t *testing.T, h *handler, clientOpts []connect.ClientOption, serve func(*agenttest.Network) func()) *harness {
	t.Helper()
	network := agenttest.NewNetwork()
	hs := &harness{handler: h, network: network, done: make(chan error, 1)}
	if serve != nil {
		hs.closers = append(hs.closers, serve(network))
	}
	client := network.Client()
	hs.closers = append(hs.closers, client.CloseIdleConnections)
	hs.warns = &warnCounter{Handler: slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})}
	hs.session = session.New(session.Config{
		Client:  slacklinev1connect.NewAgentServiceClient(client, "http://coordinator.test", clientOpts...),
		Handler: h,
		Backoff: backoff.Backoff{Rand: rand.New(rand.NewPCG(1, 2))},
		Logger:  slog.New(hs.warns),
	})
	ctx, cancel := context.WithCancel(t.Context())
	hs.cancel = cancel
	go func() { hs.done <- hs.session.Run(ctx) }()
	synctest.Wait()
	return hs
}

func (hs *harness) stop(t *testing.T) {
	t.Helper()
	hs.cancel()
	if err := <-hs.done; err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
	for _, c := range slices.Backward(hs.closers) {
		c()
	}
}

func serveFake(fake *agenttest.FakeCoordinator) func(*agenttest.Network) func() {
	return func(n *agenttest.Network) func() {
		return n.Serve(fake.Handler())
	}
}

func status(taskID, uuid string) *slacklinev1.TaskStatus {
	return &slacklinev1.TaskStatus{TaskId: taskID, State: slacklinev1.TaskState_TASK_STATE_RUNNING, Uuid: uuid}
}

// heartbeatMode is a coordinator a session heartbeats to.
type heartbeatMode struct {
	name   string
	stream bool // it has HeartbeatStream (else the session falls back to calls)
	old    bool // its stream answers every beat (no no_answer yet)
}

// heartbeatModes: the coordinator's HeartbeatStream, which answers only
// the beats that ask; an older one that answers every beat; and an older
// one still without HeartbeatStream.
var heartbeatModes = []heartbeatMode{{"stream", true, false}, {"stream-answering-all", true, true}, {"calls", false, false}}

// set makes fake the mode's coordinator.
func (m heartbeatMode) set(fake *agenttest.FakeCoordinator) {
	fake.SetHeartbeatStream(m.stream)
	fake.SetOldHeartbeatStream(m.old)
}

// checkHeartbeatMode checks that the agent's heartbeats went on the stream
// when the fake has one, by calls otherwise; and that on one stream, only
// the first beat and every third asked for an answer of a coordinator
// that honours no_answer, and every beat of one that does not.
func checkHeartbeatMode(t *testing.T, fake *agenttest.FakeCoordinator, agentID string, mode heartbeatMode) {
	t.Helper()
	all, onStream := fake.Heartbeats(agentID), fake.StreamHeartbeats(agentID)
	if mode.stream && onStream != all || !mode.stream && onStream != 0 {
		t.Errorf("%d of %d heartbeats on the heartbeat stream, want all with a stream (%v), none without", onStream, all, mode.stream)
	}
	if !mode.stream {
		return
	}
	answered, unwanted := fake.AnsweredHeartbeats(agentID)
	want := (onStream + 2) / 3
	if mode.old {
		want = onStream
	}
	if answered != want || unwanted != 0 {
		t.Errorf("%d of %d stream heartbeats answered, %d asked for no answer of a coordinator answering all; want %d and 0", answered, onStream, unwanted, want)
	}
}

func TestSessionAgainstFake(t *testing.T) {
	for _, protocol := range agenttest.Protocols {
		for _, mode := range heartbeatModes {
			t.Run(protocol.Name+"/"+mode.name, func(t *testing.T) {
				testSessionAgainstFake(t, protocol.Opts, mode)
			})
		}
	}
}

func testSessionAgainstFake(t *testing.T, opts []connect.ClientOption, mode heartbeatMode) {
	synctest.Test(t, func(t *testing.T) {
		fake := agenttest.NewFakeCoordinator()
		mode.set(fake)
		h := &handler{}
		hs := run(t, h, opts, serveFake(fake))
		defer hs.stop(t)

		agentID, sessionID, ok := hs.session.Current()
		if !ok || agentID != "agent-1" || sessionID != "session-1" {
			t.Fatalf("Current() = %q, %q, %v; want agent-1, session-1, true", agentID, sessionID, ok)
		}
		if got := fake.Registrations()[0].GetProtocolVersion(); got != slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1 {
			t.Errorf("protocol version %v, want AGENT_PROTOCOL_VERSION_1", got)
		}

		// Commands in stream order, pings kept by the session.
		ping := &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Ping{Ping: &slacklinev1.PingCommand{}}}
		kill := &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_KillTask{KillTask: &slacklinev1.KillTaskCommand{FrameworkId: "fw", TaskId: "t1"}}}
		ack := &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Acknowledge{Acknowledge: &slacklinev1.AcknowledgeCommand{FrameworkId: "fw", TaskId: "t1", Uuid: "u1"}}}
		for _, cmd := range []*slacklinev1.AgentCommand{ping, kill, ping, ack} {
			fake.Send(t, agentID, cmd)
		}
		synctest.Wait()
		h.mu.Lock()
		if len(h.commands) != 2 || h.commands[0].GetKillTask() == nil || h.commands[1].GetAcknowledge() == nil {
			t.Errorf("handler got %v, want the kill then the acknowledgement", h.commands)
		}
		h.mu.Unlock()

		// Heartbeats at the coordinator's 5 s interval.
		time.Sleep(11 * time.Second)
		synctest.Wait()
		if got := fake.Heartbeats(agentID); got != 2 {
			t.Errorf("%d heartbeats in 11 s, want 2", got)
		}
		checkHeartbeatMode(t, fake, agentID, mode)

		hs.session.Send("fw", status("t1", "u1"))
		if err := hs.session.SendEstimate(t.Context(), resources.MustParse("cpus:2").Proto("", true)); err != nil {
			t.Errorf("SendEstimate: %v", err)
		}
		synctest.Wait()
		if diff := cmp.Diff([]string{"fw/t1/u1"}, sent(fake)); diff != "" {
			t.Errorf("updates (-want +got):\n%s", diff)
		}
		if estimates := fake.Estimates(); len(estimates) != 1 || estimates[0].GetSessionId() != sessionID {
			t.Errorf("estimates %v, want one in %s", estimates, sessionID)
		}
	})
}

func TestSessionEnds(t *testing.T) {
	tests := []struct {
		name string
		// end ends the session of agent-1 somehow.
		end func(t *testing.T, fake *agenttest.FakeCoordinator)
		// wantCause matches the whole cause (a regular expression).
		wantCause string
	}{
		{
			name:      "heartbeat refused",
			end:       func(_ *testing.T, f *agenttest.FakeCoordinator) { f.Expire("agent-1") },
			wantCause: "heartbeat: failed_precondition: stale session",
		},
		{
			name: "heartbeats unanswered for three intervals",
			end: func(_ *testing.T, f *agenttest.FakeCoordinator) {
				f.SetHeartbeatError(connect.NewError(connect.CodeUnavailable, errors.New("overloaded")))
			},
			// 15 s after the registration at the least; more by the
			// jitter of the first beat (up to half an interval).
			wantCause: `no heartbeat got through for 1[5-9](\.\d+)?s: unavailable: overloaded`,
		},
		{
			name:      "command stream ends",
			end:       func(t *testing.T, f *agenttest.FakeCoordinator) { f.EndStream(t, "agent-1", nil) },
			wantCause: "command stream ended",
		},
		{
			name: "command stream fails",
			end: func(t *testing.T, f *agenttest.FakeCoordinator) {
				f.EndStream(t, "agent-1", connect.NewError(connect.CodeFailedPrecondition, errors.New("session ended; register again")))
			},
			wantCause: "command stream: failed_precondition: session ended; register again",
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := agenttest.NewFakeCoordinator()
				h := &handler{}
				hs := run(t, h, nil, serveFake(fake))
				defer hs.stop(t)

				test.end(t, fake)
				// The first beat, three intervals for the slowest
				// ending, then a backoff.
				time.Sleep(21 * time.Second)
				fake.SetHeartbeatError(nil) // let the next session live
				synctest.Wait()
				opened, closed := h.snapshot()
				if len(closed) != 1 || !regexp.MustCompile("^"+test.wantCause+"$").MatchString(closed[0].Error()) {
					t.Fatalf("Closed causes %v, want [%s]", closed, test.wantCause)
				}
				if diff := cmp.Diff([]string{"agent-1/session-1", "agent-1/session-2"}, opened); diff != "" {
					t.Errorf("sessions opened (-want +got):\n%s", diff)
				}
				if regs := fake.Registrations(); len(regs) != 2 || regs[1].GetAgentInfo().GetId() != "agent-1" {
					t.Errorf("registrations %v, want a second one with id agent-1", regs)
				}
			})
		})
	}
}

func TestUnhealthySessionsBackOffAndHealthyOnesReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := agenttest.NewFakeCoordinator()
		h := &handler{}
		// Every session ends before a heartbeat or command gets through.
		h.onOpened = func(context.Context, string, string) error { return errors.New("disk full") }
		hs := run(t, h, nil, serveFake(fake))
		defer hs.stop(t)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		// Delays of [50ms,100ms], [100,200], ..., capped at [5s,10s]: 8 to 10
		// registrations in 20 s.
		if n := len(fake.Registrations()); n < 8 || n > 10 {
			t.Fatalf("%d registrations in 20 s of failing sessions, want 8 to 10", n)
		}

		h.mu.Lock()
		h.onOpened = nil
		h.mu.Unlock()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		agentID, _, ok := hs.session.Current()
		if !ok {
			t.Fatal("not registered 10 s after sessions stopped failing")
		}
		fake.Send(t, agentID, &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Ping{Ping: &slacklinev1.PingCommand{}}})
		synctest.Wait()
		before := len(fake.Registrations())
		fake.EndStream(t, agentID, nil)
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if got := len(fake.Registrations()); got != before+1 {
			t.Errorf("%d registrations 100 ms after a healthy session ended, want %d: the backoff was not reset", got, before+1)
		}
	})
}

func TestRefusedRegistrationIsRetriedSlowly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := agenttest.NewFakeCoordinator()
		fake.SetRefuse(connect.NewError(connect.CodePermissionDenied, errors.New("machine node-1 is DOWN for maintenance")))
		h := &handler{}
		hs := run(t, h, nil, serveFake(fake))
		defer hs.stop(t)
		time.Sleep(time.Minute)
		synctest.Wait()
		// About every Backoff.Max (10 s, jittered to 5-10 s).
		if n := len(fake.Registrations()); n < 6 || n > 13 {
			t.Errorf("%d registration attempts in a minute while refused, want 6 to 13", n)
		}
		if got := hs.warns.count(); got != 1 {
			t.Errorf("%d warnings for one streak of refusals, want 1", got)
		}
		fake.SetRefuse(nil)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if _, _, ok := hs.session.Current(); !ok {
			t.Error("not registered 10 s after the refusal ended")
		}
	})
}

func TestSendCoalescesPerTask(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := agenttest.NewFakeCoordinator()
		gate := make(chan struct{})
		fake.SetUpdateGate(gate)
		hs := run(t, &handler{}, nil, serveFake(fake))
		defer hs.stop(t)

		s := hs.session
		s.Send("fw", status("t1", "a")) // in flight, waiting at the gate
		synctest.Wait()
		s.Send("fw", status("t1", "b")) // replaced by c
		s.Send("fw", status("t2", "x"))
		s.Send("fw", status("t1", "c"))
		s.Send("other", status("t1", "y")) // another framework's t1
		for range 4 {
			gate <- struct{}{}
			synctest.Wait()
		}
		want := []string{"fw/t1/a", "fw/t1/c", "fw/t2/x", "other/t1/y"}
		if diff := cmp.Diff(want, sent(fake)); diff != "" {
			t.Errorf("delivered (-want +got):\n%s", diff)
		}
	})
}

// TestSendBatches: the updates queued while a call is in flight go in one
// call (#30), up to session.MaxUpdatesPerCall and MaxUpdateBytesPerCall,
// in the order they were queued; to a coordinator that takes no batches,
// one per call.
func TestSendBatches(t *testing.T) {
	long := strings.Repeat("x", 300<<10) // four do not fit in MaxUpdateBytesPerCall
	for _, tc := range []struct {
		name    string
		batches bool
		// queued are sent while the first update waits at the gate:
		// that many, with a message of message bytes.
		queued  int
		message string
		calls   []int
	}{
		{"many", true, 300, "", []int{1, session.MaxUpdatesPerCall, 300 - session.MaxUpdatesPerCall}},
		{"large", true, 5, long, []int{1, 3, 2}},
		{"an older coordinator", false, 3, "", []int{1, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := agenttest.NewFakeCoordinator()
				fake.SetStatusBatches(tc.batches)
				gate := make(chan struct{})
				fake.SetUpdateGate(gate)
				hs := run(t, &handler{}, nil, serveFake(fake))
				defer hs.stop(t)

				want := []string{"fw/t0/u0"}
				hs.session.Send("fw", status("t0", "u0")) // in flight, waiting at the gate
				synctest.Wait()
				for i := 1; i <= tc.queued; i++ {
					st := status(fmt.Sprint("t", i), fmt.Sprint("u", i))
					st.Message = tc.message
					hs.session.Send("fw", st)
					want = append(want, fmt.Sprintf("fw/t%d/u%d", i, i))
				}
				for range tc.calls {
					gate <- struct{}{}
					synctest.Wait()
				}
				if diff := cmp.Diff(tc.calls, fake.UpdateCalls()); diff != "" {
					t.Errorf("updates per call (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(want, sent(fake)); diff != "" {
					t.Errorf("delivered (-want +got):\n%s", diff)
				}
			})
		})
	}
}

func TestOutboxIsDroppedWhenTheSessionEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := agenttest.NewFakeCoordinator()
		fake.SetUpdateGate(make(chan struct{}))
		h := &handler{}
		hs := run(t, h, nil, serveFake(fake))
		defer hs.stop(t)

		hs.session.Send("fw", status("t1", "in-flight"))
		hs.session.Send("fw", status("t2", "queued"))
		synctest.Wait()
		fake.EndStream(t, "agent-1", nil)
		synctest.Wait()
		if _, _, ok := hs.session.Current(); ok {
			t.Fatal("Current() ok right after the session ended, want a backoff first")
		}
		hs.session.Send("fw", status("t3", "between-sessions"))
		fake.SetUpdateGate(nil)
		time.Sleep(time.Second)
		synctest.Wait()
		if _, _, ok := hs.session.Current(); !ok {
			t.Fatal("not registered again")
		}
		if got := sent(fake); len(got) != 0 {
			t.Errorf("delivered %v, want nothing: the outbox belongs to the session that ended", got)
		}
		hs.session.Send("fw", status("t4", "new-session"))
		synctest.Wait()
		if diff := cmp.Diff([]string{"fw/t4/new-session"}, sent(fake)); diff != "" {
			t.Errorf("delivered (-want +got):\n%s", diff)
		}
	})
}

func TestStopAndFatal(t *testing.T) {
	diskFull := errors.New("disk full")
	tests := []struct {
		name      string
		onOpened  func(context.Context, string, string) error
		onCommand func(*session.Session) func(context.Context, *slacklinev1.AgentCommand) error
		wantErr   error
		wantSent  []string
	}{
		{
			name: "ErrStop delivers the outbox and ends Run",
			onCommand: func(s *session.Session) func(context.Context, *slacklinev1.AgentCommand) error {
				return func(context.Context, *slacklinev1.AgentCommand) error {
					s.Send("fw", status("t1", "gone"))
					s.Send("fw", status("t2", "gone"))
					return session.ErrStop
				}
			},
			wantErr:  session.ErrStop,
			wantSent: []string{"fw/t1/gone", "fw/t2/gone"},
		},
		{
			name: "fatal command",
			onCommand: func(*session.Session) func(context.Context, *slacklinev1.AgentCommand) error {
				return func(context.Context, *slacklinev1.AgentCommand) error { return session.Fatal(diskFull) }
			},
			wantErr: diskFull,
		},
		{
			name:     "fatal Opened",
			onOpened: func(context.Context, string, string) error { return session.Fatal(diskFull) },
			wantErr:  diskFull,
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := agenttest.NewFakeCoordinator()
				h := &handler{onOpened: test.onOpened}
				network := agenttest.NewNetwork()
				defer network.Serve(fake.Handler())()
				client := network.Client()
				defer client.CloseIdleConnections()
				s := session.New(session.Config{Client: slacklinev1connect.NewAgentServiceClient(client, "http://coordinator.test"), Handler: h})
				if test.onCommand != nil {
					h.onCommand = test.onCommand(s)
				}
				done := make(chan error, 1)
				go func() { done <- s.Run(t.Context()) }()
				synctest.Wait()
				if test.onCommand != nil {
					fake.Send(t, "agent-1", &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_ShutdownAgent{ShutdownAgent: &slacklinev1.ShutdownAgentCommand{}}})
					synctest.Wait()
				}
				select {
				case err := <-done:
					if !errors.Is(err, test.wantErr) {
						t.Errorf("Run = %v, want %v", err, test.wantErr)
					}
				default:
					t.Fatal("Run still running")
				}
				// In any order: a stop sends the queue while the sender's
				// call is still in flight.
				if diff := cmp.Diff(test.wantSent, sent(fake), cmpopts.SortSlices(strings.Compare)); diff != "" {
					t.Errorf("delivered (-want +got):\n%s", diff)
				}
				if _, closed := h.snapshot(); len(closed) != 1 {
					t.Errorf("Closed called %d times, want once", len(closed))
				}
			})
		})
	}
}

func TestCancelReturnsNil(t *testing.T) {
	for _, registered := range []bool{false, true} {
		t.Run(fmt.Sprintf("registered=%v", registered), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := agenttest.NewFakeCoordinator()
				if !registered {
					fake.SetRefuse(connect.NewError(connect.CodeUnavailable, errors.New("starting")))
				}
				h := &handler{}
				hs := run(t, h, nil, serveFake(fake))
				hs.stop(t) // fails the test unless Run returns nil
				if _, closed := h.snapshot(); registered && (len(closed) != 1 || !errors.Is(closed[0], context.Canceled)) {
					t.Errorf("Closed causes %v, want [context canceled]", closed)
				}
			})
		})
	}
}

func TestSendEstimateWithoutSession(t *testing.T) {
	s := session.New(session.Config{Client: slacklinev1connect.NewAgentServiceClient(nil, "http://unused"), Handler: &handler{}})
	if err := s.SendEstimate(t.Context(), nil); !errors.Is(err, session.ErrNoSession) {
		t.Errorf("SendEstimate before Run = %v, want ErrNoSession", err)
	}
	s.Send("fw", status("t1", "u")) // dropped, must not panic or block
}

// TestRealCoordinator runs a Session against the real coordinator: it
// registers while the coordinator is down only with backoff, and after a
// coordinator restart it registers again with the same id.
func TestRealCoordinator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := &handler{}
		hs := run(t, h, nil, nil) // nothing serves the network yet
		defer hs.stop(t)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if opened, _ := h.snapshot(); len(opened) != 0 {
			t.Fatalf("opened %v while the coordinator is down", opened)
		}

		coord := agenttest.StartCoordinator(t, coordinator.Config{}, hs.network)
		defer coord.Stop()
		time.Sleep(10 * time.Second) // at most one Backoff.Max
		synctest.Wait()
		opened, _ := h.snapshot()
		if len(opened) != 1 {
			t.Fatalf("opened %v once the coordinator is up, want one session", opened)
		}
		firstID := strings.Split(opened[0], "/")[0]

		coord.Restart()
		time.Sleep(time.Second)
		synctest.Wait()
		opened, closed := h.snapshot()
		if len(opened) != 2 || len(closed) != 1 {
			t.Fatalf("after a coordinator restart: opened %v, closed %v; want a second session", opened, closed)
		}
		if id := strings.Split(opened[1], "/")[0]; id != firstID || opened[1] == opened[0] {
			t.Errorf("second session %s, want agent %s with a new session id", opened[1], firstID)
		}
		if agentID, _, ok := hs.session.Current(); !ok || agentID != firstID {
			t.Errorf("Current() = %q, %v; want %q, true", agentID, ok, firstID)
		}
	})
}

// TestHeartbeatIntervalFromCoordinator: the agent heartbeats at the
// interval the coordinator's last heartbeat answer asked for, and its
// first beat comes within the second half of the registered interval.
func TestHeartbeatIntervalFromCoordinator(t *testing.T) {
	for _, mode := range heartbeatModes {
		t.Run(mode.name, func(t *testing.T) { testHeartbeatIntervalFromCoordinator(t, mode) })
	}
}

func testHeartbeatIntervalFromCoordinator(t *testing.T, mode heartbeatMode) {
	synctest.Test(t, func(t *testing.T) {
		fake := agenttest.NewFakeCoordinator()
		mode.set(fake)
		fake.SetHeartbeatInterval(time.Second) // registration says 5 s
		h := &handler{}
		hs := run(t, h, nil, serveFake(fake))
		defer hs.stop(t)

		time.Sleep(2*time.Second + 400*time.Millisecond)
		synctest.Wait()
		if got := fake.Heartbeats("agent-1"); got != 0 {
			t.Fatalf("%d heartbeats in the first 2.4 s, want none before half the 5 s interval", got)
		}
		// First beat at 2.5-5 s, then one a second: 7 to 9 by 11 s
		// (2 at the registered 5 s).
		time.Sleep(8*time.Second + 600*time.Millisecond)
		synctest.Wait()
		if got := fake.Heartbeats("agent-1"); got < 7 || got > 9 {
			t.Errorf("%d heartbeats in 11 s, want 7-9 at the 1 s interval the coordinator asked for", got)
		}
		checkHeartbeatMode(t, fake, "agent-1", mode)
	})
}

// TestHeartbeatIntervalChangeOnUnansweredBeats: a changed interval
// reaches an agent at its next answered beat: on the stream of a
// coordinator that answers only the beats that ask, within three beats
// (the first beat after the change and the next one go at the old
// interval without an answer); by the next beat otherwise.
func TestHeartbeatIntervalChangeOnUnansweredBeats(t *testing.T) {
	// Beats in the 10.5 s after the first (at 1 s, told 3 s from then on).
	want := map[string]int{
		"stream":               5, // +1 +2 at 1 s; +3 answered: +6 +9
		"stream-answering-all": 4, // +1 answered: +4 +7 +10
		"calls":                4,
	}
	for _, mode := range heartbeatModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				fake := agenttest.NewFakeCoordinator()
				mode.set(fake)
				fake.SetHeartbeatInterval(time.Second)
				hs := run(t, &handler{}, nil, serveFake(fake))
				defer hs.stop(t)
				for fake.Heartbeats("agent-1") == 0 {
					time.Sleep(10 * time.Millisecond)
					synctest.Wait()
				}
				fake.SetHeartbeatInterval(3 * time.Second)
				time.Sleep(10*time.Second + 500*time.Millisecond)
				synctest.Wait()
				if got := fake.Heartbeats("agent-1") - 1; got != want[mode.name] {
					t.Errorf("%d beats in the 10.5 s after the interval went from 1 s to 3 s, want %d", got, want[mode.name])
				}
				checkHeartbeatMode(t, fake, "agent-1", mode)
			})
		})
	}
}

// TestWedgedCoordinatorIsNoticed: a coordinator that reads beats and
// stops answering (its handlers hang) is given up within silentIntervals
// intervals plus the beats it was not asked to answer, counted from the
// last beat it confirmed: a beat sent without asking for an answer is
// buffered by HTTP/2 and proves nothing, so it must not count as one that
// got through (it did, and the silence read 15 s where it was 25 s).
func TestWedgedCoordinatorIsNoticed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := agenttest.NewFakeCoordinator()
		heartbeatModes[0].set(fake) // a stream that honours no_answer
		h := &handler{}
		hs := run(t, h, nil, serveFake(fake))
		defer hs.stop(t)

		// The first beat (asking, answered) comes within an interval.
		for answered := 0; answered == 0; answered, _ = fake.AnsweredHeartbeats("agent-1") {
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
		}
		fake.SetHeartbeatsWedged(true)
		// Unconfirmed beats at +5 and +10 s, an asking one at +15 s that
		// times out at +20 s (20 s of silence: under the 25 s allowed),
		// another on a new stream that times out at +25 s and falls back
		// to a call that times out at +30 s. (Before, the asking beat's
		// Receive never returned: ending the stream's context does not
		// end an HTTP/2 request whose body is still open.)
		time.Sleep(35 * time.Second)
		fake.SetHeartbeatsWedged(false)
		synctest.Wait()
		_, closed := h.snapshot()
		if len(closed) != 1 || !regexp.MustCompile(`^no heartbeat got through for (2[5-9]|3[0-2])(\.\d+)?s: `).MatchString(closed[0].Error()) {
			t.Fatalf("Closed causes %v, want one: no heartbeat got through for 25-32 s (since the last confirmed beat)", closed)
		}
	})
}

// TestHeartbeatsGoOnTheGrid: every beat goes at a multiple of 50 ms of
// wall-clock time (the session's beat grid), so that agents' beats due
// close together reach the coordinator together, and the interval holds
// on average: at 1.03 s, which no beat can keep exactly on the grid, the
// beats do not drift to 1.05 s (or 1 s).
func TestHeartbeatsGoOnTheGrid(t *testing.T) {
	const grid = 50 * time.Millisecond
	const interval = 1030 * time.Millisecond
	for _, mode := range heartbeatModes {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				fake := agenttest.NewFakeCoordinator()
				mode.set(fake)
				fake.SetHeartbeatInterval(interval)
				hs := run(t, &handler{}, nil, serveFake(fake))
				defer hs.stop(t)
				time.Sleep(30 * time.Second)
				synctest.Wait()
				beats := fake.HeartbeatTimes("agent-1")
				if len(beats) < 20 {
					t.Fatalf("%d heartbeats in 30 s at 1.03 s, want at least 20", len(beats))
				}
				for i, b := range beats {
					if !b.Equal(b.Round(grid)) {
						t.Errorf("beat %d at %v, not on the 50 ms grid", i, b.Format("15:04:05.000000000"))
					}
				}
				// From the second beat on (the first comes at the
				// registered 5 s interval's pace), n intervals take n *
				// 1.03 s, to within the grid (each end moved by at most
				// half of it); beats rounded from the previous one would
				// take 1.05 s each.
				span, n := beats[len(beats)-1].Sub(beats[1]), time.Duration(len(beats)-2)
				if off := span - n*interval; off < -grid || off > grid {
					t.Errorf("%d intervals took %v, want %v to within %v", n, span, n*interval, grid)
				}
			})
		})
	}
}
