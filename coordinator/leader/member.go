package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slackline/slackline/coordinator"
	"github.com/slackline/slackline/coordinator/store"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/backoff"
)

// ErrNotLeader ends the requests a leader was serving when its term ends.
var ErrNotLeader = errors.New("this coordinator is no longer the leader")

// Config configures a Member.
type Config struct {
	// Coordinator configures the coordinator each term runs. Store,
	// Metrics and AdvertiseURL are set per term; its Logger is the
	// member's too.
	Coordinator coordinator.Config
	// Authz authenticates and authorizes what followers serve and
	// /metrics (nil: no authorization); give the coordinator the same.
	Authz *auth.Authorizer
	// Client is the etcd client that the registry and the election share
	// (store.DialEtcd). The caller closes it after Run returned.
	Client *clientv3.Client
	// Prefix is the group's key prefix in etcd (store.DefaultEtcdPrefix).
	Prefix string
	// AdvertiseURL is the URL clients reach this member at. Required.
	AdvertiseURL string
	// LeaseTTL is the leader lease's time to live (DefaultTTL): how long
	// the group waits for a leader that stopped answering.
	LeaseTTL time.Duration
	// Metrics receives the member's own metrics; /metrics serves them with
	// the current term's coordinator metrics (default: a new registry).
	Metrics *prometheus.Registry
}

// Member is one coordinator of a group: it campaigns for leadership, runs
// a coordinator while it leads and answers as a follower otherwise.
// Create it with NewMember, serve Handler, drive it with Run.
type Member struct {
	cfg      Config
	log      *slog.Logger
	elector  *Elector
	follower http.Handler
	metrics  http.Handler
	// serving is the current term and its coordinator's handler, nil
	// while this member does not lead.
	serving atomic.Pointer[serving]
	terms   prometheus.Counter
}

type serving struct {
	term    *Term
	handler http.Handler
	metrics *prometheus.Registry
}

// NewMember returns a member of the group cfg describes.
func NewMember(cfg Config) (*Member, error) {
	if cfg.Client == nil {
		return nil, errors.New("leader: no etcd client")
	}
	if cfg.AdvertiseURL == "" {
		return nil, errors.New("leader: no advertise URL")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = store.DefaultEtcdPrefix
	}
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	log := cfg.Coordinator.Logger
	if log == nil {
		log = slog.Default()
	}
	m := &Member{
		cfg: cfg,
		log: log,
		elector: NewElector(ElectorConfig{
			Client: cfg.Client, Prefix: cfg.Prefix, URL: cfg.AdvertiseURL, TTL: cfg.LeaseTTL, Logger: log,
		}),
		terms: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slackline_coordinator_leader_terms_total", Help: "Terms this coordinator led.",
		}),
	}
	cfg.Metrics.MustRegister(m.terms, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "slackline_coordinator_leader", Help: "1 while this coordinator leads its group, else 0.",
	}, func() float64 {
		if m.leading() != nil {
			return 1
		}
		return 0
	}))
	gatherers := prometheus.Gatherers{cfg.Metrics, prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if s := m.serving.Load(); s != nil {
			return s.metrics.Gather()
		}
		return nil, nil
	})}
	m.metrics = cfg.Authz.Middleware(promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{}))
	m.follower = m.followerHandler()
	return m, nil
}

// Leader returns the advertised URL of the group's leader as this member
// knows it ("" while none is known).
func (m *Member) Leader() string {
	if m.leading() != nil {
		return m.cfg.AdvertiseURL
	}
	if url := m.elector.Leader(); url != m.cfg.AdvertiseURL {
		return url
	}
	// Our own key, from a term that just ended: not a leader to send
	// anyone to.
	return ""
}

// leading returns the current term if it still holds.
func (m *Member) leading() *serving {
	if s := m.serving.Load(); s != nil && s.term.Valid() {
		return s
	}
	return nil
}

// Run campaigns and leads until ctx ends; then it resigns, so that
// another member takes over without waiting for the lease to expire. It
// returns nil on cancellation.
func (m *Member) Run(ctx context.Context) error {
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		m.elector.Observe(ctx)
	}()
	defer func() { <-observed }()
	retry := backoff.Backoff{Min: 200 * time.Millisecond, Max: 5 * time.Second}
	for {
		term, err := m.elector.Campaign(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			m.log.Warn("campaign for leadership failed", "err", err)
			retry.Wait(ctx)
			continue
		}
		retry.Reset()
		if err := m.lead(ctx, term); err != nil {
			m.log.Error("leading failed", "err", err)
			retry.Wait(ctx)
		}
	}
}

// lead runs one term: a coordinator recovered from the registry, as after
// a restart, that writes through a store fenced on the term and serves
// until the term ends.
func (m *Member) lead(ctx context.Context, term *Term) error {
	started := time.Now()
	termCtx := term.Context()
	cfg := m.cfg.Coordinator
	cfg.Store = store.NewEtcd(m.cfg.Client, store.EtcdOptions{
		Prefix: m.cfg.Prefix, Fence: term.Fence, Context: termCtx,
		OnFenced: func() { term.End(store.ErrFenced) },
	})
	cfg.Metrics = prometheus.NewRegistry()
	cfg.AdvertiseURL = m.cfg.AdvertiseURL
	cfg.Logger = m.log.With("term", term.Fence.Revision)
	c, err := coordinator.New(cfg)
	if err != nil {
		term.Resign(context.WithoutCancel(ctx))
		return fmt.Errorf("recover registry: %w", err)
	}
	defer c.Close()
	m.terms.Inc()
	m.serving.Store(&serving{term: term, handler: c.Handler(), metrics: cfg.Metrics})
	cfg.Logger.Info("leading", "recovered_in", time.Since(started).Round(time.Millisecond), "fence", term.Fence.Key)
	runErr := c.Run(termCtx)
	m.serving.Store(nil)
	if ctx.Err() != nil {
		term.Resign(context.WithoutCancel(ctx))
		cfg.Logger.Info("resigned leadership")
		return nil
	}
	cfg.Logger.Warn("leadership lost", "cause", context.Cause(termCtx), "run_err", runErr)
	term.Resign(ctx)
	return runErr
}

// Handler returns the member's HTTP handler: the current term's
// coordinator handler while this member leads (every byte it sends
// checked against the term, every request ended with it), the follower
// handler otherwise, and /metrics in both cases.
func (m *Member) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == auth.MetricsPath {
			m.metrics.ServeHTTP(w, r)
			return
		}
		s := m.leading()
		if s == nil {
			m.follower.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancelCause(r.Context())
		stop := context.AfterFunc(s.term.Context(), func() { cancel(ErrNotLeader) })
		defer stop()
		defer cancel(nil)
		gated := &gatedWriter{ResponseWriter: w, term: s.term}
		s.handler.ServeHTTP(gated, r.WithContext(ctx))
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
// (offers, commands, answers) once its lease may be another's. Registry
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

// Flush implements http.Flusher, which streaming responses need.
func (g *gatedWriter) Flush() {
	if g.allowed() {
		_ = http.NewResponseController(g.ResponseWriter).Flush()
	}
}
