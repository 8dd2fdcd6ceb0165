package agenttest

import (
	"time"

	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// FakeCoordinator is a minimal AgentService whose answers a test controls.
// Register admits every agent (new ones get ids agent-1, agent-2, ...; every
// call opens session-1, session-2, ...; the heartbeat interval is 5 s) unless
// refused (SetRefuse). Every other call is refused with FailedPrecondition
// "stale session" unless its session is the agent's latest (Expire makes it
// stale). Connect streams what Send queues until EndStream, queued commands
// first. Heartbeat counts (Heartbeats) or fails (SetHeartbeatError);
// HeartbeatStream does the same once SetHeartbeatStream enabled it.
// UpdateStatus and UpdateOversubscribedResources record (Updates,
// Estimates); UpdateStatus can be held at a gate (SetUpdateGate). Its
// methods are safe for concurrent use; Send and EndStream fail the test
// when the agent has no command stream.
//
// A fake rather than the real coordinator, because agent/session's and sim's
// tests drive protocol corner cases that a real coordinator cannot be made
// to produce on cue: a refused heartbeat, a command stream that ends cleanly
// while the session lives, a status update held in flight, registrations
// refused and then admitted. The real coordinator is covered elsewhere: the
// protocol suite (Run) checks every agent implementation against what it
// relies on, and tests against StartCoordinator run the real one.
type FakeCoordinator struct {
	slacklinev1connect.UnimplementedAgentServiceHandler

	mu           sync.Mutex
	nextID       int
	nextSession  int
	sessions     map[string]string      // agent id -> live session id
	streams      map[string]*fakeStream // agent id -> its latest command stream
	refuse       error                  // Register's answer while set
	heartbeatErr error                  // Heartbeat's answer while set
	interval     time.Duration          // the interval Heartbeat asks for (0: none)
	updateGate   chan struct{}          // while set, UpdateStatus waits for a receive
	registers    []*slacklinev1.RegisterRequest
	heartbeats   map[string]int // agent id -> heartbeats received
	streamBeats  bool           // HeartbeatStream answers (else Unimplemented)
	// agent id -> heartbeats received on a HeartbeatStream
	streamHeartbeats map[string]int
	// agent id -> when its heartbeats were received (the first
	// maxBeatTimes of them)
	beatTimes map[string][]time.Time
	// oldStreams: HeartbeatStream answers every beat, as a coordinator
	// before no_answer did (else it honours no_answer).
	oldStreams bool
	// wedged: heartbeats are read and never answered (a coordinator whose
	// handlers hang), while set.
	wedged bool
	// agent id -> stream heartbeats answered; stream heartbeats that asked
	// for no answer of a coordinator that did not say it honours it
	answeredBeats  map[string]int
	unwantedAsking int
	updates        []*slacklinev1.UpdateStatusRequest
	estimates      []*slacklinev1.UpdateOversubscribedResourcesRequest
	// statusBatches: Register says UpdateStatus takes batches (#30), as
	// the coordinator does (else it answers as an older one would).
	statusBatches bool
}

// fakeStream is one open Connect call.
type fakeStream struct {
	commands chan *slacklinev1.AgentCommand
	end      chan error // ends the stream with the error
}

// NewFakeCoordinator returns a FakeCoordinator that admits every agent.
func NewFakeCoordinator() *FakeCoordinator {
	return &FakeCoordinator{sessions: map[string]string{}, streams: map[string]*fakeStream{}, heartbeats: map[string]int{}, beatTimes: map[string][]time.Time{}, streamHeartbeats: map[string]int{}, answeredBeats: map[string]int{}}
}

// Handler serves f's AgentService.
func (f *FakeCoordinator) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewAgentServiceHandler(f))
	return mux
}

