package frameworkapi

import (
	"cmp"
	"slices"
	"time"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// Window is an agent's maintenance window as read from an offer's or an
// inverse offer's unavailability.
type Window struct {
	// Start is when the agent's machine becomes unavailable.
	Start time.Time
	// End is when it is available again; zero means never (the
	// unavailability has no duration).
	End time.Time
}

// Forever reports whether the machine never comes back.
func (w Window) Forever() bool { return w.End.IsZero() }

// Overlaps reports whether the window overlaps [from, to).
func (w Window) Overlaps(from, to time.Time) bool {
	return w.Start.Before(to) && (w.Forever() || w.End.After(from))
}

// UnavailabilityWindow converts an unavailability; ok is false when u is
// nil (the agent is not scheduled for maintenance).
func UnavailabilityWindow(u *slacklinev1.Unavailability) (w Window, ok bool) {
	if u == nil || u.GetStart() == nil {
		return Window{}, false
	}
	w.Start = u.GetStart().AsTime()
	if d := u.GetDuration(); d != nil && d.AsDuration() > 0 {
		w.End = w.Start.Add(d.AsDuration())
	}
	return w, true
}

// OfferWindow returns the maintenance window of an offer's agent; ok is
// false when the agent is not scheduled for maintenance.
func OfferWindow(offer *slacklinev1.Offer) (Window, bool) {
	return UnavailabilityWindow(offer.GetUnavailability())
}

// CompareAvailability orders offers by how long their agents stay
// available: negative when a's agent is the better place for long-running
// work. Agents without unavailability come first, then those whose
// maintenance starts latest (the blog post's rule: "prefer agents with
// unavailability further in the future").
func CompareAvailability(a, b *slacklinev1.Offer) int {
	wa, oka := OfferWindow(a)
	wb, okb := OfferWindow(b)
	switch {
	case !oka && !okb:
		return 0
	case !oka:
		return -1
	case !okb:
		return 1
	}
	return -wa.Start.Compare(wb.Start)
}

// PreferAvailable returns the offers sorted by CompareAvailability (stable,
// so equally available offers keep their order); offers stays untouched.
// Pack places needs first fit, so Pack(PreferAvailable(offers), ...) puts
// tasks on agents without maintenance first.
func PreferAvailable(offers []*slacklinev1.Offer) []*slacklinev1.Offer {
	out := slices.Clone(offers)
	slices.SortStableFunc(out, CompareAvailability)
	return out
}

// WithoutUnavailability returns the offers whose agents are not scheduled
// for maintenance, and those that are, in their order.
func WithoutUnavailability(offers []*slacklinev1.Offer) (available, draining []*slacklinev1.Offer) {
	for _, o := range offers {
		if _, ok := OfferWindow(o); ok {
			draining = append(draining, o)
		} else {
			available = append(available, o)
		}
	}
	return available, draining
}

// InverseOfferIDs returns the ids of inverse offers, to answer them with
// AcceptInverseOffers or DeclineInverseOffers.
func InverseOfferIDs(offers []*slacklinev1.InverseOffer) []string {
	ids := make([]string, len(offers))
	for i, o := range offers {
		ids[i] = o.GetId()
	}
	return ids
}

// EarliestInverseOffer returns the inverse offer whose unavailability
// starts first (nil for none): the one to act on first.
func EarliestInverseOffer(offers []*slacklinev1.InverseOffer) *slacklinev1.InverseOffer {
	if len(offers) == 0 {
		return nil
	}
	return slices.MinFunc(offers, func(a, b *slacklinev1.InverseOffer) int {
		wa, _ := UnavailabilityWindow(a.GetUnavailability())
		wb, _ := UnavailabilityWindow(b.GetUnavailability())
		return cmp.Compare(wa.Start.UnixNano(), wb.Start.UnixNano())
	})
}
