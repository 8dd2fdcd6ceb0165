package core

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/slackline/slackline/coordinator/allocator"
	"github.com/slackline/slackline/coordinator/maintenance"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// Config configures a Core.
type Config struct {
	// MinAllocatable is the smallest bundle worth offering.
	MinAllocatable resources.Resources
	// OfferTimeout rescinds offers outstanding this long (<= 0: never).
	OfferTimeout time.Duration
	// IDPrefix starts every offer and inverse offer id (the coordinator's
	// instance id, so that ids of an earlier run are never reused).
	IDPrefix string
	// HeartbeatInterval is the interval agents are told while they fit
	// MaxHeartbeatRate heartbeats a second (<= 0: no budget); AgentTimeout
	// the silence after which an agent is lost, at that interval (see
	// heartbeatPace).
	HeartbeatInterval, AgentTimeout time.Duration
	MaxHeartbeatRate                float64
	// Start is when the coordinator started; agents from its registry
	// that have not registered again ReregisterTimeout after it are
	// reported by Tick (Ready.NotReregistered).
	Start             time.Time
	ReregisterTimeout time.Duration
	// MaxPendingUpdates bounds each framework's unacknowledged status
	// updates (< 0: no limit; see AddUpdate).
	MaxPendingUpdates int
	// MaxCompletedTasks bounds each framework's history of completed
	// tasks (< 0: no limit); the oldest are forgotten first.
	MaxCompletedTasks int
}

// Core is the offer book: the allocator, the outstanding offers and
// inverse offers, and what it knows of agents and frameworks to make them.
// Create it with New. It is not safe for concurrent use.
type Core struct {
	cfg        Config
	alloc      *allocator.Allocator
	agents     map[string]*agent
	frameworks map[string]*framework
	// records are the frameworks' registry records, torn-down ones
	// included (frameworks.go).
	records map[string]*frameworkRecord
	// agentRecs are the agents' registry records and hosts indexes them
	// by HostKey (agents.go).
	agentRecs map[string]*AgentRecord
	hosts     map[string][]*AgentRecord
	offers    map[string]*Offer
	inverse   map[string]*InverseOffer
	// draining are the agents on DRAINING machines.
	draining map[string]struct{}
	// dirty are agents whose free resources changed since the last pass;
	// dirtyAll asks for a full pass.
	dirty    map[string]struct{}
	dirtyAll bool
	seq      uint64
	// nextOfferSweep is when Tick next looks for timed-out offers.
	nextOfferSweep time.Time
	// heartbeats, pace and recoveryChecked: liveness (liveness.go).
	heartbeats      heartbeatQueue
	pace            heartbeatPace
	recoveryChecked bool
	// tasks: live, completed and reported tasks (tasks.go).
	tasks taskTable
	// maint is the maintenance state (maint.go).
	maint *maintenance.State
	// out collects the effects of the call under way (take hands them out).
	out Ready
}

// New returns an empty offer book.
func New(cfg Config) *Core {
	return &Core{
		cfg:        cfg,
		alloc:      allocator.New(allocator.Config{MinAllocatable: cfg.MinAllocatable}),
		agents:     map[string]*agent{},
		frameworks: map[string]*framework{},
		records:    map[string]*frameworkRecord{},
		agentRecs:  map[string]*AgentRecord{},
		hosts:      map[string][]*AgentRecord{},
		offers:     map[string]*Offer{},
		inverse:    map[string]*InverseOffer{},
		draining:   map[string]struct{}{},
		dirty:      map[string]struct{}{},
		tasks:      newTaskTable(),
		maint:      maintenance.New(),
		pace:       newHeartbeatPace(cfg.HeartbeatInterval, cfg.AgentTimeout, cfg.MaxHeartbeatRate),
	}
}

// Send is an event for a framework's subscription.
type Send struct {
	FrameworkID string
	Event       *slacklinev1.Event
}

// Counts are what a call did, for the shell's metrics.
type Counts struct {
	OffersSent, OffersRescinded, RevocableRescinded, InverseOffersSent int
}

