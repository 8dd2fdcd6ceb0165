package main

import (
	"flag"
	"time"

	"github.com/slackline/slackline/coordinator"
	"github.com/slackline/slackline/internal/server"
)

// limitFlags binds the coordinator's limits (coordinator.Limits) to flags;
// a negative value disables a limit.
func limitFlags(fs *flag.FlagSet, l *coordinator.Limits) {
	fs.IntVar(&l.MaxRequestBytes, "max-request-bytes", server.MaxRequestBytes, "largest request message accepted (ResourceExhausted beyond)")
	fs.IntVar(&l.MaxStatusMessageBytes, "max-status-message-bytes", 4096, "status messages are cut to this size, ending with a marker")
	fs.IntVar(&l.MaxPendingUpdatesPerFramework, "max-pending-updates-per-framework", 10000,
		"unacknowledged status updates kept per framework; beyond, a task's older updates are coalesced, else agents retry later")
	fs.IntVar(&l.MaxCompletedFrameworks, "max-completed-frameworks", 100, "torn-down frameworks kept (oldest forgotten first)")
	fs.IntVar(&l.MaxCompletedTasksPerFramework, "max-completed-tasks-per-framework", 1000, "terminal tasks kept per framework for GetTasks and Reconcile")
	fs.DurationVar(&l.GoneAgentRetention, "gone-agent-retention", 14*24*time.Hour, "forget agents unreachable or gone for this long (their tasks end GONE)")
	fs.IntVar(&l.MaxSubscriptionsPerPrincipal, "max-subscriptions-per-principal", 1000, "live subscriptions per principal, or per remote address without authentication")
	fs.IntVar(&l.MaxQueuedCommandsPerAgent, "max-queued-commands-per-agent", 10000, "an Accept is refused while its agent has more commands than this not yet read")
	fs.IntVar(&l.MaxQueuedEventsPerSubscription, "max-queued-events-per-subscription", 100000, "a Reconcile is refused while its framework has more events than this not yet read")
	fs.IntVar(&l.MaxFrameworksPerPrincipal, "max-frameworks-per-principal", 100,
		"frameworks one principal may have registered and not torn down, connected or within their failover timeout (ResourceExhausted beyond)")
	fs.DurationVar(&l.MaxFailoverTimeout, "max-failover-timeout", 7*24*time.Hour,
		"longest failover timeout a framework gets: a larger one is lowered to it, as its FrameworkInfo then shows (negative: one year, the protocol's bound)")
	fs.IntVar(&l.AgentRegistrationsPerMinute, "agent-registrations-per-minute", 6,
		"agent registrations one principal (agent certificate) may make a minute after a burst of --agent-registration-burst (ResourceExhausted beyond; negative: unpaced)")
	fs.IntVar(&l.AgentRegistrationBurst, "agent-registration-burst", 20, "agent registrations one principal may make at once")
	fs.IntVar(&l.MaxConcurrentCallsPerCaller, "max-concurrent-calls-per-caller", 16, "unary calls in progress per principal (per connection without authentication); more wait their turn")
}

// anonymousFlags binds the limits on peers without credentials
// (server.AnonymousLimits, applied with --authz) to flags; a negative
// value disables a limit, zero takes the default.
func anonymousFlags(fs *flag.FlagSet, l *server.AnonymousLimits) {
	fs.IntVar(&l.MaxConnsPerPeer, "max-anonymous-conns-per-peer", server.DefaultAnonymousConnsPerPeer,
		"connections one IP address (IPv6: one /64) may hold before they authenticate (one more closes its oldest)")
	fs.IntVar(&l.MaxConns, "max-anonymous-conns", 0,
		"connections all peers together may hold before authenticating (default: a quarter of the open-file limit, at most 4096)")
	fs.IntVar(&l.MaxStreamsPerConn, "max-anonymous-streams-per-conn", server.DefaultAnonymousStreamsPerConn,
		"requests without credentials (health Check) in progress on one connection that has not authenticated")
	fs.DurationVar(&l.MaxStreamLifetime, "max-anonymous-stream-lifetime", server.DefaultAnonymousStreamLifetime,
		"longest a request without credentials may last")
}
