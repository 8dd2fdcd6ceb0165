package coordinator

import (
	"context"
	"net"
	"slices"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/auth"
)

// Flow control and bounded state: what each stream queues and how it
// coalesces, the windows that refuse a flood up front, and the history the
// coordinator forgets. Limits (limits.go) names every bound.

// queueCommand queues a command on an agent's session. A kill of a task, an
// acknowledgement of an update and a framework's shutdown that are already
// queued are not queued twice.
func queueCommand(s *agentSession, cmd *slacklinev1.AgentCommand) {
	switch c := cmd.GetCommand().(type) {
	case *slacklinev1.AgentCommand_KillTask:
		s.replace(key("kill", c.KillTask.GetFrameworkId(), c.KillTask.GetTaskId()), cmd)
	case *slacklinev1.AgentCommand_Acknowledge:
		s.replace(key("ack", c.Acknowledge.GetFrameworkId(), c.Acknowledge.GetTaskId(), c.Acknowledge.GetUuid()), cmd)
	case *slacklinev1.AgentCommand_ShutdownFramework:
		s.replace(key("shutdown", c.ShutdownFramework.GetFrameworkId()), cmd)
	default:
		s.send(cmd)
	}
}

// queue queues an event on the subscription, coalescing with what it
// holds: an update without a uuid (the coordinator's own: reconciliation
// answers, unreachable agents) supersedes a queued one of the same task; an
// offer or inverse offer rescinded before its event was sent is taken out
// of the event rather than followed by a rescind; a failure of an agent
// already queued is not queued twice. An update with a uuid is never
// superseded here (the framework acknowledges each; see core.AddUpdate), only
// queued once however often its agent sends it.
func (s *subscription) queue(ev *slacklinev1.Event) {
	switch e := ev.GetEvent().(type) {
	case *slacklinev1.Event_Update:
		st := e.Update.GetStatus()
		if st.GetUuid() == "" {
			s.replace(key("update", st.GetTaskId()), ev)
			return
		}
		// The same update sent again by its agent while still queued is
		// queued once.
		s.replace(key("pending", st.GetTaskId(), st.GetUuid()), ev)
	case *slacklinev1.Event_Offers:
		var keys []string
		for _, o := range e.Offers.GetOffers() {
			keys = append(keys, key("offer", o.GetId()))
		}
		for _, o := range e.Offers.GetInverseOffers() {
			keys = append(keys, key("inverse", o.GetId()))
		}
		s.sendIndexed(ev, keys...)
	case *slacklinev1.Event_Rescind:
		id := e.Rescind.GetOfferId()
		if !s.edit(key("offer", id), func(q *slacklinev1.Event) bool {
			offers := q.GetOffers()
			offers.Offers = slices.DeleteFunc(offers.Offers, func(o *slacklinev1.Offer) bool { return o.GetId() == id })
			return len(offers.Offers)+len(offers.InverseOffers) > 0
		}) {
			s.send(ev)
		}
	case *slacklinev1.Event_RescindInverseOffer:
		id := e.RescindInverseOffer.GetInverseOfferId()
		if !s.edit(key("inverse", id), func(q *slacklinev1.Event) bool {
			offers := q.GetOffers()
			offers.InverseOffers = slices.DeleteFunc(offers.InverseOffers, func(o *slacklinev1.InverseOffer) bool { return o.GetId() == id })
			return len(offers.Offers)+len(offers.InverseOffers) > 0
		}) {
			s.send(ev)
		}
	case *slacklinev1.Event_Failure:
		s.replace(key("failure", e.Failure.GetAgentId()), ev)
	default:
		s.send(ev)
	}
}

// key joins parts with a byte no id contains.
func key(parts ...string) string {
	n := len(parts)
	for _, p := range parts {
		n += len(p)
	}
	b := make([]byte, 0, n)
	for i, p := range parts {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, p...)
	}
	return string(b)
}

