package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// getProfile returns the named profile.
func (pc *profileCluster) getProfile(ctx context.Context, name string) (*slacklinev1.Profile, error) {
	resp, err := pc.client.GetProfiles(ctx, connect.NewRequest(&slacklinev1.GetProfilesRequest{Name: name}))
	if err != nil {
		return nil, err
	}
	return resp.Msg.GetProfiles()[0], nil
}

// TestRolloutShadowStage: a candidate whose settings raise violations is
// rolled back in its shadow stage, on what its shadow would have done on
// the agents' own inputs, and never reaches an agent's active settings; a
// good candidate passes its shadow stage, then its live waves, in which
// the updated agents shadow the previous version.
func TestRolloutShadowStage(t *testing.T) {
	t.Parallel()
	pc := startProfileClusterShadows(t, map[string]int{"web": 6}, true)
	ctx := context.Background()
	if _, err := pc.client.ApplyProfile(ctx, connect.NewRequest(&slacklinev1.ApplyProfileRequest{
		Name: "web", Selector: map[string]string{"tier": "web"}, Settings: "estimator-target-violation: 0.01"})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every agent to run web/1", pc.runs("web", "web", 1))

	// Version 2 raises the target twentyfold. The shadow stage and the
	// waves soak for an hour: only the rollback can end it in the test's
	// time, and only on the shadows' signals, since no agent applies it.
	policy := &slacklinev1.ProfileRolloutPolicy{Waves: []float64{0.5, 1}, Soak: durationpb.New(time.Hour), MinEstimatesScored: 500,
		ShadowSoak: durationpb.New(time.Hour)}
	started, err := pc.client.RolloutProfile(ctx, connect.NewRequest(&slacklinev1.RolloutProfileRequest{
		Name: "web", Settings: "estimator-target-violation: 0.2", Policy: policy}))
	if err != nil {
		t.Fatal(err)
	}
	r := started.Msg.GetProfile().GetRollout()
	if r.GetStage() != slacklinev1.ProfileRolloutStage_PROFILE_ROLLOUT_STAGE_SHADOW || len(r.GetShadowHostnames()) != 3 || len(r.GetHostnames()) != 0 {
		t.Fatalf("rollout stage %v on %v (live on %v), want the shadow stage on 3 of 6 agents and none live", r.GetStage(), r.GetShadowHostnames(), r.GetHostnames())
	}
	// Judged a minute into the stage's hour, as the agents report, it is
	// rolled back as soon as the shadows scored enough estimates.
	early := func(r *slacklinev1.ProfileRollout) time.Time { return r.GetShadowStartTime().AsTime().Add(time.Minute) }
	final := pc.judgeUntil(t, "the rollout to be rolled back in its shadow stage", "web", early,
		rolloutState(slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_ROLLED_BACK))
	r = final.GetRollout()
	shadowed := 0
	for _, a := range pc.fleets["web"].Agents() {
		log := strings.Join(a.ProfileLog(), ", ")
		if strings.Contains(log, "apply web/2") {
			t.Errorf("%s applied version 2 live: %s", a.Hostname(), log)
		}
		if strings.Contains(log, "shadow web/2") {
			shadowed++
			if !slices.Contains(r.GetShadowHostnames(), a.Hostname()) {
				t.Errorf("%s ran version 2 in shadow outside the shadow stage's agents %v (log %s)", a.Hostname(), r.GetShadowHostnames(), log)
			}
		}
	}
	if shadowed == 0 {
		t.Error("no agent ran version 2 in shadow")
	}
	if r.GetStage() != slacklinev1.ProfileRolloutStage_PROFILE_ROLLOUT_STAGE_SHADOW ||
		!strings.Contains(r.GetReason(), "violation rate 20.00% of version 2 in shadow, 1.00% of version 1 live on the same") {
		t.Errorf("rolled back in stage %v because %q, want the shadow stage's violation rates", r.GetStage(), r.GetReason())
	}
	if h := final.GetHistory(); h[len(h)-1].GetBy() != "coordinator" || !strings.Contains(h[len(h)-1].GetWhat(), "rolled back in its shadow stage (never applied)") {
		t.Errorf("last change %v, want the coordinator's rollback in the shadow stage", h[len(h)-1])
	}
	for _, a := range pc.fleets["web"].Agents() {
		if _, v := a.Profile(); v != 1 {
			t.Errorf("%s runs version %d, want 1", a.Hostname(), v)
		}
	}
	// The shadows stop.
	waitFor(t, "the shadows to stop", func() (bool, string) {
		var running []string
		for _, a := range pc.fleets["web"].Agents() {
			if p, v := a.Shadow(); p != "" {
				running = append(running, fmt.Sprintf("%s:%s/%d", a.Hostname(), p, v))
			}
		}
		return len(running) == 0, strings.Join(running, " ")
	})

	// A candidate that changes nothing measurable passes its shadow stage
	// and its waves, each after its soak (an hour of logical time) and not
	// before; in the waves its agents shadow version 1.
	policy = &slacklinev1.ProfileRolloutPolicy{Waves: []float64{0.5, 1}, Soak: durationpb.New(time.Hour), MinEstimatesScored: 500,
		ShadowSoak: durationpb.New(time.Hour)}
	started, err = pc.client.RolloutProfile(ctx, connect.NewRequest(&slacklinev1.RolloutProfileRequest{
		Name: "web", Settings: "estimator-target-violation: 0.011", Policy: policy}))
	if err != nil {
		t.Fatal(err)
	}
	shadowHosts := started.Msg.GetProfile().GetRollout().GetShadowHostnames()
	waitFor(t, "the shadow stage's agents to shadow web/3", func() (bool, string) {
		var pending []string
		for _, a := range pc.fleets["web"].Agents() {
			if p, v := a.Shadow(); slices.Contains(shadowHosts, a.Hostname()) && (p != "web" || v != 3) {
				pending = append(pending, fmt.Sprintf("%s: %s/%d", a.Hostname(), p, v))
			}
		}
		return len(pending) == 0, strings.Join(pending, " ")
	})
	beforeEnd := func(r *slacklinev1.ProfileRollout) time.Time {
		return r.GetShadowStartTime().AsTime().Add(time.Hour - time.Second)
	}
	final = pc.judgeUntil(t, "the shadow stage's estimates", "web", beforeEnd, func(p *slacklinev1.Profile) (bool, string) {
		paired := p.GetRollout().GetPaired()
		return paired.GetShadow().GetEstimatesScored() >= 500 && paired.GetLive().GetEstimatesScored() >= 500, p.GetRollout().GetReason()
	})
	if r := final.GetRollout(); r.GetStage() != slacklinev1.ProfileRolloutStage_PROFILE_ROLLOUT_STAGE_SHADOW || !strings.Contains(r.GetReason(), "soaking until") {
		t.Fatalf("a second before the shadow stage's soak ends: stage %v because %q, want it soaking", r.GetStage(), r.GetReason())
	}
	pc.coord.Coordinator().JudgeRollouts(ctx, final.GetRollout().GetShadowStartTime().AsTime().Add(time.Hour))
	if final, err = pc.getProfile(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if r := final.GetRollout(); r.GetStage() != slacklinev1.ProfileRolloutStage_PROFILE_ROLLOUT_STAGE_LIVE || r.GetWave() != 0 {
		t.Fatalf("at the end of the shadow stage's soak: stage %v, wave %d because %q, want the first live wave", r.GetStage(), r.GetWave()+1, r.GetReason())
	}
	passed := false
	for _, h := range final.GetHistory() {
		passed = passed || strings.Contains(h.GetWhat(), "rollout of version 3: shadow stage passed on ")
	}
	if !passed {
		t.Errorf("history %v does not record the shadow stage passing", final.GetHistory())
	}
	// Each wave's agents apply version 3 and run version 1 in shadow (sent
	// with version 3, on the same stream) before the wave is judged.
	passWaves(t, pc, 3, true)
	// Every agent ran version 1 in shadow in its live wave, and stops it
	// once the rollout is done.
	waitFor(t, "every agent on web/3, its shadow of web/1 run and stopped", func() (bool, string) {
		var pending []string
		for _, a := range pc.fleets["web"].Agents() {
			log := strings.Join(a.ProfileLog(), ", ")
			if p, _ := a.Shadow(); p != "" || !strings.Contains(log, "apply web/3") || !strings.Contains(log, "shadow web/1") {
				pending = append(pending, a.Hostname()+": "+log)
			}
		}
		return len(pending) == 0, strings.Join(pending, "; ")
	})
	waitFor(t, "every agent on web/3", pc.runs("web", "web", 3))
}
