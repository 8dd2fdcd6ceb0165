package frameworkapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/backoff"
	"github.com/slackline/slackline/internal/leaderclient"
	"github.com/slackline/slackline/internal/protocol"
)

// StreamIDHeader is the HTTP header that carries the subscription's stream id
// on every call after Subscribe.
const StreamIDHeader = protocol.StreamIDHeader

// DefaultCoordinator is the coordinator URL used when Config.Coordinator is empty.
const DefaultCoordinator = "http://127.0.0.1:5050"

// Defaults for the reconnection backoff.
const (
	DefaultMinBackoff = 500 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
)

// MissedHeartbeats is how many heartbeat intervals may pass without any event
// before Run considers the connection dead and reconnects.
const MissedHeartbeats = 3

// ackTimeout bounds an automatic acknowledgement.
const ackTimeout = 10 * time.Second

// MaxAcknowledgementsPerCall bounds the acknowledgements one Acknowledge
// call carries (#30): AcknowledgeBatch and the automatic acknowledgements
// send more in further calls. It is also how many automatic
// acknowledgements may wait for a call before the subscription stops
// reading events until they are sent (backpressure, not a drop).
const MaxAcknowledgementsPerCall = 256

// subscribeTimeout bounds the wait for the first (Subscribed) event, before
// the heartbeat interval is known.
const subscribeTimeout = 30 * time.Second

// Sentinel errors. Callers branch on them with errors.Is.
var (
	// ErrTornDown is wrapped by the error Run returns when the coordinator has
	// ended this process's subscription for good, so that reconnecting is
	// pointless: the framework was removed (teardown, failover timeout,
	// operator), or another process failed over to the same framework id.
	// See Run for the exact rule.
	ErrTornDown = errors.New("framework torn down")
	// ErrNotSubscribed is wrapped by the error of a call made while there is
	// no live subscription (before the first Subscribed event, between a
	// disconnection and the next Subscribed, or after Run returned).
	ErrNotSubscribed = errors.New("not subscribed")
	// ErrMissedHeartbeats is the error given to Handler.Disconnected when Run
	// dropped a connection because no event arrived for MissedHeartbeats
	// heartbeat intervals.
	ErrMissedHeartbeats = errors.New("missed heartbeats")
	// ErrAlreadyRunning is returned by Run when another Run of the same
	// Client is in progress.
	ErrAlreadyRunning = errors.New("run already in progress")
)

// Config configures a Client. Only Framework is required.
type Config struct {
	// Coordinator is the coordinator's base URL; DefaultCoordinator when
	// empty. A comma-separated list names the members of a coordinator
	// group: calls go to its leader, and follow it when it changes.
	Coordinator string
	// Framework describes the framework. Leave Framework.Id empty for a new
	// framework; set it to the id of an earlier run to fail over to it (its
	// tasks are kept if it resubscribes within its failover timeout). New
	// copies it: later changes have no effect.
	Framework *slacklinev1.FrameworkInfo
	// CAFile is the CA that signs the coordinator's certificate (ca.crt),
	// for an https:// coordinator; empty trusts the system's roots.
	CAFile string
	// TokenFile holds the framework's bearer token (NAME.token): a secured
	// coordinator binds the framework to that token's principal, and only
	// that principal may fail over to it. It is sent only over https.
	TokenFile string
	// HTTPClient carries the calls. The default speaks HTTP/1.1 and cleartext
	// HTTP/2 (and HTTP/2 over TLS with CAFile or TokenFile). With
	// ClientOptions selecting gRPC, pass a client that speaks HTTP/2 (for
	// example one with only UnencryptedHTTP2 set). It cannot be combined
	// with CAFile and TokenFile: configure its transport instead.
	HTTPClient *http.Client
	// ClientOptions are extra connect client options (connect.WithGRPC(),
	// interceptors, ...).
	ClientOptions []connect.ClientOption
	// Logger receives the SDK's logs; slog.Default() when nil.
	Logger *slog.Logger
	// ManualAcknowledge turns off automatic acknowledgements. By default the
	// SDK acknowledges every status update that carries a uuid after
	// Handler.Update returns; with ManualAcknowledge the handler must call
	// Client.Acknowledge itself, or the update is re-sent.
	ManualAcknowledge bool
	// MinBackoff and MaxBackoff bound the jittered exponential delay between
	// reconnection attempts (DefaultMinBackoff, DefaultMaxBackoff when zero).
	MinBackoff, MaxBackoff time.Duration
}

