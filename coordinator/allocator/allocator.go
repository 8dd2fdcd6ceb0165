package allocator

import (
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/slackline/slackline/resources"
)

// DefaultRole is the role of a framework that names none.
const DefaultRole = "*"

// DefaultMinAllocatable is the MinAllocatable used when Config leaves it
// empty: an agent's resources are offered when they hold at least 0.01 cpus
// or 32 MiB of memory, as in Mesos.
var DefaultMinAllocatable = resources.New(0.01, 32, 0)

// Config configures an Allocator.
type Config struct {
	// MinAllocatable: an agent's available resources (after quota clamping)
	// are offered only if some scalar is at least the same scalar here,
	// among the scalars set here. The zero value means DefaultMinAllocatable.
	MinAllocatable resources.Resources
	// Seed, when non-zero, shuffles the agent order of every full pass
	// deterministically (Mesos shuffles agents so that no agent is always
	// offered first). Zero visits agents in the order they were added.
	Seed uint64
}

// Allocation is one offer decided by Allocate: Resources on AgentID go to
// FrameworkID for its role Role. The allocator records it as held until the
// caller Releases it (ReleaseRevocable when Revocable).
type Allocation struct {
	FrameworkID string
	Role        string
	AgentID     string
	Resources   resources.Resources
	// Revocable: Resources come from the agent's revocable pool
	// (SetAgentRevocable), never mixed with regular resources. An agent may
	// yield one regular and one revocable allocation per pass.
	Revocable bool
}

// Allocator is the hierarchical DRF allocator. It is not safe for concurrent
// use: the caller serializes calls. The zero value is not usable; call New.
type Allocator struct {
	minAllocatable resources.Resources
	seed           uint64

	agents     []agent
	agentIndex map[string]int32
	freeAgents []int32
	agentOrder []int32 // live agents in the order they were added
	// clusterTotal is the sum of the totals of all added agents, active or
	// not: the denominator of every share.
	clusterTotal scalars

	frameworks     []framework
	frameworkIndex map[string]int32
	freeFrameworks []int32

	members     []member
	freeMembers []int32
	// eligible has bit m set when member m may receive offers: its framework
	// is added and active, and the role is subscribed and not suppressed.
	eligible []uint64
	// revEligible: eligible and the framework has the revocable capability
	// (SetFrameworkRevocable): m may receive revocable offers.
	revEligible []uint64

	nodes     []node
	roleIndex map[string]int32
	freeNodes []int32

	// Per-agent bitsets over member indices, stride words per agent:
	// effective[a] bit m: m has a live filter on agent a whose resources
	// contain the agent's available resources, so m must not be offered
	// anything there. hasFilter[a] bit m: m has some live filter on a.
	stride    int
	effective []uint64
	hasFilter []uint64

	expiries expiryHeap

	// sharesDirty is set when every share changed (the cluster total or a
	// weight changed); the sorted orders are rebuilt before they are used.
	sharesDirty bool

	passes uint64
	pcg    *rand.PCG
	rng    *rand.Rand

	// Scratch space reused by Allocate.
	order   []int32
	touched []int32
}

// New returns an empty allocator.
func New(cfg Config) *Allocator {
	a := &Allocator{
		minAllocatable: cfg.MinAllocatable,
		seed:           cfg.Seed,
		agentIndex:     map[string]int32{},
		frameworkIndex: map[string]int32{},
		roleIndex:      map[string]int32{},
		stride:         1,
		eligible:       make([]uint64, 1),
		revEligible:    make([]uint64, 1),
	}
	if !cfg.MinAllocatable.ScalarsOnly().AnyScalarAtLeast(cfg.MinAllocatable) {
		// No scalar set: nothing could ever pass, use the default.
		a.minAllocatable = DefaultMinAllocatable
	}
	a.minAllocatable = a.minAllocatable.ScalarsOnly()
	a.pcg = rand.NewPCG(cfg.Seed, 0)
	a.rng = rand.New(a.pcg)
	// Node 0 is the root of the role tree.
	a.nodes = append(a.nodes, node{live: true, parent: -1, self: -1, weight: 1})
	return a
}

