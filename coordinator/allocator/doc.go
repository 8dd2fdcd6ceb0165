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
// It is not safe for concurrent use; the coordinator serializes calls
// (under its own lock). No method returns an error: unknown agents,
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
// Memory: 16 bytes per live filter plus 2 bits per (agent, member) pair;
// filters made stale by Revive are reclaimed when they would have expired
// or when their agent's bits are next rebuilt.
package allocator