// Client is a framework's connection to the coordinator. Create it with New,
// drive it with Run; its call methods are safe for concurrent use, from the
// handler or from any other goroutine.
type Client struct {
	// tornDown is set once Teardown succeeded.
	tornDown   atomic.Bool
	rpc        slacklinev1connect.SchedulerServiceClient
	log        *slog.Logger
	manualAck  bool
	minBackoff time.Duration
	maxBackoff time.Duration
	running    atomic.Bool

	mu       sync.Mutex
	info     *slacklinev1.FrameworkInfo // Id is updated on every subscription
	streamID string                     // empty when not subscribed
	// ackBatches: the subscription's coordinator takes batches of
	// acknowledgements (SubscribedEvent.acknowledge_batches).
	ackBatches bool
}

// New returns a Client for cfg. It does not connect: Run does.
func New(cfg Config) (*Client, error) {
	if cfg.Framework == nil {
		return nil, errors.New("frameworkapi: config has no framework info")
	}
	coordinator := strings.TrimSuffix(cfg.Coordinator, "/")
	if coordinator == "" {
		coordinator = DefaultCoordinator
	}
	if !strings.HasPrefix(coordinator, "http://") && !strings.HasPrefix(coordinator, "https://") {
		return nil, fmt.Errorf("frameworkapi: coordinator %q is not an http:// or https:// URL", cfg.Coordinator)
	}
	httpClient := cfg.HTTPClient
	creds := auth.ClientCredentials{CAFile: cfg.CAFile, TokenFile: cfg.TokenFile}
	switch {
	case httpClient != nil && !creds.IsZero():
		return nil, errors.New("frameworkapi: config sets both HTTPClient and CAFile/TokenFile")
	case !creds.IsZero():
		if cfg.TokenFile != "" && !strings.HasPrefix(coordinator, "https://") {
			return nil, fmt.Errorf("frameworkapi: a token is sent only over TLS: coordinator %q is not an https:// URL", coordinator)
		}
		var err error
		if httpClient, err = creds.HTTPClient(); err != nil {
			return nil, fmt.Errorf("frameworkapi: %w", err)
		}
	case httpClient == nil:
		httpClient = DefaultHTTPClient()
	}
	// A comma-separated list is a coordinator group: follow its leader.
	following, base, err := leaderclient.New(coordinator, httpClient, leaderclient.Options{})
	if err != nil {
		return nil, fmt.Errorf("frameworkapi: %w", err)
	}
	httpClient, coordinator = following, base
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	minBackoff, maxBackoff := cfg.MinBackoff, cfg.MaxBackoff
	if minBackoff <= 0 {
		minBackoff = DefaultMinBackoff
	}
	if maxBackoff <= 0 {
		maxBackoff = DefaultMaxBackoff
	}
	maxBackoff = max(maxBackoff, minBackoff)
	return &Client{
		rpc:        slacklinev1connect.NewSchedulerServiceClient(httpClient, coordinator, cfg.ClientOptions...),
		log:        logger.With("component", "frameworkapi"),
		manualAck:  cfg.ManualAcknowledge,
		minBackoff: minBackoff,
		maxBackoff: maxBackoff,
		info:       proto.CloneOf(cfg.Framework),
	}, nil
}

