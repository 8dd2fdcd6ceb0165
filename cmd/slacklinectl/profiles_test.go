package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
)

// fakeProfiles records the requests it gets and answers with profile.
type fakeProfiles struct {
	slacklinev1connect.UnimplementedProfileServiceHandler
	mu      sync.Mutex
	apply   *slacklinev1.ApplyProfileRequest
	rollout *slacklinev1.RolloutProfileRequest
	profile *slacklinev1.Profile
	agents  []*slacklinev1.ProfileAgentStatus
}

func (f *fakeProfiles) ApplyProfile(_ context.Context, req *connect.Request[slacklinev1.ApplyProfileRequest]) (*connect.Response[slacklinev1.ApplyProfileResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.apply = req.Msg
	return connect.NewResponse(&slacklinev1.ApplyProfileResponse{Profile: f.profile}), nil
}

func (f *fakeProfiles) RolloutProfile(_ context.Context, req *connect.Request[slacklinev1.RolloutProfileRequest]) (*connect.Response[slacklinev1.RolloutProfileResponse], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rollout = req.Msg
	return connect.NewResponse(&slacklinev1.RolloutProfileResponse{Profile: f.profile}), nil
}

func (f *fakeProfiles) GetProfileStatus(context.Context, *connect.Request[slacklinev1.GetProfileStatusRequest]) (*connect.Response[slacklinev1.GetProfileStatusResponse], error) {
	return connect.NewResponse(&slacklinev1.GetProfileStatusResponse{Profile: f.profile, Agents: f.agents}), nil
}

func serveProfiles(t *testing.T, f slacklinev1connect.ProfileServiceHandler) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(slacklinev1connect.NewProfileServiceHandler(f))
	server := httptest.NewServer(mux)
	t.Cleanup(server.Close)
	return server.URL
}

func rolledBack() *slacklinev1.Profile {
	return &slacklinev1.Profile{Name: "web", Selector: map[string]string{"tier": "web"},
		Stable: &slacklinev1.ProfileVersion{Number: 1, By: "alice"},
		Rollout: &slacklinev1.ProfileRollout{Candidate: &slacklinev1.ProfileVersion{Number: 2}, By: "bob",
			State:  slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_ROLLED_BACK,
			Policy: &slacklinev1.ProfileRolloutPolicy{Waves: []float64{0.5, 1}}, Hostnames: []string{"web-1"},
			Updated: &slacklinev1.ProfileGroup{Agents: 1, EstimatesScored: 1000, Violations: 200},
			Others:  &slacklinev1.ProfileGroup{Agents: 1, EstimatesScored: 1000, Violations: 10},
			Reason:  "violation rate 20.00% on the updated agents, 1.00% on the others (tolerance 0.50 points)"}}
}

