package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/proto"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/backoff"
)

// Defaults applied by New to zero fields of Config.
const (
	DefaultBackoffMin = 100 * time.Millisecond
	DefaultBackoffMax = 10 * time.Second
	DefaultRPCTimeout = 10 * time.Second
	// DefaultHeartbeatInterval is used when the coordinator's
	// RegisterResponse carries no heartbeat interval.
	DefaultHeartbeatInterval = 5 * time.Second
	// maxUnansweredStreams is how many heartbeat streams may fail before
	// answering any beat before a session heartbeats with calls only.
	maxUnansweredStreams = 3
	// answerEvery: on a stream whose coordinator answers only the beats
	// that ask for an answer, every answerEvery-th beat asks (the first of
	// every stream too). An answer costs the coordinator a frame and a
	// flush, most of its CPU per beat; the answered beats bring the
	// interval and show that the coordinator is responsive.
	answerEvery = 3
	// silentIntervals is how many heartbeat intervals may pass without a
	// heartbeat getting through before the session is given up, counted
	// from the last beat the coordinator confirmed (answered), plus the
	// beats it was then not asked to answer (answerEvery-1 on a stream whose
	// coordinator honours no_answer): a beat sent without asking for an
	// answer proves nothing (HTTP/2 and TCP buffer it for a coordinator
	// that is wedged or unreachable).
	silentIntervals = 3
	// beatGrid is the grid of wall-clock time heartbeats go on: a beat
	// goes at the multiple of beatGrid nearest to when it is due (onBeatGrid).
	beatGrid = 50 * time.Millisecond
	// MaxUpdatesPerCall and MaxUpdateBytesPerCall bound the status updates
	// one UpdateStatus carries (#30): the sender takes the oldest queued
	// updates up to either limit (always at least one), and the rest go
	// in the next call. The bytes stay well under the coordinator's
	// request limit (4 MiB by default).
	MaxUpdatesPerCall     = 256
	MaxUpdateBytesPerCall = 1 << 20
)

var (
	// ErrStop is returned by Handler.Command to end Run: the session
	// delivers what its outbox holds (best effort), ends, and Run returns
	// ErrStop.
	ErrStop = errors.New("session stopped by its handler")
	// ErrNoSession is returned by SendEstimate when there is no current
	// session.
	ErrNoSession = errors.New("no coordinator session")
	// ErrAlreadyRunning is returned by Run while another Run of the same
	// Session has not returned.
	ErrAlreadyRunning = errors.New("session already running")

	errStreamEnded = errors.New("command stream ended")
)

// Handler is the owner of a Session: the agent's task machine, real or
// simulated, behind its executor. The Session calls it from Run's
// goroutine, one call at a time.
type Handler interface {
	// Registration returns the request for the next Register: the agent's
	// info (its id once it has one), its tasks and their latest states, the
	// previous agent id after a host reboot. The Session sets the protocol
	// version.
	Registration() *slacklinev1.RegisterRequest
	// Opened is called after Register succeeded, before the command stream
	// opens; Send already delivers in this session. The owner persists the
	// id and (re-)sends its unacknowledged status updates. An error wrapped
	// with Fatal stops Run and is returned by it; any other error ends the
	// session, which is retried after a backoff.
	Opened(ctx context.Context, agentID, sessionID string) error
	// Command handles one command, in stream order; pings are not passed
	// on. It may block briefly (that holds back the stream: backpressure);
	// ctx ends with the session. Returning ErrStop ends Run, an error
	// wrapped with Fatal stops Run with that error, any other error ends the
	// session (the agent registers again).
	Command(ctx context.Context, cmd *slacklinev1.AgentCommand) error
	// Closed is called once for every session Opened was called for, after
	// it ended and its outbox was dropped, with the reason it ended.
	Closed(agentID, sessionID string, cause error)
}