// Ready is what a call asks the shell to do, in order. The offer book
// writes no registry record (offers live in memory only: a restart makes
// new ones), so its effects are sends: Events, in order, to each
// framework's subscription (a framework without one is skipped). Wake
// asks for an allocation pass (agents became dirty); Strays are
// allocations the allocator made to frameworks or agents the book does
// not know as connected or present (given back already), for the log.
//
// Tick's Ready also lists what the shell applies to its records after
// the sends: Lost, the agents found silent (the core has rescinded their
// offers already; their tasks become UNREACHABLE), and NotReregistered,
// the agents from the registry that did not register again in time.
//
// An event that changes the registry returns its records in Persist and
// the change itself in Apply, changing nothing yet (see persist.go): the
// shell writes Persist first, then sends, then hands Apply to Core.Apply
// once the records are durable, as raft's Ready is persisted, then sent,
// then applied.
type Ready struct {
	// Persist are the registry records to write before anything else.
	Persist []Record
	// After are the records of a change the call applied already (one
	// the coordinator decides itself: a teardown), written after the
	// sends.
	After  []Record
	Events []Send
	// Commands are for agents' command streams (an agent without a
	// session is skipped); Unqueue takes superseded updates off
	// subscriptions' queues.
	Commands        []Command
	Unqueue         []Unqueue
	Counts          Counts
	Wake            bool
	Strays          []allocator.Allocation
	Lost            []Lost
	NotReregistered []string
	// Forgotten are the torn-down frameworks ForgetCompletedFrameworks
	// forgot (their records' deletions are in After).
	Forgotten []string
	// Expired are the frameworks disconnected for longer than their
	// failover timeout, in id order: the shell tears them down.
	Expired []string
	// TrimmedHistory names a framework each time its oldest completed
	// task was forgotten (Config.MaxCompletedTasks), for the shell's
	// limit metric.
	TrimmedHistory []string
	// Untrusted are the tasks a registering agent reported that the shell
	// did not trust (RegisterTasks): not adopted, killed unless terminal;
	// for the log.
	Untrusted []*Task
	// Retired are the agents a registration retired (ApplyRegistration),
	// for the shell to end their sessions and log; ShutDown the agents a
	// machine going DOWN shut down (their ShutdownAgentCommand is in
	// Commands: the shell ends each session once it is delivered);
	// ForgottenAgents the agents forgotten (retention, or their machine
	// back UP), for the shell's own records.
	Retired         []Retired
	ShutDown        []string
	ForgottenAgents []string
	// Apply is the change Persist makes durable, for Core.Apply after
	// the write.
	Apply Change
}

// IsZero reports whether there is nothing to do.
func (r Ready) IsZero() bool {
	return len(r.Persist) == 0 && len(r.After) == 0 && r.Apply.IsZero() && len(r.Events) == 0 && len(r.Commands) == 0 && len(r.Unqueue) == 0 && r.Counts == (Counts{}) && !r.Wake && len(r.Strays) == 0 &&
		len(r.Lost) == 0 && len(r.NotReregistered) == 0 && len(r.Expired) == 0 && len(r.Forgotten) == 0 && len(r.TrimmedHistory) == 0 && len(r.Untrusted) == 0 &&
		len(r.Retired) == 0 && len(r.ShutDown) == 0 && len(r.ForgottenAgents) == 0
}

// Append adds the effects of a later call to r.
func (r *Ready) Append(later Ready) {
	r.Persist = append(r.Persist, later.Persist...)
	r.After = append(r.After, later.After...)
	r.Apply.records = append(r.Apply.records, later.Apply.records...)
	if later.Apply.subscribe != nil {
		if r.Apply.subscribe != nil {
			panic("core: two subscriptions in one Ready")
		}
		r.Apply.subscribe = later.Apply.subscribe
	}
	if later.Apply.register != nil {
		if r.Apply.register != nil {
			panic("core: two registrations in one Ready")
		}
		r.Apply.register = later.Apply.register
	}
	r.Events = append(r.Events, later.Events...)
	r.Commands = append(r.Commands, later.Commands...)
	r.Unqueue = append(r.Unqueue, later.Unqueue...)
	r.Counts.OffersSent += later.Counts.OffersSent
	r.Counts.OffersRescinded += later.Counts.OffersRescinded
	r.Counts.RevocableRescinded += later.Counts.RevocableRescinded
	r.Counts.InverseOffersSent += later.Counts.InverseOffersSent
	r.Wake = r.Wake || later.Wake
	r.Strays = append(r.Strays, later.Strays...)
	r.Lost = append(r.Lost, later.Lost...)
	r.NotReregistered = append(r.NotReregistered, later.NotReregistered...)
	r.Expired = append(r.Expired, later.Expired...)
	r.Forgotten = append(r.Forgotten, later.Forgotten...)
	r.TrimmedHistory = append(r.TrimmedHistory, later.TrimmedHistory...)
	r.Untrusted = append(r.Untrusted, later.Untrusted...)
	r.Retired = append(r.Retired, later.Retired...)
	r.ShutDown = append(r.ShutDown, later.ShutDown...)
	r.ForgottenAgents = append(r.ForgottenAgents, later.ForgottenAgents...)
}

func (k *Core) take() Ready {
	r := k.out
	k.out = Ready{}
	return r
}

func (k *Core) send(frameworkID string, ev *slacklinev1.Event) {
	k.out.Events = append(k.out.Events, Send{FrameworkID: frameworkID, Event: ev})
}

