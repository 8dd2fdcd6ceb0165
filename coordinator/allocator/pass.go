package allocator

import (
	"math"
	"time"

	"github.com/slackline/slackline/resources"
)

// Allocate runs an allocation pass at time now over the given agents (nil:
// every agent, a full pass, shuffled when Config.Seed is set; otherwise in
// the order given, unknown ids skipped, so an empty non-nil list allocates
// nothing). Filters that expired at or before now are dropped first.
//
// Each returned Allocation is recorded as held by its framework in its role
// (an outstanding offer) until the caller Releases it (ReleaseRevocable for
// a revocable one). For each agent visited, the regular walk comes first,
// then the revocable one, in the same order. The returned slice belongs to
// the caller.
func (a *Allocator) Allocate(now time.Time, agentIDs []string) []Allocation {
	a.expireFilters(now.UnixNano())
	a.resort()
	order := a.order[:0]
	if agentIDs == nil {
		order = append(order, a.agentOrder...)
		if a.seed != 0 {
			a.passes++
			a.pcg.Seed(a.seed, a.passes)
			a.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		}
	} else {
		for _, id := range agentIDs {
			if ai, ok := a.agentIndex[id]; ok {
				order = append(order, ai)
			}
		}
	}
	a.order = order
	var out []Allocation
	for _, ai := range order {
		ag := &a.agents[ai]
		if !ag.active {
			continue
		}
		if ag.allocatable && a.hasCandidate(ai, a.eligible) {
			a.walk(0, ai, false, false, &out)
		}
		if ag.rev != 0 {
			// The revocable pool, in the same order: shares moved by the
			// regular walk are applied below, and revocable offers move
			// none.
			if si := ag.rev - 1; a.agents[si].allocatable && a.hasCandidate(si, a.revEligible) {
				a.walk(0, si, false, true, &out)
			}
		}
		// Shares moved only now, so that one agent is offered in the order
		// computed before it (as Mesos sorts once per agent), and the next
		// agent sees the new order.
		for _, mi := range a.touched {
			a.reposition(mi)
		}
		a.touched = a.touched[:0]
	}
	return out
}

// walk offers agent slot ai's available resources to the members under
// node ni, depth first in DRF order. quota says whether a role on the path
// has a limit. rev: ai is a shadow (a revocable pool): only revEligible
// members are candidates, quota does not apply and shares do not move. It
// returns false once the slot has nothing allocatable left.
func (a *Allocator) walk(ni, ai int32, quota, rev bool, out *[]Allocation) bool {
	n := &a.nodes[ni]
	quota = quota || (n.hasQuota && !rev)
	if !n.isLeaf {
		for _, child := range n.children {
			if !a.walk(child, ai, quota, rev, out) {
				return false
			}
		}
		return true
	}
	eff, has := a.rowOf(a.effective, ai), a.rowOf(a.hasFilter, ai)
	eligible := a.eligible
	if rev {
		eligible = a.revEligible
	}
	eligible = eligible[:len(eff)]
	for _, mi := range n.members {
		// The hot loop of a pass: one word test per member skipped.
		if w := mi >> 6; (eligible[w]&^eff[w])&(1<<(uint(mi)&63)) == 0 {
			continue
		}
		ag := &a.agents[ai]
		offer := ag.available
		if quota {
			offer = a.clamp(offer, a.members[mi].role)
			if !offer.AnyScalarAtLeast(a.minAllocatable) {
				continue
			}
		}
		if hasBit(has, mi) && a.filtered(ai, mi, offer) {
			continue
		}
		a.grant(ai, mi, offer)
		*out = append(*out, Allocation{
			FrameworkID: a.frameworks[a.members[mi].fw].id,
			Role:        a.nodes[n.parent].name,
			AgentID:     ag.id,
			Resources:   offer,
			Revocable:   rev,
		})
		if !ag.allocatable {
			return false
		}
	}
	return true
}

// grant records offer (contained in the slot's available resources) as
// held by member mi on agent slot ai. A regular grant's share move is
// applied after the agent (touched); a revocable one moves no share.
func (a *Allocator) grant(ai, mi int32, offer resources.Resources) {
	a.addHold(ai, mi, offer)
	a.accountHold(ai, mi, offer, true)
	if !a.agents[ai].revocable {
		a.touched = append(a.touched, mi)
	}
}

// expiryAt returns now+refuse in Unix nanoseconds, saturating below
// noExpiry.
func expiryAt(now time.Time, refuse time.Duration) int64 {
	t := now.UnixNano()
	if t > math.MaxInt64-1-int64(refuse) {
		return math.MaxInt64 - 1
	}
	return t + int64(refuse)
}
