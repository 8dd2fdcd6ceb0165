package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slackline/slackline/coordinator/leader"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/backoff"
	"github.com/slackline/slackline/internal/protocol"
	"github.com/slackline/slackline/internal/server"
)

// MemberConfig configures a Member.
type MemberConfig struct {
	// Service configures the Service each term runs; its Store is set
	// per term (an EtcdStore fenced on the term).
	Service Config
	// Client is the etcd client the store and the election share
	// (store.DialEtcd); the caller closes it after Run returned.
	Client *clientv3.Client
	// Prefix is the group's key prefix (DefaultEtcdPrefix). It must differ
	// from the coordinators' (their registry and election are theirs).
	Prefix string
	// AdvertiseURL is the URL clients reach this replica at, named to
	// them by followers. Required.
	AdvertiseURL string
	// LeaseTTL is the leader lease's time to live (leader.DefaultTTL).
	LeaseTTL time.Duration
	// MaxTxnOps is the most mutations of one etcd transaction
	// (EtcdStoreOptions.MaxTxnOps).
	MaxTxnOps int
}

// Member is one replica of a highly available job service: replicas on
// one etcd prefix elect a leader (coordinator/leader's Elector: a lease,
// concurrency.Election, a local lease clock that ends the term before etcd
// can give the lease to another); the leader runs a Service on an
// EtcdStore fenced on its term, the others answer Unavailable and name the
// leader (protocol.LeaderHeader) until they lead.
//
// Each term is a restart: a new Service loads the store and subscribes as
// the stored framework id (a framework failover), reconciling the tasks
// the store says are launched. A deposed leader cannot write (etcd refuses
// its fenced transactions: it launches nothing unrecorded and
// acknowledges no update), and its calls to the coordinator are refused
// once the new leader subscribed (the coordinator knows one stream per
// framework).
type Member struct {
	cfg      MemberConfig
	log      *slog.Logger
	elector  *leader.Elector
	registry *prometheus.Registry
	metrics  http.Handler
	follower http.Handler
	serving  atomic.Pointer[memberTerm]
	terms    prometheus.Counter
}

// memberTerm is the Service of the current term.
type memberTerm struct {
	term    *leader.Term
	handler http.Handler
	metrics prometheus.Gatherer
}

// NewMember returns a replica of the group cfg describes.
func NewMember(cfg MemberConfig) (*Member, error) {
	if cfg.Client == nil {
		return nil, errors.New("job service group: no etcd client")
	}
	if cfg.AdvertiseURL == "" {
		return nil, errors.New("job service group: no advertise URL")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultEtcdPrefix
	}
	if cfg.Service.Logger == nil {
		cfg.Service.Logger = slog.Default()
	}
	cfg.Service.omitProcessMetrics = true
	m := &Member{
		cfg: cfg,
		log: cfg.Service.Logger,
		elector: leader.NewElector(leader.ElectorConfig{
			Client: cfg.Client, Prefix: cfg.Prefix, URL: cfg.AdvertiseURL, TTL: cfg.LeaseTTL, Logger: cfg.Service.Logger,
		}),
		registry: prometheus.NewRegistry(),
		terms: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "slackline_jobs_leader_terms_total", Help: "Terms this job service replica led.",
		}),
	}
	m.registry.MustRegister(m.terms, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "slackline_jobs_leader", Help: "1 while this job service replica leads its group, else 0.",
	}, func() float64 {
		if m.leading() != nil {
			return 1
		}
		return 0
	}), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gatherers := prometheus.Gatherers{m.registry, prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		if t := m.serving.Load(); t != nil {
			return t.metrics.Gather()
		}
		return nil, nil
	})}
	m.metrics = cfg.Service.Authz.Middleware(promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{}))
	m.follower = m.followerHandler()
	return m, nil
}

// leading returns the current term while it certainly holds.
func (m *Member) leading() *memberTerm {
	if t := m.serving.Load(); t != nil && t.term.Valid() {
		return t
	}
	return nil
}

// Leader returns the advertised URL of the group's leader as this replica
// knows it ("" while none is known).
func (m *Member) Leader() string {
	if m.leading() != nil {
		return m.cfg.AdvertiseURL
	}
	if url := m.elector.Leader(); url != m.cfg.AdvertiseURL {
		return url
	}
	return "" // our own key, from a term that just ended
}

