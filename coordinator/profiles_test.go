package coordinator_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/slackline/slackline/agent"
	"github.com/slackline/slackline/coordinator"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
	"github.com/slackline/slackline/gen/slackline/v1/slacklinev1connect"
	"github.com/slackline/slackline/internal/agenttest"
	"github.com/slackline/slackline/resources"
	"github.com/slackline/slackline/sim"
)

// The node profile tests (#29) run the real coordinator with simulated
// agents whose estimator keeps its violation rate at its
// --estimator-target-violation, as the calibrated estimator does: a
// profile that raises the target raises the agents' violation rate, which
// makes a rollout's bad version deterministic.

// simulatedEstimator is a sim.ProfileFunc: the agent validates the
// settings with the real agent's code (over its defaults) and then
// violates at the target rate, 100 estimates per heartbeat.
func simulatedEstimator(_ int, cmd *slacklinev1.ProfileApplyCommand) (sim.ProfileSignals, error) {
	base := agent.DefaultOptions()
	base.Insecure = true
	o, err := agent.ParseProfile(base, cmd.GetProfile(), cmd.GetSettings())
	if err == nil {
		err = o.Validate()
	}
	if err != nil {
		return sim.ProfileSignals{}, err
	}
	return sim.ProfileSignals{ScoredPerBeat: 100, ViolationRate: o.EstimatorConfig.Calibration.TargetViolation, RunqP99: time.Millisecond}, nil
}

type profileCluster struct {
	coord  *agenttest.Coordinator
	client slacklinev1connect.ProfileServiceClient
	fleets map[string]*sim.Fleet
}

// startProfileCluster starts a coordinator and one simulated fleet per
// tier (tier=NAME, hostnames NAME-i).
func startProfileCluster(t *testing.T, tiers map[string]int) *profileCluster {
	t.Helper()
	return startProfileClusterShadows(t, tiers, false)
}

