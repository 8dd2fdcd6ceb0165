package coordinator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/slackline/slackline/coordinator/store"
	slacklinev1 "github.com/slackline/slackline/gen/slackline/v1"
)

// TestJudgeRolloutsAtTheTimeGiven: the shell judges rollouts at the time
// it is given, not at its clock's (Config.Now stays at testNow
// throughout): a wave judged a nanosecond before its soak ends still
// soaks, one judged at its end passes once its decision is durable (a
// failed write applies and sends nothing; the next judgement decides
// again), and a rollout whose agents got worse is rolled back at the time
// given, before the next wave's soak ends, every agent sent back to the
// stable version; so are a candidate an agent refuses and one that raises
// the guaranteed run-queue p99, at their first judgement (#30).
func TestJudgeRolloutsAtTheTimeGiven(t *testing.T) {
	t.Parallel()
	d := newDomain(t)
	ctx := context.Background()
	hosts := []string{"web-1", "web-2", "web-3", "web-4"}
	ids := map[string]string{}
	for _, h := range hosts {
		ids[h] = d.mustRegister(registerRequest("", h, "cpus:4;mem:4096"))
	}
	// beat records host's heartbeat report: it runs web/version, with
	// scored estimates and violations since that version started.
	report := func(host string, r *slacklinev1.ProfileReport) {
		d.c.mu.Lock()
		defer d.c.mu.Unlock()
		d.c.profileBeat(d.c.agents[ids[host]], r)
	}
	beat := func(host string, version, scored uint64, violations float64) {
		report(host, &slacklinev1.ProfileReport{Profile: "web", Version: version,
			EstimatesScored: scored, Violations: violations, RunqueueP99Seconds: 0.001})
	}
	// applied returns the versions of web each host was sent since the
	// last call.
	applied := func() map[string][]uint64 {
		out := map[string][]uint64{}
		for _, h := range hosts {
			for _, cmd := range commands(d.agent(ids[h])) {
				if a := cmd.GetApplyProfile(); a != nil {
					out[h] = append(out[h], a.GetVersion())
				}
			}
		}
		return out
	}
	rollout := func() *slacklinev1.ProfileRollout {
		d.c.mu.Lock()
		defer d.c.mu.Unlock()
		return profileProto(d.c.profiles.byName["web"]).GetRollout()
	}
	recorded := func() *slacklinev1.ProfileRollout {
		raw, _ := d.st.Load(ctx, store.BucketProfiles)
		var p slacklinev1.Profile
		if err := proto.Unmarshal(raw["web"], &p); err != nil {
			t.Fatal(err)
		}
		return p.GetRollout()
	}
	svc := profileService{d.c}
	if _, err := svc.ApplyProfile(ctx, connect.NewRequest(&slacklinev1.ApplyProfileRequest{
		Name: "web", Settings: "estimator-target-violation: 0.01"})); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		beat(h, 1, 0, 0)
	}
	applied()
	if _, err := svc.RolloutProfile(ctx, connect.NewRequest(&slacklinev1.RolloutProfileRequest{
		Name: "web", Settings: "estimator-target-violation: 0.011",
		Policy: &slacklinev1.ProfileRolloutPolicy{Waves: []float64{0.5, 1}, Soak: durationpb.New(time.Hour), MinEstimatesScored: 100,
			ShadowSoak: durationpb.New(0)}})); err != nil {
		t.Fatal(err)
	}
	first := rollout().GetHostnames()
	if len(first) != 2 {
		t.Fatalf("wave 1 on %v, want 2 of 4 agents", first)
	}
	if got := applied(); len(got) != 2 || !slices.Equal(got[first[0]], []uint64{2}) || !slices.Equal(got[first[1]], []uint64{2}) {
		t.Fatalf("sent %v, want version 2 to %v", got, first)
	}
	// Wave 1's agents run version 2, the others version 1: 1% violations
	// each, 200 estimates scored.
	for _, h := range hosts {
		v := uint64(1)
		if slices.Contains(first, h) {
			v = 2
		}
		beat(h, v, 200, 2)
	}

	d.c.JudgeRollouts(ctx, testNow.Add(time.Hour-time.Nanosecond))
	if r := rollout(); r.GetWave() != 0 || !strings.Contains(r.GetReason(), "soaking until") || r.GetUpdated().GetEstimatesScored() != 400 {
		t.Fatalf("judged a nanosecond before the soak ends: wave %d because %q, %d scored on the updated agents; want wave 1 soaking with 400",
			r.GetWave()+1, r.GetReason(), r.GetUpdated().GetEstimatesScored())
	}

	d.st.mu.Lock()
	d.st.err = errDiskFull
	d.st.mu.Unlock()
	d.c.JudgeRollouts(ctx, testNow.Add(time.Hour))
	if r, rec := rollout(), recorded(); r.GetWave() != 0 || rec.GetWave() != 0 || len(applied()) != 0 {
		t.Fatalf("a decision not persisted: wave %d in memory, %d recorded; want wave 1 in both, nothing sent", r.GetWave()+1, rec.GetWave()+1)
	}
	d.st.mu.Lock()
	d.st.err = nil
	d.st.mu.Unlock()

	second := testNow.Add(time.Hour + time.Minute)
	d.c.JudgeRollouts(ctx, second)
	r, rec := rollout(), recorded()
	if r.GetWave() != 1 || len(r.GetHostnames()) != 4 || !r.GetWaveStartTime().AsTime().Equal(second) || rec.GetWave() != 1 {
		t.Fatalf("judged after the soak: wave %d on %v from %v (recorded wave %d); want wave 2 on every agent from %v, recorded",
			r.GetWave()+1, r.GetHostnames(), r.GetWaveStartTime().AsTime(), rec.GetWave()+1, second)
	}
	var others []string
	for _, h := range hosts {
		if !slices.Contains(first, h) {
			others = append(others, h)
		}
	}
	if got := applied(); len(got) != 2 || !slices.Equal(got[others[0]], []uint64{2}) || !slices.Equal(got[others[1]], []uint64{2}) {
		t.Fatalf("sent %v, want version 2 to %v", got, others)
	}

	// Every agent now runs version 2 and violates 20% of the estimates
	// scored since the wave started: rolled back a minute into the wave's
	// hour, at that time.
	for _, h := range hosts {
		if slices.Contains(first, h) {
			beat(h, 2, 400, 42)
		} else {
			beat(h, 2, 200, 40)
		}
	}
	back := second.Add(time.Minute)
	d.c.JudgeRollouts(ctx, back)
	r, rec = rollout(), recorded()
	if r.GetState() != slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_ROLLED_BACK || !r.GetEndTime().AsTime().Equal(back) ||
		!strings.Contains(r.GetReason(), "violation rate 20.00% on the updated agents, 1.00% on the others") ||
		rec.GetState() != slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_ROLLED_BACK {
		t.Fatalf("rollout %v at %v because %q (recorded %v); want rolled back at %v on the violation rates",
			r.GetState(), r.GetEndTime().AsTime(), r.GetReason(), rec.GetState(), back)
	}
	want := map[string][]uint64{}
	for _, h := range hosts {
		want[h] = []uint64{1}
	}
	if got := applied(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("sent %v, want version 1 to every agent", got)
	}

	// A candidate an agent of the wave refuses, and one under which the
	// updated agents' guaranteed run-queue p99 is ten times the others',
	// are rolled back at the first judgement, a second into their soak.
	for _, c := range []struct {
		version uint64
		report  func(host string, version uint64) *slacklinev1.ProfileReport
		reason  string
	}{
		{3, func(host string, version uint64) *slacklinev1.ProfileReport {
			return &slacklinev1.ProfileReport{Profile: "web", Version: 1, RefusedProfile: "web", RefusedVersion: version, Refusal: "no"}
		}, "refused version 3"},
		{4, func(host string, version uint64) *slacklinev1.ProfileReport {
			return &slacklinev1.ProfileReport{Profile: "web", Version: version, RunqueueP99Seconds: 0.010}
		}, "guaranteed run-queue p99 10ms on the updated agents, 1ms on the others"},
	} {
		for _, h := range hosts {
			beat(h, 1, 0, 0)
		}
		start := back.Add(time.Duration(c.version) * time.Hour)
		d.c.cfg.Now = func() time.Time { return start }
		if _, err := svc.RolloutProfile(ctx, connect.NewRequest(&slacklinev1.RolloutProfileRequest{
			Name: "web", Settings: fmt.Sprintf("estimator-target-violation: 0.0%d", c.version),
			Policy: &slacklinev1.ProfileRolloutPolicy{Waves: []float64{0.5, 1}, Soak: durationpb.New(time.Hour), MinEstimatesScored: 100,
				ShadowSoak: durationpb.New(0)}})); err != nil {
			t.Fatal(err)
		}
		for _, h := range rollout().GetHostnames() {
			report(h, c.report(h, c.version))
		}
		d.c.JudgeRollouts(ctx, start.Add(time.Second))
		if r := rollout(); r.GetCandidate().GetNumber() != c.version || r.GetState() != slacklinev1.ProfileRolloutState_PROFILE_ROLLOUT_STATE_ROLLED_BACK ||
			!strings.Contains(r.GetReason(), c.reason) {
			t.Errorf("version %d: %v because %q, want rolled back because %q", r.GetCandidate().GetNumber(), r.GetState(), r.GetReason(), c.reason)
		}
	}
}
