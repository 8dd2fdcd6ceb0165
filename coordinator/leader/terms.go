package leader

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/backoff"
	"github.com/slackline/slackline/internal/server"
)

// Service is what one term of leadership runs: a coordinator, or another
// group's service (the job service's replicas use Terms too).
type Service struct {
	// Handler serves the term's requests while it holds.
	Handler http.Handler
	// Metrics are the term's own, served on /metrics with the replica's.
	Metrics prometheus.Gatherer
	// Run serves until its context (the term's) ends.
	Run func(ctx context.Context) error
	// Close, if set, releases the service after Run returned.
	Close func()
}

// TermsConfig configures Terms.
type TermsConfig struct {
	// Elector configures the election; its URL is the replica's advertised
	// URL.
	Elector ElectorConfig
	// Start builds the service of a term that began (typically: recover
	// its state from a store fenced on the term). An error ends the term:
	// the replica resigns and campaigns again after a backoff.
	Start func(term *Term, log *slog.Logger) (Service, error)
	// Metrics receives the replica's own metrics: LeaderMetric and
	// TermsMetric.
	Metrics *prometheus.Registry
	// LeaderMetric names the gauge that is 1 while the replica leads, e.g.
	// "slackline_coordinator_leader"; TermsMetric the counter of terms it
	// led, e.g. "slackline_coordinator_leader_terms_total".
	LeaderMetric, TermsMetric string
	// What names the replica in metric help texts and errors, e.g.
	// "coordinator".
	What string
	// Authz guards /metrics (nil: no authorization).
	Authz *auth.Authorizer
	// Pprof serves the replica's own Go runtime profiles
	// (server.MountPprof), leading or not, as /metrics is: a profile is
	// of the process asked, never the leader's in its stead.
	Pprof bool
}

// Terms is what every replica of a group does, whatever it serves: it
// campaigns, runs one term's Service at a time, and serves the term's
// handler while the term holds (every request ended with the term, every
// write of a response checked against it: gatedWriter), a follower's
// handler otherwise, and /metrics (and with Pprof the runtime profiles)
// in both cases.
type Terms struct {
	cfg     TermsConfig
	log     *slog.Logger
	elector *Elector
	local   http.Handler // /metrics, and the profiles with Pprof
	// serving is the current term and its service, nil while this
	// replica does not lead.
	serving atomic.Pointer[serving]
	terms   prometheus.Counter
}

type serving struct {
	term    *Term
	service Service
}

// NewTerms returns the terms runner of one replica.
func NewTerms(cfg TermsConfig) *Terms {
	if cfg.Elector.Logger == nil {
		cfg.Elector.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	t := &Terms{
		cfg:     cfg,
		log:     cfg.Elector.Logger,
		elector: NewElector(cfg.Elector),
		terms: prometheus.NewCounter(prometheus.CounterOpts{
			Name: cfg.TermsMetric, Help: fmt.Sprintf("Terms this %s led.", cfg.What),
		}),
	}
	cfg.Metrics.MustRegister(t.terms, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: cfg.LeaderMetric, Help: fmt.Sprintf("1 while this %s leads its group, else 0.", cfg.What),
	}, func() float64 {
		if t.leading() != nil {
			return 1
		}
		return 0
	}))
	gatherers := prometheus.Gatherers{cfg.Metrics, prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if s := t.serving.Load(); s != nil && s.service.Metrics != nil {
			return s.service.Metrics.Gather()
		}
		return nil, nil
	})}
	local := http.NewServeMux()
	local.Handle(auth.MetricsPath, promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{}))
	if cfg.Pprof {
		server.MountPprof(local)
	}
	t.local = cfg.Authz.Middleware(local)
	return t
}

// Leader returns the advertised URL of the group's leader as this replica
// knows it ("" while none is known).
func (t *Terms) Leader() string {
	if t.leading() != nil {
		return t.cfg.Elector.URL
	}
	if url := t.elector.Leader(); url != t.cfg.Elector.URL {
		return url
	}
	// Our own key, from a term that just ended: not a leader to send
	// anyone to.
	return ""
}

