// Package frameworkapi is the Go SDK for Slackline frameworks: programs that
// receive resource offers from the coordinator and launch tasks on them. It
// wraps slackline.v1.SchedulerService (a mirror of the Mesos v1 scheduler
// API) so that a framework fits in a page; see Example (package example) for
// one.
//
// # Subscribing
//
// Build a Client with New and call Run with a Handler:
//
//	c, err := frameworkapi.New(frameworkapi.Config{
//		Coordinator: "http://127.0.0.1:5050",
//		Framework: &slacklinev1.FrameworkInfo{
//			Name:                   "batch",
//			Roles:                  []string{"*"},
//			FailoverTimeoutSeconds: 60,
//		},
//	})
//	...
//	err = c.Run(ctx, myHandler)
//
// Run subscribes and keeps the subscription alive until ctx is cancelled.
// The first event of every subscription is Subscribed, carrying the
// framework id (assigned by the coordinator on the first subscription; save
// it if the framework must survive its own restart) and the stream id, which
// the SDK adds to every call in the Slackline-Stream-Id header together with
// the framework id. Calls made while no subscription is live fail with
// ErrNotSubscribed.
//
// # The event loop
//
// Run reads events and calls the Handler's methods one at a time, in order,
// from the goroutine that called Run. Implement only what you need by
// embedding BaseHandler, or fill in a HandlerFuncs. Handler methods receive
// the Client and may call it (Launch, Decline, Kill, ...); they should not
// block for long, since no event is read meanwhile. Heartbeat events are
// consumed by the SDK.
//
// # Accepting and declining offers
//
// Each offer is a bundle of resources on one agent. Use OfferResources to read
// it (offers are either entirely regular or entirely revocable; revocable
// ones are only sent to frameworks subscribed with
// FRAMEWORK_CAPABILITY_REVOCABLE_RESOURCES), Pack to place a queue of task
// needs on a batch of offers (choosing ports when a task needs some), and
// NewTask to build a TaskInfo carrying the offer's agent, role and
// revocability. Then either launch on an offer with Launch (or Accept for
// other operations) or give it back with Decline. The unused remainder of an
// accepted offer is declined with the Accept call's filters.
//
// Filters decide when declined resources come back: Filters(0) returns them
// to the pool at once (useful while tasks are still waiting, so that the
// allocator can hand the remainder to whoever is furthest below its fair
// share, possibly this framework again); nil means the default of
// DefaultRefuseSeconds. A framework with nothing to run should Suppress, and
// Revive when work arrives.
//
// # Maintenance and inverse offers
//
// When an operator schedules maintenance, offers of the affected agents
// carry an unavailability (OfferWindow reads it) and the framework receives
// inverse offers (Handler.InverseOffers): requests to leave a whole agent
// before its window starts. Place long-running work with
// PreferAvailable(offers), which puts agents without unavailability first
// and then those whose maintenance starts latest. Answer an inverse offer
// with AcceptInverseOffers once nothing of yours is left on the agent, or
// DeclineInverseOffers while you cannot leave; the filters decide when the
// coordinator asks again (a decline with a short filter keeps the operator
// informed of your progress). RescindInverseOffer withdraws one (the
// schedule changed; an updated one follows). Declare
// FrameworkInfo.min_available_tasks so that operators see in
// GetMaintenanceStatus when draining a window would break you. See
// examples/service-framework for a complete framework.
//
// # Status updates and acknowledgements
//
// Handler.Update receives status updates. Updates with a uuid come from an
// agent and are re-sent until acknowledged; by default the SDK acknowledges
// each one after Update returns, so a framework crashing inside Update gets
// it again. The automatic acknowledgements go from a goroutine of the
// subscription, in batches (#30): those of the updates handled while a call
// is in flight go together in the next call, up to
// MaxAcknowledgementsPerCall, so a burst of updates costs a few calls;
// when that many wait, Run reads no further event until they are sent.
// Set Config.ManualAcknowledge to acknowledge yourself with
// Client.Acknowledge, or Client.AcknowledgeBatch for many at once, for
// example after persisting the state change. Updates without uuid
// (reconciliation answers, coordinator-generated failures) need no
// acknowledgement. IsTerminal tells whether a task's state is final.
//
// # Failover and reconnection
//
// When the stream ends or fails, or when no event arrives for
// MissedHeartbeats heartbeat intervals, Run calls Handler.Disconnected and
// resubscribes with jittered exponential backoff (Config.MinBackoff to
// Config.MaxBackoff), sending the framework id it was given. The coordinator
// keeps the framework's tasks for FrameworkInfo.failover_timeout_seconds after
// a subscription ends; a framework process that restarts fails over to its
// earlier incarnation by setting Config.Framework.Id to the saved id.
//
// # Reconciliation
//
// Updates may be lost while a framework is disconnected. After every
// subscription that carried a framework id (every resubscription, and a first
// subscription with Config.Framework.Id set), the SDK calls Reconcile with no
// tasks right after Handler.Subscribed returns: the coordinator then sends the
// latest state of every task of the framework as updates without uuid. A
// framework that keeps its own list of tasks may also reconcile them
// explicitly with Client.Reconcile.
//
// # Errors
//
// Call methods wrap ErrNotSubscribed when there is no live subscription, and
// otherwise return the RPC's *connect.Error (use connect.CodeOf; a call with a
// stale stream id is refused with PermissionDenied). Run returns nil when its
// context is cancelled and an error wrapping ErrTornDown when the coordinator
// ends the subscription for good: the framework was removed (after Teardown,
// a failover timeout or an operator's decision; its id is dead and a new
// framework must subscribe without it), or another process subscribed with
// the same framework id and took over. See Run for the exact rule.
package frameworkapi
