package agenttest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// heartbeatInterval is what the scripted coordinator asks for: short, so
// that a lost session is noticed quickly.
const heartbeatInterval = 500 * time.Millisecond

// waitTimeout bounds every wait of the suite: generous, for a real agent
// starting processes on a loaded machine.
const waitTimeout = 20 * time.Second

// scripted is the suite's coordinator: an AgentService that records what
// the agent under test sends and lets a case push commands and lose
// sessions exactly when it wants. It checks sessions as the real
// coordinator does (FailedPrecondition for a stale one).
type scripted struct {
	slacklinev1connect.UnimplementedAgentServiceHandler
	t      *testing.T
	tcp    *TCP
	stop   func()
	URL    string
	agents int

	mu         sync.Mutex
	changed    chan struct{} // closed and replaced whenever something is recorded
	sessionSeq int
	sessions   map[string]*liveSession // agent id -> current session
	registers  []*slacklinev1.RegisterRequest
	updates    []received
	heartbeats map[string]int // session id -> heartbeats
}

type liveSession struct {
	agentID, id string
	commands    chan *slacklinev1.AgentCommand
	end         chan error // ends the stream with the error
	streaming   bool
}

// errStaleSession ends a stream as the real coordinator does when a newer
// registration replaced its session.
var errStaleSession = connect.NewError(connect.CodeFailedPrecondition, errors.New("session ended; register again"))

// received is an UpdateStatus call the coordinator accepted.
type received struct {
	sessionID string
	req       *slacklinev1.UpdateStatusRequest
}

func (r received) status() *slacklinev1.TaskStatus { return r.req.GetStatus() }

func startScripted(t *testing.T) *scripted {
	s := &scripted{t: t, tcp: NewTCP(t), changed: make(chan struct{}), sessions: map[string]*liveSession{}, heartbeats: map[string]int{}}
	s.URL = "http://" + s.tcp.Addr
	s.serve()
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *scripted) serve() {
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewAgentServiceHandler(s))
	s.stop = s.tcp.Serve(mux)
}

// notifyLocked wakes the waiters.
func (s *scripted) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *scripted) Register(_ context.Context, req *connect.Request[slacklinev1.RegisterRequest]) (*connect.Response[slacklinev1.RegisterResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.notifyLocked()
	s.registers = append(s.registers, req.Msg)
	id := req.Msg.GetAgentInfo().GetId()
	if id == "" {
		s.agents++
		id = fmt.Sprintf("agent-%d", s.agents)
	}
	if old := s.sessions[id]; old != nil {
		s.endLocked(old, errStaleSession)
	}
	s.sessionSeq++
	sess := &liveSession{agentID: id, id: fmt.Sprintf("session-%d", s.sessionSeq), commands: make(chan *slacklinev1.AgentCommand, 64), end: make(chan error, 1)}
	s.sessions[id] = sess
	return connect.NewResponse(&slacklinev1.RegisterResponse{AgentId: id, SessionId: sess.id, HeartbeatIntervalSeconds: heartbeatInterval.Seconds()}), nil
}

// sessionLocked returns the agent's session if sessionID is current.
func (s *scripted) sessionLocked(agentID, sessionID string) (*liveSession, error) {
	sess := s.sessions[agentID]
	if sess == nil || sess.id != sessionID {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("session %q of agent %q is not current; register again", sessionID, agentID))
	}
	return sess, nil
}

func (s *scripted) endLocked(sess *liveSession, err error) {
	select {
	case sess.end <- err:
	default:
	}
	if s.sessions[sess.agentID] == sess {
		delete(s.sessions, sess.agentID)
	}
}