// DefaultHTTPClient returns the HTTP client New uses when Config.HTTPClient is
// nil: HTTP/1.1 and cleartext HTTP/2, no overall timeout (the subscription
// is a long-lived stream).
func DefaultHTTPClient() *http.Client {
	t := &http.Transport{Proxy: http.ProxyFromEnvironment}
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP1(true)
	t.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: t}
}

// FrameworkID returns the framework id: the one the coordinator assigned at
// the latest subscription, or Config.Framework.Id before the first one.
func (c *Client) FrameworkID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info.GetId()
}

// StreamID returns the stream id of the live subscription, or "" when there
// is none.
func (c *Client) StreamID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streamID
}

// Run subscribes, delivers events to h until ctx is cancelled or the
// framework is torn down, and reconnects whenever the subscription is lost.
//
// Reconnection: when the stream ends or fails, or when no event (heartbeats
// included) arrives for MissedHeartbeats heartbeat intervals while Run waits
// for one, Run calls h.Disconnected and subscribes again after a jittered
// exponential backoff between Config.MinBackoff and Config.MaxBackoff (reset
// by every successful subscription). It resubscribes with the framework id
// it was given, so the coordinator keeps the framework's tasks if the
// failover timeout has not expired, and then calls Reconcile with no tasks
// (implicit reconciliation) so that the handler learns the latest state of
// every task through Update. The same happens on the first subscription when
// Config.Framework.Id was set.
//
// Return values:
//   - nil when ctx is cancelled (this takes precedence over everything else);
//   - an error wrapping ErrTornDown when the coordinator ends the
//     subscription for good, which is exactly: the stream delivered an Error
//     event and then ended, cleanly or not (the framework was removed, or
//     another process subscribed with the same framework id and took over),
//     or a Subscribe carrying a framework id was refused with
//     connect.CodeNotFound or connect.CodeFailedPrecondition (the framework
//     id is unknown or was torn down: it is dead). In the second case the
//     error also wraps the *connect.Error, so connect.CodeOf tells the two
//     apart;
//   - the Subscribe error (a *connect.Error) when the coordinator refuses the
//     subscription for a reason retrying cannot fix: InvalidArgument,
//     PermissionDenied or Unauthenticated, or NotFound/FailedPrecondition for
//     a subscription without a framework id;
//   - ErrAlreadyRunning when Run is already running on c.
//
// Every other failure (network errors, Unavailable, Internal, ...) is
// retried forever.
func (c *Client) Run(ctx context.Context, h Handler) error {
	if h == nil {
		return errors.New("frameworkapi: nil handler")
	}
	if !c.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer c.running.Store(false)

	retry := backoff.Backoff{Min: c.minBackoff, Max: c.maxBackoff}
	for {
		subscribed, err := c.session(ctx, h)
		c.mu.Lock()
		c.streamID = ""
		c.mu.Unlock()
		if ctx.Err() != nil {
			return nil
		}
		var permanent *permanentError
		switch {
		case errors.Is(err, ErrTornDown):
			c.log.Warn("subscription ended for good", "framework_id", c.FrameworkID(), "err", err)
			return err
		case errors.As(err, &permanent):
			return permanent.err
		}
		if subscribed {
			retry.Reset()
			c.log.Warn("subscription lost", "framework_id", c.FrameworkID(), "err", err)
			h.Disconnected(ctx, c, err)
		}
		delay := retry.Next()
		c.log.Info("reconnecting", "in", delay, "attempt", retry.Failures(), "err", err)
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-timer.C:
		}
	}
}

// permanentError marks a Subscribe error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// received is one result of reading the subscription stream.
type received struct {
	event *slacklinev1.Event
	end   bool
	err   error // why the stream ended; nil for a clean end
}