// Register implements AgentService.
func (f *FakeCoordinator) Register(_ context.Context, req *connect.Request[slacklinev1.RegisterRequest]) (*connect.Response[slacklinev1.RegisterResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.registers = append(f.registers, req.Msg)
	if f.refuse != nil {
		return nil, f.refuse
	}
	id := req.Msg.GetAgentInfo().GetId()
	if id == "" {
		f.nextID++
		id = fmt.Sprintf("agent-%d", f.nextID)
	}
	f.nextSession++
	f.sessions[id] = fmt.Sprintf("session-%d", f.nextSession)
	return connect.NewResponse(&slacklinev1.RegisterResponse{AgentId: id, SessionId: f.sessions[id], HeartbeatIntervalSeconds: 5,
		StatusBatches: f.statusBatches}), nil
}

func (f *FakeCoordinator) checkSessionLocked(agentID, sessionID string) error {
	if f.sessions[agentID] != sessionID {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("stale session"))
	}
	return nil
}

// Connect implements AgentService.
func (f *FakeCoordinator) Connect(ctx context.Context, req *connect.Request[slacklinev1.ConnectRequest], stream *connect.ServerStream[slacklinev1.ConnectResponse]) error {
	f.mu.Lock()
	if err := f.checkSessionLocked(req.Msg.GetAgentId(), req.Msg.GetSessionId()); err != nil {
		f.mu.Unlock()
		return err
	}
	s := &fakeStream{commands: make(chan *slacklinev1.AgentCommand, 64), end: make(chan error, 1)}
	f.streams[req.Msg.GetAgentId()] = s
	f.mu.Unlock()
	return sendCommands(ctx, stream, s.commands, s.end)
}

// sendCommands sends commands on stream until ctx ends (nil) or end yields
// an error, which it returns after the commands already queued: a test knows
// what the agent got before its stream ended.
func sendCommands(ctx context.Context, stream *connect.ServerStream[slacklinev1.ConnectResponse], commands <-chan *slacklinev1.AgentCommand, end <-chan error) error {
	send := func(cmd *slacklinev1.AgentCommand) error {
		return stream.Send(&slacklinev1.ConnectResponse{Command: cmd})
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-end:
			for {
				select {
				case cmd := <-commands:
					if err := send(cmd); err != nil {
						return err
					}
				default:
					return err
				}
			}
		case cmd := <-commands:
			if err := send(cmd); err != nil {
				return err
			}
		}
	}
}

// Heartbeat implements AgentService.
func (f *FakeCoordinator) Heartbeat(ctx context.Context, req *connect.Request[slacklinev1.HeartbeatRequest]) (*connect.Response[slacklinev1.HeartbeatResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.wedged {
		f.mu.Unlock()
		<-ctx.Done()
		f.mu.Lock()
		return nil, ctx.Err()
	}
	if f.heartbeatErr != nil {
		return nil, f.heartbeatErr
	}
	if err := f.checkSessionLocked(req.Msg.GetAgentId(), req.Msg.GetSessionId()); err != nil {
		return nil, err
	}
	f.countBeatLocked(req.Msg.GetAgentId())
	return connect.NewResponse(&slacklinev1.HeartbeatResponse{HeartbeatIntervalSeconds: f.interval.Seconds()}), nil
}

// maxBeatTimes bounds the times HeartbeatTimes keeps per agent.
const maxBeatTimes = 1000

// countBeatLocked counts a heartbeat of the agent received now. Caller
// holds f.mu.
func (f *FakeCoordinator) countBeatLocked(agentID string) {
	f.heartbeats[agentID]++
	if times := f.beatTimes[agentID]; len(times) < maxBeatTimes {
		f.beatTimes[agentID] = append(times, time.Now())
	}
}

// HeartbeatTimes returns when the heartbeats of the agent counted in
// Heartbeats were received (the first 1,000), oldest first.
func (f *FakeCoordinator) HeartbeatTimes(agentID string) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.beatTimes[agentID])
}