// Config configures a Session. Client and Handler are required.
type Config struct {
	// Client carries the calls to the coordinator.
	Client slacklinev1connect.AgentServiceClient
	// Handler owns the session's id, tasks and commands.
	Handler Handler
	// Backoff is the delay between registration attempts
	// (DefaultBackoffMin..DefaultBackoffMax when Min and Max are zero); it
	// is reset once a session proved healthy (a heartbeat got through or a
	// command arrived). A registration refused with PermissionDenied or
	// FailedPrecondition (a machine that is DOWN) is retried about every
	// Backoff.Max.
	Backoff backoff.Backoff
	// RPCTimeout bounds every unary call (DefaultRPCTimeout); heartbeats
	// are also bounded by the heartbeat interval.
	RPCTimeout time.Duration
	// HeartbeatSlots, when set, caps the heartbeats in flight across every
	// Session sharing it (the simulator's thousands of agents): a due
	// heartbeat waits for a slot.
	HeartbeatSlots *semaphore.Weighted
	// Logger receives the session's logs (discarded when nil).
	Logger *slog.Logger
	// Profile, when set, returns the node profile report (#29) each
	// heartbeat carries; it is called on the heartbeat's goroutine and
	// must not block.
	Profile func() *slacklinev1.ProfileReport
	// LogLevel is the level of routine session changes: registered, session
	// ended, registration failed (slog.LevelInfo, the zero value; the
	// simulator uses Debug so that 10,000 agents do not flood the log). A
	// refused registration is logged at Warn once per streak of refusals.
	LogLevel slog.Level
}

// Session is the agent side of AgentService: it registers, reads the
// command stream, heartbeats and delivers status updates, and registers
// again when a session ends. Create it with New and drive it with Run; its
// other methods are safe for concurrent use.
type Session struct {
	cfg     Config
	log     *slog.Logger
	running atomic.Bool

	mu  sync.Mutex
	cur *conn // the current session; nil between sessions
}

// conn is one session: from a successful Register until it ends.
type conn struct {
	agentID, sessionID string
	interval           time.Duration
	// statusBatches: the coordinator accepts batches of status updates
	// (RegisterResponse.status_batches); an older one takes one per call.
	statusBatches bool
	ctx           context.Context // ends with the session
	cancel        context.CancelCauseFunc

	// Guarded by Session.mu.
	ended   bool // set once; no goroutine starts after it
	healthy bool // a heartbeat got through or a command arrived
	// lastBeat is when the coordinator last confirmed a beat (or the
	// session opened); unconfirmed is how many beats after it are not
	// asked to be answered (0, or answerEvery-1 on a no_answer stream).
	lastBeat    time.Time
	unconfirmed int
	beat        *time.Timer
	outbox      map[taskKey]*slacklinev1.TaskStatus
	queue       []taskKey     // the outbox's keys in first-enqueued order
	sender      chan struct{} // closed when the running sender returns; nil when none runs
	// busy counts the heartbeat and sender goroutines of this session.
	busy sync.WaitGroup
	// due is when the beat in progress (or the next) was due; it goes at
	// onBeatGrid(due), and the next is due an interval after due, so
	// that the rounding does not change the interval on average.
	due time.Time

	// The heartbeat stream, used by the heartbeat timer's goroutine only
	// (one beat at a time). It ends with the session (its context is the
	// session's).
	beats         *connect.BidiStreamForClient[slacklinev1.HeartbeatStreamRequest, slacklinev1.HeartbeatStreamResponse]
	endBeats      context.CancelFunc
	beatsAnswered bool // the stream answered a beat
	// answersOptional: the stream's coordinator answers only the beats
	// that ask (its answers said so); unanswered counts the beats sent
	// without asking since the last answer.
	answersOptional bool
	unanswered      int
	// unansweredStreams counts the streams that failed before answering
	// any beat in this session.
	unansweredStreams int
	unaryBeats        bool // heartbeat with calls (no stream works)
}

type taskKey struct{ frameworkID, taskID string }

