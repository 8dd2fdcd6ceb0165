package allocator

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/slackline/slackline/resources"
)

// offersOf builds outstanding revocable offers o1, o2, ... from their
// resources.
func offersOf(texts ...string) []RevocableOffer {
	offers := make([]RevocableOffer, len(texts))
	for i, text := range texts {
		offers[i] = RevocableOffer{ID: fmt.Sprintf("o%d", i+1), Resources: res(text)}
	}
	return offers
}

// TestRescindToFit: an estimate that shrinks below what is held rescinds
// the fewest offers that bring the pool back within it, taking back as
// little as possible among as few; one that grows, or shrinks within what
// is free, rescinds nothing; tasks beyond the estimate are never the
// coordinator's to take back.
func TestRescindToFit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		estimate string
		held     string // tasks and offers
		offers   []RevocableOffer
		want     []string
	}{
		{
			name: "grown: nothing", estimate: "cpus:3", held: "cpus:2",
			offers: offersOf("cpus:1", "cpus:1"),
		},
		{
			name: "shrunk within what is free: nothing", estimate: "cpus:2.5", held: "cpus:2",
			offers: offersOf("cpus:1", "cpus:1"),
		},
		{
			name: "shrunk to exactly what is held: nothing", estimate: "cpus:2", held: "cpus:2",
			offers: offersOf("cpus:2"),
		},
		{
			name: "one offer suffices: the one that takes back least", estimate: "cpus:1.5", held: "cpus:2",
			offers: offersOf("cpus:1", "cpus:0.5", "cpus:0.6"),
			want:   []string{"o2"},
		},
		{
			name: "fewest offers beat least taken back", estimate: "cpus:1.5", held: "cpus:2.5",
			offers: offersOf("cpus:0.5", "cpus:0.5", "cpus:1.5"),
			want:   []string{"o3"},
		},
		{
			name: "a tie goes to the earliest offers", estimate: "cpus:1", held: "cpus:2",
			offers: offersOf("cpus:0.5", "cpus:1", "cpus:1"),
			want:   []string{"o2"},
		},
		{
			name: "tasks hold part: offers cover only the rest", estimate: "cpus:1.4", held: "cpus:2.2", // tasks 1, offers 1.2
			offers: offersOf("cpus:0.4", "cpus:0.8"),
			want:   []string{"o2"},
		},
		{
			name: "tasks alone exceed the estimate: every offer, tasks left to QoS", estimate: "cpus:0.5", held: "cpus:2",
			offers: offersOf("cpus:0.3", "cpus:0.2"),
			want:   []string{"o1", "o2"},
		},
		{
			name: "estimate gone: every offer", estimate: "", held: "cpus:1",
			offers: offersOf("cpus:0.5", "cpus:0.5"),
			want:   []string{"o1", "o2"},
		},
		{
			name: "no offers: nothing to rescind", estimate: "cpus:0.5", held: "cpus:2",
		},
		{
			name: "each scalar must fit: cpus and mem from different offers", estimate: "cpus:2;mem:1024", held: "cpus:3;mem:2048",
			offers: offersOf("cpus:1;mem:128", "cpus:0.2;mem:1024", "cpus:1;mem:1024"),
			want:   []string{"o3"},
		},
		{
			name: "a scalar the estimate lost: every offer holding it", estimate: "cpus:2", held: "cpus:1;mem:512",
			offers: offersOf("cpus:0.5;mem:256", "cpus:0.5;mem:256"),
			want:   []string{"o1", "o2"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RescindToFit(res(tt.estimate), res(tt.held), tt.offers)
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("RescindToFit (-want +got):\n%s", diff)
			}
			assertFits(t, res(tt.estimate), res(tt.held), tt.offers, got)
		})
	}
}

// TestRescindToFitGreedy: beyond exactRescindLimit offers the choice is
// greedy, and still minimal in the sense that no chosen offer could be kept.
func TestRescindToFitGreedy(t *testing.T) {
	t.Parallel()
	texts := make([]string, exactRescindLimit+4)
	for i := range texts {
		texts[i] = "cpus:0.25"
	}
	texts[5] = "cpus:1" // covers the excess alone
	offers := offersOf(texts...)
	held := resources.New(0.25*float64(len(texts)-1)+1, 0, 0)
	estimate := held.Sub(resources.New(1, 0, 0))
	got := RescindToFit(estimate, held, offers)
	if diff := cmp.Diff([]string{"o6"}, got); diff != "" {
		t.Errorf("RescindToFit (-want +got):\n%s", diff)
	}
	assertFits(t, estimate, held, offers, got)

	// Ten small offers cover 1.25 cpus of excess: five of them.
	for i := range texts {
		texts[i] = "cpus:0.25"
	}
	offers = offersOf(texts...)
	held = resources.New(0.25*float64(len(texts)), 0, 0)
	estimate = held.Sub(resources.New(1.25, 0, 0))
	got = RescindToFit(estimate, held, offers)
	if len(got) != 5 {
		t.Errorf("RescindToFit chose %v, want five offers of 0.25 cpus for an excess of 1.25", got)
	}
	assertFits(t, estimate, held, offers, got)
}

// assertFits checks RescindToFit's contract on its answer: what remains
// held fits the estimate unless every offer was rescinded, and no chosen
// offer could have been kept.
func assertFits(t *testing.T, estimate, held resources.Resources, offers []RevocableOffer, ids []string) {
	t.Helper()
	rescinded := map[string]bool{}
	for _, id := range ids {
		rescinded[id] = true
	}
	remaining := held
	for _, o := range offers {
		if rescinded[o.ID] {
			remaining = remaining.Sub(o.Resources)
		}
	}
	if !estimate.Contains(remaining.ScalarsOnly()) && len(ids) != len(offers) {
		t.Errorf("after rescinding %v, %v is held of an estimate of %v", ids, remaining, estimate)
	}
	if !estimate.Contains(remaining.ScalarsOnly()) {
		return
	}
	for _, o := range offers {
		if rescinded[o.ID] && estimate.Contains(remaining.Add(o.Resources).ScalarsOnly()) {
			t.Errorf("offer %s (%v) was rescinded but the rest fit without it", o.ID, o.Resources)
		}
	}
}