// ---- agents ----

// agent is one agent's state. Indices are dense and reused after removal.
//
// An agent's revocable pool is a second slot of the same type, its shadow
// (revocable set, owner its agent, same id), created by the first
// SetAgentRevocable or ClaimRevocable and freed with the agent. It is in
// neither agentIndex, agentOrder nor the cluster total; its total is the
// revocable estimate and its holds, filters and filter bits are the
// revocable ones, so holds, releases, filters, expiry and Revive work on it
// unchanged. Only the accounting differs: revocable holds go to
// member.revAlloc, never to the role tree (shares, quota).
type agent struct {
	id     string
	live   bool
	active bool
	// revocable marks a shadow; owner is then its agent's index.
	revocable bool
	owner     int32
	// rev is the index of the agent's shadow plus one; 0: none yet.
	rev int32
	// gen changes every time the slot is freed, so that stale entries of the
	// expiry heap are recognised.
	gen uint32

	total     resources.Resources
	allocated resources.Resources // sum of holds (ports as a union)
	available resources.Resources // total minus allocated
	// allocatable caches available.AnyScalarAtLeast(MinAllocatable).
	allocatable bool

	holds  []hold
	groups []filterGroup
	// minExpiry is the earliest expiry among the agent's filters (Unix
	// nanoseconds), noExpiry when it has none.
	minExpiry int64
}

// hold is what one member (framework in a role) holds on an agent:
// outstanding offers plus resources in use.
type hold struct {
	member int32
	res    resources.Resources
}

// AddAgent adds an agent with the given total resources, active. Adding an
// agent that is already known updates its total, activates it and keeps its
// allocations and filters.
func (a *Allocator) AddAgent(agentID string, total resources.Resources) {
	if ai, ok := a.agentIndex[agentID]; ok {
		a.agents[ai].active = true
		a.UpdateAgentTotal(agentID, total)
		return
	}
	ai := a.newAgentSlot()
	ag := &a.agents[ai]
	*ag = agent{
		id: agentID, live: true, active: true, gen: ag.gen,
		total: total, available: total,
		allocatable: total.AnyScalarAtLeast(a.minAllocatable),
		holds:       ag.holds[:0], groups: ag.groups[:0],
		minExpiry: noExpiry,
	}
	a.agentIndex[agentID] = ai
	a.agentOrder = append(a.agentOrder, ai)
	a.clusterTotal = a.clusterTotal.add(scalarsOf(total))
	a.sharesDirty = true
}

// newAgentSlot returns a free agent slot (with its rows of the filter
// bitsets), reusing a freed one when possible.
func (a *Allocator) newAgentSlot() int32 {
	if n := len(a.freeAgents); n > 0 {
		ai := a.freeAgents[n-1]
		a.freeAgents = a.freeAgents[:n-1]
		return ai
	}
	ai := int32(len(a.agents))
	a.agents = append(a.agents, agent{})
	a.effective = append(a.effective, make([]uint64, a.stride)...)
	a.hasFilter = append(a.hasFilter, make([]uint64, a.stride)...)
	return ai
}

// revocableSlot returns the index of agent ai's shadow (its revocable
// pool), creating an empty one when create is set.
func (a *Allocator) revocableSlot(ai int32, create bool) (int32, bool) {
	if r := a.agents[ai].rev; r != 0 {
		return r - 1, true
	}
	if !create {
		return -1, false
	}
	si := a.newAgentSlot()
	sh := &a.agents[si]
	*sh = agent{
		id: a.agents[ai].id, live: true, active: true, revocable: true, owner: ai, gen: sh.gen,
		holds: sh.holds[:0], groups: sh.groups[:0], minExpiry: noExpiry,
	}
	a.agents[ai].rev = si + 1
	return si, true
}

