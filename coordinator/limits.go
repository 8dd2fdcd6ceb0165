package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/server"
)

// Limits bound what the coordinator accepts and keeps, so that its memory
// follows the cluster's state rather than its traffic or its history. Zero
// fields take the defaults in their comments; a negative field disables
// its limit. Hitting a limit is logged once (per limit) and counted in
// slackline_coordinator_limit_hits_total{limit}.
type Limits struct {
	// MaxRequestBytes bounds a request message (default
	// server.MaxRequestBytes, 4 MiB); a larger one fails with
	// ResourceExhausted.
	MaxRequestBytes int
	// MaxStatusMessageBytes bounds TaskStatus.message as the coordinator
	// keeps and forwards it (default 4096); a longer message is cut at a
	// character boundary and ends with TruncatedMarker (limit
	// "status_message").
	MaxStatusMessageBytes int
	// MaxPendingUpdatesPerFramework bounds the status updates a framework
	// has not acknowledged yet (default 10000). Past it, a task's older
	// unacknowledged updates are coalesced into its newest (acknowledged to
	// the agent on the framework's behalf); when no task has an older one,
	// the agent's UpdateStatus is refused with ResourceExhausted and the
	// agent sends it again later (limit "pending_updates"). The latest
	// update of a task is never dropped.
	MaxPendingUpdatesPerFramework int
	// MaxCompletedFrameworks bounds the torn-down frameworks kept (default
	// 100; Mesos's --max_completed_frameworks is 50): the oldest are
	// forgotten, in memory and in the registry (limit
	// "completed_frameworks"). A forgotten id is NotFound, not
	// FailedPrecondition, when it tries to subscribe again.
	MaxCompletedFrameworks int
	// MaxCompletedTasksPerFramework bounds the terminal tasks kept per
	// framework for GetTasks and Reconcile (default 1000, as Mesos's
	// --max_completed_tasks_per_framework); the oldest go first. A
	// completed task keeps its id, name, labels, resources and last status,
	// not its command.
	MaxCompletedTasksPerFramework int
	// GoneAgentRetention is how long an UNREACHABLE or GONE agent is kept
	// after it was last heard from (default 14 days, as Mesos's
	// --registry_max_agent_age); then it is forgotten, in memory and in the
	// registry, and its remaining tasks end TASK_STATE_GONE (limit
	// "gone_agents").
	GoneAgentRetention time.Duration
	// MaxSubscriptionsPerPrincipal bounds the live Subscribe streams of one
	// principal, or of one remote address when calls are not authenticated
	// (default 1000); one more is refused with ResourceExhausted (limit
	// "subscriptions").
	MaxSubscriptionsPerPrincipal int
	// MaxQueuedCommandsPerAgent is the window of an agent's command stream
	// (default 10000): an Accept that launches tasks on an agent with more
	// commands than this not yet read is refused up front with
	// ResourceExhausted, changing nothing (limit "agent_queue").
	MaxQueuedCommandsPerAgent int
	// MaxQueuedEventsPerSubscription is the window of a framework's event
	// stream (default 100000): a Reconcile while more events than this wait
	// for the framework to read them is refused up front with
	// ResourceExhausted (limit "subscription_queue"). Events coalesce (see
	// outbox), so a subscription that reads slowly holds at most about one
	// event per task, offer and pending update.
	MaxQueuedEventsPerSubscription int
	// MaxConcurrentCallsPerCaller bounds the unary calls one caller (its
	// principal, else its connection) has in progress (default 16); the
	// others wait their turn, so that one framework flooding Accept or
	// Reconcile, or one agent flooding updates, cannot starve the others
	// (limit "concurrent_calls", counted when a call has to wait).
	MaxConcurrentCallsPerCaller int
	// MaxFrameworksPerPrincipal bounds the frameworks one principal has
	// registered and not torn down (default 100), connected or
	// disconnected within their failover timeout: a Subscribe that would
	// register one more is refused with ResourceExhausted (limit
	// "frameworks_per_principal"); a failover is not counted again.
	// Without authorization the principal is the one a framework declares
	// ("" for none).
	MaxFrameworksPerPrincipal int
	// MaxFailoverTimeout bounds how long a disconnected framework is kept
	// (default 7 days): a larger framework_info.failover_timeout_seconds
	// is lowered to it, and the framework's FrameworkInfo (GetFrameworks,
	// GetState) shows the value in effect (limit "failover_timeout").
	// Negative: the protocol's bound, one year.
	MaxFailoverTimeout time.Duration
	// AgentRegistrationsPerMinute is the pace at which one principal
	// (agent certificate) may register agents (default 6), after a burst
	// of AgentRegistrationBurst (default 20); a registration beyond is
	// refused with ResourceExhausted and the agent retries later (limit
	// "agent_registrations"). Registrations without a principal (no
	// authorization) are not paced.
	AgentRegistrationsPerMinute int
	AgentRegistrationBurst      int
}

// TruncatedMarker ends a status message cut at
// Limits.MaxStatusMessageBytes.
const TruncatedMarker = " …[truncated]"