// admitLaunch refuses, before anything changes, an Accept that would queue
// launches on an agent whose command stream is behind by more than
// Limits.MaxQueuedCommandsPerAgent. Caller holds c.mu.
func (c *Coordinator) admitLaunch(agentID string) error {
	a := c.agents[agentID]
	if a == nil || a.session == nil {
		return nil
	}
	if queued := a.session.len(); !within(queued, c.cfg.Limits.MaxQueuedCommandsPerAgent) {
		c.bounds.hit("agent_queue", "launch refused: the agent has not read the commands already sent to it", "agent", agentID, "queued", queued)
		return exhausted("agent %q has %d commands it has not read yet, more than its limit: the launch was not made and the offers stay yours; accept them again later",
			agentID, queued)
	}
	return nil
}

// admitReconcile refuses, before anything changes, a Reconcile while the
// framework's subscription holds more than
// Limits.MaxQueuedEventsPerSubscription events it has not read. Caller
// holds c.mu.
func (c *Coordinator) admitReconcile(fw *framework) error {
	if fw.sub == nil {
		return nil
	}
	if queued := fw.sub.len(); !within(queued, c.cfg.Limits.MaxQueuedEventsPerSubscription) {
		c.bounds.hit("subscription_queue", "reconcile refused: the framework has not read the events already sent to it", "framework", fw.id(), "queued", queued)
		return exhausted("framework %q has %d events it has not read yet, more than its limit: read them and reconcile again", fw.id(), queued)
	}
	return nil
}

// callerKey names a caller for per-caller limits: its principal when calls
// are authenticated, else the address it connects from.
func callerKey(ctx context.Context, peer connect.Peer) string {
	if p := auth.FromContext(ctx); p != nil && p.Name != "" {
		return "principal:" + p.Name
	}
	host, _, err := net.SplitHostPort(peer.Addr)
	if err != nil {
		host = peer.Addr
	}
	return "address:" + host
}

// admitSubscription counts a Subscribe stream of a caller against
// Limits.MaxSubscriptionsPerPrincipal; release ends the count when the
// stream ends. Both take c.mu.
func (c *Coordinator) admitSubscription(caller string, limit int) (release func(), err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !within(c.subscriptions[caller]+1, limit) {
		c.bounds.hit("subscriptions", "subscription refused: the caller has as many live subscriptions as it may", "caller", caller)
		return nil, exhausted("%s has %d live subscriptions, its limit: end one before subscribing again", caller, c.subscriptions[caller])
	}
	c.subscriptions[caller]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.subscriptions[caller]--; c.subscriptions[caller] <= 0 {
			delete(c.subscriptions, caller)
		}
	}, nil
}

// forgetHistory forgets the torn-down frameworks beyond
// Limits.MaxCompletedFrameworks, oldest registered first (the core's
// ForgetCompletedFrameworks, which holds their records), and the agents
// UNREACHABLE or GONE for longer than Limits.GoneAgentRetention (the
// core's ForgetGoneAgents: their remaining tasks end TASK_STATE_GONE). It returns the registry writes.
// Caller holds a turn of every scope (order.go) and c.mu.
func (c *Coordinator) forgetHistory(now time.Time) []store.Mutation {
	r := c.core.ForgetCompletedFrameworks(c.cfg.Limits.MaxCompletedFrameworks)
	writes := registryWrites(r.After)
	for _, id := range r.Forgotten {
		delete(c.frameworks, id)
	}
	if n := len(r.Forgotten); n > 0 {
		c.bounds.hit("completed_frameworks", "the oldest torn-down frameworks were forgotten", "forgotten", n)
	}
	r.After, r.Forgotten = nil, nil
	c.deliver(r)
	r = c.core.ForgetGoneAgents(c.cfg.Limits.GoneAgentRetention, now)
	for _, id := range r.ForgottenAgents {
		if a := c.agents[id]; a != nil {
			c.bounds.hit("gone_agents", "an agent unreachable or gone for longer than the retention was forgotten", "agent", id, "hostname", a.Info.GetHostname())
		}
	}
	writes = append(writes, registryWrites(r.After)...)
	c.applyAgentChanges(&r)
	return writes
}

