package frameworkapi

import (
	"errors"
	"fmt"
	"github.com/slackline/slackline/internal/taskstate"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// DefaultRefuseSeconds is how long the coordinator refuses declined
// resources when Filters.refuse_seconds is unset.
const DefaultRefuseSeconds = 5.0

// Filters returns filters refusing declined resources for seconds (0: offer
// them again at once, to this framework or another).
func Filters(seconds float64) *slacklinev1.Filters {
	return &slacklinev1.Filters{RefuseSeconds: &seconds}
}

// RefuseSeconds returns the refusal that f asks for, DefaultRefuseSeconds
// when f or its refuse_seconds is unset.
func RefuseSeconds(f *slacklinev1.Filters) float64 {
	if f == nil || f.RefuseSeconds == nil {
		return DefaultRefuseSeconds
	}
	return f.GetRefuseSeconds()
}

// ErrMixedOffer is wrapped by OfferResources' error for an offer that mixes
// regular and revocable resources, which the coordinator never sends.
var ErrMixedOffer = errors.New("offer mixes regular and revocable resources")

// OfferResources returns what offer holds and whether it is revocable. Offers
// never mix regular and revocable resources; one that does gives an error
// wrapping ErrMixedOffer, and invalid resources one wrapping
// resources.ErrInvalid.
func OfferResources(offer *slacklinev1.Offer) (res resources.Resources, revocable bool, err error) {
	regular, revocableRes, err := resources.FromProto(offer.GetResources())
	if err != nil {
		return resources.Resources{}, false, fmt.Errorf("offer %s: %w", offer.GetId(), err)
	}
	switch {
	case !regular.IsEmpty() && !revocableRes.IsEmpty():
		return resources.Resources{}, false, fmt.Errorf("offer %s: %w", offer.GetId(), ErrMixedOffer)
	case !revocableRes.IsEmpty():
		return revocableRes, true, nil
	}
	return regular, false, nil
}

// OfferRole returns the role the offer's resources are allocated to (that of
// its first resource), which the resources of tasks launched on it must
// carry. An offer's resources all share one role.
func OfferRole(offer *slacklinev1.Offer) string {
	for _, r := range offer.GetResources() {
		return r.GetRole()
	}
	return ""
}

// NewTask returns a TaskInfo that runs cmd on the agent of offer with the
// resources needs, marked with the offer's role and revocability as the
// coordinator requires. needs must hold concrete ports, if any (see Pack).
// Labels can be added to the result.
func NewTask(id, name string, offer *slacklinev1.Offer, needs resources.Resources, cmd *slacklinev1.CommandInfo) *slacklinev1.TaskInfo {
	revocable := false
	for _, r := range offer.GetResources() {
		if r.GetRevocable() {
			revocable = true
			break
		}
	}
	return &slacklinev1.TaskInfo{
		TaskId:    id,
		Name:      name,
		AgentId:   offer.GetAgentId(),
		Resources: needs.Proto(OfferRole(offer), resources.Revocability(revocable)),
		Command:   cmd,
	}
}

// IsTerminal reports whether state is final: FINISHED, FAILED, KILLED,
// ERROR, LOST, DROPPED, GONE and GONE_BY_OPERATOR. UNREACHABLE and UNKNOWN
// are not: the task may still be running.
func IsTerminal(state slacklinev1.TaskState) bool { return taskstate.IsTerminal(state) }

// Need is what one task asks for.
type Need struct {
	// Resources are the scalars the task needs, plus any specific ports it
	// must have.
	Resources resources.Resources
	// Ports is how many more ports, any of them, the task needs. Pack picks
	// the lowest free ones of the offer.
	Ports int
}

// Placement is a task placed on an offer by Pack.
type Placement struct {
	// Need is the index of the task's Need in the slice given to Pack.
	Need int
	// Resources are the task's resources with its ports chosen: pass them to
	// NewTask.
	Resources resources.Resources
}

// OfferPlan is what Pack decided for one offer.
type OfferPlan struct {
	Offer *slacklinev1.Offer
	// Revocable reports whether the offer's resources are revocable.
	Revocable bool
	// Tasks are the tasks placed on the offer, in the order of the needs.
	// Empty means nothing fits: decline the offer.
	Tasks []Placement
	// Remaining is what is left of the offer after Tasks.
	Remaining resources.Resources
	// Err is set when the offer's resources could not be read (see
	// OfferResources); such an offer gets no tasks.
	Err error
}

// Pack places needs on offers, first fit: each need in order goes to the
// first offer (in order) that still has room for it and fewer than
// maxPerOffer tasks (0: no limit). A need that fits nowhere is left out and
// the following needs are still tried, so a big task at the head of the queue
// does not block small ones. Pack returns one plan per offer, in the order of
// offers. It does not look at revocability: filter offers first if it
// matters.
func Pack(offers []*slacklinev1.Offer, needs []Need, maxPerOffer int) []OfferPlan {
	plans := make([]OfferPlan, len(offers))
	for i, offer := range offers {
		res, revocable, err := OfferResources(offer)
		plans[i] = OfferPlan{Offer: offer, Revocable: revocable, Remaining: res, Err: err}
	}
	for n, need := range needs {
		for i := range plans {
			plan := &plans[i]
			if plan.Err != nil || (maxPerOffer > 0 && len(plan.Tasks) >= maxPerOffer) {
				continue
			}
			placed, ok := fit(plan.Remaining, need)
			if !ok {
				continue
			}
			plan.Tasks = append(plan.Tasks, Placement{Need: n, Resources: placed})
			plan.Remaining = plan.Remaining.Sub(placed)
			break
		}
	}
	return plans
}

// fit returns need with its ports chosen from available, and whether it fits.
func fit(available resources.Resources, need Need) (resources.Resources, bool) {
	if !available.Contains(need.Resources) {
		return resources.Resources{}, false
	}
	if need.Ports <= 0 {
		return need.Resources, true
	}
	free := available.Sub(need.Resources).Ports()
	picked, ok := lowestPorts(free, uint64(need.Ports))
	if !ok {
		return resources.Resources{}, false
	}
	return need.Resources.Add(resources.Resources{}.WithPorts(picked)), true
}

// lowestPorts returns the n lowest ports of free (sorted, disjoint ranges).
func lowestPorts(free resources.Ranges, n uint64) (resources.Ranges, bool) {
	var picked resources.Ranges
	for _, r := range free {
		if n == 0 {
			break
		}
		size := r.End - r.Begin + 1
		take := min(size, n)
		picked = append(picked, resources.Range{Begin: r.Begin, End: r.Begin + take - 1})
		n -= take
	}
	return picked, n == 0
}