// New returns a Session for cfg, filling in defaults. It makes no call:
// Run does.
func New(cfg Config) *Session {
	if cfg.Backoff.Min <= 0 {
		cfg.Backoff.Min = DefaultBackoffMin
	}
	if cfg.Backoff.Max <= 0 {
		cfg.Backoff.Max = DefaultBackoffMax
	}
	if cfg.RPCTimeout <= 0 {
		cfg.RPCTimeout = DefaultRPCTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Session{cfg: cfg, log: cfg.Logger}
}

// Run registers, serves the session and registers again whenever it ends,
// until ctx is cancelled (it returns nil then), the handler returns ErrStop
// (it returns ErrStop) or a Fatal error (it returns that error). Failures
// talking to the coordinator are retried, never returned. Run may be called
// again after it returned.
func (s *Session) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer s.running.Store(false)
	retry := s.cfg.Backoff
	refusals := 0
	for ctx.Err() == nil {
		c, err := s.register(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var delay time.Duration
			if isRefusal(err) {
				delay = retry.Slow()
				level := s.cfg.LogLevel
				if refusals == 0 {
					level = slog.LevelWarn
				}
				refusals++
				s.log.Log(ctx, level, "registration refused; retrying", "error", err, "retry_in", delay)
			} else {
				delay = retry.Next()
				s.log.Log(ctx, s.cfg.LogLevel, "registration failed; retrying", "error", err, "retry_in", delay)
			}
			if !backoff.Sleep(ctx, delay) {
				return nil
			}
			continue
		}
		refusals = 0
		cause, healthy := s.serve(c)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(cause, ErrStop):
			return ErrStop
		case isFatal(cause):
			return cause
		}
		if healthy {
			retry.Reset()
		}
		delay := retry.Next()
		s.log.Log(ctx, s.cfg.LogLevel, "coordinator session ended; registering again", "agent_id", c.agentID, "cause", cause, "retry_in", delay)
		if !backoff.Sleep(ctx, delay) {
			return nil
		}
	}
	return nil
}

// register calls Register and makes the new session current, with its
// heartbeat timer armed.
func (s *Session) register(ctx context.Context) (*conn, error) {
	req := s.cfg.Handler.Registration()
	req.ProtocolVersion = slacklinev1.AgentProtocolVersion_AGENT_PROTOCOL_VERSION_1
	callCtx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
	resp, err := s.cfg.Client.Register(callCtx, connect.NewRequest(req))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("register: %w", err)
	}
	agentID, sessionID := resp.Msg.GetAgentId(), resp.Msg.GetSessionId()
	if agentID == "" || sessionID == "" {
		return nil, errors.New("register: the coordinator returned no agent id or session id")
	}
	interval := time.Duration(resp.Msg.GetHeartbeatIntervalSeconds() * float64(time.Second))
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	sctx, scancel := context.WithCancelCause(ctx)
	c := &conn{agentID: agentID, sessionID: sessionID, interval: interval, statusBatches: resp.Msg.GetStatusBatches(),
		ctx: sctx, cancel: scancel, lastBeat: time.Now()}
	s.mu.Lock()
	s.cur = c
	// The first beat comes at a random point of the second half of the
	// interval, so that agents registering together (after a coordinator
	// restart) do not heartbeat together ever after.
	first := interval/2 + rand.N(interval/2+1)
	now := time.Now()
	c.due = now.Add(first)
	c.beat = time.AfterFunc(onBeatGrid(c.due).Sub(now), func() { s.heartbeat(c) })
	s.mu.Unlock()
	return c, nil
}

// serve runs one session until it ends and reports why and whether it
// proved healthy.
func (s *Session) serve(c *conn) (cause error, healthy bool) {
	if err := s.cfg.Handler.Opened(c.ctx, c.agentID, c.sessionID); err != nil {
		cause = fmt.Errorf("open session: %w", err)
	} else {
		s.mu.Lock()
		interval := c.interval
		s.mu.Unlock()
		s.log.Log(c.ctx, s.cfg.LogLevel, "registered", "agent_id", c.agentID, "session_id", c.sessionID, "heartbeat_interval", interval)
		cause = s.readCommands(c)
	}
	c.cancel(cause)
	s.mu.Lock()
	c.ended = true
	if s.cur == c {
		s.cur = nil
	}
	c.beat.Stop()
	c.outbox, c.queue = nil, nil
	healthy = c.healthy
	s.mu.Unlock()
	c.busy.Wait()
	s.cfg.Handler.Closed(c.agentID, c.sessionID, cause)
	return cause, healthy
}