// subscribeOffStack runs subscribe on one of the coordinator's subscriber
// goroutines (offStack) and waits for it. A Subscribe handler's goroutine
// lives as long as its stream, with the stack it grew to: Go shrinks an idle
// goroutine's stack only while it uses less than a quarter of it, and a
// blocked stream uses a little more than a quarter of 16 KB. Kept off it,
// the deep calls of subscribing leave it at 8 KB, which halves what an idle
// subscription costs in stacks (scripts/bench/idle: 18 KB of stacks per
// subscription without it). A subscription may wait on its goroutine for
// its turn (order.go: a teardown of the same framework, the timeout tick)
// and for its record's fsync: other subscriptions run meanwhile on other
// goroutines (up to maxOffStackGoroutines), so that one framework's wait
// holds up no other framework's subscription and concurrent subscriptions
// share fsyncs.
func (c *Coordinator) subscribeOffStack(ctx context.Context, info *slacklinev1.FrameworkInfo) (fw *framework, sub *subscription, err error) {
	c.subscriber.run(func() { fw, sub, err = c.subscribe(ctx, info) })
	return fw, sub, err
}

// offStack runs calls on goroutines that outlive them: their stacks do
// not stay with the callers, and no goroutine is started per call, whose
// stack would leave a hole among the long-lived ones when it ends
// (scripts/bench/idle: 0.4 KB of stacks per subscription). A call runs on
// an idle goroutine, or on a new one while fewer than
// maxOffStackGoroutines run; beyond that it waits in order for one to be
// free (full is called then, when set: the limit's metric). A goroutine
// ends offStackIdle after its last call. The zero value is ready to use.
type offStack struct {
	// full, when set, is called (without mu) when a call must wait because
	// maxOffStackGoroutines are busy.
	full func()

	mu         sync.Mutex
	queue      []func()
	goroutines int // running
	// idle holds the wake channel (capacity 1) of each running goroutine
	// waiting for a call. run takes one out under mu as it queues a call and
	// sends it the call's token, so that a second call made before that
	// goroutine runs sees it busy and starts another rather than queueing
	// behind the first (which may wait long for its turn).
	idle []chan struct{}
}

// maxOffStackGoroutines bounds an offStack's goroutines: the calls that
// run at once (subscriptions being decided, written and applied,
// concurrently). More wait in its queue, which is bounded by the callers
// (each waits for its call; Limits.MaxConcurrentCallsPerCaller).
const maxOffStackGoroutines = 16

// offStackIdle is how long an offStack's goroutine waits for another call.
const offStackIdle = 10 * time.Second

// run runs f on one of the goroutines and returns once it returned. f
// must not call run.
func (o *offStack) run(f func()) { <-o.start(f) }

// start queues f for one of the goroutines, as run does, and returns a
// channel closed once f returned.
func (o *offStack) start(f func()) <-chan struct{} {
	done := make(chan struct{})
	o.mu.Lock()
	o.queue = append(o.queue, func() { f(); close(done) })
	waits := false
	switch {
	case len(o.idle) > 0:
		wake := o.idle[len(o.idle)-1]
		o.idle[len(o.idle)-1] = nil
		o.idle = o.idle[:len(o.idle)-1]
		wake <- struct{}{} // never blocks: taken out of idle once, capacity 1
	case o.goroutines < maxOffStackGoroutines:
		o.goroutines++
		go o.serve()
	default:
		waits = true
	}
	o.mu.Unlock()
	if waits && o.full != nil {
		o.full()
	}
	return done
}

// serve is a goroutine: it runs the queued calls until none came for
// offStackIdle.
func (o *offStack) serve() {
	idle := time.NewTimer(offStackIdle)
	defer idle.Stop()
	wake := make(chan struct{}, 1)
	for {
		o.mu.Lock()
		if len(o.queue) == 0 {
			o.idle = append(o.idle, wake)
			o.mu.Unlock()
			select {
			case <-wake:
			case <-idle.C:
				o.mu.Lock()
				if i := slices.Index(o.idle, wake); i >= 0 {
					// No call was handed to it: it ends.
					o.idle = slices.Delete(o.idle, i, i+1)
					o.goroutines--
					o.mu.Unlock()
					return
				}
				// run took it out of idle and sent its token (under mu)
				// as the timer fired: it serves that call.
				o.mu.Unlock()
				<-wake
			}
			o.mu.Lock()
			if len(o.queue) == 0 {
				o.mu.Unlock()
				continue // a goroutine that finished its call took it first
			}
		}
		f := o.queue[0]
		o.queue[0] = nil
		if o.queue = o.queue[1:]; len(o.queue) == 0 {
			o.queue = nil
		}
		o.mu.Unlock()
		f()
		idle.Reset(offStackIdle)
	}
}
