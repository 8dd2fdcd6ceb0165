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

	"github.com/slackline/slackline/coordinator/allocator"
	"github.com/slackline/slackline/coordinator/maintenance"
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
	// budget). See heartbeatPace.
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
	bounds  *bounds

	// kick wakes the allocation loop; buffered with capacity 1.
	kick chan struct{}
	// frameworkHeartbeats and agentPings pace the keepalives of all
	// subscriptions and all agents' command streams (one timer each).
	frameworkHeartbeats, agentPings *pulse
	// storeFailed receives the first registry error that needs a reopen
	// (store.ErrFailed): Run returns it, so the process exits and its
	// supervisor restarts it.
	storeFailed chan error
	// subscriber runs subscriptions off their handlers' stacks (flow.go).
	subscriber offStack
	// persistMu, then mu: see "Locks and persistence" in doc.go.
	persistMu sync.Mutex
	mu        sync.Mutex

	alloc  *allocator.Allocator
	agents map[string]*agent
	// hosts indexes agents by hostKey (registration.go: one host, one
	// live agent).
	hosts      map[string][]*agent
	frameworks map[string]*framework
	offers     map[string]*offer
	weights    map[string]float64
	// maint is the maintenance schedule, modes and answers.
	maint *maintenance.State
	// inverseOffers are the outstanding inverse offers by id.
	inverseOffers map[string]*inverseOffer
	// drainingAgents are the agents on DRAINING machines.
	drainingAgents map[string]struct{}
	quotas         map[string]resources.Resources
	// dirtyAgents are agents whose free resources changed since the last pass.
	dirtyAgents map[string]struct{}
	// dirtyAll asks for a full pass at the next wake-up.
	dirtyAll bool
	// heartbeats, recoveryChecked, nextOfferSweep and nextHistorySweep keep
	// the timer loop's checks from visiting every agent and offer on each
	// tick (liveness.go); pace is the agents' heartbeat interval and
	// timeout (heartbeatpace.go).
	heartbeats                       heartbeatQueue
	pace                             heartbeatPace
	recoveryChecked                  bool
	nextOfferSweep, nextHistorySweep time.Time

	offerSeq uint64
	// stopping is set when Run ends, so closing streams is not taken for
	// frameworks disconnecting.
	stopping   bool
	instanceID string
	startedAt  time.Time
	// launchKey makes and verifies launch proofs (see trust.go).
	launchKey []byte
	// registrations rate-limits agent registrations per principal
	// (limits.go).
	registrations *principalRates
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
	c := &Coordinator{
		cfg:            cfg,
		log:            cfg.Logger,
		store:          st,
		kick:           make(chan struct{}, 1),
		storeFailed:    make(chan error, 1),
		alloc:          allocator.New(allocator.Config{MinAllocatable: cfg.MinAllocatable}),
		agents:         map[string]*agent{},
		hosts:          map[string][]*agent{},
		frameworks:     map[string]*framework{},
		offers:         map[string]*offer{},
		weights:        map[string]float64{},
		quotas:         map[string]resources.Resources{},
		dirtyAgents:    map[string]struct{}{},
		maint:          maintenance.New(),
		inverseOffers:  map[string]*inverseOffer{},
		drainingAgents: map[string]struct{}{},
		instanceID:     ids.New()[:8],
		startedAt:      cfg.Now(),
		registrations:  newPrincipalRates(cfg.Limits.AgentRegistrationsPerMinute, cfg.Limits.AgentRegistrationBurst),
	}
	c.frameworkHeartbeats, c.agentPings = newPulse(cfg.FrameworkHeartbeatInterval), newPulse(agentPingInterval)
	c.pace = newHeartbeatPace(cfg.AgentHeartbeatInterval, cfg.AgentTimeout, float64(cfg.MaxAgentHeartbeatRate))
	err := c.recover(context.Background())
	if err == nil {
		c.launchKey, err = loadLaunchKey(context.Background(), st)
	}
	if err != nil {
		if cfg.Store == nil {
			st.Close()
		}
		return nil, fmt.Errorf("recover registry: %w", err)
	}
	c.metrics = newMetrics(c, cfg.Metrics)
	c.bounds = newBounds(c.log, cfg.Metrics)
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

// markDirty records that an agent's free resources changed and wakes the
// allocation loop. Caller holds c.mu.
func (c *Coordinator) markDirty(agentID string) {
	c.dirtyAgents[agentID] = struct{}{}
	c.wake()
}

