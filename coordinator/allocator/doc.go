// Package allocator is Slackline's resource allocator: a hierarchical
// Dominant Resource Fairness (DRF) allocator with role weights, quota
// limits, offer filters and suppression, modelled on Mesos's
// HierarchicalDRFAllocator. It decides which framework is offered which
// agent's free resources; the coordinator turns its decisions into offers.
//
// # A pure, deterministic core
//
// The allocator owns no goroutine, reads no clock and does no I/O, in the
// manner of etcd's raft: time comes in as the now argument of Allocate and
// Release, and the same sequence of calls always produces the same offers.
// It is not safe for concurrent use: coordinator/core holds it, and the
// coordinator makes every core call under its lock. No method returns an error: unknown agents,
// frameworks and roles make a call a no-op, as documented on each method,
// and the caller validates what it takes from the outside (role names,
// weights, resources).
//
// # Lifecycle and ownership
//
// Agents enter with AddAgent and leave with RemoveAgent; DeactivateAgent
// stops offers of an agent without forgetting it. Frameworks enter with
// AddFramework and leave with RemoveFramework; DeactivateFramework (a
// disconnected framework that may fail over) keeps its allocations and
// filters. Resources are "held" by a framework in one of its roles on one
// agent, from the moment Allocate offers them (or Claim records them, for
// tasks an agent reports when it re-registers) until the caller Releases
// them: a declined, rescinded or timed-out offer, the unused part of an
// accepted offer, a finished task. The caller owns the offers: the
// allocator never takes anything back by itself.
//
// Allocate returns a new slice the caller owns. Resources values are
// immutable (package resources), so they are shared, never copied.
//
// # The role tree
//
// Roles are paths: "eng/web" is the child of "eng", and both nodes exist as
// soon as a framework subscribes to "eng/web". "*" (DefaultRole) is a
// top-level role like any other. A role's node exists while a framework
// subscribes to it or holds resources in it, while it has child roles, or
// while it has a weight or a quota limit.
//
// A role may have frameworks of its own and child roles at the same time.
// As in Mesos, its frameworks then live under a virtual leaf, a child named
// "." that stands for the role's own allocation and competes with the child
// roles; the leaf weighs what the role weighs.
//
// # The algorithm
//
// A node's share is the dominant share of what its subtree holds
// (outstanding offers included) over the cluster total, divided by the
// role's weight (SetWeight, default 1). The dominant share of resources R
// over total T is the largest R[s]/T[s] over the scalars s (cpus, mem,
// disk); ports do not count. The cluster total is the sum of the totals of
// every agent added, active or not.
//
// A pass visits agents one after the other: every agent in the order they
// were added (a full pass, Allocate(now, nil); shuffled per pass when
// Config.Seed is set), or those given (an event-driven pass). For one
// agent, candidates are taken depth first through the role tree, children
// of each node in ascending (share, name) order, and inside a role its
// frameworks in ascending (dominant share in that role, framework id)
// order. A candidate is skipped when its framework is not added or not
// active, when it suppressed the role, or when one of its filters refuses
// the offer. Otherwise it gets all of the agent's remaining available
// resources, with every scalar clamped to the quota headroom of its role
// and of each ancestor, provided the clamped offer passes
// Config.MinAllocatable (some scalar at least the configured amount:
// cpus:0.01 or mem:32 by default). The agent is done when what remains no
// longer passes MinAllocatable or every candidate was tried. The order is
// computed once per agent (Mesos sorts once per agent too); the shares
// moved by the agent's offers are applied before the next agent, so DRF
// holds across agents and event-driven and full passes behave alike.
//
// The DRF paper's example shows the effect: on one agent of <9 cpus, 18
// GiB>, a framework whose tasks need <1 cpu, 4 GiB> and one whose tasks
// need <3 cpus, 1 GiB> end with 3 and 2 tasks, both at a dominant share of
// 2/3, if each launches one task per offer and gives back the rest.
//
// # Filters
//
// Release with refuse > 0 installs a filter: until now+refuse, the
// framework is not offered, in that role on that agent, any resources
// contained in the released ones. When the agent's available resources
// grow beyond them (a task ended), the filter stops blocking, because the
// offer would no longer be contained in it; that is Mesos's semantics.
// Expired filters are dropped at the start of Allocate. Revive clears all
// of a framework's filters in the given roles; so do RemoveFramework and
// leaving a role.
//
// # Suppression
//
// Suppress stops offers to a framework in some or all of its roles;
// Revive undoes it (and clears filters). AddFramework on a known framework
// (a re-subscription) starts unsuppressed, as a Mesos SUBSCRIBE does when
// it lists no suppressed roles.
//
// # Quota limits
//
// SetQuotaLimit caps what a role's subtree holds, outstanding offers
// included: offers are clamped so that no role's consumption grows beyond
// its limit or any ancestor's. Only the scalars set in the limit are
// limited (a limit of cpus:4 leaves memory unlimited, so a role at its cpu
// limit can still be offered memory); ports are never limited. Claims are
// not clamped: they record what already runs, so a role can be above its
// limit after a limit is lowered or agents re-register; it is then offered
// nothing of the exceeded scalars until it falls below.
//
// # Revocable resources
//
// Apart from its regular total, an agent has a revocable pool (Mesos's
// oversubscription). SetAgentRevocable sets its total: the agent's latest
// oversubscription estimate, meaning the TOTAL revocable capacity of the
// agent, what revocable tasks and offers already hold included (not what is
// still free). What a pass offers of it is that total minus what is held of
// it, per scalar and never negative. When an estimate shrinks below what is
// held, nothing of the exceeded scalars is offered (for the usual cpus-only
// estimate: nothing at all) until the estimate grows again or enough is
// released; the allocator takes nothing back by itself. The caller rescinds
// the fewest outstanding revocable offers on that agent that bring what is
// held back within the estimate (RescindToFit, a pure function of the
// estimate, what is held and the offers), and the agent's QoS controller
// throttles or kills revocable tasks if it must. An estimate that grows
// rescinds nothing: the next pass offers the growth in an offer of its own.
//
// Only frameworks with the capability (SetFrameworkRevocable; a framework
// starts without it, AddFramework keeps it) are offered revocable
// resources, and always in allocations of their own (Allocation.Revocable):
// a revocable allocation never holds regular resources and a regular one
// never holds revocable resources, so rescinding revocable offers never
// takes regular resources away (Mesos mixes both in one offer). A pass
// walks each agent's regular resources, then its revocable pool: an agent
// may yield one regular and one revocable allocation per pass, possibly to
// different frameworks. Holds are separate too: ClaimRevocable and
// ReleaseRevocable have the contracts of Claim and Release on the pool
// (a claim may over-commit it, e.g. an agent re-registering with revocable
// tasks before its first estimate), and AgentRevocable and
// FrameworkAllocatedRevocable report them; AgentAllocated, AgentAvailable,
// FrameworkAllocated(On), RoleStates and ClusterTotal are regular only.
//
// Revocable resources never count against quota: revocable offers are not
// clamped (a role at its limit is still offered revocable resources) and
// revocable holds take no headroom. They do not count in DRF shares either:
// shares, and so the order, are computed from regular holds over the
// regular cluster total only, and the revocable pool of an agent is offered
// in the same DRF order as its regular resources. This is deliberate, and
// differs from Mesos, whose sorter counts revocable resources: revocable
// resources are best-effort slack that a framework without the capability
// could not have used and that may vanish at any moment; counting them would
// lower a framework's priority for guaranteed resources because it soaked up
// slack nobody else could take. The consequence: revocable offers move no
// share, so within a pass the lowest-share capable candidate is offered
// every revocable pool it is not filtered on (as in one pass it is offered
// every agent until its regular share moves); revocable capacity spreads as
// regular shares change and as frameworks decline it.
//
// MinAllocatable applies to revocable offers as to regular ones. Revocable
// filters: ReleaseRevocable with refuse > 0 installs a filter that blocks,
// until now+refuse, revocable offers to that framework in that role on that
// agent that are contained in the released resources; it never blocks
// regular offers, nor does a regular filter block revocable ones. A grown
// estimate is no longer contained, so it lifts the filter, as a grown
// regular available does. DeactivateAgent, DeactivateFramework and
// Suppress stop revocable offers too; Revive clears revocable filters as
// well; RemoveAgent drops the pool with its holds and filters (an agent
// added again has no pool until SetAgentRevocable); RemoveFramework drops
// the framework's revocable holds and its capability; leaving a role drops
// its revocable filters, and revocable holds keep the role accounted until
// released, like regular ones.
//
// # Invariants
//
//   - What is held on an agent never exceeds its total through offers: each
//     offer is taken out of the agent's available resources (total minus
//     held), so nothing is offered twice at once, to the same framework or
//     to two. (Claim and UpdateAgentTotal record reality and may
//     over-commit an agent; nothing of an over-committed scalar is then
//     offered.)
//   - Offers never push a role's subtree beyond its quota limit or an
//     ancestor's.
//   - Likewise, what is held of a revocable pool never exceeds its total
//     through offers (a shrinking estimate or a claim may over-commit it).
//     No allocation or hold mixes regular and revocable resources, and
//     revocable holds change no role's allocation, share or quota use.
//   - Releasing more than is held releases what is held; releasing for an
//     unknown framework, role or agent does nothing.
//   - Per-role and per-framework sums are exact (fixed-point integers).
//
// # Data structures and complexity
//
// Agents, frameworks, framework-in-role members and role-tree nodes live in
// dense slices indexed by small integers, reused after removal; string ids
// are mapped to indices only at the API edge.
//
// Each node keeps its children sorted by (share, name) and each role its
// members sorted by (share, id). After an offer or a release only the
// member and the nodes on its role path move, each by a binary search and
// one shift: O(depth x (log n + n words of memmove)). When the cluster
// total or a weight changes every share moves, so the orders are rebuilt
// (O(n log n)) before the next use.
//
// Filters are stored per agent, grouped by their resources (declines of
// whole offers share a few distinct values); a filter is 16 bytes. Two
// bitsets per agent over member indices summarise them: hasFilter (the
// member has some live filter there) and effective (one of its filters
// contains the agent's available resources, so it blocks every offer
// there). They are updated when a filter is installed, when the agent's
// available resources grow (re-judging one containment per group, and
// rebuilding the agent's bits only if a judgement changed), when filters
// expire (an agent min-heap keyed by each agent's earliest expiry) and on
// Revive (a per-member epoch makes stored filters stale in O(1); its bits
// are cleared in O(agents)). A further bitset marks the members that may
// be offered anything (added, active, subscribed, not suppressed).
//
// So the pass skips an agent on which every candidate is filtered with a
// few word operations (eligible AND NOT effective, one word per 64
// members), without walking the tree: a full pass over 10,000 agents on
// which 1,000 frameworks all declined everything takes about 0.1 ms and
// allocates nothing (Mesos 1.7: about 1 s). An agent with candidates costs
// O(roles + members skipped before the first taker). Release costs
// O(holds on the agent + depth x log n) plus, with a filter, O(filter
// groups on the agent) amortised. Introspection (RoleStates,
// FrameworkAllocated) is O(roles + members) and off the hot path.
// RemoveFramework and RemoveAgent are O(agents + holds).
//
// An agent's revocable pool is a second agent slot, its shadow, created by
// the first SetAgentRevocable or ClaimRevocable: it has its own total,
// holds, filter groups and rows of the filter bitsets, and is in neither
// the agent index, the agent order nor the cluster total. Holds, releases,
// filters, their expiry and Revive's epoch bump thus work on it unchanged;
// only the accounting differs (revocable holds go to a per-member sum
// outside the role tree). A bitset revEligible (eligible AND capable) plays
// eligible's part for pools, so a pass skips a pool on which every capable
// candidate is filtered with the same few word operations, and an agent
// without a pool costs the pass one field test.
//
// Memory: 16 bytes per live filter plus 2 bits per (agent, member) pair
// (per pool and member for revocable pools);
// filters made stale by Revive are reclaimed when they would have expired
// or when their agent's bits are next rebuilt.
package allocator