// Offer is an outstanding offer. Its fields are never modified.
type Offer struct {
	ID          string
	FrameworkID string
	AgentID     string
	Role        string
	Resources   resources.Resources
	// Revocable offers hold revocable resources only, never mixed.
	Revocable bool
	Created   time.Time
	Proto     *slacklinev1.Offer
}

// InverseOffer is an outstanding inverse offer: a request to a framework
// to leave a whole agent before its machine's unavailability.
type InverseOffer struct {
	ID          string
	FrameworkID string
	AgentID     string
	Machine     maintenance.Machine
	Proto       *slacklinev1.InverseOffer
}

// Maintenance is an agent's place in the maintenance schedule, as far as
// offers are concerned.
type Maintenance struct {
	Mode    slacklinev1.MachineMode
	Machine maintenance.Machine
	// Unavailability is the machine's window (nil when UP).
	Unavailability *slacklinev1.Unavailability
}

// Same reports whether m and o are the same place in the schedule.
func (m Maintenance) Same(o Maintenance) bool {
	return m.Mode == o.Mode && m.Machine == o.Machine && proto.Equal(m.Unavailability, o.Unavailability)
}

// AgentSpec is what an agent's registration tells the book.
type AgentSpec struct {
	ID         string
	Hostname   string
	Attributes []*slacklinev1.Attribute
	Total      resources.Resources
	Maint      Maintenance
}

type agent struct {
	spec AgentSpec
	// active: offers may be made on the agent (registered and not lost).
	active bool
	// recovering: from the registry, not registered since.
	recovering  bool
	inAllocator bool
	// revocable is the agent's latest oversubscription estimate.
	revocable resources.Resources
	offers    map[string]*Offer
	// inverse holds the outstanding inverse offer per framework id;
	// inverseRefuse when each framework's answer filter ends.
	inverse       map[string]*InverseOffer
	inverseRefuse map[string]time.Time
	// lastHeartbeat, and the agent's place in the heartbeat queue.
	lastHeartbeat  time.Time
	hbPrev, hbNext *agent
	hbQueued       bool
}

type framework struct {
	id        string
	connected bool
	// failoverTimeout is the subscription's; deadline, while disconnected,
	// when Tick reports the framework expired (zero: connected, or
	// reported already).
	failoverTimeout time.Duration
	deadline        time.Time
	// Made on first use (put): an idle framework holds none.
	offers     map[string]*Offer
	inverse    map[string]*InverseOffer
	suppressed map[string]bool
	// pending holds, per task, the status updates with a uuid that the
	// framework has not acknowledged yet, oldest first; pendingCount
	// counts them (updates.go).
	pending      map[string][]*slacklinev1.TaskStatus
	pendingCount int
}

// put sets (*m)[k] = v, making the map first if it is nil.
func put[K comparable, V any](m *map[K]V, k K, v V) {
	if *m == nil {
		*m = make(map[K]V)
	}
	(*m)[k] = v
}

func (k *Core) markDirty(agentID string) {
	k.dirty[agentID] = struct{}{}
	k.out.Wake = true
}

func (k *Core) markAllDirty() {
	k.dirtyAll = true
	k.out.Wake = true
}

// Allocator returns the allocator, for read-only queries (views, metrics).
func (k *Core) Allocator() *allocator.Allocator { return k.alloc }

// --- agents ---

// RegisterAgent admits an agent, new or registering again (with a new
// total or place in the schedule): offers made from another total or under
// another window are rescinded (inverse offers for another window too), and
// the agent is (re)activated in the allocator.
func (k *Core) RegisterAgent(spec AgentSpec, now time.Time) Ready {
	k.registerAgent(spec, now)
	return k.take()
}

func (k *Core) registerAgent(spec AgentSpec, now time.Time) {
	a := k.agents[spec.ID]
	if a == nil {
		a = &agent{offers: map[string]*Offer{}, inverse: map[string]*InverseOffer{}, inverseRefuse: map[string]time.Time{}}
		k.agents[spec.ID] = a
	}
	sameMaint := a.spec.Maint.Same(spec.Maint)
	if (a.inAllocator && !a.spec.Total.Equal(spec.Total)) || !sameMaint {
		k.rescindAgentOffers(a, now)
	}
	if !sameMaint {
		k.rescindInverseOffers(a)
	}
	a.spec, a.active, a.recovering = spec, true, false
	k.heartbeats.touch(a, now)
	if !a.inAllocator {
		k.alloc.AddAgent(spec.ID, spec.Total)
		a.inAllocator = true
	} else {
		k.alloc.UpdateAgentTotal(spec.ID, spec.Total)
		k.alloc.ActivateAgent(spec.ID)
	}
	k.setDraining(a)
	k.markDirty(spec.ID)
}