// SetAgentRevocable sets the revocable total of a known agent: its latest
// oversubscription estimate, the TOTAL revocable capacity, what revocable
// tasks and offers already hold included. What is offered is that total
// minus what is held in it (per scalar, never negative); when the estimate
// shrinks below what is held, nothing of the exceeded scalars is offered
// until it grows again or enough is released (the caller rescinds what
// RescindToFit names; the agent's QoS controller kills tasks).
// An empty total stops revocable offers on the agent; its revocable holds
// and filters are kept. Unknown agents are ignored.
func (a *Allocator) SetAgentRevocable(agentID string, total resources.Resources) {
	ai, ok := a.agentIndex[agentID]
	if !ok {
		return
	}
	si, ok := a.revocableSlot(ai, !total.IsEmpty())
	if !ok {
		return
	}
	sh := &a.agents[si]
	sh.total = total
	a.setAvailable(si, total.Sub(sh.allocated))
	a.refreshFilterBits(si)
}

// UpdateAgentTotal changes the total resources of a known agent, keeping its
// allocations. If the agent now holds more than its total, nothing of the
// exceeded scalars is offered until enough is released. Unknown agents are
// ignored.
func (a *Allocator) UpdateAgentTotal(agentID string, total resources.Resources) {
	ai, ok := a.agentIndex[agentID]
	if !ok {
		return
	}
	ag := &a.agents[ai]
	a.clusterTotal = a.clusterTotal.sub(scalarsOf(ag.total)).add(scalarsOf(total))
	ag.total = total
	a.setAvailable(ai, total.Sub(ag.allocated))
	a.refreshFilterBits(ai)
	a.sharesDirty = true
}

// RemoveAgent forgets an agent with its allocations and filters, regular
// and revocable (its revocable pool goes too). Its total leaves the cluster
// total. Unknown agents are ignored.
func (a *Allocator) RemoveAgent(agentID string) {
	ai, ok := a.agentIndex[agentID]
	if !ok {
		return
	}
	total := a.agents[ai].total
	if si, ok := a.revocableSlot(ai, false); ok {
		a.freeAgentSlot(si)
	}
	a.freeAgentSlot(ai)
	a.clusterTotal = a.clusterTotal.sub(scalarsOf(total))
	delete(a.agentIndex, agentID)
	if i := slices.Index(a.agentOrder, ai); i >= 0 {
		a.agentOrder = slices.Delete(a.agentOrder, i, i+1)
	}
	a.sharesDirty = true
}

// freeAgentSlot drops the holds (member accounting included), filters and
// bits of an agent slot (an agent or a shadow) and frees it.
func (a *Allocator) freeAgentSlot(ai int32) {
	ag := &a.agents[ai]
	holds := ag.holds
	ag.holds = nil
	for _, h := range holds {
		a.unaccountHold(ai, h)
		a.members[h.member].holds--
		a.maybeRemoveMember(h.member)
	}
	ag = &a.agents[ai]
	clear(a.rowOf(a.effective, ai))
	clear(a.rowOf(a.hasFilter, ai))
	for i := range ag.groups {
		ag.groups[i] = filterGroup{}
	}
	*ag = agent{gen: ag.gen + 1, holds: holds[:0], groups: ag.groups[:0]}
	a.freeAgents = append(a.freeAgents, ai)
}

// DeactivateAgent stops offers of the agent's resources, regular and
// revocable. Its total still counts in the cluster total and its
// allocations are kept.
func (a *Allocator) DeactivateAgent(agentID string) {
	if ai, ok := a.agentIndex[agentID]; ok {
		a.agents[ai].active = false
	}
}

// ActivateAgent resumes offers of the agent's resources.
func (a *Allocator) ActivateAgent(agentID string) {
	if ai, ok := a.agentIndex[agentID]; ok {
		a.agents[ai].active = true
	}
}

// setAvailable sets an agent's available resources and its allocatable flag.
func (a *Allocator) setAvailable(ai int32, available resources.Resources) {
	ag := &a.agents[ai]
	ag.available = available
	ag.allocatable = available.AnyScalarAtLeast(a.minAllocatable)
}

// findHold returns the index of member's hold on the agent, or -1.
func (ag *agent) findHold(member int32) int {
	for i := range ag.holds {
		if ag.holds[i].member == member {
			return i
		}
	}
	return -1
}

