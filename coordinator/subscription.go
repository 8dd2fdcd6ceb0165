package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/coordinator/core"
	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/ids"
	"github.com/slackline/slackline/internal/protocol"
)

var (
	errFailedOver   = errors.New("framework failed over to a newer subscription")
	errSessionEnded = errors.New("session ended; register again")
)

// errTornDown ends a subscription for good.
type errTornDown struct{ reason string }

func (e errTornDown) Error() string { return "framework removed: " + e.reason }

func tornDownError(id string) error {
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("framework %q was torn down and cannot subscribe again", id))
}

// planSubscription asks the core for a subscription, new (info without an
// id: newID becomes its id) or a failover, changing nothing: a persist
// step whose record is the framework's (its first registration time kept
// on a failover), or the core's refusal as a code: an unknown id is
// NotFound, a torn-down one FailedPrecondition.
func planSubscription(k *core.Core, info *slacklinev1.FrameworkInfo, newID string, now time.Time) (core.Ready, error) {
	r, err := k.SubscribeFramework(info, newID, now)
	return r, subscriptionError(err)
}

// subscriptionError maps the core's subscription refusals to codes.
func subscriptionError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, core.ErrUnknownFramework):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, core.ErrTornDown):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return err
}

// checkFrameworkCount refuses a new framework of a principal that has as
// many registered frameworks as Limits.MaxFrameworksPerPrincipal allows
// (ResourceExhausted, naming the cap). info must be bound (bindPrincipal).
func checkFrameworkCount(k *core.Core, info *slacklinev1.FrameworkInfo, limit int) error {
	if info.GetId() != "" {
		return nil // a failover: counted already
	}
	if n := k.RegisteredFrameworks(info.GetPrincipal()); !within(n+1, limit) {
		return exhausted("principal %q has %d registered frameworks, the most it may (--max-frameworks-per-principal %d): tear one down, or fail over to one (framework_info.id) instead of registering anew",
			info.GetPrincipal(), n, limit)
	}
	return nil
}

// clampFailoverTimeout lowers info's failover timeout to limit (negative:
// no limit), reporting whether it did. The framework's record and
// FrameworkInfo then show the value in effect.
func clampFailoverTimeout(info *slacklinev1.FrameworkInfo, limit time.Duration) bool {
	if limit < 0 || failoverTimeout(info) <= limit {
		return false
	}
	info.FailoverTimeoutSeconds = limit.Seconds()
	return true
}

// subscribe admits a subscription, new or a failover, its record durable
// before the framework learns its id: the core's persist step
// (core.SubscribeFramework), planned under c.mu, written with it released,
// applied under it. It does so in a turn of the framework's scope (of its
// principal's for a new one, the principal it will be bound to:
// principalOf; order.go) so that no teardown slips in
// between (nor another framework of the principal past
// Limits.MaxFrameworksPerPrincipal). The caller is authorized before it
// asks for its turn, so that a caller without the right (a failover to
// another principal's framework, a role it may not register in) queues
// nothing on the scope, and again in it: the framework may have been torn
// down while it waited.
func (c *Coordinator) subscribe(ctx context.Context, info *slacklinev1.FrameworkInfo) (*framework, *subscription, error) {
	now := c.cfg.Now()
	sc := scopePrincipal(c.principalOf(ctx, info)) // a new framework: its principal's count
	if info.GetId() != "" {
		sc = scopeFramework(info.GetId()) // a failover: the framework's record
	}
	c.mu.Lock()
	err := c.admitSubscriber(ctx, info)
	c.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	defer c.takeTurn(sc)()
	c.mu.Lock()
	err = c.admitSubscriber(ctx, info)
	if err == nil {
		if err = checkFrameworkCount(c.core, info, c.cfg.Limits.MaxFrameworksPerPrincipal); err != nil {
			c.bounds.hit("frameworks_per_principal", "framework registration refused: its principal has as many registered frameworks as it may",
				"principal", info.GetPrincipal())
		}
	}
	var r core.Ready
	if err == nil {
		if asked := failoverTimeout(info); clampFailoverTimeout(info, c.cfg.Limits.MaxFailoverTimeout) {
			c.bounds.hit("failover_timeout", "a framework's failover timeout was lowered to the coordinator's maximum",
				"framework", info.GetId(), "name", info.GetName(), "asked", asked, "max", c.cfg.Limits.MaxFailoverTimeout)
		}
		newID := ""
		if info.GetId() == "" {
			newID = ids.New()
		}
		r, err = planSubscription(c.core, info, newID, now)
	}
	c.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	if err := c.write(ctx, "framework", r); err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.applySubscription(r)
}