// HeartbeatStream implements AgentService: Unimplemented (an older
// coordinator) unless SetHeartbeatStream enabled it; then each beat is
// answered as Heartbeat answers it, unless it asks for no answer (as the
// coordinator does; SetOldHeartbeatStream answers every beat, as an
// older one did), and counted in Heartbeats and StreamHeartbeats (and
// AnsweredHeartbeats), and a refused beat ends the stream with the error.
func (f *FakeCoordinator) HeartbeatStream(_ context.Context, stream *connect.BidiStream[slacklinev1.HeartbeatStreamRequest, slacklinev1.HeartbeatStreamResponse]) error {
	f.mu.Lock()
	enabled := f.streamBeats
	f.mu.Unlock()
	if !enabled {
		return connect.NewError(connect.CodeUnimplemented, errors.New("HeartbeatStream is not implemented"))
	}
	for {
		req, err := stream.Receive()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		f.mu.Lock()
		err = f.heartbeatErr
		if err == nil {
			err = f.checkSessionLocked(req.GetAgentId(), req.GetSessionId())
		}
		if err == nil {
			f.countBeatLocked(req.GetAgentId())
			f.streamHeartbeats[req.GetAgentId()]++
		}
		interval, old := f.interval, f.oldStreams
		answer := (old || !req.GetNoAnswer()) && !f.wedged
		if err == nil && answer {
			f.answeredBeats[req.GetAgentId()]++
		}
		if old && req.GetNoAnswer() {
			f.unwantedAsking++
		}
		f.mu.Unlock()
		if err != nil {
			return err
		}
		if !answer {
			continue
		}
		if err := stream.Send(&slacklinev1.HeartbeatStreamResponse{HeartbeatIntervalSeconds: interval.Seconds(), AnswersOptional: !old}); err != nil {
			return err
		}
	}
}

// SetHeartbeatStream enables (or disables) HeartbeatStream for the
// streams opened from then on.
func (f *FakeCoordinator) SetHeartbeatStream(enabled bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.streamBeats = enabled
}

// SetOldHeartbeatStream makes HeartbeatStream answer every beat and not
// say it honours no_answer, as a coordinator before the field did (or
// the coordinator's way, when old is false).
func (f *FakeCoordinator) SetOldHeartbeatStream(old bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.oldStreams = old
}

// AnsweredHeartbeats returns how many heartbeats of the agent
// HeartbeatStream accepted and answered, and how many beats of any agent
// asked for no answer of a stream that had not said it honours it
// (SetOldHeartbeatStream).
func (f *FakeCoordinator) AnsweredHeartbeats(agentID string) (answered, unwanted int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.answeredBeats[agentID], f.unwantedAsking
}

// StreamHeartbeats returns how many heartbeats of the agent
// HeartbeatStream accepted (they are counted in Heartbeats too).
func (f *FakeCoordinator) StreamHeartbeats(agentID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.streamHeartbeats[agentID]
}

// UpdateStatus implements AgentService.
func (f *FakeCoordinator) UpdateStatus(ctx context.Context, req *connect.Request[slacklinev1.UpdateStatusRequest]) (*connect.Response[slacklinev1.UpdateStatusResponse], error) {
	f.mu.Lock()
	gate := f.updateGate
	f.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err := record(f, req.Msg, &f.updates); err != nil {
		return nil, err
	}
	resp := &slacklinev1.UpdateStatusResponse{}
	for range req.Msg.GetUpdates() {
		resp.Results = append(resp.Results, &slacklinev1.BatchResult{})
	}
	return connect.NewResponse(resp), nil
}

// UpdateOversubscribedResources implements AgentService.
func (f *FakeCoordinator) UpdateOversubscribedResources(_ context.Context, req *connect.Request[slacklinev1.UpdateOversubscribedResourcesRequest]) (*connect.Response[slacklinev1.UpdateOversubscribedResourcesResponse], error) {
	if err := record(f, req.Msg, &f.estimates); err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.UpdateOversubscribedResourcesResponse{}), nil
}

// record appends msg to *list, which f.mu guards, if msg's session is live.
func record[M interface {
	GetAgentId() string
	GetSessionId() string
}](f *FakeCoordinator, msg M, list *[]M) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.checkSessionLocked(msg.GetAgentId(), msg.GetSessionId()); err != nil {
		return err
	}
	*list = append(*list, msg)
	return nil
}