// readCommands opens the command stream and hands commands to the handler
// until the stream or the session ends. It returns the session's cause of
// death: the handler's error first, then whatever ended the session
// context (a refused call, cancellation), then the stream's error.
func (s *Session) readCommands(c *conn) error {
	stream, err := s.cfg.Client.Connect(c.ctx, connect.NewRequest(&slacklinev1.ConnectRequest{AgentId: c.agentID, SessionId: c.sessionID}))
	if err != nil {
		if c.ctx.Err() != nil {
			return context.Cause(c.ctx)
		}
		return fmt.Errorf("connect: %w", err)
	}
	var cause error
	for cause == nil && stream.Receive() {
		cmd := stream.Msg().GetCommand()
		s.mu.Lock()
		c.healthy = true
		s.mu.Unlock()
		if _, ping := cmd.GetCommand().(*slacklinev1.AgentCommand_Ping); ping {
			continue
		}
		if err := s.cfg.Handler.Command(c.ctx, cmd); err != nil {
			if errors.Is(err, ErrStop) {
				s.flush(c)
			}
			cause = err
		}
	}
	switch {
	case cause != nil:
	case c.ctx.Err() != nil:
		cause = context.Cause(c.ctx)
	case stream.Err() != nil:
		cause = fmt.Errorf("command stream: %w", stream.Err())
	default:
		cause = errStreamEnded
	}
	c.cancel(cause) // so that Close does not wait to drain the stream
	stream.Close()
	return cause
}

// Current returns the ids of the current session; ok is false between
// sessions.
func (s *Session) Current() (agentID, sessionID string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cur; c != nil && !c.ended {
		return c.agentID, c.sessionID, true
	}
	return "", "", false
}

// heartbeat sends one heartbeat in c and arms the next. It runs on the
// timer's goroutine, so a session has no goroutine between heartbeats.
func (s *Session) heartbeat(c *conn) {
	s.mu.Lock()
	if c.ended {
		s.mu.Unlock()
		return
	}
	c.busy.Add(1)
	s.mu.Unlock()
	defer c.busy.Done()

	next, confirmed, err := s.callHeartbeat(c)
	now := time.Now()
	s.mu.Lock()
	if err == nil && confirmed {
		c.lastBeat, c.healthy = now, true
		c.unconfirmed = 0
		if c.answersOptional {
			c.unconfirmed = answerEvery - 1
		}
		if next > 0 && next != c.interval {
			s.log.Debug("heartbeat interval changed by the coordinator", "agent_id", c.agentID, "interval", next)
			c.interval = next
		}
	}
	interval := c.interval
	silent := now.Sub(c.lastBeat)
	allowed := time.Duration(silentIntervals+c.unconfirmed) * interval
	if !c.ended {
		// A beat that took longer than the interval is followed at once,
		// not by others to catch up.
		c.due = c.due.Add(interval)
		if c.due.Before(now) {
			c.due = now
		}
		c.beat.Reset(max(0, onBeatGrid(c.due).Sub(now)))
	}
	s.mu.Unlock()
	switch {
	case err == nil:
	case isSessionError(err):
		c.cancel(fmt.Errorf("heartbeat: %w", err))
	case silent >= allowed:
		c.cancel(fmt.Errorf("no heartbeat got through for %v: %w", silent.Round(time.Millisecond), err))
	case c.ctx.Err() == nil:
		s.log.Debug("heartbeat failed", "agent_id", c.agentID, "error", err)
	}
}