func (l *Limits) setDefaults() {
	setLimitDefault(&l.MaxRequestBytes, server.MaxRequestBytes)
	setLimitDefault(&l.MaxStatusMessageBytes, 4096)
	setLimitDefault(&l.MaxPendingUpdatesPerFramework, 10000)
	setLimitDefault(&l.MaxCompletedFrameworks, 100)
	setLimitDefault(&l.MaxCompletedTasksPerFramework, 1000)
	setLimitDefault(&l.GoneAgentRetention, 14*24*time.Hour)
	setLimitDefault(&l.MaxSubscriptionsPerPrincipal, 1000)
	setLimitDefault(&l.MaxQueuedCommandsPerAgent, 10000)
	setLimitDefault(&l.MaxQueuedEventsPerSubscription, 100000)
	setLimitDefault(&l.MaxConcurrentCallsPerCaller, 16)
	setLimitDefault(&l.MaxFrameworksPerPrincipal, 100)
	setLimitDefault(&l.MaxFailoverTimeout, 7*24*time.Hour)
	setLimitDefault(&l.AgentRegistrationsPerMinute, 6)
	setLimitDefault(&l.AgentRegistrationBurst, 20)
}

// setLimitDefault sets a zero field to its default; a negative one (limit
// disabled) is left alone.
func setLimitDefault[T int | time.Duration](field *T, value T) {
	if *field == 0 {
		*field = value
	}
}

// within reports whether n is within limit (a negative limit is none).
func within[T int | time.Duration](n, limit T) bool { return limit < 0 || n <= limit }

// bounds counts and logs the limits hit. It is safe for concurrent use
// without a lock of its own (a counter vector, a sync.Map).
type bounds struct {
	log    *slog.Logger
	hits   *prometheus.CounterVec
	logged sync.Map // limit name -> struct{}: logged once
}

func newBounds(log *slog.Logger, reg *prometheus.Registry) *bounds {
	b := &bounds{
		log: log,
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "slackline_coordinator_limit_hits_total",
			Help: "Times a limit (coordinator.Limits) was reached: a request refused or waiting, a message truncated, updates coalesced, state forgotten.",
		}, []string{"limit"}),
	}
	reg.MustRegister(b.hits)
	return b
}

// hit counts a limit reached and logs the first time it is.
func (b *bounds) hit(limit string, msg string, attrs ...any) {
	b.hits.WithLabelValues(limit).Inc()
	if _, seen := b.logged.LoadOrStore(limit, struct{}{}); !seen {
		b.log.Warn(msg+" (logged once; slackline_coordinator_limit_hits_total counts every time)", append([]any{"limit", limit}, attrs...)...)
	}
}

// exhausted is the error of a request refused at a limit.
func exhausted(format string, args ...any) error {
	return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(format, args...))
}

// truncateStatusMessage cuts st.Message to limit bytes, marker included,
// at a character boundary. The kept part is copied, so that the request's
// long message can be freed. It reports whether it cut.
func truncateStatusMessage(st *slacklinev1.TaskStatus, limit int) bool {
	msg := st.GetMessage()
	if limit < 0 || len(msg) <= limit {
		return false
	}
	cut := limit - len(TruncatedMarker)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	st.Message = strings.Clone(msg[:max(cut, 0)]) + TruncatedMarker
	return true
}

// callLimiter bounds each caller's unary calls in progress
// (Limits.MaxConcurrentCallsPerCaller): a caller is its principal when
// calls are authenticated, else its connection.
func (c *Coordinator) callLimiter() *server.CallLimiter {
	return &server.CallLimiter{
		Limit: c.cfg.Limits.MaxConcurrentCallsPerCaller,
		Key: func(ctx context.Context, peer connect.Peer) string {
			if p := auth.FromContext(ctx); p != nil && p.Name != "" {
				return "principal:" + p.Name
			}
			return "connection:" + peer.Addr
		},
		OnWait: func(caller string) {
			c.bounds.hit("concurrent_calls", "a caller's call waits: it has as many calls in progress as it may", "caller", caller)
		},
	}
}

// maxPacedPrincipals bounds the principals principalRates keeps a limiter
// for: principals are certificates the operator issued, so this is far
// more than a cluster has; past it, limiters at rest (a full bucket, the
// state a new one starts in) are dropped first.
const maxPacedPrincipals = 100000

// principalRates paces an action per principal with a token bucket each
// (golang.org/x/time/rate), at most maxPacedPrincipals of them. Time is
// passed in, so tests use logical time. It is not safe for concurrent
// use: the coordinator calls it under its mu.
type principalRates struct {
	limit    rate.Limit
	burst    int
	max      int
	limiters map[string]*rate.Limiter
}

// newPrincipalRates paces perMinute actions a minute after a burst; a
// negative perMinute paces nothing (nil).
func newPrincipalRates(perMinute, burst int) *principalRates {
	if perMinute < 0 {
		return nil
	}
	return &principalRates{limit: rate.Limit(float64(perMinute) / 60), burst: max(burst, 1), max: maxPacedPrincipals,
		limiters: map[string]*rate.Limiter{}}
}

// allow takes one action of principal at now, reporting false, with how
// long until the next would be allowed, when it must wait.
func (r *principalRates) allow(principal string, now time.Time) (bool, time.Duration) {
	if r == nil {
		return true, 0
	}
	l := r.limiters[principal]
	if l == nil {
		if len(r.limiters) >= r.max {
			r.dropRested(now)
		}
		l = rate.NewLimiter(r.limit, r.burst)
		r.limiters[principal] = l
	}
	res := l.ReserveN(now, 1)
	if delay := res.DelayFrom(now); delay > 0 {
		res.CancelAt(now)
		return false, delay
	}
	return true, 0
}

// dropRested forgets the limiters with a full bucket (they know nothing a
// new one would not), or all of them if none is.
func (r *principalRates) dropRested(now time.Time) {
	for p, l := range r.limiters {
		if l.TokensAt(now) >= float64(r.burst) {
			delete(r.limiters, p)
		}
	}
	if len(r.limiters) >= r.max {
		clear(r.limiters)
	}
}