func TestProfilesApplyAndRollout(t *testing.T) {
	t.Parallel()
	f := &fakeProfiles{profile: rolledBack()}
	url := serveProfiles(t, f)
	settings := filepath.Join(t.TempDir(), "web.yaml")
	if err := os.WriteFile(settings, []byte("estimator-target-violation: 0.005\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "--coordinator", url, "profiles", "apply", "web", "-f", settings, "--selector", "tier=web, zone=eu")
	if err != nil {
		t.Fatal(err)
	}
	want := &slacklinev1.ApplyProfileRequest{Name: "web", Selector: map[string]string{"tier": "web", "zone": "eu"}, Settings: "estimator-target-violation: 0.005\n"}
	if diff := cmp.Diff(want, f.apply, protocmp.Transform()); diff != "" {
		t.Errorf("apply request (-want +got):\n%s", diff)
	}
	if !strings.Contains(out, "v2 rolled-back") || !strings.Contains(out, "tier=web") {
		t.Errorf("apply output:\n%s\nwant the profile's row", out)
	}

	if _, err := run(t, "--coordinator", url, "profiles", "rollout", "web", "-f", settings, "--waves", "0.2,1", "--soak", "5m"); err != nil {
		t.Fatal(err)
	}
	p := f.rollout.GetPolicy()
	if got := p.GetWaves(); len(got) != 2 || got[0] != 0.2 || got[1] != 1 || p.GetSoak().AsDuration() != 5*time.Minute || p.GetMinEstimatesScored() != 1000 {
		t.Errorf("rollout policy = %v, want waves 0.2,1, soak 5m and the default minimum", p)
	}
	if p.GetShadowSoak().AsDuration() != 10*time.Minute {
		t.Errorf("rollout policy's shadow soak = %v, want the default 10m", p.GetShadowSoak().AsDuration())
	}
	if _, err := run(t, "--coordinator", url, "profiles", "rollout", "web", "-f", settings, "--shadow-soak", "0"); err != nil {
		t.Fatal(err)
	}
	if p := f.rollout.GetPolicy(); p.GetShadowSoak() == nil || p.GetShadowSoak().AsDuration() != 0 {
		t.Errorf("--shadow-soak 0: policy %v, want a shadow soak of 0 (no shadow stage), set", p)
	}

	for _, args := range [][]string{
		{"profiles", "rollout", "web", "-f", settings, "--waves", "half,1"},
		{"profiles", "apply", "web"},
		{"profiles", "apply", "web", "-f", settings, "--selector", "=x"},
	} {
		if _, err := run(t, append([]string{"--coordinator", url}, args...)...); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}

// TestProfilesStatusShadowStage: "profiles status" shows a rollout in its
// shadow stage: the paired comparison, each agent's shadow, and the
// agents that cannot shadow.
func TestProfilesStatusShadowStage(t *testing.T) {
	t.Parallel()
	p := rolledBack()
	r := p.GetRollout()
	r.State, r.Stage, r.Hostnames = slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_IN_PROGRESS, slacklinev1.ProfileRolloutStage_PROFILE_ROLLOUT_STAGE_SHADOW, nil
	r.Previous = &slacklinev1.ProfileVersion{Number: 1}
	r.Policy.ShadowSoak = durationpb.New(10 * time.Minute)
	r.ShadowHostnames = []string{"web-1", "web-2"}
	r.Paired = &slacklinev1.ProfilePaired{Agents: 1, Shadow: &slacklinev1.ProfileGroup{Agents: 1, EstimatesScored: 500, Violations: 25},
		Live: &slacklinev1.ProfileGroup{Agents: 1, EstimatesScored: 500, Violations: 5}, WithoutShadows: []string{"web-2"}}
	r.Reason = "shadow stage on 2 agents soaking until 2026-11-27T12:10:00Z"
	f := &fakeProfiles{profile: p, agents: []*slacklinev1.ProfileAgentStatus{
		{AgentId: "a-1", Hostname: "web-1", AssignedVersion: 1, ShadowAssigned: true, AssignedShadowVersion: 2,
			Signals: &slacklinev1.ProfileAgentSignals{Profile: "web", Version: 1, Reported: true, ShadowCapable: true, ShadowProfile: "web", ShadowVersion: 2,
				ShadowEstimatesScored: 500, ShadowViolations: 25, ActiveEstimatesScored: 500, ActiveViolations: 5}},
		{AgentId: "a-2", Hostname: "web-2", AssignedVersion: 1, ShadowAssigned: true, AssignedShadowVersion: 2,
			Signals: &slacklinev1.ProfileAgentSignals{Profile: "web", Version: 1, Reported: true}},
	}}
	url := serveProfiles(t, f)
	out, err := run(t, "--coordinator", url, "profiles", "status", "web")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Rollout of version 2 by bob: in-progress, shadow stage (not applied) on 2 agents, soak 10m0s",
		"paired   1 agents, same inputs: version 2 in shadow 5.00% of 500 estimates, version 1 live 1.00% of 500",
		"cannot shadow (judged live only): web-2",
		"soaking until",
		"v2 5.00%/live 1.00%", "cannot",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output:\n%s\nwant %q", out, want)
		}
	}
}

func TestProfilesStatus(t *testing.T) {
	t.Parallel()
	f := &fakeProfiles{profile: rolledBack(), agents: []*slacklinev1.ProfileAgentStatus{{
		AgentId: "a-1", Hostname: "web-1", AssignedVersion: 1,
		Signals: &slacklinev1.ProfileAgentSignals{Profile: "web", Version: 1, EstimatesScored: 400, Violations: 4, RunqueueP99: durationpb.New(2 * time.Millisecond)},
	}}}
	url := serveProfiles(t, f)
	out, err := run(t, "--coordinator", url, "profiles", "status", "web")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Rollout of version 2 by bob: rolled-back, wave 1 of 2 on 1 agents",
		"updated  1 agents, 1000 estimates scored, violation rate 20.00%",
		"violation rate 20.00% on the updated agents",
		"web-1", "web/1", "1.00%", "2ms",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status output:\n%s\nwant %q", out, want)
		}
	}
}
