package coordinator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/slackline/slackline/coordinator/core"
	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/internal/auth"
	"github.com/slackline/slackline/internal/ids"
	"github.com/slackline/slackline/resources"
)

// Config configures a Coordinator. Zero fields take the documented defaults.
type Config struct {
	// WorkDir holds the registry (registry.db, see store.Open). Required unless Store is set.
	WorkDir string
	// Store overrides the registry store (default: registry.db in WorkDir).
	Store store.Store
	// Logger receives the coordinator's logs (default slog.Default()).
	Logger *slog.Logger
	// Metrics is where the coordinator registers its metrics (default: a
	// private registry, exposed by MetricsRegistry).
	Metrics *prometheus.Registry

	// AgentHeartbeatInterval is the interval agents are told to heartbeat
	// at while they fit MaxAgentHeartbeatRate (default 5 s).
	AgentHeartbeatInterval time.Duration
	// MaxAgentHeartbeatRate is the heartbeat budget: beyond this many
	// agents per second of AgentHeartbeatInterval, agents are told a
	// longer interval, agents/rate (default 1,000 a second; negative: no
	// budget). See the heartbeat pace in coordinator/core (pace.go).
	MaxAgentHeartbeatRate int
	// AgentTimeout: an agent silent this long becomes UNREACHABLE
	// (default 30 s), at AgentHeartbeatInterval; a longer interval
	// stretches it in proportion.
	AgentTimeout time.Duration
	// AgentReregisterTimeout: after a restart, agents from the registry that
	// have not re-registered within this time become UNREACHABLE (default 2 min).
	AgentReregisterTimeout time.Duration
	// FrameworkHeartbeatInterval is the heartbeat event interval (default 15 s).
	FrameworkHeartbeatInterval time.Duration
	// AllocationInterval is the period of full allocation passes (default 1 s).
	AllocationInterval time.Duration
	// RolloutInterval is how often Run judges the profile rollouts under
	// way, at Now's time (default 1 s; negative: never, and the embedding
	// program judges them with JudgeRollouts at the times it chooses, as
	// tests on logical time do).
	RolloutInterval time.Duration
	// AllocationBatch is the least time between two event-triggered
	// allocation passes: events within it of the last pass wait for the
	// next one, batched (default 1 ms).
	AllocationBatch time.Duration
	// OfferTimeout rescinds offers outstanding this long (default 10 min;
	// negative: never), so that resources a framework sits on return to
	// the others.
	OfferTimeout time.Duration
	// MinAllocatable is the smallest bundle worth offering (default cpus:0.01 or mem:32).
	MinAllocatable resources.Resources
	// Limits bound what the coordinator accepts and keeps (limits.go).
	Limits Limits
	// AutoDownAfterAccept takes a DRAINING machine DOWN without an operator
	// once its window has started and every framework with tasks on it
	// accepted its inverse offers, unless that would leave a framework below
	// its FrameworkInfo.min_available_tasks (default false: only
	// StartMaintenance takes machines DOWN).
	AutoDownAfterAccept bool
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Authz authenticates and authorizes callers (nil: no authorization,
	// for loopback and tests; see internal/auth).
	Authz *auth.Authorizer
	// AgentTLS is how the live view's proxy (/ui/) reaches agents: the
	// cluster's CA, and the coordinator's own client certificate
	// (coordinator-client.crt), which agents accept for the node view's
	// read-only calls only; the caller's token is never forwarded (see
	// coordinator/ui). With it only https endpoints are reached; with
	// Config.Authz's CRL their serving certificates are checked too. Nil:
	// the system's roots, no identity.
	AgentTLS *tls.Config
	// AdvertiseURL is the URL clients reach this coordinator at; GetState
	// reports it as leader_url (see coordinator/leader for groups).
	AdvertiseURL string
	// Pprof serves the Go runtime's profiles at /debug/pprof/ (--pprof;
	// authorized as debug_processes).
	Pprof bool
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = prometheus.NewRegistry()
	}
	setDefault(&c.AgentHeartbeatInterval, 5*time.Second)
	setDefault(&c.AgentTimeout, 30*time.Second)
	setLimitDefault(&c.MaxAgentHeartbeatRate, 1000)
	setDefault(&c.AgentReregisterTimeout, 2*time.Minute)
	setDefault(&c.FrameworkHeartbeatInterval, 15*time.Second)
	setDefault(&c.AllocationInterval, time.Second)
	setDefault(&c.AllocationBatch, time.Millisecond)
	setLimitDefault(&c.RolloutInterval, profileRolloutTick)
	if c.MinAllocatable.IsEmpty() {
		c.MinAllocatable = resources.New(0.01, 32, 0)
	}
	setLimitDefault(&c.OfferTimeout, 10*time.Minute)
	c.Limits.setDefaults()
	if c.Now == nil {
		c.Now = time.Now
	}
}