func (s *scripted) Connect(ctx context.Context, req *connect.Request[slacklinev1.ConnectRequest], stream *connect.ServerStream[slacklinev1.ConnectResponse]) error {
	s.mu.Lock()
	sess, err := s.sessionLocked(req.Msg.GetAgentId(), req.Msg.GetSessionId())
	if err == nil {
		sess.streaming = true
		s.notifyLocked()
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	// A first message flushes the headers, as the real coordinator does.
	if err := stream.Send(&slacklinev1.ConnectResponse{Command: &slacklinev1.AgentCommand{Command: &slacklinev1.AgentCommand_Ping{Ping: &slacklinev1.PingCommand{}}}}); err != nil {
		return err
	}
	return sendCommands(ctx, stream, sess.commands, sess.end)
}

func (s *scripted) Heartbeat(_ context.Context, req *connect.Request[slacklinev1.HeartbeatRequest]) (*connect.Response[slacklinev1.HeartbeatResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.sessionLocked(req.Msg.GetAgentId(), req.Msg.GetSessionId()); err != nil {
		return nil, err
	}
	s.heartbeats[req.Msg.GetSessionId()]++
	s.notifyLocked()
	return connect.NewResponse(&slacklinev1.HeartbeatResponse{}), nil
}

func (s *scripted) UpdateStatus(_ context.Context, req *connect.Request[slacklinev1.UpdateStatusRequest]) (*connect.Response[slacklinev1.UpdateStatusResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.sessionLocked(req.Msg.GetAgentId(), req.Msg.GetSessionId()); err != nil {
		return nil, err
	}
	s.updates = append(s.updates, received{sessionID: req.Msg.GetSessionId(), req: req.Msg})
	s.notifyLocked()
	return connect.NewResponse(&slacklinev1.UpdateStatusResponse{}), nil
}

func (s *scripted) UpdateOversubscribedResources(_ context.Context, req *connect.Request[slacklinev1.UpdateOversubscribedResourcesRequest]) (*connect.Response[slacklinev1.UpdateOversubscribedResourcesResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.sessionLocked(req.Msg.GetAgentId(), req.Msg.GetSessionId()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&slacklinev1.UpdateOversubscribedResourcesResponse{}), nil
}

// waitFor waits until cond, evaluated with s.mu held after every change,
// holds, and fails the test after waitTimeout with what.
func (s *scripted) waitFor(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.NewTimer(waitTimeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		ok, changed := cond(), s.changed
		s.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-changed:
		case <-deadline.C:
			s.t.Fatalf("timed out after %v waiting for %s", waitTimeout, what)
		}
	}
}

// streaming waits until the agent's session (the only one, or the one
// after the n-th registration when n > 0) has its command stream open and
// returns it.
func (s *scripted) streaming(registrations int) *liveSession {
	s.t.Helper()
	var sess *liveSession
	s.waitFor(fmt.Sprintf("registration %d and its command stream", registrations), func() bool {
		if len(s.registers) < registrations {
			return false
		}
		for _, live := range s.sessions {
			if live.streaming {
				sess = live
				return true
			}
		}
		return false
	})
	return sess
}

// send pushes a command on sess's stream.
func (s *scripted) send(sess *liveSession, cmd *slacklinev1.AgentCommand) {
	sess.commands <- cmd
}

// update waits for an update of the task in state and returns it.
func (s *scripted) update(frameworkID, taskID string, state slacklinev1.TaskState) received {
	s.t.Helper()
	var got received
	s.waitFor(fmt.Sprintf("a %v update of %s/%s", state, frameworkID, taskID), func() bool {
		for _, r := range s.updates {
			if r.req.GetFrameworkId() == frameworkID && r.status().GetTaskId() == taskID && r.status().GetState() == state {
				got = r
				return true
			}
		}
		return false
	})
	return got
}

// updatesOf returns the updates received for the task so far.
func (s *scripted) updatesOf(frameworkID, taskID string) []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []received
	for _, r := range s.updates {
		if r.req.GetFrameworkId() == frameworkID && r.status().GetTaskId() == taskID {
			out = append(out, r)
		}
	}
	return out
}

func (s *scripted) registrations() []*slacklinev1.RegisterRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.registers)
}

// expire forgets the agent's session without ending its stream, as a
// coordinator that lost it would: the next heartbeat is refused.
func (s *scripted) expire(sess *liveSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[sess.agentID] == sess {
		delete(s.sessions, sess.agentID)
	}
}

// restart stops serving, which breaks every connection, forgets every
// session and serves again on the same address, as a restarted
// coordinator would; the agents' ids stay known.
func (s *scripted) restart() {
	s.stop()
	s.mu.Lock()
	for _, sess := range s.sessions {
		s.endLocked(sess, connect.NewError(connect.CodeUnavailable, errors.New("coordinator restarting")))
	}
	s.mu.Unlock()
	s.serve()
}
