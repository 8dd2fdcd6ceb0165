package allocator

import (
	"slices"

	"github.com/slackline/slackline/resources"
)

// RoleState describes one role for the operator API.
type RoleState struct {
	// Name is the full role path, e.g. "eng/web".
	Name string
	// Weight is the role's weight (1 unless set).
	Weight float64
	// QuotaLimit is the role's limit; empty when it has none.
	QuotaLimit resources.Resources
	// Allocated is what the role's subtree holds, outstanding offers
	// included (scalars only: ports are per agent and do not add up).
	// Regular resources only: revocable ones count in neither shares nor
	// quota.
	Allocated resources.Resources
	// Share is the subtree's dominant share of the cluster total divided by
	// the weight: the key the allocator orders sibling roles by.
	Share float64
	// Frameworks are the ids of the frameworks in the role itself (not its
	// descendants): subscribed to it, or still holding resources in it.
	Frameworks []string
}

// RoleStates returns every role of the tree (ancestors of framework roles
// included) and every role with a weight or quota set, sorted by name.
// O(roles + members).
func (a *Allocator) RoleStates() []RoleState {
	a.resort()
	var out []RoleState
	for name, ri := range a.roleIndex {
		n := &a.nodes[ri]
		st := RoleState{
			Name:      name,
			Weight:    n.weight,
			Allocated: n.alloc.resources(),
			Share:     n.share,
		}
		if n.hasQuota {
			st.QuotaLimit = n.quota.resources()
		}
		for _, mi := range a.nodes[n.self].members {
			st.Frameworks = append(st.Frameworks, a.frameworks[a.members[mi].fw].id)
		}
		slices.Sort(st.Frameworks)
		out = append(out, st)
	}
	slices.SortFunc(out, func(x, y RoleState) int { return compareRoleNames(x.Name, y.Name) })
	return out
}

// AgentAllocated returns what is held on an agent (offers and tasks, ports
// included) out of its regular total; empty for an unknown agent. See
// AgentRevocable for the revocable pool.
func (a *Allocator) AgentAllocated(agentID string) resources.Resources {
	ai, ok := a.agentIndex[agentID]
	if !ok {
		return resources.Resources{}
	}
	return a.agents[ai].allocated
}

// AgentAvailable returns an agent's regular total minus what is held on
// it; empty for an unknown agent.
func (a *Allocator) AgentAvailable(agentID string) resources.Resources {
	ai, ok := a.agentIndex[agentID]
	if !ok {
		return resources.Resources{}
	}
	return a.agents[ai].available
}

// FrameworkAllocated returns what a framework holds over all its roles and
// agents, regular resources only (scalars only: ports are per agent and do
// not add up). O(its roles).
func (a *Allocator) FrameworkAllocated(frameworkID string) resources.Resources {
	fi, ok := a.frameworkIndex[frameworkID]
	if !ok {
		return resources.Resources{}
	}
	var sum scalars
	for _, mi := range a.frameworks[fi].members {
		sum = sum.add(a.members[mi].alloc)
	}
	return sum.resources()
}

// FrameworkAllocatedRevocable returns what a framework holds in revocable
// pools over all its roles and agents (scalars only). O(its roles).
func (a *Allocator) FrameworkAllocatedRevocable(frameworkID string) resources.Resources {
	fi, ok := a.frameworkIndex[frameworkID]
	if !ok {
		return resources.Resources{}
	}
	var sum scalars
	for _, mi := range a.frameworks[fi].members {
		sum = sum.add(a.members[mi].revAlloc)
	}
	return sum.resources()
}

// AgentRevocable returns an agent's revocable total (its latest estimate,
// SetAgentRevocable) and what is held of it (revocable offers and tasks).
// allocated may exceed total after the estimate shrank. Both are empty for
// an unknown agent or one without a revocable pool.
func (a *Allocator) AgentRevocable(agentID string) (total, allocated resources.Resources) {
	ai, ok := a.agentIndex[agentID]
	if !ok {
		return resources.Resources{}, resources.Resources{}
	}
	si, ok := a.revocableSlot(ai, false)
	if !ok {
		return resources.Resources{}, resources.Resources{}
	}
	return a.agents[si].total, a.agents[si].allocated
}

// FrameworkAllocatedOn returns what a framework holds in a role on an agent,
// ports included, regular resources only.
func (a *Allocator) FrameworkAllocatedOn(frameworkID, role, agentID string) resources.Resources {
	ai, ok := a.agentIndex[agentID]
	mi := a.findMember(frameworkID, role)
	if !ok || mi < 0 {
		return resources.Resources{}
	}
	if hi := a.agents[ai].findHold(mi); hi >= 0 {
		return a.agents[ai].holds[hi].res
	}
	return resources.Resources{}
}

// ClusterTotal returns the sum of the regular totals of all added agents,
// active or not: the denominator of every share (scalars only; revocable
// totals are not included).
func (a *Allocator) ClusterTotal() resources.Resources {
	return a.clusterTotal.resources()
}