// startProfileClusterShadows is startProfileCluster with agents that run
// a rollout's shadows when shadows is set.
func startProfileClusterShadows(t *testing.T, tiers map[string]int, shadows bool) *profileCluster {
	t.Helper()
	// An in-memory network, as the load tests have: the same HTTP/2
	// server and clients as on loopback without the kernel's sockets.
	network := agenttest.NewNetwork()
	coord := agenttest.StartCoordinator(t, coordinator.Config{
		Logger: quiet, AgentHeartbeatInterval: 50 * time.Millisecond, AgentTimeout: 3 * time.Second,
		// No timer judges rollouts: the tests do (pc.judgeUntil), at
		// logical times, so that a wave soaks an hour in no time and a
		// decision is the one its signals and time call for, however
		// loaded the machine.
		RolloutInterval: -1,
	}, network)
	client := network.Client()
	t.Cleanup(client.CloseIdleConnections)
	pc := &profileCluster{coord: coord, client: slacklinev1connect.NewProfileServiceClient(client, memURL), fleets: map[string]*sim.Fleet{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for tier, n := range tiers {
		fleetClient := network.Client()
		t.Cleanup(fleetClient.CloseIdleConnections)
		fleet, err := sim.NewFleet(sim.Config{Coordinator: memURL, HTTPClient: fleetClient, Count: n, Resources: resources.MustParse("cpus:4;mem:4096"),
			HostnamePrefix: tier + "-", Attributes: map[string]string{"tier": tier}, Profile: simulatedEstimator, ProfileShadows: shadows, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		pc.fleets[tier] = fleet
		wg.Go(func() { fleet.Run(ctx) })
	}
	return pc
}

// waitFor polls cond until it holds (what says what is awaited).
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		<-tick.C
	}
	t.Fatalf("timed out waiting for %s; last: %s", what, last)
}

// judgeUntil judges the rollouts (Coordinator.JudgeRollouts) until cond
// holds for the named profile, and returns the profile. Each judgement is
// at the logical time at gives for the rollout as it is then (e.g. its
// wave's start plus its soak): time moves only when the test says so, and
// the wall clock moves only the agents' heartbeats, whose signals the
// rollout waits for.
func (pc *profileCluster) judgeUntil(t *testing.T, what, name string, at func(r *slacklinev1.ProfileRollout) time.Time,
	cond func(p *slacklinev1.Profile) (bool, string)) *slacklinev1.Profile {
	t.Helper()
	ctx := context.Background()
	var p *slacklinev1.Profile
	waitFor(t, what, func() (bool, string) {
		cur, err := pc.getProfile(ctx, name)
		if err != nil {
			return false, err.Error()
		}
		pc.coord.Coordinator().JudgeRollouts(ctx, at(cur.GetRollout()))
		if p, err = pc.getProfile(ctx, name); err != nil {
			return false, err.Error()
		}
		return cond(p)
	})
	return p
}

// waveStart is the start of a rollout's wave under way.
func waveStart(r *slacklinev1.ProfileRollout) time.Time { return r.GetWaveStartTime().AsTime() }

// scored says whether the latest judgement of a rollout counted at least
// n estimates scored on its updated agents and on the others (in the last
// wave, which has no others, on the updated agents alone).
func scored(n uint64) func(p *slacklinev1.Profile) (bool, string) {
	return func(p *slacklinev1.Profile) (bool, string) {
		r := p.GetRollout()
		u, o := r.GetUpdated().GetEstimatesScored(), r.GetOthers().GetEstimatesScored()
		return u >= n && (o >= n || r.GetOthers().GetAgents() == 0), fmt.Sprintf("%d scored on the updated agents, %d on the others; %s", u, o, r.GetReason())
	}
}

// rolloutState says whether a rollout reached state.
func rolloutState(state slacklinev1.ProfileRolloutState) func(p *slacklinev1.Profile) (bool, string) {
	return func(p *slacklinev1.Profile) (bool, string) {
		r := p.GetRollout()
		return r.GetState() == state, r.GetState().String() + " " + r.GetReason()
	}
}

// runs reports whether every agent of tier runs profile's version.
func (pc *profileCluster) runs(tier, profile string, version uint64) func() (bool, string) {
	return func() (bool, string) {
		var got []string
		ok := true
		for _, a := range pc.fleets[tier].Agents() {
			p, v := a.Profile()
			got = append(got, fmt.Sprintf("%s:%s/%d", a.Hostname(), p, v))
			ok = ok && p == profile && v == version
		}
		return ok, strings.Join(got, " ")
	}
}

func TestProfileAppliedToALabelledSubset(t *testing.T) {
	t.Parallel()
	pc := startProfileCluster(t, map[string]int{"web": 3, "db": 2})
	ctx := context.Background()
	// Every agent runs its flags first.
	for tier, n := range map[string]int{"web": 3, "db": 2} {
		waitFor(t, tier+" agents to register", func() (bool, string) {
			got := pc.fleets[tier].Registered()
			return got == n, fmt.Sprintf("%d registered", got)
		})
	}

	resp, err := pc.client.ApplyProfile(ctx, connect.NewRequest(&slacklinev1.ApplyProfileRequest{
		Name: "web", Selector: map[string]string{"tier": "web"}, Settings: "estimator-target-violation: 0.02\n"}))
	if err != nil {
		t.Fatal(err)
	}
	if v := resp.Msg.GetProfile().GetStable(); v.GetNumber() != 1 || v.GetBy() != "anonymous" {
		t.Errorf("applied version = %v, want 1 by the (unauthenticated) caller", v)
	}
	waitFor(t, "the web agents to run web/1", pc.runs("web", "web", 1))
	if ok, state := pc.runs("db", "", 0)(); !ok {
		t.Errorf("db agents changed: %s", state)
	}

	status, err := pc.client.GetProfileStatus(ctx, connect.NewRequest(&slacklinev1.GetProfileStatusRequest{Name: "web"}))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(status.Msg.GetAgents()); n != 3 {
		t.Errorf("status lists %d agents, want the 3 web agents", n)
	}

	// Settings the agent's validation refuses, or that need a restart, are
	// refused naming the flag; nothing changes.
	for settings, want := range map[string]string{
		"estimator-target-violation: 2": "target",
		"listen: 0.0.0.0:1":             "listen: unknown setting (no such flag)\n(a profile may set only",
		"estimator-windo: 1s":           "did you mean estimator-window",
	} {
		_, err := pc.client.ApplyProfile(ctx, connect.NewRequest(&slacklinev1.ApplyProfileRequest{Name: "web", Settings: settings}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("apply %q: %v, want InvalidArgument containing %q", settings, err, want)
		}
	}

	// The profile survives a restart, with its history.
	pc.coord.Restart()
	var p *slacklinev1.Profile
	waitFor(t, "the restarted coordinator to answer", func() (bool, string) {
		// The first call may meet the connection the old server closed.
		got, err := pc.client.GetProfiles(ctx, connect.NewRequest(&slacklinev1.GetProfilesRequest{Name: "web"}))
		if err != nil {
			return false, err.Error()
		}
		p = got.Msg.GetProfiles()[0]
		return true, ""
	})
	if p.GetStable().GetNumber() != 1 || len(p.GetHistory()) != 1 || p.GetHistory()[0].GetBy() != "anonymous" {
		t.Errorf("after a restart: %v, want version 1 with its history", p)
	}
}

func TestRolloutThatRaisesViolationsIsRolledBack(t *testing.T) {
	t.Parallel()
	pc := startProfileCluster(t, map[string]int{"web": 6})
	ctx := context.Background()
	if _, err := pc.client.ApplyProfile(ctx, connect.NewRequest(&slacklinev1.ApplyProfileRequest{
		Name: "web", Selector: map[string]string{"tier": "web"}, Settings: "estimator-target-violation: 0.01"})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every agent to run web/1", pc.runs("web", "web", 1))

	// Version 2 raises the target twentyfold: its agents violate 20% of
	// their estimates against the others' 1%. The soak is an hour: only
	// the rollback can end this rollout in the test's time.
	policy := &slacklinev1.ProfileRolloutPolicy{Waves: []float64{0.5, 1}, Soak: durationpb.New(time.Hour), MinEstimatesScored: 500}
	started, err := pc.client.RolloutProfile(ctx, connect.NewRequest(&slacklinev1.RolloutProfileRequest{
		Name: "web", Settings: "estimator-target-violation: 0.2", Policy: policy}))
	if err != nil {
		t.Fatal(err)
	}
	if r := started.Msg.GetProfile().GetRollout(); r.GetCandidate().GetNumber() != 2 {
		t.Fatalf("rollout = %v, want version 2", r)
	}
	// These agents cannot run shadows: the default shadow stage is
	// skipped (at once, or at the first judgement after each of its
	// agents reported), saying so, and the rollout is judged on live
	// signals.
	sawLive := false
	for _, h := range started.Msg.GetProfile().GetHistory() {
		sawLive = sawLive || strings.Contains(h.GetWhat(), "no agent of the shadow stage can run shadows")
	}
	// A minute into the rollout: far from the end of any soak.
	early := func(r *slacklinev1.ProfileRollout) time.Time { return r.GetStartTime().AsTime().Add(time.Minute) }
	first := pc.judgeUntil(t, "the first live wave", "web", early, func(p *slacklinev1.Profile) (bool, string) {
		r := p.GetRollout()
		return r.GetStage() == slacklinev1.ProfileRolloutStage_PROFILE_ROLLOUT_STAGE_LIVE && len(r.GetHostnames()) == 3, r.String()
	})
	for _, h := range first.GetHistory() {
		sawLive = sawLive || strings.Contains(h.GetWhat(), "no agent of the shadow stage can run shadows")
	}
	if !sawLive {
		t.Error("the history does not say the shadow stage was skipped for agents that cannot shadow")
	}
	// Judged a minute into its hour-long soak, as the agents report, the
	// wave is rolled back as soon as both groups scored enough estimates.
	final := pc.judgeUntil(t, "the rollout to be rolled back", "web", early,
		rolloutState(slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_ROLLED_BACK))
	if r := final.GetRollout(); !strings.Contains(r.GetReason(), "violation rate 20.00% on the updated agents, 1.00% on the others") || r.GetWave() != 0 {
		t.Errorf("rolled back in wave %d because %q, want wave 1 and the violation rates", r.GetWave()+1, r.GetReason())
	}
	if h := final.GetHistory(); h[len(h)-1].GetBy() != "coordinator" || !strings.Contains(h[len(h)-1].GetWhat(), "rolled back") {
		t.Errorf("last change %v, want the coordinator's rollback", h[len(h)-1])
	}
	// Its agents go back to version 1.
	waitFor(t, "every agent back on web/1", pc.runs("web", "web", 1))

	// A rollout that changes nothing measurable passes its waves, each
	// after its soak (an hour of logical time) and not before.
	policy = &slacklinev1.ProfileRolloutPolicy{Waves: []float64{0.5, 1}, Soak: durationpb.New(time.Hour), MinEstimatesScored: 500}
	if _, err := pc.client.RolloutProfile(ctx, connect.NewRequest(&slacklinev1.RolloutProfileRequest{
		Name: "web", Settings: "estimator-target-violation: 0.011", Policy: policy})); err != nil {
		t.Fatal(err)
	}
	passWaves(t, pc, 3, false)
	waitFor(t, "every agent on web/3", pc.runs("web", "web", 3))
}

// passWaves takes web's rollout of version through its two live waves
// (half of its 6 agents, then all), each soaking an hour: judged a second
// before its soak ends once every agent of the wave runs version (and
// shadows version 1, with shadows) and both groups scored 500 estimates,
// the wave still soaks; judged at its end, it passes.
func passWaves(t *testing.T, pc *profileCluster, version uint64, shadows bool) {
	t.Helper()
	ctx := context.Background()
	for wave, agents := range []int{3, 6} {
		p, err := pc.getProfile(ctx, "web")
		if err != nil {
			t.Fatal(err)
		}
		r := p.GetRollout()
		if r.GetWave() != uint32(wave) || len(r.GetHostnames()) != agents || r.GetState() != slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_IN_PROGRESS {
			t.Fatalf("rollout %v in wave %d on %v, want wave %d on %d agents", r.GetState(), r.GetWave()+1, r.GetHostnames(), wave+1, agents)
		}
		waitFor(t, fmt.Sprintf("wave %d's agents to run web/%d", wave+1, version), func() (bool, string) {
			var pending []string
			for _, a := range pc.fleets["web"].Agents() {
				if !slices.Contains(r.GetHostnames(), a.Hostname()) {
					continue
				}
				prof, v := a.Profile()
				shadow, sv := a.Shadow()
				if prof != "web" || v != version || shadows && (shadow != "web" || sv != 1) {
					pending = append(pending, fmt.Sprintf("%s: web/%d shadow %s/%d", a.Hostname(), v, shadow, sv))
				}
			}
			return len(pending) == 0, strings.Join(pending, "; ")
		})
		soak := r.GetPolicy().GetSoak().AsDuration()
		beforeEnd := func(r *slacklinev1.ProfileRollout) time.Time { return waveStart(r).Add(soak - time.Second) }
		p = pc.judgeUntil(t, fmt.Sprintf("wave %d's estimates", wave+1), "web", beforeEnd, scored(500))
		if r := p.GetRollout(); r.GetWave() != uint32(wave) || r.GetState() != slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_IN_PROGRESS ||
			!strings.Contains(r.GetReason(), "soaking until") {
			t.Fatalf("a second before its soak ends, wave %d: %v in wave %d because %q, want it soaking", wave+1, r.GetState(), r.GetWave()+1, r.GetReason())
		}
		pc.coord.Coordinator().JudgeRollouts(ctx, waveStart(r).Add(soak))
		if p, err = pc.getProfile(ctx, "web"); err != nil {
			t.Fatal(err)
		}
		switch r := p.GetRollout(); {
		case wave == 0 && (r.GetWave() != 1 || r.GetState() != slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_IN_PROGRESS):
			t.Fatalf("at the end of wave 1's soak: %v in wave %d because %q, want wave 2", r.GetState(), r.GetWave()+1, r.GetReason())
		case wave == 1 && (r.GetState() != slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_DONE || p.GetStable().GetNumber() != version):
			t.Fatalf("at the end of the last wave's soak: %v, stable %d because %q, want done with %d stable", r.GetState(), p.GetStable().GetNumber(), r.GetReason(), version)
		}
	}
}
