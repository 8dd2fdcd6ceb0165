package coordinator

import (
	"cmp"
	"slices"
	"time"

	"github.com/slackline/slackline/coordinator/allocator"
	"github.com/slackline/slackline/resources"
)

// applyEstimate installs an agent's new oversubscription estimate (its
// total revocable capacity) and rescinds only what no longer fits: the
// fewest outstanding revocable offers on the agent that bring what its
// revocable tasks and offers hold back within the estimate
// (allocator.RescindToFit; on a tie, the newest offers, which their
// frameworks have had the least time to use). An estimate that grows
// rescinds nothing: the next pass offers the growth in an offer of its own.
// Revocable tasks beyond the estimate are the agent's QoS controller's to
// throttle or kill, never the coordinator's. Caller holds c.mu.
func (c *Coordinator) applyEstimate(a *agent, estimate resources.Resources, now time.Time) {
	_, held := c.alloc.AgentRevocable(a.id)
	a.revocable = estimate
	c.alloc.SetAgentRevocable(a.id, estimate)
	var outstanding []*offer
	for _, o := range a.offers {
		if o.revocable {
			outstanding = append(outstanding, o)
		}
	}
	slices.SortFunc(outstanding, func(x, y *offer) int {
		return cmp.Or(y.created.Compare(x.created), cmp.Compare(x.id, y.id))
	})
	candidates := make([]allocator.RevocableOffer, len(outstanding))
	for i, o := range outstanding {
		candidates[i] = allocator.RevocableOffer{ID: o.id, Resources: o.resources}
	}
	for _, id := range allocator.RescindToFit(estimate, held, candidates) {
		c.metrics.revocableRescinded.Inc()
		c.rescindOffer(a.offers[id], now)
	}
	c.markDirty(a.id)
}
