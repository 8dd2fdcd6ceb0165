package allocator

import "github.com/slackline/slackline/resources"

// RevocableOffer is an outstanding revocable offer on one agent, as
// RescindToFit sees it: what it holds of the agent's revocable pool.
type RevocableOffer struct {
	ID        string
	Resources resources.Resources
}

// exactRescindLimit is the number of offers up to which RescindToFit
// searches every subset; beyond it, it picks greedily.
const exactRescindLimit = 12

// RescindToFit returns the IDs of the outstanding revocable offers on an
// agent to rescind after its estimate changed to estimate, when held (what
// revocable tasks and offers hold of the pool, AgentRevocable) is what the
// pool held before: the smallest set of offers whose resources cover the
// excess held − estimate, per scalar.
//
// Nothing is rescinded when the estimate still covers what is held (an
// estimate that grew never rescinds anything: the growth is offered on its
// own by the next pass). When the offers together cannot cover the excess,
// because revocable tasks alone hold more than the estimate, every offer is
// rescinded and the tasks beyond the estimate are left to the agent's QoS
// controller, which picks its victims; the coordinator never kills them.
//
// "Smallest" is the fewest offers; among as few, the one that takes back
// the least (the smallest sum over scalars of the rescinded fraction of
// what is held), then the earliest in offers. Up to exactRescindLimit
// offers every subset is tried; with more, offers are taken greedily, the
// one covering most of what is still in excess first, and then any offer
// the others make redundant is kept. The result is in the order of offers.
// RescindToFit is pure: it reads its arguments and keeps nothing.
func RescindToFit(estimate, held resources.Resources, offers []RevocableOffer) []string {
	excess := held.ScalarsOnly().Sub(estimate)
	if excess.IsEmpty() || len(offers) == 0 {
		return nil
	}
	var all resources.Resources
	for _, o := range offers {
		all = all.Add(o.Resources.ScalarsOnly())
	}
	chosen := make([]bool, len(offers))
	switch {
	case !all.Contains(excess):
		for i := range chosen {
			chosen[i] = true
		}
	case len(offers) <= exactRescindLimit:
		chosen = smallestCover(excess, held, offers)
	default:
		chosen = greedyCover(excess, offers)
	}
	var ids []string
	for i, o := range offers {
		if chosen[i] {
			ids = append(ids, o.ID)
		}
	}
	return ids
}

// smallestCover tries every subset of offers (at most exactRescindLimit)
// and returns the smallest that covers excess, as RescindToFit orders them.
// Some subset covers: the caller checked that all of them do.
func smallestCover(excess, held resources.Resources, offers []RevocableOffer) []bool {
	best, bestCount, bestCost := uint32(0), len(offers)+1, 0.0
	for set := uint32(1); set < 1<<len(offers); set++ {
		count := 0
		var sum resources.Resources
		for i, o := range offers {
			if set&(1<<i) != 0 {
				count++
				sum = sum.Add(o.Resources.ScalarsOnly())
			}
		}
		if count > bestCount || !sum.Contains(excess) {
			continue
		}
		cost := takenBack(sum, held)
		const tie = 1e-9 // costs are sums of fractions: equal ones may differ in the last bits
		if count < bestCount || cost < bestCost-tie || cost <= bestCost+tie && earlier(set, best) {
			best, bestCount, bestCost = set, count, cost
		}
	}
	chosen := make([]bool, len(offers))
	for i := range offers {
		chosen[i] = best&(1<<i) != 0
	}
	return chosen
}

// earlier reports whether set a holds an earlier offer than set b at the
// first offer where they differ.
func earlier(a, b uint32) bool {
	diff := a ^ b
	lowest := diff & -diff
	return a&lowest != 0
}

// takenBack is the sum over scalars of the fraction of held that r is.
func takenBack(r, held resources.Resources) float64 {
	cost := 0.0
	for s := range resources.NumScalars {
		if h := held.Get(s); h > 0 {
			cost += r.Get(s) / h
		}
	}
	return cost
}

// greedyCover picks, while excess remains, the offer that covers most of it
// (the sum over scalars of the covered fraction of the remaining excess;
// the earliest on a tie), then drops, latest first, any chosen offer
// without which the rest still cover excess. The caller checked that all
// offers together cover excess.
func greedyCover(excess resources.Resources, offers []RevocableOffer) []bool {
	chosen := make([]bool, len(offers))
	remaining := excess
	for !remaining.IsEmpty() {
		best, bestGain := -1, 0.0
		for i, o := range offers {
			if chosen[i] {
				continue
			}
			gain := 0.0
			for s := range resources.NumScalars {
				if need := remaining.Get(s); need > 0 {
					gain += min(o.Resources.Get(s), need) / need
				}
			}
			if gain > bestGain {
				best, bestGain = i, gain
			}
		}
		if best < 0 {
			break // cannot happen: all offers cover excess
		}
		chosen[best] = true
		remaining = remaining.Sub(offers[best].Resources)
	}
	for i := len(offers) - 1; i >= 0; i-- {
		if !chosen[i] {
			continue
		}
		chosen[i] = false
		var sum resources.Resources
		for j, o := range offers {
			if chosen[j] {
				sum = sum.Add(o.Resources.ScalarsOnly())
			}
		}
		if !sum.Contains(excess) {
			chosen[i] = true
		}
	}
	return chosen
}
