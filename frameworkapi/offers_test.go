package frameworkapi_test

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/slackline/slackline/frameworkapi"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/resources"
)

// offer returns an offer of text on agent "a-<id>", in role "*".
func offer(id, text string, revocability resources.Revocability) *slacklinev1.Offer {
	return &slacklinev1.Offer{
		Id:        id,
		AgentId:   "a-" + id,
		Resources: resources.MustParse(text).Proto("*", revocability),
	}
}

func TestOfferResources(t *testing.T) {
	mixed := offer("m", "cpus:1", resources.Regular)
	mixed.Resources = append(mixed.Resources, resources.MustParse("mem:10").Proto("*", resources.Revocable)...)
	invalid := &slacklinev1.Offer{Id: "bad", Resources: []*slacklinev1.Resource{{Name: "gpus", Scalar: 1}}}
	tests := []struct {
		name          string
		offer         *slacklinev1.Offer
		want          string
		wantRevocable bool
		wantErr       error
	}{
		{name: "regular", offer: offer("r", "cpus:2;mem:256;ports:[31000-31010]", resources.Regular), want: "cpus:2;mem:256;ports:[31000-31010]"},
		{name: "revocable", offer: offer("v", "cpus:1.5;mem:64", resources.Revocable), want: "cpus:1.5;mem:64", wantRevocable: true},
		{name: "empty", offer: &slacklinev1.Offer{Id: "e"}, want: ""},
		{name: "mixed", offer: mixed, wantErr: frameworkapi.ErrMixedOffer},
		{name: "invalid", offer: invalid, wantErr: resources.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, revocable, err := frameworkapi.OfferResources(tt.offer)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("OfferResources() error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if got.String() != tt.want || revocable != tt.wantRevocable {
				t.Errorf("OfferResources() = %q, %v; want %q, %v", got, revocable, tt.want, tt.wantRevocable)
			}
		})
	}
}