// session runs one subscription until it ends. subscribed reports whether
// the Subscribed event was received.
func (c *Client) session(ctx context.Context, h Handler) (subscribed bool, err error) {
	info := c.frameworkInfo()
	resubscribe := info.GetId() != ""

	streamCtx, cancel := context.WithCancel(ctx)
	stream, err := c.rpc.Subscribe(streamCtx, connect.NewRequest(&slacklinev1.SubscribeRequest{FrameworkInfo: info}))
	if err != nil {
		cancel()
		return false, classifySubscribeError(err, resubscribe)
	}
	results := make(chan received)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for stream.Receive() {
			select {
			case results <- received{event: stream.Msg().GetEvent()}:
			case <-streamCtx.Done():
				return
			}
		}
		select {
		case results <- received{end: true, err: stream.Err()}:
		case <-streamCtx.Done():
		}
	}()
	defer func() {
		cancel()
		<-readerDone
		_ = stream.Close()
	}()
	// The handler has dealt with an update even if it cancelled Run's
	// context (say, because this was the last task): its acknowledgement
	// still goes out, before the subscription's stream id is forgotten.
	acks := c.startAcker(context.WithoutCancel(ctx))
	defer acks.stop()

	timeout := subscribeTimeout
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	timeoutC := timer.C
	var errorMessage *string
	for {
		select {
		case <-ctx.Done():
			return subscribed, ctx.Err()
		case <-timeoutC:
			if !subscribed {
				return false, fmt.Errorf("no subscribed event within %v", timeout)
			}
			return true, fmt.Errorf("%w: no event for %v", ErrMissedHeartbeats, timeout)
		case r := <-results:
			if r.end {
				switch {
				case errorMessage != nil:
					return subscribed, fmt.Errorf("%w: %s", ErrTornDown, *errorMessage)
				case !subscribed && r.err != nil:
					return false, classifySubscribeError(r.err, resubscribe)
				case r.err == nil:
					return subscribed, errors.New("subscription stream ended")
				default:
					return subscribed, fmt.Errorf("subscription stream: %w", r.err)
				}
			}
			if !subscribed {
				sub := r.event.GetSubscribed()
				if sub == nil {
					return false, fmt.Errorf("first event is %T, not subscribed", r.event.GetEvent())
				}
				streamID := sub.GetStreamId()
				if streamID == "" {
					streamID = stream.ResponseHeader().Get(StreamIDHeader)
				}
				if sub.GetFrameworkId() == "" || streamID == "" {
					return false, errors.New("subscribed event without framework id or stream id")
				}
				c.mu.Lock()
				c.info.Id = sub.GetFrameworkId()
				c.streamID = streamID
				c.ackBatches = sub.GetAcknowledgeBatches()
				c.mu.Unlock()
				subscribed = true
				timeout = 0
				if hb := sub.GetHeartbeatIntervalSeconds(); hb > 0 {
					timeout = time.Duration(MissedHeartbeats * hb * float64(time.Second))
				}
				c.log.Info("subscribed", "framework_id", sub.GetFrameworkId(), "resubscribe", resubscribe,
					"heartbeat_interval_seconds", sub.GetHeartbeatIntervalSeconds())
				h.Subscribed(ctx, c, sub)
				if resubscribe {
					if err := c.Reconcile(ctx, nil); err != nil {
						c.log.Warn("implicit reconciliation failed", "err", err)
					}
				}
			} else if msg, ok := c.dispatch(ctx, h, r.event, acks); ok {
				errorMessage = &msg
			}
			// Restart the watchdog only now, so time spent in the handler
			// never counts as missed heartbeats.
			if timeout > 0 {
				timer.Reset(timeout)
			} else {
				timer.Stop()
				timeoutC = nil
			}
		}
	}
}