// admitSubscriber refuses a subscription to a framework that is unknown
// or torn down, and binds info to its caller (bindPrincipal), refusing a
// caller that may not subscribe it: before anything changes, so that a
// failover by another principal leaves the running framework untouched.
// Caller holds c.mu.
func (c *Coordinator) admitSubscriber(ctx context.Context, info *slacklinev1.FrameworkInfo) error {
	if err := subscriptionError(c.core.CheckSubscription(info.GetId())); err != nil {
		return err
	}
	return c.bindPrincipal(ctx, info)
}

// applySubscription connects a framework whose record is durable (r is
// the core's persist step, written). A new one joins the allocator. A
// known one fails over: its old stream ends with an error event, its
// offers and inverse offers are dropped (the new scheduler does not know
// them), its roles and capabilities change.
func (c *Coordinator) applySubscription(r core.Ready) (*framework, *subscription, error) {
	info := r.Apply.Subscribed()
	fw := c.frameworks[info.GetId()]
	switch {
	case fw == nil:
		fw = newFramework(info, slacklinev1.FrameworkState_FRAMEWORK_STATE_CONNECTED)
		c.frameworks[info.GetId()] = fw
	case fw.state == slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED:
		return nil, nil, tornDownError(info.GetId())
	default:
		if fw.sub != nil {
			fw.sub.send(errorEvent(errFailedOver.Error()))
			fw.sub.end(errFailedOver)
			fw.sub = nil
		}
	}
	// The core drops the offers and inverse offers of an earlier
	// subscription: the new scheduler does not know them.
	c.apply(r)
	fw.info, fw.state = info, slacklinev1.FrameworkState_FRAMEWORK_STATE_CONNECTED
	sub := &subscription{outbox: newOutbox[*slacklinev1.Event]()}
	fw.sub = sub
	sub.send(&slacklinev1.Event{Event: &slacklinev1.Event_Subscribed{Subscribed: &slacklinev1.SubscribedEvent{
		FrameworkId: info.GetId(), StreamId: sub.id,
		HeartbeatIntervalSeconds: c.cfg.FrameworkHeartbeatInterval.Seconds(),
		AcknowledgeBatches:       true,
	}}})
	for _, st := range c.core.Pending(info.GetId()) {
		sub.replay = append(sub.replay, updateEvent(fw, st))
	}
	c.log.Info("framework subscribed", "framework", info.GetId(), "name", info.GetName(), "roles", info.GetRoles())
	return fw, sub, nil
}

// streamEvents sends a subscription's events until it ends: Subscribed, the
// replayed updates, then the queue and heartbeats. Its frame and its
// callers' stay on the stream's goroutine while it waits, so the work of
// its first sends is out of line (see rpcInterceptor.streamEnded in
// internal/server).
func (c *Coordinator) streamEvents(ctx context.Context, stream *connect.ServerStream[slacklinev1.SubscribeResponse], sub *subscription) error {
	send, err := sendFirstEvents(stream, sub)
	if err != nil {
		return err
	}
	if err := sub.serve(ctx, heartbeatEvent, c.frameworkHeartbeats, send); err != nil {
		return err
	}
	// Deliver what was queued before the end (the error event included).
	return sub.sendQueued(ctx, send)
}