// markAllDirty asks for a full allocation pass. Caller holds c.mu.
func (c *Coordinator) markAllDirty() {
	c.dirtyAll = true
	c.wake()
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
			c.dirtyAll = true
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

// allocateOnce runs one allocation pass over the dirty agents (or all) and
// sends the resulting offers. It takes c.mu.
func (c *Coordinator) allocateOnce() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var agentIDs []string
	kind := "full"
	if !c.dirtyAll {
		if len(c.dirtyAgents) == 0 {
			return
		}
		kind = "event"
		agentIDs = make([]string, 0, len(c.dirtyAgents))
		for id := range c.dirtyAgents {
			agentIDs = append(agentIDs, id)
		}
	}
	c.dirtyAll = false
	clear(c.dirtyAgents)
	now := c.cfg.Now()
	start := time.Now()
	allocations := c.alloc.Allocate(now, agentIDs)
	c.metrics.allocationSeconds.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	// Inverse offers go after the offers, whose frameworks they may concern.
	defer c.sendInverseOffers(now)
	if len(allocations) == 0 {
		return
	}
	byFramework := map[*framework][]*slacklinev1.Offer{}
	for _, al := range allocations {
		fw, a := c.frameworks[al.FrameworkID], c.agents[al.AgentID]
		if fw == nil || a == nil || fw.sub == nil {
			// The allocator and the coordinator disagree; give it back.
			c.log.Warn("allocation to an unknown or disconnected target", "framework", al.FrameworkID, "agent", al.AgentID)
			c.release(al.FrameworkID, al.Role, al.AgentID, al.Resources, al.Revocable, 0, now)
			continue
		}
		o := c.newOffer(fw, a, al.Role, al.Resources, al.Revocable, now)
		byFramework[fw] = append(byFramework[fw], o.proto)
	}
	for fw, offers := range byFramework {
		c.metrics.offersSent.Add(float64(len(offers)))
		fw.send(&slacklinev1.Event{Event: &slacklinev1.Event_Offers{Offers: &slacklinev1.OffersEvent{Offers: offers}}})
	}
}

func (c *Coordinator) newOffer(fw *framework, a *agent, role string, res resources.Resources, revocable bool, now time.Time) *offer {
	c.offerSeq++
	id := fmt.Sprintf("%s-O%d", c.instanceID, c.offerSeq)
	o := &offer{
		id: id, frameworkID: fw.id(), agentID: a.id, role: role, resources: res, revocable: revocable, created: now,
		proto: &slacklinev1.Offer{
			Id: id, FrameworkId: fw.id(), AgentId: a.id, Hostname: a.info.GetHostname(),
			Resources: res.Proto(role, resources.Revocability(revocable)), Attributes: a.info.GetAttributes(),
			Unavailability: unavailabilityOf(a),
		},
	}
	c.offers[id] = o
	put(&fw.offers, id, o)
	a.offers[id] = o
	return o
}

// removeOffer forgets an offer and gives its resources back to the
// allocator with the given filter. Caller holds c.mu.
func (c *Coordinator) removeOffer(o *offer, refuse time.Duration, now time.Time) {
	delete(c.offers, o.id)
	if fw := c.frameworks[o.frameworkID]; fw != nil {
		delete(fw.offers, o.id)
	}
	if a := c.agents[o.agentID]; a != nil {
		delete(a.offers, o.id)
	}
	c.release(o.frameworkID, o.role, o.agentID, o.resources, o.revocable, refuse, now)
	c.markDirty(o.agentID)
}

// rescindOffer removes an offer and tells its framework. Caller holds c.mu.
func (c *Coordinator) rescindOffer(o *offer, now time.Time) {
	c.removeOffer(o, 0, now)
	c.metrics.offersRescinded.Inc()
	if fw := c.frameworks[o.frameworkID]; fw != nil {
		fw.send(&slacklinev1.Event{Event: &slacklinev1.Event_Rescind{Rescind: &slacklinev1.RescindEvent{OfferId: o.id}}})
	}
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

// checkTimeouts marks silent agents unreachable, tears down frameworks past
// their failover timeout and rescinds timed-out offers, visiting only what
// may be due (liveness.go). It takes persistMu, c.mu.
func (c *Coordinator) checkTimeouts(ctx context.Context) {
	c.persistMu.Lock()
	defer c.persistMu.Unlock()
	c.mu.Lock()
	now := c.cfg.Now()
	writes := c.checkSilentAgents(now)
	for _, fw := range c.frameworks {
		if fw.state == slacklinev1.FrameworkState_FRAMEWORK_STATE_DISCONNECTED && now.After(fw.failoverDeadline) {
			c.log.Info("framework failover timeout expired; tearing down", "framework", fw.id(), "name", fw.info.GetName())
			writes = append(writes, c.removeFramework(fw, "failover timeout expired", now))
		}
	}
	writes = append(writes, c.forgetHistoryWhenDue(now)...)
	c.rescindTimedOutOffers(now)
	c.mu.Unlock()
	c.record(ctx, writes...)
}

// release gives resources back to the allocator's regular or revocable
// pool. Caller holds c.mu.
func (c *Coordinator) release(frameworkID, role, agentID string, r resources.Resources, revocable bool, refuse time.Duration, now time.Time) {
	if revocable {
		c.alloc.ReleaseRevocable(frameworkID, role, agentID, r, refuse, now)
		return
	}
	c.alloc.Release(frameworkID, role, agentID, r, refuse, now)
}

// addFramework registers a framework with the allocator, with its
// revocable capability. Caller holds c.mu.
func (c *Coordinator) addFramework(info *slacklinev1.FrameworkInfo, active bool) {
	c.alloc.AddFramework(info.GetId(), info.GetRoles(), active)
	c.alloc.SetFrameworkRevocable(info.GetId(), hasCapability(info, slacklinev1.FrameworkCapability_FRAMEWORK_CAPABILITY_REVOCABLE_RESOURCES))
}
