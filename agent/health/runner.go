package health

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// Defaults of RunnerConfig.
const (
	// DefaultMaxConcurrentChecks bounds the checks in flight on an agent.
	DefaultMaxConcurrentChecks = 64
	// deferDelay is how long a check that found no free slot waits.
	deferDelay = 100 * time.Millisecond
)

// Prober runs one check; *Probes implements it.
type Prober interface {
	// Probe runs one check; paused reports that the task was paused and
	// the check did not run (neither a success nor a failure).
	Probe(ctx context.Context, containerID string, policy Policy) (ok bool, detail string, paused bool)
}

// RunnerConfig configures a Runner.
type RunnerConfig struct {
	Prober Prober
	// Decide receives every decision that reports a change of health or a
	// kill, on a goroutine of the runner; it must not block for long.
	Decide func(containerID string, d Decision)
	// MaxConcurrentChecks bounds the checks in flight (default
	// DefaultMaxConcurrentChecks); a due check finding none free waits
	// 100 ms, counted by slackline_health_checks_deferred_total.
	MaxConcurrentChecks int
	Now                 func() time.Time
	Logger              *slog.Logger
}

// Runner checks the health of the tasks it watches: one timer for the
// earliest due check, each check on a goroutine of its own within its
// timeout, at most MaxConcurrentChecks at once. Its mutex guards the
// checkers and is never held during a probe.
type Runner struct {
	cfg   RunnerConfig
	slots chan struct{}
	wake  chan struct{}

	mu       sync.Mutex
	checkers map[string]*Checker
	policies map[string]Policy

	checks   *prometheus.CounterVec
	deferred prometheus.Counter
	kills    prometheus.Counter
	watched  prometheus.GaugeFunc
	inflight sync.WaitGroup
}

// NewRunner returns a runner watching nothing.
func NewRunner(cfg RunnerConfig) *Runner {
	if cfg.MaxConcurrentChecks <= 0 {
		cfg.MaxConcurrentChecks = DefaultMaxConcurrentChecks
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Runner{cfg: cfg, slots: make(chan struct{}, cfg.MaxConcurrentChecks), wake: make(chan struct{}, 1),
		checkers: map[string]*Checker{}, policies: map[string]Policy{}}
	r.checks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "slackline_health_checks_total", Help: "Health checks run, by type (command, http, tcp) and result (ok, failed, paused: the task was frozen by QoS and the check did not run).",
	}, []string{"type", "result"})
	r.deferred = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "slackline_health_checks_deferred_total", Help: "Due health checks put off because the agent's bound of checks in flight was reached.",
	})
	r.kills = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "slackline_health_check_kills_total", Help: "Tasks killed for failing their health check.",
	})
	r.watched = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "slackline_health_checked_tasks", Help: "Tasks whose health the agent checks.",
	}, func() float64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return float64(len(r.checkers))
	})
	return r
}

// Collectors returns the runner's metrics.
func (r *Runner) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.checks, r.deferred, r.kills, r.watched}
}

// Watch starts checking a container's task, which started running at
// started. Watching a container again replaces its checker.
func (r *Runner) Watch(containerID string, p Policy, started time.Time) {
	r.mu.Lock()
	r.checkers[containerID] = NewChecker(p, started)
	r.policies[containerID] = p
	r.mu.Unlock()
	r.poke()
}

// Forget stops checking a container; a check in flight is ignored.
func (r *Runner) Forget(containerID string) {
	r.mu.Lock()
	delete(r.checkers, containerID)
	delete(r.policies, containerID)
	r.mu.Unlock()
}

func (r *Runner) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run starts due checks until ctx ends, then waits for those in flight.
func (r *Runner) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	defer r.inflight.Wait()
	for {
		next := r.startDue(ctx)
		wait := time.Hour
		if !next.IsZero() {
			wait = max(next.Sub(r.cfg.Now()), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-r.wake:
		}
	}
}

// startDue starts every due check that finds a slot and returns when the
// next one is due (zero: none).
func (r *Runner) startDue(ctx context.Context) time.Time {
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var next time.Time
	for id, c := range r.checkers {
		if c.Due(now) {
			select {
			case r.slots <- struct{}{}:
				c.Start(now)
				r.inflight.Add(1)
				go r.check(ctx, id, c, r.policies[id])
			default:
				c.Defer(now, deferDelay)
				r.deferred.Inc()
			}
		}
		if n := c.Next(); !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	return next
}

func (r *Runner) check(ctx context.Context, id string, c *Checker, p Policy) {
	defer r.inflight.Done()
	checkCtx, cancel := context.WithTimeout(ctx, p.Timeout)
	ok, detail, paused := r.cfg.Prober.Probe(checkCtx, id, p)
	if !ok && checkCtx.Err() != nil && ctx.Err() == nil {
		detail = "timed out after " + p.Timeout.String() + ": " + detail
	}
	cancel()
	<-r.slots
	if ctx.Err() != nil {
		return
	}
	result := "ok"
	switch {
	case paused:
		result = "paused"
	case !ok:
		result = "failed"
	}
	r.checks.WithLabelValues(typeLabel(p), result).Inc()
	r.mu.Lock()
	if r.checkers[id] != c {
		r.mu.Unlock()
		return // forgotten or replaced meanwhile
	}
	if paused {
		c.Skip(r.cfg.Now())
		r.mu.Unlock()
		r.poke()
		return
	}
	d := c.Result(r.cfg.Now(), ok, detail)
	r.mu.Unlock()
	if d.Kill {
		r.kills.Inc()
		r.cfg.Logger.Warn("task failed its health check; killing it", "container", id, "message", d.Message)
	}
	if d.Report || d.Kill {
		r.cfg.Decide(id, d)
	}
	r.poke()
}

func typeLabel(p Policy) string {
	switch p.Type {
	case slacklinev1.HealthCheck_TYPE_COMMAND:
		return "command"
	case slacklinev1.HealthCheck_TYPE_HTTP:
		return "http"
	case slacklinev1.HealthCheck_TYPE_TCP:
		return "tcp"
	}
	return "unknown"
}