func setDefault[T int | time.Duration](field *T, value T) {
	if *field <= 0 {
		*field = value
	}
}

// Coordinator is the cluster coordinator. Create it with New.
type Coordinator struct {
	cfg     Config
	log     *slog.Logger
	store   store.Store
	metrics *metrics
	// heartbeats counts the agents' heartbeats accepted, by transport
	// (liveness_metrics.go).
	heartbeats heartbeatCounter
	bounds     *bounds

	// kick wakes the allocation loop; buffered with capacity 1.
	kick chan struct{}
	// frameworkHeartbeats and agentPings pace the keepalives of all
	// subscriptions and all agents' command streams (one timer each).
	frameworkHeartbeats, agentPings *pulse
	// storeFailed receives the first registry error that needs a reopen
	// (store.ErrFailed): Run returns it, so the process exits and its
	// supervisor restarts it.
	storeFailed chan error
	// subscriber runs subscriptions off their handlers' stacks, several
	// at once (flow.go).
	subscriber offStack
	// mu, the one lock over the shell's state: see "Locks and
	// persistence" in doc.go.
	mu sync.Mutex
	// turns orders the ordered changes (order.go). Guarded by mu.
	turns turns
	// registrationAfter is closed when the last applied registration's
	// after-apply records (core Ready.After) are written: the next one
	// waits on it, so that they land in the order registrations apply
	// (registration.go). Nil: none pending. Guarded by mu.
	registrationAfter chan struct{}

	// core is the offer book: the allocator, offers, inverse offers and
	// filters (package coordinator/core). Its calls return effects that
	// deliver performs.
	core   *core.Core
	agents map[string]*agent
	// hosts indexes agents by hostKey (registration.go: one host, one
	// live agent).
	hosts      map[string][]*agent
	frameworks map[string]*framework
	// profiles are the node profiles, the agents' reports of them and
	// what was sent to each (profiles.go, #29).
	profiles profileBook
	// fullPass asks for a full allocation pass at the next wake-up.
	fullPass bool
	// nextHistorySweep keeps the timer loop from visiting every agent on
	// each tick (liveness.go).
	nextHistorySweep time.Time

	// stopping is set when Run ends, so closing streams is not taken for
	// frameworks disconnecting.
	stopping   bool
	instanceID string
	startedAt  time.Time
	// launchKey makes and verifies launch proofs (see trust.go).
	launchKey *launchMAC
	// registrations rate-limits agent registrations per principal
	// (limits.go).
	registrations *principalRates
	// subscriptions counts the live Subscribe streams per caller key
	// (Limits.MaxSubscriptionsPerPrincipal).
	subscriptions map[string]int
}

