package allocator

import (
	"fmt"
	"slices"

	"github.com/slackline/slackline/resources"
)

// checkInvariants verifies the allocator's internal bookkeeping: sums,
// orders, bitsets and indices. Tests call it after every operation.
//
// Revocable pools (shadow slots) are checked like agents (holds, available,
// filters and bits) plus: each is linked to exactly one live agent and back;
// it stays out of the cluster total; no hold mixes pools (a member's alloc,
// which feeds the role tree, shares and quota, is the sum of its regular
// holds only, its revAlloc that of its revocable holds); revocable
// eligibility implies eligibility and the framework's capability.
// (Revocable held <= revocable total through offers is checked per pass by
// checkedAllocate and per step by FuzzAllocator, since a shrinking estimate
// may legitimately over-commit a pool.)
func checkInvariants(a *Allocator) error {
	var total scalars
	memberAlloc := make([]scalars, len(a.members))
	memberRevAlloc := make([]scalars, len(a.members))
	memberHolds := make([]int32, len(a.members))
	shadows, owners := 0, 0
	for ai := range a.agents {
		ag := &a.agents[ai]
		if !ag.live {
			continue
		}
		if ag.revocable {
			shadows++
			if ag.owner < 0 || int(ag.owner) >= len(a.agents) {
				return fmt.Errorf("shadow %d: bad owner %d", ai, ag.owner)
			}
			ow := &a.agents[ag.owner]
			if !ow.live || ow.revocable || ow.rev != int32(ai)+1 || ow.id != ag.id {
				return fmt.Errorf("shadow %d of %s: owner link broken", ai, ag.id)
			}
			if ag.rev != 0 {
				return fmt.Errorf("shadow %d of %s has a shadow", ai, ag.id)
			}
		} else {
			if a.agentIndex[ag.id] != int32(ai) {
				return fmt.Errorf("agent %s: index mismatch", ag.id)
			}
			total = total.add(scalarsOf(ag.total))
			if ag.rev != 0 {
				owners++
				if si := ag.rev - 1; int(si) >= len(a.agents) || !a.agents[si].live || !a.agents[si].revocable || a.agents[si].owner != int32(ai) {
					return fmt.Errorf("agent %s: shadow link broken", ag.id)
				}
			}
		}
		var held scalars
		seen := map[int32]bool{}
		for _, h := range ag.holds {
			m := &a.members[h.member]
			if !m.live {
				return fmt.Errorf("agent %s: hold of dead member %d", ag.id, h.member)
			}
			if seen[h.member] {
				return fmt.Errorf("agent %s: two holds of member %d", ag.id, h.member)
			}
			seen[h.member] = true
			if h.res.IsEmpty() {
				return fmt.Errorf("agent %s: empty hold", ag.id)
			}
			held = held.add(scalarsOf(h.res))
			if ag.revocable {
				memberRevAlloc[h.member] = memberRevAlloc[h.member].add(scalarsOf(h.res))
			} else {
				memberAlloc[h.member] = memberAlloc[h.member].add(scalarsOf(h.res))
			}
			memberHolds[h.member]++
			if !ag.allocated.Contains(h.res) {
				return fmt.Errorf("agent %s: allocated %v lacks hold %v", ag.id, ag.allocated, h.res)
			}
		}
		if held != scalarsOf(ag.allocated) {
			return fmt.Errorf("agent %s: holds sum %v, allocated %v", ag.id, held.resources(), ag.allocated)
		}
		if want := ag.total.Sub(ag.allocated); !want.Equal(ag.available) {
			return fmt.Errorf("agent %s: available %v, want %v", ag.id, ag.available, want)
		}
		if ag.allocatable != ag.available.AnyScalarAtLeast(a.minAllocatable) {
			return fmt.Errorf("agent %s: stale allocatable flag", ag.id)
		}
		// Every live filter must be visible in hasFilter (or the pass would
		// ignore it); every effective bit must be backed by a live filter
		// whose resources contain the available resources.
		has, eff := a.rowOf(a.hasFilter, int32(ai)), a.rowOf(a.effective, int32(ai))
		for _, g := range ag.groups {
			for _, f := range g.filters {
				if f.epoch != a.members[f.member].epoch {
					continue
				}
				if !hasBit(has, f.member) {
					return fmt.Errorf("agent %s: live filter of member %d not in hasFilter", ag.id, f.member)
				}
				if f.expiry < ag.minExpiry {
					return fmt.Errorf("agent %s: filter expiry %d before minExpiry %d", ag.id, f.expiry, ag.minExpiry)
				}
			}
		}
		for mi := range a.members {
			if !hasBit(eff, int32(mi)) {
				continue
			}
			if !hasBit(has, int32(mi)) {
				return fmt.Errorf("agent %s: effective bit %d without hasFilter", ag.id, mi)
			}
			backed := false
			for _, g := range ag.groups {
				if !g.res.Contains(ag.available) {
					continue
				}
				for _, f := range g.filters {
					if f.member == int32(mi) && f.epoch == a.members[mi].epoch {
						backed = true
					}
				}
			}
			if !backed {
				return fmt.Errorf("agent %s: effective bit of member %d not backed by a covering filter", ag.id, mi)
			}
		}
	}
	if shadows != owners {
		return fmt.Errorf("%d revocable pools, %d agents with one", shadows, owners)
	}
	if total != a.clusterTotal {
		return fmt.Errorf("cluster total %v, want %v", a.clusterTotal.resources(), total.resources())
	}
	for mi := range a.members {
		m := &a.members[mi]
		if !m.live {
			if hasBit(a.eligible, int32(mi)) || hasBit(a.revEligible, int32(mi)) {
				return fmt.Errorf("dead member %d eligible", mi)
			}
			continue
		}
		fw := &a.frameworks[m.fw]
		if !fw.live || !slices.Contains(fw.members, int32(mi)) {
			return fmt.Errorf("member %d: framework link broken", mi)
		}
		if m.revAlloc != memberRevAlloc[mi] {
			return fmt.Errorf("member %d (%s in %s): revocable alloc %v, want %v", mi, fw.id,
				a.nodes[m.role].name, m.revAlloc.resources(), memberRevAlloc[mi].resources())
		}
		if m.alloc != memberAlloc[mi] || m.holds != memberHolds[mi] {
			return fmt.Errorf("member %d (%s in %s): alloc %v holds %d, want %v %d", mi, fw.id,
				a.nodes[m.role].name, m.alloc.resources(), m.holds, memberAlloc[mi].resources(), memberHolds[mi])
		}
		if !m.subscribed && m.holds == 0 {
			return fmt.Errorf("member %d: neither subscribed nor holding", mi)
		}
		want := m.subscribed && !m.suppressed && fw.added && fw.active
		if hasBit(a.eligible, int32(mi)) != want {
			return fmt.Errorf("member %d: eligible bit %v, want %v", mi, !want, want)
		}
		if want = want && fw.revocable; hasBit(a.revEligible, int32(mi)) != want {
			return fmt.Errorf("member %d: revEligible bit %v, want %v", mi, !want, want)
		}
		if !slices.Contains(a.nodes[a.nodes[m.role].self].members, int32(mi)) {
			return fmt.Errorf("member %d missing from its role", mi)
		}
	}
	for what, free := range map[string][]int32{"agent": a.freeAgents, "framework": a.freeFrameworks, "member": a.freeMembers, "node": a.freeNodes} {
		seen := map[int32]bool{}
		for _, i := range free {
			live := false
			switch what {
			case "agent":
				live = a.agents[i].live
			case "framework":
				live = a.frameworks[i].live
			case "member":
				live = a.members[i].live
			case "node":
				live = a.nodes[i].live
			}
			if seen[i] || live {
				return fmt.Errorf("%s free list: slot %d is live or listed twice", what, i)
			}
			seen[i] = true
		}
	}
	for fi := range a.frameworks {
		fw := &a.frameworks[fi]
		if !fw.live {
			continue
		}
		if a.frameworkIndex[fw.id] != int32(fi) {
			return fmt.Errorf("framework %s: index mismatch", fw.id)
		}
		if !fw.added && len(fw.members) == 0 {
			return fmt.Errorf("framework %s: known only through claims, yet holds nothing", fw.id)
		}
	}
	for name, ri := range a.roleIndex {
		n := &a.nodes[ri]
		if !n.live || n.name != name || n.isLeaf {
			return fmt.Errorf("role %q: bad node", name)
		}
		leaf := &a.nodes[n.self]
		var own scalars
		for _, mi := range leaf.members {
			own = own.add(a.members[mi].alloc)
		}
		if own != leaf.alloc {
			return fmt.Errorf("role %q: leaf alloc %v, want %v", name, leaf.alloc.resources(), own.resources())
		}
		var sub scalars
		for _, c := range n.children {
			sub = sub.add(a.nodes[c].alloc)
			if a.nodes[c].parent != ri {
				return fmt.Errorf("role %q: child parent link broken", name)
			}
		}
		if sub != n.alloc {
			return fmt.Errorf("role %q: alloc %v, want %v", name, n.alloc.resources(), sub.resources())
		}
		if !slices.Contains(a.nodes[n.parent].children, ri) {
			return fmt.Errorf("role %q: not among its parent's children", name)
		}
	}
	if a.sharesDirty {
		return nil
	}
	for ni := range a.nodes {
		n := &a.nodes[ni]
		if !n.live {
			continue
		}
		for i, c := range n.children {
			if got, want := a.nodes[c].share, a.nodeShare(c); got != want {
				return fmt.Errorf("node %q: cached share %v, want %v", a.nodes[c].name, got, want)
			}
			if i > 0 && !a.nodeLess(n.children[i-1], c) {
				return fmt.Errorf("children of %q not sorted", n.name)
			}
		}
		for i, mi := range n.members {
			if got, want := a.members[mi].share, a.memberShare(mi); got != want {
				return fmt.Errorf("member %d: cached share %v, want %v", mi, got, want)
			}
			if i > 0 && !a.memberLess(n.members[i-1], mi) {
				return fmt.Errorf("members of %q not sorted", n.name)
			}
		}
	}
	return nil
}

// mustCheck fails the test when the invariants are broken.
func mustCheck(t interface {
	Helper()
	Fatalf(string, ...any)
}, a *Allocator) {
	t.Helper()
	if err := checkInvariants(a); err != nil {
		t.Fatalf("invariants: %v", err)
	}
}

// res is a short alias for resources.MustParse.
func res(text string) resources.Resources { return resources.MustParse(text) }