// dispatch delivers one event after Subscribed to h, and hands an update
// to acks once h dealt with it. It returns the message of an Error event
// and true.
func (c *Client) dispatch(ctx context.Context, h Handler, ev *slacklinev1.Event, acks *acker) (errorMessage string, isError bool) {
	switch e := ev.GetEvent().(type) {
	case *slacklinev1.Event_Offers:
		if offers := e.Offers.GetOffers(); len(offers) > 0 {
			h.Offers(ctx, c, offers)
		}
		if inverse := e.Offers.GetInverseOffers(); len(inverse) > 0 {
			h.InverseOffers(ctx, c, inverse)
		}
	case *slacklinev1.Event_Rescind:
		h.Rescind(ctx, c, e.Rescind.GetOfferId())
	case *slacklinev1.Event_RescindInverseOffer:
		h.RescindInverseOffer(ctx, c, e.RescindInverseOffer.GetInverseOfferId())
	case *slacklinev1.Event_Update:
		status := e.Update.GetStatus()
		if status == nil {
			c.log.Warn("update event without status")
			return "", false
		}
		h.Update(ctx, c, status)
		if !c.manualAck && status.GetUuid() != "" {
			acks.add(status)
		}
	case *slacklinev1.Event_Failure:
		h.Failure(ctx, c, e.Failure.GetAgentId())
	case *slacklinev1.Event_Error:
		msg := e.Error.GetMessage()
		c.log.Warn("error event", "message", msg)
		h.Error(ctx, c, msg)
		return msg, true
	case *slacklinev1.Event_Heartbeat:
	case *slacklinev1.Event_Subscribed:
		c.log.Warn("unexpected second subscribed event ignored")
	default:
		c.log.Debug("unknown event ignored", "event", fmt.Sprintf("%T", e))
	}
	return "", false
}

// classifySubscribeError sorts a failed subscription into torn down,
// permanent and retryable (returned as is).
func classifySubscribeError(err error, resubscribe bool) error {
	switch connect.CodeOf(err) {
	case connect.CodeNotFound, connect.CodeFailedPrecondition:
		if resubscribe {
			return fmt.Errorf("%w: resubscription refused: %w", ErrTornDown, err)
		}
		return &permanentError{fmt.Errorf("subscribe: %w", err)}
	case connect.CodeInvalidArgument, connect.CodePermissionDenied, connect.CodeUnauthenticated:
		return &permanentError{fmt.Errorf("subscribe: %w", err)}
	}
	return fmt.Errorf("subscribe: %w", err)
}

func (c *Client) frameworkInfo() *slacklinev1.FrameworkInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	return proto.CloneOf(c.info)
}

func (c *Client) subscription() (frameworkID, streamID string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streamID == "" {
		return "", "", ErrNotSubscribed
	}
	return c.info.GetId(), c.streamID, nil
}

// invoke makes one unary call with the framework id filled in by build and
// the stream id header set.
func invoke[Req, Res any](ctx context.Context, c *Client, name string,
	rpc func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
	build func(frameworkID string) *Req,
) error {
	_, err := call(ctx, c, name, rpc, build)
	return err
}

