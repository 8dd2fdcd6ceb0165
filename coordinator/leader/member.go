package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/slackline/slackline/coordinator"
	"github.com/slackline/slackline/coordinator/store"
	"github.com/slackline/slackline/internal/auth"
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
	terms    *Terms
	follower http.Handler
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
	log := cfg.Coordinator.Logger
	if log == nil {
		log = slog.Default()
	}
	m := &Member{cfg: cfg}
	m.terms = NewTerms(TermsConfig{
		Elector: ElectorConfig{Client: cfg.Client, Prefix: cfg.Prefix, URL: cfg.AdvertiseURL, TTL: cfg.LeaseTTL, Logger: log},
		Start:   m.start, Metrics: cfg.Metrics, LeaderMetric: "slackline_coordinator_leader", TermsMetric: "slackline_coordinator_leader_terms_total", What: "coordinator", Authz: cfg.Authz,
		Pprof: cfg.Coordinator.Pprof,
	})
	m.follower = m.followerHandler()
	return m, nil
}

// Leader returns the advertised URL of the group's leader as this member
// knows it ("" while none is known).
func (m *Member) Leader() string { return m.terms.Leader() }

// Run campaigns and leads until ctx ends; then it resigns, so that
// another member takes over without waiting for the lease to expire. It
// returns nil on cancellation.
func (m *Member) Run(ctx context.Context) error { return m.terms.Run(ctx) }

// start builds one term's coordinator: recovered from the registry, as
// after a restart, writing through a store fenced on the term.
func (m *Member) start(term *Term, log *slog.Logger) (Service, error) {
	cfg := m.cfg.Coordinator
	cfg.Store = store.NewEtcd(m.cfg.Client, store.EtcdOptions{
		Prefix: m.cfg.Prefix, Fence: term.Fence, Context: term.Context(),
		OnFenced: func() { term.End(store.ErrFenced) },
	})
	metrics := prometheus.NewRegistry()
	cfg.Metrics = metrics
	cfg.AdvertiseURL = m.cfg.AdvertiseURL
	cfg.Logger = log
	c, err := coordinator.New(cfg)
	if err != nil {
		return Service{}, fmt.Errorf("recover registry: %w", err)
	}
	return Service{Handler: c.Handler(), Metrics: metrics, Run: c.Run, Close: func() { _ = c.Close() }}, nil
}

// Handler returns the member's HTTP handler: the current term's
// coordinator handler while this member leads (every byte it sends
// checked against the term, every request ended with it), the follower
// handler otherwise, and /metrics in both cases.
func (m *Member) Handler() http.Handler { return m.terms.Handler(m.follower) }