// onBeatGrid returns the multiple of beatGrid (since the zero time, so
// of the Unix epoch too) nearest to due: the moment a beat due then goes.
// Agents' beats are spread over their intervals, so at a coordinator's
// heartbeat budget (1,000 a second) beats arrived one by one, each waking
// the coordinator's idle threads (its network poller, a second thread to
// share the work, the runtime's monitor) and putting them back to sleep:
// about half its CPU per beat. On the grid, the beats due within the same
// beatGrid arrive together (agents' clocks are synchronised to within a
// few milliseconds), about 50 at the budget, and the coordinator serves
// them in one wake-up. A beat moves by at most half a beatGrid, so the
// interval holds on average and the first beat's random phase still
// spreads agents registering together over the interval's grid points.
func onBeatGrid(due time.Time) time.Time { return due.Round(beatGrid) }

// callHeartbeat sends one heartbeat and returns the interval the
// coordinator asks for from now on (0: unchanged) and whether the
// coordinator confirmed the beat (false for a beat sent without asking
// for an answer). It runs on the heartbeat
// timer's goroutine, the only writer of c.interval and of the heartbeat
// stream's fields.
func (s *Session) callHeartbeat(c *conn) (time.Duration, bool, error) {
	if slots := s.cfg.HeartbeatSlots; slots != nil {
		if err := slots.Acquire(c.ctx, 1); err != nil {
			return 0, false, err
		}
		defer slots.Release(1)
	}
	timeout := min(s.cfg.RPCTimeout, c.interval)
	if !c.unaryBeats {
		next, answered, confirmed, err := s.streamHeartbeat(c, timeout)
		if err == nil || answered || isSessionError(err) || c.ctx.Err() != nil {
			return next, confirmed, err
		}
		// A stream that never answered: this beat goes by call. An older
		// coordinator (Unimplemented), or streams that failed
		// maxUnansweredStreams times before any answer (a proxy or
		// transport without HTTP/2 streams; not one slow start under
		// load), make it calls for the rest of the session.
		c.unansweredStreams++
		if connect.CodeOf(err) == connect.CodeUnimplemented || c.unansweredStreams >= maxUnansweredStreams {
			s.log.Debug("no heartbeat stream; heartbeating with calls", "agent_id", c.agentID, "error", err)
			c.unaryBeats = true
		}
	}
	ctx, cancel := context.WithTimeout(c.ctx, timeout)
	defer cancel()
	resp, err := s.cfg.Client.Heartbeat(ctx, connect.NewRequest(&slacklinev1.HeartbeatRequest{AgentId: c.agentID, SessionId: c.sessionID, Profile: s.profile()}))
	if err != nil {
		return 0, false, err
	}
	return time.Duration(resp.Msg.GetHeartbeatIntervalSeconds() * float64(time.Second)), true, nil
}