// Run campaigns and leads until ctx ends, then resigns so that another
// replica takes over at once. It returns nil on cancellation.
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

// lead runs one term: a Service loaded from the store and writing through
// it fenced on the term, until the term or ctx ends.
func (m *Member) lead(ctx context.Context, term *leader.Term) error {
	started := time.Now()
	termCtx := term.Context()
	cfg := m.cfg.Service
	cfg.Logger = m.log.With("term", term.Fence.Revision)
	cfg.Store = NewEtcdStore(m.cfg.Client, EtcdStoreOptions{
		Prefix: m.cfg.Prefix, Fence: term.Fence, Context: termCtx, MaxTxnOps: m.cfg.MaxTxnOps,
		OnFenced: func() { term.End(ErrFenced) },
	})
	svc, err := New(cfg)
	if err != nil {
		term.Resign(context.WithoutCancel(ctx))
		return fmt.Errorf("load the job store: %w", err)
	}
	m.terms.Inc()
	m.serving.Store(&memberTerm{term: term, handler: svc.Handler(), metrics: svc.registry})
	cfg.Logger.Info("leading the job service group", "loaded_in", time.Since(started).Round(time.Millisecond), "fence", term.Fence.Key)
	runErr := svc.Run(termCtx)
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

// Handler serves the current term's Service while this replica leads
// (each request ended with the term), the follower's answers otherwise,
// and /metrics in both cases (the replica's own metrics, and the term's).
func (m *Member) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == auth.MetricsPath {
			m.metrics.ServeHTTP(w, r)
			return
		}
		t := m.leading()
		if t == nil {
			m.follower.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancelCause(r.Context())
		stop := context.AfterFunc(t.term.Context(), func() { cancel(leader.ErrNotLeader) })
		defer stop()
		defer cancel(nil)
		t.handler.ServeHTTP(w, r.WithContext(ctx))
	})
}

// followerHandler refuses every JobService call with Unavailable naming
// the leader, in the message and in protocol.LeaderHeader (which
// internal/leaderclient follows); its health check answers NOT_SERVING, so
// that a readiness probe sends a Service's traffic to the leader only.
func (m *Member) followerHandler() http.Handler {
	opts := append(server.HandlerOptions(), connect.WithInterceptors(followerRefusal{m}))
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewJobServiceHandler(slacklinev1connect.UnimplementedJobServiceHandler{}, opts...))
	health := grpchealth.NewStaticChecker(slacklinev1connect.JobServiceName)
	health.SetStatus("", grpchealth.StatusNotServing)
	health.SetStatus(slacklinev1connect.JobServiceName, grpchealth.StatusNotServing)
	mux.Handle(grpchealth.NewHandler(health, server.HandlerOptions()...))
	authorized := m.cfg.Service.Authz.Middleware(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaderURL := m.Leader()
		w.Header().Set(protocol.LeaderHeader, leaderURL)
		if strings.HasPrefix(r.URL.Path, "/ui/") {
			http.Error(w, m.notLeader(leaderURL).Error(), http.StatusServiceUnavailable)
			return
		}
		authorized.ServeHTTP(w, r)
	})
}

// notLeader is the error of every call a follower refuses.
func (m *Member) notLeader(leaderURL string) *connect.Error {
	if leaderURL == "" {
		return connect.NewError(connect.CodeUnavailable, errors.New("this job service replica is not the leader and no leader is elected yet"))
	}
	return connect.NewError(connect.CodeUnavailable, fmt.Errorf("this job service replica is not the leader; the leader is %s", leaderURL))
}

// followerRefusal refuses every call with Unavailable.
type followerRefusal struct{ m *Member }

func (f followerRefusal) WrapUnary(connect.UnaryFunc) connect.UnaryFunc {
	return func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
		return nil, f.m.notLeader(f.m.Leader())
	}
}

func (followerRefusal) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (f followerRefusal) WrapStreamingHandler(connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(context.Context, connect.StreamingHandlerConn) error {
		return f.m.notLeader(f.m.Leader())
	}
}
