package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slackline/slackline/coordinator/leader"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
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
// one etcd prefix elect a leader (coordinator/leader's Terms, as the
// coordinators do: a lease, concurrency.Election, a local lease clock that
// ends the term before etcd can give the lease to another, every answer
// checked against the term before it is written); the leader runs a Service on an
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
	terms    *leader.Terms
	registry *prometheus.Registry
	follower http.Handler
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
	m := &Member{cfg: cfg, registry: prometheus.NewRegistry()}
	m.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.terms = leader.NewTerms(leader.TermsConfig{
		Elector: leader.ElectorConfig{
			Client: cfg.Client, Prefix: cfg.Prefix, URL: cfg.AdvertiseURL, TTL: cfg.LeaseTTL, Logger: cfg.Service.Logger,
		},
		Start: m.start, Metrics: m.registry, LeaderMetric: "slackline_jobs_leader", TermsMetric: "slackline_jobs_leader_terms_total", What: "job service replica",
		Authz: cfg.Service.Authz,
	})
	m.follower = m.followerHandler()
	return m, nil
}

// Leader returns the advertised URL of the group's leader as this replica
// knows it ("" while none is known).
func (m *Member) Leader() string { return m.terms.Leader() }

// Run campaigns and leads until ctx ends, then resigns so that another
// replica takes over at once. It returns nil on cancellation.
func (m *Member) Run(ctx context.Context) error { return m.terms.Run(ctx) }

// start builds one term's Service: loaded from the store and writing
// through it fenced on the term.
func (m *Member) start(term *leader.Term, log *slog.Logger) (leader.Service, error) {
	cfg := m.cfg.Service
	cfg.Logger = log
	cfg.Store = NewEtcdStore(m.cfg.Client, EtcdStoreOptions{
		Prefix: m.cfg.Prefix, Fence: term.Fence, Context: term.Context(), MaxTxnOps: m.cfg.MaxTxnOps,
		OnFenced: func() { term.End(ErrFenced) },
	})
	svc, err := New(cfg)
	if err != nil {
		return leader.Service{}, fmt.Errorf("load the job store: %w", err)
	}
	return leader.Service{Handler: svc.Handler(), Metrics: svc.registry, Run: svc.Run}, nil
}

// Handler serves the current term's Service while this replica leads
// (each request ended with the term, each write of its answers checked
// against it), the follower's answers otherwise, and /metrics in both
// cases (the replica's own metrics, and the term's).
func (m *Member) Handler() http.Handler { return m.terms.Handler(m.follower) }

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