// ---- frameworks and members ----

// framework is one framework. A framework known only through Claim has
// added == false and gets no offers.
type framework struct {
	id     string
	live   bool
	added  bool
	active bool
	// revocable: the framework has the revocable capability.
	revocable bool
	// members are the framework's memberships: one per subscribed role and
	// per role it still holds resources in.
	members []int32
}

// member is a framework in one role: the unit that receives offers, holds
// resources and is filtered.
type member struct {
	fw   int32
	role int32 // role node
	live bool
	// subscribed: the role is among the framework's roles. A member whose
	// role was dropped stays (not subscribed) while it holds resources.
	subscribed bool
	suppressed bool
	// epoch invalidates the member's filters (Revive, removal): a filter is
	// live only while its epoch equals the member's.
	epoch uint32
	holds int32 // number of agent slots (shadows included) where the member holds something
	alloc scalars
	// revAlloc is what the member holds in revocable pools: outside alloc,
	// the role tree, shares and quota.
	revAlloc scalars
	share    float64 // sort key inside the role: dominant share of alloc
}

// AddFramework adds a framework subscribed to roles (role paths like
// "eng/web"; none means DefaultRole). Adding a known framework (a
// re-subscription, or one seen so far only through Claim) updates its
// roles and activity and unsuppresses all its roles; filters and the
// revocable capability (SetFrameworkRevocable) are kept.
func (a *Allocator) AddFramework(frameworkID string, roles []string, active bool) {
	fi := a.framework(frameworkID)
	fw := &a.frameworks[fi]
	fw.added = true
	fw.active = active
	for _, mi := range fw.members {
		a.members[mi].suppressed = false
	}
	a.UpdateFrameworkRoles(frameworkID, roles)
}

// UpdateFrameworkRoles changes the roles of an added framework. Roles it
// leaves lose their filters and suppression; resources held in them stay
// accounted to the role until released.
func (a *Allocator) UpdateFrameworkRoles(frameworkID string, roles []string) {
	fi, ok := a.frameworkIndex[frameworkID]
	if !ok || !a.frameworks[fi].added {
		return
	}
	roles = normalizeRoles(roles)
	for _, role := range roles {
		mi := a.member(fi, a.ensureRole(role))
		m := &a.members[mi]
		if !m.subscribed {
			m.subscribed = true
			m.suppressed = false
		}
	}
	for _, mi := range slices.Clone(a.frameworks[fi].members) {
		m := &a.members[mi]
		if !m.subscribed || slices.Contains(roles, a.nodes[m.role].name) {
			a.refreshEligible(mi)
			continue
		}
		m.subscribed = false
		m.suppressed = false
		a.dropFilters(mi)
		a.refreshEligible(mi)
		a.maybeRemoveMember(mi)
	}
}

// RemoveFramework forgets a framework: its allocations, regular and
// revocable (the caller has released or killed what it held), filters,
// suppression and capability.
func (a *Allocator) RemoveFramework(frameworkID string) {
	fi, ok := a.frameworkIndex[frameworkID]
	if !ok {
		return
	}
	for ai := range a.agents {
		ag := &a.agents[ai]
		if !ag.live {
			continue
		}
		removed := false
		kept := ag.holds[:0]
		for _, h := range ag.holds {
			if a.members[h.member].fw != fi {
				kept = append(kept, h)
				continue
			}
			a.unaccountHold(int32(ai), h)
			a.members[h.member].holds--
			ag.allocated = ag.allocated.Sub(h.res)
			removed = true
		}
		clear(ag.holds[len(kept):])
		ag.holds = kept
		if removed {
			a.setAvailable(int32(ai), ag.total.Sub(ag.allocated))
			a.refreshFilterBits(int32(ai))
		}
	}
	for _, mi := range slices.Clone(a.frameworks[fi].members) {
		a.members[mi].subscribed = false
		a.removeMember(mi)
	}
	if a.frameworks[fi].live { // removeMember frees a framework never added
		a.frameworks[fi] = framework{members: a.frameworks[fi].members[:0]}
		delete(a.frameworkIndex, frameworkID)
		a.freeFrameworks = append(a.freeFrameworks, fi)
	}
}