// streamHeartbeat sends one heartbeat on the session's HeartbeatStream,
// opening it first if none is open, and waits for its answer for at most
// timeout; on a stream whose coordinator honours no_answer, only every
// answerEvery-th beat asks for an answer and waits (next is 0 for the
// others: the interval is unchanged as far as the agent knows). A failed beat ends the stream (the next beat opens another).
// answered reports whether the stream had answered a beat before, so
// that the caller tells a stream that never worked (fall back to calls)
// from one that broke; confirmed whether this beat was answered.
func (s *Session) streamHeartbeat(c *conn, timeout time.Duration) (next time.Duration, answered, confirmed bool, err error) {
	if c.beats == nil {
		ctx, cancel := context.WithCancel(c.ctx)
		c.beats, c.endBeats, c.beatsAnswered = s.cfg.Client.HeartbeatStream(ctx), cancel, false
		c.answersOptional, c.unanswered = false, 0
	}
	// A beat not answered (or sent) in time ends the stream, which
	// unblocks Send and Receive.
	// Ending the context alone does not end an HTTP/2 request whose body
	// is open (the transport is blocked reading the next message from
	// it): closing the request side does.
	stallStream := c.beats
	stall := time.AfterFunc(timeout, func() { c.endBeats(); _ = stallStream.CloseRequest() })
	defer stall.Stop()
	stream, answered := c.beats, c.beatsAnswered
	noAnswer := c.answersOptional && c.unanswered < answerEvery-1
	err = stream.Send(&slacklinev1.HeartbeatStreamRequest{AgentId: c.agentID, SessionId: c.sessionID, Profile: s.profile(), NoAnswer: noAnswer})
	if err == nil && noAnswer {
		// Sent on a stream that answered its last asking beat in time. A
		// refusal of this beat ends the stream: the next Send or the next
		// answered beat (at most answerEvery-1 beats on) reports it.
		c.unanswered++
		return 0, true, false, nil
	}
	var resp *slacklinev1.HeartbeatStreamResponse
	if err == nil || errors.Is(err, io.EOF) {
		// io.EOF: the coordinator ended the stream; Receive has its error.
		resp, err = stream.Receive()
	}
	if err != nil {
		c.endBeats()
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
		c.beats = nil
		if errors.Is(err, io.EOF) {
			err = errors.New("the coordinator ended the heartbeat stream")
		}
		return 0, answered, false, fmt.Errorf("heartbeat stream: %w", err)
	}
	c.beatsAnswered, c.answersOptional, c.unanswered = true, resp.GetAnswersOptional(), 0
	return time.Duration(resp.GetHeartbeatIntervalSeconds() * float64(time.Second)), true, true, nil
}

// Send enqueues a status update for delivery in the current session and
// returns at once. Updates are coalesced per task: a status replaces an
// older one of the same (framework, task) that is not sent yet, so the
// outbox holds at most one status per task. Delivery is at most once per
// Send: a failed call is not retried, and a session that ends drops its
// outbox, as does Send between sessions. Re-sending is the caller's job:
// its task machine re-sends every unacknowledged update when it is due and
// when the next session opens (Handler.Opened). status must not be
// modified after the call.
func (s *Session) Send(frameworkID string, status *slacklinev1.TaskStatus) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cur
	if c == nil || c.ended || c.ctx.Err() != nil {
		return
	}
	key := taskKey{frameworkID, status.GetTaskId()}
	if c.outbox == nil {
		c.outbox = map[taskKey]*slacklinev1.TaskStatus{}
	}
	if _, queued := c.outbox[key]; !queued {
		c.queue = append(c.queue, key)
	}
	c.outbox[key] = status
	if c.sender == nil {
		c.sender = make(chan struct{})
		c.busy.Add(1)
		go s.drain(c, c.sender)
	}
}

// drain is the session's sender: it runs while the outbox is not empty.
func (s *Session) drain(c *conn, done chan struct{}) {
	defer c.busy.Done()
	defer close(done)
	for s.sendNext(c, done) {
	}
}

// sendNext sends the oldest queued updates in one call (up to
// MaxUpdatesPerCall and MaxUpdateBytesPerCall, one when the coordinator
// takes no batches); it reports false when there was none (or the session
// ended), after clearing c.sender if it is the caller's.
func (s *Session) sendNext(c *conn, sender chan struct{}) bool {
	s.mu.Lock()
	if len(c.queue) == 0 || c.ended || c.ctx.Err() != nil {
		c.queue, c.outbox = nil, nil // an idle session holds no buffers
		if c.sender == sender {
			c.sender = nil
		}
		s.mu.Unlock()
		return false
	}
	limit := 1
	if c.statusBatches {
		limit = MaxUpdatesPerCall
	}
	var updates []*slacklinev1.StatusUpdate
	bytes := 0
	for len(c.queue) > 0 && len(updates) < limit {
		key := c.queue[0]
		status := c.outbox[key]
		size := proto.Size(status)
		if len(updates) > 0 && bytes+size > MaxUpdateBytesPerCall {
			break
		}
		bytes += size
		updates = append(updates, &slacklinev1.StatusUpdate{FrameworkId: key.frameworkID, Status: status})
		c.queue = c.queue[1:]
		delete(c.outbox, key)
	}
	s.mu.Unlock()

	req := &slacklinev1.UpdateStatusRequest{AgentId: c.agentID, SessionId: c.sessionID}
	if len(updates) == 1 {
		// One update goes in the single fields, which every coordinator
		// reads.
		req.FrameworkId, req.Status = updates[0].GetFrameworkId(), updates[0].GetStatus()
	} else {
		req.Updates = updates
	}
	ctx, cancel := context.WithTimeout(c.ctx, s.cfg.RPCTimeout)
	defer cancel()
	resp, err := s.cfg.Client.UpdateStatus(ctx, connect.NewRequest(req))
	if err != nil {
		s.failed(c, "update status", err)
		return true
	}
	// A refused entry is handled as the failed call of a single update
	// would be: the task machine sends it again.
	for _, r := range resp.Msg.GetResults() {
		if r.GetCode() != 0 {
			s.failed(c, "update status", connect.NewError(connect.Code(r.GetCode()), errors.New(r.GetMessage())))
		}
	}
	return true
}