func TestPack(t *testing.T) {
	small := frameworkapi.Need{Resources: resources.MustParse("cpus:1;mem:128")}
	big := frameworkapi.Need{Resources: resources.MustParse("cpus:4;mem:128")}
	withPorts := frameworkapi.Need{Resources: resources.MustParse("cpus:1"), Ports: 3}

	type placement struct {
		Offer     string
		Need      int
		Resources string
	}
	tests := []struct {
		name        string
		offers      []*slacklinev1.Offer
		needs       []frameworkapi.Need
		maxPerOffer int
		want        []placement
		wantLeft    map[string]string // offer id -> remaining
	}{
		{
			name:   "as many as fit, first offer first",
			offers: []*slacklinev1.Offer{offer("o1", "cpus:2.5;mem:1024", resources.Regular), offer("o2", "cpus:2;mem:1024", resources.Regular)},
			needs:  []frameworkapi.Need{small, small, small, small, small},
			want: []placement{
				{"o1", 0, "cpus:1;mem:128"}, {"o1", 1, "cpus:1;mem:128"},
				{"o2", 2, "cpus:1;mem:128"}, {"o2", 3, "cpus:1;mem:128"},
			},
			wantLeft: map[string]string{"o1": "cpus:0.5;mem:768", "o2": "mem:768"},
		},
		{
			name:        "capped per offer",
			offers:      []*slacklinev1.Offer{offer("o1", "cpus:8;mem:1024", resources.Regular), offer("o2", "cpus:8;mem:1024", resources.Regular)},
			needs:       []frameworkapi.Need{small, small, small},
			maxPerOffer: 2,
			want:        []placement{{"o1", 0, "cpus:1;mem:128"}, {"o1", 1, "cpus:1;mem:128"}, {"o2", 2, "cpus:1;mem:128"}},
		},
		{
			name:   "a need that fits nowhere does not block the next",
			offers: []*slacklinev1.Offer{offer("o1", "cpus:2;mem:1024", resources.Regular)},
			needs:  []frameworkapi.Need{big, small},
			want:   []placement{{"o1", 1, "cpus:1;mem:128"}},
		},
		{
			name:   "nothing fits",
			offers: []*slacklinev1.Offer{offer("o1", "cpus:0.5;mem:1024", resources.Regular)},
			needs:  []frameworkapi.Need{small},
		},
		{
			name:   "ports are the lowest free ones, across ranges",
			offers: []*slacklinev1.Offer{offer("o1", "cpus:4;ports:[31000-31001,31005-31010]", resources.Regular)},
			needs:  []frameworkapi.Need{withPorts, withPorts, withPorts},
			want: []placement{
				{"o1", 0, "cpus:1;ports:[31000-31001,31005-31005]"},
				{"o1", 1, "cpus:1;ports:[31006-31008]"},
			},
			wantLeft: map[string]string{"o1": "cpus:2;ports:[31009-31010]"},
		},
		{
			name:   "specific ports",
			offers: []*slacklinev1.Offer{offer("o1", "cpus:4;ports:[80-80,443-443]", resources.Regular)},
			needs: []frameworkapi.Need{
				{Resources: resources.MustParse("cpus:1;ports:[80]")},
				{Resources: resources.MustParse("cpus:1;ports:[80]")},
				{Resources: resources.MustParse("cpus:1;ports:[443]"), Ports: 1},
			},
			want: []placement{{"o1", 0, "cpus:1;ports:[80-80]"}},
		},
		{
			name:   "invalid offer gets nothing",
			offers: []*slacklinev1.Offer{{Id: "bad", Resources: []*slacklinev1.Resource{{Name: "cpus", Scalar: -1}}}, offer("o1", "cpus:1;mem:128", resources.Regular)},
			needs:  []frameworkapi.Need{small},
			want:   []placement{{"o1", 0, "cpus:1;mem:128"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plans := frameworkapi.Pack(tt.offers, tt.needs, tt.maxPerOffer)
			if len(plans) != len(tt.offers) {
				t.Fatalf("Pack() returned %d plans for %d offers", len(plans), len(tt.offers))
			}
			var got []placement
			for i, plan := range plans {
				if plan.Offer != tt.offers[i] {
					t.Errorf("plan %d is for offer %s, want %s", i, plan.Offer.GetId(), tt.offers[i].GetId())
				}
				if (plan.Err != nil) != (plan.Offer.GetId() == "bad") {
					t.Errorf("plan for %s: Err = %v", plan.Offer.GetId(), plan.Err)
				}
				for _, p := range plan.Tasks {
					got = append(got, placement{plan.Offer.GetId(), p.Need, p.Resources.String()})
				}
				if want, ok := tt.wantLeft[plan.Offer.GetId()]; ok && plan.Remaining.String() != want {
					t.Errorf("offer %s: remaining %q, want %q", plan.Offer.GetId(), plan.Remaining, want)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("placements (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewTaskUsesOfferRoleAndRevocability(t *testing.T) {
	o := &slacklinev1.Offer{Id: "o1", AgentId: "agent-3", Resources: resources.MustParse("cpus:4;mem:1024").Proto("eng/batch", resources.Revocable)}
	cmd := &slacklinev1.CommandInfo{Value: "sleep 1", Shell: true}
	got := frameworkapi.NewTask("t1", "task one", o, resources.MustParse("cpus:1;mem:128"), cmd)
	want := &slacklinev1.TaskInfo{
		TaskId:  "t1",
		Name:    "task one",
		AgentId: "agent-3",
		Resources: []*slacklinev1.Resource{
			{Name: "cpus", Scalar: 1, Role: "eng/batch", Revocable: true},
			{Name: "mem", Scalar: 128, Role: "eng/batch", Revocable: true},
		},
		Command: cmd,
	}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("NewTask() (-want +got):\n%s", diff)
	}
}

func TestIsTerminal(t *testing.T) {
	terminal := map[slacklinev1.TaskState]bool{
		slacklinev1.TaskState_TASK_STATE_FINISHED:         true,
		slacklinev1.TaskState_TASK_STATE_FAILED:           true,
		slacklinev1.TaskState_TASK_STATE_KILLED:           true,
		slacklinev1.TaskState_TASK_STATE_ERROR:            true,
		slacklinev1.TaskState_TASK_STATE_LOST:             true,
		slacklinev1.TaskState_TASK_STATE_DROPPED:          true,
		slacklinev1.TaskState_TASK_STATE_GONE:             true,
		slacklinev1.TaskState_TASK_STATE_GONE_BY_OPERATOR: true,
	}
	for v := range slacklinev1.TaskState_name {
		state := slacklinev1.TaskState(v)
		if got := frameworkapi.IsTerminal(state); got != terminal[state] {
			t.Errorf("IsTerminal(%v) = %v, want %v", state, got, terminal[state])
		}
	}
}

func TestRefuseSeconds(t *testing.T) {
	tests := []struct {
		filters *slacklinev1.Filters
		want    float64
	}{
		{nil, frameworkapi.DefaultRefuseSeconds},
		{&slacklinev1.Filters{}, frameworkapi.DefaultRefuseSeconds},
		{frameworkapi.Filters(0), 0},
		{frameworkapi.Filters(30), 30},
	}
	for _, tt := range tests {
		if got := frameworkapi.RefuseSeconds(tt.filters); got != tt.want {
			t.Errorf("RefuseSeconds(%v) = %v, want %v", tt.filters, got, tt.want)
		}
	}
}