// SetFrameworkRevocable sets whether a known framework has the revocable
// capability (FRAMEWORK_CAPABILITY_REVOCABLE_RESOURCES): only such
// frameworks are offered revocable resources. Turning it off stops new
// revocable offers; what the framework holds stays until released. A
// framework starts without it; AddFramework (re-subscription) keeps it.
// Unknown frameworks are ignored.
func (a *Allocator) SetFrameworkRevocable(frameworkID string, capable bool) {
	fi, ok := a.frameworkIndex[frameworkID]
	if !ok {
		return
	}
	a.frameworks[fi].revocable = capable
	for _, mi := range a.frameworks[fi].members {
		a.refreshEligible(mi)
	}
}

// ActivateFramework lets an added framework receive offers again.
func (a *Allocator) ActivateFramework(frameworkID string) { a.setFrameworkActive(frameworkID, true) }

// DeactivateFramework stops offers to a framework (disconnected, failing
// over) while keeping its allocations, filters and suppression.
func (a *Allocator) DeactivateFramework(frameworkID string) { a.setFrameworkActive(frameworkID, false) }

func (a *Allocator) setFrameworkActive(frameworkID string, active bool) {
	fi, ok := a.frameworkIndex[frameworkID]
	if !ok {
		return
	}
	a.frameworks[fi].active = active
	for _, mi := range a.frameworks[fi].members {
		a.refreshEligible(mi)
	}
}

// Suppress stops offers, regular and revocable, to a framework for the
// given roles (none: all its roles) until Revive or re-subscription.
func (a *Allocator) Suppress(frameworkID string, roles []string) {
	a.forMembers(frameworkID, roles, func(mi int32) {
		a.members[mi].suppressed = true
		a.refreshEligible(mi)
	})
}

// Revive unsuppresses a framework for the given roles (none: all its roles)
// and clears all its filters in those roles, regular and revocable, on
// every agent.
func (a *Allocator) Revive(frameworkID string, roles []string) {
	a.forMembers(frameworkID, roles, func(mi int32) {
		a.members[mi].suppressed = false
		a.dropFilters(mi)
		a.refreshEligible(mi)
	})
}

// forMembers calls fn for each subscribed member of the framework whose
// role is in roles (all when roles is empty).
func (a *Allocator) forMembers(frameworkID string, roles []string, fn func(mi int32)) {
	fi, ok := a.frameworkIndex[frameworkID]
	if !ok {
		return
	}
	for _, mi := range a.frameworks[fi].members {
		m := &a.members[mi]
		if m.subscribed && (len(roles) == 0 || slices.Contains(roles, a.nodes[m.role].name)) {
			fn(mi)
		}
	}
}

// framework returns the index of a framework, creating it (not added) if
// unknown.
func (a *Allocator) framework(frameworkID string) int32 {
	if fi, ok := a.frameworkIndex[frameworkID]; ok {
		return fi
	}
	var fi int32
	if n := len(a.freeFrameworks); n > 0 {
		fi = a.freeFrameworks[n-1]
		a.freeFrameworks = a.freeFrameworks[:n-1]
	} else {
		fi = int32(len(a.frameworks))
		a.frameworks = append(a.frameworks, framework{})
	}
	a.frameworks[fi] = framework{id: frameworkID, live: true, members: a.frameworks[fi].members[:0]}
	a.frameworkIndex[frameworkID] = fi
	return fi
}