// flush delivers the outbox before a stop: it sends what is queued itself
// and waits for the running sender, if any.
func (s *Session) flush(c *conn) {
	for s.sendNext(c, nil) {
	}
	s.mu.Lock()
	sender := c.sender
	s.mu.Unlock()
	if sender != nil {
		<-sender
	}
}

// SendEstimate reports the agent's revocable estimate in the current
// session (UpdateOversubscribedResources) and waits for the answer. It
// returns ErrNoSession between sessions; a refusal that invalidates the
// session ends it. The owner re-sends its estimate when a session opens.
func (s *Session) SendEstimate(ctx context.Context, revocable []*slacklinev1.Resource) error {
	s.mu.Lock()
	c := s.cur
	s.mu.Unlock()
	if c == nil {
		return ErrNoSession
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RPCTimeout)
	defer cancel()
	defer context.AfterFunc(c.ctx, cancel)()
	_, err := s.cfg.Client.UpdateOversubscribedResources(ctx, connect.NewRequest(&slacklinev1.UpdateOversubscribedResourcesRequest{
		AgentId: c.agentID, SessionId: c.sessionID, Resources: revocable,
	}))
	if err != nil {
		s.failed(c, "update oversubscribed resources", err)
		return fmt.Errorf("update oversubscribed resources: %w", err)
	}
	return nil
}

// failed ends c when err says the session is no longer valid, and logs
// other errors of a live session.
func (s *Session) failed(c *conn, call string, err error) {
	switch {
	case err == nil:
	case isSessionError(err):
		c.cancel(fmt.Errorf("%s: %w", call, err))
	case c.ctx.Err() == nil:
		s.log.Debug("call failed", "call", call, "agent_id", c.agentID, "error", err)
	}
}

// isSessionError reports whether err means the session is no longer valid
// and the agent must register again.
func isSessionError(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeFailedPrecondition, connect.CodeNotFound, connect.CodePermissionDenied:
		return true
	}
	return false
}

// isRefusal reports whether a Register error is a refusal that a quick
// retry will not cure (a machine that is DOWN, an agent that was removed).
func isRefusal(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodePermissionDenied, connect.CodeFailedPrecondition:
		return true
	}
	return false
}

// Fatal wraps err so that Run stops and returns it (from Handler.Opened or
// Handler.Command). Fatal(nil) is nil.
func Fatal(err error) error {
	if err == nil {
		return nil
	}
	return &fatalError{err}
}

// IsFatal reports whether err, or an error it wraps, came from Fatal.
func IsFatal(err error) bool { return isFatal(err) }

func isFatal(err error) bool {
	var f *fatalError
	return errors.As(err, &f)
}

type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// profile is the report a heartbeat carries (nil without Config.Profile).
func (s *Session) profile() *slacklinev1.ProfileReport {
	if s.cfg.Profile == nil {
		return nil
	}
	return s.cfg.Profile()
}