// New creates a coordinator and loads its registry.
func New(cfg Config) (*Coordinator, error) {
	cfg.setDefaults()
	st := cfg.Store
	if st == nil {
		if cfg.WorkDir == "" {
			return nil, errors.New("coordinator: WorkDir is required")
		}
		var err error
		st, err = store.Open(cfg.WorkDir, 5*time.Second, cfg.Logger)
		if err != nil {
			return nil, err
		}
	}
	instanceID, startedAt := ids.New()[:8], cfg.Now()
	c := &Coordinator{
		cfg:         cfg,
		log:         cfg.Logger,
		store:       st,
		kick:        make(chan struct{}, 1),
		storeFailed: make(chan error, 1),
		core: core.New(core.Config{
			MinAllocatable: cfg.MinAllocatable, OfferTimeout: cfg.OfferTimeout, IDPrefix: instanceID,
			HeartbeatInterval: cfg.AgentHeartbeatInterval, AgentTimeout: cfg.AgentTimeout, MaxHeartbeatRate: float64(cfg.MaxAgentHeartbeatRate),
			Start: startedAt, ReregisterTimeout: cfg.AgentReregisterTimeout, MaxPendingUpdates: cfg.Limits.MaxPendingUpdatesPerFramework,
			MaxCompletedTasks: cfg.Limits.MaxCompletedTasksPerFramework,
		}),
		agents:        map[string]*agent{},
		frameworks:    map[string]*framework{},
		instanceID:    instanceID,
		startedAt:     startedAt,
		hosts:         map[string][]*agent{},
		subscriptions: map[string]int{},
		registrations: newPrincipalRates(cfg.Limits.AgentRegistrationsPerMinute, cfg.Limits.AgentRegistrationBurst),
	}
	c.frameworkHeartbeats, c.agentPings = newPulse(cfg.FrameworkHeartbeatInterval), newPulse(agentPingInterval)
	err := c.recover(context.Background())
	if err == nil {
		var key []byte
		key, err = loadLaunchKey(context.Background(), st)
		c.launchKey = newLaunchMAC(key)
	}
	if err != nil {
		if cfg.Store == nil {
			st.Close()
		}
		return nil, fmt.Errorf("recover registry: %w", err)
	}
	c.metrics = newMetrics(c, cfg.Metrics)
	c.heartbeats = newHeartbeatCounter(cfg.Metrics)
	c.bounds = newBounds(c.log, cfg.Metrics)
	c.subscriber.full = func() {
		c.bounds.hit("subscriber_goroutines", "a subscription waits for a subscriber goroutine: as many subscriptions as run at once are under way")
	}
	return c, nil
}

// MetricsRegistry returns the registry holding the coordinator's metrics.
func (c *Coordinator) MetricsRegistry() *prometheus.Registry { return c.cfg.Metrics }

// Close releases the registry store. Call it after Run returned.
func (c *Coordinator) Close() error { return c.store.Close() }

// Run drives allocation and timers until ctx is cancelled. It returns nil
// on cancellation.
func (c *Coordinator) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.runAllocation(ctx) })
	g.Go(func() error { return c.runTimers(ctx) })
	g.Go(func() error { return c.runProfiles(ctx) })
	g.Go(func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-c.storeFailed:
			c.log.Error("registry failed: stopping, to be restarted and recover it", "err", err)
			return fmt.Errorf("registry: %w", err)
		}
	})
	err := g.Wait()
	c.shutdownStreams()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// shutdownStreams ends every subscription and agent session so that
// handlers return promptly when the coordinator stops. It takes c.mu.
func (c *Coordinator) shutdownStreams() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopping = true
	for _, fw := range c.frameworks {
		if fw.sub != nil {
			fw.sub.end(errors.New("coordinator shutting down"))
		}
	}
	for _, a := range c.agents {
		if a.session != nil {
			a.session.end(errSessionEnded)
		}
	}
}