// Leading reports whether this replica leads now (its term holds).
func (t *Terms) Leading() bool { return t.leading() != nil }

// leading returns the current term if it still holds.
func (t *Terms) leading() *serving {
	if s := t.serving.Load(); s != nil && s.term.Valid() {
		return s
	}
	return nil
}

// Run campaigns and leads until ctx ends; then it resigns, so that
// another replica takes over without waiting for the lease to expire. It
// returns nil on cancellation.
func (t *Terms) Run(ctx context.Context) error {
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		t.elector.Observe(ctx)
	}()
	defer func() { <-observed }()
	retry := backoff.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	for {
		term, err := t.elector.Campaign(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			t.log.Warn("campaign for leadership failed", "err", err)
			retry.Wait(ctx)
			continue
		}
		retry.Reset()
		if err := t.lead(ctx, term); err != nil {
			t.log.Error("leading failed", "err", err)
			retry.Wait(ctx)
		}
	}
}

// lead runs one term's service until the term or ctx ends.
func (t *Terms) lead(ctx context.Context, term *Term) error {
	started := time.Now()
	termCtx := term.Context()
	log := t.log.With("term", term.Fence.Revision)
	svc, err := t.cfg.Start(term, log)
	if err != nil {
		term.Resign(context.WithoutCancel(ctx))
		return err
	}
	if svc.Close != nil {
		defer svc.Close()
	}
	t.terms.Inc()
	t.serving.Store(&serving{term: term, service: svc})
	log.Info("leading", "started_in", time.Since(started).Round(time.Millisecond), "fence", term.Fence.Key)
	runErr := svc.Run(termCtx)
	t.serving.Store(nil)
	if ctx.Err() != nil {
		term.Resign(context.WithoutCancel(ctx))
		log.Info("resigned leadership")
		return nil
	}
	log.Warn("leadership lost", "cause", context.Cause(termCtx), "run_err", runErr)
	term.Resign(ctx)
	return runErr
}

// Handler returns the replica's HTTP handler: the current term's handler
// while this replica leads (every byte it sends checked against the term,
// every request ended with it), follower otherwise, and /metrics (and
// with Pprof the runtime profiles) in both cases.
func (t *Terms) Handler(follower http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == auth.MetricsPath || t.cfg.Pprof && slices.Contains(server.PprofPaths, r.URL.Path) {
			t.local.ServeHTTP(w, r)
			return
		}
		s := t.leading()
		if s == nil {
			follower.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancelCause(r.Context())
		stop := context.AfterFunc(s.term.Context(), func() { cancel(ErrNotLeader) })
		defer stop()
		defer cancel(nil)
		gated := &gatedWriter{ResponseWriter: w, term: s.term}
		s.service.Handler.ServeHTTP(gated, r.WithContext(ctx))
		if gated.refused {
			// The response is incomplete: abort it (a reset stream) so
			// that no client takes what was written for a success.
			panic(http.ErrAbortHandler)
		}
	})
}

// gatedWriter passes a leader's response on only while its term holds. A
// leader whose process was paused past its lease may run any goroutine
// first when it resumes, before the timer that ends its term: checking
// the term before each write makes sure it sends nothing as leader
// (offers, commands, answers) once its lease may be another's. Store
// writes are refused by etcd itself (the fence).
type gatedWriter struct {
	http.ResponseWriter
	term    *Term
	refused bool
}

func (g *gatedWriter) allowed() bool {
	if !g.refused && !g.term.Valid() {
		g.refused = true
	}
	return !g.refused
}

func (g *gatedWriter) WriteHeader(code int) {
	if g.allowed() {
		g.ResponseWriter.WriteHeader(code)
	}
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	if !g.allowed() {
		return 0, ErrNotLeader
	}
	return g.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's other
// controls (the heartbeat stream lifts its read deadline through it);
// writes and flushes stay gated, since ResponseController finds Flush here
// first.
func (g *gatedWriter) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// Flush implements http.Flusher, which streaming responses need.
func (g *gatedWriter) Flush() {
	if g.allowed() {
		_ = http.NewResponseController(g.ResponseWriter).Flush()
	}
}