// call is invoke that returns the response.
func call[Req, Res any](ctx context.Context, c *Client, name string,
	rpc func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
	build func(frameworkID string) *Req,
) (*Res, error) {
	frameworkID, streamID, err := c.subscription()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	req := connect.NewRequest(build(frameworkID))
	req.Header().Set(StreamIDHeader, streamID)
	resp, err := rpc(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return resp.Msg, nil
}

// Accept accepts offers (all on one agent) with operations. The unused
// remainder of the offers is declined with filters (nil: the coordinator's
// default refusal of 5 s; see Filters).
//
// Like every call method, Accept returns an error wrapping ErrNotSubscribed
// when there is no live subscription, and otherwise the call's error, a
// *connect.Error (use connect.CodeOf). Outcomes of the operations arrive as
// status updates.
func (c *Client) Accept(ctx context.Context, offerIDs []string, operations []*slacklinev1.Operation, filters *slacklinev1.Filters) error {
	return invoke(ctx, c, "accept", c.rpc.Accept, func(fid string) *slacklinev1.AcceptRequest {
		return &slacklinev1.AcceptRequest{FrameworkId: fid, OfferIds: offerIDs, Operations: operations, Filters: filters}
	})
}

// Launch accepts offers (all on one agent) with a single LAUNCH operation of
// tasks; see Accept.
func (c *Client) Launch(ctx context.Context, offerIDs []string, tasks []*slacklinev1.TaskInfo, filters *slacklinev1.Filters) error {
	op := &slacklinev1.Operation{Operation: &slacklinev1.Operation_Launch{
		Launch: &slacklinev1.LaunchOperation{TaskInfos: tasks},
	}}
	return c.Accept(ctx, offerIDs, []*slacklinev1.Operation{op}, filters)
}

// Decline gives offers back; their resources are not offered again to this
// framework on those agents for filters.refuse_seconds (5 s when nil).
func (c *Client) Decline(ctx context.Context, offerIDs []string, filters *slacklinev1.Filters) error {
	return invoke(ctx, c, "decline", c.rpc.Decline, func(fid string) *slacklinev1.DeclineRequest {
		return &slacklinev1.DeclineRequest{FrameworkId: fid, OfferIds: offerIDs, Filters: filters}
	})
}

// AcceptInverseOffers agrees to leave the agents of the inverse offers.
func (c *Client) AcceptInverseOffers(ctx context.Context, inverseOfferIDs []string, filters *slacklinev1.Filters) error {
	return invoke(ctx, c, "accept inverse offers", c.rpc.AcceptInverseOffers, func(fid string) *slacklinev1.AcceptInverseOffersRequest {
		return &slacklinev1.AcceptInverseOffersRequest{FrameworkId: fid, InverseOfferIds: inverseOfferIDs, Filters: filters}
	})
}

// DeclineInverseOffers refuses inverse offers for filters.refuse_seconds.
func (c *Client) DeclineInverseOffers(ctx context.Context, inverseOfferIDs []string, filters *slacklinev1.Filters) error {
	return invoke(ctx, c, "decline inverse offers", c.rpc.DeclineInverseOffers, func(fid string) *slacklinev1.DeclineInverseOffersRequest {
		return &slacklinev1.DeclineInverseOffersRequest{FrameworkId: fid, InverseOfferIds: inverseOfferIDs, Filters: filters}
	})
}

// Revive removes every filter and resumes offers for roles (all the
// framework's roles when none are given).
func (c *Client) Revive(ctx context.Context, roles ...string) error {
	return invoke(ctx, c, "revive", c.rpc.Revive, func(fid string) *slacklinev1.ReviveRequest {
		return &slacklinev1.ReviveRequest{FrameworkId: fid, Roles: roles}
	})
}

// Suppress stops offers for roles (all the framework's roles when none are
// given) until Revive. A new subscription starts unsuppressed.
func (c *Client) Suppress(ctx context.Context, roles ...string) error {
	return invoke(ctx, c, "suppress", c.rpc.Suppress, func(fid string) *slacklinev1.SuppressRequest {
		return &slacklinev1.SuppressRequest{FrameworkId: fid, Roles: roles}
	})
}

// Kill kills a task; agentID may be empty when unknown. The outcome arrives
// as a status update.
func (c *Client) Kill(ctx context.Context, taskID, agentID string) error {
	return invoke(ctx, c, "kill", c.rpc.Kill, func(fid string) *slacklinev1.KillRequest {
		return &slacklinev1.KillRequest{FrameworkId: fid, TaskId: taskID, AgentId: agentID}
	})
}

// Acknowledge acknowledges a status update so that it is not re-sent. It
// does nothing and returns nil for an update without a uuid (those need no
// acknowledgement). Only needed with Config.ManualAcknowledge.
func (c *Client) Acknowledge(ctx context.Context, status *slacklinev1.TaskStatus) error {
	if status.GetUuid() == "" {
		return nil
	}
	return invoke(ctx, c, "acknowledge", c.rpc.Acknowledge, func(fid string) *slacklinev1.AcknowledgeRequest {
		return &slacklinev1.AcknowledgeRequest{
			FrameworkId: fid,
			AgentId:     status.GetAgentId(),
			TaskId:      status.GetTaskId(),
			Uuid:        status.GetUuid(),
		}
	})
}

// AcknowledgeBatch acknowledges status updates as Acknowledge does, in as
// few calls as it may (#30): up to MaxAcknowledgementsPerCall per call when
// the coordinator takes batches, one per update otherwise. Updates without
// a uuid are skipped. Each update is acknowledged or refused on its own:
// the error joins the refused ones' errors (each a *connect.Error naming
// its entry) and the failed calls'; nil when all were acknowledged.
func (c *Client) AcknowledgeBatch(ctx context.Context, statuses []*slacklinev1.TaskStatus) error {
	acks := make([]*slacklinev1.Acknowledgement, 0, len(statuses))
	for _, st := range statuses {
		if st.GetUuid() != "" {
			acks = append(acks, acknowledgement(st))
		}
	}
	return c.acknowledgeAll(ctx, acks)
}

// acknowledgement is the acknowledgement of status.
func acknowledgement(status *slacklinev1.TaskStatus) *slacklinev1.Acknowledgement {
	return &slacklinev1.Acknowledgement{AgentId: status.GetAgentId(), TaskId: status.GetTaskId(), Uuid: status.GetUuid()}
}

// acknowledgeAll sends acks in as few calls as the coordinator allows.
func (c *Client) acknowledgeAll(ctx context.Context, acks []*slacklinev1.Acknowledgement) error {
	c.mu.Lock()
	batches := c.ackBatches
	c.mu.Unlock()
	per := 1
	if batches {
		per = MaxAcknowledgementsPerCall
	}
	var errs []error
	for chunk := range slices.Chunk(acks, per) {
		errs = append(errs, c.acknowledge(ctx, chunk)...)
	}
	return errors.Join(errs...)
}

// acknowledge sends acks in one call: a single one in the request's single
// fields, which every coordinator reads. It returns the call's error or
// the refused entries'.
func (c *Client) acknowledge(ctx context.Context, acks []*slacklinev1.Acknowledgement) []error {
	resp, err := call(ctx, c, "acknowledge", c.rpc.Acknowledge, func(fid string) *slacklinev1.AcknowledgeRequest {
		if len(acks) == 1 {
			return &slacklinev1.AcknowledgeRequest{FrameworkId: fid, AgentId: acks[0].GetAgentId(), TaskId: acks[0].GetTaskId(), Uuid: acks[0].GetUuid()}
		}
		return &slacklinev1.AcknowledgeRequest{FrameworkId: fid, Acknowledgements: acks}
	})
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, r := range resp.GetResults() {
		if r.GetCode() != 0 {
			errs = append(errs, fmt.Errorf("acknowledge: %w", connect.NewError(connect.Code(r.GetCode()), errors.New(r.GetMessage()))))
		}
	}
	return errs
}

// Reconcile asks for the latest state of tasks, which arrives as status
// updates without uuid. With no tasks (implicit reconciliation) the
// coordinator reports every task of the framework it knows; with tasks
// (explicit) it reports those, and TASK_STATE_UNKNOWN (or LOST) for tasks it
// does not know.
func (c *Client) Reconcile(ctx context.Context, tasks []*slacklinev1.ReconcileTask) error {
	return invoke(ctx, c, "reconcile", c.rpc.Reconcile, func(fid string) *slacklinev1.ReconcileRequest {
		return &slacklinev1.ReconcileRequest{FrameworkId: fid, Tasks: tasks}
	})
}

// Teardown removes the framework: the coordinator kills all its tasks, ends
// the subscription with an Error event, and Run returns an error wrapping
// ErrTornDown (or nil if its context is cancelled first). The framework id
// cannot be used again.
func (c *Client) Teardown(ctx context.Context) error {
	err := invoke(ctx, c, "teardown", c.rpc.Teardown, func(fid string) *slacklinev1.TeardownRequest {
		return &slacklinev1.TeardownRequest{FrameworkId: fid}
	})
	if err == nil {
		c.tornDown.Store(true)
	}
	return err
}