// deliver performs the effects of a core call: it queues the events on
// the frameworks' subscriptions in order (queues never block; streams
// send from their own goroutines, without c.mu), counts them, and wakes
// the allocation loop when the core asks for a pass. Caller holds c.mu.
func (c *Coordinator) deliver(r core.Ready) {
	if len(r.Persist) > 0 || !r.Apply.IsZero() || len(r.After) > 0 || len(r.Forgotten) > 0 {
		// A persist step's sends wait for its records (step); records
		// that follow a change (After) are the caller's to write.
		panic("coordinator: deliver of a Ready with records to persist; use step")
	}
	for _, u := range r.Unqueue {
		if fw := c.frameworks[u.FrameworkID]; fw != nil && fw.sub != nil {
			fw.sub.edit(key("pending", u.TaskID, u.UUID), func(*slacklinev1.Event) bool { return false })
		}
	}
	for _, s := range r.Events {
		fw := c.frameworks[s.FrameworkID]
		switch {
		case fw == nil:
		case s.Event.GetUpdate() != nil:
			// The core's updates carry the task's state; a framework that
			// is not partition-aware gets LOST for the partition states.
			fw.send(updateEvent(fw, s.Event.GetUpdate().GetStatus()))
		default:
			fw.send(s.Event)
		}
	}
	for _, cmd := range r.Commands {
		if a := c.agents[cmd.AgentID]; a != nil {
			a.send(cmd.Command)
		}
	}
	if n := r.Counts; n != (core.Counts{}) {
		c.metrics.offersSent.Add(float64(n.OffersSent))
		c.metrics.offersRescinded.Add(float64(n.OffersRescinded))
		c.metrics.revocableRescinded.Add(float64(n.RevocableRescinded))
		c.metrics.inverseOffersSent.Add(float64(n.InverseOffersSent))
	}
	for _, al := range r.Strays {
		c.log.Warn("allocation to an unknown or disconnected target", "framework", al.FrameworkID, "agent", al.AgentID)
	}
	for _, id := range r.TrimmedHistory {
		c.bounds.hit("completed_tasks", "the oldest completed tasks of a framework were forgotten", "framework", id)
	}
	if r.Wake {
		c.wake()
	}
}

func (c *Coordinator) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// runAllocation runs a full pass every AllocationInterval and an event
// pass on each kick: at once when no pass ended within the last
// AllocationBatch, else when that much time has passed since the last one,
// so that the burst of events that usually follows one is batched into the
// next pass and passes come at most one per AllocationBatch, while an
// event after a quiet spell waits for nothing.
func (c *Coordinator) runAllocation(ctx context.Context) error {
	full := time.NewTicker(c.cfg.AllocationInterval)
	defer full.Stop()
	var last time.Time // when the last pass ended
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-full.C:
			c.mu.Lock()
			c.fullPass = true
			c.mu.Unlock()
		case <-c.kick:
			if wait := c.cfg.AllocationBatch - time.Since(last); wait > 0 {
				timer := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					timer.Stop()
					return ctx.Err()
				case <-timer.C:
				}
			}
		}
		c.allocateOnce()
		last = time.Now()
	}
}

// allocateOnce runs one allocation pass over the dirty agents (or all)
// and sends the resulting offers, then the inverse offers. It takes c.mu.
func (c *Coordinator) allocateOnce() {
	c.mu.Lock()
	defer c.mu.Unlock()
	full := c.fullPass
	c.fullPass = false
	start := time.Now()
	r, pass := c.core.Allocate(c.cfg.Now(), full, c.core.DrainingUsers())
	if pass == core.NoPass {
		return
	}
	kind := "event"
	if pass == core.FullPass {
		kind = "full"
	}
	c.metrics.allocationSeconds.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	c.deliver(r)
}

func (c *Coordinator) runTimers(ctx context.Context) error {
	tick := time.NewTicker(c.timerPeriod())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			c.checkTimeouts(ctx)
			if c.cfg.AutoDownAfterAccept {
				c.autoDown(ctx)
			}
		}
	}
}

func (c *Coordinator) timerPeriod() time.Duration {
	p := min(c.cfg.AgentTimeout, c.cfg.AgentHeartbeatInterval) / 4
	if c.cfg.OfferTimeout > 0 {
		p = min(p, c.cfg.OfferTimeout/4)
	}
	return max(p, 10*time.Millisecond)
}

// checkTimeouts lets time pass in the core and applies what it decided
// (tick): silent agents become unreachable, frameworks past their failover
// timeout are torn down, timed-out offers are rescinded; and forgets
// history when due. It takes a turn of every scope (it may tear down any
// framework; order.go), and c.mu.
func (c *Coordinator) checkTimeouts(ctx context.Context) {
	defer c.takeTurn()()
	c.mu.Lock()
	now := c.cfg.Now()
	writes := c.tick(now)
	writes = append(writes, c.forgetHistoryWhenDue(now)...)
	c.mu.Unlock()
	c.record(ctx, writes...)
}