// AddRecoveredAgent adds an agent from the registry that has not
// registered since a restart: known (for its place in the schedule), not
// offered, not in the allocator. A recovering one (ACTIVE in its record)
// is reported by Tick if it does not register within
// Config.ReregisterTimeout.
func (k *Core) AddRecoveredAgent(spec AgentSpec, recovering bool) {
	a := &agent{spec: spec, recovering: recovering, offers: map[string]*Offer{}, inverse: map[string]*InverseOffer{}, inverseRefuse: map[string]time.Time{}}
	k.agents[spec.ID] = a
	k.setDraining(a)
}

// setDraining keeps the set of agents on DRAINING machines.
func (k *Core) setDraining(a *agent) {
	if a.spec.Maint.Mode == maintenance.ModeDraining {
		k.draining[a.spec.ID] = struct{}{}
	} else {
		delete(k.draining, a.spec.ID)
	}
}

// AgentLost handles an agent silent past its timeout: it leaves the
// allocator's active agents, its estimate is dropped (stale: the agent
// sends a fresh one once back), its offers and inverse offers are
// rescinded.
func (k *Core) AgentLost(agentID string, now time.Time) Ready {
	if a := k.agents[agentID]; a != nil {
		k.agentLost(a, now)
	}
	return k.take()
}

func (k *Core) agentLost(a *agent, now time.Time) {
	agentID := a.spec.ID
	a.active = false
	if a.inAllocator {
		k.alloc.DeactivateAgent(agentID)
		a.revocable = resources.Resources{}
		k.alloc.SetAgentRevocable(agentID, a.revocable)
	}
	k.rescindAgentOffers(a, now)
	k.rescindInverseOffers(a)
}

// WithdrawAgent rescinds an agent's offers and inverse offers and stops
// offering it (it is retired: its tasks end next, then RemoveAgent).
func (k *Core) WithdrawAgent(agentID string, now time.Time) Ready {
	if a := k.agents[agentID]; a != nil {
		a.active = false
		k.rescindAgentOffers(a, now)
		k.rescindInverseOffers(a)
		delete(k.draining, agentID)
	}
	return k.take()
}

// RemoveAgent takes a retired agent out of the allocator; the book still
// knows it (its place in the schedule) until ForgetAgent.
func (k *Core) RemoveAgent(agentID string) Ready {
	if a := k.agents[agentID]; a != nil && a.inAllocator {
		k.alloc.RemoveAgent(agentID)
		a.inAllocator = false
		a.active = false
		delete(k.draining, agentID)
	}
	return k.take()
}

// ForgetAgent forgets an agent the coordinator forgot.
func (k *Core) ForgetAgent(agentID string) {
	if a := k.agents[agentID]; a != nil {
		if a.inAllocator {
			k.alloc.RemoveAgent(agentID)
		}
		k.heartbeats.remove(a)
	}
	delete(k.agents, agentID)
	delete(k.draining, agentID)
	delete(k.dirty, agentID)
}

// SetMaintenance moves an agent to a new place in the maintenance
// schedule: its offers and inverse offers (which carry the old
// unavailability) are rescinded and its inverse offer filters cleared.
func (k *Core) SetMaintenance(agentID string, m Maintenance, now time.Time) Ready {
	a := k.agents[agentID]
	if a == nil {
		return k.take()
	}
	a.spec.Maint = m
	k.setDraining(a)
	k.rescindAgentOffers(a, now)
	k.rescindInverseOffers(a)
	clear(a.inverseRefuse)
	k.markDirty(agentID)
	return k.take()
}