// member returns the member of framework fi in role node ri, creating it
// (not subscribed) if needed.
func (a *Allocator) member(fi, ri int32) int32 {
	for _, mi := range a.frameworks[fi].members {
		if a.members[mi].role == ri {
			return mi
		}
	}
	var mi int32
	if n := len(a.freeMembers); n > 0 {
		mi = a.freeMembers[n-1]
		a.freeMembers = a.freeMembers[:n-1]
	} else {
		mi = int32(len(a.members))
		a.members = append(a.members, member{})
		if int(mi) >= a.stride*64 {
			a.growStride()
		}
	}
	a.members[mi] = member{fw: fi, role: ri, live: true, epoch: a.members[mi].epoch}
	a.frameworks[fi].members = append(a.frameworks[fi].members, mi)
	leaf := &a.nodes[a.nodes[ri].self]
	leaf.members = a.insertMember(leaf.members, mi)
	return mi
}

// findMember returns the member of framework frameworkID in role, or -1.
func (a *Allocator) findMember(frameworkID, role string) int32 {
	fi, ok := a.frameworkIndex[frameworkID]
	if !ok {
		return -1
	}
	if role == "" {
		role = DefaultRole
	}
	ri, ok := a.roleIndex[role]
	if !ok {
		return -1
	}
	for _, mi := range a.frameworks[fi].members {
		if a.members[mi].role == ri {
			return mi
		}
	}
	return -1
}

// maybeRemoveMember removes a member that is no longer subscribed and holds
// nothing.
func (a *Allocator) maybeRemoveMember(mi int32) {
	m := &a.members[mi]
	if m.live && !m.subscribed && m.holds == 0 {
		a.removeMember(mi)
	}
}

// removeMember frees a member slot. Its holds must already be gone.
func (a *Allocator) removeMember(mi int32) {
	m := &a.members[mi]
	if !m.live {
		return
	}
	a.dropFilters(mi)
	setBit(a.eligible, mi, false)
	setBit(a.revEligible, mi, false)
	ri := m.role
	leaf := &a.nodes[a.nodes[ri].self]
	leaf.members = a.deleteMember(leaf.members, mi)
	fw := &a.frameworks[m.fw]
	if i := slices.Index(fw.members, mi); i >= 0 {
		fw.members = slices.Delete(fw.members, i, i+1)
	}
	fi := m.fw
	a.members[mi] = member{epoch: m.epoch}
	a.freeMembers = append(a.freeMembers, mi)
	a.maybeRemoveRole(ri)
	if fw.live && !fw.added && len(fw.members) == 0 {
		// Known only through claims that are all released now.
		delete(a.frameworkIndex, fw.id)
		a.frameworks[fi] = framework{members: fw.members[:0]}
		a.freeFrameworks = append(a.freeFrameworks, fi)
	}
}

// refreshEligible recomputes member mi's bits in eligible and revEligible.
func (a *Allocator) refreshEligible(mi int32) {
	m := &a.members[mi]
	fw := &a.frameworks[m.fw]
	on := m.live && m.subscribed && !m.suppressed && fw.added && fw.active
	setBit(a.eligible, mi, on)
	setBit(a.revEligible, mi, on && fw.revocable)
}

