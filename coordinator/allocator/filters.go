package allocator

import (
	"math"

	"github.com/slackline/slackline/resources"
)

// filterGroup gathers an agent's filters that refuse the same resources.
// Frameworks usually decline whole offers, so an agent's filters share a
// handful of distinct resource values; grouping them keeps a filter at 16
// bytes and lets a change of the agent's available resources be judged once
// per group rather than once per filter.
type filterGroup struct {
	res resources.Resources
	// covers: res contains the agent's available resources as of the last
	// refresh, so every live filter of the group blocks every offer there.
	covers  bool
	filters []filter
}

// filter refuses offers contained in its group's resources to a member on
// one agent until expiry.
type filter struct {
	member int32
	epoch  uint32 // live while equal to the member's epoch
	expiry int64  // Unix nanoseconds
}

// addFilter installs a filter for member mi on agent ai.
func (a *Allocator) addFilter(ai, mi int32, res resources.Resources, expiry int64) {
	ag := &a.agents[ai]
	epoch := a.members[mi].epoch
	gi := -1
	for i := range ag.groups {
		if ag.groups[i].res.Equal(res) {
			gi = i
			break
		}
	}
	if gi < 0 {
		gi = len(ag.groups)
		ag.groups = append(ag.groups, filterGroup{res: res, covers: res.Contains(ag.available)})
	}
	g := &ag.groups[gi]
	extended := false
	if hasBit(a.rowOf(a.hasFilter, ai), mi) {
		// The member may already have a filter here: extend it rather
		// than piling up duplicates.
		for i := range g.filters {
			f := &g.filters[i]
			if f.member == mi && f.epoch == epoch {
				f.expiry = max(f.expiry, expiry)
				extended = true
				break
			}
		}
	}
	if !extended {
		g.filters = append(g.filters, filter{member: mi, epoch: epoch, expiry: expiry})
	}
	setBit(a.rowOf(a.hasFilter, ai), mi, true)
	if g.covers {
		setBit(a.rowOf(a.effective, ai), mi, true)
	}
	if expiry < ag.minExpiry {
		ag.minExpiry = expiry
		a.expiries.push(expiryEntry{expiry: expiry, agent: ai, gen: ag.gen})
	}
}

// dropFilters makes all of member mi's filters stale, on every agent, in
// O(agents): the epoch bump invalidates the stored filters (they are
// reclaimed when they expire or when their agent's bits are rebuilt) and
// the member's bits are cleared.
func (a *Allocator) dropFilters(mi int32) {
	a.members[mi].epoch++
	w, bit := int(mi>>6), uint64(1)<<(uint(mi)&63)
	for i := w; i < len(a.hasFilter); i += a.stride {
		a.hasFilter[i] &^= bit
		a.effective[i] &^= bit
	}
}

// refreshFilterBits re-judges an agent's filter groups after its available
// resources changed, and rebuilds its bits when a judgement changed. A
// growth of the available resources can end a group's blocking (that is
// how a filter stops blocking once a task ends); the common case, an
// unchanged judgement, costs one containment test per group.
func (a *Allocator) refreshFilterBits(ai int32) {
	ag := &a.agents[ai]
	changed := false
	for i := range ag.groups {
		g := &ag.groups[i]
		if c := g.res.Contains(ag.available); c != g.covers {
			g.covers = c
			changed = true
		}
	}
	if changed {
		a.rebuildFilterBits(ai, noExpiry)
	}
}

// rebuildFilterBits recomputes an agent's bits from its filters in
// O(filters on the agent), dropping stale filters, filters that expired at
// or before now (pass noExpiry to keep them all) and empty groups, and
// recomputing minExpiry.
func (a *Allocator) rebuildFilterBits(ai int32, now int64) {
	ag := &a.agents[ai]
	eff, has := a.rowOf(a.effective, ai), a.rowOf(a.hasFilter, ai)
	clear(eff)
	clear(has)
	minExpiry := int64(noExpiry)
	groups := ag.groups[:0]
	for _, g := range ag.groups {
		kept := g.filters[:0]
		for _, f := range g.filters {
			if f.epoch != a.members[f.member].epoch || f.expiry <= now {
				continue
			}
			kept = append(kept, f)
			setBit(has, f.member, true)
			if g.covers {
				setBit(eff, f.member, true)
			}
			minExpiry = min(minExpiry, f.expiry)
		}
		if len(kept) > 0 {
			g.filters = kept
			groups = append(groups, g)
		}
	}
	clear(ag.groups[len(groups):])
	ag.groups = groups
	if minExpiry != ag.minExpiry {
		ag.minExpiry = minExpiry
		if minExpiry != noExpiry {
			a.expiries.push(expiryEntry{expiry: minExpiry, agent: ai, gen: ag.gen})
		}
	}
}