// stream returns the agent's latest command stream, failing t without one.
func (f *FakeCoordinator) stream(t testing.TB, agentID string) *fakeStream {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.streams[agentID]
	if s == nil {
		t.Fatalf("agent %s has no command stream", agentID)
	}
	return s
}

// Send queues cmd on the agent's latest command stream. Call it from the
// test's goroutine.
func (f *FakeCoordinator) Send(t testing.TB, agentID string, cmd *slacklinev1.AgentCommand) {
	t.Helper()
	f.stream(t, agentID).commands <- cmd
}

// EndStream ends the agent's latest command stream with err (nil: a clean
// end). The session stays live. Call it from the test's goroutine.
func (f *FakeCoordinator) EndStream(t testing.TB, agentID string, err error) {
	t.Helper()
	f.stream(t, agentID).end <- err
}

// Expire makes the agent's session stale, as a coordinator that lost it
// would, without ending its stream: the agent's next call is refused.
func (f *FakeCoordinator) Expire(agentID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sessions[agentID] = "expired"
}

// SetRefuse makes Register fail with err while err is not nil.
func (f *FakeCoordinator) SetRefuse(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = err
}

// SetHeartbeatError makes Heartbeat fail with err while err is not nil.
func (f *FakeCoordinator) SetHeartbeatError(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.heartbeatErr = err
}

// SetHeartbeatsWedged makes Heartbeat and HeartbeatStream read beats and
// never answer them (a coordinator whose handlers hang behind a lock),
// while wedged.
func (f *FakeCoordinator) SetHeartbeatsWedged(wedged bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wedged = wedged
}

// SetHeartbeatInterval makes Heartbeat's answers ask for interval from
// then on (0: keep the current one).
func (f *FakeCoordinator) SetHeartbeatInterval(interval time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.interval = interval
}

// SetStatusBatches makes Register say, from the next registration on,
// that UpdateStatus takes batches (#30).
func (f *FakeCoordinator) SetStatusBatches(enabled bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statusBatches = enabled
}

// SetUpdateGate makes every UpdateStatus call wait for a receive from gate
// before it is handled, while gate is not nil.
func (f *FakeCoordinator) SetUpdateGate(gate chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updateGate = gate
}

// Registrations returns every Register request received, refused ones
// included.
func (f *FakeCoordinator) Registrations() []*slacklinev1.RegisterRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.registers)
}

// Heartbeats returns how many heartbeats of the agent were accepted.
func (f *FakeCoordinator) Heartbeats(agentID string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.heartbeats[agentID]
}

// Updates returns every status update accepted, in order, re-sends
// included, each as a request of one update (a batch's entries one by
// one).
func (f *FakeCoordinator) Updates() []*slacklinev1.UpdateStatusRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*slacklinev1.UpdateStatusRequest
	for _, req := range f.updates {
		if len(req.GetUpdates()) == 0 {
			out = append(out, req)
		}
		for _, u := range req.GetUpdates() {
			out = append(out, &slacklinev1.UpdateStatusRequest{AgentId: req.GetAgentId(), SessionId: req.GetSessionId(),
				FrameworkId: u.GetFrameworkId(), Status: u.GetStatus()})
		}
	}
	return out
}

// UpdateCalls returns how many updates each UpdateStatus call accepted
// carried, in order.
func (f *FakeCoordinator) UpdateCalls() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]int, len(f.updates))
	for i, req := range f.updates {
		out[i] = max(1, len(req.GetUpdates()))
	}
	return out
}

// Estimates returns every UpdateOversubscribedResources request accepted.
func (f *FakeCoordinator) Estimates() []*slacklinev1.UpdateOversubscribedResourcesRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.estimates)
}

// Protocols are the wire protocols an agent may speak to the coordinator,
// as client options: tests of the agent side run their cases over each.
var Protocols = []struct {
	Name string
	Opts []connect.ClientOption
}{
	{"connect", nil},
	{"grpc", []connect.ClientOption{connect.WithGRPC()}},
}