// normalizeRoles returns the roles sorted, deduplicated, with DefaultRole
// for an empty list and for empty names.
func normalizeRoles(roles []string) []string {
	out := make([]string, 0, max(len(roles), 1))
	for _, r := range roles {
		if r = strings.Trim(r, "/"); r == "" {
			r = DefaultRole
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		out = append(out, DefaultRole)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ---- usage accounting ----

// Claim records r as held on an agent by a framework in a role, e.g. the
// tasks a re-registering agent reports. The framework need not be added
// yet: it is tracked (it counts in shares and quota) but gets no offers
// until AddFramework. Claims on unknown agents are ignored; claims beyond
// the agent's available resources are recorded as they are (the agent is
// then over-committed and nothing of the exceeded scalars is offered).
func (a *Allocator) Claim(frameworkID, role, agentID string, r resources.Resources) {
	ai, ok := a.agentIndex[agentID]
	if !ok || r.IsEmpty() {
		return
	}
	a.claim(ai, frameworkID, role, r)
}

// ClaimRevocable is Claim for revocable resources: r is recorded in the
// agent's revocable pool (created empty if the agent has no estimate yet,
// so the claim over-commits it until SetAgentRevocable). It counts in
// neither shares nor quota.
func (a *Allocator) ClaimRevocable(frameworkID, role, agentID string, r resources.Resources) {
	ai, ok := a.agentIndex[agentID]
	if !ok || r.IsEmpty() {
		return
	}
	si, _ := a.revocableSlot(ai, true)
	a.claim(si, frameworkID, role, r)
}

// claim records r as held on agent slot ai (an agent or a shadow).
func (a *Allocator) claim(ai int32, frameworkID, role string, r resources.Resources) {
	if role = strings.Trim(role, "/"); role == "" {
		role = DefaultRole
	}
	mi := a.member(a.framework(frameworkID), a.ensureRole(role))
	a.refreshEligible(mi)
	a.addHold(ai, mi, r)
	a.accountHold(ai, mi, r, true)
	if !a.agents[ai].revocable {
		a.reposition(mi)
	}
}

// addHold adds r to member mi's hold on agent slot ai and takes it out of
// the slot's available resources.
func (a *Allocator) addHold(ai, mi int32, r resources.Resources) {
	ag := &a.agents[ai]
	if hi := ag.findHold(mi); hi >= 0 {
		ag.holds[hi].res = ag.holds[hi].res.Add(r)
	} else {
		ag.holds = append(ag.holds, hold{member: mi, res: r})
		a.members[mi].holds++
	}
	ag.allocated = ag.allocated.Add(r)
	a.setAvailable(ai, ag.available.Sub(r))
}

// accountHold adds (or subtracts) r, held on agent slot ai, to member mi's
// sums: regular holds to alloc and the role path (the caller repositions),
// revocable ones to revAlloc only.
func (a *Allocator) accountHold(ai, mi int32, r resources.Resources, add bool) {
	if a.agents[ai].revocable {
		m := &a.members[mi]
		if add {
			m.revAlloc = m.revAlloc.add(scalarsOf(r))
		} else {
			m.revAlloc = m.revAlloc.sub(scalarsOf(r))
		}
		return
	}
	a.account(mi, scalarsOf(r), add)
}

// unaccountHold takes hold h of agent slot ai out of its member's sums (and
// repositions the member if that moved its share).
func (a *Allocator) unaccountHold(ai int32, h hold) {
	a.accountHold(ai, h.member, h.res, false)
	if !a.agents[ai].revocable {
		a.reposition(h.member)
	}
}

// Release gives back resources a framework holds in a role on an agent: a
// declined, rescinded or expired offer, the unused part of an accepted
// offer, or the resources of a finished task. Only what is actually held is
// released; releasing more than held (or resources never held) is harmless.
//
// When refuse > 0, a filter is installed: until now+refuse, the framework is
// not offered, in that role on that agent, resources contained in r. Once
// the agent's available resources grow beyond r (a task ends, say), the
// filter no longer blocks, as in Mesos.
func (a *Allocator) Release(frameworkID, role, agentID string, r resources.Resources, refuse time.Duration, now time.Time) {
	ai, ok := a.agentIndex[agentID]
	if !ok {
		return
	}
	a.release(ai, frameworkID, role, r, refuse, now)
}

// ReleaseRevocable is Release for revocable resources, with the same
// contract: it gives back what the framework holds in the agent's
// revocable pool, and with refuse > 0 installs a revocable filter: until
// now+refuse the framework is not offered, in that role on that agent,
// revocable resources contained in r (regular offers are not affected, nor
// are revocable offers by regular filters). Agents without a revocable pool
// are ignored.
func (a *Allocator) ReleaseRevocable(frameworkID, role, agentID string, r resources.Resources, refuse time.Duration, now time.Time) {
	ai, ok := a.agentIndex[agentID]
	if !ok {
		return
	}
	if si, ok := a.revocableSlot(ai, false); ok {
		a.release(si, frameworkID, role, r, refuse, now)
	}
}

// release implements Release on agent slot ai (an agent or a shadow).
func (a *Allocator) release(ai int32, frameworkID, role string, r resources.Resources, refuse time.Duration, now time.Time) {
	mi := a.findMember(frameworkID, role)
	if mi < 0 {
		return
	}
	ag := &a.agents[ai]
	if hi := ag.findHold(mi); hi >= 0 {
		h := &ag.holds[hi]
		released := r
		if !h.res.Contains(r) {
			released = h.res.Min(r)
		}
		if !released.IsEmpty() {
			h.res = h.res.Sub(released)
			ag.allocated = ag.allocated.Sub(released)
			a.setAvailable(ai, ag.total.Sub(ag.allocated))
			if h.res.IsEmpty() {
				ag.holds = slices.Delete(ag.holds, hi, hi+1)
				a.members[mi].holds--
			}
			a.unaccountHold(ai, hold{member: mi, res: released})
			a.refreshFilterBits(ai)
		}
	}
	if refuse > 0 && !r.IsEmpty() && a.members[mi].live {
		a.addFilter(ai, mi, r, expiryAt(now, refuse))
	}
	a.maybeRemoveMember(mi)
}

// account adds (or subtracts) delta to member mi and every node on its role
// path (the role's virtual leaf, the role and its ancestors).
func (a *Allocator) account(mi int32, delta scalars, add bool) {
	m := &a.members[mi]
	leaf := a.nodes[m.role].self
	if add {
		m.alloc = m.alloc.add(delta)
		a.nodes[leaf].alloc = a.nodes[leaf].alloc.add(delta)
		for n := m.role; n > 0; n = a.nodes[n].parent {
			a.nodes[n].alloc = a.nodes[n].alloc.add(delta)
		}
		return
	}
	m.alloc = m.alloc.sub(delta)
	a.nodes[leaf].alloc = a.nodes[leaf].alloc.sub(delta)
	for n := m.role; n > 0; n = a.nodes[n].parent {
		a.nodes[n].alloc = a.nodes[n].alloc.sub(delta)
	}
}

// ---- roles ----

// SetWeight sets a role's weight (default 1): its share is divided by it,
// so a role of weight 2 is entitled to twice the resources of a role of
// weight 1. Non-positive or non-finite weights reset it to 1.
func (a *Allocator) SetWeight(role string, weight float64) {
	ri := a.ensureRole(role)
	n := &a.nodes[ri]
	if !(weight > 0) || weight > 1e300 {
		weight = 1
	}
	n.weight = weight
	n.weightSet = weight != 1
	a.sharesDirty = true
	a.maybeRemoveRole(ri)
}

// SetQuotaLimit sets a role's quota limit: the scalars its subtree holds
// (outstanding offers included) never grow beyond the limit, nor beyond
// any ancestor's limit, through offers; offers are clamped to the headroom.
// Only the scalars set (non-zero) in limit are limited; ports never are.
// An empty limit removes it. Claims are not limited (they report what
// already runs).
func (a *Allocator) SetQuotaLimit(role string, limit resources.Resources) {
	ri := a.ensureRole(role)
	n := &a.nodes[ri]
	n.quota = scalarsOf(limit)
	n.hasQuota = !n.quota.isZero()
	a.maybeRemoveRole(ri)
}

// headroom returns, per scalar, how much more role ri may be offered given
// its limit and its ancestors' (-1: unlimited).
func (a *Allocator) headroom(ri int32) scalars {
	h := scalars{-1, -1, -1}
	for n := ri; n > 0; n = a.nodes[n].parent {
		nd := &a.nodes[n]
		if !nd.hasQuota {
			continue
		}
		for s, limit := range nd.quota {
			if limit == 0 {
				continue
			}
			left := max(limit-nd.alloc[s], 0)
			if h[s] < 0 || left < h[s] {
				h[s] = left
			}
		}
	}
	return h
}

// clamp returns offer limited to the headroom of role ri.
func (a *Allocator) clamp(offer resources.Resources, ri int32) resources.Resources {
	h := a.headroom(ri)
	for s, left := range h {
		if left >= 0 && float64(left)/milliScale < offer.Get(resources.Scalar(s)) {
			offer = offer.With(resources.Scalar(s), float64(left)/milliScale)
		}
	}
	return offer
}