// sendFirstEvents sends the Subscribed event, the first in the queue, and
// the replayed updates, and returns the stream's send.
//
//go:noinline
func sendFirstEvents(stream *connect.ServerStream[slacklinev1.SubscribeResponse], sub *subscription) (func(*slacklinev1.Event) error, error) {
	stream.ResponseHeader().Set(protocol.StreamIDHeader, sub.id)
	send := func(ev *slacklinev1.Event) error {
		if ev == heartbeatEvent {
			return stream.Send(heartbeatResponse)
		}
		return stream.Send(&slacklinev1.SubscribeResponse{Event: ev})
	}
	subscribed, _ := sub.take()
	if err := send(subscribed); err != nil {
		return nil, err
	}
	for _, ev := range sub.replay {
		if err := send(ev); err != nil {
			return nil, err
		}
	}
	sub.replay = nil // sent: a long-lived stream does not keep them
	return send, nil
}

// heartbeatEvent is the one heartbeat every subscription sends: events are
// never modified once queued, and marshaling one concurrently is safe.
var (
	heartbeatEvent    = &slacklinev1.Event{Event: &slacklinev1.Event_Heartbeat{Heartbeat: &slacklinev1.HeartbeatEvent{}}}
	heartbeatResponse = &slacklinev1.SubscribeResponse{Event: heartbeatEvent}
)

// subscriptionEnded handles the end of a Subscribe stream: if it is still
// the framework's current subscription the framework becomes DISCONNECTED
// and its failover timeout starts (an immediate teardown when it is zero).
// It takes a turn of the framework's scope and of the maintenance state's
// (a teardown forgets the framework's answers to inverse offers), and
// c.mu.
func (c *Coordinator) subscriptionEnded(fw *framework, sub *subscription) {
	defer c.takeTurn(scopeFramework(fw.id()), scopeMaintenance)()
	c.mu.Lock()
	if fw.sub != sub || c.stopping {
		// Replaced by a newer subscription, or the coordinator is stopping:
		// a stop is not a disconnection (the registry keeps the framework).
		c.mu.Unlock()
		return
	}
	now := c.cfg.Now()
	fw.sub = nil
	var writes []store.Mutation
	if fw.state == slacklinev1.FrameworkState_FRAMEWORK_STATE_CONNECTED {
		fw.state = slacklinev1.FrameworkState_FRAMEWORK_STATE_DISCONNECTED
		fw.disconnectedAt = now
		c.deliver(c.core.Disconnect(fw.id(), now))
		c.log.Info("framework disconnected", "framework", fw.id(), "failover_timeout", fw.failoverTimeout())
		if fw.failoverTimeout() == 0 {
			writes = append(writes, c.removeFramework(fw, "disconnected with a zero failover timeout")...)
		}
	}
	c.mu.Unlock()
	c.record(context.Background(), writes...)
}

// removeFramework tears a framework down: offers rescinded, tasks killed and
// forgotten, allocations released (the core's RemoveFramework, which keeps
// its record as torn down). It returns the registry writes that mark it
// completed. Caller holds a turn of the framework's scope and of the
// maintenance state's (see subscribe), and c.mu.
func (c *Coordinator) removeFramework(fw *framework, reason string) []store.Mutation {
	id := fw.id()
	r := c.core.RemoveFramework(id)
	writes := registryWrites(r.After)
	r.After = nil
	c.deliver(r)
	fw.state = slacklinev1.FrameworkState_FRAMEWORK_STATE_COMPLETED
	if fw.sub != nil {
		fw.sub.send(errorEvent("framework removed: " + reason))
		fw.sub.end(errTornDown{reason})
		fw.sub = nil
	}
	c.log.Info("framework removed", "framework", id, "reason", reason)
	return writes
}

// putFramework returns the registry write of a framework's record.
func putFramework(rec *slacklinev1.FrameworkRecord) store.Mutation {
	return store.Put(store.BucketFrameworks, rec.GetInfo().GetId(), mustMarshal(rec))
}