// Draining returns the agents on DRAINING machines that are active, in
// id order: those the inverse offers of SendInverseOffers concern.
func (k *Core) Draining() []string {
	out := make([]string, 0, len(k.draining))
	for id := range k.draining {
		if a := k.agents[id]; a != nil && a.active {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Estimate installs an agent's new oversubscription estimate (its total
// revocable capacity, including what revocable tasks hold) and rescinds
// only what no longer fits: the fewest outstanding revocable offers on the
// agent that bring what its revocable tasks and offers hold back within
// the estimate (allocator.RescindToFit; on a tie, the newest offers, which
// their frameworks have had the least time to use). An estimate that grows
// rescinds nothing: the next pass offers the growth in an offer of its
// own. Revocable tasks beyond the estimate are the agent's QoS
// controller's to throttle or kill, never the coordinator's. An estimate
// equal to the last one changes nothing.
func (k *Core) Estimate(agentID string, estimate resources.Resources, now time.Time) Ready {
	a := k.agents[agentID]
	if a == nil || estimate.Equal(a.revocable) {
		return k.take()
	}
	_, held := k.alloc.AgentRevocable(agentID)
	a.revocable = estimate
	k.alloc.SetAgentRevocable(agentID, estimate)
	var outstanding []*Offer
	for _, o := range a.offers {
		if o.Revocable {
			outstanding = append(outstanding, o)
		}
	}
	slices.SortFunc(outstanding, func(x, y *Offer) int {
		return cmp.Or(y.Created.Compare(x.Created), cmp.Compare(x.ID, y.ID))
	})
	candidates := make([]allocator.RevocableOffer, len(outstanding))
	for i, o := range outstanding {
		candidates[i] = allocator.RevocableOffer{ID: o.ID, Resources: o.Resources}
	}
	for _, id := range allocator.RescindToFit(estimate, held, candidates) {
		k.out.Counts.RevocableRescinded++
		k.rescind(a.offers[id], now)
	}
	k.markDirty(agentID)
	return k.take()
}

// AgentRevocable returns an agent's latest estimate.
func (k *Core) AgentRevocable(agentID string) resources.Resources {
	if a := k.agents[agentID]; a != nil {
		return a.revocable
	}
	return resources.Resources{}
}

// --- frameworks ---

// FrameworkSpec is what a subscription tells the book of a framework.
type FrameworkSpec struct {
	ID    string
	Roles []string
	// Revocable: the framework has the REVOCABLE_RESOURCES capability.
	Revocable bool
	// FailoverTimeout is how long the framework may stay disconnected
	// before Tick reports it expired (Ready.Expired).
	FailoverTimeout time.Duration
}

// addFramework adds a framework known but not connected (recovered from
// the registry, or adopted from an agent's report: LoadFramework); Tick
// reports it expired after deadline unless it subscribes.
func (k *Core) addFramework(spec FrameworkSpec, deadline time.Time) {
	k.alloc.AddFramework(spec.ID, spec.Roles, false)
	k.alloc.SetFrameworkRevocable(spec.ID, spec.Revocable)
	k.frameworks[spec.ID] = &framework{id: spec.ID, failoverTimeout: spec.FailoverTimeout, deadline: deadline}
}

// subscribe connects a framework, new or failing over (the Apply of
// SubscribeFramework): the offers and inverse offers of its earlier
// subscription are dropped (the new scheduler does not know them; no
// rescind is sent), its roles and capabilities are updated, and a full
// pass is asked for.
func (k *Core) subscribe(spec FrameworkSpec, now time.Time) {
	fw := k.frameworks[spec.ID]
	if fw == nil {
		fw = &framework{id: spec.ID}
		k.frameworks[spec.ID] = fw
		k.alloc.AddFramework(spec.ID, spec.Roles, true)
	} else {
		k.forgetOffers(fw, now)
		k.alloc.UpdateFrameworkRoles(spec.ID, spec.Roles)
		k.alloc.ActivateFramework(spec.ID)
	}
	k.alloc.SetFrameworkRevocable(spec.ID, spec.Revocable)
	fw.connected, fw.failoverTimeout, fw.deadline = true, spec.FailoverTimeout, time.Time{}
	k.markAllDirty()
}

// Disconnect handles the end of a framework's subscription: it is no
// longer offered, its offers and inverse offers are dropped, and its
// failover timeout starts: Tick reports it expired once it has passed.
func (k *Core) Disconnect(frameworkID string, now time.Time) Ready {
	fw := k.frameworks[frameworkID]
	if fw == nil {
		return k.take()
	}
	fw.connected, fw.deadline = false, now.Add(fw.failoverTimeout)
	k.alloc.DeactivateFramework(frameworkID)
	k.forgetOffers(fw, now)
	return k.take()
}

// removeFramework takes a framework out of the offer book: its offers
// are dropped (the allocator forgets its allocations), its inverse offers
// forgotten.
func (k *Core) removeFramework(frameworkID string) {
	fw := k.frameworks[frameworkID]
	if fw == nil {
		return
	}
	for _, o := range fw.offers {
		delete(k.offers, o.ID)
		if a := k.agents[o.AgentID]; a != nil {
			delete(a.offers, o.ID)
			k.markDirty(o.AgentID)
		}
	}
	k.dropInverseOffers(fw)
	k.alloc.RemoveFramework(frameworkID)
	delete(k.frameworks, frameworkID)
}

// SetSuppressed suppresses (or revives) roles of a framework; a revive
// clears its filters and asks for a full pass.
func (k *Core) SetSuppressed(frameworkID string, roles []string, suppress bool) Ready {
	fw := k.frameworks[frameworkID]
	if fw == nil {
		return k.take()
	}
	if suppress {
		k.alloc.Suppress(frameworkID, roles)
	} else {
		k.alloc.Revive(frameworkID, roles)
		k.markAllDirty()
	}
	for _, r := range roles {
		if suppress {
			put(&fw.suppressed, r, true)
		} else {
			delete(fw.suppressed, r)
		}
	}
	return k.take()
}

// Suppressed returns a framework's suppressed roles, sorted.
func (k *Core) Suppressed(frameworkID string) []string {
	var out []string
	if fw := k.frameworks[frameworkID]; fw != nil {
		for r := range fw.suppressed {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// --- roles ---

// Role weights and quota limits change through the persist step:
// UpdateRoles and Apply (persist.go).

// --- tasks ---

// Claim records resources a task holds that no offer gave (a task an agent
// reports when it registers).
func (k *Core) Claim(frameworkID, role, agentID string, regular, revocable resources.Resources) {
	k.alloc.Claim(frameworkID, role, agentID, regular)
	if !revocable.IsEmpty() {
		k.alloc.ClaimRevocable(frameworkID, role, agentID, revocable)
	}
}

// Release gives back what a task held (it ended) and marks its agent
// dirty.
func (k *Core) Release(frameworkID, role, agentID string, regular, revocable resources.Resources, now time.Time) Ready {
	k.releaseTask(frameworkID, role, agentID, regular, revocable, now)
	return k.take()
}

func (k *Core) releaseTask(frameworkID, role, agentID string, regular, revocable resources.Resources, now time.Time) {
	k.alloc.Release(frameworkID, role, agentID, regular, 0, now)
	if !revocable.IsEmpty() {
		k.alloc.ReleaseRevocable(frameworkID, role, agentID, revocable, 0, now)
	}
	k.markDirty(agentID)
}

// --- offers ---

func (k *Core) nextID(kind string) string {
	k.seq++
	return fmt.Sprintf("%s-%s%d", k.cfg.IDPrefix, kind, k.seq)
}

// Offers returns the number of outstanding offers and inverse offers.
func (k *Core) Offers() (offers, inverse int) { return len(k.offers), len(k.inverse) }

// EachOffer calls f for every outstanding offer, in no order.
func (k *Core) EachOffer(f func(*Offer)) {
	for _, o := range k.offers {
		f(o)
	}
}

// AgentOffers returns the outstanding offers on an agent, in no order.
func (k *Core) AgentOffers(agentID string) []*Offer {
	a := k.agents[agentID]
	if a == nil {
		return nil
	}
	out := make([]*Offer, 0, len(a.offers))
	for _, o := range a.offers {
		out = append(out, o)
	}
	return out
}

// FrameworkOffered returns what a framework's outstanding offers hold.
func (k *Core) FrameworkOffered(frameworkID string) resources.Resources {
	var sum resources.Resources
	if fw := k.frameworks[frameworkID]; fw != nil {
		for _, o := range fw.offers {
			sum = sum.Add(o.Resources)
		}
	}
	return sum
}

// AgentInverseFrameworks returns the frameworks with an outstanding
// inverse offer for an agent.
func (k *Core) AgentInverseFrameworks(agentID string) []string {
	var out []string
	if a := k.agents[agentID]; a != nil {
		for id := range a.inverse {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// Pass is the kind of an allocation pass.
type Pass int

// The kinds of Allocate's passes.
const (
	// NoPass: nothing was dirty.
	NoPass Pass = iota
	// EventPass: a pass over the agents that changed.
	EventPass
	// FullPass: a pass over all agents.
	FullPass
)

// Allocate runs one allocation pass at now over the dirty agents, or all
// of them when full is set or a full pass was asked for, and sends each
// framework its offers in one event; then the inverse offers of
// SendInverseOffers(now, users). It returns the kind of pass that ran.
func (k *Core) Allocate(now time.Time, full bool, users map[string][]string) (Ready, Pass) {
	var agentIDs []string
	pass := FullPass
	if !full && !k.dirtyAll {
		if len(k.dirty) == 0 {
			return k.take(), NoPass
		}
		pass = EventPass
		agentIDs = make([]string, 0, len(k.dirty))
		for id := range k.dirty {
			agentIDs = append(agentIDs, id)
		}
		// In id order, so that a pass's offers do not depend on a map's.
		slices.Sort(agentIDs)
	}
	k.dirtyAll = false
	clear(k.dirty)
	allocations := k.alloc.Allocate(now, agentIDs)
	k.out.Wake = false
	var order []string
	byFramework := map[string][]*slacklinev1.Offer{}
	for _, al := range allocations {
		fw, a := k.frameworks[al.FrameworkID], k.agents[al.AgentID]
		if fw == nil || a == nil || !fw.connected {
			// The allocator and the book disagree; give it back.
			k.out.Strays = append(k.out.Strays, al)
			k.release(al.FrameworkID, al.Role, al.AgentID, al.Resources, al.Revocable, 0, now)
			continue
		}
		o := k.newOffer(fw, a, al.Role, al.Resources, al.Revocable, now)
		if _, ok := byFramework[fw.id]; !ok {
			order = append(order, fw.id)
		}
		byFramework[fw.id] = append(byFramework[fw.id], o.Proto)
	}
	for _, id := range order {
		offers := byFramework[id]
		k.out.Counts.OffersSent += len(offers)
		k.send(id, &slacklinev1.Event{Event: &slacklinev1.Event_Offers{Offers: &slacklinev1.OffersEvent{Offers: offers}}})
	}
	// Inverse offers go after the offers, whose frameworks they may concern.
	k.sendInverseOffers(now, users)
	// What a pass releases (strays) is for the next one.
	k.out.Wake = len(k.dirty) > 0
	return k.take(), pass
}

func (k *Core) newOffer(fw *framework, a *agent, role string, res resources.Resources, revocable bool, now time.Time) *Offer {
	id := k.nextID("O")
	var unavailability *slacklinev1.Unavailability
	if a.spec.Maint.Mode == maintenance.ModeDraining {
		unavailability = a.spec.Maint.Unavailability
	}
	o := &Offer{
		ID: id, FrameworkID: fw.id, AgentID: a.spec.ID, Role: role, Resources: res, Revocable: revocable, Created: now,
		Proto: &slacklinev1.Offer{
			Id: id, FrameworkId: fw.id, AgentId: a.spec.ID, Hostname: a.spec.Hostname,
			Resources: res.Proto(role, resources.Revocability(revocable)), Attributes: a.spec.Attributes,
			Unavailability: unavailability,
		},
	}
	k.offers[id] = o
	put(&fw.offers, id, o)
	a.offers[id] = o
	return o
}

func (k *Core) release(frameworkID, role, agentID string, r resources.Resources, revocable bool, refuse time.Duration, now time.Time) {
	if revocable {
		k.alloc.ReleaseRevocable(frameworkID, role, agentID, r, refuse, now)
		return
	}
	k.alloc.Release(frameworkID, role, agentID, r, refuse, now)
}

// remove forgets an offer and gives its resources back to the allocator
// with the given filter.
func (k *Core) remove(o *Offer, refuse time.Duration, now time.Time) {
	delete(k.offers, o.ID)
	if fw := k.frameworks[o.FrameworkID]; fw != nil {
		delete(fw.offers, o.ID)
	}
	if a := k.agents[o.AgentID]; a != nil {
		delete(a.offers, o.ID)
	}
	k.release(o.FrameworkID, o.Role, o.AgentID, o.Resources, o.Revocable, refuse, now)
	k.markDirty(o.AgentID)
}

// rescind removes an offer and tells its framework.
func (k *Core) rescind(o *Offer, now time.Time) {
	k.remove(o, 0, now)
	k.out.Counts.OffersRescinded++
	k.send(o.FrameworkID, &slacklinev1.Event{Event: &slacklinev1.Event_Rescind{Rescind: &slacklinev1.RescindEvent{OfferId: o.ID}}})
}

func (k *Core) rescindAgentOffers(a *agent, now time.Time) {
	for _, o := range sortedOffers(a.offers) {
		k.rescind(o, now)
	}
}

// sortedOffers lists offers in id order, so that rescinds come in an
// order a transcript can state.
func sortedOffers(m map[string]*Offer) []*Offer {
	out := make([]*Offer, 0, len(m))
	for _, o := range m {
		out = append(out, o)
	}
	slices.SortFunc(out, func(x, y *Offer) int { return cmp.Or(cmp.Compare(len(x.ID), len(y.ID)), cmp.Compare(x.ID, y.ID)) })
	return out
}

// forgetOffers drops a framework's offers and inverse offers without
// telling it.
func (k *Core) forgetOffers(fw *framework, now time.Time) {
	for _, o := range fw.offers {
		k.remove(o, 0, now)
	}
	k.dropInverseOffers(fw)
}

// Decline gives a framework's offers back with a filter of refuse: the
// allocator offers those resources to it again only after refuse. Unknown
// ids (not outstanding offers of the framework) are returned; the others
// are declined.
func (k *Core) Decline(frameworkID string, ids []string, refuse time.Duration, now time.Time) (Ready, []string, int) {
	fw := k.frameworks[frameworkID]
	var unknown []string
	declined := 0
	for _, id := range ids {
		var o *Offer
		if fw != nil {
			o = fw.offers[id]
		}
		if o == nil {
			unknown = append(unknown, id)
			continue
		}
		declined++
		k.remove(o, refuse, now)
	}
	return k.take(), unknown, declined
}

// Pool is what the offers of one Accept hold together.
type Pool struct {
	AgentID, Role      string
	Regular, Revocable resources.Resources
}

// CheckAccept resolves the offer ids of an Accept, changing nothing. It
// returns the agent of the offers and, when some are unknown, foreign,
// repeated or on different agents or roles, or their agent is not
// active, a description of the problem.
func (k *Core) CheckAccept(frameworkID string, ids []string) (agentID, problem string) {
	var first *Offer
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		o := k.offers[id]
		switch {
		case seen[id]:
			problem = fmt.Sprintf("offer %q is listed twice", id)
			continue
		case o == nil || o.FrameworkID != frameworkID:
			problem = fmt.Sprintf("offer %q is not an outstanding offer of this framework (rescinded, expired or never made)", id)
			seen[id] = true
			continue
		}
		seen[id] = true
		if first == nil {
			first = o
			continue
		}
		if o.AgentID != first.AgentID {
			problem = fmt.Sprintf("offers %q and %q are on different agents", first.ID, o.ID)
		}
		if o.Role != first.Role {
			problem = fmt.Sprintf("offers %q and %q are for different roles", first.ID, o.ID)
		}
	}
	if first == nil {
		return "", problem
	}
	if problem == "" {
		if a := k.agents[first.AgentID]; a == nil || !a.active {
			problem = fmt.Sprintf("agent %q of the offers is not active", first.AgentID)
		}
	}
	return first.AgentID, problem
}

// DropOffers gives back, without a filter, the offers of a refused Accept
// that are outstanding offers of the framework.
func (k *Core) DropOffers(frameworkID string, ids []string, now time.Time) Ready {
	for _, id := range ids {
		if o := k.offers[id]; o != nil && o.FrameworkID == frameworkID {
			k.remove(o, 0, now)
		}
	}
	return k.take()
}

// TakeOffers removes the offers of an Accept that CheckAccept found
// without a problem and returns what they hold: the framework uses it for
// its tasks and gives the rest back with Return.
func (k *Core) TakeOffers(frameworkID string, ids []string) Pool {
	var pool Pool
	fw := k.frameworks[frameworkID]
	for i, id := range ids {
		o := k.offers[id]
		if i == 0 {
			pool.AgentID, pool.Role = o.AgentID, o.Role
		}
		if o.Revocable {
			pool.Revocable = pool.Revocable.Add(o.Resources)
		} else {
			pool.Regular = pool.Regular.Add(o.Resources)
		}
		delete(k.offers, id)
		if fw != nil {
			delete(fw.offers, id)
		}
		if a := k.agents[o.AgentID]; a != nil {
			delete(a.offers, id)
		}
	}
	return pool
}

// Return gives back what an Accept's tasks left of its pool, with the
// call's filter, and marks the agent dirty.
func (k *Core) Return(frameworkID string, pool Pool, usedRegular, usedRevocable resources.Resources, refuse time.Duration, now time.Time) Ready {
	if remainder := pool.Regular.Sub(usedRegular); !remainder.IsEmpty() {
		k.alloc.Release(frameworkID, pool.Role, pool.AgentID, remainder, refuse, now)
	}
	if remainder := pool.Revocable.Sub(usedRevocable); !remainder.IsEmpty() {
		k.alloc.ReleaseRevocable(frameworkID, pool.Role, pool.AgentID, remainder, refuse, now)
	}
	k.markDirty(pool.AgentID)
	return k.take()
}

// Tick lets time pass: agents silent past their timeout are lost (their
// offers and inverse offers rescinded; Ready.Lost), agents from the
// registry that did not register again in time are reported
// (Ready.NotReregistered), frameworks disconnected past their failover
// timeout too (Ready.Expired), and offers outstanding longer than
// Config.OfferTimeout are rescinded, sweeping them every eighth of the
// timeout.
func (k *Core) Tick(now time.Time) Ready {
	k.checkLiveness(now)
	for id, fw := range k.frameworks {
		if !fw.connected && !fw.deadline.IsZero() && now.After(fw.deadline) {
			fw.deadline = time.Time{}
			k.out.Expired = append(k.out.Expired, id)
		}
	}
	slices.Sort(k.out.Expired)
	if k.cfg.OfferTimeout <= 0 || now.Before(k.nextOfferSweep) {
		return k.take()
	}
	k.nextOfferSweep = now.Add(k.cfg.OfferTimeout / 8)
	var due []*Offer
	for _, o := range k.offers {
		if now.Sub(o.Created) > k.cfg.OfferTimeout {
			due = append(due, o)
		}
	}
	slices.SortFunc(due, func(x, y *Offer) int { return cmp.Compare(x.ID, y.ID) })
	for _, o := range due {
		k.rescind(o, now)
	}
	return k.take()
}

// InAllocator reports whether an agent is in the allocator (registered
// since the coordinator started and not retired).
func (k *Core) InAllocator(agentID string) bool {
	a := k.agents[agentID]
	return a != nil && a.inAllocator
}