// expireFilters drops the filters that expired at or before now: it pops
// the agents whose earliest expiry has passed and rebuilds their bits.
// Cost: O(log n) per agent popped plus that agent's filters.
func (a *Allocator) expireFilters(now int64) {
	for len(a.expiries) > 0 && a.expiries[0].expiry <= now {
		e := a.expiries.pop()
		ag := &a.agents[e.agent]
		if !ag.live || ag.gen != e.gen || ag.minExpiry != e.expiry {
			continue // stale entry
		}
		ag.minExpiry = noExpiry // forces a push of the new minimum, if any
		a.rebuildFilterBits(e.agent, now)
	}
}

// filtered reports whether member mi has a live filter on agent ai that
// refuses offer. Cost: O(filters on the agent); only called when the
// member's hasFilter bit is set but its effective bit is not.
func (a *Allocator) filtered(ai, mi int32, offer resources.Resources) bool {
	ag := &a.agents[ai]
	epoch := a.members[mi].epoch
	for i := range ag.groups {
		g := &ag.groups[i]
		if !g.res.Contains(offer) {
			continue
		}
		for _, f := range g.filters {
			if f.member == mi && f.epoch == epoch {
				return true
			}
		}
	}
	return false
}

// noExpiry is the minExpiry of an agent without filters, and the "now"
// that expires nothing.
const noExpiry = math.MaxInt64

// ---- bitsets ----

// rowOf returns agent ai's words of a per-agent bitset.
func (a *Allocator) rowOf(set []uint64, ai int32) []uint64 {
	return set[int(ai)*a.stride : int(ai+1)*a.stride]
}

func hasBit(set []uint64, i int32) bool { return set[i>>6]&(1<<(uint(i)&63)) != 0 }

func setBit(set []uint64, i int32, on bool) {
	if on {
		set[i>>6] |= 1 << (uint(i) & 63)
	} else {
		set[i>>6] &^= 1 << (uint(i) & 63)
	}
}

// growStride doubles the number of words per agent of the bitsets.
func (a *Allocator) growStride() {
	stride := a.stride * 2
	grow := func(old []uint64) []uint64 {
		out := make([]uint64, len(a.agents)*stride)
		for ai := 0; ai*a.stride < len(old); ai++ {
			copy(out[ai*stride:], old[ai*a.stride:(ai+1)*a.stride])
		}
		return out
	}
	a.effective = grow(a.effective)
	a.hasFilter = grow(a.hasFilter)
	a.eligible = append(a.eligible, make([]uint64, stride-a.stride)...)
	a.revEligible = append(a.revEligible, make([]uint64, stride-a.stride)...)
	a.stride = stride
}

// hasCandidate reports whether some member of eligible (a.eligible, or
// a.revEligible for a shadow) has no effective filter on agent slot ai:
// stride word operations.
func (a *Allocator) hasCandidate(ai int32, eligible []uint64) bool {
	eff := a.rowOf(a.effective, ai)
	for w, e := range eligible {
		if e&^eff[w] != 0 {
			return true
		}
	}
	return false
}

// ---- expiry heap ----

// expiryEntry says agent's earliest filter expiry was expiry when pushed;
// it is stale once the agent's minExpiry or generation differ.
type expiryEntry struct {
	expiry int64
	agent  int32
	gen    uint32
}

// expiryHeap is a binary min-heap by expiry.
type expiryHeap []expiryEntry

func (h *expiryHeap) push(e expiryEntry) {
	*h = append(*h, e)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p].expiry <= s[i].expiry {
			break
		}
		s[p], s[i] = s[i], s[p]
		i = p
	}
}

func (h *expiryHeap) pop() expiryEntry {
	s := *h
	top := s[0]
	last := len(s) - 1
	s[0] = s[last]
	s = s[:last]
	i := 0
	for {
		l, r, small := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].expiry < s[small].expiry {
			small = l
		}
		if r < len(s) && s[r].expiry < s[small].expiry {
			small = r
		}
		if small == i {
			break
		}
		s[i], s[small] = s[small], s[i]
		i = small
	}
	*h = s
	return top
}
