package frameworkapi_test

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

var noon = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

func unavailable(start time.Time, d time.Duration) *slacklinev1.Unavailability {
	u := &slacklinev1.Unavailability{Start: timestamppb.New(start)}
	if d > 0 {
		u.Duration = durationpb.New(d)
	}
	return u
}

func drainingOffer(id string, u *slacklinev1.Unavailability) *slacklinev1.Offer {
	o := offer(id, "cpus:1;mem:128", resources.Regular)
	o.Unavailability = u
	return o
}

func TestUnavailabilityWindow(t *testing.T) {
	tests := []struct {
		name         string
		u            *slacklinev1.Unavailability
		ok, forever  bool
		overlapsNoon bool // overlaps [noon, noon+1h)
	}{
		{"none", nil, false, false, false},
		{"one hour at noon", unavailable(noon, time.Hour), true, false, true},
		{"forever from tomorrow", unavailable(noon.Add(24*time.Hour), 0), true, true, false},
		{"ended before noon", unavailable(noon.Add(-2*time.Hour), time.Hour), true, false, false},
		{"forever since yesterday", unavailable(noon.Add(-24*time.Hour), 0), true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, ok := frameworkapi.UnavailabilityWindow(tt.u)
			if ok != tt.ok || (ok && w.Forever() != tt.forever) || (ok && w.Overlaps(noon, noon.Add(time.Hour)) != tt.overlapsNoon) {
				t.Fatalf("window %+v ok %v: want ok %v forever %v overlaps %v", w, ok, tt.ok, tt.forever, tt.overlapsNoon)
			}
		})
	}
}

func TestPreferAvailable(t *testing.T) {
	offers := []*slacklinev1.Offer{
		drainingOffer("soon", unavailable(noon, time.Hour)),
		drainingOffer("free-1", nil),
		drainingOffer("later", unavailable(noon.Add(48*time.Hour), time.Hour)),
		drainingOffer("free-2", nil),
	}
	var got []string
	for _, o := range frameworkapi.PreferAvailable(offers) {
		got = append(got, o.GetId())
	}
	if fmt.Sprint(got) != "[free-1 free-2 later soon]" {
		t.Fatalf("PreferAvailable order = %v, want [free-1 free-2 later soon]", got)
	}
	if offers[0].GetId() != "soon" {
		t.Fatal("PreferAvailable changed its argument")
	}
	available, draining := frameworkapi.WithoutUnavailability(offers)
	if len(available) != 2 || len(draining) != 2 || draining[0].GetId() != "soon" {
		t.Fatalf("WithoutUnavailability = %v / %v", available, draining)
	}
}

func TestInverseOfferHelpers(t *testing.T) {
	inverse := []*slacklinev1.InverseOffer{
		{Id: "i-late", Unavailability: unavailable(noon.Add(time.Hour), 0)},
		{Id: "i-early", Unavailability: unavailable(noon, 0)},
	}
	if got := frameworkapi.InverseOfferIDs(inverse); fmt.Sprint(got) != "[i-late i-early]" {
		t.Fatalf("InverseOfferIDs = %v", got)
	}
	if got := frameworkapi.EarliestInverseOffer(inverse); got.GetId() != "i-early" {
		t.Fatalf("EarliestInverseOffer = %v", got)
	}
	if frameworkapi.EarliestInverseOffer(nil) != nil {
		t.Fatal("EarliestInverseOffer(nil) is not nil")
	}
}

// Place long-running work on agents that stay available: offers without
// unavailability first, then those whose maintenance starts latest.
func ExamplePreferAvailable() {
	start := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	offers := []*slacklinev1.Offer{
		{Id: "o-1", Hostname: "draining-soon", Unavailability: &slacklinev1.Unavailability{Start: timestamppb.New(start)}},
		{Id: "o-2", Hostname: "free"},
		{Id: "o-3", Hostname: "draining-later", Unavailability: &slacklinev1.Unavailability{Start: timestamppb.New(start.Add(time.Hour))}},
	}
	for _, o := range frameworkapi.PreferAvailable(offers) {
		w, scheduled := frameworkapi.OfferWindow(o)
		fmt.Println(o.GetHostname(), scheduled, w.Start.Format(time.Kitchen))
	}
	// Output:
	// free false 12:00AM
	// draining-later true 1:00PM
	// draining-soon true 12:00PM
}
